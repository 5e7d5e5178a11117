// Strict HTTP/1.x response framing over raw sockets (node:net / node:tls, no HTTP client
// library), for the framing tests of every server in the project (http_framing.test.mjs,
// http_framing_asgi.test.mjs, nginx_default.test.mjs; issue #35):
//
//   const conn = await RawConn.tcp(port);            // or RawConn.tls(port, { ca })
//   conn.send(rawRequest(CLIENTS['1.0 keep-alive'], { method: 'POST', path, body }));
//   const r = await readResponse(conn, CLIENTS['1.0 keep-alive']);
//   // r: { head, body (decoded Buffer), framing ('chunked'|'length'|'close'), persistent }
//   if (!r.persistent) await conn.expectEnd();
//
// readResponse() checks, and throws an AssertionError naming the rule otherwise:
//   - the head ends at the first CRLFCRLF; its first line is a status line and every other line
//     a well-formed field (token ":" value, no bare CR or LF, no obs-fold); Content-Length,
//     Transfer-Encoding and Connection at most once; never both framings;
//   - the body does not start with header-like text (a field line other than an SSE `data:`);
//   - HTTP/1.0 client: no Transfer-Encoding; Content-Length read exactly, or the body ends at
//     the close; `Connection: keep-alive` only when the client asked for it, and never on a body
//     ended by the close; the connection persists only with keep-alive asked and answered and a
//     Content-Length, and when it does not the head says `Connection: close`;
//   - HTTP/1.1 client: the chunked coding decoded strictly (hex sizes without extensions, CRLF
//     after each chunk, a final 0 chunk, no trailers) or an exact Content-Length, never a body
//     ended by the close; `Connection: close` in the head when the client sent it, and none
//     when it did not (the servers under test keep HTTP/1.1 connections alive);
//   - after a body on a connection that persists, no byte the response did not account for.
// expectEnd() then waits for the server's close and fails on any byte after the response.
// Waits are bounded by events (bytes, end, error), never by the clock.
import net from 'node:net';
import tls from 'node:tls';
import assert from 'node:assert/strict';

const CRLF = Buffer.from('\r\n');
const HEAD_END = Buffer.from('\r\n\r\n');
const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
const FIELD_LINE = new RegExp(`^(${TOKEN}):[ \\t]*([\\t\\x20-\\x7e\\x80-\\xff]*?)[ \\t]*$`);
const STATUS_LINE = /^HTTP\/1\.([01]) ([1-5]\d\d) [\t\x20-\x7e\x80-\xff]*$/;
// A line that looks like a header field (what the old sim wrote after the blank line).
const HEADER_LIKE = new RegExp(`^${TOKEN}:[ \\t]`);

// The client kinds: HTTP version and the Connection field the request carries (none: the
// version's default; HTTP/1.0 then means close, HTTP/1.1 keep-alive).
export const CLIENTS = {
  '1.0': { name: '1.0', version: '1.0', connection: null },
  '1.0 close': { name: '1.0 close', version: '1.0', connection: 'close' },  // nginx's default upstream request
  '1.0 keep-alive': { name: '1.0 keep-alive', version: '1.0', connection: 'keep-alive' },
  '1.1 close': { name: '1.1 close', version: '1.1', connection: 'close' },
  '1.1': { name: '1.1', version: '1.1', connection: null },
};

// Whether the client asked to keep the connection.
export function asksKeepAlive(client) {
  return client.version === '1.1' ? client.connection !== 'close' : client.connection === 'keep-alive';
}

// The bytes of one request from `client`.
export function rawRequest(client, { method = 'GET', path, body = null, host = '127.0.0.1', headers = [] }) {
  const lines = [`${method} ${path} HTTP/${client.version}`, `Host: ${host}`];
  for (const [k, v] of headers) lines.push(`${k}: ${v}`);
  if (client.connection) lines.push(`Connection: ${client.connection}`);
  const payload = body === null ? Buffer.alloc(0) : Buffer.from(body);
  if (body !== null) lines.push('Content-Type: application/json', `Content-Length: ${payload.length}`);
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), payload]);
}

// One client connection and the bytes it has received but not yet consumed.
export class RawConn {
  constructor(socket, label) {
    this.socket = socket;
    this.label = label;
    this.buf = Buffer.alloc(0);
    this.ended = false;
    this.error = null;
    this.notify = null;
    if (!socket) return;
    socket.on('data', (d) => { this.buf = Buffer.concat([this.buf, d]); this.wake(); });
    socket.on('end', () => { this.ended = true; this.wake(); });
    socket.on('close', () => { this.ended = true; this.wake(); });
    socket.on('error', (e) => { this.error = e; this.ended = true; this.wake(); });
  }

