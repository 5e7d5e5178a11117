// Small generic helpers of the reliability suite's HTTP tests: raw TCP servers that stand in
// for an upstream (one that records the exact bytes of every request it receives, or one that
// misbehaves on purpose), a raw client that writes exact bytes and collects what comes back, a
// parser for the responses in those bytes, and the fd count of a process. Everything listens
// on 127.0.0.1 port 0 and is bounded in time.
import net from 'node:net';
import { readdirSync } from 'node:fs';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Waits until `fn` holds, polling every `every` ms. `ms` is a guard against a hang only: a wait
// for something the test caused ends when it happened, so a loaded machine makes it later,
// never red.
export async function waitFor(what, fn, ms = 120000, every = 50) {
  const end = Date.now() + ms;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(every);
  }
}

// Open file descriptors of a process (entries of /proc/PID/fd).
export function fdCount(pid) {
  return readdirSync(`/proc/${pid}/fd`).length;
}

// A raw TCP server on a free loopback port; `onConnection(socket, server)` handles each
// connection. `server.open` is the number of connections open right now, `server.accepted`
// the total. close() destroys every connection and stops listening.
export function startRawServer(onConnection) {
  return new Promise((resolve, reject) => {
    const sockets = new Set();
    const state = { port: 0, open: 0, accepted: 0 };
    const srv = net.createServer((socket) => {
      sockets.add(socket);
      state.open++;
      state.accepted++;
      socket.on('error', () => {});
      socket.on('close', () => { sockets.delete(socket); state.open--; });
      onConnection(socket, state);
    });
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      state.port = srv.address().port;
      state.close = () => new Promise((r) => {
        for (const s of sockets) s.destroy();
        srv.close(() => r());
      });
      resolve(state);
    });
  });
}

// Splits the request heads and bodies out of `buf` (a connection's bytes). Bodies are framed by
// Content-Length only: the proxy always forwards with Content-Length, so anything else
// (Transfer-Encoding, a duplicate or malformed Content-Length) is flagged as `anomaly`.
// Returns { requests, rest } with `rest` the bytes of an incomplete request.
export function splitRequests(buf) {
  const requests = [];
  for (;;) {
    const end = buf.indexOf('\r\n\r\n');
    if (end < 0) break;
    const head = buf.subarray(0, end).toString('latin1');
    const lines = head.split('\r\n');
    const [method, target, version] = lines[0].split(' ');
    const headers = lines.slice(1).map((l) => {
      const i = l.indexOf(':');
      return [l.slice(0, i).toLowerCase(), l.slice(i + 1).trim()];
    });
    const anomalies = [];
    const cls = headers.filter(([k]) => k === 'content-length').map(([, v]) => v);
    if (cls.length > 1) anomalies.push('several Content-Length');
    if (cls.length === 1 && !/^\d+$/.test(cls[0])) anomalies.push(`bad Content-Length ${cls[0]}`);
    if (headers.some(([k]) => k === 'transfer-encoding')) anomalies.push('Transfer-Encoding');
    if (lines.slice(1).some((l) => l === '' || l[0] === ' ' || l[0] === '\t' || !l.includes(':'))) {
      anomalies.push('malformed header line');
    }
    const length = cls.length === 1 && /^\d+$/.test(cls[0]) ? Number(cls[0]) : 0;
    if (buf.length < end + 4 + length) break;
    requests.push({
      method, target, version, head, headers,
      body: buf.subarray(end + 4, end + 4 + length).toString('latin1'),
      anomaly: anomalies.length ? anomalies.join(', ') : null,
    });
    buf = buf.subarray(end + 4 + length);
  }
  return { requests, rest: buf };
}

// An upstream that records every request it receives (exact bytes per connection, and each
// request split out) and answers each one with a fixed, valid JSON response naming the
// request's sequence number and target. `state.requests`, `state.bytes` (all connections'
// bytes in arrival order), reset().
export async function startRecorder() {
  const recorded = { requests: [], chunks: [] };
  const server = await startRawServer((socket) => {
    let pending = Buffer.alloc(0);
    socket.on('data', (d) => {
      recorded.chunks.push(d);
      pending = Buffer.concat([pending, d]);
      const { requests, rest } = splitRequests(pending);
      pending = rest;
      for (const r of requests) {
        r.seq = recorded.requests.length;
        recorded.requests.push(r);
        const body = JSON.stringify({ upstream_seq: r.seq, target: r.target, body_bytes: r.body.length });
        socket.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      }
    });
  });
  server.recorded = recorded;
  server.requests = () => recorded.requests;
  server.bytes = () => Buffer.concat(recorded.chunks).toString('latin1');
  server.reset = () => { recorded.requests.length = 0; recorded.chunks.length = 0; };
  return server;
}

