// `llmtap proxy` in front of `llmtap sim`, as real processes on free loopback ports: responses
// through the proxy equal direct ones (openai client and curl), the capture holds exactly the
// sent payloads, capture configuration end to end, failures and shutdown.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  startSim, startProxy, stop, url, curl, normalize, readLines, readManifest, checkAIPerfRows,
  validateWithLlmtap, tempDir, cleanup, chatLoad, closedPort, logged, metricsSettled,
} from './proxy_helpers.mjs';

const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Name three rivers in Europe.' },
];

// The client's timeout is a guard against a hang only (a loaded machine only adds delay).
function openai(server) {
  return new OpenAI({ baseURL: url(server, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 60000 });
}

function captureEnv(args) {
  return { NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: JSON.stringify(args) };
}

// Each side gets its own sim with the same seed, so that both see the same request sequence
// (the sims' prefix caches stay identical and so do the usage fields).
test('openai client: chat and completions, streaming and not, equal direct; capture = payloads', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const direct = await startSim();
  const behind = await startSim();
  const proxy = await startProxy({ upstream: url(behind), env: captureEnv({ path: capturePath }) });
  try {
    const a = openai(direct);
    const b = openai(proxy);
    const requests = [
      ['chat', { model: 'm', messages, max_tokens: 7 }],
      ['chat', { model: 'm', messages, max_tokens: 9, stream: true, stream_options: { include_usage: true } }],
      ['chat', { model: 'm', messages: [{ role: 'user', content: 'é ✓ "quoted" \\ \n' }], stream: true }],
      ['completions', { model: 'm', prompt: 'Once upon a time', max_tokens: 5 }],
      ['completions', { model: 'm', prompt: 'Once upon a time', max_tokens: 6, stream: true }],
    ];
    for (const [kind, params] of requests) {
      const call = (c) => (kind === 'chat' ? c.chat.completions.create(params) : c.completions.create(params)).asResponse();
      const ra = await call(a);
      const rb = await call(b);
      assert.equal(rb.status, ra.status);
      for (const h of ['content-type', 'cache-control', 'x-accel-buffering']) {
        assert.equal(rb.headers.get(h), ra.headers.get(h), h);
      }
      assert.equal(normalize(await rb.text()), normalize(await ra.text()), JSON.stringify(params));
    }
    // The client's own parsing through the proxy.
    const stream = await b.chat.completions.create({ model: 'm', messages, max_tokens: 4, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.ok(text.length > 0);
    requests.push(['chat', { model: 'm', messages, max_tokens: 4, stream: true }]);

    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const rows = readLines(capturePath);
    assert.equal(rows.length, requests.length);
    rows.forEach((row, i) => assert.deepEqual(row.payload, requests[i][1]));
    checkAIPerfRows(rows, 'mooncake_payload');
    await validateWithLlmtap(capturePath);
    const m = readManifest(capturePath);
    assert.equal(m.counters.recorded, requests.length);
  } finally {
    await stop(proxy);
    await stop(direct);
    await stop(behind);
    cleanup(dir);
  }
});

async function curlFull(args) {
  // -i: status line and headers, then the body.
  let out = await curl(['-i', '--raw', ...args]);
  // Skip interim responses (100 Continue).
  while (/^HTTP\/1\.1 1\d\d /.test(out)) out = out.slice(out.indexOf('\r\n\r\n') + 4);
  const split = out.indexOf('\r\n\r\n');
  const head = out.slice(0, split).split('\r\n');
  const headers = {};
  for (const line of head.slice(1)) {
    const c = line.indexOf(':');
    headers[line.slice(0, c).toLowerCase()] = line.slice(c + 1).trim();
  }
  let body = out.slice(split + 4);
  // Chunk boundaries are hop-by-hop: the proxy relays each upstream read as it arrives, so
  // its chunks need not line up with the upstream's. Compare the decoded bodies.
  if (headers['transfer-encoding'] === 'chunked') body = dechunk(body);
  return { status: Number(head[0].split(' ')[1]), headers, body };
}

function dechunk(text) {
  const raw = Buffer.from(text, 'utf8');
  const parts = [];
  let pos = 0;
  for (;;) {
    const eol = raw.indexOf('\r\n', pos);
    assert.ok(eol >= 0, 'chunk size line');
    const size = parseInt(raw.subarray(pos, eol).toString('latin1'), 16);
    assert.ok(Number.isInteger(size), 'chunk size');
    if (size === 0) return Buffer.concat(parts).toString('utf8');
    parts.push(raw.subarray(eol + 2, eol + 2 + size));
    pos = eol + 2 + size + 2;
  }
}

test('curl: same status, headers and bytes as direct, every method and path', async () => {
  const direct = await startSim();
  const behind = await startSim();
  const proxy = await startProxy({ upstream: url(behind) });
  const dir = tempDir();
  try {
    const big = join(dir, 'big.json');
    writeFileSync(big, JSON.stringify({ prompt: 'x'.repeat(1500000), max_tokens: 2 }));
    const cases = [
      ['-H', 'Content-Type: application/json', '-d', JSON.stringify({ messages, max_tokens: 5 }), '/v1/chat/completions'],
      ['-N', '-d', JSON.stringify({ messages, max_tokens: 5, stream: true }), '/v1/chat/completions?x=1'],
      ['-H', 'Transfer-Encoding: chunked', '-d', JSON.stringify({ prompt: 'p', max_tokens: 3 }), '/v1/completions'],
      // curl sends Expect: 100-continue for a body this large.
      ['--expect100-timeout', '0.2', '-d', `@${big}`, '/v1/completions'],
      ['-d', '{"messages": "not a list"}', '/v1/chat/completions'],
      ['/v1/models'],
      ['/health'],
      ['-X', 'DELETE', '/v1/models'],
      ['/no/such/path?q=1'],
    ];
    for (const c of cases) {
      const path = c.at(-1);
      const args = c.slice(0, -1);
      const d = await curlFull([...args, url(direct, path)]);
      const p = await curlFull([...args, url(proxy, path)]);
      assert.equal(p.status, d.status, path);
      for (const h of ['content-type', 'cache-control', 'transfer-encoding', 'content-length']) {
        assert.equal(p.headers[h], d.headers[h], `${h} of ${path}`);
      }
      // /v1/models shows the server's start time: equal up to "created".
      assert.equal(normalize(p.body), normalize(d.body), path);
    }
  } finally {
    await stop(proxy);
    await stop(direct);
    await stop(behind);
    cleanup(dir);
  }
});

test('capture off by default, or with invalid NIM_CAPTURE_ARGS: no file', async () => {
  const dir = tempDir();
  const sim = await startSim();
  try {
    for (const env of [
      { NIM_CAPTURE_ARGS: JSON.stringify({ path: join(dir, 'a', 'r.jsonl') }) },
      { NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: `{"path": "${join(dir, 'b', 'r.jsonl')}"` },
      { NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: `["${join(dir, 'c', 'r.jsonl')}"]` },
      { NIM_CAPTURE_ENABLE: 'yes', NIM_CAPTURE_ARGS: JSON.stringify({ path: join(dir, 'd', 'r.jsonl') }) },
    ]) {
      const proxy = await startProxy({ upstream: url(sim), env });
      const body = JSON.stringify({ messages, max_tokens: 2 });
      assert.match(await curl(['-d', body, url(proxy, '/v1/chat/completions')]), /chat\.completion/);
      assert.deepEqual(await stop(proxy), { code: 0, signal: null });
      if (env.NIM_CAPTURE_ENABLE === '1') assert.match(proxy.stderr, /error/i);
      assert.match(proxy.stdout, /capture off/);
    }
    for (const sub of ['a', 'b', 'c', 'd']) assert.ok(!existsSync(join(dir, sub)), sub);
  } finally {
    await stop(sim);
    cleanup(dir);
  }
});

// A chat body of exactly `size` bytes.
function chatOfSize(size) {
  const base = JSON.stringify({ messages: [{ role: 'user', content: '' }], max_tokens: 1 });
  return JSON.stringify({ messages: [{ role: 'user', content: 'y'.repeat(size - base.length) }], max_tokens: 1 });
}

test('endpoint_pattern, max_request_bytes at 1 MiB +-1, invalid bodies, raw_payload', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startSim();
  const proxy = await startProxy({
    upstream: url(sim),
    env: captureEnv({ path: capturePath, format: 'raw_payload', endpoint_pattern: '^/v1/chat/completions$' }),
  });
  try {
    const post = async (path, body) => {
      const r = await fetch(url(proxy, path), { method: 'POST', body, headers: { 'content-type': 'application/json' } });
      await r.text();
      return r.status;
    };
    const chat = JSON.stringify({ messages, max_tokens: 2 });
    assert.equal(await post('/v1/chat/completions', chat), 200);
    assert.equal(await post('/v1/completions', JSON.stringify({ prompt: 'p', max_tokens: 2 })), 200);
    const sizes = [1048575, 1048576, 1048577];
    for (const s of sizes) {
      assert.equal(chatOfSize(s).length, s);
      assert.equal(await post('/v1/chat/completions', chatOfSize(s)), 200);
    }
    // Invalid bodies are forwarded as they are (the server answers them) and not recorded.
    assert.equal(await post('/v1/chat/completions', 'not json'), 400);
    assert.equal(await post('/v1/chat/completions', '[1,2]'), 400);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const rows = readLines(capturePath);
    assert.equal(rows.length, 3);
    assert.deepEqual(rows[0], JSON.parse(chat));
    assert.deepEqual(rows[1], JSON.parse(chatOfSize(1048575)));
    assert.deepEqual(rows[2], JSON.parse(chatOfSize(1048576)));
    checkAIPerfRows(rows, 'raw_payload');
    await validateWithLlmtap(capturePath);
    const c = readManifest(capturePath).counters;
    assert.equal(c.offered, 7);
    assert.equal(c.matched, 6);
    assert.equal(c.recorded, 3);
    assert.equal(c.skipped_too_large, 1);
    assert.equal(c.invalid_body, 2);
  } finally {
    await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

test('sample_rate is honoured (statistically), flags override the environment', async () => {
  const dir = tempDir();
  const envPath = join(dir, 'env', 'requests.jsonl');
  const flagPath = join(dir, 'flag', 'requests.jsonl');
  const sim = await startSim();
  const proxy = await startProxy({
    upstream: url(sim),
    env: captureEnv({ path: envPath, sample_rate: 1 }),
    args: ['--capture-path', flagPath, '--sample-rate', '0.3'],
  });
  try {
    const n = 400;
    const body = JSON.stringify({ prompt: 'p', max_tokens: 1 });
    for (let i = 0; i < n; i += 20) {
      await Promise.all(Array.from({ length: 20 }, async () => {
        const r = await fetch(url(proxy, '/v1/completions'), { method: 'POST', body });
        assert.equal(r.status, 200);
        await r.text();
      }));
    }
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    assert.ok(!existsSync(envPath));
    const rows = readLines(flagPath);
    // Binomial(400, 0.3): mean 120, sd 9.2; +-6 sd fails once in ~10^9 runs.
    assert.ok(rows.length >= 65 && rows.length <= 175, `${rows.length} recorded`);
    const c = readManifest(flagPath).counters;
    assert.equal(c.recorded + c.sampled_out, n);
    assert.equal(readManifest(flagPath).config.sample_rate, 0.3);
  } finally {
    await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

test('--no-capture wins over NIM_CAPTURE_ENABLE=1', async () => {
  const dir = tempDir();
  const sim = await startSim();
  const proxy = await startProxy({
    upstream: url(sim), env: captureEnv({ path: join(dir, 'x', 'r.jsonl') }), args: ['--no-capture'],
  });
  try {
    await curl(['-d', JSON.stringify({ prompt: 'p', max_tokens: 1 }), url(proxy, '/v1/completions')]);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    assert.ok(!existsSync(join(dir, 'x')));
  } finally {
    await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

test('unwritable capture path: a warning, serving unaffected', async () => {
  const dir = tempDir();
  writeFileSync(join(dir, 'afile'), 'x');
  const sim = await startSim();
  const proxy = await startProxy({ upstream: url(sim), env: captureEnv({ path: join(dir, 'afile', 'r.jsonl') }) });
  try {
    for (let i = 0; i < 3; i++) {
      const out = await curl(['-d', JSON.stringify({ messages, max_tokens: 2 }), url(proxy, '/v1/chat/completions')]);
      assert.equal(JSON.parse(out).object, 'chat.completion');
    }
    // The capture's start warns from its own thread: waited for, not read at an instant.
    await logged(proxy, /warn/i);
    // Counted as each request arrived, before it went upstream: exact at once.
    const metrics = await curl([url(proxy, '/llmtap/metrics')]);
    assert.match(metrics, /llmtap_capture_matched_total 3\n/);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  } finally {
    await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

test('upstream down: 502 with an OpenAI-style error; metrics count it', async () => {
  // A port nothing listens on, held so for the test (a port freed by a stopped server could be
  // bound again meanwhile, by another test or by this proxy's own listener).
  const proxy = await startProxy({ upstream: `http://127.0.0.1:${await closedPort()}` });
  try {
    const r = await curlFull(['-d', JSON.stringify({ messages }), url(proxy, '/v1/chat/completions')]);
    assert.equal(r.status, 502);
    const e = JSON.parse(r.body).error;
    assert.equal(e.type, 'upstream_error');
    assert.equal(e.code, 'upstream_unavailable');
    assert.equal(e.param, null);
    // The request is counted once its answer went out, so possibly after the client read it.
    const metrics = await metricsSettled(proxy);
    assert.match(metrics, /llmtap_proxy_upstream_errors_total\{kind="connect"\} 1\n/);
    assert.match(metrics, /llmtap_proxy_requests_total\{class="5xx"\} 1\n/);
    assert.match(metrics, /llmtap_build_info\{version="[^"]+"\} 1\n/);
  } finally {
    await stop(proxy);
  }
});

test('SIGTERM under load loses no accepted record', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startSim();
  const proxy = await startProxy({ upstream: url(sim), env: captureEnv({ path: capturePath }), args: ['--grace', '5'] });
  let load = null;
  try {
    load = chatLoad(proxy, 16);
    const { answered } = load;
    // Under load: 400 ms in, and not before more than 20 requests were answered (the check
    // below). A TSan proxy and sim on a loaded machine may not have answered that many in 400 ms.
    await new Promise((r) => setTimeout(r, 400));
    for (let i = 0; i < 600 && answered.size <= 20; ++i) await new Promise((r) => setTimeout(r, 50));
    const exited = stop(proxy);
    await load.finish();
    assert.deepEqual(await exited, { code: 0, signal: null });
    const rows = readLines(capturePath);
    const recorded = new Set(rows.map((r) => Number(r.payload.messages[0].content.split(' ')[1])));
    assert.ok(answered.size > 20, `${answered.size} answered`);
    for (const i of answered) assert.ok(recorded.has(i), `request ${i} answered but not recorded`);
    const c = readManifest(capturePath).counters;
    assert.equal(c.recorded, rows.length);
    assert.equal(c.offered, c.recorded + c.skipped_too_large + c.sampled_out + c.invalid_body + c.non_standard_json +
      c.dropped_queue_full + c.write_failed_records + c.queued_records);
    assert.equal(c.queued_records, 0);
    checkAIPerfRows(rows, 'mooncake_payload');
  } finally {
    await load?.finish();
    await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

test('without --upstream the built-in simulator is the upstream', async () => {
  const proxy = await startProxy();
  try {
    assert.match(proxy.stdout, /built-in simulator \(llmtap sim, model llmtap-sim\)/);
    const r = await openai(proxy).chat.completions.create(
      { model: 'llmtap-sim', messages, max_tokens: 3 });
    assert.equal(r.usage.completion_tokens, 3);
    // It serves its model name only, as vLLM would: the 404 reaches the client unchanged.
    await assert.rejects(
      openai(proxy).chat.completions.create({ model: 'm', messages, max_tokens: 3 }),
      (e) => e instanceof OpenAI.NotFoundError && e.message === '404 The model `m` does not exist.');
  } finally {
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  }
});
