// `llmtap proxy --shadow`: live requests mirrored to a candidate, as real processes on free
// loopback ports. The openai SDK streams through the shadowing proxy to an `llmtap sim` primary
// while a second `llmtap sim` with other timing options is the candidate; the pairs file joins
// each capture row; a candidate that is down or over its in-flight limit costs dropped mirrors,
// counted by reason, never a failed or slowed primary request. No assertion on time: every wait
// is bounded by an event (a line, a request arriving, a counter reaching its value).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  startSim, startProxy, startUpstream, stop, url, curl, readLines, readManifest, tempDir, cleanup,
  closedPort, logged, fetchVia,
} from './proxy_helpers.mjs';

const messages = [{ role: 'user', content: 'Name three rivers in Europe.' }];

function openai(server, apiKey = 'sk-test') {
  return new OpenAI({ baseURL: url(server, '/v1'), apiKey, maxRetries: 0, timeout: 30000 });
}

// fetch over one kept-alive connection (node:http, a single socket): each request goes out
// once the one before it was read to its end, on the connection that carried that one.
function fetchOneConnection() {
  return fetchVia(http, new http.Agent({ keepAlive: true, maxSockets: 1 }));
}

// What the client saw of one call: the text, usage and finish reason.
async function call(client, kind, params) {
  const api = kind === 'chat' ? client.chat.completions : client.completions;
  if (!params.stream) {
    const r = await api.create(params);
    const c = r.choices[0];
    return { text: kind === 'chat' ? c.message.content : c.text, usage: r.usage, finish: c.finish_reason };
  }
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of await api.create(params)) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += (kind === 'chat' ? c.delta?.content : c.text) ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, usage, finish };
}

// The value of one sample of the metrics text (`name` with its labels, as printed).
function metric(text, name) {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  assert.ok(line !== undefined, `no ${name} in the metrics:\n${text}`);
  return Number(line.slice(name.length + 1));
}

async function metrics(proxy) {
  return curl([url(proxy, '/llmtap/metrics')]);
}

