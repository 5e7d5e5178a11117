// Every API llmtap reads, against llama.cpp's real llama-server, with the clients its users have:
// the `openai` SDK (chat, completions, Responses, embeddings), the `@anthropic-ai/sdk` (Messages)
// and plain HTTP (rerank), streamed and not, through `llmtap proxy --capture-responses`; then
// the capture through `llmtap split`, `llmtap validate` and AIPerf's own loader (every file
// written), and `llmtap replay` of it (each API, as captured and --stream: to a fresh
// `--embeddings` instance, rerank to the `--reranking` one). A second test: what the server
// refuses, as outcomes and in a replay.
//
// Servers: one `--embeddings --pooling mean` instance (it serves chat, completions, Responses and
// Messages too) and one `--reranking` instance; the proxy has one upstream, so rerank goes
// through a second proxy with a capture of its own. engine_proxy.test.mjs covers the cached
// tokens, timings and speculation counts; this file covers what every API's rows, outcomes and
// tools make of the real server's answers.
//
// What the server guarantees and the assertions rest on: this model never emits EOS, so every
// generative answer has exactly max_tokens tokens (finish "length", Messages "max_tokens",
// Responses "completed": llama-server's Responses never says "incomplete"); its usage covers
// one choice only with n > 1 or a prompt array (asserted: llmtap records the server's figure).
// A streamed prompt array opens with "data: null": `llmtap replay` counted every such request
// as a protocol error until it read that event as nothing (src/replay/response.cc).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { execFile } from 'node:child_process';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { LLMTAP, startProxy, stop, url, readLines, run, tempDir, cleanup, replay, checkAIPerfRows } from './proxy_helpers.mjs';
import { call, assertResponseIsWhatTheClientSaw, responses, messageSeen } from './responses_helpers.mjs';
import { startLlamaServer } from './engine_helpers.mjs';

const AIPERF = join(import.meta.dirname, '..', 'aiperf', 'aiperf.sh');
const PATTERN = '^/v1/(chat/completions|completions|responses|messages|embeddings|rerank)$';

let embed;   // --embeddings --pooling mean: chat, completions, Responses, Messages, embeddings
let rerank;  // --reranking
before(async () => {
  [embed, rerank] = await Promise.all([
    startLlamaServer({ flags: ['--embeddings', '--pooling', 'mean'] }),
    startLlamaServer({ flags: ['--reranking'] }),
  ]);
});
after(async () => {
  await Promise.all([embed?.stop(), rerank?.stop()]);
});

function openai(proxy) {
  // The timeout is a guard against a hang only.
  return new OpenAI({ baseURL: url(proxy, '/v1'), apiKey: 'none', maxRetries: 0, timeout: 120000 });
}

// AIPerf 0.11.0's own loader on one file (tests/aiperf/aiperf.sh load): its report.
function aiperfLoad(file, endpointType, jsonOut) {
  return new Promise((resolve) => {
    execFile('bash', [AIPERF, 'load', file, '--type', 'mooncake_trace', '--endpoint-type', endpointType,
      '--fixed-schedule', '--json', jsonOut], { maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr, report: existsSync(jsonOut) ? JSON.parse(readFileSync(jsonOut, 'utf8')) : null });
    });
  });
}

