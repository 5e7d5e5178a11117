// Fleet capture against a real S3 server (Ceph RGW from tests/lib/with_rgw.sh): `llmtap proxy`
// processes with --upload-url, under load, with the store healthy, failing, slow, stopped,
// refusing credentials, without its bucket, with a proxy SIGKILLed in the middle of a multipart
// upload, and with one SIGKILLed three times under traffic. In every case every request is
// answered, and requests, rows in the store and counted refusals add up exactly.
//
// Store faults come from a small HTTP relay in front of RGW (it keeps the Host header, so SigV4
// signatures stay valid) that can answer 503, delay requests, or hold multipart parts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { LLMTAP, startSim, startProxy, stop, url, tempDir, cleanup, run } from '../node/proxy_helpers.mjs';

const BUCKET = process.env.LLMTAP_TEST_BUCKET;
const ENDPOINT = process.env.AWS_ENDPOINT_URL_S3;
if (!BUCKET || !ENDPOINT) throw new Error('run under tests/lib/with_rgw.sh');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let prefixCounter = 0;
const newPrefix = (name) => `faults/${name}-${process.pid}-${++prefixCounter}/`;

// ---- the store, seen from the test --------------------------------------------------------

function s3(method, path, extra = []) {
  return execFileSync('curl', ['-sS', '--noproxy', '*', '-X', method,
    '--aws-sigv4', `aws:amz:${process.env.AWS_REGION}:s3`,
    '-u', `${process.env.AWS_ACCESS_KEY_ID}:${process.env.AWS_SECRET_ACCESS_KEY}`,
    '-H', 'x-amz-content-sha256: UNSIGNED-PAYLOAD', ...extra, `${ENDPOINT}/${BUCKET}/${path}`],
  { maxBuffer: 256 << 20 }).toString('latin1');
}

const enc = (s) => encodeURIComponent(s);
function listKeys(prefix) {
  const keys = [];
  let token = '';
  for (;;) {
    const q = (token ? `continuation-token=${enc(token)}&` : '') + `list-type=2&prefix=${enc(prefix)}`;
    const xml = s3('GET', `?${q}`);
    for (const m of xml.matchAll(/<Key>([^<]*)<\/Key>/g)) keys.push(m[1].replaceAll('&amp;', '&'));
    const next = xml.match(/<NextContinuationToken>([^<]*)</);
    if (!/<IsTruncated>true</.test(xml) || !next) return keys;
    token = next[1];
  }
}

function pendingUploads(prefix) {
  const xml = s3('GET', `?prefix=${enc(prefix)}&uploads=`);
  return [...xml.matchAll(/<UploadId>/g)].length;
}

// Rows of every complete uploaded file under prefix/<replica>/, checked against the manifests:
// { rows: Map(tag -> count), files, byReplica: {replica: rows}, filesByReplica: {replica: files} }.
function storeRows(prefix) {
  const rows = new Map();
  const byReplica = {};
  const filesByReplica = {};
  let files = 0;
  for (const key of listKeys(prefix).filter((k) => k.endsWith('.manifest.json'))) {
    const manifest = JSON.parse(s3('GET', key));
    const data = manifest.objects.find((o) => o.role === 'data');
    const text = s3('GET', data.key);
    assert.equal(Buffer.byteLength(text, 'latin1'), data.bytes, `${data.key} size`);
    const lines = text.split('\n').filter((l) => l !== '');
    assert.equal(lines.length, manifest.records, `${data.key} records`);
    for (const line of lines) {
      const tag = JSON.parse(line).payload.messages[0].content.split(' ').slice(0, 3).join(' ');
      rows.set(tag, (rows.get(tag) || 0) + 1);
    }
    byReplica[manifest.replica] = (byReplica[manifest.replica] || 0) + lines.length;
    filesByReplica[manifest.replica] = (filesByReplica[manifest.replica] || 0) + 1;
    files++;
  }
  return { rows, files, byReplica, filesByReplica };
}

// ---- a relay in front of the store that misbehaves on demand -------------------------------

