// `llmtap proxy --shadow https://...`: the candidate is an `llmtap sim` behind nginx terminating
// TLS (tls_nginx.mjs, test-CA certificates). With --shadow-cacert the mirrors reach it and their
// pairs are written; a certificate for another name costs dropped mirrors (reason tls) and a
// log line, never a primary answer. Waits are bounded by events, not the clock.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startSim, startProxy, stop, url, curl, readLines, tempDir, cleanup, logged } from './proxy_helpers.mjs';
import { startTlsNginx } from './tls_nginx.mjs';

let primary;
let candidate;
let ngx;

before(async () => {
  primary = await startSim();
  candidate = await startSim([], { '--itl-ms': '2' });
  ngx = await startTlsNginx({ upstreamPort: candidate.port });
});

after(async () => {
  if (ngx) await ngx.stop();
  if (candidate) await stop(candidate);
  if (primary) await stop(primary);
});

function metric(text, name) {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  assert.ok(line !== undefined, `no ${name} in the metrics`);
  return Number(line.slice(name.length + 1));
}

// Polls the metrics until `done(text)` holds (the mirrors' counters move after the client's
// answer); the 60 s cap only ends a test that hangs, with the metrics it saw last.
async function metricsWhen(proxy, done) {
  for (const end = Date.now() + 60000; ;) {
    const text = await curl([url(proxy, '/llmtap/metrics')]);
    if (done(text)) return text;
    if (Date.now() > end) assert.fail(`no such metrics within 60 s:\n${text}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function stream(proxy) {
  const client = new OpenAI({ baseURL: url(proxy, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 30000 });
  let text = '';
  for await (const chunk of await client.chat.completions.create({
    model: 'm', messages: [{ role: 'user', content: 'Name three rivers.' }], max_tokens: 8, stream: true,
  })) {
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  return text;
}

test('shadow over https with --shadow-cacert: mirrors reach the candidate, pairs compare equal', async () => {
  const dir = tempDir();
  const pairsPath = join(dir, 'pairs.ndjson');
  const proxy = await startProxy({
    upstream: url(primary),
    args: ['--shadow', `https://localhost:${ngx.ports.ok}`, '--shadow-cacert', ngx.caFile, '--shadow-pairs', pairsPath],
  });
  try {
    for (let i = 0; i < 3; ++i) assert.ok((await stream(proxy)).length > 0);
    const m = await metricsWhen(proxy, (t) => metric(t, 'llmtap_shadow_pairs_written_total') === 3);
    assert.equal(metric(m, 'llmtap_shadow_sent_total'), 3);
    assert.equal(metric(m, 'llmtap_shadow_completed_total'), 3);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const pairs = readLines(pairsPath);
    assert.equal(pairs.length, 3);
    for (const p of pairs) {
      assert.equal(p.candidate.status, 200);
      assert.equal(p.candidate.error, null);
      assert.deepEqual(p.output, { equal: true, first_diff_char: null, first_diff_token: null, length_ratio: 1, truncated: false });
    }
  } finally {
    await stop(proxy);
    cleanup(dir);
  }
});

test('shadow over https to a certificate for another name: dropped (reason tls), logged; --shadow-insecure reaches it', async () => {
  const strict = await startProxy({
    upstream: url(primary),
    args: ['--shadow', `https://localhost:${ngx.ports.wronghost}`, '--shadow-cacert', ngx.caFile],
  });
  try {
    for (let i = 0; i < 2; ++i) assert.ok((await stream(strict)).length > 0);
    // After a failed handshake the loop backs off (reason candidate_down for what follows).
    const m = await metricsWhen(strict, (t) => metric(t, 'llmtap_shadow_dropped_total{reason="tls"}')
      + metric(t, 'llmtap_shadow_dropped_total{reason="candidate_down"}') === 2);
    assert.ok(metric(m, 'llmtap_shadow_dropped_total{reason="tls"}') >= 1);
    assert.equal(metric(m, 'llmtap_shadow_sent_total'), 0);
    assert.equal(metric(m, 'llmtap_shadow_matched_total'), 2);
    await logged(strict, /shadow: cannot reach the candidate/);
  } finally {
    await stop(strict);
  }
  const insecure = await startProxy({
    upstream: url(primary),
    args: ['--shadow', `https://localhost:${ngx.ports.wronghost}`, '--shadow-insecure'],
  });
  try {
    await logged(insecure, /WARNING: --shadow-insecure: the shadow candidate's certificate/);
    assert.ok((await stream(insecure)).length > 0);
    await metricsWhen(insecure, (t) => metric(t, 'llmtap_shadow_completed_total') === 1);
  } finally {
    await stop(insecure);
  }
});
