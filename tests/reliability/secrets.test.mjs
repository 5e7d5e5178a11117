// No secret in any log line or metric: real `llmtap proxy` and `llmtap sim` processes get
// requests whose bodies, query strings and headers (Authorization, X-Api-Key, Cookie) hold
// unique random markers, on the normal paths and on every error path we can reach from
// outside: a body that is not JSON, a body over max_request_bytes, one over --max-body-bytes
// (413), malformed HTTP (400), an upstream that is down (502) or answers garbage that echoes
// the prompt, a client that cancels mid-stream, a full capture queue, an unwritable capture
// path, SIGHUP rotation, and an invalid NIM_CAPTURE_ARGS. Then every process is stopped and
// all of its stdout and stderr is searched for the markers: none may appear. The metrics
// endpoint must hold counts only. The capture itself does hold the body marker (that is its
// job) and is checked to be 0600 in 0700 directories, as are its manifest and outcomes.
//
// llmtap has no log-level switch: the capture core and the proxy log info, warnings and
// errors, always (there is no debug/trace output to turn on). SPDLOG_LEVEL=trace is set
// anyway so that a later spdlog::cfg::load_env_levels() call would be exercised here too.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync, readFileSync, readdirSync, statSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import {
  startSim, startProxy, stop, url, readLines, tempDir, cleanup, logged,
} from '../node/proxy_helpers.mjs';
import { startRawServer, splitRequests, exchange, closedPort, sleep, waitFor } from './helpers.mjs';

const hex = () => randomBytes(12).toString('hex');
// Markers are plain [a-z0-9-] so that JSON, URL and header encodings leave them unchanged. Each
// is also searched for by its random part alone, and by the first 10 characters of that part,
// so a truncated echo ("...last read: 'sk-live-3f9a...'") is caught as well.
const MARK = {
  body: `bodysecret-${hex()}`,
  auth: `sk-authsecret-${hex()}`,
  apikey: `apikeysecret-${hex()}`,
  cookie: `cookiesecret-${hex()}`,
  query: `querysecret-${hex()}`,
  args: `argssecret-${hex()}`,
};
function needles(marker) {
  const random = marker.slice(marker.lastIndexOf('-') + 1);
  return [marker, random, random.slice(0, 10)];
}
function assertNoMarker(where, text, markers = Object.keys(MARK)) {
  for (const k of markers) {
    for (const n of needles(MARK[k])) {
      const at = text.indexOf(n);
      assert.equal(at, -1, `${where} contains the ${k} marker: ...${text.slice(Math.max(0, at - 200), at + 60)}...`);
    }
  }
}

const SECRET_HEADERS = {
  authorization: `Bearer ${MARK.auth}`,
  'x-api-key': MARK.apikey,
  cookie: `session=${MARK.cookie}`,
};
const RAW_SECRET_HEADERS = [
  `Authorization: Bearer ${MARK.auth}`, `X-Api-Key: ${MARK.apikey}`, `Cookie: session=${MARK.cookie}`,
];

function chatBody(i, { pad = 0, stream = false, maxTokens = 4 } = {}) {
  return JSON.stringify({
    model: `m-${MARK.body}`, max_tokens: maxTokens, stream,
    messages: [
      { role: 'system', content: `system ${MARK.body}` },
      { role: 'user', content: `request ${i} ${MARK.body} ${'p'.repeat(pad)}` },
    ],
  });
}

// POSTs `body` with the secret headers; resolves to { status, text }, or { error } when the
// request itself failed (never rejects).
async function post(server, path, body, { signal } = {}) {
  try {
    const r = await fetch(url(server, path), {
      method: 'POST', body, signal, headers: { 'content-type': 'application/json', ...SECRET_HEADERS },
    });
    return { status: r.status, text: await r.text() };
  } catch (e) {
    return { error: e.name };
  }
}

async function metrics(server) {
  const r = await fetch(url(server, '/llmtap/metrics'), { headers: SECRET_HEADERS });
  assert.equal(r.status, 200);
  return r.text();
}

