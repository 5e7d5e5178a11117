// Protocol conformance of `llmtap sim` through the official `openai` client.
// run_sim_tests.sh starts the server (serving the model names 'llmtap-sim' and 'm') and passes
// its base URL in LLMTAP_SIM_URL.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const base = process.env.LLMTAP_SIM_URL;
if (!base) throw new Error('LLMTAP_SIM_URL is not set; run through run_sim_tests.sh');
const root = base.replace(/\/v1$/, '');
// The client's timeout is a guard against a hang only (a loaded machine only adds delay).
const client = new OpenAI({ baseURL: base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });

const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Name three rivers in Europe.' },
];

function checkUsage(usage, completionTokens) {
  assert.equal(typeof usage.prompt_tokens, 'number');
  assert.ok(usage.prompt_tokens > 0);
  assert.equal(usage.completion_tokens, completionTokens);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.equal(typeof usage.prompt_tokens_details.cached_tokens, 'number');
}

test('chat completion, non-streaming', async () => {
  const r = await client.chat.completions.create({ model: 'llmtap-sim', messages, max_tokens: 7 });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, 'llmtap-sim');
  assert.equal(typeof r.created, 'number');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  checkUsage(r.usage, 7);
});

test('chat completion, max_completion_tokens and no limit', async () => {
  const a = await client.chat.completions.create({
    model: 'm', messages, max_completion_tokens: 3,
  });
  assert.equal(a.usage.completion_tokens, 3);
  assert.equal(a.choices[0].finish_reason, 'length');
  const b = await client.chat.completions.create({ model: 'm', messages });
  assert.equal(b.choices[0].finish_reason, 'stop');
  assert.ok(b.usage.completion_tokens >= 1);
});

test('chat completion, streaming with usage, same text as non-streaming', async () => {
  const stream = await client.chat.completions.create({
    model: 'llmtap-sim', messages, max_tokens: 12, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 3);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  let text = '';
  let finish = null;
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, chunks[0].id);
    assert.equal(c.model, 'llmtap-sim');
    if (c.choices.length) {
      text += c.choices[0].delta.content ?? '';
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
  }
  assert.equal(finish, 'length');
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  checkUsage(last.usage, 12);

  const whole = await client.chat.completions.create({ model: 'llmtap-sim', messages, max_tokens: 12 });
  assert.equal(whole.choices[0].message.content, text);
});

test('chat completion, streaming without usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'm', messages, max_tokens: 5, stream: true,
  });
  let n = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.choices.length, 1);
    assert.equal(chunk.usage ?? null, null);
    n++;
  }
  assert.equal(n, 6);  // the role chunk, then one chunk per token
});

test('completion, non-streaming and streaming', async () => {
  const prompt = 'Once upon a time, in a small village by the sea,';
  const r = await client.completions.create({ model: 'llmtap-sim', prompt, max_tokens: 9 });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, 'llmtap-sim');
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  checkUsage(r.usage, 9);

  const stream = await client.completions.create({
    model: 'llmtap-sim', prompt, max_tokens: 9, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  for await (const c of stream) {
    assert.equal(c.object, 'text_completion');
    if (c.choices.length) text += c.choices[0].text;
    if (c.usage) usage = c.usage;
  }
  assert.equal(text, r.choices[0].text);
  checkUsage(usage, 9);
});

test('models list', async () => {
  const page = await client.models.list();
  const ids = [];
  for await (const m of page) ids.push(m.id);
  assert.deepEqual(ids, ['llmtap-sim', 'm']);
});

test('model names as vLLM serves them: the first named in answers, others 404 NotFoundError', async () => {
  const r = await client.chat.completions.create({ model: 'm', messages, max_tokens: 2 });
  assert.equal(r.model, 'llmtap-sim');  // vLLM answers with its first served name
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.param === 'model' &&
      e.type === 'NotFoundError' && /The model `gpt-4o` does not exist\./.test(e.message));
  await assert.rejects(
    client.completions.create({ model: 'gpt-4o', prompt: 'x', max_tokens: 2, stream: true }),
    (e) => e instanceof OpenAI.NotFoundError);
});

