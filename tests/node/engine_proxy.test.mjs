// llama.cpp's real llama-server behind `llmtap proxy` (capture, outcomes, every API), driven by
// the clients its users have: the `openai` SDK (chat, completions, Responses, embeddings), the
// `@anthropic-ai/sdk` (Messages) and plain HTTP (rerank). What the proxy records of each answer
// must be what the server itself reported in it: token counts, the prompt tokens it reused from
// its KV cache, its own timings and, with speculative decoding on, the tokens it drafted and
// accepted for that request.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startProxy, stop, url, readLines, tempDir, cleanup, checkAIPerfRows } from './proxy_helpers.mjs';
import { startLlamaServer } from './engine_helpers.mjs';

// A prompt long enough (about 1,500 tokens) that the reuse of the second identical request is
// unmistakable: llama-server re-evaluates only the last prompt token.
const LONG = Array.from({ length: 300 }, (_, i) => `Clause ${i}: the tenant keeps the premises tidy.`).join(' ');

let engine;
before(async () => { engine = await startLlamaServer(); });
after(async () => { await engine?.stop(); });

function client(proxy) {
  // The timeout is a guard against a hang only.
  return new OpenAI({ baseURL: url(proxy, '/v1'), apiKey: 'none', maxRetries: 0, timeout: 120000 });
}

async function withProxy(upstream, extra, body) {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const proxy = await startProxy({
    upstream,
    args: ['--capture', '--capture-path', capturePath, '--endpoint-pattern', '.*', ...extra],
  });
  try {
    await body(proxy);
  } finally {
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  }
  const rows = readLines(capturePath);
  const outcomes = readLines(`${capturePath}.outcomes.ndjson`);
  cleanup(dir);
  return { rows, outcomes };
}

// Collects a streamed openai response's chunks, and what the server reported in them.
async function streamChunks(iterable) {
  const chunks = [];
  for await (const c of iterable) chunks.push(c);
  const withTimings = chunks.filter((c) => c.timings);
  return { chunks, timings: withTimings.at(-1)?.timings, usage: chunks.find((c) => c.usage)?.usage };
}

test('chat and completions: usage, cached tokens and timings as the server reported them', async () => {
  const seen = [];
  const { rows, outcomes } = await withProxy(engine.url(), ['--outcomes'], async (proxy) => {
    const api = client(proxy);
    // Two identical long prompts: the second reuses all but one token of the first.
    for (let i = 0; i < 2; ++i) {
      const r = await api.chat.completions.create({
        model: engine.model, max_tokens: 8, temperature: 0,
        messages: [{ role: 'system', content: LONG }, { role: 'user', content: 'Summarise.' }],
      });
      seen.push({ usage: r.usage, timings: r.timings });
    }
    // Streamed without include_usage (what most clients send): no usage, timings on the finish
    // chunk.
    const s = await streamChunks(await api.chat.completions.create({
      model: engine.model, max_tokens: 6, temperature: 0, stream: true,
      messages: [{ role: 'user', content: 'Count to three.' }],
    }));
    assert.equal(s.usage, undefined);
    assert.ok(s.timings, 'llama-server sends timings on the finish chunk');
    seen.push({ usage: null, timings: s.timings });
    // Streamed with include_usage: usage and timings on the choices:[] chunk.
    const u = await streamChunks(await api.chat.completions.create({
      model: engine.model, max_tokens: 6, temperature: 0, stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'Count to four.' }],
    }));
    seen.push({ usage: u.usage, timings: u.timings });
    // Completions, streamed and not.
    const c = await api.completions.create({ model: engine.model, prompt: LONG, max_tokens: 5, temperature: 0 });
    seen.push({ usage: c.usage, timings: c.timings });
    const cs = await streamChunks(await api.completions.create({
      model: engine.model, prompt: LONG, max_tokens: 5, temperature: 0, stream: true,
    }));
    seen.push({ usage: cs.usage, timings: cs.timings });
  });
  assert.equal(rows.length, 6);
  checkAIPerfRows(rows.slice(0, 4), 'mooncake_payload');
  assert.equal(outcomes.length, 6);
  for (let i = 0; i < 6; ++i) {
    const o = outcomes[i];
    const { usage, timings } = seen[i];
    const what = `request ${i + 1}`;
    assert.equal(o.status, 200, what);
    // Token counts: from usage when the server sent it, else from its timings (marked).
    assert.equal(o.prompt_tokens, usage ? usage.prompt_tokens : timings.prompt_n + timings.cache_n, what);
    assert.equal(o.completion_tokens, usage ? usage.completion_tokens : timings.predicted_n, what);
    assert.equal(o.usage_source, usage ? 'usage' : 'timings', what);
    assert.equal(o.cached_tokens, usage ? usage.prompt_tokens_details.cached_tokens : timings.cache_n, what);
    assert.deepEqual(o.server, {
      prompt_n: timings.prompt_n, cache_n: timings.cache_n, prompt_ms: timings.prompt_ms,
      decode_n: timings.predicted_n, decode_ms: timings.predicted_ms,
    }, what);
    assert.equal(o.spec, null, `${what}: no speculative decoding on this server`);
  }
  // The second identical long prompt: the reuse the server reported.
  assert.ok(outcomes[1].cached_tokens >= outcomes[1].prompt_tokens - 1, JSON.stringify(outcomes[1]));
  assert.ok(outcomes[0].cached_tokens < outcomes[0].prompt_tokens / 2, JSON.stringify(outcomes[0]));
});