test('six APIs through the proxy, streamed and not; split, validate, AIPerf\'s loader; replay of each API', async () => {
  const dir = tempDir();
  const capture = join(dir, 'requests.jsonl');
  const rankCapture = join(dir, 'rerank.jsonl');
  const capArgs = (path) => ['--capture', '--capture-path', path, '--outcomes', '--capture-responses',
    '--endpoint-pattern', PATTERN];
  const sent = [];  // { api, body, max, check(outcome) } in the order sent (one client at a time)
  const rankSent = [];
  const model = embed.model;
  let proxy = await startProxy({ upstream: embed.url(), args: capArgs(capture) });
  let rankProxy = await startProxy({ upstream: rerank.url(), args: capArgs(rankCapture) });
  try {
    const api = openai(proxy);
    const same = (o, seen, what) => assertResponseIsWhatTheClientSaw(o, seen, what);
    // Chat: not streamed; streamed without usage (counts from the server's timings); streamed
    // with include_usage; n = 2 (usage of one choice only: the server's figure is recorded).
    for (const [extra, usage] of [[{}, 'usage'], [{ stream: true }, 'timings'],
      [{ stream: true, stream_options: { include_usage: true } }, 'usage'], [{ n: 2 }, 'usage'],
      // Streamed, n = 2 gives one usage chunk per choice (each with that choice's count).
      [{ n: 2, stream: true, stream_options: { include_usage: true } }, 'usage']]) {
      const body = { model, messages: [{ role: 'user', content: `Name a river (${JSON.stringify(extra)}).` }],
        max_tokens: 7, temperature: 0, ...extra };
      const seen = await call(api, 'chat', body);
      sent.push({ api: 'chat', body, max: 7, usage, check: (o, what) => {
        same(o, seen, what);
        assert.equal(o.finish_reason, 'length', what);
        assert.ok(!('response_id' in o), `${what}: chat answers name no response id`);
      } });
    }
    // Completions: not streamed, streamed (usage rides on the finish chunk anyway), a prompt array.
    for (const [extra, prompt] of [[{}, 'The river'], [{ stream: true }, 'The mountain'], [{}, ['One', 'Two']]]) {
      const body = { model, prompt, max_tokens: 6, temperature: 0, ...extra };
      const seen = await call(api, 'completions', body);
      sent.push({ api: 'completions', body, max: 6, usage: 'usage', check: (o, what) => {
        same(o, seen, what);
        assert.equal(o.finish_reason, 'length', what);
        // llama-server's completions ids start chatcmpl- (read by nothing: no response_id).
        assert.ok(!('response_id' in o), what);
      } });
    }
    // A streamed prompt array: llama-server opens it with "data: null" (the openai SDK yields a
    // null chunk, on which a reader of chunk.choices throws), interleaves the prompts' chunks and
    // gives each prompt's finish chunk the usage of that prompt alone: the last one's is
    // recorded. Plain HTTP.
    {
      const body = { model, prompt: ['Three', 'Four'], max_tokens: 6, temperature: 0, stream: true };
      const r = await fetch(url(proxy, '/v1/completions'), {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
      });
      assert.equal(r.status, 200);
      const events = (await r.text()).split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
      assert.equal(events[0], 'null', 'llama-server\'s first event of a streamed prompt array');
      assert.equal(events.at(-1), '[DONE]');
      const chunks = events.slice(1, -1).map((e) => JSON.parse(e));
      const usages = chunks.filter((c) => c.usage).map((c) => c.usage);
      assert.equal(usages.length, 2, 'one usage per prompt');
      const text = chunks.flatMap((c) => c.choices).filter((c) => c.index === 0).map((c) => c.text).join('');
      const seen = { text, reasoning: '', tool_calls: [] };
      sent.push({ api: 'completions', body, max: 6, usage: 'usage', check: (o, what) => {
        same(o, seen, what);
        assert.equal(o.prompt_tokens, usages.at(-1).prompt_tokens, what);
        assert.equal(o.finish_reason, 'length', what);
      } });
    }
    // Responses: cut by max_output_tokens, which llama-server reports as "completed".
    for (const stream of [false, true]) {
      const body = { model, input: 'Describe the Danube.', instructions: 'Be brief.', max_output_tokens: 5, temperature: 0, stream };
      const seen = await responses(api, body);
      assert.equal(seen.r.status, 'completed');
      assert.equal(seen.r.usage.output_tokens, 5);
      sent.push({ api: 'responses', body, max: 5, usage: 'usage', check: (o, what) => {
        assert.equal(o.response_id, seen.r.id, what);
        assert.match(o.response_id, /^resp_/, what);
        assert.equal(o.prompt_tokens, seen.r.usage.input_tokens, what);
        assert.equal(o.finish_reason, 'completed', `${what}: llama-server's word for a cut answer`);
        assert.equal(o.response.text, seen.text, what);
      } });
    }
    // Messages: create and stream (llama-server sends no ping event and no [DONE]).
    const anthropic = new Anthropic({ baseURL: url(proxy), apiKey: 'none', maxRetries: 0, timeout: 120000 });
    for (const stream of [false, true]) {
      const body = { model, max_tokens: 6, temperature: 0, system: 'You are terse.',
        messages: [{ role: 'user', content: `Name a lake (${stream}).` }] };
      const m = stream ? await anthropic.messages.stream(body).finalMessage() : await anthropic.messages.create(body);
      const seen = messageSeen(m);
      assert.match(m.id, /^chatcmpl-/, 'llama-server\'s Messages ids');
      sent.push({ api: 'messages', body: stream ? { ...body, stream: true } : body, max: 6, usage: 'usage', check: (o, what) => {
        assert.equal(o.response_id, m.id, what);
        assert.equal(o.prompt_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens, what);
        assert.equal(o.finish_reason, 'max_tokens', what);
        assert.equal(o.response.text, seen.text, what);
      } });
    }
    // Embeddings, float and base64 (the openai SDK's default, which it decodes).
    for (const encoding_format of ['float', 'base64']) {
      const body = { model, input: ['embed me', 'and me too'], encoding_format };
      const e = await api.embeddings.create(body);
      assert.equal(e.data.length, 2);
      // 128 floats (base64 asked for explicitly: the SDK leaves the string as sent).
      const v = e.data[0].embedding;
      assert.equal(typeof v === 'string' ? Buffer.from(v, 'base64').length / 4 : v.length, 128);
      sent.push({ api: 'embeddings', body, max: null, usage: 'usage', check: (o, what) => {
        assert.equal(o.prompt_tokens, e.usage.prompt_tokens, what);
        assert.equal(o.completion_tokens, null, what);
      } });
    }
    // Rerank (plain HTTP; never streamed) through the second proxy.
    for (const top_n of [1, 3]) {
      const body = { model, query: 'rivers', documents: ['the Danube', 'a mountain', 'the Rhine'], top_n };
      const r = await fetch(url(rankProxy, '/v1/rerank'), {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
      });
      assert.equal(r.status, 200);
      const rr = await r.json();
      assert.equal(rr.results.length, top_n);
      rankSent.push({ api: 'cohere_rankings', body, max: null, usage: 'usage', check: (o, what) => {
        assert.equal(o.prompt_tokens, rr.usage.prompt_tokens, what);
        assert.equal(o.completion_tokens, null, what);
      } });
    }
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    assert.deepEqual(await stop(rankProxy), { code: 0, signal: null });
    proxy = rankProxy = undefined;

    // Rows as sent, outcomes as the server reported them.
    for (const [path, list] of [[capture, sent], [rankCapture, rankSent]]) {
      const rows = readLines(path);
      assert.equal(rows.length, list.length);
      const outcomes = new Array(rows.length);
      for (const o of readLines(`${path}.outcomes.ndjson`)) outcomes[o.line - 1] = o;
      list.forEach((s, i) => {
        const what = `${s.api} row ${i + 1} ${JSON.stringify(s.body).slice(0, 80)}`;
        const o = outcomes[i];
        assert.ok(o, `${what}: an outcome`);
        assert.deepEqual(rows[i].payload, s.body, what);
        assert.equal(rows[i].endpoint_type, ['chat', 'completions'].includes(s.api) ? undefined : s.api, what);
        assert.equal(o.status, 200, what);
        assert.equal(o.error, null, what);
        assert.equal(o.cancelled, false, what);
        assert.ok(Number.isInteger(o.prompt_tokens) && o.prompt_tokens > 0, `${what}: ${JSON.stringify(o)}`);
        assert.equal(o.usage_source, s.usage, what);
        assert.ok(o.ttft_ms > 0 && o.ttft_ms <= o.latency_ms, what);
        // This model never ends on its own: exactly max_tokens, of one choice only for n = 2
        // and a prompt array (llama-server's usage covers one).
        if (s.max !== null) assert.equal(o.completion_tokens, s.max, what);
        s.check(o, what);
      });
      checkAIPerfRows(rows.filter((r) => !r.endpoint_type), 'mooncake_payload');
    }

    // split: one file per API, each with its outcomes; validate: every file loads in AIPerf;
    // AIPerf's own loader on every file written.
    const out = join(dir, 'split');
    const files = [];
    for (const path of [capture, rankCapture]) {
      const s = await run(LLMTAP, ['split', path, '--out-dir', out]);
      assert.equal(s.code, 0, `${s.stdout}\n${s.stderr}`);
    }
    const expected = { chat: 5, completions: 4, responses: 2, messages: 2, embeddings: 2, rankings: 2 };
    assert.deepEqual(readdirSync(out).filter((f) => f.endsWith('.jsonl')).sort(),
      [...Object.keys(expected).filter((k) => k !== 'rankings').map((k) => `requests.${k}.jsonl`), 'rerank.rankings.jsonl'].sort());
    for (const [kind, n] of Object.entries(expected)) {
      const file = join(out, `${kind === 'rankings' ? 'rerank' : 'requests'}.${kind}.jsonl`);
      const rows = readLines(file);
      assert.equal(rows.length, n, file);
      const outcomes = readLines(`${file}.outcomes.ndjson`);
      assert.equal(outcomes.length, n, `${file}: its outcomes`);
      // Renumbered to the output's lines, each joined to its row (line and timestamp).
      assert.deepEqual(outcomes.map((o) => o.line).sort((a, b) => a - b), rows.map((_, i) => i + 1), file);
      for (const o of outcomes) {
        assert.equal(o.timestamp, rows[o.line - 1].timestamp, `${file}: ${JSON.stringify(o)}`);
        assert.equal(o.status, 200, `${file}: ${JSON.stringify(o)}`);
      }
      files.push({ kind, file });
    }
    const endpointType = { chat: 'chat', completions: 'completions', responses: 'responses', messages: 'messages',
      embeddings: 'embeddings', rankings: 'cohere_rankings' };
    for (const path of [capture, rankCapture]) {
      const v = await run(LLMTAP, ['validate', '--json', '--fixed-schedule', path]);
      assert.equal(v.code, 0, `llmtap validate ${path}:\n${v.stdout}\n${v.stderr}`);
    }
    for (const { kind, file } of files) {
      const v = await run(LLMTAP, ['validate', '--json', '--fixed-schedule', '--endpoint-type', endpointType[kind], file]);
      assert.equal(v.code, 0, `llmtap validate ${file}:\n${v.stdout}\n${v.stderr}`);
      const report = JSON.parse(v.stdout);
      assert.equal(report.ok, true, v.stdout);
      assert.equal(report.passed, expected[kind], v.stdout);
      assert.equal(report.failed, 0, v.stdout);
      assert.equal(report.warned, 0, v.stdout);
    }
    // AIPerf 0.11.0 has no `messages` endpoint type (its CLI refuses it; later versions have
    // it): its mooncake loader is given the Messages file in a chat run, and loads it.
    const aiperfType = { ...endpointType, messages: 'chat' };
    const loads = await Promise.all(files.map(async ({ kind, file }) => ({
      kind, file, ...(await aiperfLoad(file, aiperfType[kind], `${file}.aiperf.json`)),
    })));
    for (const l of loads) {
      const what = `AIPerf's loader on ${l.file}:\n${l.stdout.slice(0, 2000)}\n${l.stderr.slice(-2000)}`;
      assert.equal(l.code, 0, what);
      assert.equal(l.report.error, undefined, what);
      assert.deepEqual(l.report.rows_rejected, [], what);
      assert.equal(l.report.turns, expected[l.kind], what);
      assert.equal(l.report.diff_count, 0, what);
      assert.equal(l.report.wire_bytes_differ, 0, what);
    }
  } finally {
    if (proxy) await stop(proxy);
    if (rankProxy) await stop(rankProxy);
  }

  // Replay: the mixed capture (five APIs in one run) to a fresh --embeddings instance, as
  // captured and with --stream; the rerank capture to the --reranking instance.
  const fresh = await startLlamaServer({ flags: ['--embeddings', '--pooling', 'mean'] });
  try {
    for (const [trace, target, list, extra] of [
      [capture, fresh, sent, []], [capture, fresh, sent, ['--stream']], [rankCapture, rerank, rankSent, []]]) {
      const o = join(dir, `replay-${list.length}-${extra.length}`);
      const r = await replay([trace, '--url', target.url(), '--out', o, '--server-metrics', 'off', ...extra]);
      const what = `replay ${trace} ${extra.join(' ')}`;
      const lines = readLines(join(o, 'requests.jsonl'));
      assert.deepEqual(lines.filter((l) => l.error !== null), [], what);
      assert.equal(r.code, 0, `${what}\n${r.stdout}\n${r.stderr}`);
      assert.equal(lines.length, list.length, what);
      const summary = JSON.parse(readFileSync(join(o, 'summary.json'), 'utf8'));
      assert.equal(summary.requests.errors, 0, what);
      // Each row went to its own API's path, and each answer is what the fresh server reports:
      // exactly max_tokens (of one choice only, for n = 2 and the prompt arrays: llama-server's
      // usage), or no output tokens (embeddings, rerank).
      const apiName = { cohere_rankings: 'rankings' };
      const want = {};
      for (const s of list) want[apiName[s.api] ?? s.api] = (want[apiName[s.api] ?? s.api] ?? 0) + 1;
      const got = {};
      for (const l of lines) got[l.endpoint] = (got[l.endpoint] ?? 0) + 1;
      assert.deepEqual(got, want, what);
      assert.deepEqual(summary.input.apis, want, what);
      for (const l of lines) {
        const s = list[l.index];
        assert.equal(l.endpoint, apiName[s.api] ?? s.api, `${what}: ${JSON.stringify(l)}`);
        assert.equal(l.status, 200, `${what}: ${JSON.stringify(l)}`);
        assert.ok(l.input_tokens > 0, `${what}: ${JSON.stringify(l)}`);
        if (s.max !== null) assert.equal(l.output_tokens, s.max, `${what}: ${JSON.stringify(l)}`);
        else assert.ok(!l.output_tokens, `${what}: ${JSON.stringify(l)}`);
      }
    }
  } finally {
    await fresh.stop();
    cleanup(dir);
  }
});

