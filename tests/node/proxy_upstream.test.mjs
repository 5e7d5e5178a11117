// `llmtap proxy` in front of a FastAPI + uvicorn upstream (tests/upstream/app.py) that streams
// SSE as vLLM does: responses equal direct ones, headers as the upstream sees them, client
// cancel, slow upstream.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  startUpstream, startProxy, stop, url, curl, readLines, checkAIPerfRows, validateWithLlmtap,
  tempDir, cleanup, metricsSettled,
} from './proxy_helpers.mjs';

const messages = [{ role: 'user', content: 'Tell me about rivers.' }];

async function stats(upstream) {
  return (await fetch(url(upstream, '/stats'))).json();
}

test('fastapi upstream: openai client and curl, streaming and not, byte-equal; capture = payloads', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const upstream = await startUpstream();
  const proxy = await startProxy({
    upstream: url(upstream),
    env: { NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: JSON.stringify({ path: capturePath }) },
  });
  try {
    // The client's timeout is a guard against a hang only.
    const client = (s) => new OpenAI({ baseURL: url(s, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 60000 });
    const sent = [
      ['chat', { model: 'vllm-like', messages, max_tokens: 6 }],
      ['chat', { model: 'vllm-like', messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } }],
      ['completions', { model: 'vllm-like', prompt: 'Once', max_tokens: 4 }],
      ['completions', { model: 'vllm-like', prompt: 'Once', max_tokens: 4, stream: true }],
    ];
    for (const [kind, params] of sent) {
      const call = (c) => (kind === 'chat' ? c.chat.completions.create(params) : c.completions.create(params)).asResponse();
      const d = await call(client(upstream));
      const p = await call(client(proxy));
      assert.equal(p.status, d.status);
      for (const h of ['content-type', 'cache-control', 'x-upstream', 'content-length']) {
        assert.equal(p.headers.get(h), d.headers.get(h), h);
      }
      assert.equal(await p.text(), await d.text());
    }
    // The openai client's own stream parsing through the proxy.
    const stream = await client(proxy).chat.completions.create({ model: 'vllm-like', messages, max_tokens: 5, stream: true });
    let n = 0;
    for await (const chunk of stream) n += chunk.choices.length;
    assert.equal(n, 5);
    sent.push(['chat', { model: 'vllm-like', messages, max_tokens: 5, stream: true }]);
    // curl, streaming: same bytes.
    const body = JSON.stringify({ model: 'x', messages, max_tokens: 3, stream: true });
    assert.equal(
      await curl(['-N', '-d', body, url(proxy, '/v1/chat/completions')]),
      await curl(['-N', '-d', body, url(upstream, '/v1/chat/completions')]));
    sent.push(['chat', JSON.parse(body)]);

    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const rows = readLines(capturePath);
    assert.deepEqual(rows.map((r) => r.payload), sent.map((s) => s[1]));
    checkAIPerfRows(rows, 'mooncake_payload');
    await validateWithLlmtap(capturePath);
  } finally {
    await stop(proxy);
    await stop(upstream);
    cleanup(dir);
  }
});

test('the upstream sees end-to-end headers, its own Host, no hop-by-hop headers', async () => {
  const upstream = await startUpstream();
  const proxy = await startProxy({ upstream: url(upstream) });
  try {
    await curl([
      '-H', 'Authorization: Bearer sk-live-secret', '-H', 'X-Request-Id: abc',
      '-H', 'Connection: keep-alive, X-Drop-Me', '-H', 'X-Drop-Me: 1', '-H', 'TE: trailers',
      '-H', 'Proxy-Authorization: Basic Zm9v', '-H', 'Keep-Alive: timeout=5',
      '-d', JSON.stringify({ messages, max_tokens: 1 }),
      url(proxy, '/v1/chat/completions?api-version=2024-01-01'),
    ]);
    const s = await stats(upstream);
    const r = s.requests.find((q) => q.path === '/v1/chat/completions');
    assert.equal(r.query, 'api-version=2024-01-01');
    const h = Object.fromEntries(r.headers);
    assert.equal(h.host, `127.0.0.1:${upstream.port}`);
    assert.equal(h.authorization, 'Bearer sk-live-secret');
    assert.equal(h['x-request-id'], 'abc');
    for (const gone of ['x-drop-me', 'te', 'proxy-authorization', 'keep-alive', 'connection', 'expect']) {
      assert.ok(!(gone in h), `${gone} forwarded`);
    }
    // Authorization never appears in the proxy's logs.
    assert.ok(!proxy.stderr.includes('sk-live-secret') && !proxy.stdout.includes('sk-live-secret'));
  } finally {
    await stop(proxy);
    await stop(upstream);
  }
});

// The upstream's stream cannot end by itself ("lockstep-stream": after its first event it waits
// for a release that never comes), and the proxy's read deadline is 300 s: the upstream sees its
// client go within the 30 s guard only because the proxy closed the upstream request on the
// client's cancel, at once, however loaded the machine.
test('a client cancel mid-stream closes the upstream request at once', async () => {
  const upstream = await startUpstream();
  const proxy = await startProxy({ upstream: url(upstream) });
  try {
    const controller = new AbortController();
    const r = await fetch(url(proxy, '/v1/chat/completions'), {
      method: 'POST',
      body: JSON.stringify({ model: 'lockstep-stream', messages, stream: true }),
      signal: controller.signal,
    });
    const reader = r.body.getReader();
    await reader.read();  // the first event arrived: the upstream is generating
    const cancelled = process.hrtime.bigint();  // CLOCK_MONOTONIC, as Python's monotonic_ns
    controller.abort();
    let s;
    for (const end = Date.now() + 30000; Date.now() < end;) {
      s = await stats(upstream);
      if (s.disconnects.length) break;
      await new Promise((res) => setTimeout(res, 10));
    }
    assert.equal(s.disconnects.length, 1, 'the upstream saw the disconnect');
    const ms = Number(BigInt(s.disconnects[0]) - cancelled) / 1e6;
    console.log(`# upstream request closed ${ms.toFixed(1)} ms after the cancel`);
    // The proxy closes the upstream request before it counts the cancel: waited for.
    const metrics = await metricsSettled(proxy);
    assert.match(metrics, /llmtap_proxy_client_cancelled_total 1\n/);
  } finally {
    await stop(proxy);
    await stop(upstream);
  }
});

test('slow upstream: 504 after the read deadline', async () => {
  const upstream = await startUpstream();
  const proxy = await startProxy({ upstream: url(upstream), args: ['--read-timeout-s', '0.3'] });
  try {
    const t0 = Date.now();
    const r = await fetch(url(proxy, '/v1/chat/completions'), {
      method: 'POST', body: JSON.stringify({ model: 'slow-headers', messages }),
    });
    const elapsed = Date.now() - t0;
    // The proxy's own 504 (the upstream would have answered 200 after 5 s), not before the
    // 0.3 s deadline (this side's clock started first). How late it came is not bounded: the
    // status says the deadline ended it, and a loaded machine only adds delay.
    assert.equal(r.status, 504);
    const e = (await r.json()).error;
    assert.equal(e.type, 'upstream_error');
    assert.equal(e.code, 'upstream_timeout');
    assert.ok(elapsed >= 290, `${elapsed} ms`);
  } finally {
    await stop(proxy);
    // uvicorn would wait for the sleeping handler on SIGTERM.
    await stop(upstream, 'SIGKILL');
  }
});
