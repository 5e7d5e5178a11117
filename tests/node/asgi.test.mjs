// The in-process capture (llmtap.asgi.CaptureMiddleware in a FastAPI app served by uvicorn,
// tests/python/asgi_app.py) against `llmtap proxy` in front of the same app without it
// (tests/upstream/app.py), as real processes on free loopback ports: the same corpus gives the
// same capture bytes, counters and outcomes; streams are not buffered; shutdown drains; a slow
// or full disk never delays a response; two uvicorn workers write two files that merge into one.
import { describe, it, before, after, test } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  LLMTAP, startUpstream, startProxy, startAsgi, stop, url, run, readLines, readManifest,
  checkAIPerfRows, validateWithLlmtap, tempDir, cleanup, chatLoad,
} from './proxy_helpers.mjs';

const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Name three rivers in Europe.' },
];
const JSON_HEADERS = { 'content-type': 'application/json' };
const MiB = 1048576;  // max_request_bytes' default

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function captureEnv(args) {
  return { NIM_CAPTURE_ENABLE: '1', NIM_CAPTURE_ARGS: JSON.stringify(args) };
}

// The client's timeout is a guard against a hang only (a loaded machine only adds delay).
function openai(server) {
  return new OpenAI({ baseURL: url(server, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 60000 });
}

async function post(server, path, body, headers = JSON_HEADERS) {
  const r = await fetch(url(server, path), { method: 'POST', body, headers });
  return `${r.status} ${await r.text()}`;
}

// A POST whose body goes out chunked (Transfer-Encoding: chunked), one chunk per part, 20 ms
// apart, so that the server reads it in pieces.
async function postChunked(server, path, parts) {
  let i = 0;
  const body = new ReadableStream({
    async pull(controller) {
      if (i === parts.length) return controller.close();
      if (i > 0) await sleep(20);
      controller.enqueue(parts[i++]);
    },
  });
  const r = await fetch(url(server, path), { method: 'POST', body, duplex: 'half', headers: JSON_HEADERS });
  return `${r.status} ${await r.text()}`;
}

// `bytes` cut into `n` parts of about equal size.
function split(bytes, n) {
  const cuts = Array.from({ length: n - 1 }, (_, k) => Math.floor((bytes.length * (k + 1)) / n));
  return cutAt(bytes, cuts);
}

function cutAt(bytes, cuts) {
  const parts = [];
  let at = 0;
  for (const c of [...cuts, bytes.length]) {
    parts.push(bytes.subarray(at, c));
    at = c;
  }
  return parts;
}

// `bytes` cut just after the lead byte of its first `n` multi-byte UTF-8 characters.
function splitInsideCharacters(bytes, n) {
  const cuts = [];
  for (let i = 0; i < bytes.length && cuts.length < n; ++i) if (bytes[i] >= 0xc0) cuts.push(i + 1);
  assert.equal(cuts.length, n);
  return cutAt(bytes, cuts);
}

// A chat body of exactly `size` bytes.
function chatOfSize(size) {
  const base = JSON.stringify({ model: 'big', messages: [{ role: 'user', content: '' }], max_tokens: 1 });
  return JSON.stringify({ model: 'big', messages: [{ role: 'user', content: 'y'.repeat(size - base.length) }], max_tokens: 1 });
}

async function stats(server) {
  return (await fetch(url(server, '/stats'))).json();
}

// A "lockstep-stream" request: the app sends its first SSE event at once and each next one only
// once the client asked for it (GET /release on `statsServer`, the app itself or with the
// middleware, where GET is never captured). The probe asks after each event it read: a stream
// held back anywhere on the way (the whole response, or an event until the next one comes)
// never gets to its next event, whatever the machine's load, so four events read at all are
// four events passed on one by one. Notes when each read returned and how many events it held,
// cancels after the fourth (closes the connection) and waits until the app saw the client go.
// Sent with node:http on a connection of its own, head and body in one write: fetch's keep-alive
// connections to uvicorn stall every other request for ~40 ms (delayed ACK), which would be all
// that a first-event time showed.
const HANG_MS = 30000;  // a guard against a hang only

async function slowStreamProbe(server, statsServer) {
  const before = (await stats(statsServer)).disconnects.length;
  const release = async () => { await (await fetch(url(statsServer, '/release'))).text(); };
  const body = JSON.stringify({ model: 'lockstep-stream', messages, stream: true });
  const t0 = performance.now();
  const reads = [];
  let req;
  const status = await new Promise((resolve, reject) => {
    let events = 0;
    const fail = (e) => { req?.destroy(); reject(e); };  // the connection goes either way
    const guard = setTimeout(() => fail(new Error(`${events} events within ${HANG_MS} ms: ${JSON.stringify(reads)}`)), HANG_MS);
    req = httpRequest({ host: '127.0.0.1', port: server.port, path: '/v1/chat/completions', method: 'POST',
      agent: false, headers: { ...JSON_HEADERS, 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d) => {
        const n = d.split('\n\n').length - 1;
        reads.push({ ms: performance.now() - t0, events: n });
        events += n;
        if (events >= 4) {
          clearTimeout(guard);
          resolve(res.statusCode);
        } else if (n > 0) {
          release().catch(fail);
        }
      });
      res.on('end', () => fail(new Error('the stream ended early')));
      res.on('error', () => {});  // the cancel below
    });
    req.on('error', fail);
    req.end(body);
  });
  req.destroy();
  // The app notices the client gone at the latest when it sends its next event.
  await release();
  for (const end = Date.now() + HANG_MS; Date.now() < end && (await stats(statsServer)).disconnects.length === before;) await sleep(10);
  assert.equal((await stats(statsServer)).disconnects.length, before + 1, 'the app saw the client go');
  return { status, reads };
}

