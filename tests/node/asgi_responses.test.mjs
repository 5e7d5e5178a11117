// capture_responses in the in-process middleware (llmtap.asgi.CaptureMiddleware around the
// FastAPI upstream, tests/python/asgi_app.py), with the real openai client: each outcome line's
// "response" is the text the client reassembled, byte for byte, as through `llmtap proxy`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { startAsgi, stop, readLines, readManifest, tempDir, cleanup } from './proxy_helpers.mjs';
import {
  messages, tools, openai, call, assertResponseIsWhatTheClientSaw, sendResponsesAndMessagesToFastApi, checkCaptured,
} from './responses_helpers.mjs';

test('middleware with capture_responses: tool calls, reasoning, escapes, chat and completions', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const asgi = await startAsgi({
    env: { NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: JSON.stringify({ path: capturePath, capture_responses: true, max_response_bytes: 200 }) },
    args: ['--lifespan', 'on'],
  });
  try {
    const sent = [
      ['chat', { model: 'vllm-like', messages, tools, stream: true }],
      ['chat', { model: 'vllm-like', messages, tools }],
      ['chat', { model: 'reasoning', messages, max_tokens: 2, stream: true }],
      ['completions', { model: 'vllm-like', prompt: 'x', max_tokens: 5 }],
      ['chat', { model: 'unicode', messages, max_tokens: 3, stream: true }],  // 22 bytes, \u escapes
      ['chat', { model: 'unicode', messages, max_tokens: 40 }],  // about 300 bytes: cut at 200
    ];
    const seen = [];
    for (const [kind, params] of sent) seen.push(await call(openai(asgi), kind, params));
    assert.deepEqual(await stop(asgi), { code: 0, signal: null }, asgi.stderr);
    assert.match(asgi.stderr, /capture_responses is on: .*sensitive data/);

    const rows = readLines(capturePath);
    assert.deepEqual(rows.map((r) => r.payload), sent.map((s) => s[1]));
    const outcomes = new Array(rows.length);
    for (const o of readLines(`${capturePath}.outcomes.ndjson`)) outcomes[o.line - 1] = o;
    for (let i = 0; i < 5; ++i) assertResponseIsWhatTheClientSaw(outcomes[i], seen[i], `request ${i}`);
    assert.deepEqual(seen[0].tool_calls.map((t) => t.name), ['get_weather', 'get_time']);
    const cut = outcomes[5].response;
    assert.equal(cut.truncated, true);
    // The longest prefix of whole characters within 200 bytes.
    let prefix = '';
    for (const ch of seen[5].text) {
      if (Buffer.byteLength(prefix + ch, 'utf8') > 200) break;
      prefix += ch;
    }
    assert.ok(Buffer.byteLength(seen[5].text, 'utf8') > 200);
    assert.equal(cut.text, prefix);
    assert.equal(readManifest(capturePath).counters.responses_truncated, 1);
  } finally {
    await stop(asgi);
    cleanup(dir);
  }
});

test('middleware with capture_responses: Responses and Messages (reasoning, escapes, tool calls) as the clients got them', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const asgi = await startAsgi({
    env: { NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: JSON.stringify({
      path: capturePath, capture_responses: true, endpoint_pattern: '^/v1/(responses|messages)$' }) },
  });
  try {
    const sent = await sendResponsesAndMessagesToFastApi(asgi);
    assert.deepEqual(await stop(asgi), { code: 0, signal: null }, asgi.stderr);
    checkCaptured(capturePath, sent);
  } finally {
    await stop(asgi);
    cleanup(dir);
  }
});
