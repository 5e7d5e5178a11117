// `llmtap shadow report` over a real pairs file: `llmtap proxy --no-capture --shadow` in front of
// an `llmtap sim` primary, mirroring to a second `llmtap sim` whose TTFT is ten times longer. A
// few hundred small requests (16 at a time) make the pairs; the report must call the candidate's
// TTFT worse, count exactly the pairs in the file, and write a self-contained HTML page. No
// assertion on time: the only waits are on events (a counter reaching its value, a process
// exiting). Then pairs files across restarts: a proxy restarted onto its --shadow-pairs file
// numbers its requests on (the A/A report joins every request), and with capture on an older
// run's pairs sidecar whose capture file is gone is moved aside, not appended to.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import {
  LLMTAP, startSim, startProxy, stop, url, curl, run, readLines, tempDir, cleanup,
} from './proxy_helpers.mjs';

const kRequests = 240;
const kConcurrency = 16;

async function post(proxy, i) {
  const body = JSON.stringify({
    model: 'm',
    temperature: 0,
    max_tokens: 4,
    stream: i % 2 === 0,
    messages: [{ role: 'user', content: `Request ${i}: name a river.` }],
  });
  const res = await fetch(url(proxy, '/v1/chat/completions'), {
    method: 'POST', headers: { 'content-type': 'application/json' }, body,
  });
  assert.equal(res.status, 200);
  await res.text();
}

