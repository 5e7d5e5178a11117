// `llmtap proxy` with TLS on either side, against real peers: one `llmtap sim` and one nginx
// terminating TLS in front of it (tls_nginx.mjs, test-CA certificates) for the whole file, and
// for (e) the FastAPI upstream (tests/upstream/app.py) holding streams open until released.
//   (a) the openai client over https to the proxy's TLS listener: the same capture rows and
//       outcomes as over plain http;
//   (b) --upstream https://localhost:<nginx> --cacert, streaming and not;
//   (c) upstream TLS failures: each a 502 naming the cause and a log line; mTLS; --insecure;
//   (d) the listener refusing plain HTTP (400), TLS on the plain port, an untrusting client;
//   (e) SIGHUP reloading the certificate under open streams, and keeping it on a bad file;
//   (f) certificates outside their validity or expiring soon, at start and on SIGHUP, the expiry
//       metric, private keys others can read, and files given to the wrong flag.
// No check bounds how soon something happens by the wall clock: a loaded machine only adds
// delay (see (d) and (e)).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { chmodSync, copyFileSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { createConnection, createServer } from 'node:net';
import { join } from 'node:path';
import tls from 'node:tls';
import OpenAI from 'openai';
import {
  LLMTAP, startSim, stop, url, tempDir, readLines, curl, run, startProxy, startUpstream, logged, metricsSettled, fetchVia,
} from './proxy_helpers.mjs';
import { startTlsNginx } from './tls_nginx.mjs';

let sim;
let ngx;
let dir;
const proxies = [];

before(async () => {
  // 5 ms per token, and exactly max_tokens of them.
  sim = await startSim([], { '--itl-ms': '5', '--output-tokens-stddev': '0' });
  try {
    ngx = await startTlsNginx({ upstreamPort: sim.port });
  } catch (e) {
    await stop(sim);
    throw e;
  }
  dir = tempDir();
});

after(async () => {
  for (const p of proxies) await stop(p).catch(() => {});
  if (ngx) await ngx.stop();
  if (sim) await stop(sim);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function proxy(opts) {
  const p = await startProxy(opts);
  proxies.push(p);
  return p;
}
const httpsUrl = (p, path = '') => `https://localhost:${p.port}${path}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// fetch over node:https trusting `ca` (the openai client's global fetch cannot be given a CA).
function fetchTrusting(ca) {
  return fetchVia(https, new https.Agent({ ca, keepAlive: true }));
}

// The client's timeout is a guard against a hang only.
function openai(baseURL, ca) {
  return new OpenAI({ baseURL, apiKey: 'sk-test', maxRetries: 0, timeout: 60000, fetch: ca ? fetchTrusting(ca) : undefined });
}

const messages = [{ role: 'user', content: 'Say hi over TLS.' }];

// Chat and completions, streaming and not; what the client saw of each.
async function exercise(client) {
  const seen = [];
  seen.push((await client.chat.completions.create({ model: 'm', messages, max_tokens: 4 })).choices[0].message.content);
  let text = '';
  for await (const c of await client.chat.completions.create({ model: 'm', messages, max_tokens: 5, stream: true, stream_options: { include_usage: true } })) {
    text += c.choices[0]?.delta?.content ?? '';
  }
  seen.push(text);
  seen.push((await client.completions.create({ model: 'm', prompt: 'Once upon', max_tokens: 3 })).choices[0].text);
  return seen;
}

// POST `body` to `base` (http or https URL); { status, text }.
async function post(base, path, body, ca) {
  const res = await (ca ? fetchTrusting(ca) : fetch)(`${base}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

// Until the process's output shows `pattern`: bounded by the event; the 60 s cap only ends a
// test that hangs.
async function waitFor(server, pattern, ms = 60000) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(20)) {
    if (pattern.test(server.stderr) || pattern.test(server.stdout)) return;
  }
  assert.fail(`no ${pattern} in:\n${server.stdout}\n${server.stderr}`);
}

