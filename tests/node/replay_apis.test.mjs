// `llmtap replay` of every API an inference server speaks (issue #34), as real processes on free
// loopback ports. Captures are made by the real clients (the `openai` and `@anthropic-ai/sdk`
// npm packages, fetch for rerank, which neither has) through `llmtap proxy --capture --outcomes`
// (endpoint pattern widened to the six paths) in front of `llmtap sim`, then replayed against a
// fresh sim behind a recording relay (this file's `recorder`: every request's path, headers and
// body, and the ids the answers named), so each check is on what reached the server:
//   - a capture mixing chat, completions, Responses, Messages, embeddings and rerank, streamed
//     and not: each request goes to its own path, -H headers on every one, 0 errors;
//   - a 20-turn Responses conversation chained by previous_response_id (store: true): replayed
//     against a sim that never saw it, no 404 for an unknown id; every previous_response_id sent
//     is one the new sim issued, for the request before it in the chain; when a turn fails (the
//     relay answers 500), the turns after it go with their captured ids and are counted so;
//   - the TTFT and ITL replay reports for Responses and Messages streams agree, to a token step
//     (median of the per-request differences), with the recording relay's own timing of the
//     same requests: an independent client of the sim (the measured agreement, about 0.3 ms,
//     is in BENCHMARKS.md).
// No check bounds a delay by the wall clock: waits end on events (a process printing its port,
// the proxy's recorded count).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import {
  startSim, startProxy, stop, url, replay, readLines, tempDir, cleanup,
} from './proxy_helpers.mjs';
import { waitRecorded } from './conversations.mjs';

const PATTERN = '^/v1/(chat/completions|completions|responses|messages|embeddings|rerank)$';

// A relay in front of `upstream` that records each request (path, headers, body) and its
// answer; the request numbered `failAt` (from 0) it answers 500 itself.
async function recorder(upstream, { failAt = -1 } = {}) {
  const seen = [];
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const entry = { path: req.url, headers: req.headers, body: body.toString('utf8'), answer: '' };
      seen.push(entry);
      if (seen.length - 1 === failAt) {  // this one fails, as a server's 500 does
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"injected","type":"server_error"}}');
        return;
      }
      const out = http.request(url(upstream, req.url), { method: req.method, headers: req.headers, agent }, (up) => {
        res.writeHead(up.statusCode, up.headers);
        up.on('data', (d) => {
          entry.answer += d.toString('utf8');
          res.write(d);
        });
        up.on('end', () => res.end());
      });
      out.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const close = () => new Promise((r) => {
    agent.destroy();
    server.close(r);
  });
  return { seen, port: server.address().port, close };
}