// Stops the middleware's server (SIGTERM, exit 0) and checks when its capture stopped (the log
// line of the manifest's final write): in uvicorn's lifespan shutdown with --lifespan on, else
// at the interpreter's exit (atexit).
async function stopAsgi(server, lifespan) {
  assert.deepEqual(await stop(server), { code: 0, signal: null }, server.stderr);
  const stopped = server.stderr.indexOf('capture stopped');
  const returned = server.stderr.indexOf('asgi: uvicorn returned');
  assert.ok(stopped >= 0 && returned >= 0, server.stderr);
  if (lifespan === 'on') assert.ok(stopped < returned, `stopped after the lifespan shutdown:\n${server.stderr}`);
  else assert.ok(stopped > returned, server.stderr);
}

// The held corpus, sent one request at a time (so that the capture's order is the sending
// order). Returns what the client saw of each, and the slow stream's reads.
async function sendCorpus(server, statsServer) {
  const seen = [];
  const c = openai(server);
  // The openai client: chat and completions, streaming (the client's own SSE parsing) or not.
  const collect = async (stream) => {
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    return JSON.stringify(chunks);
  };
  seen.push(JSON.stringify(await c.chat.completions.create({ model: 'vllm-like', messages, max_tokens: 6 })));
  seen.push(await collect(await c.chat.completions.create(
    { model: 'vllm-like', messages, max_tokens: 5, stream: true, stream_options: { include_usage: true } })));
  seen.push(JSON.stringify(await c.completions.create({ model: 'vllm-like', prompt: 'Once upon a time', max_tokens: 4 })));
  seen.push(await collect(await c.completions.create(
    { model: 'vllm-like', prompt: 'Once upon a time', max_tokens: 3, stream: true })));
  // Pretty-printed and oddly spaced bodies (the capture compacts them).
  seen.push(await post(server, '/v1/chat/completions',
    `${JSON.stringify({ model: 'pretty', messages, max_tokens: 3, temperature: 0.5, stop: ['\n'] }, null, 2)}\n`));
  seen.push(await post(server, '/v1/completions',
    '{\r\n\t"model" : "spaced",\r\n\t"prompt" : [ "a" , "b c" ] ,\n  "max_tokens" : 2 ,"n":1 } \n'));
  // Escapes as the client wrote them; raw UTF-8 (2-, 3- and 4-byte characters, U+2028).
  const escaped = '{"model":"esc","messages":[{"role":"user","content":"caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\/ \\n\\t\\u0000\\u001f \\u2028"}],"max_tokens":2}';
  seen.push(await post(server, '/v1/chat/completions', escaped));
  const utf8 = JSON.stringify({ model: 'utf8', messages: [{ role: 'user', content: 'é ✓ 😀 中文 \u2028 "\\' }], max_tokens: 2 });
  seen.push(await post(server, '/v1/chat/completions', utf8));
  // A chunked upload, cut inside multi-byte characters.
  seen.push(await postChunked(server, '/v1/chat/completions', splitInsideCharacters(Buffer.from(utf8.replace('utf8', 'chunked')), 4)));
  // max_request_bytes (1 MiB) - 1, exactly, + 1; whole and chunked.
  for (const size of [MiB - 1, MiB, MiB + 1]) {
    const body = chatOfSize(size);
    assert.equal(Buffer.byteLength(body), size);
    seen.push(await post(server, '/v1/chat/completions', body));
  }
  for (const size of [MiB, MiB + 1]) {
    seen.push(await postChunked(server, '/v1/chat/completions', split(Buffer.from(chatOfSize(size)), 3)));
  }
  // Bodies that are not a JSON object: answered 400 by the app, counted as invalid.
  for (const body of ['not json', '[1,2]', '', '{"prompt":"p"} trailing', '{"prompt": "p"']) {
    seen.push(await post(server, '/v1/completions', body));
  }
  // Bodies Python's json reads (so the app answers 200) but AIPerf's loader refuses: a lone
  // surrogate escape, NaN. Counted as non_standard_json, not recorded.
  for (const body of ['{"model":"lone","prompt":"\\ud800 lone","max_tokens":2}',
    '{"model":"nan","prompt":"p","max_tokens":2,"temperature":NaN}']) {
    seen.push(await post(server, '/v1/completions', body));
  }
  // Paths outside endpoint_pattern (the app answers 404, and 200 for its decoded path), one
  // inside it with a query string.
  seen.push(await post(server, '/v1/embeddings', JSON.stringify({ model: 'e', input: 'x' })));
  seen.push(await post(server, '/v1/chat%2Fcompletions', JSON.stringify({ model: 'pct', messages, max_tokens: 2 })));
  seen.push(await post(server, '/v1/chat/completions?api-version=2024-06-01', JSON.stringify({ model: 'query', messages, max_tokens: 2 })));
  // Other methods are never offered.
  seen.push(`${(await fetch(url(server, '/v1/models'))).status}`);
  seen.push(`${(await fetch(url(server, '/health'))).status}`);
  // Last: a stream the client cancels after 4 events.
  const probe = await slowStreamProbe(server, statsServer);
  seen.push(`${probe.status}`);
  return { seen, probe };
}