// What llama-server refuses, as its clients see it and as llmtap records and replays it: a prompt
// over the slot's context (400 exceed_context_size_error, plain JSON although the request
// streams), a Responses request continuing a stored response (400: llama-server is stateless),
// and rerank on an instance started without --reranking (501).
test('refusals: the outcome has the server\'s status and no tokens; replay counts them by kind', async () => {
  const dir = tempDir();
  const capture = join(dir, 'requests.jsonl');
  const proxy = await startProxy({
    upstream: embed.url(),
    args: ['--capture', '--capture-path', capture, '--outcomes', '--capture-responses', '--endpoint-pattern', PATTERN],
  });
  const statuses = [];
  try {
    const api = openai(proxy);
    const long = Array.from({ length: 6000 }, (_, i) => `word${i}`).join(' ');  // > 8192 tokens
    await assert.rejects(api.chat.completions.create({ model: embed.model, stream: true, max_tokens: 4,
      messages: [{ role: 'user', content: long }] }), (e) => e.status === 400 && /context/i.test(e.message));
    statuses.push(400);
    await assert.rejects(api.responses.create({ model: embed.model, input: 'Go on.', previous_response_id: 'resp_x',
      max_output_tokens: 4 }), (e) => e.status === 400 && /previous_response_id/.test(e.message));
    statuses.push(400);
    const r = await fetch(url(proxy, '/v1/rerank'), {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: embed.model, query: 'q', documents: ['a', 'b'] }),
    });
    assert.equal(r.status, 501);
    await r.text();
    statuses.push(501);
  } finally {
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  }
  try {
    const outcomes = readLines(`${capture}.outcomes.ndjson`).sort((a, b) => a.line - b.line);
    assert.deepEqual(outcomes.map((o) => o.status), statuses);
    for (const o of outcomes) {
      assert.equal(o.error, null, JSON.stringify(o));
      assert.equal(o.prompt_tokens, null, JSON.stringify(o));
      assert.equal(o.completion_tokens, null, JSON.stringify(o));
      assert.equal(o.finish_reason, null, JSON.stringify(o));
    }
    const o = join(dir, 'replay');
    const rp = await replay([capture, '--url', embed.url(), '--out', o, '--server-metrics', 'off']);
    assert.match(rp.stdout, /errors by kind: http_4xx=2 http_5xx=1/);
    assert.equal(rp.code, 1, `${rp.stdout}\n${rp.stderr}`);
    const lines = readLines(join(o, 'requests.jsonl')).sort((a, b) => a.index - b.index);
    assert.deepEqual(lines.map((l) => [l.status, l.error]), [[400, 'http_4xx'], [400, 'http_4xx'], [501, 'http_5xx']]);
  } finally {
    cleanup(dir);
  }
});