// Connects to 127.0.0.1:port, writes `parts` (a string/Buffer, or an array of them written
// `gapMs` apart), and collects what comes back until the peer closes or `timeoutMs` passes.
// With `keepSendingMs`, then one more byte every that many ms until the peer closes: a peer
// that waits for the client to go quiet (a drain deadline) never closes. This side ends its half
// when the peer ends its own (a peer's close is what ends the exchange either way). With
// `untilResponse`, a complete response ends it too (closed: false).
// Resolves { data (latin1 string), closed, timedOut, error, ms } and never rejects.
export function exchange(port, parts, { timeoutMs = 3000, gapMs = 0, endAfterWrite = false, keepSendingMs = 0, untilResponse = false } = {}) {
  const list = Array.isArray(parts) ? parts : [parts];
  return new Promise((resolve) => {
    const start = Date.now();
    const chunks = [];
    let done = false;
    let error = null;
    const socket = net.connect(port, '127.0.0.1');
    let keepSending;
    const finish = (closed, timedOut) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearInterval(keepSending);
      socket.destroy();
      resolve({ data: Buffer.concat(chunks).toString('latin1'), closed, timedOut, error,
        ms: Date.now() - start });
    };
    const timer = setTimeout(() => finish(false, true), timeoutMs);
    socket.on('data', (d) => {
      chunks.push(d);
      if (untilResponse && parseResponses(Buffer.concat(chunks).toString('latin1')).some((r) => r.complete && r.status >= 200)) {
        finish(false, false);
      }
    });
    socket.on('error', (e) => { error = e.code || e.message; });
    socket.on('close', () => finish(true, false));
    socket.on('connect', async () => {
      for (let i = 0; i < list.length && !done; ++i) {
        if (i > 0 && gapMs) await sleep(gapMs);
        if (done || socket.destroyed) break;
        socket.write(list[i]);
      }
      if (endAfterWrite && !done) socket.end();
      if (keepSendingMs && !done) {
        keepSending = setInterval(() => { if (!socket.destroyed && socket.writable) socket.write('x'); }, keepSendingMs);
      }
    });
    socket.on('end', () => clearInterval(keepSending));
  });
}

// Parses the HTTP/1.1 responses in `text` (a connection's bytes, latin1). Bodies are framed by
// Content-Length, chunked, or the end of the data. Each response: { status, headers (lower-case
// names, arrays of values), body, complete } where complete says its framing ended properly.
export function parseResponses(text) {
  const out = [];
  let rest = text;
  while (rest.length > 0) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) {
      out.push({ status: 0, headers: {}, body: rest, complete: false, junk: true });
      break;
    }
    const lines = rest.slice(0, end).split('\r\n');
    const m = lines[0].match(/^HTTP\/1\.[01] (\d{3})/);
    const headers = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      const k = l.slice(0, i).toLowerCase();
      (headers[k] ||= []).push(l.slice(i + 1).trim());
    }
    const r = { status: m ? Number(m[1]) : 0, headers, body: '', complete: false };
    out.push(r);
    rest = rest.slice(end + 4);
    if (r.status >= 100 && r.status < 200) {
      r.complete = true;
      continue;
    }
    const te = (headers['transfer-encoding'] || []).join(',').toLowerCase();
    if (te.includes('chunked')) {
      for (;;) {
        const le = rest.indexOf('\r\n');
        if (le < 0) { r.body += rest; rest = ''; break; }
        const size = parseInt(rest.slice(0, le), 16);
        if (Number.isNaN(size)) { r.body += rest; rest = ''; break; }
        if (size === 0) {
          const te2 = rest.indexOf('\r\n\r\n', le - 2 >= 0 ? le - 2 : 0);
          if (te2 < 0) { rest = ''; break; }
          rest = rest.slice(te2 + 4);
          r.complete = true;
          break;
        }
        if (rest.length < le + 2 + size + 2) { r.body += rest.slice(le + 2); rest = ''; break; }
        r.body += rest.slice(le + 2, le + 2 + size);
        rest = rest.slice(le + 2 + size + 2);
      }
    } else if (headers['content-length']) {
      const n = Number(headers['content-length'][0]);
      r.body = rest.slice(0, n);
      r.complete = rest.length >= n;
      rest = rest.slice(n);
    } else {
      r.body = rest;
      rest = '';
    }
  }
  return out;
}

// A loopback port that refuses connections for the rest of the process (held, not just freed:
// see proxy_helpers.mjs).
export { closedPort } from '../node/proxy_helpers.mjs';