// Waits until every mirrored request has ended as a pair or a counted drop (mirrors run off the
// request path, so the clients' answers come first), and returns the pairs written. The 60 s
// cap only ends a test that hangs, with the metrics it saw last.
async function pairsWritten(proxy) {
  for (const end = Date.now() + 60000; ;) {
    const text = await curl([url(proxy, '/llmtap/metrics')]);
    const lines = text.split('\n');
    const value = (prefix) => lines.filter((l) => l.startsWith(prefix))
      .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    const matched = value('llmtap_shadow_matched_total ');
    const pairs = value('llmtap_shadow_pairs_total ');
    if (matched === kRequests && pairs + value('llmtap_shadow_dropped_total{') === matched) return pairs;
    if (Date.now() > end) assert.fail(`the mirrors did not all end within 60 s:\n${text}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('shadow report: a candidate with a 10x TTFT is worse; counts match the pairs; HTML stands alone', async () => {
  const dir = tempDir();
  const pairsPath = join(dir, 'pairs.ndjson');
  const primary = await startSim([], { '--ttft-ms': '5' });
  const candidate = await startSim([], { '--ttft-ms': '50' });
  const proxy = await startProxy({
    upstream: url(primary),
    args: ['--no-capture', '--shadow', url(candidate), '--shadow-pairs', pairsPath,
      '--shadow-max-in-flight', '256'],
  });
  try {
    let next = 0;
    await Promise.all(Array.from({ length: kConcurrency }, async () => {
      while (next < kRequests) await post(proxy, next++);
    }));
    const written = await pairsWritten(proxy);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const pairs = readLines(pairsPath);
    assert.equal(pairs.length, written);
    assert.ok(pairs.length >= kRequests / 2, `${pairs.length} pairs of ${kRequests} requests`);

    // A line that is not JSON: counted and skipped, not fatal.
    const withBad = join(dir, 'with_bad.ndjson');
    writeFileSync(withBad, `${readFileSync(pairsPath, 'utf8')}not a pair\n`);
    const jsonPath = join(dir, 'report.json');
    const htmlPath = join(dir, 'report.html');
    const r = await run(LLMTAP, ['shadow', 'report', withBad, '--json', jsonPath, '--html', htmlPath,
      '--seed', '3']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /with_bad\.ndjson:\d+: not JSON/);
    assert.match(r.stdout, /TTFT .* worse/);
    const report = JSON.parse(readFileSync(jsonPath, 'utf8'));
    assert.equal(report.inputs.pairs, pairs.length);
    assert.equal(report.inputs.malformed, 1);
    assert.equal(report.shadows.length, 1);
    const all = report.shadows[0].groups[0];
    assert.equal(all.kind, 'all');
    const ok = pairs.filter((p) => p.primary.status === 200 && p.primary.error === null
      && p.candidate.status === 200 && p.candidate.error === null).length;
    assert.equal(all.counts.pairs, pairs.length);
    assert.equal(all.counts.both_ok, ok);
    assert.equal(all.counts.both_ok + all.counts.primary_failed + all.counts.candidate_failed
      + all.counts.both_failed, pairs.length);
    assert.equal(all.metrics.ttft_ms.verdict, 'worse', JSON.stringify(all.metrics.ttft_ms));
    assert.ok(all.metrics.ttft_ms.ci[0] > 1);
    // The same sim seed on both sides: the same text, and every request is greedy.
    assert.equal(all.output.greedy_compared, pairs.filter((p) => p.output !== null).length);
    assert.equal(all.output.greedy_match_rate, 1);

    // The same seed gives the same numbers.
    const again = await run(LLMTAP, ['shadow', 'report', pairsPath, '--json', '-', '--seed', '3']);
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual(JSON.parse(again.stdout).shadows, report.shadows);

    const html = readFileSync(htmlPath, 'utf8');
    assert.match(html, /^<!DOCTYPE html>/);
    assert.doesNotMatch(html, /<script[^>]+src=|<link[^>]+href=|url\(http/i, 'no external resource');
    assert.match(html, /id="plot-0-ttft_ms-time"/);
    assert.match(html, /id="plot-0-latency_ms-hist"/);
    assert.match(html, /<b>worse<\/b>/);
    // The method line has the resample count, the heading the candidate's --shadow URL, as every
    // pair line has it.
    assert.match(html, /paired bootstrap \(2000 resamples of the pairs, seed 3\)/);
    assert.ok(pairs.every((p) => p.candidate_url === url(candidate)), JSON.stringify(pairs[0]));
    assert.deepEqual(report.shadows[0].candidate_urls, [url(candidate)]);
    assert.ok(html.includes(`<h2>Shadow 0 (candidate): ${url(candidate)}</h2>`),
      html.match(/<h2>Shadow[^\n]*/)?.[0]);

    // Nothing usable: exit 1.
    const empty = join(dir, 'empty.ndjson');
    writeFileSync(empty, 'garbage\n');
    const none = await run(LLMTAP, ['shadow', 'report', empty]);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /empty\.ndjson:1: not JSON/);
  } finally {
    await stop(proxy);
    await stop(candidate);
    await stop(primary);
    cleanup(dir);
  }
});

// Posts `n` requests (numbered from `from`) through a proxy with two shadows and waits for their
// 2n pair lines (`before` already in the file), then stops the proxy.
async function twoShadowRun(args, n, from, pairsPath, before) {
  const proxy = await startProxy({ upstream: args.upstream, args: args.proxy });
  try {
    for (let i = from; i < from + n; ++i) await post(proxy, i);
    // Whole lines written so far (a group may be mid-write while it is read).
    const lines = () => (existsSync(pairsPath)
      ? readFileSync(pairsPath, 'utf8').split('\n').length - 1 : 0);
    for (const end = Date.now() + 60000; lines() < before + 2 * n;) {
      if (Date.now() > end) assert.fail(`fewer than ${before + 2 * n} pair lines within 60 s`);
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  } finally {
    await stop(proxy);
  }
}

test('shadow pairs across restarts: numbered on in --shadow-pairs; the A/A report joins all',
  async () => {
  const dir = tempDir();
  const pairsPath = join(dir, 'pairs.ndjson');
  const primary = await startSim();
  const candidate = await startSim();
  const args = {
    upstream: url(primary),
    proxy: ['--no-capture', '--shadow', url(candidate), '--shadow', url(candidate),
      '--shadow-pairs', pairsPath],
  };
  try {
    await twoShadowRun(args, 6, 0, pairsPath, 0);
    await twoShadowRun(args, 6, 6, pairsPath, 12);
    const pairs = readLines(pairsPath);
    assert.equal(pairs.length, 24);
    for (const shadow of [0, 1]) {
      const numbers = pairs.filter((p) => p.shadow === shadow).map((p) => p.request)
        .sort((a, b) => a - b);
      assert.deepEqual(numbers, Array.from({ length: 12 }, (_, i) => i + 1), `shadow ${shadow}`);
    }
    const r = await run(LLMTAP, ['shadow', 'report', pairsPath, '--json', '-']);
    assert.equal(r.code, 0, r.stderr);
    const all = JSON.parse(r.stdout).noise_floor.groups.find((g) => g.kind === 'all');
    assert.equal(all.requests, 12, 'every request of both runs joins its two shadows');
  } finally {
    await stop(candidate);
    await stop(primary);
    cleanup(dir);
  }
});

test('shadow pairs beside a capture: an older run\'s pairs whose capture is gone are moved aside',
  async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const pairsPath = `${capturePath}.shadow.ndjson`;
  const primary = await startSim();
  const candidate = await startSim();
  // Capture records completions only: the mirrored chat requests' pairs go to the sidecar alone.
  const args = {
    upstream: url(primary),
    proxy: ['--capture', '--capture-path', capturePath, '--endpoint-pattern', '^/v1/completions$',
      '--shadow', url(candidate), '--shadow', url(candidate)],
  };
  try {
    await twoShadowRun(args, 4, 0, pairsPath, 0);
    const older = readFileSync(pairsPath, 'utf8');
    assert.ok(!existsSync(capturePath) || readFileSync(capturePath, 'utf8') === '');
    await twoShadowRun(args, 4, 4, pairsPath, 0);
    const pairs = readLines(pairsPath);
    assert.equal(pairs.length, 8, 'the new run\'s pairs alone');
    assert.deepEqual([...new Set(pairs.map((p) => p.request))].sort((a, b) => a - b), [1, 2, 3, 4]);
    const aside = readdirSync(dir)
      .filter((f) => /^requests\.\d{8}T\d{6}\.\d{3}Z\.jsonl\.shadow\.ndjson$/.test(f));
    assert.equal(aside.length, 1, readdirSync(dir).join(' '));
    assert.equal(readFileSync(join(dir, aside[0]), 'utf8'), older);
  } finally {
    await stop(candidate);
    await stop(primary);
    cleanup(dir);
  }
});
