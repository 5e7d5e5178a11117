// Every API a server speaks, through `llmtap proxy --capture-responses` (endpoint_pattern widened)
// into `llmtap sim`, driven by the clients their users have: the `openai` SDK's
// responses.create (streamed and not, a tool call loop, previous_response_id), the
// `@anthropic-ai/sdk` messages.create and messages.stream (a tool-use loop), embeddings through
// the openai SDK and rerank by plain HTTP. Each request is recorded as sent, and each outcome line
// holds the tokens, the finish reason, the response's id and the text the client received. Then a
// raw_payload capture, whose manifest tells `llmtap split` chat rows from Messages rows.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import {
  LLMTAP, startSim, startUpstream, startProxy, stop, url, readLines, run, tempDir, cleanup,
} from './proxy_helpers.mjs';
import {
  openai, responses, messageSeen, checkResponsesOutcome, checkMessagesOutcome, sendResponsesAndMessagesToFastApi, checkCaptured,
} from './responses_helpers.mjs';

const model = 'llmtap-sim';
const weather = {
  type: 'function', name: 'get_weather', description: 'The weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const anthropicWeather = { name: 'get_weather', description: 'The weather in a city.', input_schema: weather.parameters };

test('every API through the proxy: recorded as sent, outcomes equal to what the SDKs received', async () => {
  const sim = await startSim();
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const proxy = await startProxy({
    upstream: url(sim),
    args: ['--capture', '--capture-path', capturePath, '--capture-responses', '--endpoint-pattern', '.*'],
  });
  try {
    const client = openai(proxy);
    const anthropic = new Anthropic({ baseURL: url(proxy), apiKey: 'sk-ant-test', maxRetries: 0 });
    const sent = [];  // [path, body, check(outcome)]
    // conversation: which conversation of this test a request belongs to (null: none).
    const record = (path, body, check, conversation) => sent.push({ path, body, check, conversation });

    // Responses: streamed and not, then a tool call loop chained by previous_response_id.
    for (const stream of [false, true]) {
      const params = { model, input: 'Tell me about the Danube.', instructions: 'Be brief.', max_output_tokens: 30, stream };
      const seen = await responses(client, params);
      assert.ok(seen.text.length > 0);
      record('/v1/responses', params, (o) => checkResponsesOutcome(o, seen, `responses stream=${stream}`), `r${stream}`);
    }
    const capped = { model, input: 'Tell me everything.', max_output_tokens: 2, stream: true };
    const cappedSeen = await responses(client, capped);
    assert.equal(cappedSeen.r.status, 'incomplete');
    record('/v1/responses', capped, (o) => checkResponsesOutcome(o, cappedSeen, 'responses incomplete'), 'capped');
    let previous = null;
    for (let turn = 0; turn < 4; ++turn) {
      const stream = turn % 2 === 1;
      const params = turn === 0
        ? { model, input: 'What is the weather in Paris?', tools: [weather], tool_choice: 'required', stream }
        : turn === 1
          ? { model, previous_response_id: previous.r.id, tools: [weather], stream,
            input: [{ type: 'function_call_output', call_id: previous.r.output[0].call_id, output: '{"temp":21}' }] }
          : { model, previous_response_id: previous.r.id, input: `Turn ${turn}: and tomorrow?`, stream };
      const seen = await responses(client, params);
      if (turn === 0) assert.equal(seen.calls[0].name, 'get_weather');
      record('/v1/responses', params, (o) => checkResponsesOutcome(o, seen, `responses turn ${turn}`), 'chain');
      previous = seen;
    }

    // Messages: create and stream, then a tool-use loop.
    const system = 'You are terse.';
    const ask = [{ role: 'user', content: 'Name three rivers in Europe.' }];
    const created = { model, system, messages: ask, max_tokens: 40 };
    const m1 = messageSeen(await anthropic.messages.create(created));
    record('/v1/messages', created, (o) => checkMessagesOutcome(o, m1, 'messages.create'), 'm1');
    const streamed = { model, system, messages: ask, max_tokens: 40 };
    const m2 = messageSeen(await anthropic.messages.stream(streamed).finalMessage());
    record('/v1/messages', { ...streamed, stream: true }, (o) => checkMessagesOutcome(o, m2, 'messages.stream'), 'm2');
    const toolAsk = { model, max_tokens: 40, tools: [anthropicWeather], tool_choice: { type: 'tool', name: 'get_weather' },
      messages: [{ role: 'user', content: 'Weather in Oslo?' }] };
    const t1 = messageSeen(await anthropic.messages.stream(toolAsk).finalMessage());
    assert.equal(t1.m.stop_reason, 'tool_use');
    record('/v1/messages', { ...toolAsk, stream: true }, (o) => checkMessagesOutcome(o, t1, 'tool_use streamed'), 'tools');
    const use = t1.m.content.find((b) => b.type === 'tool_use');
    const toolResult = { model, max_tokens: 40, tools: [anthropicWeather], messages: [
      ...toolAsk.messages, { role: 'assistant', content: t1.m.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp":3}' }] }] };
    const t2 = messageSeen(await anthropic.messages.create(toolResult));
    record('/v1/messages', toolResult, (o) => checkMessagesOutcome(o, t2, 'after tool_result'), 'tools');
    const forcedWhole = { ...toolAsk };
    const t3 = messageSeen(await anthropic.messages.create(forcedWhole));
    record('/v1/messages', forcedWhole, (o) => checkMessagesOutcome(o, t3, 'tool_use whole'), 't3');

    // Embeddings (the openai SDK) and rerank (plain HTTP): their usage.
    const embed = { model, input: ['embed me', 'and me'], encoding_format: 'float' };
    const e = await client.embeddings.create(embed);
    record('/v1/embeddings', embed, (o) => {
      assert.equal(o.prompt_tokens, e.usage.prompt_tokens);
      assert.equal(o.completion_tokens, null);
    });
    const rerank = { model, query: 'rivers', documents: ['the Danube', 'a mountain'], top_n: 1 };
    const rr = await (await fetch(url(proxy, '/v1/rerank'), {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(rerank),
    })).json();
    record('/v1/rerank', rerank, (o) => {
      assert.equal(o.status, 200);
      assert.equal(o.prompt_tokens, rr.usage.total_tokens);
    });

    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const rows = readLines(capturePath);
    assert.equal(rows.length, sent.length);
    const outcomes = new Array(rows.length);
    for (const o of readLines(`${capturePath}.outcomes.ndjson`)) outcomes[o.line - 1] = o;
    for (let i = 0; i < sent.length; ++i) {
      const { path, body, check } = sent[i];
      // The SDKs send their own JSON; the request each sent is the row (key order included).
      assert.deepEqual(rows[i].payload, body, `row ${i} (${path})`);
      const type = { '/v1/responses': 'responses', '/v1/messages': 'messages', '/v1/embeddings': 'embeddings',
        '/v1/rerank': 'cohere_rankings' }[path];
      assert.equal(rows[i].endpoint_type, type, `row ${i} names its API`);
      check(outcomes[i]);
    }

    // sessions: the Responses turns linked by previous_response_id (exactly), the Messages
    // tool-use loop by its messages, nothing else linked; embeddings and rerank rows unchanged.
    const linked = join(dir, 'linked.jsonl');
    const s = await run(LLMTAP, ['sessions', capturePath, '-o', linked, '--json']);
    assert.equal(s.code, 0, s.stderr);
    const report = JSON.parse(s.stdout);
    assert.deepEqual(report.responses, { rows: 7, sessions: 4, linked: 3, missing_previous: 0 });
    const ids = readLines(linked).map((r) => r.session_id);
    const conversations = sent.map((x) => x.conversation);
    for (let i = 0; i < sent.length; ++i) {
      for (let j = 0; j < sent.length; ++j) {
        if (conversations[i] === undefined || conversations[j] === undefined) continue;
        assert.equal(ids[i] === ids[j], conversations[i] === conversations[j],
          `rows ${i} (${conversations[i]}) and ${j} (${conversations[j]}): ${ids[i]} vs ${ids[j]}`);
      }
      if (conversations[i] === undefined) assert.equal(ids[i], undefined, `row ${i} has no session`);
    }
  } finally {
    await stop(proxy);
    await stop(sim);
    cleanup(dir);
  }
});

test('Responses and Messages from a FastAPI upstream streaming as vLLM does: reasoning, escapes, tool calls', async () => {
  const upstream = await startUpstream();
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const proxy = await startProxy({
    upstream: url(upstream),
    args: ['--capture', '--capture-path', capturePath, '--capture-responses', '--endpoint-pattern', '^/v1/(responses|messages)$'],
  });
  try {
    const sent = await sendResponsesAndMessagesToFastApi(proxy);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    checkCaptured(capturePath, sent);
  } finally {
    await stop(proxy);
    await stop(upstream);
    cleanup(dir);
  }
});

// A raw_payload row is the body alone: a chat body with `messages` and `max_tokens` would be
// taken by a Messages server too. The capture's manifest counts its rows by the API of their
// path, so `llmtap split` routes them exactly when the capture saw one of the two APIs only, and
// warns as before when it saw both.
test('raw_payload capture: split tells chat from Messages by the manifest, unless both were sent',
  async () => {
  const sim = await startSim();
  const dir = tempDir();
  const ask = [{ role: 'user', content: 'Name three rivers in Europe.' }];
  // One proxy run per capture: `chat` chat requests (the openai client), `messages` Messages
  // requests (the Anthropic client), both shaped alike; then split, once the manifest is final.
  const captureAndSplit = async (name, chat, messages) => {
    const capturePath = join(dir, `${name}.jsonl`);
    const proxy = await startProxy({
      upstream: url(sim),
      args: ['--capture', '--capture-path', capturePath, '--capture-format', 'raw_payload',
        '--endpoint-pattern', '^/v1/(chat/completions|messages)$'],
    });
    try {
      const client = openai(proxy);
      const anthropic = new Anthropic({ baseURL: url(proxy), apiKey: 'sk-ant-test',
        maxRetries: 0 });
      for (let i = 0; i < chat; ++i) {
        await client.chat.completions.create({ model, messages: ask, max_tokens: 8 });
      }
      for (let i = 0; i < messages; ++i) {
        await anthropic.messages.create({ model, messages: ask, max_tokens: 8 });
      }
      assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    } finally {
      await stop(proxy);
    }
    assert.equal(readLines(capturePath).length, chat + messages);
    const s = await run(LLMTAP, ['split', capturePath]);
    assert.equal(s.code, 0, s.stderr);
    const rowsIn = (api) => readLines(join(dir, `${name}.${api}.jsonl`)).length;
    return { out: s.stdout + s.stderr, chat: rowsIn('chat'), messages: rowsIn('messages') };
  };
  try {
    const chatOnly = await captureAndSplit('chat', 3, 0);
    assert.doesNotMatch(chatOnly.out, /could be chat or Anthropic Messages/);
    assert.deepEqual([chatOnly.chat, chatOnly.messages], [3, 0]);

    const messagesOnly = await captureAndSplit('messages', 0, 2);
    assert.doesNotMatch(messagesOnly.out, /could be chat or Anthropic Messages/);
    assert.deepEqual([messagesOnly.chat, messagesOnly.messages], [0, 2]);

    // Both: every row goes to chat by its shape, and the warning says why the manifest can't tell.
    const both = await captureAndSplit('both', 2, 1);
    assert.match(both.out, /3 rows \(the first on line 1\) could be chat or Anthropic Messages/);
    assert.match(both.out, /manifest counts 2 chat and 1 \/v1\/messages requests/);
    assert.deepEqual([both.chat, both.messages], [3, 0]);
  } finally {
    await stop(sim);
    cleanup(dir);
  }
});
