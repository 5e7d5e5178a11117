// `llmtap sim --server-report llamacpp|vllm` behind `llmtap proxy --capture --outcomes`, then
// replayed to the sim: what the outcome lines and the replay records hold of the server's report
// (cached_tokens, `server` timings, `spec`) is exactly what each response carried, streamed or
// not, in either engine's shape; the replay summary's server.spec is the sum over its requests.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import {
  startSim, startProxy, stop, url, readLines, tempDir, cleanup, replay,
} from './proxy_helpers.mjs';

// A prompt that repeats itself (a file pasted twice, as code editing sends): the sim copies from
// it, so its n-gram drafts are accepted.
const FILE = Array.from({ length: 12 }, (_, i) =>
  `  for (const Item& item : items) { if (item.count <= 0) continue; total${i % 3} += item.price; }`).join('\n');
const CODE = `${FILE}\n${FILE}\nRename total to sum.`;
const K = 3;

// The requests: every API the shapes touch, streamed and not, with and without include_usage.
function requests() {
  const chat = { messages: [{ role: 'user', content: CODE }], max_tokens: 40 };
  const compl = { prompt: CODE, max_tokens: 40 };
  return [
    ['/v1/chat/completions', chat],
    ['/v1/chat/completions', { ...chat, stream: true }],
    ['/v1/chat/completions', { ...chat, stream: true, stream_options: { include_usage: true } }],
    ['/v1/completions', compl],
    ['/v1/completions', { ...compl, stream: true }],
    ['/v1/completions', { ...compl, stream: true, stream_options: { include_usage: true } }],
    ['/v1/chat/completions', { ...chat, n: 2 }],
    ['/v1/responses', { input: CODE, max_output_tokens: 30, stream: true }],
    ['/v1/responses', { input: CODE, max_output_tokens: 30 }],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi.' }], max_tokens: 3 }],
  ].map(([path, body]) => [path, { model: 'llmtap-sim', ...body }]);
}

// The JSON documents of an answer: a body's one, or a stream's data lines.
function documents(text, stream) {
  if (!stream) return [JSON.parse(text)];
  return text.split('\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]')
    .map((l) => JSON.parse(l.slice(6)));
}

// What an outcome line must say of the server's report, read off the answer's documents by the
// engines' documented rules (tests/engine/SHAPES.md).
function expected(docs) {
  let usage = null;
  let timings = null;
  let sd = null;
  for (const d of docs) {
    const u = d.usage ?? d.response?.usage;
    if (u) usage = u;
    if (d.timings) timings = d.timings;
    if (d.metrics && 'speculative_decoding' in d.metrics) sd = d.metrics.speculative_decoding;
  }
  const details = usage?.prompt_tokens_details ?? usage?.input_tokens_details;
  const out = { cached_tokens: details?.cached_tokens ?? timings?.cache_n ?? null, server: null, spec: null };
  if (timings) {
    out.server = {
      prompt_n: timings.prompt_n, cache_n: timings.cache_n, prompt_ms: timings.prompt_ms,
      decode_n: timings.predicted_n, decode_ms: timings.predicted_ms,
    };
    if ('draft_n' in timings) {
      out.spec = {
        engine: 'llamacpp', num_draft_tokens: timings.draft_n,
        num_accepted_draft_tokens: timings.draft_n_accepted, num_spec_steps: null,
        num_spec_tokens: null, acceptance_histogram: null,
      };
    }
  }
  if (sd) {
    const histogram = {};
    sd.acceptance_histogram.forEach((n, j) => { if (n > 0) histogram[String(j)] = n; });
    out.spec = {
      engine: 'vllm', num_draft_tokens: sd.num_draft_tokens,
      num_accepted_draft_tokens: sd.num_accepted_draft_tokens, num_spec_steps: sd.num_spec_steps,
      num_spec_tokens: sd.num_spec_tokens, acceptance_histogram: histogram,
    };
  }
  return out;
}

const pick = (o) => ({ cached_tokens: o.cached_tokens, server: o.server, spec: o.spec });

// The sim's /v1/metrics spec-decode counter `name` (summed over its samples).
async function counter(sim, name) {
  const text = await (await fetch(url(sim, '/v1/metrics'))).text();
  return text.split('\n').filter((l) => l.startsWith(`vllm:spec_decode_${name}_total{`))
    .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
}

