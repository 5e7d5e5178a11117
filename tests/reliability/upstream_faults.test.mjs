// Upstream faults behind a real `llmtap proxy`: the upstream refuses the connection, resets it
// in the middle of an SSE stream, stalls before the response head or in the middle of the
// body, sends garbage instead of HTTP, or closes without answering. The client must get a
// clean 502/504, or (once the response started) a stream that visibly ends early (the chunked
// body not terminated, the connection closed), never a hang; and nothing leaks: each fault is
// run 50 times and the proxy's fd count (/proc/PID/fd) comes back to its baseline, the
// upstream's open connections to zero. Afterwards the proxy still serves and exits 0 on
// SIGTERM with no sanitizer report.
//
// "At once" is not timed (a loaded machine only makes things later): each fault is counted by
// the proxy under the kind of error that ended it, and a fault handled at once is one that no
// timeout ended (its `timeout` count stays 0; a stall's goes up by one per run). The faults
// other than stalls go through a patient proxy, whose read deadline is far beyond the tests'
// hang guard: nothing but the fault can end them within a test, so which kind ends them does
// not depend on whether the upstream's next move (a reset 50 ms after the events) comes before
// a 1 s deadline on a loaded machine. The stalls go through the proxy with the 1 s deadline.
// The waits are guards against a hang, ended as soon as what they wait for holds.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startProxy, stop } from '../node/proxy_helpers.mjs';
import {
  startRawServer, splitRequests, exchange, parseResponses, fdCount, waitFor, sleep, closedPort,
} from './helpers.mjs';

const READ_S = 1;   // --read-timeout-s: a stall is cut after this long
const PATIENT_S = 300;  // the patient proxy's --read-timeout-s: far beyond HANG_MS
const RUNS = 50;    // each fault, concurrently
const HANG_MS = 60000;  // a guard against a hang only
const KINDS = ['connect', 'timeout', 'reset', 'protocol'];

const SSE_HEAD = 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n';
function sseChunk(i) {
  const event = `data: {"choices":[{"index":0,"delta":{"content":" w${i}"}}]}\n\n`;
  return `${event.length.toString(16)}\r\n${event}\r\n`;
}