// A TCP relay in front of `upstream` that times each exchange of one kept-alive connection
// byte by byte, with no HTTP parsing in its path: sent (the request's last bytes arrived),
// first (the first bytes of the answer carrying generated text, of a Responses or Messages
// stream, written on), end (the chunked body's last bytes written on). An independent client's
// view of the very requests replay sends through it, within a loopback hop on either side.
async function tap(upstream) {
  const exchanges = [];
  const server = net.createServer((down) => {
    down.setNoDelay(true);
    const up = net.connect(upstream.port, '127.0.0.1');
    up.setNoDelay(true);
    let current;
    // Timed where the bytes pass the tap: a request as it arrives, an answer once written on.
    down.on('data', (d) => {
      const now = performance.now();
      up.write(d);
      if (d.subarray(0, 5).toString('latin1') === 'POST ') {
        current = { sent: now, answer: '' };
        exchanges.push(current);
      } else {
        current.sent = now;  // the rest of the request
      }
    });
    up.on('data', (d) => {
      down.write(d);
      const now = performance.now();
      const piece = d.toString('utf8');
      if (current.first === undefined && /response\.output_text\.delta|"content_block_delta"/.test(piece)) {
        current.first = now;
      }
      current.answer += piece;
      if (current.answer.endsWith('\r\n0\r\n\r\n')) current.end = now;
    });
    down.on('close', () => up.destroy());
    up.on('close', () => down.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { exchanges, port: server.address().port, close: () => new Promise((r) => server.close(r)) };
}

function readOut(dir) {
  const summary = JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8'));
  const requests = readFileSync(join(dir, 'requests.jsonl'), 'utf8').split('\n').filter((l) => l)
    .map((l) => JSON.parse(l));
  return { summary, requests };
}

// Captures what `drive(proxyUrl)` sends through a capturing proxy in front of `sim`; returns the
// capture's path once all `n` requests are recorded.
async function capture(sim, dir, n, drive) {
  const capturePath = join(dir, 'requests.jsonl');
  const proxy = await startProxy({
    upstream: url(sim),
    args: ['--capture', '--capture-path', capturePath, '--outcomes', '--endpoint-pattern', PATTERN],
  });
  try {
    await drive(proxy);
    await waitRecorded(proxy, n);
  } finally {
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  }
  return capturePath;
}

const openaiAt = (server) => new OpenAI({ baseURL: url(server, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 30000 });
const anthropicAt = (server) => new Anthropic({ baseURL: url(server), apiKey: 'sk-ant-test', maxRetries: 0, timeout: 30000 });

async function drain(stream) {
  let last;
  for await (const e of stream) last = e;
  return last;
}

test('replay: a capture of all six APIs, each request to its own path with the -H headers, 0 errors', async () => {
  const dir = tempDir();
  const sim = await startSim();
  let target;
  let rec;
  try {
    const expected = [];
    const capturePath = await capture(sim, dir, 12, async (proxy) => {
      const oa = openaiAt(proxy);
      const an = anthropicAt(proxy);
      for (const stream of [false, true]) {
        await (stream ? drain(await oa.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'chat' }], max_tokens: 5, stream }))
          : oa.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'chat' }], max_tokens: 5 }));
        expected.push('/v1/chat/completions');
        await (stream ? drain(await oa.completions.create({ model: 'm', prompt: 'complete', max_tokens: 5, stream }))
          : oa.completions.create({ model: 'm', prompt: 'complete', max_tokens: 5 }));
        expected.push('/v1/completions');
        await (stream ? drain(await oa.responses.create({ model: 'm', input: 'respond', max_output_tokens: 5, stream }))
          : oa.responses.create({ model: 'm', input: 'respond', max_output_tokens: 5 }));
        expected.push('/v1/responses');
        await (stream ? drain(await an.messages.create({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'message' }], stream }))
          : an.messages.create({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'message' }] }));
        expected.push('/v1/messages');
        await oa.embeddings.create({ model: 'm', input: `embed ${stream}` });
        expected.push('/v1/embeddings');
        const r = await fetch(url(proxy, '/v1/rerank'), {
          method: 'POST', headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'm', query: 'rivers', documents: ['the Rhine river', 'a cat'] }),
        });
        assert.equal(r.status, 200, await r.text());
        expected.push('/v1/rerank');
      }
    });
    const rows = readLines(capturePath);
    assert.equal(rows.length, 12);

    target = await startSim();
    rec = await recorder(target);
    const out = join(dir, 'out');
    const r = await replay([capturePath, '--url', `http://127.0.0.1:${rec.port}`, '--out', out,
      '--server-metrics', 'off', '-H', 'x-api-key: sk-ant-replay', '-H', 'anthropic-version: 2023-06-01']);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /2 chat, 2 completions, 2 responses, 2 messages, 2 embeddings, 2 rankings/);
    // Each captured row reached the path of its API, its body as captured. (Rows a few ms apart
    // may arrive in another order: they go out on their own schedule from several threads.)
    assert.equal(rec.seen.length, rows.length);
    const unmatched = rows.map((row, i) => ({ payload: row.payload, path: expected[i] }));
    for (const s of rec.seen) {
      const body = JSON.parse(s.body);
      const k = unmatched.findIndex((u) => u.path === s.path && isDeepStrictEqual(u.payload, body));
      assert.ok(k >= 0, `${s.path}: ${s.body} is no captured row of that API`);
      unmatched.splice(k, 1);
    }
    for (const s of rec.seen) {
      assert.equal(s.headers['x-api-key'], 'sk-ant-replay', s.path);
      assert.equal(s.headers['anthropic-version'], '2023-06-01', s.path);
    }
    const { summary, requests } = readOut(out);
    assert.equal(summary.requests.errors, 0, JSON.stringify(summary.requests));
    assert.equal(summary.requests.completed, 12);
    assert.equal(requests.length, 12);
    assert.ok(requests.every((q) => q.status === 200), JSON.stringify(requests));
    assert.deepEqual(summary.input.apis, { chat: 2, completions: 2, responses: 2, messages: 2, embeddings: 2, rankings: 2 });
    // The streamed generations were timed by their own API's events. Responses and Messages
    // streams report usage in their last events; the SDK's chat and completions streams were
    // captured without stream_options, so replay counts their tokens (as sent: no --stream).
    for (const q of requests.filter((x) => x.stream)) {
      assert.ok(q.ttft_ms > 0 && q.chunks > 0 && q.output_tokens > 0, JSON.stringify(q));
      const usage = q.endpoint === 'responses' || q.endpoint === 'messages';
      assert.equal(q.tokens_from, usage ? 'usage' : 'counted', JSON.stringify(q));
    }
    assert.deepEqual(requests.filter((x) => x.stream).map((x) => x.endpoint).sort(),
      ['chat', 'completions', 'messages', 'responses']);
  } finally {
    if (rec) await rec.close();
    if (target) await stop(target);
    await stop(sim);
    cleanup(dir);
  }
});