// The corpus's counts with the default settings.
const CORPUS = { offered: 25, matched: 23, recorded: 14, skipped_too_large: 2, invalid_body: 5, non_standard_json: 2 };

// The counters both hosts must agree on; bytes_written too in raw_payload, whose rows have no
// timestamp (a mooncake row's "timestamp", ms since the first record, differs between two runs,
// and so may its number of digits).
const COUNTERS = ['offered', 'matched', 'recorded', 'skipped_too_large', 'sampled_out', 'invalid_body', 'non_standard_json',
  'dropped_queue_full', 'skipped_upload_backlog', 'write_failed_records', 'queued_records',
  'queue_bytes', 'outcomes_written', 'outcomes_lost', 'files_rotated', 'with_session_id'];

function countersOf(manifest, withBytes) {
  const c = Object.fromEntries(COUNTERS.map((k) => [k, manifest.counters[k]]));
  if (withBytes) c.bytes_written = manifest.counters.bytes_written;
  return c;
}

// A capture's lines with each row's leading "timestamp":N set aside (raw_payload rows have none).
function linesWithoutTimestamps(path) {
  const text = readFileSync(path, 'utf8');
  assert.ok(text === '' || text.endsWith('\n'), `${path} ends with a newline`);
  return text.split('\n').slice(0, -1).map((l) => l.replace(/^\{"timestamp":\d+,/, '{'));
}

// The outcomes sidecar by capture line, without the timings.
function outcomesByLine(capturePath) {
  const byLine = {};
  for (const o of readLines(`${capturePath}.outcomes.ndjson`)) {
    assert.equal(byLine[o.line], undefined, `line ${o.line} named twice`);
    const { line, timestamp, ttft_ms, latency_ms, ...rest } = o;
    byLine[line] = rest;
  }
  return byLine;
}

// Capture settings compared between the proxy and the middleware: each runs the corpus.
const CONFIGS = {
  mooncake: { outcomes: true },
  raw: { format: 'raw_payload', endpoint_pattern: '^/v1/chat/completions$' },
  unsampled: { sample_rate: 0 },
};

describe('the same corpus through llmtap proxy and through the middleware', () => {
  const dir = tempDir();
  const runs = {};  // config -> { proxy, asgi } -> { path, seen, probe }
  let direct;  // the slow stream without any capture in the way

  before(async () => {
    const upstream = await startUpstream();
    try {
      for (const [name, args] of Object.entries(CONFIGS)) {
        const paths = { proxy: join(dir, name, 'proxy', 'requests.jsonl'), asgi: join(dir, name, 'asgi', 'requests.jsonl') };
        // The middleware's run alternates uvicorn's lifespan (capture started by the lifespan
        // startup, stopped by its shutdown) with none (first request; atexit).
        const lifespan = name === 'raw' ? 'on' : 'off';
        const [proxy, asgi] = await Promise.all([
          startProxy({ upstream: url(upstream), env: captureEnv({ path: paths.proxy, ...args }) }),
          startAsgi({ env: captureEnv({ path: paths.asgi, ...args }), args: ['--lifespan', lifespan] }),
        ]);
        try {
          runs[name] = {
            proxy: { path: paths.proxy, ...await sendCorpus(proxy, upstream) },
            asgi: { path: paths.asgi, ...await sendCorpus(asgi, asgi) },
          };
        } finally {
          const [p] = await Promise.all([stop(proxy), stopAsgi(asgi, lifespan)]);
          assert.deepEqual(p, { code: 0, signal: null });
        }
      }
      direct = await slowStreamProbe(upstream, upstream);
    } finally {
      await stop(upstream);
    }
  });
  after(() => cleanup(dir));

  it('the clients saw the same responses', () => {
    for (const [name, r] of Object.entries(runs)) assert.deepEqual(r.asgi.seen, r.proxy.seen, name);
  });

  for (const name of Object.keys(CONFIGS)) {
    it(`${name}: the capture files are equal line by line (timestamps aside), the manifests' counters equal`, async () => {
      const { proxy, asgi } = runs[name];
      const p = readManifest(proxy.path);
      const a = readManifest(asgi.path);
      assert.deepEqual(countersOf(a, name === 'raw'), countersOf(p, name === 'raw'));
      assert.deepEqual({ ...a.config, path: '' }, { ...p.config, path: '' });
      assert.equal(a.format, p.format);
      assert.equal(a.state, 'stopped');
      assert.equal(a.file.records, p.file.records);
      assert.equal(existsSync(asgi.path), existsSync(proxy.path));
      const lines = linesWithoutTimestamps(asgi.path);
      assert.deepEqual(lines, linesWithoutTimestamps(proxy.path));
      if (name === 'mooncake') {
        assert.deepEqual(countersOf(a), { ...countersOf(a), ...CORPUS });
        const rows = readLines(asgi.path);
        checkAIPerfRows(rows, 'mooncake_payload');
        await validateWithLlmtap(asgi.path);
        assert.deepEqual(rows[0].payload, { model: 'vllm-like', messages, max_tokens: 6 });
        assert.equal(rows[4].payload.model, 'pretty');
        assert.equal(rows[6].payload.messages[0].content, 'café 😀 "q" \\ / \n\t\u0000\u001f \u2028');
        assert.equal(rows[8].payload.messages[0].content, 'é ✓ 😀 中文 \u2028 "\\');
        assert.deepEqual(rows.map((r) => r.payload.model),
          ['vllm-like', 'vllm-like', 'vllm-like', 'vllm-like', 'pretty', 'spaced', 'esc', 'utf8', 'chunked',
            'big', 'big', 'big', 'query', 'lockstep-stream']);
      } else if (name === 'raw') {
        assert.ok(a.counters.recorded >= 8, `${a.counters.recorded} recorded`);
        checkAIPerfRows(readLines(asgi.path), 'raw_payload');
      } else {
        assert.equal(a.counters.recorded, 0);
        assert.equal(a.counters.sampled_out, CORPUS.matched - CORPUS.skipped_too_large);
      }
    });
  }

  it('outcomes: the same status, usage, finish_reason and cancel for every record', () => {
    const { proxy, asgi } = runs.mooncake;
    const a = outcomesByLine(asgi.path);
    assert.deepEqual(a, outcomesByLine(proxy.path));
    assert.equal(Object.keys(a).length, CORPUS.recorded);
    // The FastAPI upstream reports nothing of its own work (no cache, timings or speculation).
    const none = { cached_tokens: null, server: null, spec: null, cancelled: false, error: null };
    assert.deepEqual(a[1], { status: 200, prompt_tokens: 5, completion_tokens: 6, finish_reason: 'length', usage_source: 'usage', ...none });
    assert.deepEqual(a[2], { status: 200, prompt_tokens: 5, completion_tokens: 5, finish_reason: 'length', usage_source: 'usage', ...none });
    assert.deepEqual(a[4], { status: 200, prompt_tokens: null, completion_tokens: null, finish_reason: 'length', usage_source: null, ...none });
    // The slow stream the client cancelled.
    assert.equal(a[CORPUS.recorded].cancelled, true);
    assert.equal(a[CORPUS.recorded].status, 200);
  });

  it('a slow stream reaches the client event by event through the middleware', (t) => {
    for (const [name, r] of Object.entries(runs)) {
      const { reads } = r.asgi.probe;
      // Four events, each in a read of its own (the app sent the next only after the client
      // had read this one: nothing was held back, see slowStreamProbe).
      assert.ok(reads.length === 4 && reads.every((x) => x.events === 1), `${name}: ${JSON.stringify(reads)}`);
    }
    // First-event latency with and without the middleware, for the record only: speed is
    // measured by the benchmarks, not here.
    const ms = (p) => p.reads[0].ms.toFixed(1);
    t.diagnostic(`first event: app alone ${ms(direct)} ms, app + middleware ${Object.values(runs).map((r) => ms(r.asgi.probe)).join(' / ')} ms, ` +
      `proxy + app ${Object.values(runs).map((r) => ms(r.proxy.probe)).join(' / ')} ms`);
  });
});

test('sample_rate 0.5 is honoured (statistically)', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const asgi = await startAsgi({ env: captureEnv({ path: capturePath, sample_rate: 0.5 }), args: ['--lifespan', 'on'] });
  try {
    const n = 200;
    for (let i = 0; i < n; i += 20) {
      await Promise.all(Array.from({ length: 20 }, async (_, k) => {
        assert.match(await post(asgi, '/v1/completions', JSON.stringify({ prompt: `p${i + k}`, max_tokens: 1 })), /^200 /);
      }));
    }
    await stopAsgi(asgi, 'on');
    const rows = readLines(capturePath);
    // Binomial(200, 0.5): mean 100, sd 7.1; +-6 sd fails once in ~10^9 runs.
    assert.ok(rows.length >= 58 && rows.length <= 142, `${rows.length} recorded`);
    assert.equal(new Set(rows.map((r) => r.payload.prompt)).size, rows.length);
    const c = readManifest(capturePath).counters;
    assert.equal(c.recorded, rows.length);
    assert.equal(c.recorded + c.sampled_out, n);
  } finally {
    await stop(asgi);
    cleanup(dir);
  }
});

