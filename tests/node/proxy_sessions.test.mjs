// Session ids at capture, through real processes: the `openai` npm client talks to `llmtap proxy`
// (in front of `llmtap sim`) in multi-turn conversations, naming them by a header, by `user` in
// the body, by both, or not at all. Each captured row carries exactly the id its conversation
// was named by (header before body field), rows of unnamed conversations stay as they always
// were, the counters agree, and the ids never reach the proxy's log.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  startSim, startProxy, stop, url, curl, readLines, readManifest, checkAIPerfRows,
  validateWithLlmtap, tempDir, cleanup,
} from './proxy_helpers.mjs';

// The client's timeout is a guard against a hang only (a loaded machine only adds delay).
function client(server, defaultHeaders = {}) {
  return new OpenAI({
    baseURL: url(server, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 60000, defaultHeaders,
  });
}

// Runs a conversation of `turns` user turns, each sent with the whole conversation so far (the
// assistant's answers included), as a chat product or an agent does. Returns the bodies sent.
async function converse(api, { turns, system, extra = {}, requestOptions = {}, stream = false }) {
  const messages = [{ role: 'system', content: system }];
  const sent = [];
  for (let t = 0; t < turns; ++t) {
    messages.push({ role: 'user', content: `${system}: question ${t + 1}` });
    const body = { model: 'm', messages: structuredClone(messages), max_tokens: 5, ...extra };
    let answer = '';
    if (stream) {
      body.stream = true;
      for await (const chunk of await api.chat.completions.create(body, requestOptions)) {
        for (const c of chunk.choices) answer += c.delta?.content ?? '';
      }
    } else {
      const r = await api.chat.completions.create(body, requestOptions);
      answer = r.choices[0].message.content;
    }
    sent.push(body);
    messages.push({ role: 'assistant', content: answer });
  }
  return sent;
}

async function metric(server, name) {
  const text = await curl([url(server, '/llmtap/metrics')]);
  const m = text.match(new RegExp(`^${name} (\\d+)$`, 'm'));
  return m ? Number(m[1]) : undefined;
}

test('session ids: header first, then user, none when neither; rows without one unchanged', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startSim();
  let proxy;
  try {
    proxy = await startProxy({
      upstream: url(sim),
      args: ['--capture', '--capture-path', capturePath, '--session-headers', 'X-Session-Id,x-conversation-id',
        '--session-fields', 'user,metadata.session_id'],
    });
    const plain = client(proxy);
    const expected = [];  // [body, session id or undefined], in the order sent
    const add = (bodies, id) => { for (const b of bodies) expected.push([b, id]); };

    // A header on every request of the client (defaultHeaders).
    add(await converse(client(proxy, { 'X-Session-Id': 'conv-header-1' }),
      { turns: 3, system: 'travel agent' }), 'conv-header-1');
    // `user` in the body only, streamed.
    add(await converse(plain, { turns: 3, system: 'code helper', extra: { user: 'user-42' }, stream: true }),
      'user-42');
    // Neither: the rows stay exactly as without session settings.
    add(await converse(plain, { turns: 2, system: 'poet' }), undefined);
    // Both a header (per request, the second name) and `user`: the header wins.
    add(await converse(plain, {
      turns: 2, system: 'tutor', extra: { user: 'user-loses' },
      requestOptions: { headers: { 'x-conversation-id': 'conv-header-2' } },
    }), 'conv-header-2');
    // Ids with characters JSON must escape, in a header and (non-ASCII too) in the body.
    add(await converse(client(proxy, { 'x-session-id': 'sess "quoted" \\ 1' }),
      { turns: 2, system: 'critic' }), 'sess "quoted" \\ 1');
    add(await converse(plain, { turns: 2, system: 'linguist', extra: { user: 'usér "✓"' } }), 'usér "✓"');
    const withId = expected.filter(([, id]) => id !== undefined).length;

    // The writer is a little behind the responses: wait for every row.
    for (const end = Date.now() + 30000; Date.now() < end && (await metric(proxy, 'llmtap_capture_recorded_total')) < expected.length;) {
      await new Promise((r) => setTimeout(r, 25));
    }
    assert.equal(await metric(proxy, 'llmtap_capture_with_session_id_total'), withId);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });

    const text = readFileSync(capturePath, 'utf8');
    const lines = text.split('\n').filter((l) => l !== '');
    const rows = readLines(capturePath);
    assert.equal(rows.length, expected.length);
    for (let i = 0; i < rows.length; ++i) {
      const [body, id] = expected[i];
      assert.deepEqual(rows[i].payload, body, `row ${i} payload`);
      if (id === undefined) {
        assert.deepEqual(Object.keys(rows[i]), ['timestamp', 'payload'], `row ${i} has no session_id`);
        assert.ok(!lines[i].includes('"session_id"'), lines[i]);
      } else {
        assert.deepEqual(Object.keys(rows[i]), ['timestamp', 'payload', 'session_id'], `row ${i}`);
        assert.equal(rows[i].session_id, id, `row ${i} session_id`);
        // The writer's framing: the id follows the payload, the row starts as every row does.
        assert.match(lines[i], /^\{"timestamp":\d+,"payload":\{.*\},"session_id":".*"\}$/);
      }
    }
    checkAIPerfRows(rows, 'mooncake_payload');
    await validateWithLlmtap(capturePath);

    const manifest = readManifest(capturePath);
    assert.equal(manifest.counters.with_session_id, withId);
    assert.equal(manifest.counters.recorded, expected.length);
    assert.equal(manifest.config.session_headers, 'x-session-id,x-conversation-id');
    assert.equal(manifest.config.session_fields, 'user,metadata.session_id');
    for (const id of ['conv-header', 'user-42', 'quoted']) {
      assert.ok(!proxy.stderr.includes(id) && !proxy.stdout.includes(id), `"${id}" logged:\n${proxy.stderr}`);
    }
  } finally {
    if (proxy) await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

test('session ids: off by default, even with headers and user sent', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startSim();
  let proxy;
  try {
    proxy = await startProxy({ upstream: url(sim), args: ['--capture', '--capture-path', capturePath] });
    const sent = await converse(client(proxy, { 'x-session-id': 's' }),
      { turns: 2, system: 'plain', extra: { user: 'u' } });
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const rows = readLines(capturePath);
    assert.deepEqual(rows.map((r) => r.payload), sent);
    for (const r of rows) assert.deepEqual(Object.keys(r), ['timestamp', 'payload']);
    assert.equal(readManifest(capturePath).counters.with_session_id, 0);
  } finally {
    if (proxy) await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});
