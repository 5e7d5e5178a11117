// Self-test of the TLS harness (tls_nginx.mjs): nginx terminating TLS in front of `llmtap sim`,
// checked with Node's own https/tls client: every server block answers or fails the way the
// TLS tests of replay and proxy will rely on.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpsRequest } from 'node:https';
import { request as httpRequest } from 'node:http';
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { startSim, startUpstream, stop, url } from './proxy_helpers.mjs';
import { startTlsNginx } from './tls_nginx.mjs';

let sim;
let ngx;
let ca;

before(async () => {
  // 20 ms per decode step and no speculation: one SSE event per step, far enough apart that
  // buffering anywhere on the way would merge them.
  sim = await startSim(['--spec-tokens', '0'], { '--itl-ms': '20' });
  try {
    ngx = await startTlsNginx({ upstreamPort: sim.port });
  } catch (e) {
    await stop(sim);
    throw e;
  }
  ca = readFileSync(ngx.caFile);
});

after(async () => {
  if (ngx) await ngx.stop();
  if (sim) await stop(sim);
});

const CHAT = { model: 'm', messages: [{ role: 'user', content: 'hello over tls' }], max_tokens: 6 };

// One request on a new connection (agent: false). Resolves { status, headers, body, events
// (each data event's arrival ms and text), protocol, reused, session } or rejects with the
// client's error (err.code: Node's TLS verification code).
function send(name, { path = '/v1/chat/completions', body, tls = {}, scheme } = {}) {
  const useHttp = (scheme ?? (name === 'plain' ? 'http' : 'https')) === 'http';
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const options = {
    host: '127.0.0.1',
    port: ngx.ports[name],
    path,
    method: payload === undefined ? 'GET' : 'POST',
    headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
    agent: false,
    ...(useHttp ? {} : tls),
  };
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = (useHttp ? httpRequest : httpsRequest)(options, (res) => {
      const events = [];
      res.setEncoding('utf8');
      res.on('data', (d) => events.push({ ms: performance.now() - started, text: d }));
      res.on('end', () => resolve({
        status: res.statusCode,
        headers: res.headers,
        body: events.map((e) => e.text).join(''),
        events,
        protocol: useHttp ? null : res.socket.getProtocol?.(),
        reused: useHttp ? null : res.socket.isSessionReused?.(),
        session,
      }));
      res.on('error', reject);
    });
    let session;
    req.on('socket', (s) => s.on('session', (sess) => { session = sess; }));
    req.on('error', reject);
    req.setTimeout(30000, () => req.destroy(new Error(`no answer from ${name} within 30 s`)));
    req.end(payload);
  });
}

async function rejectsWith(promise, code) {
  await assert.rejects(promise, (e) => {
    assert.match(String(e.code), code instanceof RegExp ? code : new RegExp(`^${code}$`), `${e.code}: ${e.message}`);
    return true;
  });
}

test('ok: a chat completion with the test CA trusted, over TLS 1.3; TLS 1.2 when the client caps it', async () => {
  const r = await send('ok', { body: CHAT, tls: { ca } });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.protocol, 'TLSv1.3');
  const j = JSON.parse(r.body);
  assert.equal(j.object, 'chat.completion');
  assert.equal(j.usage.completion_tokens, 6);
  const r12 = await send('ok', { body: CHAT, tls: { ca, maxVersion: 'TLSv1.2' } });
  assert.equal(r12.status, 200);
  assert.equal(r12.protocol, 'TLSv1.2');
  // By host name too (verified against SNI localhost, which the certificate names).
  const byName = await send('ok', { path: '/health', tls: { ca, servername: 'localhost' } });
  assert.equal(byName.status, 200);
});

test('ok: a stream passes through chunk by chunk (proxy_buffering off)', async () => {
  const r = await send('ok', { body: { ...CHAT, stream: true }, tls: { ca } });
  assert.equal(r.status, 200, r.body);
  assert.match(r.headers['content-type'], /text\/event-stream/);
  const data = r.body.split('\n').filter((l) => l.startsWith('data: '));
  assert.equal(data[data.length - 1], 'data: [DONE]');
  assert.ok(data.length >= 7, `${data.length} SSE events`);
  // Chunk by chunk: an upstream that sends each next event only once the client read the one
  // before (tests/upstream/app.py "lockstep-stream", released by GET /release) behind an nginx
  // of the same configuration. Were nginx to hold anything back, the client would wait for it
  // and the upstream for the client: no next event, whatever the machine's load (30 s guard).
  const upstream = await startUpstream();
  let front;
  try {
    front = await startTlsNginx({ upstreamPort: upstream.port, certDir: dirname(ngx.caFile) });
    const events = await new Promise((resolve, reject) => {
      const payload = JSON.stringify({ model: 'lockstep-stream', messages: CHAT.messages, stream: true });
      const reads = [];
      let seen = 0;
      const req = httpsRequest({
        host: '127.0.0.1', port: front.ports.ok, path: '/v1/chat/completions', method: 'POST', agent: false,
        ca,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
      }, (res) => {
        res.setEncoding('utf8');
        res.on('data', (d) => {
          const n = d.split('\n\n').length - 1;
          reads.push(n);
          seen += n;
          if (seen >= 6) {
            req.destroy();
            resolve(reads);
          } else if (n > 0) {
            fetch(url(upstream, '/release')).then((r) => r.text()).catch((e) => { req.destroy(); reject(e); });
          }
        });
        res.on('end', () => { req.destroy(); reject(new Error(`the stream ended after ${seen} events`)); });
        res.on('error', () => {});  // the destroy above
      });
      req.on('error', (e) => { if (seen < 6) reject(e); });
      req.setTimeout(30000, () => req.destroy(new Error(`${seen} events within 30 s: ${JSON.stringify(reads)}`)));
      req.end(payload);
    });
    assert.deepEqual(events, [1, 1, 1, 1, 1, 1], 'one event per read');
  } finally {
    if (front) await front.stop();
    await stop(upstream);
  }
});