// Every offered request is in exactly one outcome, nothing left in the queue.
function assertAccounted(c) {
  assert.equal(c.matched, c.recorded + c.skipped_too_large + c.sampled_out + c.invalid_body + c.non_standard_json +
    c.dropped_queue_full + c.write_failed_records + c.queued_records, JSON.stringify(c));
  assert.equal(c.queued_records, 0);
}

test('SIGTERM under load: the manifest is written and counts every request; no answered record lost', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const asgi = await startAsgi({ env: captureEnv({ path: capturePath }) });
  let load = null;
  try {
    load = chatLoad(asgi, 8);
    const { answered } = load;
    for (const end = Date.now() + HANG_MS; Date.now() < end && answered.size < 40;) await sleep(10);
    const exited = stopAsgi(asgi, 'off');
    await load.finish();
    await exited;
    const rows = readLines(capturePath);
    const recorded = rows.map((r) => Number(r.payload.messages[0].content.split(' ')[1]));
    assert.equal(new Set(recorded).size, rows.length, 'no request recorded twice');
    assert.ok(answered.size > 20, `${answered.size} answered`);
    for (const i of answered) assert.ok(recorded.includes(i), `request ${i} answered but not recorded`);
    const m = readManifest(capturePath);
    assert.equal(m.state, 'stopped');
    assert.equal(m.counters.recorded, rows.length);
    assert.equal(m.counters.offered, rows.length);
    assertAccounted(m.counters);
    checkAIPerfRows(rows, 'mooncake_payload');
  } finally {
    await load?.finish();
    await stop(asgi);
    cleanup(dir);
  }
});