for (const shape of ['llamacpp', 'vllm']) {
  test(`--server-report ${shape}: outcomes and replay records carry what each answer reported`, async () => {
    const dir = tempDir();
    const capturePath = join(dir, 'requests.jsonl');
    const simArgs = ['--server-report', shape, '--spec-tokens', String(K), '--spec-ngram-min', '2'];
    const sim = await startSim(simArgs);
    const sent = requests();
    const expectations = [];
    try {
      const proxy = await startProxy({
        upstream: url(sim),
        args: ['--capture', '--capture-path', capturePath, '--outcomes', '--endpoint-pattern', '.*'],
      });
      try {
        for (const [path, body] of sent) {
          const r = await fetch(url(proxy, path), {
            method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
          });
          assert.equal(r.status, 200, path);
          expectations.push(expected(documents(await r.text(), body.stream === true)));
        }
      } finally {
        assert.deepEqual(await stop(proxy), { code: 0, signal: null });
      }
      // The answers carried the shape where the engine puts it.
      const spec = expectations.map((e) => e.spec);
      if (shape === 'llamacpp') {
        for (const i of [0, 1, 2, 3, 4, 5, 6, 7]) assert.ok(expectations[i].server, `request ${i}`);
        assert.equal(expectations[8].server, null, 'no timings on a whole Responses body');
        assert.equal(expectations[1].cached_tokens, expectations[1].server.cache_n, 'from timings');
        assert.ok(spec[0]?.num_accepted_draft_tokens > 0, JSON.stringify(spec[0]));
      } else {
        assert.ok(expectations.every((e) => e.server === null));
        assert.equal(spec[1], null, 'nothing on a stream without include_usage');
        assert.equal(spec[4], null);
        assert.equal(spec[6], null, 'null for n > 1');
        for (const i of [0, 2, 3, 5]) assert.ok(spec[i]?.num_spec_steps > 0, `request ${i}`);
      }
      // The outcome lines say exactly that, line by line.
      const outcomes = readLines(`${capturePath}.outcomes.ndjson`).sort((a, b) => a.line - b.line);
      assert.equal(outcomes.length, sent.length);
      outcomes.forEach((o, i) => assert.deepEqual(pick(o), expectations[i], `request ${i}: ${JSON.stringify(o)}`));
      // llama.cpp's chat stream without include_usage: the token counts come from the timings.
      assert.equal(outcomes[1].usage_source, shape === 'llamacpp' ? 'timings' : null);

      // Replayed to a fresh sim with the same seed: the same answers, so the same drafts (they
      // depend on the prompt and the answer alone; the cache, and so the timings, may differ).
      // Each record's spec is its request's, the summary's server.spec their sum.
      const fresh = await startSim(simArgs);
      try {
        const out = join(dir, 'run');
        const r = await replay([capturePath, '--url', url(fresh), '--out', out, '--server-metrics', 'off']);
        assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
        const lines = readLines(join(out, 'requests.jsonl')).sort((a, b) => a.index - b.index);
        assert.equal(lines.length, sent.length);
        lines.forEach((l, i) => {
          assert.equal(l.error, null, JSON.stringify(l));
          // A record has these members only when the server reported them.
          assert.deepEqual(l.spec ?? null, expectations[i].spec, `request ${i}: ${JSON.stringify(l)}`);
          assert.equal('server' in l, expectations[i].server !== null, `request ${i}`);
          if (l.server) {
            assert.equal(l.input_tokens, l.server.prompt_n + l.server.cache_n);
            assert.equal(l.output_tokens, l.server.decode_n);
            assert.equal(l.cached_tokens, l.server.cache_n);
          }
        });
        const reported = lines.filter((l) => l.spec);
        const sum = (f) => reported.reduce((n, l) => n + f(l.spec), 0);
        const drafted = sum((x) => x.num_draft_tokens);
        const accepted = sum((x) => x.num_accepted_draft_tokens);
        const summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
        const s = summary.server.spec;
        assert.equal(s.requests, reported.length);
        assert.equal(s.num_draft_tokens, drafted);
        assert.equal(s.num_accepted_draft_tokens, accepted);
        assert.equal(s.acceptance_rate, accepted / drafted);
        if (shape === 'vllm') {
          assert.equal(s.mean_acceptance_length, 1 + accepted / sum((x) => x.num_spec_steps));
          // Chat and completions bodies and include_usage streams (the short chat with a
          // zero-step record among them); not n = 2, streams without include_usage, Responses.
          assert.equal(reported.length, 5);
        } else {
          assert.equal(s.mean_acceptance_length, null, 'llama.cpp reports no verify steps');
          // Every chat, completions and Responses stream that drafted; not the whole Responses
          // body, nor the short chat (it drafted nothing: no draft_n).
          assert.equal(reported.length, 8);
        }
        // What the requests reported is part of what the sim counted (n = 2, streams without
        // include_usage and whole Responses bodies drafted without a report).
        assert.ok(await counter(fresh, 'num_draft_tokens') >= drafted);
        assert.ok(await counter(fresh, 'num_accepted_tokens') >= accepted);
      } finally {
        assert.deepEqual(await stop(fresh), { code: 0, signal: null });
      }
    } finally {
      await stop(sim);
      cleanup(dir);
    }
  });
}