// Polls the metrics until `done(text)` holds: the mirrors run off the request path, so the
// client's answer comes before their counters move. Bounded by the event; the 60 s cap only
// ends a test that hangs, with the metrics it saw last.
async function metricsWhen(proxy, done) {
  for (const end = Date.now() + 60000; ;) {
    const text = await metrics(proxy);
    if (done(text)) return text;
    if (Date.now() > end) assert.fail(`no such metrics within 60 s:\n${text}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const kPairKeys = ['line', 'timestamp', 'request', 'shadow', 'candidate_url', 'path', 'model',
  'temperature', 'at_ms',
  'primary', 'candidate', 'delta', 'output'];
const kSideKeys = ['status', 'ttft_ms', 'itl_p50_ms', 'itl_max_ms', 'latency_ms',
  'prompt_tokens', 'completion_tokens', 'finish_reason', 'error'];

const calls = [
  ['chat', { model: 'm', messages, max_tokens: 10, stream: true, stream_options: { include_usage: true } }],
  ['chat', { model: 'm', messages: [{ role: 'user', content: 'Count to five.' }], max_tokens: 8 }],
  ['completions', { model: 'm', prompt: 'Once upon a time', max_tokens: 6, stream: true, stream_options: { include_usage: true } }],
  ['chat', { model: 'm', messages: [{ role: 'user', content: 'Say hi.' }], max_tokens: 12, stream: true, stream_options: { include_usage: true } }],
];

// Capture on, a sim candidate: one pair per capture row, joined by line and timestamp.
async function pairsWithCapture(candidateArgs, candidateOverrides) {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const primary = await startSim();
  const candidate = await startSim(candidateArgs, candidateOverrides);
  const proxy = await startProxy({
    upstream: url(primary),
    args: ['--capture', '--capture-path', capturePath, '--shadow', url(candidate)],
  });
  try {
    assert.match(proxy.stdout, /shadow to http:\/\/127\.0\.0\.1:\d+ \(pairs: .*requests\.jsonl\.shadow\.ndjson\)/);
    const seen = [];
    for (const [kind, params] of calls) seen.push(await call(openai(proxy), kind, params));
    // A pair is counted before its TTFT delta goes into the histogram: both are waited for.
    const m = await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_pairs_total') === calls.length
      && metric(t, 'llmtap_shadow_ttft_delta_seconds_count') >= calls.length);
    assert.equal(metric(m, 'llmtap_shadow_matched_total'), calls.length);
    assert.equal(metric(m, 'llmtap_shadow_sent_total'), calls.length);
    assert.equal(metric(m, 'llmtap_shadow_completed_total'), calls.length);
    assert.equal(metric(m, 'llmtap_shadow_dropped_total{reason="in_flight_limit"}'), 0);
    assert.equal(metric(m, 'llmtap_shadow_ttft_delta_seconds_count'), calls.length);
    assert.equal(metric(m, 'llmtap_shadow_ttft_delta_seconds_bucket{le="+Inf"}'), calls.length);
    assert.match(m, /# TYPE llmtap_shadow_itl_delta_seconds histogram\n/);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });

    const rows = readLines(capturePath);
    assert.deepEqual(rows.map((r) => r.payload), calls.map((c) => c[1]));
    const outcomes = readLines(`${capturePath}.outcomes.ndjson`);
    const pairs = readLines(`${capturePath}.shadow.ndjson`);
    assert.equal(outcomes.length, calls.length, 'shadowing turned the outcomes on');
    assert.equal(pairs.length, calls.length, 'one pair per mirrored request');
    const byLine = new Map();
    for (const p of pairs) {
      assert.deepEqual(Object.keys(p), kPairKeys);
      assert.equal(p.model, 'm');
      assert.equal(p.shadow, 0);
      assert.deepEqual(Object.keys(p.primary), kSideKeys);
      assert.deepEqual(Object.keys(p.candidate), kSideKeys);
      assert.equal(p.timestamp, rows[p.line - 1].timestamp, `pair of line ${p.line} joins its row`);
      assert.ok(!byLine.has(p.line), `line ${p.line} paired twice`);
      byLine.set(p.line, p);
    }
    for (let i = 0; i < calls.length; ++i) {
      const p = byLine.get(i + 1);
      const [kind, params] = calls[i];
      assert.equal(p.path, kind === 'chat' ? '/v1/chat/completions' : '/v1/completions');
      for (const side of [p.primary, p.candidate]) {
        assert.equal(side.status, 200);
        assert.equal(side.error, null);
        assert.ok(side.ttft_ms > 0 && side.ttft_ms <= side.latency_ms, JSON.stringify(side));
      }
      // The primary's side is what the client saw, and what its outcome line says.
      assert.equal(p.primary.finish_reason, seen[i].finish);
      if (seen[i].usage) assert.equal(p.primary.completion_tokens, seen[i].usage.completion_tokens);
      const outcome = outcomes.find((o) => o.line === i + 1);
      assert.equal(outcome.finish_reason, p.primary.finish_reason);
      assert.equal(outcome.completion_tokens, p.primary.completion_tokens);
      if (params.stream) {
        assert.ok(p.primary.itl_max_ms >= p.primary.itl_p50_ms, JSON.stringify(p.primary));
        assert.equal(typeof p.delta.ttft_ms, 'number');
      }
      assert.notEqual(p.output, null);
    }
    const manifest = readManifest(capturePath);
    assert.equal(manifest.counters.shadow_pairs_written, calls.length);
    assert.equal(manifest.counters.shadow_pairs_lost, 0);
    return { pairs: [...byLine.values()], seen };
  } finally {
    await stop(proxy);
    await stop(candidate);
    await stop(primary);
    cleanup(dir);
  }
}

test('shadow: a sim candidate with other timings answers the same; each pair joins its capture row', async () => {
  const { pairs } = await pairsWithCapture([], { '--ttft-ms': '6', '--itl-ms': '1.5' });
  for (const p of pairs) {
    assert.deepEqual(p.output, { equal: true, first_diff_char: null, first_diff_token: null, length_ratio: 1, truncated: false });
    assert.equal(p.candidate.completion_tokens, p.primary.completion_tokens);
    assert.equal(p.candidate.finish_reason, p.primary.finish_reason);
  }
});

test('shadow: a candidate whose output differs is found, with the first differing character', async () => {
  const { pairs, seen } = await pairsWithCapture([], { '--seed': '8' });
  assert.ok(pairs.some((p) => !p.output.equal), JSON.stringify(pairs.map((p) => p.output)));
  for (const [i, p] of pairs.entries()) {
    if (p.output.equal) continue;
    assert.ok(Number.isInteger(p.output.first_diff_char) && p.output.first_diff_char >= 0);
    assert.ok(p.output.first_diff_char <= [...seen[i].text].length);
    assert.ok(p.output.length_ratio > 0);
  }
});

test('shadow: a candidate whose output parts from token 10 on is found at token 10 (--shadow-tokenizer)', async () => {
  const dir = tempDir();
  const pairsPath = join(dir, 'pairs.ndjson');
  const primary = await startSim();
  const params = { model: 'm', messages, max_tokens: 24, stream: true };
  // The sim's answer, one token per event: the candidate says its first ten, then other words.
  const tokens = [];
  for await (const chunk of await openai(primary).chat.completions.create(params)) {
    const content = chunk.choices[0]?.delta?.content;
    if (content) tokens.push(content);
  }
  assert.ok(tokens.length > 12);
  const candidate = await startCandidate({ deltas: [...tokens.slice(0, 10), ' zebra', ' crossing'] });
  const proxy = await startProxy({
    upstream: url(primary),
    args: ['--shadow', url(candidate), '--shadow-pairs', pairsPath, '--shadow-tokenizer', 'sim'],
  });
  try {
    const seen = await call(openai(proxy), 'chat', params);
    assert.equal(seen.text, tokens.join(''));
    await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_pairs_written_total') === 1);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const [p] = readLines(pairsPath);
    assert.equal(p.output.equal, false);
    assert.equal(p.output.first_diff_token, 10);
    // By character, the outputs may share more (both eleventh tokens may start with a space).
    const a = [...tokens.join('')];
    const b = [...[...tokens.slice(0, 10), ' zebra', ' crossing'].join('')];
    assert.equal(p.output.first_diff_char, a.findIndex((c, i) => c !== b[i]));
  } finally {
    await stop(proxy);
    await candidate.close();
    await stop(primary);
    cleanup(dir);
  }
});

// A candidate that is an HTTP server of the test's own: it records every request and answers
// when the test says so (`hold`), or at once with a one-event chat stream.
function startCandidate({ hold = false, status = 200, deltas = ['cand'] } = {}) {
  const requests = [];
  const held = [];
  let onRequest = () => {};
  const answer = (res) => {
    if (status !== 200) {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"overloaded","type":"server_error"}}');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const [i, content] of deltas.entries()) {
      const finish = i === deltas.length - 1 ? 'stop' : null;
      res.write(`data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`);
    }
    res.end('data: [DONE]\n\n');
  };
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      requests.push({ headers: req.headers, body, url: req.url });
      onRequest();
      if (hold) held.push(res); else answer(res);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    port: server.address().port,
    requests,
    // Resolves once `n` requests have arrived.
    arrived: (n) => new Promise((r) => {
      const check = () => { if (requests.length >= n) r(); };
      onRequest = check;
      check();
    }),
    release: () => { for (const res of held.splice(0)) answer(res); hold = false; },
    close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); }),
  })));
}

test('shadow: header rules (replace, drop); capture off writes --shadow-pairs; no secret logged', async () => {
  const dir = tempDir();
  const pairsPath = join(dir, 'pairs.ndjson');
  const primary = await startSim();
  const candidate = await startCandidate();
  const proxy = await startProxy({
    upstream: url(primary),
    args: ['--shadow', url(candidate), '--shadow-header', 'Authorization: Bearer sk-candidate-secret',
      '--shadow-header', 'X-Shadow: 1', '--shadow-drop-header', 'x-org-secret', '--shadow-pairs', pairsPath],
  });
  try {
    const client = new OpenAI({
      baseURL: url(proxy, '/v1'), apiKey: 'sk-primary-secret', maxRetries: 0, timeout: 30000,
      defaultHeaders: { 'X-Org-Secret': 'org-secret', 'X-Keep': 'kept' },
    });
    const seen = await call(client, 'chat', calls[0][1]);
    assert.equal(seen.finish, 'length');
    await candidate.arrived(1);
    const got = candidate.requests[0];
    assert.equal(got.url, '/v1/chat/completions');
    assert.equal(got.headers.authorization, 'Bearer sk-candidate-secret');
    assert.equal(got.headers['x-shadow'], '1');
    assert.equal(got.headers['x-keep'], 'kept');
    assert.equal(got.headers['x-org-secret'], undefined);
    assert.equal(got.headers.host, `127.0.0.1:${candidate.port}`);
    assert.deepEqual(JSON.parse(got.body), calls[0][1]);
    await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_pairs_written_total') === 1);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const [pair] = readLines(pairsPath);
    assert.equal(pair.line, null);
    assert.equal(pair.timestamp, null);
    assert.equal(pair.candidate.status, 200);
    assert.equal(pair.candidate.finish_reason, 'stop');
    assert.equal(pair.output.equal, false);
    assert.equal(pair.output.first_diff_char, [...seen.text].findIndex((c, i) => c !== 'cand'[i]));
    for (const secret of ['sk-candidate-secret', 'sk-primary-secret', 'org-secret']) {
      assert.ok(!proxy.stdout.includes(secret) && !proxy.stderr.includes(secret), `${secret} logged`);
    }
  } finally {
    await stop(proxy);
    await candidate.close();
    await stop(primary);
    cleanup(dir);
  }
});

test('shadow: a candidate that is down costs dropped mirrors (reasons connect, then candidate_down), never a primary answer', async () => {
  const primary = await startSim();
  const proxy = await startProxy({
    upstream: url(primary), args: ['--shadow', `http://127.0.0.1:${await closedPort()}`],
  });
  try {
    for (const [kind, params] of calls) {
      const seen = await call(openai(proxy), kind, params);
      assert.ok(seen.finish !== null);
    }
    // The first refused connection on a loop backs that loop off: the mirrors after it are not
    // tried (reason candidate_down) until the back-off has passed.
    const dropped = (t) => metric(t, 'llmtap_shadow_dropped_total{reason="connect"}')
      + metric(t, 'llmtap_shadow_dropped_total{reason="candidate_down"}');
    // The primary's answer is counted (llmtap_proxy_requests_total) after its last byte went
    // out: the last one is waited for too.
    const m = await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_in_flight') === 0
      && dropped(t) === calls.length && metric(t, 'llmtap_proxy_requests_total{class="2xx"}') >= calls.length);
    assert.ok(metric(m, 'llmtap_shadow_dropped_total{reason="connect"}') >= 1);
    assert.equal(metric(m, 'llmtap_shadow_matched_total'), calls.length);
    assert.equal(metric(m, 'llmtap_shadow_sent_total'), 0);
    assert.equal(metric(m, 'llmtap_shadow_pairs_total'), 0);
    assert.equal(metric(m, 'llmtap_proxy_requests_total{class="2xx"}'), calls.length);
    await logged(proxy, /shadow: cannot reach the candidate/);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  } finally {
    await stop(proxy);
    await stop(primary);
  }
});