test('SIGHUP finishes the capture file, as in the proxy: each file complete, with its manifest', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const asgi = await startAsgi({ env: captureEnv({ path: capturePath }), args: ['--lifespan', 'on'] });
  const send = (i) => post(asgi, '/v1/completions', JSON.stringify({ prompt: `p${i}`, max_tokens: 2 }));
  try {
    for (let i = 0; i < 3; ++i) assert.equal((await send(i)).slice(0, 3), '200');
    const rotated = () => readdirSync(dir).filter((f) => /^requests\.\d{8}T\d{6}\.\d{3}Z\.jsonl$/.test(f));
    for (const end = Date.now() + HANG_MS; Date.now() < end && !existsSync(capturePath);) await sleep(10);  // the first record written
    asgi.proc.kill('SIGHUP');
    for (const end = Date.now() + HANG_MS; Date.now() < end && rotated().length === 0;) await sleep(10);
    assert.equal(rotated().length, 1, readdirSync(dir).join(' '));
    for (let i = 3; i < 5; ++i) assert.equal((await send(i)).slice(0, 3), '200');
    await stopAsgi(asgi, 'on');
    const first = join(dir, rotated()[0]);
    assert.deepEqual(readLines(first).map((r) => r.payload.prompt), ['p0', 'p1', 'p2']);
    assert.deepEqual(readLines(capturePath).map((r) => r.payload.prompt), ['p3', 'p4']);
    assert.equal(readManifest(first).file.records, 3);
    assert.equal(readManifest(capturePath).file.records, 2);
    assert.equal(readManifest(capturePath).counters.files_rotated, 1);
  } finally {
    await stop(asgi);
    cleanup(dir);
  }
});

