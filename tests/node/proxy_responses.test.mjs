// `llmtap proxy --capture-responses` with the real openai client, as real processes on free
// loopback ports: each outcome line's "response" holds, byte for byte, the text the client
// reassembled (chat content and completions text, streamed and not; reasoning; tool calls whose
// arguments were streamed in fragments), only choice 0's, cut at --max-response-bytes with the
// cut counted; without the flag the member is absent.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  startSim, startUpstream, startProxy, stop, url, readLines, readManifest, tempDir, cleanup, metricsWhen,
} from './proxy_helpers.mjs';
import { messages, tools, openai, call, assertResponseIsWhatTheClientSaw } from './responses_helpers.mjs';

// Sends each [kind, params] through a proxy with `args` in front of `upstream`; returns what the
// client saw and the outcome line of each request (by the capture row it names), and the manifest.
async function throughProxy(upstream, args, sent) {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const proxy = await startProxy({ upstream: url(upstream), args: ['--capture', '--capture-path', capturePath, ...args] });
  try {
    const seen = [];
    for (const [kind, params] of sent) seen.push(await call(openai(proxy), kind, params));
    // A cut response is counted as its request ends, which may come after the client read the
    // answer; the writer counts the outcome line after that: waited for.
    const metrics = await metricsWhen(proxy, (t) => Number(t.match(/^llmtap_capture_outcomes_written_total (\d+)$/m)?.[1]) >= sent.length);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const rows = readLines(capturePath);
    assert.deepEqual(rows.map((r) => r.payload), sent.map((s) => s[1]));
    const outcomes = new Array(rows.length);
    for (const o of readLines(`${capturePath}.outcomes.ndjson`)) outcomes[o.line - 1] = o;
    return { seen, outcomes, metrics, manifest: readManifest(capturePath), stderr: proxy.stderr };
  } finally {
    await stop(proxy);
    cleanup(dir);
  }
}

test('capture-responses (sim upstream): chat and completions, streamed and not, as the client reassembled them', async () => {
  const sim = await startSim();
  try {
    const model = 'llmtap-sim';
    const sent = [
      ['chat', { model, messages, max_tokens: 20 }],
      ['chat', { model, messages, max_tokens: 20, stream: true, stream_options: { include_usage: true } }],
      ['completions', { model, prompt: 'Once upon a time', max_tokens: 20 }],
      ['completions', { model, prompt: 'Once upon a time', max_tokens: 20, stream: true }],
    ];
    const { seen, outcomes, metrics, manifest, stderr } = await throughProxy(sim, ['--capture-responses'], sent);
    for (let i = 0; i < sent.length; ++i) {
      assert.ok(seen[i].text.length > 0, `request ${i} got text`);
      assertResponseIsWhatTheClientSaw(outcomes[i], seen[i], `request ${i}`);
    }
    assert.match(stderr, /capture_responses is on: .*sensitive data/);
    assert.match(metrics, /^llmtap_capture_responses_truncated_total 0$/m);
    assert.equal(manifest.config.capture_responses, true);
    assert.equal(manifest.config.outcomes, true, '--capture-responses implies outcomes');
    assert.equal(manifest.counters.responses_truncated, 0);
  } finally {
    await stop(sim);
  }
});

test('capture-responses (FastAPI upstream as vLLM): tool calls in interleaved fragments, reasoning, escapes', async () => {
  const upstream = await startUpstream();
  try {
    const sent = [
      ['chat', { model: 'vllm-like', messages, tools, stream: true }],
      ['chat', { model: 'vllm-like', messages, tools }],
      ['chat', { model: 'reasoning', messages, max_tokens: 6, stream: true }],
      ['chat', { model: 'reasoning', messages, max_tokens: 6 }],
      ['chat', { model: 'unicode', messages, max_tokens: 14, stream: true }],  // \u escapes, a surrogate pair
      ['chat', { model: 'unicode', messages, max_tokens: 14 }],  // raw UTF-8
      ['completions', { model: 'unicode', prompt: 'x', max_tokens: 14, stream: true }],
      ['completions', { model: 'unicode', prompt: 'x', max_tokens: 14 }],
    ];
    const { seen, outcomes } = await throughProxy(upstream, ['--capture-responses'], sent);
    for (let i = 0; i < sent.length; ++i) assertResponseIsWhatTheClientSaw(outcomes[i], seen[i], `request ${i}`);
    for (const i of [0, 1]) {
      assert.deepEqual(seen[i].tool_calls.map((t) => t.name), ['get_weather', 'get_time']);
      assert.equal(JSON.parse(seen[i].tool_calls[1].arguments).note, 'say "hi" 😀');
    }
    assert.equal(seen[2].reasoning, 'Let me think é step by step.');
    assert.ok(seen[4].text.includes('😀') && seen[4].text.includes('\n'));
  } finally {
    await stop(upstream);
  }
});

test('capture-responses: --max-response-bytes cuts at a character boundary and counts the cut; off: no response member', async () => {
  const upstream = await startUpstream();
  try {
    const sent = [
      ['chat', { model: 'unicode', messages, max_tokens: 14, stream: true }],
      ['chat', { model: 'unicode', messages, max_tokens: 1 }],  // " café": 6 bytes, fits
    ];
    // " café \"quoted\" back\\slash\nnew line 😀": 36 bytes before 😀, so 39 cuts inside it.
    const { seen, outcomes, metrics, manifest } = await throughProxy(
      upstream, ['--capture-responses', '--max-response-bytes', '39'], sent);
    const cut = outcomes[0].response;
    assert.equal(cut.truncated, true);
    const bytes = Buffer.from(cut.text, 'utf8');
    assert.equal(bytes.length, 36);
    assert.ok(Buffer.from(seen[0].text, 'utf8').subarray(0, 36).equals(bytes), 'a prefix of what the client got');
    assertResponseIsWhatTheClientSaw(outcomes[1], seen[1], 'short response');
    assert.match(metrics, /^llmtap_capture_responses_truncated_total 1$/m);
    assert.equal(manifest.counters.responses_truncated, 1);

    const off = await throughProxy(upstream, ['--outcomes'], sent);
    for (const o of off.outcomes) assert.equal('response' in o, false);
    assert.equal(off.manifest.config.capture_responses, false);
  } finally {
    await stop(upstream);
  }
});
