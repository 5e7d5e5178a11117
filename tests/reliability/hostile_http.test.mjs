// Hostile HTTP input against a real `llmtap proxy` in front of a raw upstream that records the
// exact bytes of every request it receives (helpers.mjs startRecorder). Every case is written
// byte by byte on a raw socket; each test checks the status the client gets and what reached
// the upstream: nothing for a rejected request, and never a request hidden inside another one
// (request smuggling, RFC 9112 §6.3, §11.2). Also: header limits, slowloris, many idle
// connections, pipelining. After all of them the proxy still answers and exits 0 on SIGTERM
// with no sanitizer report.
//
// No check bounds how soon something happens by the wall clock (a loaded machine only makes
// things later): "at once" is shown by a second proxy whose deadlines are far beyond the tests'
// own hang guards (what it does before them, no deadline made it do), and "meanwhile" by the
// order of events.
//
// The proxy's framing policy is in src/proxy/http_message.h: Transfer-Encoding other than
// exactly "chunked" is refused (501 when chunked is final after another coding, else 400),
// Transfer-Encoding with Content-Length is refused 400 (rather than dropping the
// Content-Length), trailer fields are dropped, and chunk lines and trailers count toward
// max_header_bytes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startProxy, stop, url } from '../node/proxy_helpers.mjs';
import {
  startRecorder, exchange, parseResponses, fdCount, waitFor, sleep,
} from './helpers.mjs';

// Short deadlines so that slowloris and idle connections are cut within the test's time.
const IDLE_S = 2;
const READ_S = 2;
const MAX_BODY = 1 << 20;
// The patient proxy's deadlines: far beyond any wait of the tests (HANG_MS), so that whatever it
// does within those waits it did at once, not at a deadline.
const PATIENT_S = 300;
// How long a test waits for something that must happen before it fails: a guard against a
// hang only, ended as soon as the thing happened.
const HANG_MS = 60000;

let upstream;
let proxy;
let patient;

before(async () => {
  upstream = await startRecorder();
  const args = (idle, read) => ['--no-capture', '--idle-timeout-s', String(idle), '--read-timeout-s', String(read),
    '--max-body-bytes', String(MAX_BODY)];
  proxy = await startProxy({ upstream: `http://127.0.0.1:${upstream.port}`, args: args(IDLE_S, READ_S) });
  patient = await startProxy({ upstream: `http://127.0.0.1:${upstream.port}`, args: args(PATIENT_S, PATIENT_S) });
});

after(async () => {
  try {
    await assertAlive();
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    assert.deepEqual(await stop(patient), { code: 0, signal: null });
  } finally {
    await stop(proxy, 'SIGKILL');
    await stop(patient, 'SIGKILL');
    await upstream.close();
  }
});

// A request that, if it ever reaches the upstream, was smuggled. `Connection: close` so that a
// proxy that (wrongly) runs it answers and closes rather than waiting for the idle deadline.
const SMUGGLED = 'GET /smuggled HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';

// Sends `bytes` on a fresh connection (to `opts.to`, by default the proxy with short deadlines);
// returns the statuses the client got, the responses, the requests the upstream received
// meanwhile, and whether the proxy closed the connection. Every case ends with the proxy's close:
// the timeout only guards against a hang.
async function send(bytes, { to = proxy, ...opts } = {}) {
  upstream.reset();
  const r = await exchange(to.port, bytes, { timeoutMs: HANG_MS, ...opts });
  // A forwarded request reaches the upstream before its response reaches the client, except
  // for one the proxy would forward after it closed on us: give that a moment to show.
  await sleep(30);
  const responses = parseResponses(r.data);
  return { ...r, responses, statuses: responses.map((x) => x.status), got: [...upstream.requests()] };
}

function targets(got) {
  return got.map((q) => `${q.method} ${q.target}`);
}

// Nothing smuggled: no request the client hid reached the upstream, and everything that did
// reach it was framed the way the proxy frames (one Content-Length, no Transfer-Encoding).
function assertNoSmuggling(r) {
  assert.ok(!r.got.some((q) => q.target.includes('smuggled')),
    `a smuggled request reached the upstream: ${JSON.stringify(targets(r.got))}`);
  for (const q of r.got) assert.equal(q.anomaly, null, `badly framed upstream request: ${q.head}`);
}