  static tcp(port, host = '127.0.0.1') {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, host);
      s.once('error', reject);
      s.once('connect', () => { s.off('error', reject); resolve(new RawConn(s, `tcp ${port}`)); });
    });
  }

  static tls(port, { ca, servername = 'localhost', host = '127.0.0.1' } = {}) {
    return new Promise((resolve, reject) => {
      const s = tls.connect({ port, host, ca, servername });
      s.once('error', reject);
      s.once('secureConnect', () => { s.off('error', reject); resolve(new RawConn(s, `tls ${port}`)); });
    });
  }

  // Bytes as received, then the end (for checking a recorded response).
  static fromBytes(bytes) {
    const c = new RawConn(null, 'recorded bytes');
    c.buf = Buffer.from(bytes);
    c.ended = true;
    return c;
  }

  wake() {
    const n = this.notify;
    this.notify = null;
    n?.();
  }

  send(bytes) {
    this.socket.write(bytes);
  }

  destroy() {
    this.socket?.destroy();
  }

  // Waits until `ready()` holds, or fails (naming `what`) when the stream ends first.
  async fill(ready, what) {
    while (!ready()) {
      if (this.ended) {
        assert.fail(`${this.label}: the connection ended before ${what}` +
          `${this.error ? ` (${this.error.code ?? this.error.message})` : ''}; unread: ${show(this.buf)}`);
      }
      await new Promise((r) => { this.notify = r; });
    }
  }

  take(n) {
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  // Everything up to the end of the stream.
  async readToEnd() {
    while (!this.ended) await new Promise((r) => { this.notify = r; });
    assert.equal(this.error, null, `${this.label}: the connection failed (${this.error?.code ?? this.error?.message}) instead of closing`);
    return this.take(this.buf.length);
  }

  // The server closes without sending another byte.
  async expectEnd() {
    const rest = await this.readToEnd();
    assert.equal(rest.length, 0, `${this.label}: bytes after the response, before the close: ${show(rest)}`);
  }
}

function show(bytes) {
  const s = JSON.stringify(Buffer.from(bytes).toString('latin1'));
  return s.length > 300 ? `${s.slice(0, 300)}..." (${bytes.length} bytes)` : s;
}

// The head's text (without the blank line) -> { version, status, fields: [[name, value]],
// get(name): the values of `name` (case-insensitive), text }.
export function parseHead(text) {
  const lines = text.split('\r\n');
  for (const l of lines) {
    assert.ok(!/[\r\n]/.test(l), `a bare CR or LF in the head line ${JSON.stringify(l)}`);
  }
  const m = STATUS_LINE.exec(lines[0]);
  assert.ok(m, `not a status line: ${JSON.stringify(lines[0])} (head ${JSON.stringify(text)})`);
  const fields = lines.slice(1).map((l) => {
    const f = FIELD_LINE.exec(l);
    assert.ok(f, `not a well-formed field line: ${JSON.stringify(l)} (head ${JSON.stringify(text)})`);
    return [f[1], f[2]];
  });
  const get = (name) => fields.filter(([k]) => k.toLowerCase() === name).map(([, v]) => v);
  for (const once of ['content-length', 'transfer-encoding', 'connection']) {
    assert.ok(get(once).length <= 1, `${once} more than once in ${JSON.stringify(text)}`);
  }
  return { version: `1.${m[1]}`, status: Number(m[2]), fields, get, text };
}

function connectionTokens(head) {
  const v = head.get('connection')[0];
  return v === undefined ? [] : v.split(',').map((t) => t.trim().toLowerCase()).filter((t) => t);
}

async function readChunked(conn) {
  const parts = [];
  for (;;) {
    await conn.fill(() => conn.buf.indexOf(CRLF) >= 0 || conn.buf.length > 32, 'a chunk-size line');
    const at = conn.buf.indexOf(CRLF);
    const line = at >= 0 && at <= 32 ? conn.take(at + 2).subarray(0, at).toString('latin1') : null;
    assert.ok(line !== null && /^[0-9a-fA-F]{1,16}$/.test(line),
      `not a chunk-size line: ${line === null ? show(conn.buf) : JSON.stringify(line)}`);
    const size = parseInt(line, 16);
    if (size === 0) {
      await conn.fill(() => conn.buf.length >= 2, 'the CRLF after the last chunk');
      const end = conn.take(2);
      assert.ok(end.equals(CRLF), `trailer fields or junk after the last chunk: ${show(Buffer.concat([end, conn.buf]))}`);
      return Buffer.concat(parts);
    }
    await conn.fill(() => conn.buf.length >= size + 2, `a chunk of ${size} bytes and its CRLF`);
    parts.push(Buffer.from(conn.take(size)));
    const crlf = conn.take(2);
    assert.ok(crlf.equals(CRLF), `no CRLF after a chunk of ${size} bytes: ${show(Buffer.concat([crlf, conn.buf]))}`);
  }
}

