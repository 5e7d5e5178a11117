// The replay-fidelity certificate against `llmtap sim`s (the real engine's test is
// engine_fidelity.test.mjs): a multi-turn workload sent by the real `openai` client through the
// capturing proxy, then replayed to a fresh sim of the same settings and to a sim with three
// times the time to a first token.
//   - Each replayed row gets one pair line (DIR/fidelity-pairs.ndjson, the shadow pair format:
//     primary = captured, candidate = replayed), joined by line and timestamp, with its session
//     turn; the certificate is in fidelity.json, summary.json and report.html, and printed.
//   - Against the same settings the deterministic metrics reproduce (tokens, finish reasons, the
//     server's cache and its own timings): --certify with those gates exits 0. Against the slower
//     sim TTFT is "not reproduced (higher)", named in "moved", and --certify exits 3.
//   - `llmtap fidelity RUN FLOOR` judges again with the second replay as the A/A floor and
//     rewrites the run's files; `compare` shows the certificate's rows; bad inputs are usage
//     errors that name the fix.
// Client timings are not asserted reproduced (a loaded machine moves them; the engine test pins
// processes and uses the floor): the sims' time to a first token (60 ms vs 180 ms) keeps the slow
// case far outside any tolerance. Servers on free loopback ports, stopped by PID.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  LLMTAP, startSim, startProxy, stop, url, readLines, tempDir, cleanup, replay, run,
} from './proxy_helpers.mjs';

const SYSTEM = Array.from({ length: 60 }, (_, i) => `Rule ${i}: keep answers short.`).join(' ');
const SIM = ['--server-report', 'llamacpp'];
const TIMING = { '--ttft-ms': '60', '--itl-ms': '2' };
const DETERMINISTIC = 'prompt_tokens,completion_tokens,finish_reason,failures,cache_hit_rate,'
  + 'server_prompt_ms,server_decode_ms';

// 6 sessions x 3 turns, streamed, temperature 0, the assistant's answers in the history.
async function workload(base) {
  await Promise.all([0, 1, 2, 3, 4, 5].map(async (s) => {
    const api = new OpenAI({
      baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 60000,
      defaultHeaders: { 'x-session-id': `s${s}` },
    });
    const messages = [{ role: 'system', content: SYSTEM }];
    for (let t = 0; t < 3; ++t) {
      messages.push({ role: 'user', content: `Session ${s}, question ${t}: what is ${s * 10 + t}?` });
      let text = '';
      const stream = await api.chat.completions.create({
        model: 'm', messages, max_tokens: 12, temperature: 0, stream: true,
        stream_options: { include_usage: true },
      });
      for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
      messages.push({ role: 'assistant', content: text });
      await new Promise((r) => setTimeout(r, 30));
    }
  }));
}

async function capture(dir) {
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startSim(SIM, TIMING);
  try {
    const proxy = await startProxy({
      upstream: url(sim),
      args: ['--capture', '--capture-path', capturePath, '--outcomes', '--session-headers', 'x-session-id'],
    });
    try {
      await workload(url(proxy, '/v1'));
    } finally {
      assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    }
  } finally {
    await stop(sim);
  }
  return capturePath;
}

// A replay of `trace` to a fresh sim (`timing` replacing the test timing) into DIR/name.
async function replayTo(dir, name, trace, timing, extra = []) {
  const sim = await startSim(SIM, { ...TIMING, ...timing });
  try {
    const out = join(dir, name);
    const r = await replay([trace, '--url', url(sim), '--out', out, '--server-metrics', 'off', ...extra]);
    return { ...r, out };
  } finally {
    await stop(sim);
  }
}

const metric = (doc, name, group = 'all') =>
  doc.groups.find((g) => g.group === group).metrics.find((m) => m.metric === name);