test('shadow: over --shadow-max-in-flight, mirrors are dropped and counted; sent + dropped = matched', async () => {
  const primary = await startSim();
  const candidate = await startCandidate({ hold: true });
  const proxy = await startProxy({
    upstream: url(primary), args: ['--shadow', url(candidate), '--shadow-max-in-flight', '2'],
  });
  try {
    // The candidate holds the first two mirrors; the primary answers every request meanwhile.
    const n = 5;
    for (let i = 0; i < n; ++i) {
      const seen = await call(openai(proxy), 'chat', { ...calls[0][1], max_tokens: 3 + i });
      assert.equal(seen.usage.completion_tokens, 3 + i);
    }
    await candidate.arrived(2);
    let m = await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_sent_total') === 2);
    assert.equal(metric(m, 'llmtap_shadow_matched_total'), n);
    assert.equal(metric(m, 'llmtap_shadow_dropped_total{reason="in_flight_limit"}'), n - 2);
    assert.equal(metric(m, 'llmtap_shadow_in_flight'), 2);
    assert.equal(metric(m, 'llmtap_shadow_completed_total'), 0);
    // Released, the two finish; the slots are free again for the next request. A mirror is
    // counted completed before it gives its slot back: both are waited for (a request sent
    // between the two would find no slot).
    candidate.release();
    m = await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_completed_total') >= 2
      && metric(t, 'llmtap_shadow_in_flight') === 0);
    assert.equal(metric(m, 'llmtap_shadow_completed_total'), 2);
    await call(openai(proxy), 'chat', calls[0][1]);
    m = await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_completed_total') === 3);
    assert.equal(metric(m, 'llmtap_shadow_matched_total'), n + 1);
    assert.equal(metric(m, 'llmtap_shadow_sent_total') + metric(m, 'llmtap_shadow_dropped_total{reason="in_flight_limit"}'),
      n + 1);
    assert.equal(candidate.requests.length, 3);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  } finally {
    await stop(proxy);
    await candidate.close();
    await stop(primary);
  }
});