test('a stalled disk or a full one never delays a response; the losses are counted', async () => {
  const dir = tempDir();
  const slowPath = join(dir, 'slow', 'requests.jsonl');
  const fullPath = join(dir, 'full', 'requests.jsonl');
  // Both disks stalled: every capture write blocks until the test sends SIGUSR1. A response
  // that waited for a write would never come (whatever the machine's load); they all must come
  // while the disks are stalled. The slow one's queue holds 4 of these records: the rest are
  // dropped, not waited for. The full one fails every write once released.
  const [slow, full] = await Promise.all([
    startAsgi({ env: captureEnv({ path: slowPath, max_request_bytes: 4096, max_queue_bytes: 4096 }), args: ['--stall-disk'] }),
    startAsgi({ env: captureEnv({ path: fullPath, outcomes: true }), args: ['--stall-disk', '--disk-space', '0', '--lifespan', 'on'] }),
  ]);
  // The capture's stop waits for its writes: the disks go on before any stop (also on failure).
  const release = () => { for (const s of [slow, full]) if (s.proc.exitCode === null) s.proc.kill('SIGUSR1'); };
  try {
    const n = 30;
    const send = async (server, i) => {
      const r = await fetch(url(server, '/v1/chat/completions'), {
        method: 'POST', headers: JSON_HEADERS,
        signal: AbortSignal.timeout(30000),  // a guard against a hang only
        body: JSON.stringify({ model: 'm', max_tokens: 2, stream: i % 3 === 0, messages: [{ role: 'user', content: `request ${i} ${'x'.repeat(900)}` }] }),
      });
      const text = await r.text();
      assert.equal(r.status, 200, text);
    };
    for (const server of [slow, full]) assert.equal((await fetch(url(server, '/health'))).status, 200);
    for (let i = 0; i < n; ++i) await Promise.all([send(slow, i), send(full, i)]);
    // Answered with the disks still stalled: the slow disk's queue overflowed meanwhile.
    release();

    // Stopping drains what is queued (on the disks released now) and writes the manifest.
    await Promise.all([stopAsgi(slow, 'off'), stopAsgi(full, 'on')]);

    const sm = readManifest(slowPath);
    assert.ok(sm.counters.dropped_queue_full > 0, JSON.stringify(sm.counters));
    assert.equal(sm.counters.recorded + sm.counters.dropped_queue_full, n);
    assert.equal(readLines(slowPath).length, sm.counters.recorded);
    assertAccounted(sm.counters);

    const fm = readManifest(fullPath);
    assert.equal(fm.counters.recorded, 0);
    assert.equal(fm.counters.write_failed_records, n, JSON.stringify(fm.counters));
    assertAccounted(fm.counters);
    assert.match(full.stderr, /No space left on device/);
  } finally {
    release();
    await stop(slow);
    await stop(full);
    cleanup(dir);
  }
});

