// `llmtap replay` against `llmtap sim`, as real processes on free loopback ports: the fixed
// schedule (speedup 1 and 10), chat + completions + hashed rows in one run, errors counted by
// kind, the --out files' schema, closed loop, --rate, --max-concurrency violations, timeouts,
// and headers kept out of the summary. No check bounds a delay by the wall clock: a loaded
// machine only makes replay later, and how late it is on an idle one (its schedule lag) is
// measured by bench/replay_lag.sh.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLMTAP, startSim, stop, url, replay, closedPort } from './proxy_helpers.mjs';

function tempDir() {
  return mkdtempSync(join(tmpdir(), 'llmtap-replay-test-'));
}

function writeTrace(dir, rows, name = 'trace.jsonl') {
  const path = join(dir, name);
  writeFileSync(path, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return path;
}

function readOut(dir) {
  const summary = JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8'));
  assert.match(readFileSync(join(dir, 'report.html'), 'utf8'), /<html/i);
  const text = readFileSync(join(dir, 'requests.jsonl'), 'utf8');
  const requests = text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
  return { summary, requests };
}

// The prompt tokens the sim admitted so far (vllm:prompt_tokens_total): grows once a request
// reached it.
async function admittedTokens(sim) {
  const text = await (await fetch(url(sim, '/metrics'))).text();
  return Number(text.match(/^vllm:prompt_tokens_total\{[^}]*\} (\d+)$/m)[1]);
}

const chat = (content, extra = {}) => ({ model: 'm', messages: [{ role: 'user', content }], max_tokens: 4, ...extra });
const completion = (prompt, extra = {}) => ({ model: 'm', prompt, max_tokens: 4, ...extra });

const REQUEST_KEYS = ['index', 'shard', 'endpoint', 'stream', 'scheduled_ms', 'sent_ms', 'lag_ms',
  'done_ms', 'status', 'error', 'ttft_ms', 'ttst_ms', 'latency_ms', 'itl_ms', 'max_chunk_gap_ms',
  'chunks', 'input_tokens', 'output_tokens', 'tokens_from', 'warmup', 'held_ms'];
const METRICS = ['ttft_ms', 'ttst_ms', 'itl_ms', 'inter_chunk_ms', 'latency_ms', 'input_tokens',
  'output_tokens', 'lag_ms'];
const ERROR_KINDS = ['connect', 'tls', 'timeout', 'http_4xx', 'http_5xx', 'protocol', 'cancelled'];