test('n = 3: choices indexed 0..2, streamed choices assembled by the client equal the whole ones', async () => {
  const req = { model: 'llmtap-sim', messages, n: 3, max_tokens: 6 };
  const whole = await client.chat.completions.create(req);
  assert.deepEqual(whole.choices.map((c) => c.index), [0, 1, 2]);
  checkUsage(whole.usage, 18);
  // The client's stream helper joins the deltas of each choice by its index.
  const streamed = await client.chat.completions.stream(req).finalChatCompletion();
  assert.deepEqual(streamed.choices.map((c) => [c.index, c.message.content, c.finish_reason]),
    whole.choices.map((c) => [c.index, c.message.content, c.finish_reason]));
  const texts = await client.completions.create({ model: 'm', prompt: 'Once', n: 2, max_tokens: 4 });
  assert.deepEqual(texts.choices.map((c) => c.index), [0, 1]);
  assert.notEqual(texts.choices[0].text, texts.choices[1].text);
  checkUsage(texts.usage, 8);
});

test('errors: missing messages / prompt are 400 BadRequestError', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'm' }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
      /messages/.test(e.message) && e.param === 'messages');
  await assert.rejects(
    client.completions.create({ model: 'm', max_tokens: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'prompt');
  await assert.rejects(
    client.chat.completions.create({ model: 'm', messages, max_tokens: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
});

test('integers beyond 64 bits: ignored where unread; an out-of-range seed is 400', async () => {
  // JSON.stringify cannot write such an integer: the client's body gets it in place of a marker
  // ("BIG", "-BIG").
  const big = '123456789012345678901234567890';
  const bigClient = new OpenAI({
    baseURL: base, apiKey: 'unused', maxRetries: 0, timeout: 60000,
    fetch: (url, init) =>
      fetch(url, { ...init, body: init.body.replace(/"(-?)BIG"/g, `$1${big}`) }),
  });
  const r = await bigClient.chat.completions.create(
    { model: 'm', messages, max_tokens: 4, extra_field: 'BIG', nested: { list: ['BIG', '-BIG'] } });
  assert.equal(r.choices[0].finish_reason, 'length');
  for (const [seed, bound] of [['BIG', /less than or equal to 9223372036854775807/],
    ['-BIG', /greater than or equal to -9223372036854775808/]]) {
    await assert.rejects(
      bigClient.chat.completions.create({ model: 'm', messages, max_tokens: 4, seed }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'seed' &&
        /'seed'/.test(e.message) && bound.test(e.message), seed);
  }
  await assert.rejects(
    bigClient.completions.create({ model: 'm', prompt: 'Hi', max_tokens: 'BIG' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens' &&
      /'max_tokens' is more than this server's maximum/.test(e.message));
});

test('errors: unknown path is 404 NotFoundError', async () => {
  await assert.rejects(client.get('/no/such/path'),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

test('errors: invalid JSON is 400, wrong method is 405, in the OpenAI error shape', async () => {
  let r = await fetch(`${base}/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model": ',
  });
  assert.equal(r.status, 400);
  let body = await r.json();
  assert.equal(typeof body.error.message, 'string');
  assert.equal(body.error.type, 'BadRequestError');  // vLLM's error shape
  assert.equal(body.error.code, 400);
  assert.ok('param' in body.error);

  r = await fetch(`${base}/chat/completions`);
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'POST');
  body = await r.json();
  assert.equal(typeof body.error.message, 'string');
});

test('prefix cache: a repeated long prompt reports cached tokens', async () => {
  const prompt = Array.from({ length: 60 }, (_, i) => `line ${i}: the quick brown fox`).join('\n');
  const a = await client.completions.create({ model: 'm', prompt, max_tokens: 2 });
  const b = await client.completions.create({ model: 'm', prompt, max_tokens: 2 });
  assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens > a.usage.prompt_tokens / 2);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens < b.usage.prompt_tokens);
});

test('health and metrics', async () => {
  const h = await fetch(`${root}/health`);
  assert.equal(h.status, 200);
  const m = await fetch(`${base}/metrics`);
  assert.equal(m.status, 200);
  assert.match(m.headers.get('content-type'), /^text\/plain/);
  const text = await m.text();
  for (const name of ['vllm:spec_decode_num_drafts_total', 'vllm:spec_decode_num_draft_tokens_total',
    'vllm:spec_decode_num_accepted_tokens_total', 'vllm:prefix_cache_hits_total',
    'vllm:prefix_cache_queries_total']) {
    assert.match(text, new RegExp(`^${name}\\{[^}]*\\} \\d+$`, 'm'), name);
  }
  const hits = Number(text.match(/^vllm:prefix_cache_hits_total\{[^}]*\} (\d+)$/m)[1]);
  assert.ok(hits > 0);
});

// Embeddings (api/embeddings.h): the SDK asks for base64 unless told otherwise and decodes it;
// both encodings carry the same float32 values. Vectors are unit length, the same for the same
// text, and closer for texts sharing words.
test('embeddings: base64 (the SDK default) and float agree, dimensions, usage, similarity', async () => {
  const inputs = ['the river flows to the sea', 'a river flows into the sea', 'quarterly tax forms'];
  const b64 = await client.embeddings.create({ model: 'llmtap-sim', input: inputs });
  assert.equal(b64.object, 'list');
  assert.equal(b64.model, 'llmtap-sim');
  assert.equal(b64.data.length, 3);
  assert.ok(b64.usage.prompt_tokens > 0);
  assert.equal(b64.usage.total_tokens, b64.usage.prompt_tokens);
  const flt = await client.embeddings.create({ model: 'm', input: inputs, encoding_format: 'float' });
  const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
  for (let i = 0; i < 3; ++i) {
    const a = b64.data[i].embedding;
    const b = flt.data[i].embedding;
    assert.equal(b64.data[i].index, i);
    assert.equal(a.length, 1024);
    assert.deepEqual(b.map(Math.fround), a, `input ${i}: float and base64 differ`);
    assert.ok(Math.abs(dot(a, a) - 1) < 1e-5, `input ${i} is not unit length`);
  }
  const [x, y, z] = b64.data.map((d) => d.embedding);
  assert.ok(dot(x, y) > dot(x, z) + 0.2, `similar texts ${dot(x, y)}, unrelated ${dot(x, z)}`);

  const small = await client.embeddings.create({ model: 'm', input: 'one text', dimensions: 64 });
  assert.equal(small.data[0].embedding.length, 64);
  const again = await client.embeddings.create({ model: 'm', input: 'one text', dimensions: 64 });
  assert.deepEqual(again.data[0].embedding, small.data[0].embedding);
  const tokens = await client.embeddings.create({ model: 'm', input: [[1, 2, 3, 4]] });
  assert.equal(tokens.usage.prompt_tokens, 4);

  await assert.rejects(client.embeddings.create({ model: 'nope', input: 'x' }), (e) => {
    assert.equal(e.status, 404);
    assert.equal(e.error.message, 'The model `nope` does not exist.');
    return true;
  });
  await assert.rejects(client.embeddings.create({ model: 'm', input: [] }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error.param, 'input');
    return true;
  });
});

// Rerank (api/rerank.h) on every path vLLM serves it: results by relevance, top_n, documents as
// strings or {text}, the vLLM error shape for a bad request.
test('rerank: /v1/rerank, /v2/rerank, /rerank rank the document sharing the query words first', async () => {
  const documents = ['quarterly tax forms', { text: 'rivers of Europe: the Danube and the Rhine' }, 'a cat sleeps'];
  for (const path of ['/v1/rerank', '/v2/rerank', '/rerank']) {
    const res = await fetch(root + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', query: 'which rivers flow through Europe', documents, top_n: 2 }),
    });
    assert.equal(res.status, 200, path);
    const j = await res.json();
    assert.match(j.id, /^rerank-/);
    assert.equal(j.model, 'llmtap-sim'); // answers name the first served name, as vLLM's do
    assert.ok(j.usage.total_tokens > 0);
    assert.equal(j.results.length, 2, path);
    assert.equal(j.results[0].index, 1, path);
    assert.equal(j.results[0].document.text, documents[1].text);
    assert.ok(j.results[0].relevance_score >= j.results[1].relevance_score);
    for (const r of j.results) assert.ok(r.relevance_score >= 0 && r.relevance_score <= 1);
  }
  const bad = await fetch(root + '/v1/rerank', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"query":"q"}',
  });
  assert.equal(bad.status, 400);
  const e = await bad.json();
  assert.equal(e.error.param, 'documents');
  assert.equal(e.error.code, 400);
  const get = await fetch(root + '/v1/embeddings');
  assert.equal(get.status, 405);
  assert.equal(get.headers.get('allow'), 'POST');
});

// --- The Responses API (POST /v1/responses) ---

const weatherTools = [
  { type: 'function', name: 'get_weather', parameters: { type: 'object', properties: {} } },
  { type: 'function', name: 'get_time', parameters: { type: 'object', properties: {} } },
];

function checkResponseUsage(usage, outputTokens) {
  assert.ok(usage.input_tokens > 0);
  if (outputTokens !== undefined) assert.equal(usage.output_tokens, outputTokens);
  assert.equal(usage.total_tokens, usage.input_tokens + usage.output_tokens);
  assert.equal(typeof usage.input_tokens_details.cached_tokens, 'number');
  assert.equal(usage.output_tokens_details.reasoning_tokens, 0);
}

test('responses: non-streamed, a message item; max_output_tokens makes it incomplete', async () => {
  const r = await client.responses.create({
    model: 'm', input: 'Name three rivers in Europe.', instructions: 'You are terse.',
  });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, 'response');
  assert.equal(r.model, 'llmtap-sim');
  assert.equal(typeof r.created_at, 'number');
  assert.equal(r.status, 'completed');
  assert.equal(r.incomplete_details, null);
  assert.equal(r.instructions, 'You are terse.');
  assert.equal(r.store, true);
  assert.equal(r.output.length, 1);
  const item = r.output[0];
  assert.equal(item.type, 'message');
  assert.match(item.id, /^msg_/);
  assert.equal(item.role, 'assistant');
  assert.equal(item.content[0].type, 'output_text');
  assert.ok(item.content[0].text.length > 0);
  assert.equal(r.output_text, item.content[0].text);  // the SDK's own join of the output text
  checkResponseUsage(r.usage);

  const capped = await client.responses.create({
    model: 'm',
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Name three rivers.' }] }],
    max_output_tokens: 5,
  });
  assert.equal(capped.status, 'incomplete');
  assert.equal(capped.incomplete_details.reason, 'max_output_tokens');
  assert.equal(capped.max_output_tokens, 5);
  checkResponseUsage(capped.usage, 5);
});

test('responses: streamed events in the SDK types and order, deltas joining to the text', async () => {
  const params = { model: 'm', input: 'Tell me about the Danube.', max_output_tokens: 12, store: false };
  const stream = await client.responses.create({ ...params, stream: true });
  const events = [];
  for await (const event of stream) events.push(event);  // ends with the server's stream
  const types = events.map((e) => e.type);
  const deltas = types.filter((t) => t === 'response.output_text.delta').length;
  assert.ok(deltas >= 1);
  assert.deepEqual(types, [
    'response.created', 'response.in_progress', 'response.output_item.added',
    'response.content_part.added', ...Array(deltas).fill('response.output_text.delta'),
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.completed',
  ]);
  events.forEach((e, i) => assert.equal(e.sequence_number, i));
  const created = events[0].response;
  assert.equal(created.status, 'in_progress');
  assert.deepEqual(created.output, []);
  const itemId = events[2].item.id;
  let text = '';
  for (const e of events.filter((x) => x.type === 'response.output_text.delta')) {
    assert.equal(e.item_id, itemId);
    assert.equal(e.output_index, 0);
    assert.equal(e.content_index, 0);
    text += e.delta;
  }
  const done = events.at(-1).response;
  assert.equal(done.id, created.id);
  assert.equal(done.status, 'incomplete');
  assert.equal(done.output[0].content[0].text, text);
  assert.equal(events.find((e) => e.type === 'response.output_text.done').text, text);
  checkResponseUsage(done.usage, 12);
  // The same request not streamed: the same text (determinism under the server's seed).
  const whole = await client.responses.create(params);
  assert.equal(whole.output_text, text);
  // The SDK's stream helper accumulates the same response from the events (its final response
  // has no output_text join; the item's text is the accumulated deltas).
  const final = await client.responses.stream(params).finalResponse();
  assert.equal(final.status, 'incomplete');
  assert.equal(final.output[0].content[0].text, text);
});

test('responses: a tool-call loop through previous_response_id', async () => {
  const first = await client.responses.create({
    model: 'm', input: 'What is the weather in Paris?', tools: weatherTools, tool_choice: 'required',
  });
  assert.equal(first.output.length, 1);
  const call = first.output[0];
  assert.equal(call.type, 'function_call');
  assert.equal(call.name, 'get_weather');
  assert.match(call.call_id, /^call_/);
  assert.equal(typeof JSON.parse(call.arguments).input, 'string');
  assert.equal(first.tool_choice, 'required');
  assert.equal(first.tools.length, 2);

  const named = await client.responses.create({
    model: 'm', input: 'What time is it?', tools: weatherTools,
    tool_choice: { type: 'function', name: 'get_time' }, stream: true,
  });
  const types = [];
  let args = '';
  let doneCall;
  for await (const e of named) {
    types.push(e.type);
    if (e.type === 'response.function_call_arguments.delta') args += e.delta;
    if (e.type === 'response.output_item.done') doneCall = e.item;
  }
  assert.ok(!types.includes('response.output_text.delta'));
  assert.equal(types.at(-1), 'response.completed');
  assert.equal(doneCall.type, 'function_call');
  assert.equal(doneCall.name, 'get_time');
  assert.equal(doneCall.arguments, args);
  assert.doesNotThrow(() => JSON.parse(args));

  const second = await client.responses.create({
    model: 'm', previous_response_id: first.id, tools: weatherTools,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"celsius":21}' }],
  });
  assert.equal(second.previous_response_id, first.id);
  assert.equal(second.output[0].type, 'message');
  assert.ok(second.output_text.length > 0);
  // The history (the first input and its call) is in the prompt.
  assert.ok(second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens);
});

test('responses: previous_response_id chains carry the conversation, input_tokens grow', async () => {
  const turns = [
    'Plan a three day trip along the Rhine, with one town per day.',
    'Which of those towns has the oldest bridge?',
    'And where would you stay there?',
    'Summarize the plan in one sentence.',
  ];
  let previous;
  const usages = [];
  const outputs = [];
  for (const input of turns) {
    const r = await client.responses.create({
      model: 'm', input, previous_response_id: previous, max_output_tokens: 24,
      instructions: 'You are a travel agent.',
    });
    assert.equal(r.previous_response_id, previous ?? null);
    usages.push(r.usage);
    outputs.push(r.output_text);
    previous = r.id;
  }
  for (let i = 1; i < usages.length; i++) {
    // Each turn's prompt is the previous prompt, its answer and the new input.
    assert.ok(usages[i].input_tokens > usages[i - 1].input_tokens + usages[i - 1].output_tokens,
      `turn ${i}: ${usages[i].input_tokens} after ${usages[i - 1].input_tokens}`);
    assert.ok(usages[i].input_tokens_details.cached_tokens > 0, `turn ${i} hit no cache`);
  }
  // The same conversation sent whole, without the store: the same prompt, so the same tokens.
  const manual = [];
  for (let i = 0; i < turns.length - 1; i++) {
    manual.push({ role: 'user', content: turns[i] });
    manual.push({ role: 'assistant', content: [{ type: 'output_text', text: outputs[i] }] });
  }
  manual.push({ role: 'user', content: turns.at(-1) });
  const whole = await client.responses.create({
    model: 'm', input: manual, max_output_tokens: 24, instructions: 'You are a travel agent.',
    store: false,
  });
  assert.equal(whole.usage.input_tokens, usages.at(-1).input_tokens);
  assert.equal(whole.output_text, outputs.at(-1));
  // A response not stored cannot be continued.
  await assert.rejects(
    client.responses.create({ model: 'm', input: 'x', previous_response_id: whole.id }),
    (e) => e instanceof OpenAI.NotFoundError);
});

test('responses: an unknown previous_response_id is a 404 NotFoundError; 400 and 405 as vLLM', async () => {
  await assert.rejects(
    client.responses.create({ model: 'm', input: 'x', previous_response_id: 'resp_nope' }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 &&
      e.type === 'NotFoundError' && e.param === 'previous_response_id' &&
      /resp_nope/.test(e.message));
  await assert.rejects(
    client.responses.create({ model: 'm', input: 'x', previous_response_id: 'resp_nope', stream: true }),
    (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.responses.create({ model: 'm' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
  await assert.rejects(client.responses.create({ model: 'm', input: 'x', tool_choice: 'required' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
  await assert.rejects(client.responses.create({ model: 'gpt-4o', input: 'x' }),
    (e) => e instanceof OpenAI.NotFoundError && e.param === 'model');
  const r = await fetch(`${base}/responses`);
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'POST');
  assert.equal((await r.json()).error.code, 405);
});