test('shadow: a candidate answering 500, and one that stalls past --read-timeout-s: pairs say so, counters too', async () => {
  const dir = tempDir();
  const primary = await startSim();
  const failing = await startCandidate({ status: 500 });
  const stalled = await startCandidate({ hold: true });
  const a = await startProxy({
    upstream: url(primary), args: ['--shadow', url(failing), '--shadow-pairs', join(dir, 'a.ndjson')],
  });
  const b = await startProxy({
    upstream: url(primary),
    args: ['--shadow', url(stalled), '--shadow-pairs', join(dir, 'b.ndjson'), '--read-timeout-s', '2'],
  });
  try {
    for (const proxy of [a, b]) {
      const seen = await call(openai(proxy), 'chat', calls[0][1]);
      assert.equal(seen.finish, 'length');
    }
    await metricsWhen(a, (t) => metric(t, 'llmtap_shadow_pairs_written_total') === 1);
    const mb = await metricsWhen(b, (t) => metric(t, 'llmtap_shadow_pairs_written_total') === 1);
    assert.equal(metric(mb, 'llmtap_shadow_errors_total{kind="timeout"}'), 1);
    assert.equal(metric(mb, 'llmtap_shadow_completed_total'), 0);
    for (const p of [a, b]) assert.deepEqual(await stop(p), { code: 0, signal: null });
    const [pa] = readLines(join(dir, 'a.ndjson'));
    assert.equal(pa.primary.status, 200);
    assert.equal(pa.candidate.status, 500);
    assert.equal(pa.candidate.error, null);
    assert.equal(pa.output, null);
    const [pb] = readLines(join(dir, 'b.ndjson'));
    assert.equal(pb.candidate.status, 0);
    assert.equal(pb.candidate.error, 'timeout');
    assert.equal(pb.candidate.ttft_ms, null);
    assert.equal(pb.output, null);
  } finally {
    await stop(a);
    await stop(b);
    stalled.release();
    await failing.close();
    await stalled.close();
    await stop(primary);
    cleanup(dir);
  }
});

