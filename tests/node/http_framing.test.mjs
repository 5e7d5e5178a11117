// Response framing of every llmtap server, byte by byte over raw sockets (issue #35): `llmtap
// sim`; `llmtap proxy` in front of it, capturing; the same proxy listening with TLS. Each gets
// every client kind (HTTP/1.0; HTTP/1.0 with Connection: close, what nginx's default
// proxy_pass sends; HTTP/1.0 with Connection: keep-alive; HTTP/1.1 with Connection: close;
// HTTP/1.1 keep-alive) x every request (chat and completions streamed and not, GET /v1/models,
// a 400 for a body that is no JSON, and the proxy's own /llmtap/metrics), one connection each,
// read by the strict reader of http_framing.mjs: a well-formed head ended by the first CRLFCRLF,
// no header-like text opening the body, the framing the client's version allows (chunked
// decoded strictly, exact Content-Length, or the close for HTTP/1.0 only), Connection: close
// honoured and then the server closes, keep-alive honoured and then a second request on the
// same socket answered the same. Streamed bodies are `data: {json}` events ending with
// `data: [DONE]`, and every body (ids and times aside) is the same bytes whatever the client
// kind and whichever server answered. The first test feeds the bytes the sim sent before
// commit 0bf041a to the same reader: it must reject them.
// The ASGI middleware's app is in http_framing_asgi.test.mjs, nginx in nginx_default.test.mjs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSim, startProxy, stop, url, tempDir, cleanup, readLines } from './proxy_helpers.mjs';
import { makeTestCerts } from './tls_nginx.mjs';
import { CLIENTS, RawConn, readResponse, checkSse, checkClient } from './http_framing.mjs';

const messages = [{ role: 'user', content: 'Frame this answer, byte by byte.' }];
// Every request is sent the same way to each server; `captured`: a row of the proxy's capture.
const REQUESTS = [
  { name: 'chat streamed', method: 'POST', path: '/v1/chat/completions', stream: true, captured: true,
    body: { model: 'm', messages, max_tokens: 4, stream: true, stream_options: { include_usage: true } } },
  { name: 'completions streamed', method: 'POST', path: '/v1/completions', stream: true, captured: true,
    body: { model: 'm', prompt: 'Once upon a time', max_tokens: 4, stream: true } },
  { name: 'chat', method: 'POST', path: '/v1/chat/completions', captured: true,
    body: { model: 'm', messages, max_tokens: 4 } },
  { name: 'completions', method: 'POST', path: '/v1/completions', captured: true,
    body: { model: 'm', prompt: 'Once upon a time', max_tokens: 4 } },
  { name: 'models', method: 'GET', path: '/v1/models' },
  { name: 'no JSON', method: 'POST', path: '/v1/chat/completions', raw: '{"model": "m", "messages": [', status: 400 },
];
// The proxy's own answer (its head, not a relayed one); its body changes with every request.
const METRICS = { name: 'proxy metrics', method: 'GET', path: '/llmtap/metrics', contentType: /^text\/plain/, own: true };

let sim;
let proxy;
let tlsProxy;
let dir;
let certDir;
// The normalized body of each request, as the first server and client kind got it.
const bodies = new Map();
// The request bodies each proxy received (for its capture).
const sent = { proxy: [], tls: [] };

before(async () => {
  dir = tempDir();
  certDir = makeTestCerts(join(dir, 'certs'));
  // Exactly max_tokens tokens, and no prefix cache: an answer is a function of its request.
  sim = await startSim(['--cache-blocks', '0'], { '--output-tokens-stddev': '0' });
  [proxy, tlsProxy] = await Promise.all([
    startProxy({ upstream: url(sim), args: ['--capture', '--capture-path', join(dir, 'proxy.jsonl')] }),
    startProxy({ upstream: url(sim), args: ['--capture', '--capture-path', join(dir, 'tls.jsonl'),
      '--tls-cert', join(certDir, 'server.pem'), '--tls-key', join(certDir, 'server.key')] }),
  ]);
});

after(async () => {
  for (const s of [tlsProxy, proxy, sim]) if (s) await stop(s).catch(() => {});
  if (dir) cleanup(dir);
});

