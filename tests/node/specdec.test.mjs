// `llmtap specdec` against the simulator, as real processes on free loopback ports: the real
// `openai` client sends code-editing and free-chat requests (chat and completions, streamed and
// not) through `llmtap proxy --capture-responses` to `llmtap sim`, whose speculative-decoding
// model runs the same n-gram proposer on its own tokens. `llmtap specdec --tokenizer sim` over
// the capture must give exactly the sim's vllm:spec_decode_* counters, and per system prompt a
// clearly higher acceptance length for code editing than for free chat.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  LLMTAP, startSim, startProxy, stop, url, run, tempDir, cleanup,
} from './proxy_helpers.mjs';

const CODE_SYSTEM = 'You are a coding assistant. Reply with the whole updated file.';
const CHAT_SYSTEM = 'You are a friendly assistant.';

function codeFile(v) {
  const fns = ['Total', 'Count', 'Names', 'Largest'].map((name) =>
    `int ${name}${v}(const std::vector<Item${v}>& items) {\n  int out = 0;\n` +
    `  for (const Item${v}& item : items) {\n    if (item.count <= 0) continue;\n` +
    `    out += item.count;\n  }\n  return out;\n}\n`);
  return `#include <vector>\n\nstruct Item${v} {\n  int count = 0;\n  double price = 0.0;\n};\n\n` +
    fns.join('\n');
}

const QUESTIONS = [
  'What are three good day trips from Lisbon in spring, and how do I get there without a car?',
  'Explain like I am ten why the sky looks blue during the day but red at sunset.',
  'Write a short poem about autumn leaves falling on a quiet river.',
  'My sourdough starter smells like nail polish remover. Is it dead?',
];