test('shadow: stopping with mirrors held by the candidate: they get the grace, then are cut; exit 0', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const primary = await startSim();
  const candidate = await startCandidate({ hold: true });
  const proxy = await startProxy({
    upstream: url(primary),
    args: ['--capture', '--capture-path', capturePath, '--shadow', url(candidate), '--grace', '0.5'],
  });
  try {
    for (let i = 0; i < 3; ++i) await call(openai(proxy), 'chat', calls[0][1]);
    await candidate.arrived(3);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    assert.match(proxy.stdout, /stopping/);
    // Every recorded row still has its outcome (held by its pair, reported when the mirror was
    // cut); the cut mirrors' pairs say so.
    const rows = readLines(capturePath);
    assert.equal(rows.length, 3);
    assert.equal(readLines(`${capturePath}.outcomes.ndjson`).length, 3);
    const pairs = readLines(`${capturePath}.shadow.ndjson`);
    assert.equal(pairs.length, 3);
    for (const p of pairs) {
      assert.equal(p.primary.status, 200);
      assert.equal(p.candidate.error, 'reset');
    }
  } finally {
    await stop(proxy);
    candidate.release();
    await candidate.close();
    await stop(primary);
    cleanup(dir);
  }
});

test('shadow twice (A/A): each chosen request goes to both candidates, one pair line each, joined by request', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const primary = await startSim();
  const copy = await startSim();  // the primary's copy: the A/A side
  const candidate = await startSim([], { '--ttft-ms': '6', '--itl-ms': '1.5' });
  const proxy = await startProxy({
    upstream: url(primary),
    args: ['--capture', '--capture-path', capturePath, '--shadow', url(copy), '--shadow', url(candidate)],
  });
  try {
    assert.match(proxy.stdout, /shadow to http:\/\/127\.0\.0\.1:\d+ and http:\/\/127\.0\.0\.1:\d+ \(pairs/);
    for (const [kind, params] of calls) await call(openai(proxy), kind, params);
    const m = await metricsWhen(proxy, (t) => ['0', '1'].every((k) =>
      metric(t, `llmtap_shadow_pairs_total{shadow="${k}"}`) === calls.length
      && metric(t, `llmtap_shadow_ttft_delta_seconds_count{shadow="${k}"}`) >= calls.length));
    assert.equal(metric(m, 'llmtap_shadow_matched_total'), calls.length);
    for (const k of ['0', '1']) {
      assert.equal(metric(m, `llmtap_shadow_sent_total{shadow="${k}"}`), calls.length);
      assert.equal(metric(m, `llmtap_shadow_ttft_delta_seconds_count{shadow="${k}"}`), calls.length);
    }
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const rows = readLines(capturePath);
    const pairs = readLines(`${capturePath}.shadow.ndjson`);
    assert.equal(pairs.length, 2 * calls.length);
    const byRequest = new Map();
    for (const p of pairs) {
      assert.deepEqual(Object.keys(p), kPairKeys);
      assert.equal(p.timestamp, rows[p.line - 1].timestamp);
      if (!byRequest.has(p.request)) byRequest.set(p.request, []);
      byRequest.get(p.request).push(p);
    }
    assert.equal(byRequest.size, calls.length);
    for (const [request, two] of byRequest) {
      assert.deepEqual(two.map((p) => p.shadow).sort(), [0, 1], `request ${request}`);
      assert.equal(two[0].line, two[1].line, 'both pairs of a request join one capture row');
      assert.deepEqual(two[0].primary.completion_tokens, two[1].primary.completion_tokens);
      for (const p of two) assert.equal(p.output.equal, true);  // the sims are deterministic
    }
  } finally {
    await stop(proxy);
    for (const s of [primary, copy, candidate]) await stop(s);
    cleanup(dir);
  }
});