test('replay: a 20-turn previous_response_id chain is sent causally with the new server\'s ids', async () => {
  const dir = tempDir();
  const sim = await startSim();
  let target;
  let rec;
  const TURNS = 20;
  try {
    const captured = [];
    const capturePath = await capture(sim, dir, TURNS, async (proxy) => {
      const oa = openaiAt(proxy);
      let previous;
      for (let t = 0; t < TURNS; ++t) {
        const params = { model: 'm', input: `turn ${t}: and then?`, store: true, max_output_tokens: 8 };
        if (previous) params.previous_response_id = previous;
        let id;
        if (t % 2 === 1) {
          const last = await drain(await oa.responses.create({ ...params, stream: true }));
          assert.equal(last.type, 'response.completed');
          id = last.response.id;
        } else {
          id = (await oa.responses.create(params)).id;
        }
        captured.push(id);
        previous = id;
      }
    });
    const outcomes = readLines(`${capturePath}.outcomes.ndjson`).sort((a, b) => a.line - b.line);
    assert.deepEqual(outcomes.map((o) => o.response_id), captured);

    // Another seed: the new sim's response ids are not the captured ones.
    target = await startSim([], { '--seed': '8' });
    rec = await recorder(target);
    const out = join(dir, 'out');
    const r = await replay([capturePath, '--url', `http://127.0.0.1:${rec.port}`, '--out', out,
      '--server-metrics', 'off']);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    const { summary, requests } = readOut(out);
    assert.equal(summary.requests.errors, 0);
    assert.ok(requests.every((q) => q.status === 200), JSON.stringify(requests.filter((q) => q.status !== 200)));
    assert.deepEqual(summary.response_chains, {
      mode: 'remap', rows: TURNS - 1, remapped: TURNS - 1, inlined: 0,
      inlined_output: { captured: 0, replayed: 0 },
      sent_with_captured_id: {
        no_outcomes: 0, predecessor_not_in_trace: 0, predecessor_failed: 0, predecessor_unanswered: 0,
      },
      previous_response_id_refused: 0,
    });
    assert.match(r.stdout, /responses chains: 19 rows with previous_response_id, 19 sent with the id/);
    // What reached the new sim: turn k names the id the new sim gave turn k-1, never a captured one.
    assert.equal(rec.seen.length, TURNS);
    const issued = rec.seen.map((s) => s.answer.match(/"id":"(resp_[^"]+)"/)[1]);
    for (let t = 0; t < TURNS; ++t) {
      const body = JSON.parse(rec.seen[t].body);
      if (t === 0) {
        assert.equal(body.previous_response_id, undefined);
        continue;
      }
      assert.equal(body.previous_response_id, issued[t - 1], `turn ${t}`);
      assert.ok(!captured.includes(body.previous_response_id), `turn ${t} sent a captured id`);
    }
    assert.equal(summary.sessions.turns, TURNS);

    // Turn 5 fails (a 500): turn 6 goes with its captured id (the fresh sim answers 404), and so
    // on down the chain, each counted as sent after a failed predecessor; turns 1-5 were remapped.
    await rec.close();
    await stop(target);
    target = await startSim([], { '--seed': '8' });
    rec = await recorder(target, { failAt: 5 });
    const failing = await replay([capturePath, '--url', `http://127.0.0.1:${rec.port}`, '--out',
      join(dir, 'failing'), '--server-metrics', 'off']);
    assert.equal(failing.code, 1, failing.stdout);
    const f = readOut(join(dir, 'failing'));
    assert.deepEqual(f.summary.response_chains, {
      mode: 'remap', rows: TURNS - 1, remapped: 5, inlined: 0,
      inlined_output: { captured: 0, replayed: 0 },
      sent_with_captured_id: {
        no_outcomes: 0, predecessor_not_in_trace: 0, predecessor_failed: TURNS - 6, predecessor_unanswered: 0,
      },
      previous_response_id_refused: 0,
    });
    assert.equal(JSON.parse(rec.seen[6].body).previous_response_id, captured[5]);
    assert.deepEqual(f.requests.map((q) => q.status).sort(), [
      ...Array(5).fill(200), 500, ...Array(TURNS - 6).fill(404)].sort());

    // Without the sidecar, the rows go as captured: a fresh sim answers 404 for each, counted.
    await stop(target);
    target = await startSim([], { '--seed': '8' });
    const blind = await replay([capturePath, '--url', url(target), '--no-outcomes', '--out', join(dir, 'blind')]);
    assert.equal(blind.code, 1, blind.stdout);
    const b = readOut(join(dir, 'blind'));
    assert.equal(b.summary.response_chains.sent_with_captured_id.no_outcomes, TURNS - 1);
    assert.equal(b.requests.filter((q) => q.status === 404).length, TURNS - 1);
  } finally {
    if (rec) await rec.close();
    if (target) await stop(target);
    await stop(sim);
    cleanup(dir);
  }
});

