// `llmtap proxy` response outcomes and rotation, as real processes on free loopback ports: the
// outcomes sidecar names each record's line and holds what the client saw (status, usage,
// finish_reason, cancel); rotated files are complete captures; SIGHUP starts a new file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  LLMTAP, startProcess, startSim, startUpstream, startProxy, stop, url, readLines, readManifest, checkAIPerfRows,
  validateWithLlmtap, tempDir, cleanup,
} from './proxy_helpers.mjs';

const messages = [{ role: 'user', content: 'Name three rivers in Europe.' }];

// The client's timeout is a guard against a hang only (a loaded machine only adds delay).
function openai(server) {
  return new OpenAI({ baseURL: url(server, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 60000 });
}

// Calls the API as the openai client does and returns what the client saw.
async function call(client, kind, params) {
  const api = kind === 'chat' ? client.chat.completions : client.completions;
  if (!params.stream) {
    const r = await api.create(params);
    return { usage: r.usage, finish: r.choices[0].finish_reason };
  }
  let usage = null;
  let finish = null;
  for await (const chunk of await api.create(params)) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
  }
  return { usage, finish };
}

// The outcome of each capture row, by the row's position: every line named exactly once.
function outcomesByRow(capturePath, rows) {
  const outcomes = readLines(`${capturePath}.outcomes.ndjson`);
  assert.equal(outcomes.length, rows.length, 'one outcome per recorded request');
  const byRow = new Array(rows.length);
  for (const o of outcomes) {
    assert.deepEqual(Object.keys(o), ['line', 'timestamp', 'status', 'ttft_ms', 'latency_ms',
      'prompt_tokens', 'completion_tokens', 'finish_reason', 'usage_source', 'cached_tokens',
      'server', 'spec', 'cancelled', 'error']);
    assert.ok(o.line >= 1 && o.line <= rows.length, `line ${o.line}`);
    assert.equal(byRow[o.line - 1], undefined, `line ${o.line} named twice`);
    assert.equal(o.timestamp, rows[o.line - 1].timestamp);
    byRow[o.line - 1] = o;
  }
  return byRow;
}

async function checkOutcomesAgainstClient(upstream, model) {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const proxy = await startProxy({ upstream: url(upstream), args: ['--capture', '--capture-path', capturePath, '--outcomes'] });
  try {
    const sent = [
      ['chat', { model, messages, max_tokens: 6 }],
      ['chat', { model, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } }],
      ['completions', { model, prompt: 'Once upon a time', max_tokens: 4 }],
      ['completions', { model, prompt: 'Once upon a time', max_tokens: 4, stream: true, stream_options: { include_usage: true } }],
      ['chat', { model, messages, max_tokens: 5, stream: true }],  // no usage in the stream
    ];
    const seen = [];
    for (const [kind, params] of sent) seen.push(await call(openai(proxy), kind, params));
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });

    const rows = readLines(capturePath);
    assert.deepEqual(rows.map((r) => r.payload), sent.map((s) => s[1]));
    checkAIPerfRows(rows, 'mooncake_payload');
    await validateWithLlmtap(capturePath);
    const byRow = outcomesByRow(capturePath, rows);
    for (let i = 0; i < sent.length; ++i) {
      const o = byRow[i];
      const s = seen[i];
      assert.equal(o.status, 200);
      assert.equal(o.cancelled, false);
      assert.equal(o.error, null);
      assert.ok(o.ttft_ms > 0 && o.ttft_ms <= o.latency_ms, `ttft ${o.ttft_ms} latency ${o.latency_ms}`);
      assert.equal(o.finish_reason, s.finish, `row ${i} finish_reason`);
      if (s.usage) {
        assert.equal(o.prompt_tokens, s.usage.prompt_tokens, `row ${i} prompt_tokens`);
        assert.equal(o.completion_tokens, s.usage.completion_tokens, `row ${i} completion_tokens`);
      } else {
        assert.equal(o.prompt_tokens, null);
        assert.equal(o.completion_tokens, null);
      }
    }
    const m = readManifest(capturePath);
    assert.equal(m.outcomes_path, `${capturePath}.outcomes.ndjson`);
    assert.equal(m.counters.outcomes_written, sent.length);
    assert.equal(m.counters.outcomes_lost, 0);
  } finally {
    await stop(proxy);
    cleanup(dir);
  }
}

test('outcomes (sim upstream): one line per record with the status, usage and finish_reason the client saw', async () => {
  const sim = await startSim();
  try {
    await checkOutcomesAgainstClient(sim, 'llmtap-sim');
  } finally {
    await stop(sim);
  }
});

test('outcomes (FastAPI upstream streaming as vLLM does): the same', async () => {
  const upstream = await startUpstream();
  try {
    await checkOutcomesAgainstClient(upstream, 'vllm-like');
  } finally {
    await stop(upstream);
  }
});