// Reads one response to a request of `client` (see the rules at the top). `method` HEAD would
// have no body; not used here.
export async function readResponse(conn, client) {
  await conn.fill(() => conn.buf.indexOf(HEAD_END) >= 0, 'the end of the head (CRLFCRLF)');
  const headLength = conn.buf.indexOf(HEAD_END);
  const head = parseHead(conn.take(headLength + 4).subarray(0, headLength).toString('latin1'));
  const tokens = connectionTokens(head);
  const te = head.get('transfer-encoding')[0];
  const cl = head.get('content-length')[0];
  assert.ok(te === undefined || cl === undefined, `both Transfer-Encoding and Content-Length: ${head.text}`);
  if (cl !== undefined) assert.match(cl, /^\d+$/, `Content-Length ${JSON.stringify(cl)}`);
  let framing;
  let body;
  let persistent;
  if (client.version === '1.0') {
    assert.equal(te, undefined, `Transfer-Encoding to an HTTP/1.0 client: ${head.text}`);
    if (tokens.includes('keep-alive')) {
      assert.equal(client.connection, 'keep-alive', `Connection: keep-alive to a client that did not ask: ${head.text}`);
    }
    framing = cl !== undefined ? 'length' : 'close';
    assert.ok(framing === 'length' || !tokens.includes('keep-alive'),
      `Connection: keep-alive on a body that ends with the connection: ${head.text}`);
    persistent = framing === 'length' && tokens.includes('keep-alive') && !tokens.includes('close');
  } else {
    if (te !== undefined) {
      assert.equal(te.toLowerCase(), 'chunked', `Transfer-Encoding ${te}`);
      framing = 'chunked';
    } else {
      assert.notEqual(cl, undefined, `neither chunked nor Content-Length to an HTTP/1.1 client: ${head.text}`);
      framing = 'length';
    }
    if (client.connection === 'close') {
      assert.ok(tokens.includes('close'), `no Connection: close answering Connection: close: ${head.text}`);
    } else {
      assert.ok(!tokens.includes('close'), `an HTTP/1.1 keep-alive client's connection closed: ${head.text}`);
    }
    persistent = !tokens.includes('close');
  }
  if (framing === 'chunked') {
    body = await readChunked(conn);
  } else if (framing === 'length') {
    const n = Number(cl);
    await conn.fill(() => conn.buf.length >= n, `a body of Content-Length ${n}`);
    body = Buffer.from(conn.take(n));
  } else {
    body = await conn.readToEnd();
  }
  const firstLine = body.subarray(0, Math.max(0, body.indexOf(0x0a))).toString('latin1');
  assert.ok(!(HEADER_LIKE.test(firstLine) && !firstLine.startsWith('data: ')),
    `header-like text at the start of the body: ${show(body)}`);
  if (persistent) assert.equal(conn.buf.length, 0, `bytes after the response: ${show(conn.buf)}`);
  // RFC 9112 §9.6: a server that closes after the response says so (to an HTTP/1.0 client too:
  // a status line of HTTP/1.1 without "close" means the connection persists, §9.3).
  if (!persistent) assert.ok(tokens.includes('close'), `the connection ends without Connection: close: ${head.text}`);
  return { head, body, framing, persistent };
}

// A streamed body: `data: {json}\n\n` events, then `data: [DONE]\n\n`, nothing else. Returns
// the parsed events.
export function checkSse(body) {
  const text = body.toString('utf8');
  assert.ok(text.endsWith('data: [DONE]\n\n'), `the stream does not end with data: [DONE]: ${show(body)}`);
  const events = text.slice(0, -'data: [DONE]\n\n'.length).split('\n\n');
  assert.equal(events.pop(), '', `the stream is not a sequence of events: ${show(body)}`);
  assert.ok(events.length > 0, 'no event before [DONE]');
  return events.map((e) => {
    assert.ok(e.startsWith('data: {') && !e.includes('\n'), `not a data: {json} event: ${JSON.stringify(e)}`);
    const json = JSON.parse(e.slice('data: '.length));
    assert.ok(typeof json === 'object' && json !== null && !Array.isArray(json), e);
    return json;
  });
}