test('(a) openai over https to the TLS listener: same answers, capture rows and outcomes as plain http', async () => {
  const run = async (tlsListener) => {
    const capture = join(dir, tlsListener ? 'a-tls.jsonl' : 'a-plain.jsonl');
    const args = ['--capture', '--capture-path', capture, '--outcomes'];
    if (tlsListener) args.push('--tls-cert', ngx.cert('server').cert, '--tls-key', ngx.cert('server').key);
    const p = await proxy({ upstream: url(sim), args });
    assert.match(p.stdout, tlsListener ? /listening on https:\/\// : /listening on http:\/\//);
    const seen = await exercise(tlsListener ? openai(httpsUrl(p, '/v1'), readFileSync(ngx.caFile)) : openai(url(p, '/v1')));
    const metrics = await (tlsListener ? fetchTrusting(readFileSync(ngx.caFile)) : fetch)(
      `${tlsListener ? httpsUrl(p) : url(p)}/llmtap/metrics`).then((r) => r.text());
    await stop(p);
    const rows = readLines(capture).map(({ timestamp, ...rest }) => rest);
    const outcomes = readLines(`${capture}.outcomes.ndjson`).map(({ timestamp, ttft_ms, latency_ms, ...rest }) => rest);
    return { seen, rows, outcomes, metrics };
  };
  const plain = await run(false);
  const secure = await run(true);
  assert.equal(secure.rows.length, 3);
  assert.deepEqual(secure.seen, plain.seen);
  assert.deepEqual(secure.rows, plain.rows);
  assert.deepEqual(secure.outcomes, plain.outcomes);
  assert.ok(secure.outcomes.every((o) => o.status === 200 && o.error === null));
  assert.match(secure.metrics, /llmtap_proxy_tls_handshakes_total\{side="client",resumed="false"\} [1-9]/);
});

test('(b) --upstream https:// with --cacert: streaming and not, kept alive, TLS metrics', async () => {
  const p = await proxy({ upstream: `https://localhost:${ngx.ports.ok}`, args: ['--cacert', ngx.caFile] });
  const direct = await exercise(openai(url(sim, '/v1')));
  assert.deepEqual(await exercise(openai(url(p, '/v1'))), direct);
  const metrics = await fetch(url(p, '/llmtap/metrics')).then((r) => r.text());
  assert.match(metrics, /llmtap_proxy_tls_handshakes_total\{side="upstream",resumed="false"\} [1-9]/);
  assert.match(metrics, /llmtap_proxy_upstream_reuses_total [1-9]/);
  assert.match(metrics, /llmtap_proxy_tls_handshake_failures_total\{side="upstream"\} 0/);
});

test('(c) upstream TLS failures: a 502 naming the cause, and a log line', async () => {
  const silent = createServer(() => {});  // accepts, never answers
  await new Promise((r) => silent.listen(0, '127.0.0.1', r));
  const cases = [
    ['unknown CA', `https://localhost:${ngx.ports.ok}`, [], /tls: certificate signed by an unknown CA/],
    ['expired', `https://localhost:${ngx.ports.expired}`, ['--cacert', ngx.caFile], /tls: certificate has expired \(CN=/],
    ['host name', `https://localhost:${ngx.ports.wronghost}`, ['--cacert', ngx.caFile], /tls: host name mismatch/],
    ['plain upstream', `https://localhost:${sim.port}`, ['--cacert', ngx.caFile], /tls: the server does not speak TLS/],
    ['timeout', `https://localhost:${silent.address().port}`, ['--cacert', ngx.caFile, '--connect-timeout-s', '0.3'],
      /timeout: TLS handshake with upstream timed out/],
  ];
  try {
    await Promise.all(cases.map(async ([name, upstream, args, cause]) => {
      const p = await proxy({ upstream, args });
      const r = await post(url(p), '/v1/chat/completions', { model: 'm', messages, max_tokens: 2 });
      assert.equal(r.status, name === 'timeout' ? 504 : 502, `${name}: ${r.text}`);
      assert.match(JSON.parse(r.text).error.message, cause, name);
      await waitFor(p, /TLS handshake with upstream localhost failed/);
      // The failed handshake is counted before the log line, the upstream error once the 502
      // went out (so possibly after the client read it): waited for.
      const metrics = await metricsSettled(p);
      assert.match(metrics, /llmtap_proxy_tls_handshake_failures_total\{side="upstream"\} 1/, name);
      if (name !== 'timeout') assert.match(metrics, /llmtap_proxy_upstream_errors_total\{kind="tls"\} 1/, name);
    }));
  } finally {
    silent.close();
  }
  // http:// to a server that answers in TLS (here an alert record): named as such.
  const alerting = createServer((c) => c.once('data', () => c.end(Buffer.from([0x15, 3, 3, 0, 2, 2, 70]))));
  await new Promise((res) => alerting.listen(0, '127.0.0.1', res));
  try {
    const wrongScheme = await proxy({ upstream: `http://127.0.0.1:${alerting.address().port}` });
    const r = await post(url(wrongScheme), '/v1/completions', { model: 'm', prompt: 'x', max_tokens: 1 });
    assert.equal(r.status, 502);
    assert.match(JSON.parse(r.text).error.message, /protocol: upstream speaks TLS: use https:\/\//);
  } finally {
    alerting.close();
  }
  // Mutual TLS: nginx answers 400 without a client certificate (relayed), 200 with one.
  const mtls = `https://localhost:${ngx.ports.mtls}`;
  const noCert = await proxy({ upstream: mtls, args: ['--cacert', ngx.caFile] });
  const r400 = await post(url(noCert), '/v1/completions', { model: 'm', prompt: 'x', max_tokens: 1 });
  assert.equal(r400.status, 400);
  assert.match(r400.text, /No required SSL certificate was sent/);
  const client = ngx.cert('client');
  const withCert = await proxy({ upstream: mtls, args: ['--cacert', ngx.caFile, '--cert', client.cert, '--key', client.key] });
  assert.equal((await post(url(withCert), '/v1/completions', { model: 'm', prompt: 'x', max_tokens: 1 })).status, 200);
  // --insecure: the expired certificate is accepted, with a warning at start.
  const insecure = await proxy({ upstream: `https://localhost:${ngx.ports.expired}`, args: ['--insecure'] });
  assert.match(insecure.stderr, /WARNING: --insecure: the upstream's certificate/);
  assert.equal((await post(url(insecure), '/v1/completions', { model: 'm', prompt: 'x', max_tokens: 1 })).status, 200);
});

test('(c) usage: a TLS client flag with an http:// upstream exits 2 naming the flag', async () => {
  const { execFile } = await import('node:child_process');
  const r = await new Promise((res) => execFile(process.env.LLMTAP_BIN,
    ['proxy', '--listen', '127.0.0.1:0', '--upstream', url(sim), '--cacert', ngx.caFile],
    (err, stdout, stderr) => res({ code: err ? err.code : 0, stderr })));
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^llmtap proxy: --cacert applies to an https:\/\/ --upstream/);
  assert.equal(r.stderr.trim().split('\n').length, 1);
});

// The listener's certificate files (replaced by the reload test), and the proxy serving them.
let live;
async function tlsProxy() {
  if (!live) live = await newTlsProxy(url(sim), 'live');
  return live;
}

// A proxy with its own copy of the server certificate (`name`.pem, .key) to `upstream`.
async function newTlsProxy(upstream, name) {
  const cert = join(dir, `${name}.pem`);
  const key = join(dir, `${name}.key`);
  copyFileSync(ngx.cert('server').cert, cert);
  copyFileSync(ngx.cert('server').key, key);
  const p = await proxy({ upstream, args: ['--tls-cert', cert, '--tls-key', key] });
  p.cert = cert;
  p.key = key;
  return p;
}

// The SHA-256 fingerprint of the certificate a new TLS connection to `port` is shown.
function peerFingerprint(port) {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', ca: readFileSync(ngx.caFile) }, () => {
      resolve(s.getPeerX509Certificate().fingerprint256);
      s.end();
    });
    s.on('error', reject);
  });
}

