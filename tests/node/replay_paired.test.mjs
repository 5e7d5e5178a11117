// `llmtap replay TRACE --url A --paired-url B`: every row goes to both servers at the same
// instant and one pair line per row compares the two answers (the format of `llmtap proxy
// --shadow`'s pairs). Against two `llmtap sim`s with identical settings (same seed, same timing),
// the pairs are one per row, joined to the trace by line and timestamp, with equal outputs and a
// TTFT ratio (candidate / primary, the pairs' median) within 2 % of 1; against a sim with twice the time to a
// first token the ratio is clearly above 1; against a port nobody listens on every row still gets
// its line (the candidate's "connect" error) and the primary's run is unaffected; a Responses
// chain (previous_response_id) is continued on each server with that server's own ids.
//
// Servers on free loopback ports, stopped by PID. No wall-clock bound: the sims' time to a first
// token (50 ms) is large next to what a loaded machine adds to either side, and both sides are
// measured from the same instant. The ratios checked are medians of the pairs' own ratios: a
// loaded machine stalls single requests, on one side or the other, and a few stalls of a few
// hundred ms would move a mean over 200 pairs by the 2 % allowed (the mean, the figure replay
// prints, is shown).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  startSim, stop, url, replay, readLines, tempDir, cleanup, closedPort,
} from './proxy_helpers.mjs';

// The sims' timing: a first token after 50 ms (no prefill cost per token, so the prefix cache
// does not matter), then 8 tokens 2 ms apart, without jitter.
const TIMING = {
  '--ttft-ms': '50', '--prefill-us-per-token': '0', '--itl-ms': '2', '--itl-jitter-ms': '0',
};