// Rejected: exactly one response with one of `statuses`, the connection closed, nothing forwarded.
function assertRejected(r, statuses, what) {
  assert.deepEqual(r.got, [], `${what}: nothing reaches the upstream, got ${JSON.stringify(targets(r.got))}`);
  assert.equal(r.responses.length, 1, `${what}: one response, got ${JSON.stringify(r.data.slice(0, 200))}`);
  assert.ok(statuses.includes(r.statuses[0]), `${what}: status ${r.statuses[0]}, want one of ${statuses}`);
  assert.ok(r.closed, `${what}: the proxy closes the connection after rejecting`);
}

async function assertAlive() {
  const m = await fetch(url(proxy, '/llmtap/metrics'));
  assert.equal(m.status, 200);
  await m.text();
  upstream.reset();
  const f = await fetch(url(proxy, '/alive'));
  assert.equal(f.status, 200);
  assert.equal((await f.json()).target, '/alive');
}

function post(headers, body = '') {
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${headers.map((h) => `${h}\r\n`).join('')}\r\n${body}`;
}

// ---------------------------------------------------------------------------------------------
// Content-Length and Transfer-Encoding together, conflicting or malformed Content-Length.

test('Content-Length with Transfer-Encoding: chunked (both orders) is answered 400, nothing forwarded', async () => {
  const body = `0\r\n\r\n${SMUGGLED}`;
  for (const headers of [
    [`Content-Length: ${body.length}`, 'Transfer-Encoding: chunked'],
    ['Transfer-Encoding: chunked', `Content-Length: ${body.length}`],
    ['Transfer-Encoding: chunked', 'Content-Length: 0'],
  ]) {
    const r = await send(post(headers, body));
    assertRejected(r, [400], headers.join(' + '));
    assertNoSmuggling(r);
  }
  await assertAlive();
});

test('conflicting Content-Length values (two fields, or a list) are answered 400', async () => {
  for (const headers of [
    ['Content-Length: 5', 'Content-Length: 6'],
    ['Content-Length: 6', 'Content-Length: 5'],
    ['Content-Length: 5, 6'],
    ['Content-Length: 5', 'Content-Length: 5, 6'],
  ]) {
    const r = await send(post(headers, `hello!${SMUGGLED}`));
    assertRejected(r, [400], headers.join(' + '));
    assertNoSmuggling(r);
  }
});

test('identical duplicate Content-Length is collapsed (RFC 9110 §8.6) and forwarded once', async () => {
  for (const headers of [['Content-Length: 5', 'Content-Length: 5'], ['Content-Length: 5, 5']]) {
    const r = await send(post([...headers, 'Connection: close'], 'hello'));
    assert.deepEqual(r.statuses, [200], headers.join(' + '));
    assert.equal(r.got.length, 1);
    assert.equal(r.got[0].body, 'hello');
    // Forwarded with exactly one, well-formed Content-Length.
    assert.deepEqual(r.got[0].headers.filter(([k]) => k === 'content-length'), [['content-length', '5']]);
    assertNoSmuggling(r);
  }
});

test('Content-Length with a sign, inner space, non-digits, empty or overflowing is answered 400', async () => {
  for (const v of ['+5', '-5', '5 5', '5x', '0x5', '5.0', '1e1', '', '99999999999999999999999']) {
    const r = await send(post([`Content-Length: ${v}`], `hello${SMUGGLED}`));
    assertRejected(r, [400], `Content-Length: "${v}"`);
    assertNoSmuggling(r);
  }
  // One that parses but exceeds the body limit: 413, not read, not forwarded.
  const r = await send(post(['Content-Length: 18446744073709551615'], 'hello'));
  assertRejected(r, [413], 'Content-Length: 2^64-1');
});

// ---------------------------------------------------------------------------------------------
// Transfer-Encoding other than a final "chunked" (RFC 9112 §6.3 item 4: "If a Transfer-Encoding
// header field is present in a request and the chunked transfer coding is not the final
// encoding, the message body length cannot be determined reliably; the server MUST respond
// with the 400 (Bad Request) status code and then close the connection." §6.1: a coding the
// server does not understand SHOULD be answered 501.)

test('Transfer-Encoding without a final chunked (gzip, xchunked, identity, "chunked, identity") is answered 400/501, nothing forwarded', async () => {
  for (const te of ['gzip', 'xchunked', 'identity', 'chunked, identity', 'chunked;q=1', 'chunked, gzip']) {
    const body = te.startsWith('chunked') ? `0\r\n\r\n${SMUGGLED}` : SMUGGLED;
    const r = await send(post([`Transfer-Encoding: ${te}`], body));
    assertNoSmuggling(r);
    assertRejected(r, [400, 501], `Transfer-Encoding: ${te}`);
  }
});

// RFC 9112 §6.3 lets the Transfer-Encoding win and the Content-Length go, or the request be
// refused; the proxy refuses (400: "chunked" is not the final coding).
test('Transfer-Encoding: gzip together with Content-Length is answered 400/501, not forwarded by Content-Length', async () => {
  const r = await send(post(['Transfer-Encoding: gzip', 'Content-Length: 5', 'Connection: close'], 'hello'));
  assertNoSmuggling(r);
  assertRejected(r, [400, 501], 'Transfer-Encoding: gzip + Content-Length: 5');
});

test('Transfer-Encoding: gzip, chunked (a coding the proxy does not apply) is answered 501/400, not forwarded stripped of its coding', async () => {
  const r = await send(post(['Transfer-Encoding: gzip, chunked', 'Connection: close'], '5\r\nhello\r\n0\r\n\r\n'));
  assertRejected(r, [501, 400], 'Transfer-Encoding: gzip, chunked');
});

test('duplicate Transfer-Encoding: chunked fields are answered 400', async () => {
  const r = await send(post(['Transfer-Encoding: chunked', 'Transfer-Encoding: chunked'], `0\r\n\r\n${SMUGGLED}`));
  assertRejected(r, [400], 'two Transfer-Encoding: chunked');
  assertNoSmuggling(r);
});

test('HTTP/1.0 request with Transfer-Encoding: the connection is closed after it (RFC 9112 §6.1)', async () => {
  const r = await send('POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n' +
    `5\r\nhello\r\n0\r\n\r\n${SMUGGLED}`);
  assertNoSmuggling(r);
  assert.ok(r.closed);
  assert.ok(r.responses.length <= 1, JSON.stringify(r.statuses));
});

// ---------------------------------------------------------------------------------------------
// obs-fold (RFC 9112 §5.2: a server MUST either reject it with 400 or replace each obs-fold
// with SP before interpreting or forwarding the field) and whitespace before the first field
// (RFC 9112 §2.2: reject, or ignore the line).

test('obs-fold in a field value: replaced by a space before forwarding (never forwarded folded)', async () => {
  const r = await send('GET /fold HTTP/1.1\r\nHost: x\r\nX-Folded: one\r\n two\r\n\tthree\r\nConnection: close\r\n\r\n');
  if (r.statuses[0] === 400) {
    assertRejected(r, [400], 'obs-fold');
  } else {
    assert.deepEqual(r.statuses, [200]);
    assert.equal(r.got.length, 1);
    assert.deepEqual(r.got[0].headers.filter(([k]) => k === 'x-folded'), [['x-folded', 'one two three']]);
    assert.ok(!/\r\n[ \t]/.test(r.got[0].head), 'no folded line forwarded');
  }
});

test('obs-fold of Content-Length, and whitespace before the first field, are answered 400', async () => {
  let r = await send(post(['Content-Length: 5', ' 0'], `hello${SMUGGLED}`));
  assertRejected(r, [400], 'Content-Length folded into "5 0"');
  assertNoSmuggling(r);
  r = await send(`POST /a HTTP/1.1\r\n Transfer-Encoding: chunked\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello${SMUGGLED}`);
  assertRejected(r, [400], 'a field line starting with SP right after the request line');
  assertNoSmuggling(r);
  r = await send(post(['Content-Length : 5'], `hello${SMUGGLED}`));
  assertRejected(r, [400], 'whitespace between field name and colon (RFC 9112 §5.1)');
});

// ---------------------------------------------------------------------------------------------
// Bad chunked framing: never forwarded; RFC 9112 leaves a message with invalid framing no
// valid interpretation, so the proxy should answer 400 and close.

const BAD_CHUNKS = {
  'non-hex size': 'zz\r\nhello\r\n0\r\n\r\n',
  'size overflowing 64 bits': '10000000000000005\r\nhello\r\n0\r\n\r\n',
  'negative size': '-5\r\nhello\r\n0\r\n\r\n',
  '0x prefix': '0x5\r\nhello\r\n0\r\n\r\n',
  'missing CRLF after the data': '5\r\nhelloXX0\r\n\r\n',
  'control character in an extension': '5;\x01\r\nhello\r\n0\r\n\r\n',
  'request line in the trailer section': `5\r\nhello\r\n0\r\n${SMUGGLED}`,
  'Content-Length in the trailer section': '5\r\nhello\r\n0\r\nContent-Length: 50\r\n\r\n',
};

test('bad chunk sizes, bad extensions, a request in the trailer section: nothing forwarded, connection closed', async () => {
  for (const [what, chunks] of Object.entries(BAD_CHUNKS)) {
    // To the patient proxy, this side sending a byte every 100 ms after the request: closed
    // within the hang guard is closed at once, by the bad framing. Its read and idle deadlines
    // are far beyond, and the drain after an answer (reading what the client still sends, up to
    // 5 s of quiet) never ends while bytes keep coming: only the proxy's own end of the
    // connection after its answer lets this side end too.
    const r = await send(post(['Transfer-Encoding: chunked'], chunks + SMUGGLED), { to: patient, keepSendingMs: 100 });
    assert.deepEqual(r.got, [], `${what}: nothing forwarded, got ${JSON.stringify(targets(r.got))}`);
    assert.ok(r.closed, `${what}: closed at once (still open after ${r.ms} ms)`);
    assert.ok(r.statuses.every((s) => s >= 400 && s < 500), `${what}: ${r.statuses}`);
  }
  // A chunk size that parses but exceeds max_body_bytes: 413.
  const r = await send(post(['Transfer-Encoding: chunked'], 'FFFFFFFFFFFFFFFF\r\nhello\r\n0\r\n\r\n'));
  assertRejected(r, [413], 'chunk size 2^64-1');
});

test('bad chunked framing is answered 400 before the close', async () => {
  for (const [what, chunks] of Object.entries(BAD_CHUNKS)) {
    const r = await send(post(['Transfer-Encoding: chunked'], chunks));
    assertRejected(r, [400], what);
  }
});

test('a chunk extension larger than the body limit is refused, not buffered whole', async () => {
  upstream.reset();
  const socket = net.connect(proxy.port, '127.0.0.1');
  let data = '';
  let closed = false;
  socket.on('data', (d) => { data += d; });
  socket.on('error', () => {});
  socket.on('close', () => { closed = true; });
  await new Promise((r) => socket.on('connect', r));
  socket.write(post(['Transfer-Encoding: chunked', 'Connection: close'], '5;ext='));
  const piece = 'e'.repeat(256 << 10);
  // 4 MiB of extension: 4x max_body_bytes, 64x max_header_bytes.
  for (let i = 0; i < 16 && !closed; ++i) {
    if (!socket.write(piece)) await new Promise((r) => { socket.once('drain', r); socket.once('close', r); });
  }
  if (!closed) socket.write('\r\nhello\r\n0\r\n\r\n');
  await waitFor('the proxy to answer or close', () => closed || data.includes('\r\n\r\n'), 5000).catch(() => {});
  socket.destroy();
  await sleep(30);
  assert.deepEqual(upstream.requests(), [], 'not forwarded');
  const statuses = parseResponses(data).map((x) => x.status);
  assert.ok(statuses.length === 0 || [400, 413, 431].includes(statuses[0]), `${statuses}`);
});

test('trailer fields are not merged into the forwarded header section (RFC 9110 §6.5.1)', async () => {
  const r = await send(post(['Transfer-Encoding: chunked', 'Connection: close'],
    '5\r\nhello\r\n0\r\nX-Injected: yes\r\nAuthorization: Bearer injected\r\n\r\n'));
  assert.ok(r.got.length <= 1);
  if (r.got.length === 1) {
    assert.equal(r.got[0].body, 'hello');
    const names = r.got[0].headers.map(([k]) => k);
    assert.ok(!names.includes('x-injected') && !names.includes('authorization'), r.got[0].head);
  } else {
    assertRejected(r, [400], 'trailer fields');
  }
});

// ---------------------------------------------------------------------------------------------
// A second request hidden in a body or a chunk: it is body data, forwarded once as such.

test('a request hidden in a Content-Length body or in chunk data is forwarded as body, never as a request', async () => {
  let r = await send(post([`Content-Length: ${SMUGGLED.length}`, 'Connection: close'], SMUGGLED));
  assert.deepEqual(r.statuses, [200]);
  assert.equal(r.got.length, 1);
  assert.equal(r.got[0].body, SMUGGLED);
  assertNoSmuggling(r);
  const hex = SMUGGLED.length.toString(16);
  r = await send(post(['Transfer-Encoding: chunked', 'Connection: close'],
    `${hex}\r\n${SMUGGLED}\r\n${hex};x=y\r\n${SMUGGLED}\r\n0\r\n\r\n`));
  assert.deepEqual(r.statuses, [200]);
  assert.equal(r.got.length, 1);
  assert.equal(r.got[0].body, SMUGGLED + SMUGGLED);
  assert.deepEqual(r.got[0].headers.filter(([k]) => k === 'content-length'),
    [['content-length', String(2 * SMUGGLED.length)]]);
  assertNoSmuggling(r);
});

test('Host missing from an HTTP/1.1 request, or given twice, is answered 400 (RFC 9112 §3.2)', async () => {
  for (const headers of ['', 'Host: a\r\nHost: b\r\n']) {
    const r = await send(`GET /host HTTP/1.1\r\n${headers}Connection: close\r\n\r\n`);
    assertRejected(r, [400], JSON.stringify(headers));
  }
});

// ---------------------------------------------------------------------------------------------
// Header limits (max_header_bytes, 64 KiB): 431 is the dedicated status (RFC 6585 §5); the
// proxy answers 400, which RFC 9110 also allows.

test('an oversized header line, too many header fields, an oversized request target: 400/431/414, nothing forwarded', async () => {
  let r = await send(`GET /a HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(70000)}\r\nConnection: close\r\n\r\n`);
  assertRejected(r, [400, 431], '70 KB header line');
  r = await send(`GET /a HTTP/1.1\r\nHost: x\r\n${'X-H: v\r\n'.repeat(20000)}Connection: close\r\n\r\n`);
  assertRejected(r, [400, 431], '20000 header fields');
  r = await send(`GET /${'u'.repeat(100000)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  assertRejected(r, [400, 414, 431], '100 KB request target');
  // A header block just under the limit is fine.
  r = await send(`GET /under HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(60000)}\r\nConnection: close\r\n\r\n`);
  assert.deepEqual(r.statuses, [200]);
  assert.equal(r.got.length, 1);
  await assertAlive();
});