test('(d) the TLS listener: plain HTTP gets 400, TLS on the plain port is closed, an untrusting client is logged', async () => {
  const p = await tlsProxy();
  const plainToTls = await fetch(`http://127.0.0.1:${p.port}/v1/models`);
  assert.equal(plainToTls.status, 400);
  assert.match(await plainToTls.text(), /The plain HTTP request was sent to HTTPS port/);
  const plainProxy = await proxy({ upstream: url(sim) });
  await assert.rejects(new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port: plainProxy.port, rejectUnauthorized: false }, resolve);
    s.on('error', reject);
    s.on('close', () => reject(new Error('closed')));
  }));
  await waitFor(plainProxy, /TLS handshake on the plain HTTP port \(start the proxy with --tls-cert\/--tls-key\)/);
  // curl (OpenSSL) refuses the unknown CA inside the handshake, with an alert.
  await assert.rejects(curl([httpsUrl(p, '/v1/models')]), /certificate/);
  await waitFor(p, /the client rejected the certificate: unknown CA/);
  const metrics = await fetchTrusting(readFileSync(ngx.caFile))(httpsUrl(p, '/llmtap/metrics')).then((r) => r.text());
  assert.match(metrics, /llmtap_proxy_tls_plain_http_rejected_total [1-9]/);
  assert.match(metrics, /llmtap_proxy_tls_handshake_failures_total\{side="client"\} [1-9]/);
});