// Streamed greedy chat rows, `gapMs` apart, each with its own prompt.
function chatTrace(dir, n, gapMs) {
  const rows = [];
  for (let i = 0; i < n; ++i) {
    rows.push({
      timestamp: 1000 + gapMs * i,
      payload: {
        model: 'm', temperature: 0, max_tokens: 8, stream: true, stream_options: { include_usage: true },
        messages: [{ role: 'user', content: `question ${i}: what comes after ${i * 7}?` }],
      },
    });
  }
  const trace = join(dir, 'trace.jsonl');
  writeFileSync(trace, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return { trace, rows };
}

// replay --url A --paired-url B --out DIR: its exit, stdout, pairs, requests and summary.
async function pairedReplay(dir, trace, primary, pairedUrl, extra = []) {
  const out = join(dir, 'out');
  const r = await replay([trace, '--url', url(primary), '--paired-url', pairedUrl, '--out', out,
    '--server-metrics', 'off', ...extra]);
  const pairs = readLines(join(out, 'pairs.ndjson'));
  const requests = readLines(join(out, 'requests.jsonl'));
  const summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
  return { ...r, pairs, requests, summary };
}

// One pair line per row: line (1-based), timestamp and request (the row's index) are the row's.
function checkOnePerRow(pairs, rows) {
  assert.equal(pairs.length, rows.length);
  const byLine = new Map(pairs.map((p) => [p.line, p]));
  assert.equal(byLine.size, rows.length, 'one pair per line');
  rows.forEach((row, i) => {
    const p = byLine.get(i + 1);
    assert.ok(p, `a pair for line ${i + 1}`);
    assert.equal(p.timestamp, row.timestamp);
    assert.equal(p.request, i);
    assert.equal(p.shadow, 0);
    assert.equal(p.path, row.endpoint_type === 'responses' ? '/v1/responses' : '/v1/chat/completions');
  });
}

const meanTtft = (pairs, side) => pairs.reduce((s, p) => s + p[side].ttft_ms, 0) / pairs.length;

// The median over the pairs of candidate TTFT / primary TTFT.
function medianRatio(pairs) {
  const r = pairs.map((p) => p.candidate.ttft_ms / p.primary.ttft_ms).sort((a, b) => a - b);
  const m = r.length >> 1;
  return r.length % 2 ? r[m] : (r[m - 1] + r[m]) / 2;
}

test('replay --paired-url: two identical sims give equal outputs and a TTFT ratio of 1', async () => {
  const dir = tempDir();
  const a = await startSim([], TIMING);
  const b = await startSim([], TIMING);
  try {
    const { trace, rows } = chatTrace(dir, 200, 15);
    const r = await pairedReplay(dir, trace, a, url(b));
    assert.equal(r.code, 0, r.stdout + r.stderr);
    checkOnePerRow(r.pairs, rows);
    for (const p of r.pairs) {
      assert.equal(p.primary.status, 200, JSON.stringify(p));
      assert.equal(p.candidate.status, 200, JSON.stringify(p));
      assert.equal(p.candidate.error, null);
      assert.equal(p.model, 'm');
      assert.equal(p.temperature, 0);
      assert.deepEqual(p.output, {
        equal: true, first_diff_char: null, first_diff_token: null, length_ratio: 1, truncated: false,
      }, JSON.stringify(p));
      assert.equal(p.primary.completion_tokens, 8);
      assert.equal(p.candidate.completion_tokens, 8);
      assert.equal(p.primary.finish_reason, 'length');
      assert.equal(p.candidate.finish_reason, 'length');
      assert.ok(p.primary.ttft_ms >= 50 && p.candidate.ttft_ms >= 50, JSON.stringify(p));
      assert.ok(p.primary.latency_ms >= p.primary.ttft_ms);
      assert.ok(Number.isInteger(p.at_ms));
    }
    const ratio = medianRatio(r.pairs);
    const mean = meanTtft(r.pairs, 'candidate') / meanTtft(r.pairs, 'primary');
    assert.ok(Math.abs(ratio - 1) <= 0.02, `TTFT ratio: median ${ratio}, of the means ${mean}`);
    assert.match(r.stdout, /paired: 200 pairs with .*; candidate failed: 0; outputs: 200 equal, 0 differ, 0 not compared; TTFT \(mean over 200 pairs\) candidate \/ primary: /);
    // The primary's run is replay's as ever.
    assert.equal(r.requests.length, 200);
    assert.equal(r.summary.requests.errors, 0);
    assert.ok(r.requests.every((q) => q.status === 200 && !q.error));
    console.log(r.stdout.split('\n').find((l) => l.startsWith('paired:')));
  } finally {
    await stop(a);
    await stop(b);
    cleanup(dir);
  }
});

test('replay --paired-url: a candidate twice as slow to its first token shows a ratio clearly above 1', async () => {
  const dir = tempDir();
  const a = await startSim([], TIMING);
  const b = await startSim([], { ...TIMING, '--ttft-ms': '100' });
  try {
    const { trace, rows } = chatTrace(dir, 40, 15);
    const r = await pairedReplay(dir, trace, a, url(b));
    assert.equal(r.code, 0, r.stdout + r.stderr);
    checkOnePerRow(r.pairs, rows);
    assert.ok(r.pairs.every((p) => p.output.equal));
    const ratio = medianRatio(r.pairs);
    const mean = meanTtft(r.pairs, 'candidate') / meanTtft(r.pairs, 'primary');
    // 100 / 50 ms; what a loaded machine adds to both sides alike only brings it towards 1.
    assert.ok(ratio > 1.3, `TTFT ratio: median ${ratio}, of the means ${mean}`);
    assert.ok(r.pairs.every((p) => typeof p.delta.ttft_ms === 'number'));
  } finally {
    await stop(a);
    await stop(b);
    cleanup(dir);
  }
});

test('replay --paired-url: a candidate that is down gets its error on every row; the primary runs as ever', async () => {
  const dir = tempDir();
  const a = await startSim([], TIMING);
  try {
    const { trace, rows } = chatTrace(dir, 30, 10);
    const port = await closedPort();
    const r = await pairedReplay(dir, trace, a, `http://127.0.0.1:${port}`);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    checkOnePerRow(r.pairs, rows);
    for (const p of r.pairs) {
      assert.equal(p.primary.status, 200);
      assert.equal(p.primary.error, null);
      assert.equal(p.candidate.status, 0);
      assert.equal(p.candidate.error, 'connect');
      assert.equal(p.candidate.ttft_ms, null);
      assert.equal(p.output, null);
      assert.equal(p.delta.ttft_ms, null);
    }
    assert.match(r.stderr, /cannot connect to the --paired-url target/);
    assert.match(r.stdout, /paired: 30 pairs .*candidate failed: 30; outputs: 0 equal, 0 differ, 30 not compared/);
    assert.equal(r.requests.length, 30);
    assert.equal(r.summary.requests.errors, 0);
  } finally {
    await stop(a);
    cleanup(dir);
  }
});

test('replay --paired-url: a Responses chain continues on each server with its own ids', async () => {
  const dir = tempDir();
  const CHAINS = 3;
  const TURNS = 5;
  // Another seed for the candidate: its response ids are not the primary's.
  const a = await startSim([], TIMING);
  const b = await startSim([], { ...TIMING, '--seed': '8' });
  try {
    const rows = [];
    const outcomes = [];
    for (let t = 0; t < TURNS; ++t) {
      for (let c = 0; c < CHAINS; ++c) {
        const payload = {
          model: 'm', input: `chain ${c} turn ${t}: and then?`, store: true, max_output_tokens: 8,
          temperature: 0, stream: t % 2 === 1,
        };
        if (t > 0) payload.previous_response_id = `resp_captured_${c}_${t - 1}`;
        rows.push({ timestamp: 1000 + 100 * t + 5 * c, payload, endpoint_type: 'responses' });
        outcomes.push({
          line: rows.length, timestamp: 1000 + 100 * t + 5 * c, status: 200, latency_ms: 20,
          completion_tokens: 8, response_id: `resp_captured_${c}_${t}`,
        });
      }
    }
    const trace = join(dir, 'chains.jsonl');
    writeFileSync(trace, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    writeFileSync(`${trace}.outcomes.ndjson`, outcomes.map((o) => JSON.stringify(o)).join('\n') + '\n');

    const r = await pairedReplay(dir, trace, a, url(b));
    assert.equal(r.code, 0, r.stdout + r.stderr);
    checkOnePerRow(r.pairs, rows);
    // A previous_response_id the server never issued is a 404: every turn of both chains found
    // its predecessor, on its own server.
    for (const p of r.pairs) {
      assert.equal(p.primary.status, 200, JSON.stringify(p));
      assert.equal(p.candidate.status, 200, JSON.stringify(p));
      assert.equal(p.candidate.error, null);
      assert.notEqual(p.output, null);
    }
    assert.equal(r.summary.response_chains.remapped, CHAINS * (TURNS - 1));
    // Each turn went out after its predecessor ended on both servers.
    const byLine = new Map(r.pairs.map((p) => [p.line, p]));
    for (let i = CHAINS; i < rows.length; ++i) {
      const p = byLine.get(i + 1);
      const prev = byLine.get(i + 1 - CHAINS);
      assert.ok(p.at_ms >= prev.at_ms + Math.floor(Math.max(prev.primary.latency_ms, prev.candidate.latency_ms)) - 1,
        `line ${i + 1} sent before its predecessor ended on both sides`);
    }
  } finally {
    await stop(a);
    await stop(b);
    cleanup(dir);
  }
});

test('replay --paired-url: usage errors', async () => {
  const dir = tempDir();
  try {
    const { trace } = chatTrace(dir, 2, 10);
    const noPairs = await replay([trace, '--url', 'http://127.0.0.1:9', '--paired-url', 'http://127.0.0.1:9']);
    assert.equal(noPairs.code, 2);
    assert.match(noPairs.stderr, /--paired-url needs --pairs PATH or --out DIR/);
    const badUrl = await replay([trace, '--url', 'http://127.0.0.1:9', '--paired-url', 'ftp://x', '--pairs', join(dir, 'p')]);
    assert.equal(badUrl.code, 2);
    assert.match(badUrl.stderr, /--paired-url must start with http/);
    const alone = await replay([trace, '--url', 'http://127.0.0.1:9', '--pairs', join(dir, 'p')]);
    assert.equal(alone.code, 2);
    assert.match(alone.stderr, /need --paired-url/);
  } finally {
    cleanup(dir);
  }
});