// ---------------------------------------------------------------------------------------------
// Slowloris, slow bodies, many idle connections.

// Writes the pieces of `bytes` (a string: one byte each) one every `everyMs` to `to` until the
// proxy closes; resolves when it did ({ byProxy: false } if this side gave up after HANG_MS, or
// ended it by `end()`). `closed()` tells meanwhile whether the connection has ended.
function trickle(bytes, everyMs, to = proxy) {
  let ended = false;
  let gaveUpHere = false;
  let socket;
  const done = new Promise((resolve) => {
    const start = Date.now();
    socket = net.connect(to.port, '127.0.0.1');
    let data = '';
    let i = 0;
    let timer;
    socket.on('data', (d) => { data += d; });
    socket.on('error', () => {});
    socket.on('close', () => {
      ended = true;
      clearInterval(timer);
      resolve({ ms: Date.now() - start, data, sent: i, byProxy: !gaveUpHere });
    });
    socket.on('connect', () => {
      timer = setInterval(() => {
        if (i < bytes.length) socket.write(bytes[i++]);
        if (Date.now() - start > HANG_MS) {
          gaveUpHere = true;
          socket.destroy();
        }
      }, everyMs);
    });
  });
  done.closed = () => ended;
  done.end = () => { gaveUpHere = true; socket.destroy(); };
  return done;
}

