// `llmtap sessions` on real multi-turn traffic: the `openai` npm client holds many
// conversations at once through `llmtap proxy` (capture and outcomes on, in front of
// `llmtap sim`): chats and agent loops (the client sends `tools`; after an answer it appends
// the assistant message with tool_calls and the tool results, and continues), 2 to 10
// requests each, half of them streamed, several sharing one system prompt and some the same
// first user message; some name themselves by an x-session-id header (recorded at capture),
// most do not.
// `llmtap sessions` must put each header-less conversation's rows under one id of their own
// (every turn right, and no id shared by two conversations: see the look-alike gate below),
// leave header rows exactly as captured, and keep every other byte and the row order.
//
// The test knows each request's conversation from the `user` field it sends ("truth-<n>"),
// which the proxy does not read (no session_fields) and `llmtap sessions` ignores (it reads
// only `messages`). Agent turns ask for a tool call (tool_choice "required"): the sim answers
// with an assistant message holding tool_calls, which the client appends as returned, followed
// by the tool results.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  LLMTAP, startSim, startProxy, stop, url, readLines, run, tempDir, cleanup,
} from './proxy_helpers.mjs';
import { TOOLS, rng, sleep, streamed, waitRecorded } from './conversations.mjs';


const SYSTEMS = [
  'You are a support agent for a GPU cloud. Be brief.',
  'You are a coding agent. Use tools when needed.',
  'You are a travel assistant.',
];
const SHARED_FIRST = 'Hello, I need help.';

// One conversation: `turns` requests, each the whole conversation so far. Agent turns append
// the answer as a tool call plus its results and send again without a new user message.
// `spec.onDiverged` is called once the conversation can no longer be mistaken for a look-alike:
// when a request holding one of its own (random) follow-ups has been answered, or at its end.
async function converse(api, spec, random) {
  const messages = [{ role: 'system', content: spec.system }];
  spec.turnTimes = [];  // the client's own clock: when each turn was sent and answered
  messages.push({ role: 'user', content: spec.first });
  let ownWords = false;  // `messages` holds a follow-up of this conversation's own
  for (let t = 0; t < spec.turns; ++t) {
    const body = { model: 'm', messages: structuredClone(messages), max_tokens: 8, user: spec.truth };
    const toolTurn = spec.agent && t % 3 !== 2;
    if (spec.agent) body.tools = TOOLS;
    if (toolTurn) body.tool_choice = 'required';
    const sent = Date.now();
    const r = spec.stream ? await streamed(api, body) : await api.chat.completions.create(body);
    spec.turnTimes.push({ sent, answered: Date.now() });
    if (ownWords) spec.onDiverged?.();
    const answer = r.choices[0].message;  // appended as returned, as clients do
    if (toolTurn) {
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      const call = answer.tool_calls[0];
      assert.equal(call.function.name, 'lookup');
      const args = JSON.parse(call.function.arguments);
      messages.push(answer);
      messages.push({ role: 'tool', tool_call_id: call.id, content: `result ${t} for ${args.input}` });
      if (t % 2 === 1) messages.push({ role: 'tool', tool_call_id: call.id, content: 'second result' });
    } else {
      messages.push(answer);
      messages.push({ role: 'user', content: `follow-up ${t + 1} (${Math.floor(random() * 1e9)})` });
      ownWords = true;
    }
    await sleep(Math.floor(random() * 15));  // think time
  }
  spec.onDiverged?.();
}