test('/metrics and /health pass through', async () => {
  const m = await send('ok', { path: '/metrics', tls: { ca } });
  assert.equal(m.status, 200);
  assert.match(m.body, /vllm:num_requests_running/);
  const h = await send('ok', { path: '/health', tls: { ca } });
  assert.equal(h.status, 200);
});

test('verification failures carry Node\'s codes: expired, wrong host, unknown CA', async () => {
  await rejectsWith(send('expired', { body: CHAT, tls: { ca } }), 'CERT_HAS_EXPIRED');
  await rejectsWith(send('wronghost', { body: CHAT, tls: { ca } }), 'ERR_TLS_CERT_ALTNAME_INVALID');
  await rejectsWith(send('ok', { body: CHAT }), 'UNABLE_TO_VERIFY_LEAF_SIGNATURE');
  // Accepted when the client does not verify.
  const r = await send('expired', { body: CHAT, tls: { rejectUnauthorized: false } });
  assert.equal(r.status, 200);
});

test('mtls: HTTP 400 without a client certificate, 200 with client.pem', async () => {
  // nginx finishes the handshake and refuses the request, not the connection.
  const without = await send('mtls', { body: CHAT, tls: { ca } });
  assert.equal(without.status, 400);
  assert.match(without.body, /No required SSL certificate was sent/);
  const { cert, key } = ngx.cert('client');
  const withCert = await send('mtls', { body: CHAT, tls: { ca, cert: readFileSync(cert), key: readFileSync(key) } });
  assert.equal(withCert.status, 200, withCert.body);
  const log = await ngx.waitAccessLog('mtls', 2);
  assert.deepEqual(log.map((l) => [l.status, l.ssl_client_verify]), [[400, 'NONE'], [200, 'SUCCESS']]);
});

test('tls12: negotiates TLS 1.2 only', async () => {
  const r = await send('tls12', { body: CHAT, tls: { ca } });
  assert.equal(r.status, 200);
  assert.equal(r.protocol, 'TLSv1.2');
  await rejectsWith(send('tls12', { body: CHAT, tls: { ca, minVersion: 'TLSv1.3' } }), /PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL|EPROTO/);
});

test('reconnect: one request per connection; a session offered again is resumed', async () => {
  for (const maxVersion of ['TLSv1.3', 'TLSv1.2']) {
    const first = await send('reconnect', { body: CHAT, tls: { ca, maxVersion } });
    assert.equal(first.status, 200);
    assert.equal(first.headers.connection, 'close');
    assert.equal(first.reused, false);
    assert.ok(first.session, `${maxVersion}: no session ticket received`);
    const again = await send('reconnect', { body: CHAT, tls: { ca, maxVersion, session: first.session } });
    assert.equal(again.status, 200);
    assert.equal(again.protocol, maxVersion);
    assert.equal(again.reused, true, `${maxVersion}: session not resumed`);
    const fresh = await send('reconnect', { body: CHAT, tls: { ca, maxVersion } });
    assert.equal(fresh.reused, false);
  }
  const log = await ngx.waitAccessLog('reconnect', 6);
  assert.deepEqual(log.map((l) => l.ssl_session_reused), ['.', 'r', '.', '.', 'r', '.']);
  assert.ok(log.every((l) => l.connection_requests === 1));
});

test('plain: http answers; http to a TLS port gets 400, https to the plain port fails', async () => {
  const r = await send('plain', { body: CHAT });
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(r.body).object, 'chat.completion');
  const toTls = await send('ok', { body: CHAT, scheme: 'http' });
  assert.equal(toTls.status, 400);
  assert.match(toTls.body, /plain HTTP request was sent to HTTPS port/);
  await rejectsWith(send('plain', { body: CHAT, scheme: 'https', tls: { ca } }), /WRONG_VERSION_NUMBER|EPROTO/);
});