// A POST on a connection of its own (no keep-alive), so that each request is a new accept for
// whichever worker takes it.
function postOwnConnection(server, path, body) {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: server.port, path, method: 'POST', agent: false,
      headers: { ...JSON_HEADERS, 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

test('two uvicorn workers: a file each, with its manifest; llmtap merge gives every request once', async (t) => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const asgi = await startAsgi({ env: captureEnv({ path: capturePath }), args: ['--workers', '2', '--lifespan', 'on'] });
  const workerFiles = () => readdirSync(dir).filter((n) => /^requests\.pid\d+\.jsonl$/.test(n)).sort();
  const workerPids = () => workerFiles().map((n) => Number(n.match(/pid(\d+)/)[1]));
  try {
    // Each worker opens its file at its lifespan startup, then serves.
    for (const end = Date.now() + HANG_MS; Date.now() < end && workerFiles().length < 2;) await sleep(25);
    assert.equal(workerFiles().length, 2, readdirSync(dir).join(' '));
    const sent = [];
    let next = 0;
    // 40 requests, and more until each worker's file holds a record: a worker still starting on
    // a loaded machine may take none of the first 40 (guard: 30 s).
    let enough = 40;
    const client = async () => {
      while (next < enough) {
        const i = next++;
        const params = i % 2 === 0
          ? { model: 'w', messages: [{ role: 'user', content: `request ${i}` }], max_tokens: 3, stream: i % 4 === 0 }
          : { model: 'w', prompt: `request ${i}`, max_tokens: 2 };
        const r = await postOwnConnection(asgi, i % 2 === 0 ? '/v1/chat/completions' : '/v1/completions', JSON.stringify(params));
        assert.equal(r.status, 200, r.text);
        sent.push(params);
      }
    };
    await Promise.all(Array.from({ length: 4 }, client));
    const bothWrote = () => workerFiles().every((n) => statSync(join(dir, n)).size > 0);
    for (const end = Date.now() + HANG_MS; Date.now() < end && !bothWrote();) {
      enough = next + 4;
      await Promise.all(Array.from({ length: 4 }, client));
      await sleep(20);
    }
    assert.deepEqual(await stop(asgi), { code: 0, signal: null });

    const files = workerFiles().map((n) => join(dir, n));
    assert.ok(!existsSync(capturePath), 'the workers write only their own files');
    let total = 0;
    const perWorker = [];
    for (const f of files) {
      const rows = readLines(f);
      perWorker.push(rows.length);
      assert.ok(rows.length > 0, `${f}: the requests went to both workers`);
      checkAIPerfRows(rows, 'mooncake_payload');
      const m = readManifest(f);
      assert.equal(m.state, 'stopped');
      assert.equal(m.capture_path, f);
      assert.equal(m.pid, Number(f.match(/pid(\d+)/)[1]));
      assert.equal(m.counters.recorded, rows.length);
      assertAccounted(m.counters);
      total += rows.length;
    }
    assert.equal(total, sent.length);
    t.diagnostic(`requests per worker: ${perWorker.join(' + ')}`);

    const merged = join(dir, 'merged.jsonl');
    const r = await run(LLMTAP, ['merge', ...files, '-o', merged]);
    assert.equal(r.code, 0, r.stderr);
    const rows = readLines(merged);
    checkAIPerfRows(rows, 'mooncake_payload');
    const key = (p) => JSON.stringify(p);
    assert.deepEqual(rows.map((row) => key(row.payload)).sort(), sent.map(key).sort());
    assert.equal(readManifest(merged).file.records, sent.length);
  } finally {
    await stop(asgi);
    // Should the parent have died first, its workers are stopped by their PIDs (when those
    // still name a worker).
    for (const pid of workerPids()) {
      let cmdline = '';
      try { cmdline = readFileSync(`/proc/${pid}/cmdline`, 'latin1'); } catch { /* gone */ }
      if (cmdline.includes('multiprocessing')) process.kill(pid, 'SIGKILL');
    }
    cleanup(dir);
  }
});