test('shadow twice, one candidate down: the other is paired; the down one only counted', async () => {
  const dir = tempDir();
  const pairsPath = join(dir, 'pairs.ndjson');
  const primary = await startSim();
  const candidate = await startSim();
  const proxy = await startProxy({
    upstream: url(primary),
    args: ['--shadow', url(candidate), '--shadow', `http://127.0.0.1:${await closedPort()}`,
      '--shadow-pairs', pairsPath],
  });
  try {
    for (const [kind, params] of calls) await call(openai(proxy), kind, params);
    const dropped = (t) => metric(t, 'llmtap_shadow_dropped_total{shadow="1",reason="connect"}')
      + metric(t, 'llmtap_shadow_dropped_total{shadow="1",reason="candidate_down"}');
    const m = await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_pairs_written_total') === calls.length
      && dropped(t) === calls.length);
    assert.equal(metric(m, 'llmtap_shadow_sent_total{shadow="0"}'), calls.length);
    assert.equal(metric(m, 'llmtap_shadow_sent_total{shadow="1"}'), 0);
    assert.equal(metric(m, 'llmtap_shadow_dropped_total{shadow="0",reason="connect"}'), 0);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const pairs = readLines(pairsPath);
    assert.deepEqual(pairs.map((p) => p.shadow), calls.map(() => 0));
    assert.equal(new Set(pairs.map((p) => p.request)).size, calls.length);
  } finally {
    await stop(proxy);
    await stop(candidate);
    await stop(primary);
    cleanup(dir);
  }
});