test('sessions: header-less conversations linked from content, named ones kept', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const outPath = join(dir, 'requests.sessions.jsonl');
  const sim = await startSim();
  let proxy;
  try {
    proxy = await startProxy({
      upstream: url(sim),
      args: ['--capture', '--capture-path', capturePath, '--outcomes', '--session-headers', 'x-session-id'],
    });
    const random = rng(16);
    const specs = [];
    for (let i = 0; i < 40; ++i) {
      specs.push({
        truth: `truth-${i}`,
        system: SYSTEMS[i % SYSTEMS.length],
        // Every fourth conversation opens with the same words as the others that do.
        first: i % 4 === 0 ? SHARED_FIRST : `Question ${i}: ${Math.floor(random() * 1e6)}`,
        turns: 2 + (i * 7) % 9,  // 2..10
        agent: i % 3 === 1,
        stream: i % 2 === 1,  // half the agents and chats stream their answers
        header: i % 5 === 2 ? `hdr-${i}` : null,
      });
    }
    // Of the conversations that open with the same messages (look-alikes), each starts once
    // the one before has diverged: one of its requests holding a follow-up of its own has been
    // answered, or it has ended. The sim answers the same messages the same way, so agents
    // (two tool turns and a chat turn before their first follow-up) send the same three
    // requests. Two look-alikes that both sent a request and had it answered cannot be told
    // apart when one of them continues (`llmtap sessions` then guesses the one answered last;
    // see --help), so without this gate which one continues depends on timing, and load
    // changes it. With it, every later turn has one right predecessor that the rule finds:
    // the only one ending with its messages, or (a finished look-alike's last turn, repeated)
    // the one answered last, which the gate makes the right one. So every link is asserted.
    const firstGate = new Map();
    const runs = specs.map(async (spec) => {
      const key = `${spec.system}|${spec.first}`;
      const before = firstGate.get(key) ?? Promise.resolve();
      let release;
      firstGate.set(key, new Promise((r) => { release = r; }));
      spec.onDiverged = () => { release(); spec.onDiverged = undefined; };
      await before;
      await sleep(Math.floor(random() * 20));
      const api = new OpenAI({
        baseURL: url(proxy, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 120000,
        defaultHeaders: spec.header ? { 'x-session-id': spec.header } : {},
      });
      await converse(api, spec, rng(1000 + specs.indexOf(spec)));
    });
    await Promise.all(runs);
    const total = specs.reduce((n, s) => n + s.turns, 0);
    await waitRecorded(proxy, total);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    proxy = undefined;

    const r = await run(LLMTAP, ['sessions', capturePath, '-o', outPath, '--json']);
    assert.equal(r.code, 0, `llmtap sessions:\n${r.stdout}\n${r.stderr}`);
    const report = JSON.parse(r.stdout);
    assert.equal(report.outcomes.path, `${capturePath}.outcomes.ndjson`);
    assert.equal(report.outcomes.matched, total);

    const inLines = readFileSync(capturePath, 'utf8').split('\n').filter((l) => l !== '');
    const outLines = readFileSync(outPath, 'utf8').split('\n').filter((l) => l !== '');
    assert.equal(inLines.length, total);
    assert.equal(outLines.length, total);
    const out = readLines(outPath);
    const bySpec = new Map(specs.map((s) => [s.truth, s]));
    const idsOf = new Map();  // truth -> ids seen on its rows
    const truthsOf = new Map();  // id -> truths whose rows carry it
    let headerless = 0, right = 0;
    const firstId = new Map();  // truth -> id of its first row
    for (let i = 0; i < total; ++i) {
      const spec = bySpec.get(out[i].payload.user);
      const id = out[i].session_id;
      if (spec.header) {
        // Named at capture: the row is exactly as captured.
        assert.equal(outLines[i], inLines[i], `line ${i + 1}`);
        assert.equal(id, spec.header);
        continue;
      }
      // The captured row with `,"session_id":"<id>"` before its final brace, nothing else.
      assert.equal(outLines[i], `${inLines[i].slice(0, -1)},"session_id":${JSON.stringify(id)}}`);
      assert.match(id, /^conv-\d+$/);
      if (!idsOf.has(spec.truth)) idsOf.set(spec.truth, new Set());
      idsOf.get(spec.truth).add(id);
      if (!truthsOf.has(id)) truthsOf.set(id, new Set());
      truthsOf.get(id).add(spec.truth);
      if (!firstId.has(spec.truth)) {
        firstId.set(spec.truth, id);
        assert.equal(id, `conv-${i + 1}`, 'an id names the line of its first turn');
      } else {
        ++headerless;
        if (id === firstId.get(spec.truth)) ++right;
      }
    }
    // 0 turns of different conversations under one id.
    for (const [id, truths] of truthsOf) {
      assert.equal(truths.size, 1, `${id} holds rows of ${[...truths].join(', ')}`);
    }
    const unnamed = specs.filter((s) => !s.header);
    assert.equal(headerless, unnamed.reduce((n, s) => n + s.turns - 1, 0));
    assert.equal(right, headerless, `${right} of ${headerless} later turns linked right`);
    assert.equal(report.sessions, unnamed.length);
    assert.equal(report.linked, headerless);
    assert.equal(report.unlinked, 0);
    assert.equal(report.named_rows, total - unnamed.reduce((n, s) => n + s.turns, 0));
    assert.equal(report.turns_per_session.max, Math.max(...unnamed.map((s) => s.turns)));
    assert.equal(report.turns_per_session.min, Math.min(...unnamed.map((s) => s.turns)));
    assert.ok(report.think_time_ms.count === headerless, 'every link has a think time');
    // A think time is from the proxy's end of a turn to its receipt of the next one, so it lies
    // within what the client saw from sending a turn to the answer of the next: a bound from
    // the client's own clock that load moves with it (a fixed one failed under load). 3 ms:
    // the capture's whole-millisecond timestamps.
    let outer = 0;
    for (const s of unnamed) {
      for (let t = 1; t < s.turnTimes.length; ++t) {
        outer = Math.max(outer, s.turnTimes[t].answered - s.turnTimes[t - 1].sent);
      }
    }
    assert.ok(report.think_time_ms.min >= 0 && report.think_time_ms.max <= outer + 3,
      `${JSON.stringify(report.think_time_ms)} against ${outer} ms seen by the client`);
    console.log(`linked ${right}/${headerless} later turns of ${unnamed.length} header-less ` +
      `conversations right; ${report.ambiguous} picked among look-alikes, ${report.late} ` +
      'whose predecessor\'s recorded end was after them');

    // Never overwrites silently; --force does.
    const again = await run(LLMTAP, ['sessions', capturePath, '-o', outPath]);
    assert.equal(again.code, 2);
    assert.match(again.stderr, /--force/);
    assert.equal((await run(LLMTAP, ['sessions', capturePath, '-o', outPath, '--force'])).code, 0);
  } finally {
    if (proxy) await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

test('sessions: --help explains the rule; usage errors exit 2', async () => {
  const help = await run(LLMTAP, ['sessions', '--help']);
  assert.equal(help.code, 0);
  for (const words of ['Linking rule', 'tool_calls', '--window', 'Exit codes', 'outcomes']) {
    assert.ok(help.stdout.includes(words), words);
  }
  const bad = await run(LLMTAP, ['sessions', '/nonexistent/requests.jsonl', '-o', '/tmp/x.jsonl', '--window', 'soon']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--window soon/);
  const dir = tempDir();
  try {
    const missing = await run(LLMTAP, ['sessions', '/nonexistent/requests.jsonl', '-o', join(dir, 'o.jsonl')]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /\/nonexistent\/requests\.jsonl/);
  } finally {
    cleanup(dir);
  }
});
