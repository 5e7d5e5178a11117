// Multi-turn conversations against llama.cpp's real llama-server through `llmtap proxy
// --capture-responses --session-headers x-session-id`: some name themselves by the header (kept
// as captured), most do not, and `llmtap sessions` links those from their content, telling
// look-alikes (the same system prompt and first message, sent at once) apart by the response
// text the sidecar holds. Chat through the `openai` SDK (half streamed) and Messages through the
// `@anthropic-ai/sdk`. The linked capture is then split by API, validated and loaded by
// AIPerf's own loader (a conversation per session), and replayed to the server (causal schedule).
//
// What the server guarantees and the assertions rest on: greedy (temperature 0) output is
// deterministic for one prompt on one server, and this model never emits EOS, so an answer has
// exactly max_tokens tokens. Look-alikes asking for different max_tokens therefore get answers
// of different lengths (texts that differ), and those asking for the same get the same answer:
// what the inference design cannot tell apart (`same_answer`: a guess, counted; the
// conversations may swap at that turn, and their later turns, with messages of their own, follow
// their own requests). Each turn of all conversations goes out once every answer of the turn
// before is back and recorded (as in sessions_responses.test.mjs), so every predecessor's end is
// recorded before its successor arrives, whatever the load.
//
// The test knows each request's conversation from a field `llmtap sessions` ignores: chat's
// `user`, Messages' `metadata.user_id` ("truth-<n>").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { LLMTAP, startProxy, stop, url, readLines, run, tempDir, cleanup, metricsSettled, replay } from './proxy_helpers.mjs';
import { streamed, waitRecorded } from './conversations.mjs';
import { startLlamaServer } from './engine_helpers.mjs';

const SYSTEM = 'You are a support agent for a GPU cloud. Be brief.';
const FIRST = 'My training job is stuck at 0 %. What should I check?';
const TURNS = 3;
const AIPERF = join(import.meta.dirname, '..', 'aiperf', 'aiperf.sh');

let engine;
before(async () => { engine = await startLlamaServer(); });
after(async () => { await engine?.stop(); });

const truthOf = (row) => row.payload.user ?? row.payload.metadata?.user_id;

// Turn `t` of one conversation: the conversation so far; the answer appended as returned, then
// a follow-up of the conversation's own.
async function turn(clients, spec, t) {
  const truth = spec.truth;
  if (spec.api === 'messages') {
    const body = { model: engine.model, max_tokens: spec.maxTokens, temperature: 0, system: SYSTEM,
      messages: structuredClone(spec.messages), metadata: { user_id: truth } };
    const m = spec.stream ? await clients.anthropic(spec).messages.stream(body).finalMessage()
      : await clients.anthropic(spec).messages.create(body);
    assert.equal(m.usage.output_tokens, spec.maxTokens);
    spec.messages.push({ role: 'assistant', content: m.content.map((b) => b.text).join('') });
  } else {
    const body = { model: engine.model, messages: structuredClone(spec.messages), max_tokens: spec.maxTokens,
      temperature: 0, user: truth };
    const r = spec.stream ? await streamed(clients.openai(spec), body) : await clients.openai(spec).chat.completions.create(body);
    spec.messages.push(r.choices[0].message);
  }
  spec.answers.push(spec.messages.at(-1).content);
  spec.messages.push({ role: 'user', content: `Follow-up ${t + 1} of ${truth}.` });
}