test('(e) SIGHUP reloads the certificate under open streams; a bad file keeps the current one', async () => {
  // The streams' upstream holds each one after its first event until the test releases the rest
  // (tests/upstream/app.py "lockstep-stream", 200 events): they are open across the reload
  // whatever the machine's load, not because they outlast it.
  const upstream = await startUpstream();
  try {
    const p = await newTlsProxy(url(upstream), 'reload');
    const fingerprint = (name) => new X509Certificate(readFileSync(ngx.cert(name).cert)).fingerprint256;
    assert.equal(await peerFingerprint(p.port), fingerprint('server'));
    const client = openai(httpsUrl(p, '/v1'), readFileSync(ngx.caFile));
    const tokens = 200;
    let firsts = 0;
    let finished = 0;
    let gotFirsts;
    const allFirsts = new Promise((r) => { gotFirsts = r; });
    const streams = [0, 1, 2].map(async () => {
      let chunks = 0;
      let usage = null;
      for await (const c of await client.chat.completions.create({ model: 'lockstep-stream', messages, stream: true, stream_options: { include_usage: true } })) {
        if (c.choices[0]?.delta?.content) chunks += 1;
        if (c.usage) usage = c.usage;
        if (chunks === 1 && ++firsts === 3) gotFirsts();
      }
      finished += 1;
      return { chunks, completion: usage?.completion_tokens };
    });
    await allFirsts;
    const replace = (from, to) => { writeFileSync(`${to}.tmp`, readFileSync(from)); renameSync(`${to}.tmp`, to); };
    replace(ngx.cert('server2').cert, p.cert);
    replace(ngx.cert('server2').key, p.key);
    p.proc.kill('SIGHUP');
    await waitFor(p, /reloaded TLS certificate CN=server2/);
    assert.equal(await peerFingerprint(p.port), fingerprint('server2'));
    assert.equal(finished, 0, 'the streams were still open across the reload');
    // The rest of each stream, through the connections opened before the reload.
    await (await fetch(url(upstream, `/release?n=${tokens}`))).text();
    for (const s of await Promise.all(streams)) assert.deepEqual(s, { chunks: tokens, completion: tokens });
    writeFileSync(p.cert, 'not a certificate\n');
    p.proc.kill('SIGHUP');
    await waitFor(p, /keeping the current certificate: /);
    assert.equal(await peerFingerprint(p.port), fingerprint('server2'));
  } finally {
    await stop(upstream);
  }
});

// Resolves with the ms until the proxy closed a connection that sent `bytes` and then nothing.
function closedAfter(port, bytes) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const s = createConnection({ host: '127.0.0.1', port }, () => s.write(bytes));
    // A guard against a hang only (the proxy's idle deadline, 60 s, is beyond it), cleared on
    // the close: left armed, it kept the test process alive for 30 s after the last test.
    const guard = setTimeout(() => { s.destroy(); reject(new Error('not closed within 30 s')); }, 30000);
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(guard);
      resolve(performance.now() - started);
    });
  });
}

test('(d) a client that does not finish its handshake within --tls-handshake-timeout-s is closed', async () => {
  const p = await proxy({
    upstream: url(sim),
    args: ['--tls-cert', ngx.cert('server').cert, '--tls-key', ngx.cert('server').key, '--tls-handshake-timeout-s', '1'],
  });
  // Silent from the start, and stalled after the first byte of a ClientHello.
  const closed = await Promise.all([Buffer.alloc(0), Buffer.from([0x16])].map((b) => closedAfter(p.port, b)));
  // Not before the 1 s deadline (this side's clock started first), and by it: the log line
  // names the cause (no other deadline of the proxy's ends a connection within the guard).
  for (const ms of closed) assert.ok(ms >= 900, `closed after ${ms} ms`);
  await waitFor(p, /the client did not complete the TLS handshake in time/);
});

// "2026-12-09" of a certificate's validTo or validFrom, as the proxy writes dates.
const day = (text) => new Date(text).toISOString().slice(0, 10);