const relays = [];
function startFaultyStore() {
  const target = new URL(ENDPOINT);
  const state = { mode: 'pass', delayMs: 0, partDelayMs: 0, requests: 0, failed: 0, parts: 0 };
  const server = http.createServer((req, res) => {
    state.requests++;
    const isPart = /[?&]partNumber=/.test(req.url);
    if (isPart) state.parts++;
    const forward = () => {
      if (state.mode === 'fail') {
        state.failed++;
        req.resume();
        req.on('end', () => {
          res.writeHead(503, { 'content-type': 'application/xml' });
          res.end('<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>');
        });
        return;
      }
      const headers = { ...req.headers };
      delete headers.expect;  // the relay reads the whole request itself
      const up = http.request({ host: target.hostname, port: target.port, method: req.method,
        path: req.url, headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
    };
    const delay = state.delayMs + (isPart ? state.partDelayMs : 0);
    if (delay > 0) {
      setTimeout(() => { if (!state.closed) forward(); }, delay).unref();
    } else {
      forward();
    }
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => {
    state.url = `http://127.0.0.1:${server.address().port}`;
    relays.push(state);
    state.close = () => {
      if (state.closed) return Promise.resolve();
      state.closed = true;
      server.closeAllConnections();
      return new Promise((r) => server.close(r));
    };
    resolve(state);
  }));
}

// ---- the proxies ---------------------------------------------------------------------------

// Every proxy started here, killed when the file's tests end (a failed assertion must not leave
// one running).
const started = [];
async function startUploadingProxy(options) {
  const proxy = await startProxy(options);
  started.push(proxy);
  return proxy;
}

function proxyArgs(dir, prefix, replica, extra = []) {
  return ['--capture', '--capture-path', join(dir, replica, 'requests.jsonl'),
    '--upload-url', `s3://${BUCKET}/${prefix}`, '--replica', replica, ...extra];
}

async function send(proxy, tag, i, bytes = 300) {
  const body = JSON.stringify({ model: 'm', max_tokens: 2,
    messages: [{ role: 'user', content: `${tag} ${i} x ${'y'.repeat(bytes)}` }] });
  const r = await fetch(url(proxy, '/v1/chat/completions'), { method: 'POST', body });
  await r.text();
  return r.status;
}

// Sends `n` requests tagged `tag`, `concurrency` at a time, spread over at least `ms`. Returns
// their statuses, with (on the monotonic clock the proxy's capture timestamps use)
// `lastSent`, when the last request began, and `firstAnswered`, when the first answer ended.
async function load(proxy, tag, n, { ms = 0, concurrency = 4, bytes } = {}) {
  let next = 0;
  const statuses = [];
  const start = Date.now();
  let lastSent = -Infinity;
  let firstAnswered = Infinity;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < n) {
      const i = next++;
      const due = start + (ms * i) / n;
      if (due > Date.now()) await sleep(due - Date.now());
      lastSent = Math.max(lastSent, performance.now());
      statuses.push(await send(proxy, tag, i, bytes));
      firstAnswered = Math.min(firstAnswered, performance.now());
    }
  }));
  return Object.assign(statuses, { lastSent, firstAnswered });
}

async function counters(proxy) {
  const text = await (await fetch(url(proxy, '/llmtap/metrics'))).text();
  const c = {};
  for (const m of text.matchAll(/^llmtap_capture_(\w+?)(?:_total)? (\d+)$/gm)) c[m[1]] = Number(m[2]);
  return c;
}

function assertAccounted(c) {
  assert.equal(c.matched, c.recorded + c.skipped_too_large + c.sampled_out + c.invalid_body + c.non_standard_json +
    c.dropped_queue_full + c.skipped_upload_backlog + c.write_failed_records + c.queued_records,
    JSON.stringify(c));
}

function localBytes(dir) {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    n += e.isDirectory() ? localBytes(p) : statSync(p).size;
  }
  return n;
}

