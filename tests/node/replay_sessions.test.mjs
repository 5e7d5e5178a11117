// Causal replay of sessions, measured from outside at the upstream: `llmtap replay` sends a
// trace of multi-turn conversations (and sessionless rows) through `llmtap proxy`, which
// captures what reaches it (session ids from the body's `user`, outcomes with latency_ms),
// in front of `llmtap sim`. From that second capture: against a sim 3x slower than the captured
// latencies no turn arrives before its predecessor could have ended (the sim's time to a first
// token after the predecessor reached it, plus the captured think time), while sessionless rows
// keep their schedule; `--schedule timestamps` on the same trace does send turns early (so the
// check can fail); against a sim as fast as the capture no row arrives before its trace time; a
// turn that timed out or failed releases the next one. All processes on free loopback ports,
// stopped by PID.
//
// Nothing here bounds a delay by the wall clock (a loaded machine only adds delay): the checks
// are lower bounds at the upstream (a row never arrives before its time, a turn never before
// the sim could have answered its predecessor), exact relations between the times replay
// itself reports (a turn's due time is its predecessor's end plus the think time, its lag is
// counted from there), and orderings. How late replay sends under load is measured by
// bench/replay_lag.sh, not here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import {
  startSim, startProxy, stop, url, replay, readLines, readManifest, tempDir,
} from './proxy_helpers.mjs';

const CAPTURED_LATENCY_MS = 80;
const SESSIONS = 6;
const TURNS = 4;
const SESSIONLESS = 10;
// A session turn whose captured latency the sidecar lacks (its successor gets no think time).
const NO_LATENCY = { session: 2, turn: 1 };

// The sim with the test timings (startSim), some replaced. max_tokens 8 (7 decode steps after
// the first token): latency ~ ttft + 7 * itl.
// 3x the captured latency: 170 + 7 * 10 = 240 ms.
const SLOW = { '--ttft-ms': '170', '--itl-ms': '10' };
// Faster than captured: 20 + 7 * 3 = 41 ms.
const FAST = { '--ttft-ms': '20', '--itl-ms': '3' };
// The sim never answers sooner than its time to the first token after a request reached it (a
// busy machine only makes it later): the least a turn's predecessor took at the upstream.
const leastResponseMs = (timings) => Number(timings['--ttft-ms']);

