// The replay-fidelity certificate against llama.cpp's real llama-server: a multi-turn workload
// (12 sessions x 3 turns on two shared ~850-token system prompts, think times, streamed,
// temperature 0: tests/node/engine_workload.mjs) sent by the real `openai` client through the
// capturing proxy to a fresh server, then replayed to two more fresh servers of the same
// configuration (A, B: the A/A floor) and to one with prompt caching off (`--no-cache-prompt`).
//   - A, judged with B as its floor, is certified: prompt tokens equal on every request,
//     completion tokens and finish reasons on >= 99 %, the server's cache hit rate within 2
//     points of the capture's, no failures. With FIDELITY_FULL=1 (bench/fidelity_engine.sh, a
//     quiet machine) every metric is gated, the server's own timings and TTFT/latency too.
//   - The caching-off replay, judged with the floor of A and B, is not certified, and names the
//     cache hit rate (lower) among what moved; the server's prompt time per request rises.
//   - The certificate is in fidelity.json, summary.json, report.html and on the console.
// The servers run with one slot (`--parallel 1`): with 4, which slot a request lands on is a race
// between sessions, and two fresh servers' hit rates on this workload differ by up to 10 points
// (BENCHMARKS: "Replay fidelity"). The server is pinned to CPU 1, the proxy, client and replay
// to CPU 0 (taskset). Client timings are asserted only with FIDELITY_FULL: in the suite other
// tests share both CPUs. Servers on free loopback ports, stopped by their pid files.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import {
  LLMTAP, startProxy, stop, url, readLines, tempDir, cleanup, replay, run,
} from './proxy_helpers.mjs';
import { startLlamaServer, pinned } from './engine_helpers.mjs';
import { workloadPlan, runWorkload } from './engine_workload.mjs';

const FULL = process.env.FIDELITY_FULL === '1';
const KEEP = process.env.FIDELITY_KEEP;  // a directory: the runs are left there
// FIDELITY_SLOTS: the servers' slots (bench/fidelity_engine.sh measures 4 too).
const SLOTS = ['--parallel', process.env.FIDELITY_SLOTS ?? '1'];
const DETERMINISTIC = 'prompt_tokens,completion_tokens,finish_reason,failures,cache_hit_rate';

const metric = (doc, name, group = 'all') =>
  doc.groups.find((g) => g.group === group).metrics.find((m) => m.metric === name);

async function replayTo(dir, name, trace, flags) {
  const server = await startLlamaServer({ flags: [...SLOTS, ...flags], cpu: 1 });
  try {
    const out = join(dir, name);
    const r = await replay([trace, '--url', server.url(), '--out', out, '--server-metrics', 'off'],
      { command: pinned(0, []) });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    return { ...r, out };
  } finally {
    await server.stop();
  }
}

test('fidelity against llama-server: a replay to a fresh server certified, caching off not', async () => {
  const dir = KEEP ?? tempDir();
  try {
    const trace = join(dir, 'requests.jsonl');
    const live = await startLlamaServer({ flags: SLOTS, cpu: 1 });
    try {
      const proxy = await startProxy({
        upstream: live.url(), command: pinned(0, [LLMTAP]),
        args: ['--capture', '--capture-path', trace, '--outcomes', '--session-headers', 'x-session-id'],
      });
      try {
        const results = await runWorkload(url(proxy, '/v1'), workloadPlan({ sessions: 12, turns: 3 }));
        assert.equal(results.length, 36);
      } finally {
        assert.deepEqual(await stop(proxy), { code: 0, signal: null });
      }
    } finally {
      await live.stop();
    }
    assert.equal(readLines(`${trace}.outcomes.ndjson`).length, 36);

    const a = await replayTo(dir, 'a', trace, []);
    const b = await replayTo(dir, 'b', trace, []);
    const pairs = readLines(join(a.out, 'fidelity-pairs.ndjson'));
    assert.equal(pairs.length, 36);
    assert.ok(pairs.every((p) => p.primary.server && p.candidate.server && Number.isInteger(p.candidate.cached_tokens)));
    assert.match(a.stdout, /^fidelity: /m);

    // A judged with B as its floor.
    const gates = FULL ? [] : ['--gates', DETERMINISTIC];
    const judged = await run(LLMTAP, ['fidelity', a.out, b.out, '--certify', '--json', ...gates]);
    const doc = JSON.parse(judged.stdout);
    const text = (await run(LLMTAP, ['fidelity', a.out, b.out, '--no-write', ...gates])).stdout;
    console.log(text);
    assert.equal(judged.code, 0, `${text}\n${JSON.stringify(doc.moved)} ${JSON.stringify(doc.unknown)}`);
    assert.equal(doc.certified, true);
    assert.equal(doc.floor.joined, 36);
    const all = doc.groups[0];
    assert.equal(all.tokens.prompt_equal, 1);
    assert.ok(all.tokens.completion_equal >= 0.99 && all.tokens.finish_equal >= 0.99, JSON.stringify(all.tokens));
    assert.ok(Math.abs(all.server.cache.points) <= 2, JSON.stringify(all.server.cache));
    assert.ok(all.server.cache.captured > 0.5, 'the shared prompts and histories are reused');
    for (const m of ['server_prompt_ms', 'server_decode_ms', 'ttft_ms', 'latency_ms']) {
      assert.ok(all.timing[m].n === 36 && all.timing[m].floor_band !== null, m);
      assert.ok(all.timing[m].tolerance >= Math.max(0.1, all.timing[m].floor_band) - 1e-9, m);
    }
    assert.ok(doc.groups.some((g) => g.group === 'turn:later' && g.pairs === 24));
    const summary = JSON.parse(readFileSync(join(a.out, 'summary.json'), 'utf8'));
    assert.deepEqual(summary.fidelity, JSON.parse(readFileSync(join(a.out, 'fidelity.json'), 'utf8')));
    assert.match(readFileSync(join(a.out, 'report.html'), 'utf8'), /<section id="fidelity"/);

    // Prompt caching off: judged with the floor of A and B, not certified; the cache moved.
    const off = await replayTo(dir, 'nocache', trace, ['--no-cache-prompt']);
    const offJudged = await run(LLMTAP, ['fidelity', off.out, a.out, b.out, '--certify', '--json']);
    assert.equal(offJudged.code, 3, offJudged.stdout + offJudged.stderr);
    const offDoc = JSON.parse(offJudged.stdout);
    console.log((await run(LLMTAP, ['fidelity', off.out, a.out, b.out, '--no-write'])).stdout);
    assert.equal(offDoc.certified, false);
    assert.equal(offDoc.floor.of, 'two other replays');
    assert.equal(metric(offDoc, 'cache_hit_rate').verdict, 'not reproduced');
    assert.equal(metric(offDoc, 'cache_hit_rate').direction, 'lower');
    assert.ok(offDoc.moved.some((m) => m.startsWith('cache_hit_rate: ')), JSON.stringify(offDoc.moved));
    assert.equal(offDoc.groups[0].server.cache.replayed, 0);
    assert.ok(offDoc.groups[0].timing.server_prompt_ms.ratio > 1, JSON.stringify(offDoc.groups[0].timing));
    assert.equal(metric(offDoc, 'prompt_tokens').verdict, 'reproduced');
    if (FULL) assert.equal(metric(offDoc, 'server_prompt_ms').verdict, 'not reproduced');
  } finally {
    if (!KEEP) cleanup(dir);
  }
});