function median(values) {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

// Replay's TTFT and ITL against the tap's timing of the same requests (TTFT = sent to the first
// bytes with generated text; ITL = (end - first) / (output tokens - 1), the definitions of
// replay's summary.json). The tap sits between the two, so replay's TTFT holds its two hops on
// top of the tap's own: per request, the difference is what the agreement is about, its median
// the figure (a loaded machine's scheduling delays hit single requests, not the median).
// The bound here is 3 ms, half the sim's 6 ms token step: a miscounted event or a TTFT taken at
// the wrong event is off by whole steps (30 ms TTFT, 6 ms a token), while a loaded machine (and
// the ASan build: a 0.65 ms median in one clean-clone run) only blurs the timing. The 0.5 ms
// agreement is a measurement, in BENCHMARKS.md (release build: +0.12 to +0.38 ms).
test('replay: Responses and Messages stream TTFT and ITL agree with an independent client (to a token step)', async () => {
  const dir = tempDir();
  // Fixed timings (no jitter, 16 tokens each).
  const sim = await startSim([], { '--ttft-ms': '30', '--itl-ms': '6', '--output-tokens-mean': '16', '--output-tokens-stddev': '0' });
  const rec = await tap(sim);
  const N = 20;
  try {
    const rows = [];
    for (let i = 0; i < N; ++i) {
      rows.push({ timestamp: 0, payload: { model: 'm', input: 'time me', stream: true, max_output_tokens: 16 }, endpoint_type: 'responses' });
      rows.push({ timestamp: 0, payload: { model: 'm', max_tokens: 16, messages: [{ role: 'user', content: 'time me' }], stream: true }, endpoint_type: 'messages' });
    }
    const trace = join(dir, 'trace.jsonl');
    writeFileSync(trace, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const out = join(dir, 'out');
    // One request at a time: the relay's connection to the sim carries one exchange at a time.
    const r = await replay([trace, '--url', `http://127.0.0.1:${rec.port}`, '--concurrency', '1',
      '--server-metrics', 'off', '--out', out]);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    const { requests } = readOut(out);
    assert.equal(rec.exchanges.length, 2 * N);
    for (const kind of ['responses', 'messages']) {
      const dTtft = [];
      const dItl = [];
      for (const q of requests.filter((x) => x.endpoint === kind)) {
        assert.ok(q.output_tokens === 16 && q.chunks === 16 && q.tokens_from === 'usage', JSON.stringify(q));
        const s = rec.exchanges[q.index];  // a closed loop of one sends in file order
        assert.ok(s.answer.includes(kind === 'responses' ? 'response.completed' : 'message_stop'));
        const ttft = s.first - s.sent;
        const itl = (s.end - s.first) / (q.output_tokens - 1);
        dTtft.push(q.ttft_ms - ttft);
        dItl.push(q.itl_ms - itl);
      }
      assert.equal(dTtft.length, N);
      const t = median(dTtft);
      const i = median(dItl);
      console.log(`${kind}: replay - independent client, median over ${N}: TTFT ${t.toFixed(3)} ms, ITL ${i.toFixed(3)} ms`);
      assert.ok(Math.abs(t) < 3, `${kind} TTFT differs by ${t} ms (${dTtft.map((x) => x.toFixed(3))})`);
      assert.ok(Math.abs(i) < 3, `${kind} ITL differs by ${i} ms (${dItl.map((x) => x.toFixed(3))})`);
    }
  } finally {
    await rec.close();
    await stop(sim);
    cleanup(dir);
  }
});
