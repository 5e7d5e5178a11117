// `llmtap shadow report` over a real pairs file: `llmtap proxy --no-capture --shadow` in front of
// an `llmtap sim` primary, mirroring to a second `llmtap sim` whose TTFT is ten times longer. A
// few hundred small requests (16 at a time) make the pairs; the report must call the candidate's
// TTFT worse, count exactly the pairs in the file, and write a self-contained HTML page. No
// assertion on time: the only waits are on events (a counter reaching its value, a process
// exiting).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
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