// Waits until `fn` holds. `ms` is a guard against a hang only: every wait here ends on an event
// the test caused (a file rotated, an upload retried after at most the uploader's 30 s back-off),
// so a loaded machine makes it later, never red.
async function waitFor(what, fn, ms = 120000) {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

// Stops a proxy with SIGTERM (it uploads what is left) once its writer has written every
// record and the store has taken every finished file, and returns its capture counters as they
// were just before. The stop leaves the uploader 20 s for what is left; after a store outage
// its next attempt may be up to 30 s away (back-off), so the backlog goes up before the stop,
// however long the outage was: the stop then has only the open file to send.
async function finish(proxy) {
  await waitFor('the writer and the backlog', async () => {
    const c = await counters(proxy);
    return c.queued_records === 0 && c.upload_files_waiting === 0;
  });
  const c = await counters(proxy);
  const exit = await stop(proxy);
  assert.equal(exit.code, 0, proxy.stderr);
  return c;
}

const sim = await startSim();
const upstream = url(sim);
test.after(async () => {
  for (const p of started) if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGKILL');
  for (const r of relays) await r.close();
  await stop(sim);
});

test('three replicas rotating under load: every recorded request is in exactly one uploaded file', async () => {
  const dir = tempDir();
  const prefix = newPrefix('fleet');
  const proxies = await Promise.all(['pod-a', 'pod-b', 'pod-c'].map((r) => startProxy({
    upstream, args: proxyArgs(dir, prefix, r, ['--rotate-seconds', '1', '--outcomes', '--keep-local']) })));
  const results = await Promise.all(proxies.map((p, k) => load(p, `fleet${k}`, 150, { ms: 3500 })));
  for (const statuses of results) assert.ok(statuses.every((s) => s === 200));
  let recorded = 0;
  for (const p of proxies) {
    await waitFor('the metrics', async () => (await counters(p)).recorded >= 150);
  }
  for (const p of proxies) {
    const c = await counters(p);
    assertAccounted(c);
    recorded += c.recorded;
    const exit = await stop(p);
    assert.equal(exit.code, 0, p.stderr);
  }
  assert.equal(recorded, 450);
  const { rows, files, byReplica, filesByReplica } = storeRows(prefix);
  assert.equal(rows.size, 450);
  for (const [tag, n] of rows) assert.equal(n, 1, `${tag} appears ${n} times`);
  assert.deepEqual(byReplica, { 'pod-a': 150, 'pod-b': 150, 'pod-c': 150 });
  // Rotation every second: a file holds records that arrived less than a second apart. The
  // proxy took the last request of a replica's load no earlier than the test sent it, and the
  // one answered first no later than its answer: their records are at least that far apart
  // (about 3.5 s on a quiet machine; a loaded one may answer the first request later), so the
  // replica wrote at least one file per whole second of it, and one more.
  ['pod-a', 'pod-b', 'pod-c'].forEach((r, k) => {
    const spanMs = results[k].lastSent - results[k].firstAnswered;
    const least = Math.max(1, Math.floor(spanMs / 1000) + 1);
    assert.ok(filesByReplica[r] >= least,
      `${r}: ${filesByReplica[r]} files for records ${Math.round(spanMs)} ms apart or more`);
  });
  // `llmtap merge` of the bucket equals the merge of the same files kept locally, row for row.
  const local = [];
  for (const r of ['pod-a', 'pod-b', 'pod-c']) {
    for (const f of readdirSync(join(dir, r))) {
      if (/^requests\.\d{8}T[\d.]+Z(-\d+)?\.jsonl$/.test(f)) local.push(join(dir, r, f));
    }
  }
  assert.equal(local.length, files);
  execFileSync(process.env.LLMTAP_BIN, ['merge', ...local, '-o', join(dir, 'local.jsonl')]);
  execFileSync(process.env.LLMTAP_BIN, ['merge', `s3://${BUCKET}/${prefix}`, '-o',
    join(dir, 'store.jsonl')]);
  const fromStore = readFileSync(join(dir, 'store.jsonl'), 'utf8');
  assert.equal(fromStore.split('\n').length - 1, 450);
  assert.ok(fromStore === readFileSync(join(dir, 'local.jsonl'), 'utf8'), 'store merge = local merge');
  cleanup(dir);
});

test('the store answering 503, then slow: files wait and all arrive', async () => {
  const dir = tempDir();
  const prefix = newPrefix('flaky');
  const store = await startFaultyStore();
  store.mode = 'fail';
  const proxy = await startUploadingProxy({ upstream, env: { AWS_ENDPOINT_URL_S3: store.url },
    args: proxyArgs(dir, prefix, 'r', ['--rotate-seconds', '0.5']) });
  const first = await load(proxy, 'flaky', 100, { ms: 1500 });
  await waitFor('failed uploads', async () => (await counters(proxy)).upload_requests_failed > 0);
  assert.ok((await counters(proxy)).upload_files_waiting > 0);
  store.mode = 'pass';
  store.delayMs = 150;  // slow, not failing
  const second = await load(proxy, 'flaky', 100, { ms: 1000 }).then((s) => s);
  assert.ok([...first, ...second].every((s) => s === 200));
  const c = await finish(proxy);
  assertAccounted(c);
  assert.ok(c.upload_retries > 0);
  const { rows } = storeRows(prefix);
  assert.equal([...rows.values()].reduce((a, b) => a + b, 0), c.recorded);
  assert.ok(store.failed > 0);
  await store.close();
  cleanup(dir);
});

// The outage is placed by events, not by times: traffic runs throughout; the store is stopped
// once it has taken a file, started again once the proxy has seen uploads fail (traffic goes on,
// so a file finishes while it is down, however long stopping it takes), and traffic ends once a
// file went up after the restart.
test('the store stopped mid-run and started again: nothing is lost', async () => {
  const dir = tempDir();
  const prefix = newPrefix('restart');
  const proxy = await startUploadingProxy({ upstream,
    args: proxyArgs(dir, prefix, 'r', ['--rotate-seconds', '0.5']) });
  const statuses = [];
  let running = true;
  let next = 0;
  const traffic = Promise.all(Array.from({ length: 4 }, async () => {
    while (running) {
      statuses.push(await send(proxy, 'restart', next++));
      await sleep(20);  // about 200 requests a second at most: a few thousand rows at the most
    }
  }));
  try {
    await waitFor('a file in the store', async () => (await counters(proxy)).files_uploaded > 0);
    execFileSync('bash', [process.env.LLMTAP_RGW, 'pause', process.env.LLMTAP_RGW_DIR]);
    await waitFor('uploads to fail while the store is down', async () => {
      const c = await counters(proxy);
      return c.upload_requests_failed > 0 && c.upload_files_waiting > 0;
    });
    const before = (await counters(proxy)).files_uploaded;
    execFileSync('bash', [process.env.LLMTAP_RGW, 'resume', process.env.LLMTAP_RGW_DIR]);
    await waitFor('a file in the store after the restart', async () =>
      (await counters(proxy)).files_uploaded > before);
  } finally {
    running = false;
    await traffic;
  }
  assert.equal(statuses.length, next);
  assert.ok(statuses.every((s) => s === 200));
  const c = await finish(proxy);
  assertAccounted(c);
  assert.equal(c.recorded, next);
  assert.ok(c.upload_retries > 0);
  const { rows } = storeRows(prefix);
  assert.equal(rows.size, next);
  for (const n of rows.values()) assert.equal(n, 1);
  cleanup(dir);
});

test('wrong credentials and a missing bucket: one warning naming the fix, every request answered', async () => {
  const dir = tempDir();
  for (const [name, env, bucket, fix] of [
    ['creds', { AWS_SECRET_ACCESS_KEY: 'not-the-secret' }, BUCKET, /AWS_SECRET_ACCESS_KEY/],
    ['bucket', {}, 'no-such-bucket-here', /create the bucket/],
  ]) {
    const args = proxyArgs(dir, newPrefix(name), name);
    args[args.indexOf('--upload-url') + 1] = `s3://${bucket}/${newPrefix(name)}`;
    const proxy = await startUploadingProxy({ upstream, env, args });
    assert.ok((await load(proxy, name, 20)).every((s) => s === 200));
    await waitFor('the warning', () => /is not possible yet/.test(proxy.stderr));
    assert.equal(proxy.stderr.match(/is not possible yet/g).length, 1, proxy.stderr);
    assert.match(proxy.stderr, fix);
    assert.doesNotMatch(proxy.stderr, /not-the-secret|llmtapsecret/);
    await waitFor('the writer', async () => (await counters(proxy)).queued_records === 0);
    assert.equal((await counters(proxy)).recorded, 20);
    proxy.proc.kill('SIGKILL');  // the files stay for a later start
    await proxy.exited;
  }
  cleanup(dir);
});

test('the disk budget reached while the store is down: capture refuses and counts, requests are all answered', async () => {
  const dir = tempDir();
  const prefix = newPrefix('budget');
  const store = await startFaultyStore();
  store.mode = 'fail';
  const proxy = await startUploadingProxy({ upstream, env: { AWS_ENDPOINT_URL_S3: store.url },
    args: proxyArgs(dir, prefix, 'r', ['--rotate-bytes', '8000', '--max-local-bytes', '40000']) });
  const statuses = await load(proxy, 'budget', 400, { bytes: 500 });
  assert.ok(statuses.every((s) => s === 200));
  let c = await counters(proxy);
  assert.ok(c.skipped_upload_backlog > 0, JSON.stringify(c));
  // Bounded by the budget plus less than two files of the rotation size: a rotation's new
  // manifest, and records already past the check when the files on disk reached the budget
  // (up to 7.9 KB seen on a loaded machine with this 8 KB rotation).
  assert.ok(localBytes(dir) < 40000 + 16000, `disk ${localBytes(dir)} stays near the budget`);
  store.mode = 'pass';
  await waitFor('the backlog to upload', async () => (await counters(proxy)).upload_files_waiting === 0);
  assert.ok((await load(proxy, 'after', 20, { bytes: 500 })).every((s) => s === 200));
  c = await finish(proxy);
  assertAccounted(c);
  assert.equal(c.recorded + c.skipped_upload_backlog, 420);
  const { rows } = storeRows(prefix);
  assert.equal([...rows.values()].reduce((a, b) => a + b, 0), c.recorded);
  await store.close();
  cleanup(dir);
});

test('a proxy SIGKILLed during a multipart upload: the next start finishes the job, every row once', async () => {
  const dir = tempDir();
  const prefix = newPrefix('sigkill');
  const store = await startFaultyStore();
  store.partDelayMs = 60000;  // parts hang: the upload is in the middle when the proxy dies
  const args = proxyArgs(dir, prefix, 'r', ['--rotate-bytes', String(20 << 20)]);
  let proxy = await startUploadingProxy({ upstream, env: { AWS_ENDPOINT_URL_S3: store.url }, args });
  // ~18 MiB of requests, then SIGHUP finishes the file: one multipart upload (16 MiB parts).
  assert.ok((await load(proxy, 'big', 180, { bytes: 100000 })).every((s) => s === 200));
  proxy.proc.kill('SIGHUP');
  await waitFor('a part on its way', () => store.parts > 0);
  proxy.proc.kill('SIGKILL');
  await proxy.exited;
  assert.ok(pendingUploads(prefix) > 0, 'an unfinished multipart upload is left in the store');
  await store.close();

  proxy = await startUploadingProxy({ upstream, args });  // straight to the store this time
  await waitFor('the upload', async () => (await counters(proxy)).files_uploaded === 1);
  assert.equal((await stop(proxy)).code, 0);
  assert.equal(pendingUploads(prefix), 0, 'the abandoned upload was aborted');
  const { rows } = storeRows(prefix);
  assert.equal(rows.size, 180);
  for (const n of rows.values()) assert.equal(n, 1);
  cleanup(dir);
});

// Issue: a file open at a SIGKILL reached the store with the killed run's running manifest (no
// epoch) and merge skipped it. Three kills under traffic, each followed by a restart, then a
// clean stop; `llmtap merge` of the prefix must hold every request answered before each kill's
// cut point exactly once. The cut point is an event, not a time: the test notes the requests
// answered so far, reads the proxy's `matched`, and waits until the writer has written (or
// counted) that many records; records are written in the order they were offered, and a
// request's record is offered before its answer. Traffic goes on after the cut point until
// more requests are answered (tens of ms at least), then the kill.
test('SIGKILLed three times under traffic, then stopped: merge holds each request answered before a kill once', async () => {
  const dir = tempDir();
  const prefix = newPrefix('kills');
  const args = proxyArgs(dir, prefix, 'r', ['--rotate-bytes', String(24 << 10), '--outcomes',
    '--compress', 'zstd']);
  const mustHave = new Set();
  const tried = new Set();  // every request sent (answered or cut off by a kill)
  for (let round = 0; round < 4; ++round) {
    const proxy = await startUploadingProxy({ upstream, args });
    const answered = [];
    let running = true;
    let next = 0;
    const traffic = Promise.all(Array.from({ length: 4 }, async () => {
      while (running) {
        const tag = `kill${round} ${next++} x`;
        tried.add(tag);
        try {
          if (await send(proxy, tag.split(' ')[0], Number(tag.split(' ')[1]), 200) === 200) answered.push(tag);
        } catch {
          return;  // the proxy was killed
        }
      }
    }));
    await waitFor('traffic', () => answered.length >= 60);
    if (round === 3) {
      running = false;
      await traffic;
      for (const tag of answered) mustHave.add(tag);
      assertAccounted(await finish(proxy));
      break;
    }
    const cut = answered.slice();
    const matched = (await counters(proxy)).matched;
    await waitFor('the writer', async () => {
      const c = await counters(proxy);
      return c.recorded + c.skipped_too_large + c.sampled_out + c.invalid_body + c.non_standard_json + c.dropped_queue_full +
        c.skipped_upload_backlog + c.write_failed_records >= matched;
    });
    await waitFor('more traffic', () => answered.length >= cut.length + 20);
    proxy.proc.kill('SIGKILL');
    await proxy.exited;
    running = false;
    await traffic;
    for (const tag of cut) mustHave.add(tag);
  }

  const out = join(dir, 'merged.jsonl');
  const merge = await run(LLMTAP, ['merge', `s3://${BUCKET}/${prefix}`, '-o', out]);
  assert.equal(merge.code, 0, merge.stdout + merge.stderr);
  const seen = new Map();
  for (const line of readFileSync(out, 'utf8').split('\n').filter((l) => l !== '')) {
    const tag = JSON.parse(line).payload.messages[0].content.split(' ').slice(0, 3).join(' ');
    seen.set(tag, (seen.get(tag) || 0) + 1);
  }
  for (const [tag, n] of seen) {
    assert.equal(n, 1, `${tag} merged ${n} times`);
    assert.ok(tried.has(tag), `${tag} was never sent`);
  }
  const missing = [...mustHave].filter((t) => !seen.has(t));
  assert.deepEqual(missing, [], `${missing.length} of ${mustHave.size} answered requests missing; ` +
    `the store: ${JSON.stringify(listKeys(prefix))}; local: ${JSON.stringify(readdirSync(join(dir, 'r')))}; ` +
    `merge: ${merge.stdout}${merge.stderr}`);
  // The recovered files are in the store as such, and nothing is left behind.
  const manifests = listKeys(prefix).filter((k) => k.endsWith('.manifest.json'))
    .map((k) => JSON.parse(s3('GET', k)));
  // One per kill, unless a kill found the open file empty (just rotated): nothing to recover.
  const recovered = manifests.filter((m) => m.state === 'recovered');
  assert.ok(recovered.length >= 1 && recovered.length <= 3,
    JSON.stringify(manifests.map((m) => [m.capture_path, m.state])));
  for (const m of manifests) assert.ok(Number.isInteger(m.timestamp_zero_unix_ms), JSON.stringify(m));
  assert.equal(pendingUploads(prefix), 0);
  const left = readdirSync(join(dir, 'r'));
  assert.deepEqual(left, [], 'local files left behind');
  console.log(`kills: ${mustHave.size} requests answered before the cut points, ${seen.size} merged, ` +
    `${tried.size} sent`);
  cleanup(dir);
});