test('replay certificate: pairs per row, reproduced against the same sim, not against a slower one', async () => {
  const dir = tempDir();
  try {
    const trace = await capture(dir);
    const rows = readLines(trace);
    assert.equal(rows.length, 18);

    const a = await replayTo(dir, 'a', trace, {}, ['--certify', '--fidelity-gates', DETERMINISTIC]);
    assert.equal(a.code, 0, a.stdout + a.stderr);
    const pairs = readLines(join(a.out, 'fidelity-pairs.ndjson'));
    assert.equal(pairs.length, 18);
    for (const p of pairs) {
      assert.equal(p.timestamp, rows[p.line - 1].timestamp, 'joined by line and timestamp');
      assert.equal(p.request, p.line - 1);
      assert.equal(p.path, '/v1/chat/completions');
      assert.equal(p.temperature, 0);
      assert.equal(p.primary.status, 200);
      assert.equal(p.candidate.status, 200);
      assert.equal(p.candidate.prompt_tokens, p.primary.prompt_tokens);
      assert.equal(p.candidate.finish_reason, p.primary.finish_reason);
      assert.ok(p.primary.server && p.candidate.server, 'the server timings of both sides');
    }
    assert.deepEqual([...new Set(pairs.map((p) => p.turn))].sort(), [0, 1, 2]);
    const doc = JSON.parse(readFileSync(join(a.out, 'fidelity.json'), 'utf8'));
    const summary = JSON.parse(readFileSync(join(a.out, 'summary.json'), 'utf8'));
    assert.deepEqual(summary.fidelity, doc);
    assert.equal(doc.certified, true, JSON.stringify(doc.unknown) + JSON.stringify(doc.moved));
    for (const m of ['prompt_tokens', 'completion_tokens', 'finish_reason', 'cache_hit_rate',
      'server_prompt_ms', 'server_decode_ms']) {
      assert.equal(metric(doc, m).verdict, 'reproduced', JSON.stringify(metric(doc, m)));
    }
    assert.ok(doc.groups.some((g) => g.group === 'turn:later' && g.pairs === 12));
    assert.match(a.stdout, /^fidelity: certified \(7 of 7 gated metrics reproduced; 18 pairs; floor: none/m);
    const html = readFileSync(join(a.out, 'report.html'), 'utf8');
    assert.match(html, /<section id="fidelity"/);

    // A sim three times slower to its first token: TTFT moved, named, and --certify says so.
    const slow = await replayTo(dir, 'slow', trace, { '--ttft-ms': '180' }, ['--certify']);
    assert.equal(slow.code, 3, slow.stdout + slow.stderr);
    const sdoc = JSON.parse(readFileSync(join(slow.out, 'fidelity.json'), 'utf8'));
    assert.equal(sdoc.certified, false);
    assert.equal(metric(sdoc, 'ttft_ms').verdict, 'not reproduced');
    assert.equal(metric(sdoc, 'ttft_ms').direction, 'higher');
    assert.ok(sdoc.moved.some((m) => m.startsWith('ttft_ms: replayed/captured')), JSON.stringify(sdoc.moved));
    assert.equal(metric(sdoc, 'prompt_tokens').verdict, 'reproduced');
    assert.match(slow.stdout, /ttft_ms\s+not reproduced \(higher\)/);

    // A second replay as the floor: judged again, files rewritten.
    const b = await replayTo(dir, 'b', trace, {});
    assert.equal(b.code, 0, b.stderr);
    const again = await run(LLMTAP, ['fidelity', a.out, b.out, '--json']);
    assert.equal(again.code, 0, again.stderr);
    const floored = JSON.parse(again.stdout);
    assert.equal(floored.floor.source, 'replay');
    assert.equal(floored.floor.joined, 18);
    assert.deepEqual(JSON.parse(readFileSync(join(a.out, 'fidelity.json'), 'utf8')), floored);
    assert.deepEqual(JSON.parse(readFileSync(join(a.out, 'summary.json'), 'utf8')).fidelity, floored);
    // The slow run judged with the floor of the two usual replays (its own difference to one of
    // them would be no floor).
    const slowAgain = await run(LLMTAP, ['fidelity', slow.out, a.out, b.out, '--certify', '--no-write', '--json']);
    assert.equal(slowAgain.code, 3, slowAgain.stdout + slowAgain.stderr);
    const slowFloored = JSON.parse(slowAgain.stdout);
    assert.equal(slowFloored.floor.of, 'two other replays');
    assert.equal(slowFloored.floor.joined, 18);
    assert.equal(metric(slowFloored, 'ttft_ms').verdict, 'not reproduced');

    // compare: the certificate's rows for each run that has one.
    const cmp = await run(LLMTAP, ['compare', a.out, slow.out, '--json']);
    assert.equal(cmp.code, 0, cmp.stderr);
    const rowsOf = JSON.parse(cmp.stdout).rows;
    const certified = rowsOf.find((r) => r.key === '/fidelity/certified');
    assert.deepEqual(certified.values, [floored.certified ? 1 : 0, 0]);
    assert.ok(rowsOf.some((r) => r.key === '/fidelity/groups/0/timing/ttft_ms/ratio'));

    // Without the sidecar's pairs: no certificate, and the flags that need one say so.
    const none = await replayTo(dir, 'none', trace, {}, ['--no-fidelity']);
    assert.equal(none.code, 0);
    assert.equal(existsSync(join(none.out, 'fidelity-pairs.ndjson')), false);
    assert.equal(JSON.parse(readFileSync(join(none.out, 'summary.json'), 'utf8')).fidelity, undefined);
    const bad = await replay([trace, '--url', 'http://127.0.0.1:9', '--certify']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--certify judges the fidelity pairs, which need --out DIR/);
    const noPairs = await run(LLMTAP, ['fidelity', none.out]);
    assert.equal(noPairs.code, 2);
    assert.match(noPairs.stderr, /fidelity-pairs\.ndjson/);
    const badShare = await run(LLMTAP, ['fidelity', a.out, '--tolerance', '150%']);
    assert.equal(badShare.code, 2);
    assert.match(badShare.stderr, /--tolerance 150%: not a share/);
    const badGate = await run(LLMTAP, ['fidelity', a.out, '--gates', 'ttft']);
    assert.equal(badGate.code, 2);
    assert.match(badGate.stderr, /unknown metric 'ttft' \(known: prompt_tokens/);
  } finally {
    cleanup(dir);
  }
});