// Counts only: every line is a comment, or `name{label="fixed word",...} <integer>`.
function assertCountsOnly(where, text) {
  assertNoMarker(where, text);
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('# HELP ') || line.startsWith('# TYPE ')) continue;
    assert.match(line, /^[a-z_]+(\{[a-z]+="[A-Za-z0-9_.+-]*"(,[a-z]+="[A-Za-z0-9_.+-]*")*\})? -?\d+$/, `${where}: ${line}`);
  }
}

function mode(path) {
  return statSync(path).mode & 0o777;
}

test('no payload, header, query or NIM_CAPTURE_ARGS secret in any log line or metric', async (t) => {
  const dir = tempDir();
  t.after(() => cleanup(dir));
  const env = { SPDLOG_LEVEL: 'trace' };
  const capturePath = join(dir, 'new', 'sub', 'requests.jsonl');
  // An upstream that answers garbage echoing the prompt back (a broken head, or a good head
  // and then a broken chunk), to reach the proxy's upstream-protocol error paths.
  const echo = await startRawServer((socket) => {
    let pending = Buffer.alloc(0);
    socket.on('data', (d) => {
      pending = Buffer.concat([pending, d]);
      const { requests, rest } = splitRequests(pending);
      pending = rest;
      for (const r of requests) {
        if (r.target.startsWith('/v1/completions')) {
          socket.end(`HTTP/1.1 200 OK\r\nX-Echo: ${MARK.body}\r\nContent-Length: ${MARK.body}\r\n\r\n${r.body}`);
        } else {
          socket.write(`HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n` +
            `5\r\ndata:\r\n${MARK.body}\r\n${r.body}\r\n`);
          setTimeout(() => socket.destroy(), 20);
        }
      }
    });
  });
  const procs = [];
  try {
    const sim = await startSim();
    procs.push(['sim', sim]);
    // A: capture on, with small limits so that the size, invalid-body and queue-full paths log.
    const a = await startProxy({
      upstream: url(sim), env,
      args: ['--capture', '--capture-path', capturePath, '--max-request-bytes', '4096',
        '--max-queue-bytes', '4096', '--max-body-bytes', '65536', '--outcomes'],
    });
    procs.push(['proxy A (capture on)', a]);
    // B: upstream down, capture destination unwritable (a file where its directory should be).
    writeFileSync(join(dir, 'blocked'), 'not a directory');
    const b = await startProxy({
      upstream: `http://127.0.0.1:${await closedPort()}`, env,
      args: ['--capture', '--capture-path', join(dir, 'blocked', 'requests.jsonl')],
    });
    procs.push(['proxy B (upstream down, unwritable capture)', b]);
    // C: NIM_CAPTURE_ARGS that is not valid JSON (a marker in an unterminated string), and
    // one that is JSON but not an object: capture off with an error, serving goes on.
    const c = await startProxy({
      upstream: url(sim),
      env: { ...env, NIM_CAPTURE_ENABLE: '1',
        NIM_CAPTURE_ARGS: `{"path":"${join(dir, 'c.jsonl')}","token":"${MARK.args}` },
    });
    procs.push(['proxy C (invalid NIM_CAPTURE_ARGS)', c]);
    const c2 = await startProxy({
      upstream: url(sim),
      env: { ...env, NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: `["${MARK.args}"]` },
    });
    procs.push(['proxy C2 (NIM_CAPTURE_ARGS not an object)', c2]);
    // D: capture on, in front of the garbage upstream.
    const d = await startProxy({
      upstream: `http://127.0.0.1:${echo.port}`, env,
      args: ['--capture', '--capture-path', join(dir, 'd', 'requests.jsonl'), '--outcomes'],
    });
    procs.push(['proxy D (garbage upstream)', d]);
    // Logged at their start on stderr, a pipe of its own that this side may read after the
    // "listening" line on stdout: waited for, not read at once.
    await logged(b, /cannot be written/);
    await logged(c, /NIM_CAPTURE_ARGS/);
    await logged(c2, /NIM_CAPTURE_ARGS/);

    const q = `?api_key=${MARK.query}&user=${MARK.query}`;
    // Normal traffic through A: chat and completions, streaming and not, with a query string.
    for (let i = 0; i < 6; ++i) {
      const r = await post(a, `/v1/chat/completions${i % 2 ? q : ''}`, chatBody(i, { stream: i % 3 === 0 }));
      assert.equal(r.status, 200, r.text);
    }
    assert.equal((await post(a, '/v1/completions',
      JSON.stringify({ model: 'm', prompt: `once ${MARK.body}`, max_tokens: 3 }))).status, 200);
    // Not JSON, and JSON but not an object: the sim answers 400, capture counts invalid_body.
    assert.equal((await post(a, '/v1/chat/completions', `{"messages":[{"content":"${MARK.body}"`)).status, 400);
    assert.equal((await post(a, '/v1/chat/completions', `["${MARK.body}"]`)).status, 400);
    assert.equal((await post(a, '/v1/chat/completions', `${MARK.body} not json at all`)).status, 400);
    // Over max_request_bytes (forwarded, not recorded), then over --max-body-bytes (413).
    assert.equal((await post(a, '/v1/chat/completions', chatBody(100, { pad: 8000 }))).status, 200);
    assert.equal((await post(a, '/v1/chat/completions', chatBody(101, { pad: 70000 }))).status, 413);
    // A burst of 3 KB bodies against a 4 KB queue: some are dropped as queue full.
    const burst = await Promise.all(Array.from({ length: 64 },
      (_, i) => post(a, '/v1/chat/completions', chatBody(200 + i, { pad: 2800 }))));
    for (const r of burst) assert.equal(r.status, 200);
    // A client that goes away mid-stream (a stream of 20 s: still going however late this side
    // gets to its abort).
    for (let i = 0; i < 3; ++i) {
      const ac = new AbortController();
      const r = await fetch(url(a, '/v1/chat/completions'), {
        method: 'POST', signal: ac.signal, headers: SECRET_HEADERS,
        body: chatBody(300 + i, { stream: true, maxTokens: 40000 }),
      });
      const reader = r.body.getReader();
      await reader.read();
      ac.abort();
      await reader.read().catch(() => {});
    }
    // Malformed HTTP carrying the secrets: smuggling shapes, a header line with no colon, an
    // oversized header, a bad chunk size, a bad request target.
    const body = chatBody(400);
    const raw = [
      `POST /v1/chat/completions${q} HTTP/1.1\r\nHost: x\r\n${RAW_SECRET_HEADERS.join('\r\n')}\r\n` +
        `Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n\r\n${body}`,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${RAW_SECRET_HEADERS.join('\r\n')}\r\n` +
        `Content-Length: ${body.length}\r\nContent-Length: ${body.length + 1}\r\n\r\n${body}`,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Note ${MARK.auth}\r\n\r\n`,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${RAW_SECRET_HEADERS[0]}\r\n X-Folded: ${MARK.apikey}\r\nContent-Length: 2\r\n\r\n{}`,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: ${`${MARK.auth} `.repeat(3000)}\r\n\r\n`,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${RAW_SECRET_HEADERS.join('\r\n')}\r\n` +
        `Transfer-Encoding: chunked\r\n\r\n${MARK.body}\r\n${body}\r\n0\r\n\r\n`,
      `GET /${MARK.query}\x01?x=${MARK.query} HTTP/1.1\r\nHost: x\r\n\r\n`,
      `${MARK.body} ${MARK.auth} HTTP/9.9\r\n\r\n`,
    ];
    for (const p of [a, d]) {
      for (const bytes of raw) {
        // Until the proxy's answer is complete or it closed (30 s: a guard against a hang only; a
        // fixed 2 s, which a loaded machine could outlast before the answer came, ended it before).
        const r = await exchange(p.port, bytes, { timeoutMs: 30000, untilResponse: true });
        assert.ok(r.closed || r.data.length > 0, `some answer to ${JSON.stringify(bytes.slice(0, 80))}`);
      }
    }
    // B: 502 (upstream down) and unwritable capture; C: capture off.
    for (const p of [b, c, c2]) {
      for (let i = 0; i < 3; ++i) {
        const r = await post(p, `/v1/chat/completions${q}`, chatBody(500 + i, { stream: i === 1 }));
        assert.equal(r.status, p === b ? 502 : 200, r.text);
      }
      await post(p, '/v1/chat/completions', `{"bad":"${MARK.body}`);
    }
    // D: the upstream's broken head (502) and broken chunk (a cut stream).
    assert.equal((await post(d, `/v1/completions${q}`, JSON.stringify({ prompt: MARK.body }))).status, 502);
    const cut = await post(d, '/v1/chat/completions', chatBody(600, { stream: true }));
    assert.ok(cut.error || [200, 502].includes(cut.status), JSON.stringify(cut));

    // SIGHUP: a rotation, so the rotated file's modes are checked below too.
    a.proc.kill('SIGHUP');
    await waitFor('the SIGHUP rotation', async () =>
      /^llmtap_capture_files_rotated_total [1-9]/m.test(await metrics(a)));
    assert.equal((await post(a, '/v1/chat/completions', chatBody(700))).status, 200);

    // Metrics: counts only, no marker.
    for (const [name, p] of procs.filter(([n]) => n.startsWith('proxy'))) assertCountsOnly(`${name} metrics`, await metrics(p));
    // A cancel is counted once the proxy sees the client gone (at its next write of the stream):
    // waited for, not read at an instant.
    const count = (text, re) => Number((text.match(re) || [0, 0])[1]);
    await waitFor('a cancelled stream counted', async () =>
      count(await metrics(a), /^llmtap_proxy_client_cancelled_total (\d+)$/m) >= 1);
    const am = await metrics(a);
    assert.ok(count(am, /^llmtap_capture_invalid_body_total (\d+)$/m) >= 3, am);
    assert.ok(count(am, /^llmtap_capture_skipped_too_large_total (\d+)$/m) >= 1, am);
    assert.ok(count(am, /^llmtap_proxy_client_cancelled_total (\d+)$/m) >= 1, am);
    await sleep(100);
  } finally {
    for (const [, p] of procs.slice().reverse()) await stop(p);
    // Every byte: `stop` resolves on the exit, when the pipes may still hold the last lines.
    for (const [, p] of procs) {
      for (const stream of [p.proc.stdout, p.proc.stderr]) {
        if (!stream.closed) await new Promise((r) => stream.once('close', r));
      }
    }
    await echo.close();
  }
  // The search itself finds a truncated echo (the first 20 characters of a marker).
  assert.throws(() => assertNoMarker('self-check', `x ${MARK.auth.slice(0, 24)}...`));
  // Every byte each process wrote to stdout and stderr.
  for (const [name, p] of procs) {
    assertNoMarker(`${name} stdout`, p.stdout);
    assertNoMarker(`${name} stderr`, p.stderr);
  }
  const all = procs.map(([, p]) => p.stderr).join('\n');
  // The error paths did log (so the search above searched something).
  for (const re of [/larger than max_request_bytes/, /not a JSON object/, /cannot be written/, /NIM_CAPTURE_ARGS/]) {
    assert.match(all, re);
  }
  // The capture holds the body marker (it was exercised), its sidecars hold none.
  const captureDir = join(dir, 'new', 'sub');
  const files = readdirSync(captureDir);
  const captures = files.filter((f) => f.endsWith('.jsonl') && !f.endsWith('.outcomes.ndjson'));
  assert.ok(captures.length >= 2, files.join(' '));
  assert.ok(readLines(capturePath).length >= 1);
  assert.ok(captures.some((f) => readFileSync(join(captureDir, f), 'utf8').includes(MARK.body)));
  for (const f of files) {
    const text = readFileSync(join(captureDir, f), 'utf8');
    // Bodies are captured verbatim; headers and query strings never are.
    assertNoMarker(f, text, ['auth', 'apikey', 'cookie', 'query', 'args']);
    if (f.endsWith('.manifest.json') || f.endsWith('.outcomes.ndjson')) assertNoMarker(f, text);
    // Files 0600 in directories 0700 (capture_test.cc NewFilesAre0600AndNewDirectories0700
    // checks the core; this is the proxy binary's run, rotated files and sidecars included).
    assert.equal(mode(join(captureDir, f)), 0o600, f);
  }
  assert.equal(mode(join(dir, 'new')), 0o700);
  assert.equal(mode(captureDir), 0o700);
  assert.ok(!existsSync(join(dir, 'c.jsonl')), 'invalid NIM_CAPTURE_ARGS: nothing written');
});