test('slowloris: a header sent one byte a second is cut at the header deadline; others are served meanwhile', async () => {
  upstream.reset();
  const header = `GET /slowloris HTTP/1.1\r\nHost: x\r\n${'X-A: b\r\n'.repeat(50)}\r\n`;
  // Meanwhile: to the patient proxy (no deadline of its ends the slow header within the test),
  // three requests one after another, each answered while the slow header is still coming (one
  // stuck behind it would be answered only after it ended). Counted by requests, not by how
  // many fit in a 2 s deadline, which a loaded machine may fill with one.
  const held = trickle(header, 1000, patient);
  for (let i = 0; i < 3; ++i) {
    const f = await fetch(url(patient, `/meanwhile-${i}`));
    assert.equal(f.status, 200);
    await f.text();
  }
  assert.ok(!held.closed(), 'the slow header is still coming');
  held.end();
  assert.equal((await held).sent < header.length, true, 'the slow header was not complete');
  // The cut: the same header to the proxy with the 2 s deadline.
  const slow = trickle(header, 1000);
  const s = await slow;
  // Cut by the proxy while bytes still came (one a second, within the 2 s idle deadline each
  // time): the deadline covers the whole header, from the connection's first wait, not each
  // byte. Not before that deadline (this side's clock started before the proxy's did).
  assert.ok(s.byProxy, `not cut by the proxy within ${HANG_MS} ms (${s.sent} bytes sent)`);
  assert.ok(s.sent < header.length, 'cut before the header was complete');
  assert.ok(s.ms >= IDLE_S * 1000 - 200, `cut after ${s.ms} ms`);
  assert.ok(!targets(upstream.requests()).some((t) => t.includes('slowloris')));
  assert.deepEqual(targets(upstream.requests()), ['GET /meanwhile-0', 'GET /meanwhile-1', 'GET /meanwhile-2']);
});