// The trace: SESSIONS conversations of TURNS turns, each turn `think` ms after the previous
// one's captured end, interleaved with sessionless rows; and its outcomes sidecar.
function makeTrace(dir) {
  const rows = [];
  for (let s = 0; s < SESSIONS; ++s) {
    let t = 1000 + 45 * s;
    for (let k = 0; k < TURNS; ++k) {
      rows.push({
        timestamp: t,
        payload: {
          model: 'm', max_tokens: 8, user: `conv-${s}`,
          messages: [{ role: 'user', content: `conversation ${s} turn ${k}` }],
        },
        session_id: `conv-${s}`,
      });
      t += CAPTURED_LATENCY_MS + 30 + 20 * ((s + k) % 4);  // think 30..90 ms
    }
  }
  for (let i = 0; i < SESSIONLESS; ++i) {
    rows.push({ timestamp: 1000 + 100 * i + 7, payload: { model: 'm', max_tokens: 8, prompt: `plain ${i}` } });
  }
  rows.sort((a, b) => a.timestamp - b.timestamp);
  const trace = join(dir, 'trace.jsonl');
  writeFileSync(trace, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  // In completion order, as the proxy writes it.
  const outcomes = rows.map((r, i) => ({ r, line: i + 1 }))
    .filter(({ r }) => r.session_id !== undefined &&
      !(r.session_id === `conv-${NO_LATENCY.session}` && r.payload.messages[0].content.endsWith(`turn ${NO_LATENCY.turn}`)))
    .map(({ r, line }) => ({
      line, timestamp: r.timestamp, status: 200, ttft_ms: 20, latency_ms: CAPTURED_LATENCY_MS,
      prompt_tokens: 6, completion_tokens: 8, finish_reason: 'length', cancelled: false, error: null,
    }))
    .sort((a, b) => a.timestamp + a.latency_ms - (b.timestamp + b.latency_ms));
  writeFileSync(`${trace}.outcomes.ndjson`, outcomes.map((o) => JSON.stringify(o)).join('\n') + '\n');
  return { trace, rows };
}

// replay -> proxy (capturing sessions and outcomes) -> sim; the proxy's capture, joined to its
// outcomes, and replay's summary and requests.
async function replayThroughProxy(dir, name, simTimings, replayArgs) {
  const sim = await startSim([], simTimings);
  const capture = join(dir, `${name}.jsonl`);
  let proxy;
  try {
    proxy = await startProxy({
      upstream: url(sim),
      args: ['--capture', '--capture-path', capture, '--outcomes', '--session-fields', 'user'],
    });
    const out = join(dir, `out-${name}`);
    const r = await replay([join(dir, 'trace.jsonl'), '--url', url(proxy),
      '--server-metrics', 'off', '--out', out, ...replayArgs]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    proxy = undefined;
    const rows = readLines(capture);
    const outcomes = readLines(`${capture}.outcomes.ndjson`);
    const byLine = new Map(outcomes.map((o) => [o.line, o]));
    // The capture's timestamps count (whole ms) from its first record, whose wall-clock time the
    // manifest names: each arrival's unix ms, on the clock replay's started_at_unix_ms is on.
    const zero = readManifest(capture).timestamp_zero_unix_ms;
    assert.ok(Number.isInteger(zero), 'the manifest names the capture\'s time zero');
    const arrivals = rows.map((row, i) => {
      const o = byLine.get(i + 1);
      assert.ok(o && o.timestamp === row.timestamp && o.status === 200, `outcome of line ${i + 1}`);
      return { ...row, latency_ms: o.latency_ms, unix_ms: zero + row.timestamp };
    });
    const summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
    const requests = readFileSync(join(out, 'requests.jsonl'), 'utf8').split('\n')
      .filter((l) => l !== '').map((l) => JSON.parse(l));
    return { arrivals, summary, requests, stdout: r.stdout };
  } finally {
    if (proxy) await stop(proxy);
    await stop(sim);
  }
}

// The trace row of an arrival (payloads are unique).
function traceRowOf(rows, arrival) {
  const key = JSON.stringify(arrival.payload);
  return rows.find((r) => JSON.stringify(r.payload) === key);
}

// A turn's think time in the trace: from its predecessor's captured end (timestamp + captured
// latency) to its own timestamp; none after the turn whose latency the sidecar lacks (replay
// then sends the next turn at that turn's end).
function thinkOf(rows, id, k) {
  const turns = rows.filter((r) => r.session_id === id);
  if (id === `conv-${NO_LATENCY.session}` && k - 1 === NO_LATENCY.turn) return 0;
  return Math.max(0, turns[k].timestamp - (turns[k - 1].timestamp + CAPTURED_LATENCY_MS));
}

// Turns that reached the upstream before their predecessor could have ended there plus the
// captured think time. The bound is a lower one that no load can break: the predecessor reached
// the proxy (its arrival stamp) before the sim got it, the sim answered no sooner than
// `leastMs` after that, and replay waited the think time after the end before sending. The
// stamps are whole ms (2 ms of slack). Ignoring causality or think time is off by far more
// (think times are 30-90 ms; at --schedule timestamps turns come 80 + think ms apart, the slow
// sim needs 170 + think).
const STAMP_SLACK_MS = 2;

function earlyTurns(rows, arrivals, leastMs) {
  const early = [];
  for (const id of new Set(rows.filter((r) => r.session_id !== undefined).map((r) => r.session_id))) {
    // The session's turns in trace order, each with its arrival.
    const turns = rows.filter((r) => r.session_id === id)
      .map((r) => arrivals.find((a) => traceRowOf(rows, a) === r));
    for (let k = 1; k < turns.length; ++k) {
      const least = turns[k - 1].timestamp + leastMs + thinkOf(rows, id, k);
      if (turns[k].timestamp < least - STAMP_SLACK_MS) early.push(`${id} turn ${k}: ${turns[k].timestamp} < ${least}`);
    }
  }
  return early;
}

// No row reached the upstream before its trace time on replay's schedule (time zero
// started_at_unix_ms). A lower bound: load only makes arrivals later. Slack: both stamps are
// whole ms, and the two processes map their monotonic clocks to the wall clock apart.
const WALL_SLACK_MS = 5;

function checkNoneEarly(rows, arrivals, summary) {
  const first = rows[0].timestamp;
  for (const a of arrivals) {
    const due = summary.started_at_unix_ms + (traceRowOf(rows, a).timestamp - first);
    assert.ok(a.unix_ms >= due - WALL_SLACK_MS,
      `${a.session_id ?? 'sessionless'}: arrived ${due - a.unix_ms} ms before its trace time`);
  }
}

// replay's own report, exactly: every row is scheduled at its trace time (from the first row)
// plus its causal shift; a session turn's due time is its predecessor's end (done_ms) plus the
// captured think time, or its trace time when that is later; every lag is counted from the due
// time; nothing goes before it. Times are rounded to the microsecond in requests.jsonl.
const ROUND_MS = 0.002;

function checkReplayReport(rows, requests) {
  const first = rows[0].timestamp;
  const near = (a, b) => Math.abs(a - b) < ROUND_MS;
  const byIndex = new Map(requests.map((q) => [q.index, q]));
  assert.equal(byIndex.size, rows.length);
  for (const q of requests) {
    const plan = rows[q.index].timestamp - first;
    assert.ok(q.sent_ms !== null && q.error === null, JSON.stringify(q));
    assert.ok(near(q.scheduled_ms - (q.causal_shift_ms ?? 0), plan), `row ${q.index}: scheduled ${q.scheduled_ms}, planned ${plan}`);
    assert.ok(q.sent_ms >= q.scheduled_ms, `row ${q.index}: sent ${q.sent_ms} before its due time ${q.scheduled_ms}`);
    assert.ok(near(q.lag_ms, q.sent_ms - q.scheduled_ms), `row ${q.index}: lag ${q.lag_ms}, sent ${q.sent_ms}, due ${q.scheduled_ms}`);
  }
  const sessions = new Set(rows.filter((r) => r.session_id !== undefined).map((r) => r.session_id));
  for (const id of sessions) {
    const turns = rows.map((r, i) => [r, i]).filter(([r]) => r.session_id === id).map(([, i]) => byIndex.get(i));
    assert.equal(turns[0].causal_shift_ms, 0, `${id} turn 0`);
    for (let k = 1; k < turns.length; ++k) {
      const plan = rows[turns[k].index].timestamp - first;
      const due = Math.max(plan, turns[k - 1].done_ms + thinkOf(rows, id, k));
      assert.ok(near(turns[k].scheduled_ms, due),
        `${id} turn ${k}: due ${turns[k].scheduled_ms}, want max(trace time ${plan}, predecessor's end ` +
        `${turns[k - 1].done_ms} + think ${thinkOf(rows, id, k)})`);
      assert.ok(turns[k].sent_ms >= turns[k - 1].done_ms, `${id} turn ${k}: sent before its predecessor ended`);
    }
  }
}

// Sessionless rows are never held behind a session's turn: each goes out before every turn
// that was planned before it but released (its causal due time) at least HELD_MARGIN_MS after
// the row's own time. Held behind such a turn, the row would go out after it. Both send times
// are replay's own, on one clock: only a difference of more than the margin between the two
// rows' lags could break the order.
const HELD_MARGIN_MS = 150;

function checkSessionlessNotHeld(rows, requests) {
  const first = rows[0].timestamp;
  const plan = (q) => rows[q.index].timestamp - first;
  const plain = requests.filter((q) => rows[q.index].session_id === undefined);
  const turns = requests.filter((q) => rows[q.index].session_id !== undefined);
  assert.equal(plain.length, SESSIONLESS);
  let pairs = 0;
  for (const r of plain) {
    for (const t of turns) {
      if (plan(t) >= plan(r) || t.scheduled_ms < plan(r) + HELD_MARGIN_MS) continue;
      ++pairs;
      assert.ok(r.sent_ms < t.sent_ms, `sessionless row ${r.index} (due ${plan(r)}) sent at ${r.sent_ms}, ` +
        `after turn ${t.index} (planned ${plan(t)}, released ${t.scheduled_ms}) at ${t.sent_ms}`);
    }
  }
  return pairs;
}

test('causal replay against a sim 3x slower than the capture: no turn before its predecessor ended', async () => {
  const dir = tempDir();
  try {
    const { rows } = makeTrace(dir);
    const { arrivals, summary, requests, stdout } = await replayThroughProxy(dir, 'causal', SLOW, []);
    assert.equal(arrivals.length, rows.length);
    // At the upstream: no turn before the sim could have answered its predecessor and the think
    // time passed; no row before its trace time.
    assert.deepEqual(earlyTurns(rows, arrivals, leastResponseMs(SLOW)), []);
    checkNoneEarly(rows, arrivals, summary);
    // In replay's report: each turn due at its predecessor's end plus the think time (a moved
    // turn's lag counted from there, not from its trace time), sessionless rows at their trace
    // time and never held behind a turn that waited.
    checkReplayReport(rows, requests);
    assert.ok(checkSessionlessNotHeld(rows, requests) > 0, 'some sessionless row came while a turn waited');
    // The report: every turn after the first of each session moved (the sim takes at least
    // 170 ms where the capture took 80).
    const s = summary.sessions;
    assert.equal(s.schedule, 'causal');
    assert.equal(s.turns, SESSIONS * TURNS);
    assert.ok(s.moved >= SESSIONS * (TURNS - 1), JSON.stringify(s));
    assert.equal(s.causal_shift_ms.count, s.moved);
    assert.ok(s.causal_shift_ms.p50 > 50 && s.causal_shift_ms.max >= s.causal_shift_ms.p99, JSON.stringify(s));
    assert.equal(s.without_captured_latency, 1);
    assert.match(stdout, /sessions \(causal schedule\): 24 turns, \d+ moved by causality \(shift ms: p50/);
    assert.match(stdout, /outcomes: .*trace\.jsonl\.outcomes\.ndjson: \d+ rows joined to their outcome/);
    // Shifts add up along a session: a third turn waits for two slow answers.
    const moved = requests.filter((q) => q.endpoint === 'chat' && q.causal_shift_ms > 0);
    assert.ok(moved.some((q) => q.causal_shift_ms > 150), JSON.stringify(moved.map((q) => q.causal_shift_ms)));

    // The same trace on the timestamps alone sends turns before their predecessor ended.
    const plain = await replayThroughProxy(dir, 'timestamps', SLOW, ['--schedule', 'timestamps']);
    const early = earlyTurns(rows, plain.arrivals, leastResponseMs(SLOW));
    assert.ok(early.length >= SESSIONS, early.join('\n'));
    assert.equal(plain.summary.sessions.schedule, 'timestamps');
    assert.equal(plain.summary.sessions.moved, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('causal replay against a sim as fast as the capture: no row arrives before its trace time', async () => {
  const dir = tempDir();
  try {
    const { rows } = makeTrace(dir);
    const { arrivals, summary, requests } = await replayThroughProxy(dir, 'fast', FAST, []);
    assert.equal(arrivals.length, rows.length);
    // The fast sim's answers end before the captured ones did: each turn is due at its trace
    // time (later only when load made its predecessor end late), never before it (a turn due at
    // its predecessor's real end plus the think time would reach the upstream 39 ms early); and
    // the due-time rule holds exactly in replay's report (a turn due at its predecessor's end
    // plus the whole trace gap would be 41 ms off it).
    checkNoneEarly(rows, arrivals, summary);
    assert.deepEqual(earlyTurns(rows, arrivals, leastResponseMs(FAST)), []);
    checkReplayReport(rows, requests);
    checkSessionlessNotHeld(rows, requests);
    assert.equal(summary.sessions.turns, SESSIONS * TURNS);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a turn that timed out or failed still releases the next turn of its session', async () => {
  const dir = tempDir();
  // Every response takes 60 s to its first token, and the replay gives up after 1 s: every
  // answered turn times out, whatever the load. The failing turn's 400 comes at once, and it has
  // that second to come (at a 0.2 s timeout a loaded machine could time it out too).
  const sim = await startSim([], { '--ttft-ms': '60000' });
  try {
    const rows = [];
    for (let k = 0; k < 3; ++k) {
      for (const s of ['x', 'y']) {
        rows.push({ timestamp: 50 * k + (s === 'y' ? 10 : 0), session_id: s,
          payload: { model: 'm', max_tokens: 8, messages: [{ role: 'user', content: `${s} ${k}` }] } });
      }
    }
    // One turn of y fails at once instead (400: max_tokens above the model's length).
    rows[3].payload.max_tokens = 1 << 30;
    const trace = join(dir, 'failing.jsonl');
    writeFileSync(trace, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const out = join(dir, 'out');
    const r = await replay([trace, '--url', url(sim), '--request-timeout', '1',
      '--server-metrics', 'off', '--out', out]);
    assert.equal(r.code, 1, r.stdout + r.stderr);  // requests failed
    const requests = readFileSync(join(out, 'requests.jsonl'), 'utf8').split('\n')
      .filter((l) => l !== '').map((l) => JSON.parse(l)).sort((a, b) => a.index - b.index);
    assert.equal(requests.length, 6);
    assert.deepEqual(requests.map((q) => q.error),
      ['timeout', 'timeout', 'timeout', 'http_4xx', 'timeout', 'timeout']);
    for (const s of [0, 1]) {
      const turns = requests.filter((q) => q.index % 2 === s);
      for (let k = 1; k < turns.length; ++k) {
        assert.ok(turns[k].sent_ms >= turns[k - 1].done_ms,
          `session ${s} turn ${k}: sent ${turns[k].sent_ms} before ${turns[k - 1].done_ms}`);
      }
    }
    // y's second turn failed at once, so y's third went out right after it, about a second
    // before x's third (which waited for two timeouts): only a 400 that took that second would
    // reverse them, and it would have timed out (checked above).
    assert.ok(requests[5].sent_ms < requests[4].sent_ms, JSON.stringify(requests.map((q) => q.sent_ms)));
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});
