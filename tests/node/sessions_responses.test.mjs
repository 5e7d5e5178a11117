// `llmtap sessions` telling look-alike conversations apart by the response text: 12
// conversations of 3 turns whose first turns are identical (same system prompt, same first
// user message), driven by the `openai` npm client through `llmtap proxy --capture-responses`
// in front of `llmtap sim`. Half stream their answers; a third are agent loops whose first two
// answers are tool calls (tool_choice "required"; the client appends the assistant message
// with tool_calls as returned, then a tool result). Each conversation sends its own OpenAI
// `seed`, which the sim mixes into its answer (a sampling server's answers differ too), while
// `llmtap sessions` reads only `messages`: the rows stay look-alikes.
//
// Every conversation's first turn is answered before any sends its second, and the second
// turns go out in shuffled order: by their messages and times alone the 12 cannot be told
// apart (the time rule picks the one answered last). The assistant message at the join point
// is the predecessor's answer, which the sidecar holds: every later turn must be linked right,
// 11 of them certain by the response text (the last of the 12 is alone by then) and none
// guessed. The same capture without the response text is linked by the old rule (guesses,
// counted). With --max-response-bytes cutting the long answers, those fall back to the old
// rule and are counted; the short ones are still linked by text.
//
// The test knows each request's conversation from the `user` field it sends ("truth-<n>"),
// which the proxy and `llmtap sessions` ignore.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  LLMTAP, startSim, startProxy, stop, url, readLines, run, tempDir, cleanup, metricsSettled,
} from './proxy_helpers.mjs';
import { TOOLS, rng, sleep, streamed, waitRecorded } from './conversations.mjs';

const SYSTEM = 'You are a support agent for a GPU cloud. Be brief.';
const FIRST = 'My training job is stuck at 0 %. What should I check?';
const CONVERSATIONS = 12;
const TURNS = 3;

// Turn `t` of one conversation: sends the conversation so far, appends the answer as returned
// (and a tool result, or the next user message).
async function turn(api, spec, t) {
  const body = {
    model: 'm', messages: structuredClone(spec.messages), user: spec.truth, seed: spec.seed,
  };
  if (spec.maxTokens) body.max_tokens = spec.maxTokens;
  const toolTurn = spec.agent && t < 2;
  if (spec.agent) body.tools = TOOLS;
  if (toolTurn) body.tool_choice = 'required';
  const r = spec.stream ? await streamed(api, body) : await api.chat.completions.create(body);
  const answer = r.choices[0].message;
  spec.messages.push(answer);
  if (toolTurn) {
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    const call = answer.tool_calls[0];
    assert.equal(call.function.name, 'lookup');
    spec.messages.push({ role: 'tool', tool_call_id: call.id, content: 'No results.' });
  } else {
    assert.ok(answer.content, 'a text answer');
    spec.messages.push({ role: 'user', content: 'That did not help. What next?' });
  }
}

// Runs the 12 conversations through a proxy (its extra flags `proxyArgs`) in front of `sim`;
// returns the specs and the capture's path. Each turn: all conversations, in shuffled order a
// few ms apart; the next turn only once every answer of this one is back.
async function capture(sim, dir, proxyArgs, specOf) {
  const capturePath = join(dir, 'requests.jsonl');
  const proxy = await startProxy({
    upstream: url(sim),
    args: ['--capture', '--capture-path', capturePath, '--capture-responses', ...proxyArgs],
  });
  try {
    const specs = [];
    for (let i = 0; i < CONVERSATIONS; ++i) {
      specs.push({
        truth: `truth-${i}`, seed: 1000 + i, stream: i % 2 === 1, agent: i % 3 === 0,
        messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: FIRST }],
        ...specOf(i),
      });
    }
    const api = new OpenAI({ baseURL: url(proxy, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 30000 });
    const random = rng(35);
    for (let t = 0; t < TURNS; ++t) {
      const order = specs.map((s) => ({ s, k: random() })).sort((a, b) => a.k - b.k);
      await Promise.all(order.map(async ({ s }, n) => {
        await sleep(n * 3);
        await turn(api, s, t);
      }));
      // Until the proxy has ended (and so timed) every request of this turn: it does that after
      // the answer's last bytes went out, so possibly after the client read them, and a next
      // turn that arrived first would find its predecessor recorded as ending after it (not a
      // candidate: a look-alike's would be picked instead). Then every end recorded is before
      // any request of the next turn.
      await metricsSettled(proxy);
    }
    await waitRecorded(proxy, CONVERSATIONS * TURNS);
  } finally {
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  }
  return capturePath;
}