// The misbehaving upstream: reads a request, then fails the way its target names.
const FAULTS = {
  '/ok': (s) => s.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'),
  // Head and three SSE events, then a TCP RST.
  '/reset-mid-stream': (s) => {
    s.write(SSE_HEAD + sseChunk(0) + sseChunk(1) + sseChunk(2));
    setTimeout(() => s.resetAndDestroy(), 50);
  },
  '/stall-before-head': () => {},
  '/stall-mid-body': (s) => s.write(SSE_HEAD + sseChunk(0) + sseChunk(1)),
  '/garbage': (s) => s.end('SSH-2.0-OpenSSH_9.2p1\r\n\x00\x01\x02 this is not HTTP\r\n\r\n'),
  '/garbage-after-status': (s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: \x00bad\r\n\r\nhello'),
  '/close-without-answer': (s) => s.end(),
  // A valid head and one event, then (later, or in the same write) a chunk size that is not hex.
  '/bad-chunk-mid-body': (s) => {
    s.write(SSE_HEAD + sseChunk(0));
    setTimeout(() => s.write('zz\r\nnot a chunk\r\n'), 50);
  },
  '/bad-chunk-same-write': (s) => s.write(`${SSE_HEAD}${sseChunk(0)}zz\r\nnot a chunk\r\n`),
};

let upstream;
let refusedProxy;
let proxy;
let patient;

before(async () => {
  upstream = await startRawServer((socket) => {
    let pending = Buffer.alloc(0);
    socket.on('data', (d) => {
      pending = Buffer.concat([pending, d]);
      const { requests, rest } = splitRequests(pending);
      pending = rest;
      for (const r of requests) (FAULTS[r.target] || FAULTS['/ok'])(socket);
    });
  });
  // The client idle deadline beyond the hang guard: no client is cut by it within a test.
  // The connect deadline far beyond it too: a refusal is counted as one, whenever it is seen.
  const args = (read) => ['--no-capture', '--read-timeout-s', String(read), '--idle-timeout-s', String(PATIENT_S),
    '--connect-timeout-s', String(PATIENT_S)];
  proxy = await startProxy({ upstream: `http://127.0.0.1:${upstream.port}`, args: args(READ_S) });
  patient = await startProxy({ upstream: `http://127.0.0.1:${upstream.port}`, args: args(PATIENT_S) });
  refusedProxy = await startProxy({ upstream: `http://127.0.0.1:${await closedPort()}`, args: args(READ_S) });
});

after(async () => {
  try {
    for (const p of [proxy, patient, refusedProxy]) assert.deepEqual(await stop(p), { code: 0, signal: null });
  } finally {
    await stop(proxy, 'SIGKILL');
    await stop(patient, 'SIGKILL');
    await stop(refusedProxy, 'SIGKILL');
    await upstream.close();
  }
});

function request(p, path) {
  const body = '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}';
  return exchange(p.port, `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`, { timeoutMs: HANG_MS });
}

async function metric(p, name) {
  const r = await exchange(p.port, 'GET /llmtap/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  const m = parseResponses(r.data)[0].body.match(new RegExp(`^${name.replace(/[{}"]/g, '\\$&')} (\\d+)$`, 'm'));
  return Number(m[1]);
}

async function errorCounts(p) {
  const counts = {};
  for (const k of KINDS) counts[k] = await metric(p, `llmtap_proxy_upstream_errors_total{kind="${k}"}`);
  return counts;
}

// Runs `path` RUNS times at once through `p`; checks each result; then waits for the proxy's
// fds to come back to the baseline taken before, and the upstream to have no connection open.
// Returns the upstream errors the proxy counted meanwhile, by kind.
async function runFault(p, path, check) {
  await waitFor('no client connection but this one', async () =>
    (await metric(p, 'llmtap_proxy_client_connections')) === 1, HANG_MS);
  const before = await errorCounts(p);
  await sleep(20);
  const pid = p.proc.pid;
  const baseline = fdCount(pid);
  const t0 = Date.now();
  let peak = baseline;
  const sampler = setInterval(() => { peak = Math.max(peak, fdCount(pid)); }, 5);
  const results = await Promise.all(Array.from({ length: RUNS }, () => request(p, path)));
  clearInterval(sampler);
  const ms = Date.now() - t0;
  for (const r of results) {
    assert.ok(!r.timedOut, `${path}: the client was left hanging (${r.ms} ms)`);
    assert.ok(r.closed);
    check(r, parseResponses(r.data));
  }
  let now = 0;
  await waitFor(`${path}: proxy fds back to ${baseline}`, () => (now = fdCount(pid)) <= baseline, HANG_MS)
    .catch(() => {});
  const toUpstream = p !== refusedProxy;
  await waitFor(`${path}: upstream connections closed`, () => !toUpstream || upstream.open === 0, HANG_MS)
    .catch(() => {});
  const after = await errorCounts(p);
  const counted = Object.fromEntries(KINDS.map((k) => [k, after[k] - before[k]]));
  console.log(`# ${path}: ${RUNS} runs in ${ms} ms; proxy fds baseline ${baseline}, peak ${peak}, after ${now}; ` +
    `upstream connections open ${toUpstream ? upstream.open : '-'}; errors ${JSON.stringify(counted)}`);
  // No fd left behind (fewer than the baseline is fine: one of its connections may have closed).
  assert.ok(now <= baseline, `${path}: proxy fds ${now}, ${baseline} before`);
  if (toUpstream) assert.equal(upstream.open, 0, `${path}: upstream connections left open`);
  return counted;
}

// Every run of the fault ended by an error of `kind`, none by a timeout unless `kind` is one.
function assertCounted(counted, kind) {
  assert.deepEqual(counted, Object.fromEntries(KINDS.map((k) => [k, k === kind ? RUNS : 0])));
}

function assertError(res, status, code) {
  assert.equal(res.length, 1, JSON.stringify(res));
  assert.equal(res[0].status, status);
  assert.ok(res[0].complete);
  const e = JSON.parse(res[0].body).error;
  assert.equal(e.type, 'upstream_error');
  assert.equal(e.code, code);
}

test('upstream refuses the connection: 502 at once; no fd leak', async () => {
  // At once: the refusal ended each, not the connect timeout (that would count as a timeout).
  assertCounted(await runFault(refusedProxy, '/v1/chat/completions', (r, res) => {
    assertError(res, 502, 'upstream_unavailable');
  }), 'connect');
  assert.equal(await metric(refusedProxy, 'llmtap_proxy_upstream_errors_total{kind="connect"}'), RUNS);
});

test('upstream resets mid-stream: the client sees the events so far, then an unterminated stream and a close', async () => {
  assertCounted(await runFault(patient, '/reset-mid-stream', (r, res) => {
    assert.equal(res.length, 1);
    assert.equal(res[0].status, 200);
    assert.ok(res[0].body.includes(' w2'), JSON.stringify(res[0].body));
    assert.equal(res[0].complete, false, 'the chunked body is not terminated');
  }), 'reset');
});

test('upstream stalls before the response head: 504 after --read-timeout-s', async () => {
  // Not before the read deadline (this side's clock started first); ended by it (counted as a
  // timeout: the client's own idle deadline is far beyond the hang guard).
  assertCounted(await runFault(proxy, '/stall-before-head', (r, res) => {
    assertError(res, 504, 'upstream_timeout');
    assert.ok(r.ms >= READ_S * 1000 - 100, `${r.ms} ms`);
  }), 'timeout');
});

test('upstream stalls mid-body: the stream is cut after --read-timeout-s', async () => {
  assertCounted(await runFault(proxy, '/stall-mid-body', (r, res) => {
    assert.equal(res.length, 1);
    assert.equal(res[0].status, 200);
    assert.ok(res[0].body.includes(' w1'));
    assert.equal(res[0].complete, false, 'the chunked body is not terminated');
    assert.ok(r.ms >= READ_S * 1000 - 100, `${r.ms} ms`);
  }), 'timeout');
});

test('upstream sends garbage instead of HTTP, or a malformed head: 502', async () => {
  for (const path of ['/garbage', '/garbage-after-status']) {
    assertCounted(await runFault(patient, path, (r, res) => {
      assertError(res, 502, 'upstream_unavailable');
    }), 'protocol');
  }
});

test('upstream breaks the chunked framing mid-body: the stream is cut at once', async () => {
  // At once: the bad chunk ended each stream (a reset), not the read deadline after it.
  assertCounted(await runFault(patient, '/bad-chunk-mid-body', (r, res) => {
    assert.equal(res.length, 1);
    assert.equal(res[0].status, 200);
    assert.ok(res[0].body.includes(' w0'));
    assert.ok(!res[0].body.includes('not a chunk'), 'the bad bytes are not relayed');
    assert.equal(res[0].complete, false, 'the chunked body is not terminated');
  }), 'reset');
});

test('upstream breaks the chunked framing in the same packet as good events: the good events are still relayed', async () => {
  assertCounted(await runFault(patient, '/bad-chunk-same-write', (r, res) => {
    assert.equal(res.length, 1);
    assert.equal(res[0].status, 200);
    assert.equal(res[0].complete, false, 'the chunked body is not terminated');
    assert.ok(res[0].body.includes(' w0'), `the event before the bad chunk: ${JSON.stringify(res[0].body)}`);
  }), 'reset');
});

test('upstream closes without answering: 502', async () => {
  assertCounted(await runFault(patient, '/close-without-answer', (r, res) => {
    assertError(res, 502, 'upstream_unavailable');
  }), 'reset');
});

test('after all the faults: the error kinds are counted and the proxies still serve', async () => {
  const kinds = await errorCounts(proxy);
  const patientKinds = await errorCounts(patient);
  console.log(`# upstream error counters: ${JSON.stringify(kinds)}; patient proxy: ${JSON.stringify(patientKinds)}`);
  assert.deepEqual(kinds, { connect: 0, timeout: 2 * RUNS, reset: 0, protocol: 0 },
    'stall before head + stall mid-body');
  assert.equal(patientKinds.protocol, 2 * RUNS, 'the two garbage cases');
  // A framing error after the head is counted as a reset (the relay names every non-timeout
  // body error so); a head that does not parse is a protocol error.
  assert.equal(patientKinds.reset, 4 * RUNS, 'reset mid-stream + the two bad chunks + closed without answer');
  assert.equal(patientKinds.timeout, 0);
  assert.equal(patientKinds.connect, 0);
  for (const p of [proxy, patient]) {
    const r = await request(p, '/ok');
    const [res] = parseResponses(r.data);
    assert.equal(res.status, 200);
    assert.equal(res.body, '{"ok":true}');
  }
});