// The sim's counters, from its Prometheus text.
async function simCounters(sim) {
  const text = await (await fetch(url(sim, '/metrics'))).text();
  const value = (name) => {
    const m = text.match(new RegExp(`^vllm:${name}\\{[^}]*\\} (\\d+)`, 'm'));
    return m ? Number(m[1]) : 0;
  };
  const perPos = [];
  for (const m of text.matchAll(/^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"\} (\d+)/gm)) {
    perPos[Number(m[1])] = Number(m[2]);
  }
  return {
    num_drafts: value('spec_decode_num_drafts_total'),
    num_draft_tokens: value('spec_decode_num_draft_tokens_total'),
    num_accepted_tokens: value('spec_decode_num_accepted_tokens_total'),
    num_accepted_tokens_per_pos: perPos,
  };
}

test('specdec over a capture of the sim equals the sim\'s own spec-decode counters', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startSim([], { '--output-tokens-mean': '150' });
  const proxy = await startProxy({
    upstream: url(sim),
    args: ['--capture', '--capture-path', capturePath, '--capture-responses'],
  });
  try {
    const client = new OpenAI({ baseURL: url(proxy, '/v1'), apiKey: 'sk-test', maxRetries: 0 });
    let sent = 0;
    for (let v = 0; v < 8; v++) {
      const code = v % 2 === 0;
      const messages = code
        ? [{ role: 'system', content: CODE_SYSTEM },
          { role: 'user', content: `Here is my file:\n\`\`\`cpp\n${codeFile(v)}\`\`\`\nRename count to quantity.` },
          { role: 'assistant', content: `\`\`\`cpp\n${codeFile(v)}\`\`\`` },
          { role: 'user', content: 'Now also skip items with a negative price.' }]
        : [{ role: 'system', content: CHAT_SYSTEM }, { role: 'user', content: QUESTIONS[(v >> 1) % 4] }];
      const stream = v % 4 >= 2;
      const params = { model: 'm', messages, max_tokens: 120 + 10 * v, stream };
      if (!stream) {
        await client.chat.completions.create(params);
      } else {
        for await (const chunk of await client.chat.completions.create(params)) void chunk;
      }
      sent++;
    }
    // Completions, streamed and not, with a repetitive prompt.
    for (const stream of [false, true]) {
      const params = { model: 'm', prompt: codeFile(9) + codeFile(9), max_tokens: 100, stream };
      if (!stream) await client.completions.create(params);
      else for await (const chunk of await client.completions.create(params)) void chunk;
      sent++;
    }
    const expected = await simCounters(sim);
    assert.ok(expected.num_accepted_tokens > 50, JSON.stringify(expected));
    assert.equal((await stop(proxy)).code, 0);

    const r = await run(LLMTAP, ['specdec', capturePath, '--tokenizer', 'sim', '--k', '5',
      '--ngram-min', '2', '--ngram-max', '4', '--json', '-']);
    assert.equal(r.code, 0, r.stderr);
    const report = JSON.parse(r.stdout);
    assert.equal(report.replayed, sent);
    const p = report.total.points[0];
    assert.deepEqual({
      num_drafts: p.num_drafts,
      num_draft_tokens: p.num_draft_tokens,
      num_accepted_tokens: p.num_accepted_tokens,
      num_accepted_tokens_per_pos: p.num_accepted_tokens_per_pos,
    }, expected);

    // The sweep, per system prompt: code editing pays, free chat does not.
    const perRequest = `${capturePath}.per-request.jsonl`;
    const bySp = await run(LLMTAP, ['specdec', capturePath, '--tokenizer', 'sim', '--k', '1..8',
      '--ngram-min', '2', '--ngram-max', '4', '--by', 'system-prompt', '--json', '-',
      '--per-request', perRequest]);
    assert.equal(bySp.code, 0, bySp.stderr);
    const groups = JSON.parse(bySp.stdout).groups;
    // --per-request: one line per replayed request; per group and point they sum to the report.
    const lines = readFileSync(perRequest, 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l));
    assert.equal(lines.length, JSON.parse(bySp.stdout).replayed);
    for (const g of groups) {
      const mine = lines.filter((l) => l.group === g.key);
      assert.equal(mine.length, g.requests, g.label);
      g.points.forEach((p, i) => {
        for (const field of ['num_drafts', 'num_draft_tokens', 'num_accepted_tokens', 'steps']) {
          assert.equal(mine.reduce((n, l) => n + l.points[i][field], 0), p[field], `${g.label} ${field}`);
        }
      });
    }
    const best = (g) => g.points[g.best];
    const code = groups.find((g) => g.label.includes('coding assistant'));
    const chat = groups.find((g) => g.label.includes('friendly assistant'));
    assert.ok(code && chat, JSON.stringify(groups.map((g) => g.label)));
    assert.equal(code.requests, 4);
    assert.equal(chat.requests, 4);
    assert.ok(best(code).acceptance_length > best(chat).acceptance_length + 1,
      `code ${best(code).acceptance_length}, chat ${best(chat).acceptance_length}`);
    assert.ok(best(code).speedup > 1.3, `code speedup ${best(code).speedup}`);
    // The text report names the best setting per group.
    const text = await run(LLMTAP, ['specdec', capturePath, '--tokenizer', 'sim', '--k', '1..8',
      '--by', 'system-prompt']);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /coding assistant[^\n]*\n[\s\S]*?best: ngram k=\d+ n=5-5, speedup/);
  } finally {
    await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

// One coding conversation with a tool call in its history, sent as chat (the openai client) and as Anthropic
// Messages (the @anthropic-ai/sdk client), each through its own capturing proxy into one sim:
// `llmtap specdec` over each capture gives the sim's counters for that API's requests, and the
// two captures give the same counters (the same tokens, so the same drafts).
test('specdec over a Messages capture equals the same conversation captured as chat', async () => {
  const { default: Anthropic } = await import('@anthropic-ai/sdk');
  const dir = tempDir();
  const sim = await startSim([], { '--output-tokens-mean': '150' });
  const proxies = [];
  try {
    const capture = async (name, send) => {
      const capturePath = join(dir, `${name}.jsonl`);
      const proxy = await startProxy({
        upstream: url(sim),
        args: ['--capture', '--capture-path', capturePath, '--capture-responses', '--endpoint-pattern', '.*'],
      });
      proxies.push(proxy);
      const before = await simCounters(sim);
      await send(proxy);
      const after = await simCounters(sim);
      assert.equal((await stop(proxy)).code, 0);
      const delta = {
        num_drafts: after.num_drafts - before.num_drafts,
        num_draft_tokens: after.num_draft_tokens - before.num_draft_tokens,
        num_accepted_tokens: after.num_accepted_tokens - before.num_accepted_tokens,
      };
      const r = await run(LLMTAP, ['specdec', capturePath, '--tokenizer', 'sim', '--k', '5',
        '--ngram-min', '2', '--ngram-max', '4', '--json', '-']);
      assert.equal(r.code, 0, r.stderr);
      const report = JSON.parse(r.stdout);
      const p = report.total.points[0];
      const counters = { num_drafts: p.num_drafts, num_draft_tokens: p.num_draft_tokens, num_accepted_tokens: p.num_accepted_tokens };
      assert.deepEqual(counters, delta, `${name}: specdec equals the sim's counters for these requests`);
      return { counters, replayed: report.replayed };
    };
    const ask = `Here is my file:\n\`\`\`cpp\n${codeFile(1)}\`\`\`\nRename count to quantity.`;
    const weather = { type: 'object', properties: { file: { type: 'string' } } };
    const chat = await capture('chat', async (proxy) => {
      const client = new OpenAI({ baseURL: url(proxy, '/v1'), apiKey: 'sk-test', maxRetries: 0 });
      const messages = [{ role: 'system', content: CODE_SYSTEM }, { role: 'user', content: ask }];
      const tools = [{ type: 'function', function: { name: 'read_file', parameters: weather } }];
      // No max_tokens: the sim draws each answer's length (a chat max_tokens is the exact length
      // there, and Messages requires one, which only caps the draw).
      const first = await client.chat.completions.create({ model: 'm', messages, tools });
      messages.push({ role: 'assistant', content: first.choices[0].message.content });
      messages.push({ role: 'user', content: 'Read the other file.' });
      const call = { id: 'call_1', type: 'function', function: { name: 'read_file', arguments: '{"file":"b.cc"}' } };
      messages.push({ role: 'assistant', content: null, tool_calls: [call] });
      messages.push({ role: 'tool', tool_call_id: call.id, content: codeFile(2) });
      const second = await client.chat.completions.create({ model: 'm', messages, tools });
      messages.push({ role: 'assistant', content: second.choices[0].message.content });
      messages.push({ role: 'user', content: 'Now also skip items with a negative price.' });
      for await (const chunk of await client.chat.completions.create({ model: 'm', messages, stream: true })) void chunk;
    });
    const anthropic = await capture('messages', async (proxy) => {
      const client = new Anthropic({ baseURL: url(proxy), apiKey: 'sk-ant-test', maxRetries: 0 });
      const messages = [{ role: 'user', content: ask }];
      const tools = [{ name: 'read_file', input_schema: weather }];
      const first = await client.messages.create({ model: 'm', system: CODE_SYSTEM, messages, max_tokens: 4096, tools });
      messages.push({ role: 'assistant', content: first.content });
      messages.push({ role: 'user', content: 'Read the other file.' });
      const use = { type: 'tool_use', id: 'call_1', name: 'read_file', input: { file: 'b.cc' } };
      messages.push({ role: 'assistant', content: [use] });
      messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: codeFile(2) }] });
      const second = await client.messages.create({ model: 'm', system: CODE_SYSTEM, messages, max_tokens: 4096, tools });
      messages.push({ role: 'assistant', content: second.content.filter((b) => b.type === 'text') });
      messages.push({ role: 'user', content: 'Now also skip items with a negative price.' });
      await client.messages.stream({ model: 'm', system: CODE_SYSTEM, messages, max_tokens: 4096 }).finalMessage();
    });
    assert.equal(chat.replayed, 3);
    assert.equal(anthropic.replayed, 3);
    assert.ok(chat.counters.num_accepted_tokens > 20, JSON.stringify(chat.counters));
    assert.deepEqual(anthropic.counters, chat.counters, 'the same conversation, the same counters');
  } finally {
    for (const p of proxies) await stop(p);
    await stop(sim);
    cleanup(dir);
  }
});