// Before commit 0bf041a the sim ended the head of a streamed answer to HTTP/1.0 and
// Connection: close clients before writing `Connection: close`, which so opened the body. The
// reader must reject those bytes (and take the fixed ones).
test('the strict reader rejects the old sim bytes and takes the fixed ones', async () => {
  const event = 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" hi"},"logprobs":null,"finish_reason":null}]}\n\n';
  const done = 'data: [DONE]\n\n';
  const chunk = (s) => `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`;
  const chunks = `${chunk(event)}${chunk(done)}0\r\n\r\n`;
  const head = 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n';
  const oldClose = `${head}Transfer-Encoding: chunked\r\n\r\nConnection: close\r\n${chunks}`;
  const oldHttp10 = `${head}\r\nConnection: close\r\n${event}${done}`;
  const read = (bytes, client) => readResponse(RawConn.fromBytes(Buffer.from(bytes)), CLIENTS[client]);
  // HTTP/1.1 Connection: close: the head lacks Connection: close ...
  await assert.rejects(read(oldClose, '1.1 close'), /no Connection: close answering Connection: close/);
  // ... and its body opens with a line that is no chunk size.
  await assert.rejects(read(oldClose, '1.1'), /not a chunk-size line: "Connection: close"/);
  // HTTP/1.0: the body opens with a header line, and is no SSE stream.
  await assert.rejects(read(oldHttp10, '1.0'), /header-like text at the start of the body/);
  await assert.rejects(read(oldHttp10, '1.0 keep-alive'), /header-like text at the start of the body/);
  assert.throws(() => checkSse(Buffer.from(`Connection: close\r\n${event}${done}`)), /not a data: \{json\} event/);
  // The fixed bytes.
  const fixed = await read(`${head}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunks}`, '1.1 close');
  assert.equal(fixed.body.toString(), event + done);
  assert.equal(checkSse(fixed.body).length, 1);
  const fixed10 = await read(`${head}Connection: close\r\n\r\n${event}${done}`, '1.0');
  assert.equal(fixed10.body.toString(), event + done);
  // Other framing faults the reader refuses.
  await assert.rejects(read(`${head}Transfer-Encoding: chunked\r\n\r\n${chunk(event)}`, '1.1'), /ended before a chunk-size line/);
  await assert.rejects(read(`${head}Transfer-Encoding: chunked\r\n\r\n${chunk(event).replace('\r\ndata', '\ndata')}0\r\n\r\n`, '1.1'), /chunk/);
  await assert.rejects(read(`${head}\r\n${event}${done}`, '1.0'), /the connection ends without Connection: close/);
  await assert.rejects(read(`${head}Transfer-Encoding: chunked\r\n\r\n${chunks}`, '1.0'), /Transfer-Encoding to an HTTP\/1\.0 client/);
  await assert.rejects(read(`${head}\r\n${event}${done}`, '1.1 close'), /neither chunked nor Content-Length/);
  await assert.rejects(read(`${head}Content-Length: 5\r\nConnection: keep-alive\r\n\r\n{"a":`, '1.0'), /keep-alive to a client that did not ask/);
  await assert.rejects(read(`${head}Connection: keep-alive\r\n\r\n${event}${done}`, '1.0 keep-alive'), /keep-alive on a body that ends with the connection/);
  await assert.rejects(read(`${head}Content-Length: 99\r\n\r\n{}`, '1.1'), /ended before a body of Content-Length 99/);
  await assert.rejects(read(`HTTP/1.1 200 OK\r\nBad Field: x\r\nContent-Length: 0\r\n\r\n`, '1.1'), /not a well-formed field line/);
});

for (const client of Object.values(CLIENTS)) {
  test(`llmtap sim, ${client.name} client`, { timeout: 120000 }, async () => {
    await checkClient(() => RawConn.tcp(sim.port), client, REQUESTS, { bodies });
  });
}

for (const client of Object.values(CLIENTS)) {
  test(`llmtap proxy (capturing) in front of the sim, ${client.name} client`, { timeout: 120000 }, async () => {
    await checkClient(() => RawConn.tcp(proxy.port), client, [...REQUESTS, METRICS], { bodies, record: sent.proxy });
  });
}

for (const client of Object.values(CLIENTS)) {
  test(`llmtap proxy listening with TLS, ${client.name} client`, { timeout: 120000 }, async () => {
    const ca = readFileSync(join(certDir, 'ca.pem'));
    await checkClient(() => RawConn.tls(tlsProxy.port, { ca }), client, [...REQUESTS, METRICS], { bodies, record: sent.tls });
  });
}

test('each proxy captured every inference request it relayed, whatever the framing', { timeout: 120000 }, async () => {
  for (const [name, p] of [['proxy', proxy], ['tls', tlsProxy]]) {
    assert.deepEqual(await stop(p), { code: 0, signal: null }, p.stderr);
    const rows = readLines(join(dir, `${name}.jsonl`));
    assert.ok(sent[name].length > 0);
    const key = (b) => JSON.stringify(b);
    assert.deepEqual(rows.map((r) => key(r.payload)).sort(), sent[name].map(key).sort(), `${name}: captured payloads`);
  }
});
