// Causal replay of sessions, measured from outside at the upstream: `llmtap replay` sends a
// trace of multi-turn conversations (and sessionless rows) through `llmtap proxy`, which
// captures what reaches it (session ids from the body's `user`, outcomes with latency_ms),
// in front of `llmtap sim`. From that second capture: against a sim 3x slower than the captured
// latencies no turn arrives before its predecessor's response ended (plus the captured think
// time), while sessionless rows keep their schedule; `--schedule timestamps` on the same trace
// does send turns early (so the check can fail); against a sim as fast as the capture every row
// arrives at its trace time; a turn that timed out or failed releases the next one. All
// processes on free loopback ports, stopped by PID.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import {
  startSim, startProxy, stop, url, replay, readLines, tempDir,
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
  writeFileSync(`${trace}.outcomes.jsonl`, outcomes.map((o) => JSON.stringify(o)).join('\n') + '\n');
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
    const outcomes = readLines(`${capture}.outcomes.jsonl`);
    const byLine = new Map(outcomes.map((o) => [o.line, o]));
    const arrivals = rows.map((row, i) => {
      const o = byLine.get(i + 1);
      assert.ok(o && o.timestamp === row.timestamp && o.status === 200, `outcome of line ${i + 1}`);
      return { ...row, latency_ms: o.latency_ms };
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

// Each session's turns as they reached the upstream, in order.
function turnsBySession(arrivals) {
  const by = new Map();
  for (const a of arrivals) {
    if (a.session_id === undefined) continue;
    if (!by.has(a.session_id)) by.set(a.session_id, []);
    by.get(a.session_id).push(a);
  }
  return by;
}

// The trace row of an arrival (payloads are unique).
function traceRowOf(rows, arrival) {
  const key = JSON.stringify(arrival.payload);
  return rows.find((r) => JSON.stringify(r.payload) === key);
}

// Turns that reached the upstream before their predecessor's response had ended there. The
// capture's timestamp is taken when the body is read, after the request head (latency_ms's
// start), and is whole ms: 2 ms of slack.
// The proxy's clock for "the predecessor ended" is its arrival stamp (whole ms) plus its
// latency_ms, which ends after its last write completes and its observers ran; replay sees the end
// when the last bytes arrive, which can come first by a few ms under ThreadSanitizer (a turn once
// measured 1.8 ms "early" there), and by 14 ms once with four test programs sharing two cores:
// the proxy's stamp lagged. Ignoring causality or think time would be off by 30 ms or more
// (think times are 30-90 ms, the slow sim's responses 160 ms longer than captured).
const SLACK_MS = 20;

function earlyTurns(arrivals) {
  const early = [];
  for (const [id, turns] of turnsBySession(arrivals)) {
    for (let k = 1; k < turns.length; ++k) {
      const end = turns[k - 1].timestamp + turns[k - 1].latency_ms;
      if (turns[k].timestamp < end - SLACK_MS) early.push(`${id} turn ${k}: ${turns[k].timestamp} < ${end}`);
    }
  }
  return early;
}

// On schedule at the upstream: a row arrives no more than EARLY_MS before its trace time (early
// is what a wrong schedule does: against the fast sim, turns due at their predecessor's end plus
// think time would come 39 ms early), and no more than LATE_MS after it one by one, with the
// median within EARLY_MS (a schedule late by a constant, such as a turn due after its
// predecessor's real end plus the whole trace gap, +41 ms, moves the median). LATE_MS is for a
// loaded machine: with four test programs on two cores and a compiler at nice 19, one sessionless
// row's send or stamp came 37 ms late. A sessionless row held behind a causal turn would be 160 ms
// or more late (the slow sim's responses are 160 ms longer than captured).
const EARLY_MS = 25;
const LATE_MS = 60;

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// Each arrival's offset from its trace time (ms), from the median offset of the sessionless rows
// (never held back: theirs is the replay's start alone). A stamp late under load moves only its
// own row, where a gap from the first arrival moved every row when the first was late.
function arrivalOffsets(rows, arrivals) {
  const offset = (a) => a.timestamp - traceRowOf(rows, a).timestamp;
  const base = median(arrivals.filter((a) => a.session_id === undefined).map(offset));
  return arrivals.map((a) => ({ who: a.session_id ?? 'sessionless', off: offset(a) - base }));
}

function checkOnSchedule(offsets) {
  for (const { who, off } of offsets) {
    assert.ok(off >= -EARLY_MS && off <= LATE_MS, `${who}: arrived ${off} ms from its trace time`);
  }
  const m = median(offsets.map((o) => o.off));
  assert.ok(Math.abs(m) <= EARLY_MS, `median ${m} ms from the trace times`);
}

// Sessionless rows keep their trace times at the upstream and their lag in replay's report.
function checkSessionlessKeepSchedule(rows, arrivals, requests) {
  const plain = arrivalOffsets(rows, arrivals).filter((o) => o.who === 'sessionless');
  assert.equal(plain.length, SESSIONLESS);
  checkOnSchedule(plain);
  const first = rows[0].timestamp;
  const lags = [];
  for (const r of requests.filter((q) => q.endpoint === 'completions')) {
    assert.ok(Math.abs(r.scheduled_ms - (rows[r.index].timestamp - first)) < 1e-6, `scheduled ${r.index}`);
    assert.ok(r.lag_ms >= 0 && r.lag_ms < LATE_MS, `sessionless lag ${r.lag_ms}`);
    lags.push(r.lag_ms);
  }
  assert.ok(median(lags) < EARLY_MS, `sessionless lags ${lags}`);
}

test('causal replay against a sim 3x slower than the capture: no turn before its predecessor ended', async () => {
  const dir = tempDir();
  try {
    const { rows } = makeTrace(dir);
    const { arrivals, summary, requests, stdout } = await replayThroughProxy(dir, 'causal', SLOW, []);
    assert.equal(arrivals.length, rows.length);
    assert.deepEqual(earlyTurns(arrivals), []);
    // And the captured think time was kept after the predecessor's end (where it is known).
    for (const [id, turns] of turnsBySession(arrivals)) {
      for (let k = 1; k < turns.length; ++k) {
        const prev = traceRowOf(rows, turns[k - 1]);
        if (id === `conv-${NO_LATENCY.session}` && k - 1 === NO_LATENCY.turn) continue;
        const think = traceRowOf(rows, turns[k]).timestamp - (prev.timestamp + CAPTURED_LATENCY_MS);
        const end = turns[k - 1].timestamp + turns[k - 1].latency_ms;
        assert.ok(turns[k].timestamp >= end + think - SLACK_MS,
          `${id} turn ${k}: arrived ${turns[k].timestamp}, predecessor ended ${end}, think ${think}`);
      }
    }
    checkSessionlessKeepSchedule(rows, arrivals, requests);
    // The report: every turn after the first of each session moved (the server is 3x slower).
    const s = summary.sessions;
    assert.equal(s.schedule, 'causal');
    assert.equal(s.turns, SESSIONS * TURNS);
    assert.ok(s.moved >= SESSIONS * (TURNS - 1), JSON.stringify(s));
    assert.equal(s.causal_shift_ms.count, s.moved);
    assert.ok(s.causal_shift_ms.p50 > 50 && s.causal_shift_ms.max >= s.causal_shift_ms.p99, JSON.stringify(s));
    assert.equal(s.without_captured_latency, 1);
    assert.match(stdout, /sessions \(causal schedule\): 24 turns, \d+ moved by causality \(shift ms: p50/);
    assert.match(stdout, /outcomes: .*trace\.jsonl\.outcomes\.jsonl: 23 session turns joined/);
    // A moved turn's lag is counted from its causal due time, not from its trace time: counted
    // from the trace time it would be at least its shift. The bound leaves room for a loaded
    // machine (a turn seen 30 ms late under a parallel build) and stays below the largest shifts.
    const moved = requests.filter((q) => q.endpoint === 'chat' && q.causal_shift_ms > 0);
    assert.ok(moved.some((q) => q.causal_shift_ms > 150), JSON.stringify(moved.map((q) => q.causal_shift_ms)));
    for (const r of requests.filter((q) => q.endpoint === 'chat')) {
      assert.ok(r.lag_ms >= 0 && r.lag_ms < 100, `turn lag ${r.lag_ms}`);
    }

    // The same trace on the timestamps alone sends turns before their predecessor ended.
    const plain = await replayThroughProxy(dir, 'timestamps', SLOW, ['--schedule', 'timestamps']);
    assert.ok(earlyTurns(plain.arrivals).length >= SESSIONS, earlyTurns(plain.arrivals).join('\n'));
    assert.equal(plain.summary.sessions.schedule, 'timestamps');
    assert.equal(plain.summary.sessions.moved, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('causal replay against a sim as fast as the capture: every row arrives at its trace time', async () => {
  const dir = tempDir();
  try {
    const { rows } = makeTrace(dir);
    const { arrivals, summary, requests } = await replayThroughProxy(dir, 'fast', FAST, []);
    assert.equal(arrivals.length, rows.length);
    checkOnSchedule(arrivalOffsets(rows, arrivals).filter((o) => o.who !== 'sessionless'));
    assert.deepEqual(earlyTurns(arrivals), []);
    checkSessionlessKeepSchedule(rows, arrivals, requests);
    assert.equal(summary.sessions.turns, SESSIONS * TURNS);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a turn that timed out or failed still releases the next turn of its session', async () => {
  const dir = tempDir();
  // Every response takes 400 ms to its first token; the replay gives up after 200 ms.
  const sim = await startSim([], { '--ttft-ms': '400' });
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
    const r = await replay([trace, '--url', url(sim), '--request-timeout', '0.2',
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
    // y's second turn failed at once, so y's third went out right after it, long before x's
    // third (which waited for two timeouts).
    assert.ok(requests[5].sent_ms < requests[4].sent_ms, JSON.stringify(requests.map((q) => q.sent_ms)));
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});