test('shadow: a Responses chain keeps its own ids on the candidate (previous_response_id remapped, waiting for a slower candidate)', async () => {
  const dir = tempDir();
  const pairsPath = join(dir, 'pairs.ndjson');
  const primary = await startSim();
  // A candidate slower than the primary: the client's next turn comes before the candidate has
  // answered the turn before; its mirror waits for the candidate's id.
  const candidate = await startSim([], { '--ttft-ms': '150' });
  const failing = await startCandidate({ status: 500 });
  const proxy = await startProxy({
    upstream: url(primary), args: ['--shadow', url(candidate), '--shadow-pairs', pairsPath],
  });
  const broken = await startProxy({
    upstream: url(primary), args: ['--shadow', url(failing), '--shadow-pairs', join(dir, 'broken.ndjson')],
  });
  try {
    // The turns on one kept-alive connection, as a chat client sends them: the proxy reads a
    // connection's next request only once it has ended the one before, and it learns the
    // primary's response id as that request ends, which may come after the client read the
    // answer. A next turn on another connection could so come first and find the id unknown
    // (chain_unknown: a loaded machine did that); what is tested is the wait for the slower
    // candidate, which still comes: it answers 150 ms after the primary.
    const chat = new OpenAI({ baseURL: url(proxy, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 30000,
      fetch: fetchOneConnection() });
    const model = 'm';
    const turns = ['Plan a trip to Oslo.', 'And in winter?', 'What should I pack?'];
    let previous = null;
    const ids = [];
    for (const [i, input] of turns.entries()) {
      const stream = i === 1;
      const params = { model, input, max_output_tokens: 8, ...(previous ? { previous_response_id: previous } : {}) };
      let id;
      if (stream) {
        for await (const ev of await chat.responses.create({ ...params, stream: true })) {
          if (ev.type === 'response.completed') id = ev.response.id;
        }
      } else {
        id = (await chat.responses.create(params)).id;
      }
      ids.push(id);
      previous = id;
    }
    // A chain whose first response the candidate never saw (sent to the primary directly).
    const outside = await openai(primary).responses.create({ model, input: 'Hi.', max_output_tokens: 4 });
    await chat.responses.create({ model, input: 'Again.', previous_response_id: outside.id, max_output_tokens: 4 });
    const m = await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_pairs_written_total') === turns.length);
    assert.equal(metric(m, 'llmtap_shadow_matched_total'), turns.length + 1);
    assert.equal(metric(m, 'llmtap_shadow_dropped_total{reason="chain_unknown"}'), 1);
    assert.equal(metric(m, 'llmtap_shadow_sent_total'), turns.length);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const pairs = readLines(pairsPath);
    assert.deepEqual(pairs.map((p) => p.path), turns.map(() => '/v1/responses'));
    for (const p of pairs) {
      // A candidate sent an id it never issued answers 404: each turn found its own chain.
      assert.equal(p.candidate.status, 200, JSON.stringify(p));
      assert.equal(p.output.equal, true, 'same prompt history, same deterministic sim');
    }

    // A candidate that failed the first turn: the turns after it are not mirrored (chain_failed).
    let prev = (await openai(broken).responses.create({ model, input: turns[0], max_output_tokens: 4 })).id;
    await metricsWhen(broken, (t) => metric(t, 'llmtap_shadow_pairs_written_total') === 1);
    prev = (await openai(broken).responses.create({ model, input: turns[1], previous_response_id: prev, max_output_tokens: 4 })).id;
    const mb = await metricsWhen(broken, (t) => metric(t, 'llmtap_shadow_dropped_total{reason="chain_failed"}') === 1);
    assert.equal(metric(mb, 'llmtap_shadow_sent_total'), 1);
    assert.equal(failing.requests.length, 1);
  } finally {
    await stop(proxy);
    await stop(broken);
    await failing.close();
    await stop(candidate);
    await stop(primary);
    cleanup(dir);
  }
});

test('shadow: a FastAPI candidate that stalls mid-stream never holds the primary; released, its pair completes; never released, it times out', async () => {
  const dir = tempDir();
  const primary = await startSim();
  // FastAPI + uvicorn (vLLM's HTTP stack), model "lockstep-stream": its first event at once,
  // each next one only after GET /release.
  const fastapi = await startUpstream();
  const released = join(dir, 'released.ndjson');
  const timedOut = join(dir, 'timed_out.ndjson');
  const a = await startProxy({ upstream: url(primary), args: ['--shadow', url(fastapi), '--shadow-pairs', released] });
  const b = await startProxy({
    upstream: url(primary), args: ['--shadow', url(fastapi), '--shadow-pairs', timedOut, '--read-timeout-s', '2'],
  });
  const params = { model: 'lockstep-stream', messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } };
  try {
    // The client's whole answer comes while the candidate is stuck after its first event.
    const seen = await call(openai(a), 'chat', params);
    assert.equal(seen.usage.completion_tokens, 6);
    // Read at once, and still exact: the mirror took its slot before the primary request went
    // upstream, and it gives it back only when the candidate's stream ends, which only the
    // release below (or a's 300 s read deadline) can bring.
    let m = await metrics(a);
    assert.equal(metric(m, 'llmtap_shadow_in_flight'), 1, 'the mirror is still waiting on the candidate');
    assert.equal(metric(m, 'llmtap_shadow_pairs_total'), 0);
    // The app counts a stream's releases from the count it saw when the stream began, and the
    // mirror runs off the request path: it may reach the app only after a release sent now (a
    // loaded machine did that, and the stream then waited for a release that never came). So
    // the releases go on until the pair is written: once the stream has begun, the next one
    // lets it run to its end (200 events).
    // (Each release is awaited: none may reach the app after b's stream below has begun.)
    for (const end = Date.now() + 60000; ;) {
      await (await fetch(url(fastapi, '/release?n=200'))).text();
      m = await metrics(a);
      if (metric(m, 'llmtap_shadow_pairs_written_total') === 1) break;
      if (Date.now() > end) assert.fail(`the released mirror did not end within 60 s:\n${m}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(metric(m, 'llmtap_shadow_completed_total'), 1);
    const [p] = readLines(released);
    assert.equal(p.candidate.status, 200);
    assert.equal(p.candidate.error, null);
    assert.equal(p.candidate.finish_reason, 'length');
    assert.ok(p.candidate.latency_ms > p.candidate.ttft_ms, 'its first event, then the rest once released');
    assert.equal(p.output.equal, false);  // FastAPI's words are not the sim's

    // Never released: the mirror's wait is bounded by --read-timeout-s; the pair says so.
    const again = await call(openai(b), 'chat', params);
    assert.equal(again.text, seen.text);
    m = await metricsWhen(b, (t) => metric(t, 'llmtap_shadow_pairs_written_total') === 1);
    assert.equal(metric(m, 'llmtap_shadow_errors_total{kind="timeout"}'), 1);
    const [q] = readLines(timedOut);
    assert.equal(q.candidate.error, 'timeout');
    assert.equal(q.candidate.status, 200);
    assert.notEqual(q.candidate.ttft_ms, null, 'it stalled mid-stream, after its first event');
    assert.equal(q.output, null);
    for (const p of [a, b]) assert.deepEqual(await stop(p), { code: 0, signal: null });
  } finally {
    await fetch(url(fastapi, '/release?n=1000')).catch(() => {});
    await stop(a);
    await stop(b);
    await stop(fastapi);
    await stop(primary);
    cleanup(dir);
  }
});

test('shadow: usage errors name the flag', async () => {
  const { run, LLMTAP } = await import('./proxy_helpers.mjs');
  let r = await run(LLMTAP, ['proxy', '--shadow-header', 'X: 1']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--shadow-header needs --shadow URL/);
  r = await run(LLMTAP, ['proxy', '--listen', '127.0.0.1:0', '--shadow', 'http://127.0.0.1:1', '--shadow-header', 'bad header']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /--shadow-header must be 'Name: value'/);
  r = await run(LLMTAP, ['proxy', '--shadow', 'http://127.0.0.1:1', '--shadow-insecure']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--shadow-insecure applies to an https:\/\/ --shadow/);
  r = await run(LLMTAP, ['proxy', '--listen', '127.0.0.1:0', '--shadow', 'http://127.0.0.1:1',
    '--shadow', 'http://127.0.0.1:2', '--shadow', 'http://127.0.0.1:3']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /--shadow is given 3 times; at most 2 candidates/);
});