// Response ids and creation times differ between two answers to the same request; everything
// else of a body must be byte-equal (the sim's output is a function of the request under --seed,
// with the prefix cache off).
export function normalize(text) {
  return text.replace(/"id":"[^"]*"/g, '"id":"X"').replace(/"created":\d+/g, '"created":X');
}

// A request as the framing tests send it: { name, method, path, body (an object, sent as JSON)
// or raw (text), stream (an SSE answer), status (default 200), contentType (a RegExp; default
// application/json, parsed), captured (the capture records it), own (the server's own answer,
// its body changing from one request to the next) }.

// Sends `req` as `client` on `conn` and reads the answer strictly; returns readResponse()'s
// result and `text`, the body normalized (or as received, with `exact`).
export async function exchange(conn, client, req, { exact = false } = {}) {
  const body = req.raw ?? (req.body ? JSON.stringify(req.body) : null);
  conn.send(rawRequest(client, { method: req.method, path: req.path, body }));
  const r = await readResponse(conn, client);
  const what = `${req.name} as ${client.name}`;
  assert.equal(r.head.status, req.status ?? 200, `${what}: ${r.head.text}\n${r.body}`);
  const type = r.head.get('content-type')[0] ?? '';
  if (req.stream) {
    assert.match(type, /^text\/event-stream/, what);
    checkSse(r.body);
  } else {
    assert.match(type, req.contentType ?? /^application\/json/, what);
    if (!req.contentType) JSON.parse(r.body.toString('utf8'));
  }
  // latin1: one character per byte, so that equal texts are equal bytes.
  return { ...r, text: exact ? r.body.toString('latin1') : normalize(r.body.toString('utf8')) };
}

// Every request of `requests` as `client`, each on a new connection from `connect()`:
//   - the framing: a stream chunked for HTTP/1.1 and ended by the close for HTTP/1.0; any
//     other body with a Content-Length;
//   - a connection that must not persist is closed by the server after the response, and
//     nothing follows it; one that persists carries a second request answered the same; an
//     HTTP/1.1 one then a third with Connection: close, after which the server closes;
//   - `bodies` (a Map by request name): each body (normalized, or as received with `exact`)
//     equals the first one seen for its request, from any server and client kind;
//   - `record`: gets the body of each request the server answered that has `captured`.
// keeps10Alive: whether the server keeps an HTTP/1.0 connection that asked for it, after a
// body of known length (true: must, false: must not, null: may).
export async function checkClient(connect, client, requests, { bodies, keeps10Alive = true, record = null, exact = false } = {}) {
  for (const req of requests) {
    const what = `${req.name} as ${client.name}`;
    const conn = await connect();
    try {
      const first = await exchange(conn, client, req, { exact });
      if (req.captured) record?.push(req.body);
      if (!req.own) {
        if (!bodies.has(req.name)) bodies.set(req.name, first.text);
        assert.equal(first.text, bodies.get(req.name), `${what}: another body than the first server's and client's`);
      }
      assert.equal(first.framing, req.stream ? (client.version === '1.0' ? 'close' : 'chunked') : 'length',
        `${what}: ${first.head.text}`);
      let expectPersistent = asksKeepAlive(client);
      if (client.version === '1.0' && (req.stream || !keeps10Alive)) expectPersistent = false;
      if (client.version === '1.0' && !req.stream && keeps10Alive === null) expectPersistent = first.persistent;
      assert.equal(first.persistent, expectPersistent,
        `${what}: the connection ${first.persistent ? 'persists' : 'does not persist'}\n${first.head.text}`);
      if (!first.persistent) {
        await conn.expectEnd();
        continue;
      }
      // Kept alive: the connection really carries a second request, answered the same.
      const second = await exchange(conn, client, req, { exact });
      if (req.captured) record?.push(req.body);
      if (!req.own) assert.equal(second.text, first.text, `${what}: the second answer on the connection differs`);
      assert.ok(second.persistent, `${what}: the second answer closes the connection`);
      // And HTTP/1.1 then closes when asked to, after a third answer.
      if (client.version === '1.1') {
        const third = await exchange(conn, CLIENTS['1.1 close'], req, { exact });
        if (req.captured) record?.push(req.body);
        if (!req.own) assert.equal(third.text, first.text, `${what}: the third answer on the connection differs`);
        await conn.expectEnd();
      }
    } finally {
      conn.destroy();
    }
  }
}
