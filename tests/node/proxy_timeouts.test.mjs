// Connections the proxy closes on a timeout, counted by stage in
// llmtap_proxy_client_timeouts_total and logged (at most a line a second): floods of clients
// that never send a byte, stall in the request head or body (slowloris), stall in the TLS
// handshake, or finish a handshake and send no request; one keep-alive client idle after its
// request. Each count is exact: every flood connection is waited for until the proxy closed it
// (its 'close' event), and the metrics are read on a connection that closes itself.
// No wait is bounded by the wall clock: short deadlines (--*-timeout-s 0.5) only make the test
// quick; on a loaded machine it waits longer. Which stage a stalled connection is counted in
// depends on whether its bytes came before the proxy's first deadline for it, and that must not
// depend on how the machine schedules the clients: the bytes are made to be there before the
// proxy accepts the connection (whileStopped), or the deadline they race is not a short one (a
// TLS handshake and the request after it go to a proxy whose handshake deadline is 60 s).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import tls from 'node:tls';
import { logged, startSim, startProxy, stop, tempDir, url } from './proxy_helpers.mjs';
import { MAKE_TEST_CERTS } from './tls_nginx.mjs';

let sim;
let dir;
const SHORT = ['--idle-timeout-s', '0.5', '--read-timeout-s', '0.5', '--tls-handshake-timeout-s', '0.5'];

before(async () => {
  sim = await startSim();
  dir = tempDir();
  execFileSync('bash', [MAKE_TEST_CERTS, join(dir, 'certs')], { stdio: ['ignore', 'ignore', 'pipe'] });
});