test('outcomes: a client that cancels mid-stream is marked cancelled', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startProcess(LLMTAP, ['sim', '--listen', '127.0.0.1:0', '--itl-ms', '20'], {
    pattern: /listening on http:\/\/127\.0\.0\.1:(\d+)/,
  });
  const proxy = await startProxy({
    upstream: url(sim),
    env: { NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: JSON.stringify({ path: capturePath, outcomes: true }) },
  });
  try {
    const controller = new AbortController();
    const t0 = performance.now();
    const r = await fetch(url(proxy, '/v1/chat/completions'), {
      method: 'POST',
      body: JSON.stringify({ messages, max_tokens: 500, stream: true }),
      signal: controller.signal,
    });
    const reader = r.body.getReader();
    await reader.read();  // the first chunk
    controller.abort();
    // Until the proxy counted the cancel (not a fixed pause that a loaded machine can outlast).
    for (const end = Date.now() + 30000; Date.now() < end;) {
      const m = await (await fetch(url(proxy, '/llmtap/metrics'))).text();
      if (/^llmtap_proxy_client_cancelled_total 1$/m.test(m)) break;
      await new Promise((res) => setTimeout(res, 20));
    }
    // The request's whole life at the proxy lies within what this side saw of it.
    const seen = performance.now() - t0;
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const rows = readLines(capturePath);
    assert.equal(rows.length, 1);
    const [o] = outcomesByRow(capturePath, rows);
    assert.equal(o.cancelled, true);
    assert.equal(o.status, 200);
    assert.equal(o.completion_tokens, null);
    // Ended at the cancel, not with the 10 s stream (500 tokens, 20 ms each).
    assert.ok(o.latency_ms <= seen + 1, `latency ${o.latency_ms} ms, the client saw ${seen.toFixed(1)} ms`);
  } finally {
    await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

// Capture files of the run in time order: rotated ones (named by their first record), then
// the current one.
function captureFiles(dir) {
  const rotated = readdirSync(dir)
    .filter((n) => /^requests\.\d{8}T\d{6}\.\d{3}Z(-\d+)?\.jsonl$/.test(n))
    .sort();
  return [...rotated, 'requests.jsonl'].map((n) => join(dir, n));
}

test('rotation by size and SIGHUP: every file a complete capture with its own manifest', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startSim();
  const proxy = await startProxy({
    upstream: url(sim),
    args: ['--capture', '--capture-path', capturePath, '--rotate-bytes', '600', '--outcomes'],
  });
  try {
    const sent = [];
    const send = async (i) => {
      const params = { model: 'm', messages: [{ role: 'user', content: `request ${i} ${'x'.repeat(150)}` }], max_tokens: 2 };
      await openai(proxy).chat.completions.create(params);
      sent.push(params);
    };
    for (let i = 0; i < 9; ++i) await send(i);
    // SIGHUP finishes the current file even though it is below rotate_bytes. First every record
    // is written, and with it every size rotation (the writer rotates before the record that
    // does not fit): one made after `before` is taken would look like SIGHUP's. The event is the
    // writer's count of written records, not a pause (a loaded machine outlasted 50 ms).
    for (const end = Date.now() + 30000; Date.now() < end;) {
      const m = await (await fetch(url(proxy, '/llmtap/metrics'))).text();
      if (/^llmtap_capture_recorded_total 9$/m.test(m)) break;
      await new Promise((res) => setTimeout(res, 20));
    }
    const before = captureFiles(dir).length;
    proxy.proc.kill('SIGHUP');
    for (const end = Date.now() + 30000; Date.now() < end && (captureFiles(dir).length === before || !/SIGHUP/.test(proxy.stdout));) {
      await new Promise((res) => setTimeout(res, 20));
    }
    assert.ok(captureFiles(dir).length > before, 'SIGHUP started a new file');
    assert.match(proxy.stdout, /SIGHUP/);
    for (let i = 9; i < 11; ++i) await send(i);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });

    const files = captureFiles(dir);
    assert.ok(files.length >= 4, `${files.length} files`);
    const all = [];
    files.forEach((f, k) => {
      const rows = readLines(f);
      assert.ok(rows.length >= 1, `${f} holds a record`);
      assert.equal(rows[0].timestamp, 0, `${f} counts from its own first record`);
      checkAIPerfRows(rows, 'mooncake_payload');
      const m = readManifest(f);
      assert.equal(m.capture_path, f);
      assert.equal(m.file.records, rows.length);
      assert.equal(m.file.sequence, k + 1);
      assert.equal(m.state, k + 1 < files.length ? 'rotated' : 'stopped');
      outcomesByRow(f, rows);  // each file's sidecar names its own lines
      all.push(...rows.map((r) => r.payload));
    });
    for (const f of files) await validateWithLlmtap(f);
    assert.deepEqual(all, sent);
    const m = readManifest(capturePath);
    assert.equal(m.counters.files_rotated, files.length - 1);
    assert.equal(m.counters.recorded, sent.length);
  } finally {
    await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});