// `llmtap sessions` on the capture (with `args`); returns its JSON report and, per
// conversation, how many of its later turns carry the id of its first.
async function infer(capturePath, outPath, args = []) {
  const r = await run(LLMTAP, ['sessions', capturePath, '-o', outPath, '--json', ...args]);
  assert.equal(r.code, 0, `llmtap sessions:\n${r.stdout}\n${r.stderr}`);
  const report = JSON.parse(r.stdout);
  const firstId = new Map();
  const right = new Map();  // truth -> later turns linked right
  for (const row of readLines(outPath)) {
    const truth = row.payload.user;
    if (!firstId.has(truth)) {
      firstId.set(truth, row.session_id);
      right.set(truth, 0);
    } else if (row.session_id === firstId.get(truth)) {
      right.set(truth, right.get(truth) + 1);
    }
  }
  const total = [...right.values()].reduce((a, b) => a + b, 0);
  return { report, right, total };
}

const LATER = CONVERSATIONS * (TURNS - 1);

test('sessions: identical first turns told apart by the response text', async () => {
  const dir = tempDir();
  const sim = await startSim();
  try {
    const capturePath = await capture(sim, dir, [], () => ({}));
    const sidecar = readLines(`${capturePath}.outcomes.ndjson`);
    assert.equal(sidecar.length, CONVERSATIONS * TURNS);
    for (const o of sidecar) assert.equal(o.response.truncated, false);
    // The rows are look-alikes: all first turns carry the same messages.
    const rows = readLines(capturePath);
    const firsts = new Set(rows.filter((r) => r.payload.messages.length === 2)
      .map((r) => JSON.stringify(r.payload.messages)));
    assert.equal(firsts.size, 1);

    const { report, total } = await infer(capturePath, join(dir, 'out.jsonl'));
    assert.equal(report.outcomes.matched, CONVERSATIONS * TURNS);
    assert.equal(report.sessions, CONVERSATIONS);
    assert.equal(report.linked, LATER);
    assert.equal(total, LATER, `${total} of ${LATER} later turns linked right`);
    assert.equal(report.by_response_text, CONVERSATIONS - 1);
    assert.equal(report.ambiguous, 0);
    assert.deepEqual(report.guessed, { no_response_text: 0, truncated: 0, no_match: 0, same_answer: 0 });

    // The same capture without the response text: the old rule, its guesses counted.
    const plain = join(dir, 'plain.outcomes.ndjson');
    writeFileSync(plain, sidecar.map((o) => {
      delete o.response;
      return JSON.stringify(o);
    }).join('\n') + '\n');
    const old = await infer(capturePath, join(dir, 'old.jsonl'), ['--outcomes', plain]);
    assert.equal(old.report.linked, LATER);
    assert.equal(old.report.by_response_text, 0);
    assert.equal(old.report.ambiguous, CONVERSATIONS - 1);
    assert.equal(old.report.guessed.no_response_text, CONVERSATIONS - 1);
    console.log(`response text: ${total}/${LATER} later turns right, ${report.by_response_text} ` +
      `by text, 0 guessed; without it: ${old.total}/${LATER} right, ${old.report.ambiguous} guessed`);
  } finally {
    await stop(sim);
    cleanup(dir);
  }
});

test('sessions: answers cut at max_response_bytes fall back to the old rule, counted', async () => {
  const dir = tempDir();
  // Long answers (about 40 tokens of some 6 bytes) unless the request caps them at 4 tokens.
  const sim = await startSim([], { '--output-tokens-mean': '40' });
  try {
    // Short answers (about 25 bytes of text, or 45 of tool call) fit in 100 bytes; long ones
    // are cut. Short and long each: streamed and not, chat and agent.
    const short = (i) => Math.floor(i / 2) % 2 === 0;
    const capturePath = await capture(sim, dir, ['--max-response-bytes', '100'],
      (i) => (short(i) ? { maxTokens: 4 } : {}));
    const rows = readLines(capturePath);
    const sidecar = readLines(`${capturePath}.outcomes.ndjson`);
    for (const o of sidecar) {
      const i = Number(rows[o.line - 1].payload.user.slice('truth-'.length));
      assert.equal(o.response.truncated, !short(i), `line ${o.line} (conversation ${i})`);
    }

    const { report, right, total } = await infer(capturePath, join(dir, 'out.jsonl'));
    assert.equal(report.linked, LATER);
    // Every second turn but the last one sent had look-alikes: by text when its predecessor's
    // answer was whole, a guess among the cut ones when it was cut.
    assert.equal(report.by_response_text + report.ambiguous, CONVERSATIONS - 1);
    assert.ok(report.by_response_text >= CONVERSATIONS / 2 - 1, JSON.stringify(report));
    assert.ok(report.guessed.truncated >= CONVERSATIONS / 2 - 1, JSON.stringify(report));
    assert.equal(report.guessed.truncated, report.ambiguous);
    for (let i = 0; i < CONVERSATIONS; ++i) {
      if (short(i)) assert.equal(right.get(`truth-${i}`), TURNS - 1, `conversation ${i}`);
    }
    console.log(`cut answers: ${total}/${LATER} later turns right, ${report.by_response_text} by ` +
      `text, ${report.guessed.truncated} guessed (text cut)`);
  } finally {
    await stop(sim);
    cleanup(dir);
  }
});
