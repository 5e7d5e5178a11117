// Responses chains replayed to a server that keeps no responses (llama.cpp's llama-server answers
// previous_response_id with HTTP 400): two chains of three turns captured against the sim (one
// with string input, one with item arrays; streamed and not) replay with --responses-chain inline
// with 0 errors, each later turn sending the conversation so far (read back from a capturing
// proxy in front of llama-server); without the flag the 400s are reported and the output names
// the flag.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import OpenAI from 'openai';
import {
  startSim, startProxy, stop, url, readLines, tempDir, cleanup, replay,
} from './proxy_helpers.mjs';
import { waitRecorded } from './conversations.mjs';
import { startLlamaServer } from './engine_helpers.mjs';

const TURNS = 3;
const PATTERN = '^/v1/responses$';

async function drain(stream) {
  let last;
  for await (const e of stream) last = e;
  return last;
}

// The two chains through a capturing proxy in front of the sim; returns the capture's path.
async function captureChains(dir) {
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startSim();
  try {
    const proxy = await startProxy({
      upstream: url(sim),
      args: ['--capture', '--capture-path', capturePath, '--outcomes', '--capture-responses',
        '--endpoint-pattern', PATTERN],
    });
    try {
      const oa = new OpenAI({
        baseURL: url(proxy, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 30000,
      });
      for (const chain of ['alpha', 'beta']) {
        let previous;
        for (let t = 0; t < TURNS; ++t) {
          const text = `${chain} turn ${t}: and then?`;
          // alpha: a string input, streamed on turn 1; beta: an item array, streamed on 0 and 2.
          const input = chain === 'alpha' ? text : [{ role: 'user', content: text }];
          const params = { model: 'tiny-llama', input, store: true, max_output_tokens: 8 };
          if (previous) params.previous_response_id = previous;
          const streamed = chain === 'alpha' ? t === 1 : t !== 1;
          if (streamed) {
            const last = await drain(await oa.responses.create({ ...params, stream: true }));
            assert.equal(last.type, 'response.completed');
            previous = last.response.id;
          } else {
            previous = (await oa.responses.create(params)).id;
          }
        }
      }
      await waitRecorded(proxy, 2 * TURNS);
    } finally {
      assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    }
  } finally {
    await stop(sim);
  }
  return capturePath;
}

test('Responses chains captured against the sim replay to llama-server inlined', async () => {
  const dir = tempDir();
  const capturePath = await captureChains(dir);
  const outcomes = readLines(`${capturePath}.outcomes.ndjson`).sort((a, b) => a.line - b.line);
  assert.equal(outcomes.length, 2 * TURNS);
  for (const o of outcomes) {
    assert.match(o.response_id, /^resp_/, JSON.stringify(o));
    assert.ok(o.response && o.response.text.length > 0, JSON.stringify(o));
  }
  const capturedRows = readLines(capturePath);
  // The captured answer of each turn, by its text.
  const answerOf = new Map(capturedRows.map((row, i) => {
    const input = row.payload.input;
    const text = typeof input === 'string' ? input : input[input.length - 1].content;
    return [text, outcomes[i].response.text];
  }));

  const llama = await startLlamaServer();
  try {
    // Without the flag: every later turn is refused (400), and the output says which flag helps.
    const plain = await replay([capturePath, '--url', llama.url(), '--out', join(dir, 'plain'),
      '--server-metrics', 'off']);
    assert.equal(plain.code, 1, `${plain.stdout}\n${plain.stderr}`);
    const ps = JSON.parse(readFileSync(join(dir, 'plain', 'summary.json'), 'utf8'));
    assert.equal(ps.requests.errors, 2 * (TURNS - 1));
    assert.equal(ps.response_chains.previous_response_id_refused, 2 * (TURNS - 1));
    assert.equal(ps.response_chains.mode, 'remap');
    assert.match(plain.stdout,
      /refused by the target for previous_response_id .*--responses-chain inline/);
    assert.match(plain.stderr, /replay with --responses-chain inline/);

    // With it, through a capturing proxy that shows what llama-server was sent.
    const seenPath = join(dir, 'seen.jsonl');
    const proxy = await startProxy({
      upstream: llama.url(),
      args: ['--capture', '--capture-path', seenPath, '--outcomes', '--endpoint-pattern', PATTERN],
    });
    let r;
    try {
      r = await replay([capturePath, '--url', url(proxy), '--responses-chain', 'inline', '--out',
        join(dir, 'inline'), '--server-metrics', 'off']);
      await waitRecorded(proxy, 2 * TURNS);
    } finally {
      assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    }
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    const s = JSON.parse(readFileSync(join(dir, 'inline', 'summary.json'), 'utf8'));
    assert.equal(s.requests.errors, 0);
    assert.equal(s.requests.completed, 2 * TURNS);
    assert.deepEqual(s.response_chains, {
      mode: 'inline', rows: 2 * (TURNS - 1), remapped: 0, inlined: 2 * (TURNS - 1),
      inlined_output: { captured: 2 * (TURNS - 1), replayed: 0 },
      sent_with_captured_id: {
        no_outcomes: 0, predecessor_not_in_trace: 0, predecessor_failed: 0,
        predecessor_unanswered: 0,
      },
      previous_response_id_refused: 0,
    });
    assert.match(r.stdout, new RegExp('4 rows with previous_response_id, 4 sent with the '
      + "conversation so far inlined \\(predecessor's output: 4 captured, 0 from this run's "
      + 'target\\)'));
    assert.ok(readLines(`${seenPath}.outcomes.ndjson`).every((o) => o.status === 200));

    // What llama-server was sent: no previous_response_id, and turn t of a chain carries the
    // 2t earlier items (each earlier turn's user message and its captured answer) before its own.
    const seen = readLines(seenPath).map((row) => row.payload);
    assert.equal(seen.length, 2 * TURNS);
    for (const chain of ['alpha', 'beta']) {
      for (let t = 0; t < TURNS; ++t) {
        const own = `${chain} turn ${t}: and then?`;
        const last = (b) => (typeof b.input === 'string' ? b.input : b.input.at(-1).content);
        const body = seen.find((b) => last(b) === own);
        assert.ok(body, `${own} was sent`);
        assert.equal(body.previous_response_id, undefined, own);
        if (t === 0) {
          assert.deepEqual(body.input, chain === 'alpha' ? own : [{ role: 'user', content: own }]);
          continue;
        }
        assert.equal(body.input.length, 2 * t + 1, JSON.stringify(body.input));
        for (let k = 0; k < t; ++k) {
          const earlier = `${chain} turn ${k}: and then?`;
          assert.deepEqual(body.input[2 * k], { type: 'message', role: 'user', content: earlier });
          assert.deepEqual(body.input[2 * k + 1], {
            type: 'message', role: 'assistant',
            content: [{ type: 'output_text', text: answerOf.get(earlier) }],
          });
        }
        assert.deepEqual(body.input[2 * t], { type: 'message', role: 'user', content: own });
      }
    }

    // A sidecar without the response texts: each later turn carries what llama-server answered
    // the turn before in this run (streamed and not).
    const bare = join(dir, 'bare.outcomes.ndjson');
    const bareLines = outcomes.map((o) => JSON.stringify({ ...o, response: undefined }));
    writeFileSync(bare, `${bareLines.join('\n')}\n`);
    const own = await replay([capturePath, '--outcomes', bare, '--url', llama.url(),
      '--responses-chain', 'inline', '--out', join(dir, 'own'), '--server-metrics', 'off']);
    assert.equal(own.code, 0, `${own.stdout}\n${own.stderr}`);
    const os = JSON.parse(readFileSync(join(dir, 'own', 'summary.json'), 'utf8'));
    assert.equal(os.requests.errors, 0);
    assert.deepEqual(os.response_chains.inlined_output, { captured: 0, replayed: 2 * (TURNS - 1) });

    // --paired-url: the paired target is sent the conversation too.
    const paired = await replay([capturePath, '--url', llama.url(), '--paired-url', llama.url(),
      '--responses-chain', 'inline', '--out', join(dir, 'paired'), '--server-metrics', 'off']);
    assert.equal(paired.code, 0, `${paired.stdout}\n${paired.stderr}`);
    const pairs = readLines(join(dir, 'paired', 'pairs.ndjson'));
    assert.equal(pairs.length, 2 * TURNS);
    for (const p of pairs) {
      assert.equal(p.primary.status, 200, JSON.stringify(p));
      assert.equal(p.candidate.status, 200, JSON.stringify(p));
    }
  } finally {
    await llama.stop();
    cleanup(dir);
  }
});