test('(f) certificate validity at start and on SIGHUP, the expiry metric, key permissions, wrong files', async () => {
  const install = (name, cert, key) => {
    copyFileSync(ngx.cert(name).cert, cert);
    copyFileSync(ngx.cert(name).key, key);
  };
  const x509 = (name) => new X509Certificate(readFileSync(ngx.cert(name).cert));
  const valid = (name) => `valid ${day(x509(name).validFrom)} to ${day(x509(name).validTo)}`;
  const cert = join(dir, 'f.pem');
  const key = join(dir, 'f.key');
  const expiry = async (p) => {
    const text = await fetchTrusting(readFileSync(ngx.caFile))(httpsUrl(p, '/llmtap/metrics')).then((r) => r.text());
    return Number(text.match(/^llmtap_proxy_tls_certificate_expiry_timestamp_seconds (\d+)$/m)[1]);
  };
  const unix = (name) => Date.parse(x509(name).validTo) / 1000;

  // At start: served, with a warning naming the CN and the dates.
  for (const [name, problem] of [
    ['expired', `expired on ${day(x509('expired').validTo)}: clients refuse it`],
    ['notyet', `is not valid before ${day(x509('notyet').validFrom)}: clients refuse it until then`],
    ['soon', `expires in 3 days, on ${day(x509('soon').validTo)}: renew it and send SIGHUP`]]) {
    install(name, cert, key);
    const p = await proxy({ upstream: url(sim), args: ['--tls-cert', cert, '--tls-key', key] });
    await logged(p, new RegExp(`the TLS certificate CN=${name} \\(--tls-cert ${cert}, ${valid(name)}\\) ${problem}`));
    await stop(p);
  }
  // With a window shorter than what is left, no warning.
  {
    const p = await proxy({ upstream: url(sim), args: ['--tls-cert', cert, '--tls-key', key, '--tls-cert-warn-days', '1'] });
    assert.equal(await expiry(p), unix('soon'));
    assert.doesNotMatch(p.stderr, /the TLS certificate/);
    await stop(p);
  }

  // On SIGHUP: expired and not yet valid are refused (the current certificate stays), expiring
  // soon is loaded with a warning.
  install('server', cert, key);
  const p = await proxy({ upstream: url(sim), args: ['--tls-cert', cert, '--tls-key', key] });
  assert.doesNotMatch(p.stderr, /warning/i);
  assert.equal(await expiry(p), unix('server'));
  const fingerprint = x509('server').fingerprint256;
  for (const name of ['expired', 'notyet']) {
    install(name, cert, key);
    const from = p.stderr.length;
    p.proc.kill('SIGHUP');
    const said = await logged(p, /keeping the current certificate: .*/, from);
    assert.match(said, new RegExp(`keeping the current certificate: the TLS certificate CN=${name} \\(--tls-cert ${cert}, ${valid(name)}\\)`));
    assert.equal(await peerFingerprint(p.port), fingerprint);
    assert.equal(await expiry(p), unix('server'));
  }
  install('soon', cert, key);
  let from = p.stderr.length;
  p.proc.kill('SIGHUP');
  const said = await logged(p, /reloaded TLS certificate CN=soon/, from);
  assert.match(said, /the TLS certificate CN=soon .* expires in 3 days/);
  assert.equal(await expiry(p), unix('soon'));

  // A key others can read: a warning at start and on SIGHUP; refused with --strict-key-permissions.
  install('server', cert, key);
  chmodSync(key, 0o644);
  from = p.stderr.length;
  p.proc.kill('SIGHUP');
  assert.match(await logged(p, /reloaded TLS certificate CN=server/, from),
    new RegExp(`the private key --tls-key ${key} is readable by its group and other users \\(mode 0644\\): run \`chmod 600 ${key}\``));
  const strict = await run(LLMTAP, ['proxy', '--listen', '127.0.0.1:0', '--upstream', url(sim), '--tls-cert', cert,
    '--tls-key', key, '--strict-key-permissions']);
  assert.equal(strict.code, 1);
  assert.match(strict.stderr, new RegExp(`llmtap proxy: the private key --tls-key ${key} is readable by its group and other users \\(mode 0644\\): run \`chmod 600 ${key}\` \\(refused: --strict-key-permissions\\)`));

  // Wrong files: the flag at fault, and what the file holds instead.
  for (const [args, message] of [
    [['--tls-cert', cert, '--tls-key', cert], `--tls-key ${cert} holds a certificate, not a private key`],
    [['--tls-cert', key, '--tls-key', key], `--tls-cert ${key} holds a private key, not a certificate`],
    [['--tls-cert', cert], `--tls-cert ${cert} holds a certificate and no private key: give the key with --tls-key`]]) {
    const r = await run(LLMTAP, ['proxy', '--listen', '127.0.0.1:0', '--upstream', url(sim), ...args]);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stderr.trim().split('\n').at(-1), `llmtap proxy: ${message}`);
  }
});
