// The ASGI middleware's framing (issue #35): llmtap.asgi.CaptureMiddleware in the FastAPI app
// under uvicorn (tests/python/asgi_app.py), against the same app without it
// (tests/upstream/app.py), over raw sockets with the strict reader of http_framing.mjs. The
// framing is uvicorn's (h11: it never keeps an HTTP/1.0 connection, Connection: keep-alive or
// not), so this checks that the middleware leaves it intact: every client kind (HTTP/1.0 with
// and without Connection: close or keep-alive, HTTP/1.1 with Connection: close and keep-alive)
// x chat and completions, streamed and not, gets a well-formed answer, and through the
// middleware exactly the bytes the app alone sends; and the capture holds every request.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { startUpstream, startAsgi, stop, tempDir, cleanup, readLines } from './proxy_helpers.mjs';
import { CLIENTS, RawConn, checkClient } from './http_framing.mjs';

const messages = [{ role: 'user', content: 'Frame this answer, byte by byte.' }];
const REQUESTS = [
  { name: 'chat streamed', method: 'POST', path: '/v1/chat/completions', stream: true, captured: true,
    body: { model: 'm', messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } } },
  { name: 'completions streamed', method: 'POST', path: '/v1/completions', stream: true, captured: true,
    body: { model: 'm', prompt: 'Once upon a time', max_tokens: 6, stream: true } },
  { name: 'chat', method: 'POST', path: '/v1/chat/completions', captured: true,
    body: { model: 'm', messages, max_tokens: 6 } },
  { name: 'completions', method: 'POST', path: '/v1/completions', captured: true,
    body: { model: 'm', prompt: 'Once upon a time', max_tokens: 6 } },
];

let app;
let asgi;
let dir;
// The app's own bytes of each request (it answers deterministically: fixed ids and times).
const bodies = new Map();
const sent = [];

before(async () => {
  dir = tempDir();
  const env = { NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: JSON.stringify({ path: join(dir, 'asgi.jsonl') }) };
  [app, asgi] = await Promise.all([startUpstream(), startAsgi({ env })]);
});

after(async () => {
  for (const s of [asgi, app]) if (s) await stop(s).catch(() => {});
  if (dir) cleanup(dir);
});

for (const client of Object.values(CLIENTS)) {
  test(`ASGI middleware app (uvicorn), ${client.name} client: the app's own bytes`, { timeout: 120000 }, async () => {
    const opts = { bodies, exact: true, keeps10Alive: null };
    // The app alone first: its bodies are the reference.
    await checkClient(() => RawConn.tcp(app.port), client, REQUESTS, opts);
    await checkClient(() => RawConn.tcp(asgi.port), client, REQUESTS, { ...opts, record: sent });
  });
}

test('the middleware captured every request, whatever the framing', { timeout: 120000 }, async () => {
  assert.deepEqual(await stop(asgi), { code: 0, signal: null }, asgi.stderr);
  const rows = readLines(join(dir, 'asgi.jsonl'));
  const key = (b) => JSON.stringify(b);
  assert.ok(sent.length > 0);
  assert.deepEqual(rows.map((r) => key(r.payload)).sort(), sent.map(key).sort());
});
