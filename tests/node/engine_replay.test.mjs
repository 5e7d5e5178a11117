// A multi-turn workload captured in front of llama.cpp's real llama-server and replayed to a
// fresh one: every replayed request carries what the server reported of its own work (cached
// prompt tokens, its timings), and the summary gives the server's cache hit rate.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import {
  LLMTAP, startProxy, stop, url, readLines, tempDir, cleanup, replay, run,
} from './proxy_helpers.mjs';
import { startLlamaServer } from './engine_helpers.mjs';

// Conversations sharing a long system prompt: the server reuses it across sessions and each
// session's history across its turns.
const SYSTEM = Array.from({ length: 120 }, (_, i) => `Rule ${i}: answer in one short line.`).join(' ');

test('replay to a fresh llama-server: server-reported cache hits per request and in the summary', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const first = await startLlamaServer();
  try {
    const proxy = await startProxy({
      upstream: first.url(),
      args: ['--capture', '--capture-path', capturePath, '--outcomes', '--session-headers', 'x-session-id'],
    });
    try {
      await Promise.all([0, 1, 2].map(async (s) => {
        const api = new OpenAI({
          baseURL: url(proxy, '/v1'), apiKey: 'none', maxRetries: 0, timeout: 120000,
          defaultHeaders: { 'x-session-id': `s${s}` },
        });
        const messages = [{ role: 'system', content: SYSTEM }];
        for (let t = 0; t < 3; ++t) {
          messages.push({ role: 'user', content: `Session ${s}, question ${t}.` });
          // Streamed without include_usage on odd turns: the counts come from the timings.
          const body = { model: first.model, messages, max_tokens: 6, temperature: 0 };
          let text = '';
          if (t % 2 === 1) {
            for await (const c of await api.chat.completions.create({ ...body, stream: true })) {
              text += c.choices[0]?.delta?.content ?? '';
            }
          } else {
            text = (await api.chat.completions.create(body)).choices[0].message.content;
          }
          messages.push({ role: 'assistant', content: text });
        }
      }));
    } finally {
      assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    }
  } finally {
    await first.stop();
  }
  const captured = readLines(`${capturePath}.outcomes.ndjson`);
  assert.equal(captured.length, 9);
  assert.ok(captured.every((o) => Number.isInteger(o.cached_tokens) && o.server !== null), JSON.stringify(captured[0]));

  // llmtap stats: the server's cache hit rate beside llmtap's own prefix-reuse estimate.
  const st = await run(LLMTAP, ['stats', capturePath, '--json']);
  assert.equal(st.code, 0, st.stderr);
  const sc = JSON.parse(st.stdout).server_cache;
  assert.equal(sc.requests, 9);
  assert.equal(sc.cached_tokens, captured.reduce((n, o) => n + o.cached_tokens, 0));
  assert.equal(sc.estimate, 'message_prefix_reuse.reused_char_share');
  assert.ok(sc.estimate_value > 0 && sc.hit_rate > 0, JSON.stringify(sc));
  assert.equal(sc.server_over_estimate, sc.hit_rate / sc.estimate_value);

  const fresh = await startLlamaServer();
  try {
    const out = join(dir, 'run');
    const r = await replay([capturePath, '--url', fresh.url(), '--out', out, '--server-metrics', 'off']);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    const lines = readLines(join(out, 'requests.jsonl'));
    assert.equal(lines.length, 9);
    for (const l of lines) {
      assert.equal(l.error, null, JSON.stringify(l));
      assert.ok(Number.isInteger(l.cached_tokens), JSON.stringify(l));
      assert.ok(l.cached_tokens <= l.input_tokens, JSON.stringify(l));
      assert.equal(l.server.cache_n, l.cached_tokens);
      assert.equal(l.input_tokens, l.server.prompt_n + l.server.cache_n);
      assert.equal(l.output_tokens, l.server.decode_n);
      assert.ok(['usage', 'timings'].includes(l.tokens_from));
    }
    assert.ok(lines.some((l) => l.tokens_from === 'timings'), 'streams without usage counted from timings');
    const summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
    const cache = summary.server.cache;
    assert.equal(cache.requests, 9);
    assert.equal(cache.cached_tokens, lines.reduce((n, l) => n + l.cached_tokens, 0));
    assert.equal(cache.prompt_tokens, lines.reduce((n, l) => n + l.input_tokens, 0));
    // Later turns and other sessions reuse the shared system prompt.
    assert.ok(cache.hit_rate > 0.5, JSON.stringify(cache));
    assert.equal(summary.server.spec, null);
    assert.match(r.stdout, /server cache: \d+\.\d% of prompt tokens reused/);
    // Beside it, what the capture's server reported for the same rows (the outcomes sidecar).
    const capturedCache = summary.captured_server.cache;
    assert.deepEqual(capturedCache, {
      requests: 9,
      prompt_tokens: captured.reduce((n, o) => n + o.prompt_tokens, 0),
      cached_tokens: captured.reduce((n, o) => n + o.cached_tokens, 0),
      hit_rate: captured.reduce((n, o) => n + o.cached_tokens, 0) / captured.reduce((n, o) => n + o.prompt_tokens, 0),
    });
    // report.html: the two side by side; compare: a row for each.
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    const table = html.match(/<table id="server-cache">(.*?)<\/table>/s)[1];
    assert.match(table, new RegExp(`<td>replay</td><td>9</td><td>${cache.prompt_tokens}</td><td>${cache.cached_tokens}</td>`));
    assert.match(table, new RegExp(`<td>capture</td><td>9</td><td>${capturedCache.prompt_tokens}</td><td>${capturedCache.cached_tokens}</td>`));
    const cmp = await run(LLMTAP, ['compare', out, out, '--json']);
    assert.equal(cmp.code, 0, cmp.stderr);
    const rows = Object.fromEntries(JSON.parse(cmp.stdout).rows.map((row) => [row.key, row]));
    assert.deepEqual(rows['/server/cache/hit_rate'].values, [cache.hit_rate, cache.hit_rate]);
    assert.deepEqual(rows['/captured_server/cache/hit_rate'].values, [capturedCache.hit_rate, capturedCache.hit_rate]);
    assert.match(r.stdout, /server cache in the capture: \d+\.\d% of prompt tokens reused \(\d+ of \d+, 9 requests reporting\)/);
  } finally {
    await fresh.stop();
    cleanup(dir);
  }
});