test('Responses and Messages: cached tokens from each API\'s own usage', async () => {
  const seen = [];
  const { outcomes } = await withProxy(engine.url(), ['--outcomes'], async (proxy) => {
    const api = client(proxy);
    for (const stream of [false, true]) {
      const params = { model: engine.model, input: `${LONG} (responses)`, max_output_tokens: 4, temperature: 0 };
      if (!stream) {
        seen.push((await api.responses.create(params)).usage);
      } else {
        let usage;
        for await (const e of await api.responses.create({ ...params, stream: true })) {
          if (e.type === 'response.completed') usage = e.response.usage;
        }
        seen.push(usage);
      }
    }
    const anthropic = new Anthropic({ baseURL: url(proxy), apiKey: 'none', maxRetries: 0, timeout: 120000 });
    for (const stream of [false, true]) {
      const params = {
        model: engine.model, max_tokens: 4, temperature: 0,
        system: `${LONG} (messages)`, messages: [{ role: 'user', content: 'Summarise.' }],
      };
      const m = stream ? await anthropic.messages.stream(params).finalMessage() : await anthropic.messages.create(params);
      seen.push(m.usage);
    }
  });
  assert.equal(outcomes.length, 4);
  for (let i = 0; i < 2; ++i) {
    assert.equal(outcomes[i].prompt_tokens, seen[i].input_tokens);
    assert.equal(outcomes[i].cached_tokens, seen[i].input_tokens_details.cached_tokens);
  }
  // Anthropic's input_tokens leaves out the tokens read from the cache: the outcome's prompt
  // tokens are all of them, as on every other API.
  for (let i = 2; i < 4; ++i) {
    assert.equal(outcomes[i].prompt_tokens, seen[i].input_tokens + seen[i].cache_read_input_tokens);
    assert.equal(outcomes[i].cached_tokens, seen[i].cache_read_input_tokens);
  }
  // The second of each pair reused the first's prompt.
  assert.ok(outcomes[1].cached_tokens >= outcomes[1].prompt_tokens - 1, JSON.stringify(outcomes[1]));
  assert.ok(outcomes[3].cached_tokens >= outcomes[3].prompt_tokens - 1, JSON.stringify(outcomes[3]));
});

// The bundle's cycle model with n-gram speculation: a prompt made of one of its cycles is copied,
// so drafts are proposed and accepted; each outcome carries that request's counts.
test('speculative decoding: each outcome has the drafted and accepted tokens of its response', async () => {
  const spec = await startLlamaServer({
    cycle: true,
    flags: ['--parallel', '1', '--spec-type', 'ngram-simple', '--spec-ngram-simple-size-n', '3',
      '--spec-ngram-simple-size-m', '8'],
  });
  try {
    const { readFileSync } = await import('node:fs');
    const { execFileSync } = await import('node:child_process');
    const work = execFileSync('bash', [join(import.meta.dirname, '..', 'engine', 'llamacpp.sh'), 'work']).toString().trim();
    const map = JSON.parse(readFileSync(join(work, 'model', 'tiny-llama-cycle.pi.json'), 'utf8'));
    const text = new Map();
    map.cycles.forEach((c, i) => c.forEach((t, j) => text.set(t, map.cycle_text[i][j])));
    const chain = (cycle, n) => Array.from({ length: n }, (_, i) => text.get(cycle[i % cycle.length])).join('');
    const cycle = map.cycles.find((c) => c.length === 50);
    const seen = [];
    const { outcomes } = await withProxy(spec.url(), ['--outcomes'], async (proxy) => {
      const api = client(proxy);
      for (const stream of [false, true]) {
        const params = { model: spec.model, prompt: chain(cycle, 66), max_tokens: 64, temperature: 0 };
        if (!stream) {
          seen.push((await api.completions.create(params)).timings);
        } else {
          seen.push((await streamChunks(await api.completions.create({ ...params, stream: true }))).timings);
        }
      }
      // A chat request whose history holds the chain: drafted from the prompt too.
      const s = await streamChunks(await api.chat.completions.create({
        model: spec.model, max_tokens: 48, temperature: 0, stream: true,
        messages: [{ role: 'user', content: 'Repeat.' }, { role: 'assistant', content: chain(cycle, 80) }],
      }));
      seen.push(s.timings);
    });
    assert.equal(outcomes.length, 3);
    for (let i = 0; i < 3; ++i) {
      const t = seen[i];
      assert.ok(t.draft_n > 0, `request ${i + 1} drafted: ${JSON.stringify(t)}`);
      assert.deepEqual(outcomes[i].spec, {
        engine: 'llamacpp', num_draft_tokens: t.draft_n, num_accepted_draft_tokens: t.draft_n_accepted,
        num_spec_steps: null, num_spec_tokens: null, acceptance_histogram: null,
      }, `request ${i + 1}`);
    }
  } finally {
    await spec.stop();
  }
});
