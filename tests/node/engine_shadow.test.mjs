// `llmtap proxy --shadow` with llama.cpp's real llama-server on both sides: the primary serves
// the bundle's cycle model with 2 slots, the candidate the same model with 1 slot and n-gram
// speculative decoding (ngram-simple). The `openai` and `@anthropic-ai/sdk` clients send chat,
// completions, Responses and Messages, streamed and not, through the shadowing proxy; each
// answer is mirrored to the candidate, and the pairs file and `llmtap shadow report` say how the
// two compare; then the capture replayed to both at once (`llmtap replay --paired-url`).
//
// What the servers guarantee and the assertions rest on: the model never emits EOS, so both
// sides generate exactly max_tokens tokens; the cycle model's greedy next token wins by a logit
// margin of at least 10 (its README), far beyond any difference in arithmetic between batch
// shapes or a speculative verify pass, so at temperature 0 both sides write the same text.
// Prompts made of one of its cycles are copied, so the candidate drafts (and accepts) tokens.
// Timings are compared by the report, not asserted: they depend on the machine's load.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { LLMTAP, startProxy, stop, url, curl, readLines, run, tempDir, cleanup, metricsWhen, replay } from './proxy_helpers.mjs';
import { call, responses } from './responses_helpers.mjs';
import { startLlamaServer, LLAMACPP } from './engine_helpers.mjs';

const NGRAM = ['--spec-type', 'ngram-simple', '--spec-ngram-simple-size-n', '3', '--spec-ngram-simple-size-m', '8'];

let primary;
let candidate;
before(async () => {
  [primary, candidate] = await Promise.all([
    startLlamaServer({ cycle: true, flags: ['--parallel', '2'] }),
    startLlamaServer({ cycle: true, flags: ['--parallel', '1', ...NGRAM] }),
  ]);
});
after(async () => {
  await Promise.all([primary?.stop(), candidate?.stop()]);
});

// Text made of `n` tokens of one of the cycle model's cycles: the model copies it.
function chains() {
  const work = execFileSync('bash', [LLAMACPP, 'work']).toString().trim();
  const map = JSON.parse(readFileSync(join(work, 'model', 'tiny-llama-cycle.pi.json'), 'utf8'));
  const text = new Map();
  map.cycles.forEach((c, i) => c.forEach((t, j) => text.set(t, map.cycle_text[i][j])));
  const cycles = map.cycles.filter((c) => c.length >= 40 && c.length <= 60);
  return (k, n) => Array.from({ length: n }, (_, i) => text.get(cycles[k % cycles.length][i % cycles[k % cycles.length].length])).join('');
}

