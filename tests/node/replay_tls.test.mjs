// `llmtap replay --url https://...` against a real TLS peer: nginx (tls_nginx.mjs) terminating
// TLS with test-CA certificates in front of `llmtap sim`. Streaming and not, on kept-alive
// connections; the model probe and the metrics scrape over https; every refusal exits 2 before
// a request is sent and names its cause; session resumption on reconnects; mutual TLS.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSim, stop, url, replay } from './proxy_helpers.mjs';
import { startTlsNginx } from './tls_nginx.mjs';

let sim;
let ngx;
let dir;

before(async () => {
  sim = await startSim();
  try {
    ngx = await startTlsNginx({ upstreamPort: sim.port });
  } catch (e) {
    await stop(sim);
    throw e;
  }
  dir = mkdtempSync(join(tmpdir(), 'llmtap-replay-tls-'));
});

after(async () => {
  if (ngx) await ngx.stop();
  if (sim) await stop(sim);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const chat = (content, extra = {}) => ({ model: 'm', messages: [{ role: 'user', content }], max_tokens: 4, ...extra });
const completion = (prompt, extra = {}) => ({ model: 'm', prompt, max_tokens: 4, ...extra });

// Eight rows, streamed and not, chat and completions, 5 ms apart.
// Eight requests `gapMs` apart, chat (streamed) and completions in turn, unless `rows` are given.
function writeTrace(name, rows = null, gapMs = 5) {
  const path = join(dir, `${name}.jsonl`);
  rows ??= Array.from({ length: 8 }, (_, i) => ({
    timestamp: i * gapMs,
    payload: i % 2 ? chat(`q${i}`, { stream: true, stream_options: { include_usage: true } }) : completion(`p${i}`),
  }));
  writeFileSync(path, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return path;
}

function readOut(out) {
  const summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
  const requests = readFileSync(join(out, 'requests.jsonl'), 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l));
  return { summary, requests: requests.sort((a, b) => a.index - b.index) };
}

const https = (name, host = 'localhost') => `https://${host}:${ngx.ports[name]}`;

// nginx's log lines of the POSTs to server `name`, once there are `count` (nginx logs a request
// after its response went out; the metrics scrapes and the model probe are GETs).
async function waitPosts(name, count) {
  for (let n = count; ; ++n) {
    const posts = (await ngx.waitAccessLog(name, n)).filter((l) => l.request.startsWith('POST'));
    if (posts.length >= count) return posts;
  }
}

// What a request's result says apart from its timing.
const shape = (r) => ({ index: r.index, status: r.status, error: r.error, stream: r.stream, chunks: r.chunks, output_tokens: r.output_tokens });

test('https replay, streaming and not, equals the plain replay of the same trace', async () => {
  const trace = writeTrace('mixed');
  const plainOut = join(dir, 'plain');
  const plain = await replay([trace, '--url', url(sim), '--out', plainOut, '--server-metrics', 'off']);
  assert.equal(plain.code, 0, plain.stdout + plain.stderr);
  for (const host of ['localhost', '127.0.0.1']) {
    const out = join(dir, `tls-${host}`);
    // One request at a time on one event loop: each request finds the previous one's
    // connection free, whatever the machine's load (at the trace's 5 ms gaps, a loaded machine
    // had all 16 in flight together on 16 connections).
    const r = await replay([trace, '--url', https('ok', host), '--cacert', ngx.caFile, '--out', out,
      '--concurrency', '1', '--threads', '1']);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const tls = readOut(out);
    assert.deepEqual(tls.requests.map(shape), readOut(plainOut).requests.map(shape));
    assert.ok(tls.requests.every((q) => q.error === null && q.status === 200));
    assert.ok(tls.requests.filter((q) => q.stream).every((q) => q.chunks > 1 && q.ttft_ms > 0));
    // The sim's /metrics, scraped through nginx over https with the same --cacert.
    assert.match(r.stdout, new RegExp(`server metrics: https://${host.replace(/\./g, '\\.')}:\\d+/metrics, every second`));
    assert.ok(tls.summary.server_metrics && !tls.summary.server_metrics.error, JSON.stringify(tls.summary.server_metrics));
  }
  // Kept alive: each run's eight requests went on one connection.
  const posts = await waitPosts('ok', 16);
  assert.equal(new Set(posts.map((l) => l.connection)).size, 2, JSON.stringify(posts));
});

test('hashed rows ask the server for its model over https', async () => {
  const trace = writeTrace('hashed', [{ timestamp: 0, input_length: 40, output_length: 4, hash_ids: [0, 1, 2] }]);
  const r = await replay([trace, '--url', https('ok'), '--cacert', ngx.caFile, '--server-metrics', 'off']);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stderr, /hashed rows use model "[^"]+" \(the server's first \/v1\/models entry\)/);
});

// A port that accepts TCP connections and never says a word.
function silentServer() {
  return new Promise((resolve) => {
    const sockets = [];
    const s = createServer((c) => sockets.push(c));
    s.listen(0, '127.0.0.1', () => resolve({ port: s.address().port, close: () => { sockets.forEach((c) => c.destroy()); s.close(); } }));
  });
}

test('refusals exit 2 before sending, naming the cause', async () => {
  const trace = writeTrace('refused');
  const silent = await silentServer();
  try {
    const cases = [
      [['--url', https('ok')], /TLS handshake with https:\/\/localhost:\d+ failed: .*unknown CA/],
      [['--url', https('expired'), '--cacert', ngx.caFile], /failed: certificate has expired/],
      [['--url', https('wronghost'), '--cacert', ngx.caFile], /failed: host name mismatch/],
      [['--url', `https://127.0.0.1:${sim.port}`, '--cacert', ngx.caFile], /failed: .*does not speak TLS/],
      [['--url', `https://127.0.0.1:${silent.port}`, '--cacert', ngx.caFile, '--request-timeout', '1'], /TLS handshake with https:\/\/127\.0\.0\.1:\d+ timed out after 1 s/],
      [['--url', url(sim), '--cacert', ngx.caFile], /--cacert applies to an https:\/\/ --url/],
    ];
    for (const [args, message] of cases) {
      const r = await replay([trace, ...args, '--server-metrics', 'off']);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, message, args.join(' '));
    }
  } finally {
    silent.close();
  }
});