after(async () => {
  if (sim) await stop(sim);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// Runs `open()` with the proxy stopped (SIGSTOP, by PID), then lets it go on (SIGCONT). The
// connections `open` makes meanwhile wait in the proxy's listen backlog, and the bytes they
// send are with the kernel before the proxy accepts them: it reads them before any deadline of
// its own has begun for that connection, however late a loaded machine ran the client.
async function whileStopped(p, open) {
  p.proc.kill('SIGSTOP');
  try {
    return await open();
  } finally {
    p.proc.kill('SIGCONT');
  }
}

// A connection that sends `bytes` (after a TLS handshake when `secure`) and then nothing.
// `sent`: resolves once the bytes are with the kernel (at the connect when there are none);
// `closed`: once the proxy closed the connection, with what it answered.
function stall(port, bytes, secure = false) {
  let s;
  let received = '';
  const sent = new Promise((resolve) => {
    const send = () => (bytes.length ? s.write(bytes, () => resolve()) : resolve());
    s = secure
      ? tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, send)
      : createConnection({ host: '127.0.0.1', port }, send);
    s.on('close', resolve);  // (then the counts say what went wrong)
  });
  s.on('data', (d) => { received += d.toString('latin1'); });
  s.on('error', () => {});
  const closed = new Promise((resolve) => s.on('close', () => resolve(received)));
  return { sent, closed };
}

// A flood of `n` such connections at once.
const flood = (n, port, bytes, secure) => Array.from({ length: n }, () => stall(port, bytes, secure));

// The whole answer on `s`, a connection that asked for the metrics with Connection: close (so
// that it never waits in the proxy for a timeout of its own): what came until it closed.
function answer(s) {
  return new Promise((resolve) => {
    let text = '';
    s.setEncoding('utf8');
    s.on('data', (d) => { text += d; });
    s.on('error', () => {});
    s.on('close', () => resolve(text));
  });
}

const METRICS_GET = 'GET /llmtap/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';

// The metrics of a plain listener, asked for with the request already there when the proxy
// accepts the connection (so no deadline of the proxy's can end it first).
async function metrics(p) {
  const s = await whileStopped(p, () => new Promise((resolve, reject) => {
    const c = createConnection({ host: '127.0.0.1', port: p.port }, () => c.write(METRICS_GET, () => resolve(c)));
    c.on('error', reject);
  }));
  const text = await answer(s);
  assert.match(text, /^HTTP\/1\.1 200 /, text);
  return text;
}

// The metrics of a TLS listener: { text, failed }. A TLS handshake cannot be sent ahead, so an
// attempt that a short deadline of the proxy's ended first is tried again, and `failed` says
// how many did: each is one more connection closed on a timeout, in a stage the caller knows.
async function metricsTls(p) {
  for (let failed = 0; failed < 10; ++failed) {
    const s = tls.connect({ host: '127.0.0.1', port: p.port, rejectUnauthorized: false });
    s.write(METRICS_GET);  // goes out right after the handshake
    const text = await answer(s);
    if (/^HTTP\/1\.1 200 /.test(text)) return { text, failed };
  }
  assert.fail('no metrics in 10 attempts');
}

function timeouts(text) {
  const counts = {};
  for (const m of text.matchAll(/^llmtap_proxy_client_timeouts_total\{stage="(\w+)"\} (\d+)$/gm)) counts[m[1]] = Number(m[2]);
  return counts;
}

const NONE = { no_bytes: 0, tls_handshake: 0, request_head: 0, request_body: 0, idle: 0, write: 0, drain: 0 };

test('plain listener: no-byte, stalled-head and stalled-body floods and an idle keep-alive client, counted by stage', async () => {
  const p = await startProxy({ upstream: url(sim), args: SHORT });
  try {
    assert.deepEqual(timeouts(await metrics(p)), NONE);
    const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n';
    const body = `${head}Content-Length: 100\r\n\r\n{"model":"m",`;
    const { floods, idle } = await whileStopped(p, async () => {
      const floods = [...flood(100, p.port, Buffer.alloc(0)), ...flood(50, p.port, Buffer.from(head)),
        ...flood(40, p.port, Buffer.from(body))];
      // One keep-alive client served once (the proxy's own metrics: no upstream in the way),
      // then idle until the proxy closes it.
      const idle = stall(p.port, Buffer.from('GET /llmtap/metrics HTTP/1.1\r\nHost: x\r\n\r\n'));
      await Promise.all([...floods, idle].map((c) => c.sent));
      return { floods, idle };
    });
    await Promise.all(floods.map((c) => c.closed));
    assert.match(await idle.closed, /^HTTP\/1\.1 200/);
    assert.deepEqual(timeouts(await metrics(p)),
      { ...NONE, no_bytes: 100, request_head: 50, request_body: 40, idle: 1 });
    await logged(p, /closed a client connection on a timeout \((no_bytes|request_head|request_body)\)/);
    assert.doesNotMatch(p.stderr, /on a timeout \(idle\)/, 'an idle keep-alive close is routine: counted, not logged');
  } finally {
    await stop(p);
  }
});

test('TLS listener: no-byte flood, stalled handshakes and handshakes without a request, counted by stage', async () => {
  const certs = join(dir, 'certs');
  const tlsArgs = ['--tls-cert', join(certs, 'server.pem'), '--tls-key', join(certs, 'server.key')];
  // Handshakes that must end on the short deadline: never begun, or stalled after a few bytes
  // that were there before the proxy accepted. The other deadlines are long here, so that the
  // metrics request after its handshake can take its time.
  const short = await startProxy({
    upstream: url(sim),
    args: ['--tls-handshake-timeout-s', '0.5', '--idle-timeout-s', '60', '--read-timeout-s', '60', ...tlsArgs],
  });
  // Handshakes that finish, then no request: the short deadline is the one for the request,
  // the handshake's is long (a handshake of many round trips cannot be sent ahead).
  const slow = await startProxy({
    upstream: url(sim),
    args: ['--tls-handshake-timeout-s', '60', '--idle-timeout-s', '0.5', '--read-timeout-s', '60', ...tlsArgs],
  });
  try {
    const stalled = await whileStopped(short, async () => {
      const conns = [
        ...flood(100, short.port, Buffer.alloc(0)), // never a ClientHello
        ...flood(50, short.port, Buffer.from([0x16, 0x03, 0x01])), // the start of one, then nothing
      ];
      await Promise.all(conns.map((c) => c.sent));
      return conns;
    });
    const quiet = flood(10, slow.port, Buffer.alloc(0), true); // a handshake, then no request
    await Promise.all([...stalled, ...quiet].map((c) => c.closed));

    // A metrics request whose handshake the short deadline ended counts once more in a
    // handshake stage: no_bytes if its ClientHello came after the deadline, else tls_handshake.
    const s = await metricsTls(short);
    const counts = timeouts(s.text);
    assert.ok(counts.no_bytes >= 100 && counts.tls_handshake >= 50
      && counts.no_bytes + counts.tls_handshake === 150 + s.failed, JSON.stringify({ counts, failed: s.failed }));
    assert.deepEqual({ ...counts, no_bytes: 0, tls_handshake: 0 }, NONE);
    // The stalled handshakes are failed handshakes too; the silent connections attempted none.
    assert.match(s.text, new RegExp(`^llmtap_proxy_tls_handshake_failures_total\\{side="client"\\} ${counts.tls_handshake}$`, 'm'));
    assert.match(s.text, /^llmtap_proxy_tls_handshakes_total\{side="client",resumed="false"\} 1$/m);
    await logged(short, /closed a client connection on a timeout \(no_bytes\): it sent nothing within --tls-handshake-timeout-s/);
    await logged(short, /the client did not complete the TLS handshake in time/);

    // A metrics request that came later than the short deadline after its handshake counts once
    // more as request_head.
    const q = await metricsTls(slow);
    assert.deepEqual(timeouts(q.text), { ...NONE, request_head: 10 + q.failed });
    assert.match(q.text, /^llmtap_proxy_tls_handshake_failures_total\{side="client"\} 0$/m);
    assert.match(q.text, new RegExp(`^llmtap_proxy_tls_handshakes_total\\{side="client",resumed="false"\\} ${11 + q.failed}$`, 'm'));
  } finally {
    await stop(short);
    await stop(slow);
  }
});
