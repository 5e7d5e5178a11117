// Connections the proxy closes on a timeout, counted by stage in
// llmtap_proxy_client_timeouts_total and logged (at most a line a second): floods of clients
// that never send a byte, stall in the request head or body (slowloris), stall in the TLS
// handshake, or finish a handshake and send no request; one keep-alive client idle after its
// request. Each count is exact: every flood connection is waited for until the proxy closed it
// (its 'close' event), and the metrics are read on a connection that closes itself.
// No wait is bounded by the wall clock: short deadlines (--*-timeout-s 0.5) only make the test
// quick; on a loaded machine it waits longer.
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

// A connection that sends `bytes` (after a TLS handshake when `secure`) and then nothing;
// resolves once the proxy closed it.
function stall(port, bytes, secure = false) {
  return new Promise((resolve) => {
    const s = secure
      ? tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => s.write(bytes))
      : createConnection({ host: '127.0.0.1', port }, () => { if (bytes.length) s.write(bytes); });
    s.on('error', () => {});
    s.on('close', resolve);
  });
}

// A flood of `n` such connections at once.
const flood = (n, port, bytes, secure) => Promise.all(Array.from({ length: n }, () => stall(port, bytes, secure)));

// GET of the metrics on a connection that closes itself (Connection: close), so that it never
// waits in the proxy for a timeout of its own.
function metrics(port, secure = false) {
  return new Promise((resolve, reject) => {
    let text = '';
    const request = () => s.write('GET /llmtap/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    const s = secure
      ? tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, request)
      : createConnection({ host: '127.0.0.1', port }, request);
    s.setEncoding('utf8');
    s.on('data', (d) => { text += d; });
    s.on('error', reject);
    s.on('end', () => resolve(text));
  });
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
    assert.deepEqual(timeouts(await metrics(p.port)), NONE);
    // One keep-alive client served once, then idle until the proxy closes it.
    const idle = new Promise((resolve, reject) => {
      const s = createConnection({ host: '127.0.0.1', port: p.port }, () => s.write('GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n'));
      let answer = '';
      s.on('data', (d) => { answer += d; });
      s.on('error', reject);
      s.on('close', () => resolve(answer));
    });
    const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n';
    const body = `${head}Content-Length: 100\r\n\r\n{"model":"m",`;
    await Promise.all([flood(100, p.port, Buffer.alloc(0)), flood(50, p.port, Buffer.from(head)),
      flood(40, p.port, Buffer.from(body)), idle]);
    assert.match(await idle, /^HTTP\/1\.1 200/);
    assert.deepEqual(timeouts(await metrics(p.port)),
      { ...NONE, no_bytes: 100, request_head: 50, request_body: 40, idle: 1 });
    await logged(p, /closed a client connection on a timeout \((no_bytes|request_head|request_body)\)/);
    assert.doesNotMatch(p.stderr, /on a timeout \(idle\)/, 'an idle keep-alive close is routine: counted, not logged');
  } finally {
    await stop(p);
  }
});

test('TLS listener: no-byte flood, stalled handshakes and handshakes without a request, counted by stage', async () => {
  const certs = join(dir, 'certs');
  const p = await startProxy({
    upstream: url(sim),
    args: [...SHORT, '--tls-cert', join(certs, 'server.pem'), '--tls-key', join(certs, 'server.key')],
  });
  try {
    await Promise.all([
      flood(100, p.port, Buffer.alloc(0)), // never a ClientHello
      flood(50, p.port, Buffer.from([0x16, 0x03, 0x01])), // the start of one, then nothing
      flood(10, p.port, Buffer.alloc(0), true), // a handshake, then no request
    ]);
    const text = await metrics(p.port, true);
    assert.deepEqual(timeouts(text), { ...NONE, no_bytes: 100, tls_handshake: 50, request_head: 10 });
    // The stalled handshakes are failed handshakes too; the silent connections attempted none.
    assert.match(text, /^llmtap_proxy_tls_handshake_failures_total\{side="client"\} 50$/m);
    assert.match(text, /^llmtap_proxy_tls_handshakes_total\{side="client",resumed="false"\} 11$/m);
    await logged(p, /closed a client connection on a timeout \(no_bytes\): it sent nothing within --tls-handshake-timeout-s/);
    await logged(p, /the client did not complete the TLS handshake in time/);
  } finally {
    await stop(p);
  }
});