function metric(text, name) {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

const kPairKeys = ['line', 'timestamp', 'request', 'shadow', 'candidate_url', 'path', 'model',
  'temperature', 'at_ms',
  'primary', 'candidate', 'delta', 'output'];

test('shadow: a speculating llama-server candidate answers each mirrored request as the primary does; pairs and report', async () => {
  const chain = chains();
  const dir = tempDir();
  const capture = join(dir, 'requests.jsonl');
  const model = primary.model;
  const sent = [];  // { path, max } in the order sent (one at a time)
  const proxy = await startProxy({
    upstream: primary.url(),
    args: ['--capture', '--capture-path', capture, '--endpoint-pattern', '^/v1/(chat/completions|completions|responses|messages)$',
      '--shadow', candidate.url(), '--shadow-tokenizer', 'builtin'],
  });
  let stopped = false;
  try {
    const api = new OpenAI({ baseURL: url(proxy, '/v1'), apiKey: 'none', maxRetries: 0, timeout: 120000 });
    const anthropic = new Anthropic({ baseURL: url(proxy), apiKey: 'none', maxRetries: 0, timeout: 120000 });
    // 12 requests, three of each API, streamed and not; then a streamed prompt array.
    for (let k = 0; k < 3; ++k) {
      const stream = k % 2 === 1;
      const max = 24 + 8 * k;
      await call(api, 'completions', { model, prompt: chain(k, 60), max_tokens: max, temperature: 0, stream });
      sent.push({ path: '/v1/completions', max });
      await call(api, 'chat', { model, max_tokens: max, temperature: 0, stream,
        messages: [{ role: 'user', content: 'Repeat.' }, { role: 'assistant', content: chain(k + 3, 70) }] });
      sent.push({ path: '/v1/chat/completions', max });
      await responses(api, { model, input: chain(k + 6, 60), max_output_tokens: max, temperature: 0, stream });
      sent.push({ path: '/v1/responses', max });
      const body = { model, max_tokens: max, temperature: 0, messages: [{ role: 'user', content: chain(k + 9, 60) }] };
      await (stream ? anthropic.messages.stream(body).finalMessage() : anthropic.messages.create(body));
      sent.push({ path: '/v1/messages', max });
    }
    // A streamed prompt array (plain HTTP: llama-server opens it with "data: null", which the
    // openai SDK yields as a null chunk): choice 0 is compared.
    {
      const r = await fetch(url(proxy, '/v1/completions'), {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt: [chain(12, 40), chain(13, 40)], max_tokens: 16, temperature: 0, stream: true }),
      });
      assert.equal(r.status, 200);
      assert.match(await r.text(), /^data: null\n\n/);
      sent.push({ path: '/v1/completions', max: 16 });
    }
    // The mirrors run off the request path: wait until every pair is written.
    const m = await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_pairs_total') >= sent.length);
    assert.equal(metric(m, 'llmtap_shadow_matched_total'), sent.length);
    assert.equal(metric(m, 'llmtap_shadow_sent_total'), sent.length);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    stopped = true;

    const rows = readLines(capture);
    assert.equal(rows.length, sent.length);
    const outcomes = readLines(`${capture}.outcomes.ndjson`);
    assert.equal(outcomes.length, sent.length);
    const pairs = readLines(`${capture}.shadow.ndjson`);
    assert.equal(pairs.length, sent.length);
    const seenLines = new Set();
    for (const p of pairs) {
      const what = JSON.stringify(p);
      assert.deepEqual(Object.keys(p), kPairKeys, what);
      // Joined to its capture row as the outcomes sidecar is.
      const row = rows[p.line - 1];
      assert.ok(row, what);
      assert.equal(p.timestamp, row.timestamp, what);
      assert.ok(!seenLines.has(p.line), what);
      seenLines.add(p.line);
      const s = sent[p.line - 1];
      assert.equal(p.path, s.path, what);
      assert.equal(p.shadow, 0);
      assert.equal(p.temperature, 0, what);
      for (const side of [p.primary, p.candidate]) {
        assert.equal(side.status, 200, what);
        assert.equal(side.error, null, what);
        assert.equal(side.completion_tokens, s.max, `${what}: exactly max_tokens on both sides`);
        assert.ok(side.prompt_tokens > 0, what);
        assert.ok(side.ttft_ms > 0 && side.ttft_ms <= side.latency_ms, what);
      }
      // Same model, same tokenizer and template: the same prompt on both.
      assert.equal(p.candidate.prompt_tokens, p.primary.prompt_tokens, what);
      assert.equal(p.candidate.finish_reason, p.primary.finish_reason, what);
      assert.ok(Math.abs(p.delta.ttft_ms - (p.candidate.ttft_ms - p.primary.ttft_ms)) < 0.01, what);
      assert.ok(Math.abs(p.delta.latency_ms - (p.candidate.latency_ms - p.primary.latency_ms)) < 0.01, what);
      // Greedy on the cycle model: the same text, speculation or not.
      assert.deepEqual(p.output, { equal: true, first_diff_char: null, first_diff_token: null, length_ratio: 1, truncated: false }, what);
      // The primary's side of the pair is its outcome line.
      const o = outcomes.find((x) => x.line === p.line);
      assert.equal(o.completion_tokens, p.primary.completion_tokens, what);
      assert.equal(o.status, p.primary.status, what);
    }
    // The candidate really speculated (and the primary did not).
    const cm = await curl([candidate.url('/metrics')]);
    assert.ok(metric(cm, 'llamacpp:spec_decode_num_draft_tokens_total') > 0, cm);
    assert.ok(metric(cm, 'llamacpp:spec_decode_num_accepted_tokens_total') > 0, cm);

    // The report: every pair compared; the outputs all equal; the output length exactly the same.
    const r = await run(LLMTAP, ['shadow', 'report', `${capture}.shadow.ndjson`, '--json', '-']);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    const report = JSON.parse(r.stdout);
    assert.equal(report.inputs.pairs, sent.length);
    assert.equal(report.inputs.malformed, 0);
    assert.equal(report.shadows.length, 1);
    const all = report.shadows[0].groups.find((g) => g.kind === 'all');
    assert.equal(all.counts.both_ok, sent.length, JSON.stringify(all.counts));
    assert.equal(all.output.greedy_compared, sent.length);
    assert.equal(all.output.greedy_equal, sent.length);
    assert.equal(all.output.differing, 0);
    const length = all.metrics.completion_tokens;
    assert.equal(length.ratio, 1);
    assert.deepEqual(length.ci, [1, 1]);
    assert.equal(length.verdict, 'no detectable difference');
    // One group per API path.
    assert.deepEqual(report.shadows[0].groups.filter((g) => g.kind === 'path').map((g) => [g.name, g.counts.pairs]).sort(),
      [['/v1/chat/completions', 3], ['/v1/completions', 4], ['/v1/messages', 3], ['/v1/responses', 3]]);
    const text = await run(LLMTAP, ['shadow', 'report', `${capture}.shadow.ndjson`]);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /exact match at temperature 0: 100\.0 % of 13/);

    // Offline, the same comparison: the capture replayed to both servers at once (--paired-url).
    const out = join(dir, 'paired');
    const rp = await replay([capture, '--url', primary.url(), '--paired-url', candidate.url(), '--out', out,
      '--server-metrics', 'off']);
    assert.equal(rp.code, 0, `${rp.stdout}\n${rp.stderr}`);
    const replayed = readLines(join(out, 'pairs.ndjson'));
    assert.equal(replayed.length, sent.length);
    for (const p of replayed) {
      const what = JSON.stringify(p);
      assert.equal(p.path, sent[p.line - 1].path, what);
      for (const side of [p.primary, p.candidate]) {
        assert.equal(side.status, 200, what);
        assert.equal(side.error, null, what);
        assert.equal(side.completion_tokens, sent[p.line - 1].max, what);
      }
      assert.equal(p.output.equal, true, what);
    }
    console.log(text.stdout.split('\n').filter((l) => /TTFT|latency|output/.test(l)).slice(0, 4).join('\n'));
  } finally {
    if (!stopped) await stop(proxy);
    cleanup(dir);
  }
});