test('--insecure skips verification and says so', async () => {
  const trace = writeTrace('insecure');
  const r = await replay([trace, '--url', https('expired'), '--insecure', '--server-metrics', 'off']);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stderr, /WARNING: --insecure: the server's certificate and host name are not verified/);
});

test('plain http to a TLS port fails its requests with the server\'s answer', async () => {
  const trace = writeTrace('plain-to-tls');
  const out = join(dir, 'plain-to-tls');
  const r = await replay([trace, '--url', `http://127.0.0.1:${ngx.ports.ok}`, '--out', out, '--server-metrics', 'off']);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.ok(readOut(out).requests.every((q) => q.status === 400 && q.error === 'http_4xx'));
});

test('mutual TLS: the client certificate is sent when given', async () => {
  const trace = writeTrace('mtls');
  const without = await replay([trace, '--url', https('mtls'), '--cacert', ngx.caFile, '--out', join(dir, 'mtls-no'), '--server-metrics', 'off']);
  assert.equal(without.code, 1, without.stdout + without.stderr);  // nginx answers 400
  assert.ok(readOut(join(dir, 'mtls-no')).requests.every((q) => q.status === 400));
  const { cert, key } = ngx.cert('client');
  const r = await replay([trace, '--url', https('mtls'), '--cacert', ngx.caFile, '--cert', cert, '--key', key, '--server-metrics', 'off']);
  assert.equal(r.code, 0, r.stdout + r.stderr);
});

test('TLS 1.2 only server', async () => {
  const r = await replay([writeTrace('tls12'), '--url', https('tls12'), '--cacert', ngx.caFile, '--server-metrics', 'off']);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const log = await waitPosts('tls12', 8);
  assert.ok(log.every((l) => l.ssl_protocol === 'TLSv1.2'));
});

test('reconnects resume the TLS session unless --no-tls-session-reuse', async () => {
  // nginx closes every connection after one request there: each request shakes hands anew.
  // One request at a time (--concurrency 1, one worker): each starts once the one before it
  // ended, and by then its TLS 1.3 session ticket, which nginx sends right after the handshake
  // and so before the response, has been read. So every request after the first resumes,
  // whatever the machine's load (on the trace's schedule, 100 ms apart, a loaded machine could
  // start a request before the one before it had its ticket: handshakes that overlap cannot
  // resume each other's session).
  const trace = writeTrace('resume');
  const args = [trace, '--url', https('reconnect'), '--cacert', ngx.caFile, '--concurrency', '1', '--threads', '1',
    '--server-metrics', 'off'];
  const r = await replay(args);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  let log = await waitPosts('reconnect', 8);
  assert.deepEqual(log.map((l) => l.ssl_session_reused), ['.', ...Array(7).fill('r')], JSON.stringify(log));
  const full = await replay([...args, '--no-tls-session-reuse']);
  assert.equal(full.code, 0, full.stdout + full.stderr);
  log = (await waitPosts('reconnect', 16)).slice(8);
  assert.ok(log.every((l) => l.ssl_session_reused === '.'), JSON.stringify(log));
});

test('--paired-url over https takes the --paired-* TLS flags; a refused certificate is the candidate\'s error', async () => {
  const trace = writeTrace('paired');
  // The same sim behind nginx: the paired side answers as the primary does.
  const out = join(dir, 'paired');
  const r = await replay([trace, '--url', url(sim), '--paired-url', https('ok'), '--paired-cacert',
    ngx.caFile, '--out', out, '--server-metrics', 'off']);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const pairs = readFileSync(join(out, 'pairs.ndjson'), 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l));
  assert.equal(pairs.length, 8);
  for (const p of pairs) {
    assert.equal(p.candidate.status, 200, JSON.stringify(p));
    assert.equal(p.candidate.error, null);
    assert.equal(p.output.equal, true, JSON.stringify(p));
  }
  // Without the CA the paired handshakes fail: every row's line says "tls"; the primary's run
  // and its exit code are unaffected.
  const refused = join(dir, 'paired-refused');
  const bad = await replay([trace, '--url', url(sim), '--paired-url', https('ok'), '--out', refused,
    '--server-metrics', 'off']);
  assert.equal(bad.code, 0, bad.stdout + bad.stderr);
  const refusedPairs = readFileSync(join(refused, 'pairs.ndjson'), 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l));
  assert.equal(refusedPairs.length, 8);
  assert.ok(refusedPairs.every((p) => p.candidate.error === 'tls' && p.primary.status === 200), JSON.stringify(refusedPairs));
  assert.match(bad.stderr, /TLS handshake with localhost failed/);
  // A --paired-* TLS flag with an http:// --paired-url is a usage error.
  const http = await replay([trace, '--url', url(sim), '--paired-url', url(sim), '--paired-insecure',
    '--pairs', join(dir, 'p.ndjson'), '--server-metrics', 'off']);
  assert.equal(http.code, 2);
  assert.match(http.stderr, /--paired-insecure applies to an https:\/\/ --paired-url/);
});