test('sessions: named by header kept; header-less linked from content, look-alikes by the response text', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const outPath = join(dir, 'linked.jsonl');
  const specs = [];
  // 8 chat look-alikes, each asking for its own number of tokens (answers of different
  // lengths), half streamed; 2 more asking for the same (identical answers); 2 Messages
  // look-alikes; 2 chats named by the header (the same opening too).
  for (let i = 0; i < 8; ++i) specs.push({ api: 'chat', maxTokens: 3 + i, stream: i % 2 === 1 });
  for (let i = 0; i < 2; ++i) specs.push({ api: 'chat', maxTokens: 12, stream: i === 1, same: true });
  for (let i = 0; i < 2; ++i) specs.push({ api: 'messages', maxTokens: 4 + 2 * i, stream: i === 1 });
  for (let i = 0; i < 2; ++i) specs.push({ api: 'chat', maxTokens: 4, stream: false, header: `hdr-${i}` });
  specs.forEach((s, i) => {
    s.truth = `truth-${i}`;
    s.answers = [];
    s.messages = s.api === 'messages' ? [{ role: 'user', content: FIRST }]
      : [{ role: 'system', content: SYSTEM }, { role: 'user', content: FIRST }];
  });
  const proxy = await startProxy({
    upstream: engine.url(),
    args: ['--capture', '--capture-path', capturePath, '--capture-responses', '--session-headers', 'x-session-id',
      '--endpoint-pattern', '^/v1/(chat/completions|messages)$'],
  });
  let stopped = false;
  try {
    const headers = (spec) => (spec.header ? { 'x-session-id': spec.header } : {});
    const clients = {
      openai: (spec) => new OpenAI({ baseURL: url(proxy, '/v1'), apiKey: 'none', maxRetries: 0, timeout: 120000, defaultHeaders: headers(spec) }),
      anthropic: (spec) => new Anthropic({ baseURL: url(proxy), apiKey: 'none', maxRetries: 0, timeout: 120000, defaultHeaders: headers(spec) }),
    };
    for (let t = 0; t < TURNS; ++t) {
      await Promise.all(specs.map((s) => turn(clients, s, t)));
      // Every request of this turn ended (and timed) at the proxy before the next turn goes.
      await metricsSettled(proxy);
    }
    await waitRecorded(proxy, specs.length * TURNS);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    stopped = true;

    // The server's guarantee the test rests on: one prompt, one answer; different lengths,
    // different answers.
    const firstAnswers = specs.filter((s) => s.api === 'chat' && !s.header).map((s) => s.answers[0]);
    assert.equal(new Set(firstAnswers).size, 9, 'the 8 lengths give 8 answers; the 2 of one length, one');
    const same = specs.filter((s) => s.same);
    assert.equal(same[0].answers[0], same[1].answers[0]);

    const r = await run(LLMTAP, ['sessions', capturePath, '-o', outPath, '--json']);
    assert.equal(r.code, 0, `llmtap sessions:\n${r.stdout}\n${r.stderr}`);
    const report = JSON.parse(r.stdout);
    const total = specs.length * TURNS;
    const unnamed = specs.filter((s) => !s.header);
    assert.equal(report.outcomes.matched, total);
    assert.equal(report.named_rows, (specs.length - unnamed.length) * TURNS);
    assert.equal(report.sessions, unnamed.length);
    assert.equal(report.linked, unnamed.length * (TURNS - 1));
    assert.equal(report.unlinked, 0);
    // Second turns: of the 10 chat look-alikes, the first 9 to be linked had others left to
    // pick from (the last is alone by then), of the 2 Messages ones 1: 10 choices, all by the
    // response text but one. The first of the 2 with the same answer to be linked cannot be
    // told from the other by it: a guess, counted as such.
    assert.equal(report.by_response_text + report.ambiguous, 10, JSON.stringify(report));
    assert.equal(report.guessed.same_answer, 1, JSON.stringify(report));
    assert.equal(report.ambiguous, 1, JSON.stringify(report));
    assert.equal(report.guessed.no_response_text, 0, JSON.stringify(report));
    assert.equal(report.guessed.truncated, 0, JSON.stringify(report));

    const inLines = readFileSync(capturePath, 'utf8').split('\n').filter((l) => l !== '');
    const outLines = readFileSync(outPath, 'utf8').split('\n').filter((l) => l !== '');
    const out = readLines(outPath);
    assert.equal(out.length, total);
    const bySpec = new Map(specs.map((s) => [s.truth, s]));
    const rowsOf = new Map();  // session id -> truths of its rows, in file order
    for (let i = 0; i < total; ++i) {
      const spec = bySpec.get(truthOf(out[i]));
      const id = out[i].session_id;
      if (spec.header) {
        assert.equal(outLines[i], inLines[i], `line ${i + 1}: a named row is kept as captured`);
        assert.equal(id, spec.header);
        continue;
      }
      assert.equal(outLines[i], `${inLines[i].slice(0, -1)},"session_id":${JSON.stringify(id)}}`);
      if (!rowsOf.has(id)) rowsOf.set(id, []);
      rowsOf.get(id).push(spec.truth);
    }
    assert.equal(rowsOf.size, unnamed.length);
    const sameTruths = new Set(same.map((s) => s.truth));
    let swapped = 0;
    for (const [id, truths] of rowsOf) {
      assert.equal(truths.length, TURNS, `${id}: ${truths}`);
      // Every later turn follows its own conversation's requests (its follow-ups are its own),
      // and the second turn its own first but for the pair with the same answer, which may swap.
      assert.ok(truths.slice(1).every((t) => t === truths[1]), `${id}: ${truths}`);
      if (truths[0] !== truths[1]) {
        assert.ok(sameTruths.has(truths[0]) && sameTruths.has(truths[1]), `${id}: ${truths} linked across conversations`);
        ++swapped;
      }
    }

    // The linked capture, split by API (a session's rows stay together), loads in AIPerf:
    // llmtap's rules, then AIPerf's own loader: one conversation per session id, its turns in
    // order, every payload as captured.
    const s = await run(LLMTAP, ['split', outPath, '--out-dir', join(dir, 'split')]);
    assert.equal(s.code, 0, `${s.stdout}\n${s.stderr}`);
    for (const [kind, sessions] of [['chat', specs.length - 2], ['messages', 2]]) {
      const file = join(dir, 'split', `linked.${kind}.jsonl`);
      const v = await run(LLMTAP, ['validate', '--json', '--endpoint-type', kind, file]);
      assert.equal(v.code, 0, `${v.stdout}\n${v.stderr}`);
      const checked = JSON.parse(v.stdout);
      assert.deepEqual([checked.ok, checked.passed, checked.failed, checked.sessions, checked.session_rows],
        [true, sessions * TURNS, 0, sessions, sessions * TURNS], v.stdout);
      // AIPerf 0.11.0 has no messages endpoint type: its loader reads that file in a chat run.
      const a = await run('bash', [AIPERF, 'load', file, '--type', 'mooncake_trace', '--endpoint-type', 'chat',
        '--json', `${file}.aiperf.json`]);
      assert.equal(a.code, 0, `${a.stdout}\n${a.stderr}`);
      const loaded = JSON.parse(readFileSync(`${file}.aiperf.json`, 'utf8'));
      assert.deepEqual([loaded.rows_rejected, loaded.conversations, loaded.turns, loaded.multi_turn_sessions, loaded.diff_count,
        loaded.wire_bytes_differ], [[], sessions, sessions * TURNS, sessions, 0, 0], a.stdout);
    }

    // The linked capture replayed to the server: every conversation's turns in order, each after
    // the one before it ended (the causal schedule), with the captured think times.
    const o = join(dir, 'replay');
    const rp = await replay([outPath, '--url', engine.url(), '--outcomes', `${capturePath}.outcomes.ndjson`, '--out', o,
      '--server-metrics', 'off']);
    assert.equal(rp.code, 0, `${rp.stdout}\n${rp.stderr}`);
    const replayed = readLines(join(o, 'requests.jsonl'));
    assert.equal(replayed.length, total);
    for (const l of replayed) {
      assert.equal(l.error, null, JSON.stringify(l));
      assert.equal(l.output_tokens, bySpec.get(truthOf(out[l.index])).maxTokens, JSON.stringify(l));
    }
    const summary = JSON.parse(readFileSync(join(o, 'summary.json'), 'utf8'));
    assert.equal(summary.sessions.turns, total);
    assert.equal(summary.sessions.without_captured_latency, 0);
    console.log(`linked ${report.linked} later turns of ${unnamed.length} header-less conversations: ` +
      `${report.by_response_text} by response text, ${report.ambiguous} guessed ` +
      `(${JSON.stringify(report.guessed)}), ${swapped} sessions swapped at the identical answers`);
  } finally {
    if (!stopped) await stop(proxy);
    cleanup(dir);
  }
});