test('slow body: a body sent one byte every 400 ms is cut at the read deadline, not forwarded', async () => {
  upstream.reset();
  // The head at once, then the body one byte at a time: cut by the proxy before the body was
  // complete, however late, and not before the deadline.
  const s = await trickle([post(['Content-Length: 100']), ...'x'.repeat(100)], 400);
  assert.ok(s.byProxy, `not cut by the proxy within ${HANG_MS} ms (${s.sent} pieces sent)`);
  assert.ok(s.sent < 101, 'cut before the body was complete');
  assert.ok(s.ms >= READ_S * 1000 - 200, `cut after ${s.ms} ms`);
  assert.deepEqual(upstream.requests(), []);
});

// GET over a fresh connection that the proxy closes after the response (so that no keep-alive
// client connection stays open and counts in the proxy's fds).
async function getOnce(path, to = proxy) {
  const r = await exchange(to.port, `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
    { timeoutMs: HANG_MS });
  const [res] = parseResponses(r.data);
  return res;
}

// The proxy's open client connections, this one included.
async function clientConnections(to = proxy) {
  const res = await getOnce('/llmtap/metrics', to);
  return Number(res.body.match(/^llmtap_proxy_client_connections (\d+)$/m)[1]);
}

// `n` connections to `to`, half of them in the middle of a request head; resolves once all are
// connected. `closedByProxy()`: how many the proxy has closed so far.
async function openIdle(to, n) {
  const sockets = [];
  let closedByProxy = 0;
  const opened = [];
  for (let i = 0; i < n; ++i) {
    const s = net.connect(to.port, '127.0.0.1');
    s.on('error', () => {});
    s.on('close', () => { if (!s.destroyedHere) closedByProxy++; });
    opened.push(new Promise((r) => s.on('connect', r)));
    sockets.push(s);
    // Half of them start a request and never finish its head.
    if (i % 2) s.on('connect', () => s.write('GET /never HTTP/1.1\r\nHost: x\r\n'));
  }
  await Promise.all(opened);
  return {
    closedByProxy: () => closedByProxy,
    destroy: () => { for (const s of sockets) { s.destroyedHere = true; s.destroy(); } },
  };
}

test('500 idle connections: a new client is served at once; all are closed after the idle timeout; fds back to baseline', async () => {
  // At once: 500 idle connections to the patient proxy (no deadline of its will end them
  // within the test), and a new client is served all the same.
  const pp = patient.proc.pid;
  const patientFds = fdCount(pp);
  const held = await openIdle(patient, 500);
  await waitFor('the patient proxy to accept all 500', () => fdCount(pp) >= patientFds + 500, HANG_MS, 20);
  upstream.reset();
  const res = await getOnce('/while-500-idle', patient);
  assert.equal(res?.status, 200, 'a new client served while 500 connections are idle');
  assert.equal(JSON.parse(res.body).target, '/while-500-idle');
  assert.equal(held.closedByProxy(), 0, 'none closed by a deadline meanwhile');
  held.destroy();

  // The idle deadline: 500 idle connections to the other proxy, all closed by it, nothing
  // forwarded, its fds back where they were.
  const pid = proxy.proc.pid;
  // Baseline: no client connection but the metrics request's own (keep-alive ones of earlier
  // tests are closed by the idle deadline); pooled upstream connections stay (at most 64 per thread).
  await waitFor('no other client connection', async () => (await clientConnections()) === 1, HANG_MS, 100);
  await sleep(50);
  const baseline = fdCount(pid);
  const idle = await openIdle(proxy, 500);
  await waitFor('the proxy to accept all 500', () => fdCount(pid) >= baseline + 500, HANG_MS, 20);
  const peak = fdCount(pid);
  await waitFor('the proxy to close all 500', () => idle.closedByProxy() === 500, HANG_MS, 50);
  idle.destroy();
  let end = 0;
  // Closed at the client need not mean closed in the proxy yet: until the fds are back.
  await waitFor('fds back to baseline', () => (end = fdCount(pid)) <= baseline, HANG_MS, 50).catch(() => {});
  console.log(`# idle connections: proxy fds baseline ${baseline}, with 500 idle ${peak}, after the ` +
    `idle timeout ${end}`);
  assert.ok(!targets(upstream.requests()).some((t) => t.includes('never')));
  assert.ok(end <= baseline, `proxy fds ${end}, ${baseline} before`);
});

// ---------------------------------------------------------------------------------------------
// Pipelining.

test('pipelined requests in one write are answered in order, each forwarded once', async () => {
  const r = await send('GET /p1 HTTP/1.1\r\nHost: x\r\n\r\n' +
    'POST /p2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc' +
    'POST /p3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n0\r\n\r\n' +
    'GET /p4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.deepEqual(r.statuses, [200, 200, 200, 200]);
  assert.deepEqual(r.responses.map((x) => JSON.parse(x.body).target), ['/p1', '/p2', '/p3', '/p4']);
  assert.deepEqual(targets(r.got), ['GET /p1', 'POST /p2', 'POST /p3', 'GET /p4']);
  assert.deepEqual(r.got.map((q) => q.body), ['', 'abc', 'de', '']);
  assert.ok(r.closed);
  assertNoSmuggling(r);
});

test('a bad request pipelined after a good one: the good one answered, then 400, the rest never forwarded', async () => {
  const r = await send('GET /good HTTP/1.1\r\nHost: x\r\n\r\n' +
    `POST /bad HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`);
  assert.deepEqual(r.statuses, [200, 400]);
  assert.deepEqual(targets(r.got), ['GET /good']);
  assert.ok(r.closed);
});