function checkSchema({ summary, requests }) {
  const num = (v) => typeof v === 'number' && Number.isFinite(v);
  const numOrNull = (v) => v === null || num(v);
  for (const r of requests) {
    // chunk_gaps_ms (streamed requests' gaps, for `llmtap report merge`), what the server
    // reported of its own work (cached_tokens, server, spec) and the finish reason it gave may
    // follow.
    const optional = ['chunk_gaps_ms', 'cached_tokens', 'server', 'spec', 'finish_reason'];
    assert.deepEqual(Object.keys(r).filter((k) => !optional.includes(k)).sort(), [...REQUEST_KEYS].sort());
    if ('cached_tokens' in r) assert.ok(Number.isInteger(r.cached_tokens) && r.cached_tokens <= r.input_tokens);
    if ('chunk_gaps_ms' in r) assert.ok(Array.isArray(r.chunk_gaps_ms) && r.chunk_gaps_ms.every(num));
    if ('finish_reason' in r) assert.ok(typeof r.finish_reason === 'string' && r.finish_reason !== '');
    assert.ok(Number.isInteger(r.index) && Number.isInteger(r.shard));
    assert.ok(['chat', 'completions'].includes(r.endpoint));
    assert.equal(typeof r.stream, 'boolean');
    for (const k of ['scheduled_ms', 'lag_ms', 'done_ms', 'latency_ms', 'held_ms']) assert.ok(num(r[k]), k);
    assert.ok(numOrNull(r.sent_ms), 'sent_ms');
    assert.ok(Number.isInteger(r.status));
    assert.ok(r.error === null || ERROR_KINDS.includes(r.error));
    for (const k of ['ttft_ms', 'ttst_ms', 'itl_ms', 'max_chunk_gap_ms']) assert.ok(numOrNull(r[k]), k);
    assert.ok(Number.isInteger(r.chunks));
    for (const k of ['input_tokens', 'output_tokens']) assert.ok(r[k] === null || Number.isInteger(r[k]), k);
    assert.ok(['usage', 'counted'].includes(r.tokens_from));
    assert.equal(typeof r.warmup, 'boolean');
  }
  assert.equal(summary.tool, 'llmtap replay');
  for (const k of ['version', 'command', 'url', 'trace']) assert.equal(typeof summary[k], 'string', k);
  assert.ok(Number.isInteger(summary.shard.index) && Number.isInteger(summary.shard.count));
  assert.ok(num(summary.started_at_unix_ms) && num(summary.duration_s));
  for (const k of ['scheduled', 'sent', 'completed', 'errors', 'warmup']) assert.ok(Number.isInteger(summary.requests[k]), k);
  for (const [k, n] of Object.entries(summary.requests.errors_by_kind)) {
    assert.ok(ERROR_KINDS.includes(k) && Number.isInteger(n), k);
  }
  assert.ok(num(summary.throughput.requests_per_s) && num(summary.throughput.output_tokens_per_s));
  assert.ok(summary.goodput === null || (num(summary.goodput.requests_per_s) && num(summary.goodput.fraction)));
  assert.deepEqual(Object.keys(summary.metrics).sort(), [...METRICS].sort());
  for (const m of METRICS) {
    const s = summary.metrics[m];
    assert.deepEqual(Object.keys(s).sort(), ['count', 'max', 'mean', 'p50', 'p90', 'p95', 'p99']);
    for (const k of ['mean', 'p50', 'p90', 'p95', 'p99', 'max']) {
      assert.ok(s.count === 0 ? s[k] === null : num(s[k]), `${m}.${k}`);
    }
  }
  assert.ok(summary.open_loop.max_concurrency === null || Number.isInteger(summary.open_loop.max_concurrency));
  assert.ok(Number.isInteger(summary.open_loop.violations) && num(summary.open_loop.held_ms_total));
  for (const m of ['ttft_ms', 'itl_ms', 'latency_ms', 'lag_ms']) assert.equal(typeof summary.definitions[m], 'string');
  // The target's own /metrics (the sim has one) is found and scraped before, during and after.
  const sm = summary.server_metrics;
  assert.ok(sm === null || (typeof sm.url === 'string' && Number.isInteger(sm.scrapes.ok)), JSON.stringify(sm));
  assert.equal(summary.requests.sent, requests.filter((r) => r.sent_ms !== null && !r.warmup).length);
}

// Known gaps (ms): bursts, short and long gaps, over 1.2 s of trace time.
const TIMESTAMPS = [0, 0, 5, 40, 100, 100, 101, 250, 260, 400, 650, 655, 700, 900, 1000, 1200];

// One run at `speedup`; returns the span of its send times (first to last, ms).
async function fidelity(sim, dir, speedup) {
  const rows = TIMESTAMPS.map((t, i) => ({ timestamp: t + 5000, payload: i % 2 ? chat(`q${i}`, { stream: true }) : completion(`p${i}`) }));
  const trace = writeTrace(dir, rows, `gaps-${speedup}.jsonl`);
  const out = join(dir, `out-${speedup}`);
  const r = await replay([trace, '--url', url(sim), '--speedup', String(speedup), '--out', out]);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const o = readOut(out);
  checkSchema(o);
  const reqs = [...o.requests].sort((a, b) => a.index - b.index);
  assert.equal(reqs.length, TIMESTAMPS.length);
  // Each row scheduled at its trace time over the speedup, from the first row; sent no sooner;
  // its lag what separates the two (all three rounded to the microsecond).
  for (let i = 0; i < reqs.length; ++i) {
    assert.ok(Math.abs(reqs[i].scheduled_ms - TIMESTAMPS[i] / speedup) < 1e-6, `scheduled ${i}`);
    assert.ok(reqs[i].sent_ms >= reqs[i].scheduled_ms, `row ${i} sent at ${reqs[i].sent_ms}, before ${reqs[i].scheduled_ms}`);
    assert.ok(Math.abs(reqs[i].lag_ms - (reqs[i].sent_ms - reqs[i].scheduled_ms)) < 0.002, `lag ${i}`);
    assert.equal(reqs[i].error, null);
  }
  // The summary's lag is the rows' lag.
  assert.equal(o.summary.metrics.lag_ms.count, reqs.length);
  assert.ok(Math.abs(o.summary.metrics.lag_ms.max - Math.max(...reqs.map((q) => q.lag_ms))) < 0.002);
  return reqs[reqs.length - 1].sent_ms - reqs[0].sent_ms;
}

// Never early (above) is what a shared machine cannot break; lateness it can, so the schedule's
// pace is checked by a ratio of two runs side by side: at speedup 10 the trace's 1.2 s go out
// in a tenth of the time. A replay that waited the trace's own gaps (the speedup left out of its
// timers) would take as long at 10 as at 1 (a ratio of 1). The bound is half: it fails only
// when the last send at speedup 10 comes some 480 ms later than the first one's lateness (120 ms
// of schedule; 600 ms allowed), far more than a loaded machine's scheduling delays, while the
// bug it is there for stays four times beyond it.
test('timing fidelity: sends keep the trace\'s schedule at speedup 1 and 10', async () => {
  const sim = await startSim();
  const dir = tempDir();
  try {
    const span1 = await fidelity(sim, dir, 1);
    const span10 = await fidelity(sim, dir, 10);
    assert.ok(span10 < span1 / 2, `span at speedup 1: ${span1} ms, at speedup 10: ${span10} ms`);
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('chat, completions and hashed rows replay in one run', async () => {
  const sim = await startSim(['--model', 'served-model']);
  const dir = tempDir();
  try {
    const rows = [
      { timestamp: 0, payload: chat('hello there', { stream: true, stream_options: { include_usage: true } }) },
      { timestamp: 1, payload: completion('once upon a time') },
      { timestamp: 2, input_length: 40, output_length: 6, hash_ids: [0, 1, 2] },
      { timestamp: 3, input_length: 33, output_length: 3, hash_ids: [0, 1, 7] },
      { timestamp: 4, payload: completion('streamed', { stream: true }) },
      // Repetitive text, so the sim's prompt-lookup speculation drafts and accepts tokens.
      { timestamp: 5, payload: completion('the cat sat on the mat and '.repeat(30), { max_tokens: 60 }) },
    ];
    const trace = writeTrace(dir, rows);
    const out = join(dir, 'out');
    const r = await replay([trace, '--url', url(sim), '--block-size', '16', '--out', out]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /1 raw_payload|0 raw_payload/);
    assert.match(r.stderr, /model "served-model"/);
    const o = readOut(out);
    checkSchema(o);
    const by = Object.fromEntries(o.requests.map((q) => [q.index, q]));
    assert.equal(by[0].endpoint, 'chat');
    assert.equal(by[1].endpoint, 'completions');
    assert.equal(by[2].endpoint, 'completions');
    for (const q of o.requests) assert.equal(q.status, 200);
    assert.equal(by[0].stream, true);
    assert.ok(by[0].ttft_ms > 0 && by[0].chunks > 0);
    assert.equal(by[0].output_tokens, 4);
    assert.equal(by[0].tokens_from, 'usage');
    assert.equal(by[1].ttft_ms, null);
    assert.equal(by[2].output_tokens, 6);  // max_tokens = output_length
    assert.equal(by[3].output_tokens, 3);
    // Streamed without include_usage: tokens are counted.
    assert.equal(by[4].tokens_from, 'counted');
    assert.ok(by[4].output_tokens > 0);
    assert.equal(o.summary.requests.completed, 6);
    // Spec-decode figures equal what the sim's own counters imply (the sim served only this run,
    // so its totals are the run's deltas).
    const text = await (await fetch(`${url(sim)}/metrics`)).text();
    const total = (name) => text.split('\n').filter((l) => l.startsWith(name + '{') || l.startsWith(name + ' '))
      .reduce((a, l) => a + Number(l.trim().split(/\s+/).pop()), 0);
    const drafts = total('vllm:spec_decode_num_drafts_total');
    const draftTokens = total('vllm:spec_decode_num_draft_tokens_total');
    const accepted = total('vllm:spec_decode_num_accepted_tokens_total');
    assert.ok(drafts > 0 && draftTokens > 0, text);
    const sd = o.summary.server_metrics.spec_decode;
    assert.equal(o.summary.server_metrics.url, `${url(sim)}/metrics`);
    assert.equal(sd.source, 'vllm_counters');
    assert.equal(sd.drafts, drafts);
    assert.equal(sd.draft_tokens, draftTokens);
    assert.equal(sd.accepted_tokens, accepted);
    assert.ok(Math.abs(sd.acceptance_rate - accepted / draftTokens) < 1e-9);
    assert.ok(Math.abs(sd.mean_acceptance_length - (1 + accepted / drafts)) < 1e-9);
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('errors are counted by kind', async () => {
  const sim = await startSim(['--max-model-len', '100']);
  const dir = tempDir();
  try {
    const rows = [
      { timestamp: 0, payload: chat('fine') },
      { timestamp: 1, payload: chat('too long', { max_tokens: 500 }) },
      { timestamp: 2, payload: completion('also too long', { max_tokens: 101 }) },
      { timestamp: 3, payload: completion('fine') },
    ];
    const trace = writeTrace(dir, rows);
    let out = join(dir, 'out');
    let r = await replay([trace, '--url', url(sim), '--out', out]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    let o = readOut(out);
    checkSchema(o);
    assert.equal(o.summary.requests.errors, 2);
    assert.equal(o.summary.requests.completed, 2);
    assert.equal(o.summary.requests.errors_by_kind.http_4xx, 2);
    const failed = o.requests.filter((q) => q.error !== null).map((q) => [q.index, q.status, q.error]);
    assert.deepEqual(failed.sort(), [[1, 400, 'http_4xx'], [2, 400, 'http_4xx']]);

    out = join(dir, 'out-closed');
    r = await replay([trace, '--url', `http://127.0.0.1:${await closedPort()}`, '--out', out]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    o = readOut(out);
    assert.deepEqual(o.summary.requests.errors_by_kind, { connect: 4 });
    assert.equal(o.summary.requests.completed, 0);
    for (const q of o.requests) assert.equal(q.status, 0);
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('request timeout', async () => {
  // 200 tokens 20 ms apart: the sim cannot send them in less than 3.98 s, so the slow stream
  // times out at 1 s whatever the load; the fast completion (one token, a few ms) has that
  // second to be answered (at a 0.2 s timeout a loaded machine could time it out too).
  const sim = await startSim([], { '--itl-ms': '20' });
  const dir = tempDir();
  try {
    const trace = writeTrace(dir, [{ timestamp: 0, payload: chat('slow', { max_tokens: 200, stream: true }) },
      { timestamp: 0, payload: completion('fast', { max_tokens: 1 }) }]);
    const out = join(dir, 'out');
    const r = await replay([trace, '--url', url(sim), '--request-timeout', '1', '--out', out]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const o = readOut(out);
    assert.equal(o.summary.requests.errors_by_kind.timeout, 1);
    const slow = o.requests.find((q) => q.index === 0);
    assert.equal(slow.error, 'timeout');
    // Cut at the timeout (not before it), long before the stream's end: its 200 tokens did not
    // all arrive (a timeout that waited for the stream would see them all).
    assert.ok(slow.latency_ms >= 990, `timed out after ${slow.latency_ms} ms`);
    assert.ok(slow.chunks < 200, `${slow.chunks} chunks before the timeout`);
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('raw rows: --rate, --concurrency, --max-requests, --warmup, goodput, --header', async () => {
  const sim = await startSim();
  const dir = tempDir();
  try {
    const rows = [];
    for (let i = 0; i < 40; ++i) rows.push(i % 3 ? chat(`r${i}`, { stream: true }) : completion(`r${i}`));
    const trace = writeTrace(dir, rows);

    let r = await replay([trace, '--url', url(sim)]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--rate or --concurrency/);

    let out = join(dir, 'rate');
    r = await replay([trace, '--url', url(sim), '--rate', '200', '--arrival', 'constant', '--max-requests', '30',
      '--warmup', '5', '--goodput', 'latency:10000', '--header', 'Authorization: Bearer sk-secret', '--out', out]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    let o = readOut(out);
    checkSchema(o);
    assert.equal(o.summary.requests.scheduled, 25);  // the 5 warm-up requests are apart
    assert.equal(o.summary.requests.warmup, 5);
    assert.equal(o.requests.filter((q) => q.warmup).length, 5);
    assert.equal(o.summary.metrics.latency_ms.count, 25);
    assert.equal(o.summary.goodput.fraction, 1);
    assert.equal(o.summary.goodput.constraints.latency_ms, 10000);
    const sched = o.requests.map((q) => q.scheduled_ms).sort((a, b) => a - b);
    assert.equal(sched[29], 145);  // constant 200 req/s: 5 ms apart
    assert.ok(!JSON.stringify(o.summary).includes('sk-secret'), 'header values are not logged');
    assert.ok(!r.stdout.includes('sk-secret') && !r.stderr.includes('sk-secret'));
    assert.match(o.summary.command, /<redacted>/);

    out = join(dir, 'closed');
    r = await replay([trace, '--url', url(sim), '--concurrency', '4', '--out', out]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    o = readOut(out);
    checkSchema(o);
    assert.equal(o.summary.requests.completed, 40);
    // Closed loop: never more than 4 in flight.
    const events = [];
    for (const q of o.requests) events.push([q.sent_ms, 1], [q.done_ms, -1]);
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let inFlight = 0;
    let most = 0;
    for (const [, d] of events) { inFlight += d; most = Math.max(most, inFlight); }
    assert.ok(most <= 4, `max in flight ${most}`);
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--max-concurrency holds requests back and counts open-loop violations', async () => {
  // Ten rows due at once, two allowed in flight: a row is a violation when it comes due with two
  // in flight, so there are eight unless a slot freed before the last row came due. One worker
  // thread (--threads 1): it takes the due rows one after another without serving any I/O in
  // between, and it alone runs the requests' I/O, so no request can end while it is still
  // taking rows, however long the machine pauses it (with two workers, one paused between two
  // rows while the other's requests ended counted a violation fewer). What is left is the input
  // reader handing the ten rows over late, and each request takes at least 0.9 s (10 tokens
  // 100 ms apart, no speculation) to end.
  const sim = await startSim(['--spec-tokens', '0'], { '--itl-ms': '100' });
  const dir = tempDir();
  try {
    const rows = [];
    for (let i = 0; i < 10; ++i) rows.push({ timestamp: 0, payload: chat(`burst ${i}`, { max_tokens: 10, stream: true }) });
    const trace = writeTrace(dir, rows);
    const out = join(dir, 'out');
    const r = await replay([trace, '--url', url(sim), '--max-concurrency', '2', '--threads', '1', '--out', out]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const o = readOut(out);
    checkSchema(o);
    assert.equal(o.summary.open_loop.max_concurrency, 2);
    assert.equal(o.summary.open_loop.violations, 8);
    assert.ok(o.summary.open_loop.held_ms_total > 0);
    const held = o.requests.filter((q) => q.held_ms > 0);
    assert.equal(held.length, 8);
    for (const q of held) assert.ok(q.lag_ms >= q.held_ms - 0.01, 'lag includes the time held');
    assert.match(r.stdout, /8 requests held back/);
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--shard splits the rows and keeps the whole trace\'s schedule', async () => {
  const sim = await startSim();
  const dir = tempDir();
  try {
    const rows = [];
    for (let i = 0; i < 12; ++i) rows.push({ timestamp: 10 * i, payload: completion(`s${i}`) });
    const trace = writeTrace(dir, rows);
    const startAt = (Date.now() + 1500) / 1000;
    const outs = [0, 1, 2].map((i) => join(dir, `shard${i}`));
    const results = await Promise.all([0, 1, 2].map((i) => replay([trace, '--url', url(sim), '--shard', `${i}/3`,
      '--start-at', String(startAt), '--out', outs[i]])));
    for (const r of results) assert.equal(r.code, 0, r.stdout + r.stderr);
    const all = [];
    for (let i = 0; i < 3; ++i) {
      const o = readOut(outs[i]);
      checkSchema(o);
      assert.deepEqual(o.summary.shard, { index: i, count: 3 });
      assert.ok(Math.abs(o.summary.started_at_unix_ms - startAt * 1000) < 2);
      for (const q of o.requests) {
        assert.equal(q.index % 3, i);
        assert.equal(q.shard, i);
        assert.equal(q.scheduled_ms, 10 * q.index);
        all.push(q.index);
      }
    }
    assert.deepEqual(all.sort((a, b) => a - b), [...Array(12).keys()]);
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--duration ends a closed loop; SIGINT cancels the requests in flight and still writes --out', async () => {
  const sim = await startSim([], { '--itl-ms': '20' });
  const dir = tempDir();
  try {
    const rows = [];
    for (let i = 0; i < 200; ++i) rows.push(completion(`d${i}`, { max_tokens: 5, stream: true }));
    const trace = writeTrace(dir, rows);
    let out = join(dir, 'duration');
    // 2 s with two lanes: more than the first two requests go out unless one of them takes 2 s
    // (it takes some 82 ms: 5 tokens 20 ms apart); and not all 200, since the sim cannot answer
    // faster than that (at most 2 x 2000 / 82 + 2 = 51).
    let r = await replay([trace, '--url', url(sim), '--concurrency', '2', '--duration', '2', '--out', out]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const o = readOut(out);
    checkSchema(o);
    assert.ok(o.summary.requests.sent > 2 && o.summary.requests.sent < 200, `sent ${o.summary.requests.sent}`);
    assert.equal(o.summary.requests.errors, 0);
    // No request started after the 2 s: a closed loop's row is due (scheduled_ms) when its lane
    // took it, before the lane's check of the end; the send's own stamp may come later on a loaded
    // machine.
    for (const q of o.requests) {
      assert.ok(q.scheduled_ms < 2000, `due at ${q.scheduled_ms} ms`);
      assert.ok(q.sent_ms >= q.scheduled_ms);
    }

    out = join(dir, 'interrupted');
    // 50 ms apart: 10 s of rows, so that SIGINT comes in the middle of the run however slowly the
    // machine gets to it, with requests in flight: each takes at least 0.98 s (50 tokens 20 ms
    // apart), twenty times the gap between two rows, so some are in flight at any instant after
    // the first send (with 100 ms requests, a loaded machine could have ended them all).
    const timed = rows.map((p, i) => ({ timestamp: 50 * i, payload: { ...p, max_tokens: 50 } }));
    const admitted = await admittedTokens(sim);
    const proc = spawn(LLMTAP, ['replay', writeTrace(dir, timed, 'timed.jsonl'), '--url', url(sim), '--out', out],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => { stdout += d; });
    proc.stderr.on('data', (d) => { stderr += d; });
    const exited = new Promise((res) => proc.on('exit', (code) => res(code)));
    // SIGINT mid-run: 400 ms in, and not before the sim admitted one of its requests. replay
    // installs its SIGINT handler just before it sends; a TSan build starting on a loaded machine
    // can take longer than 400 ms to get there, and SIGINT would then kill it (no exit 1, no --out).
    await new Promise((res) => setTimeout(res, 400));
    for (let i = 0; i < 600 && proc.exitCode === null && (await admittedTokens(sim)) === admitted; ++i) {
      await new Promise((res) => setTimeout(res, 50));
    }
    proc.kill('SIGINT');
    const code = await exited;
    assert.equal(code, 1, stdout + stderr);
    assert.match(stderr, /interrupted/);
    const oi = readOut(out);
    checkSchema(oi);
    assert.ok(oi.summary.requests.errors_by_kind.cancelled > 0, JSON.stringify(oi.summary.requests));
    assert.equal(oi.summary.requests.scheduled, 200);
    assert.ok(oi.summary.requests.sent < 200);
    assert.equal(oi.requests.length, 200);  // the ones never sent are listed with sent_ms null
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a keep-alive connection the server closed while idle is replaced, not counted as an error', async () => {
  const sim = await startSim(['--idle-timeout-s', '0.1']);
  const dir = tempDir();
  try {
    const rows = [0, 400, 800].map((t, i) => ({ timestamp: t, payload: chat(`idle ${i}`, { stream: true }) }));
    const out = join(dir, 'out');
    const r = await replay([writeTrace(dir, rows), '--url', url(sim), '--threads', '1', '--out', out]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const o = readOut(out);
    assert.equal(o.summary.requests.completed, 3);
    assert.equal(o.summary.requests.errors, 0);
  } finally {
    await stop(sim);
    rmSync(dir, { recursive: true, force: true });
  }
});
