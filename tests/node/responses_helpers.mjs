// Shared by the capture_responses tests (proxy_responses.test.mjs, asgi_responses.test.mjs): the
// openai client's view of choice 0's text, and the check that an outcome line's "response" is
// that text byte for byte.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { url, readLines } from './proxy_helpers.mjs';

export const messages = [{ role: 'user', content: 'Name three rivers in Europe.' }];
export const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } },
];

// The client's timeout is a guard against a hang only (a loaded machine only adds delay).
export function openai(server) {
  return new OpenAI({ baseURL: url(server, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 60000 });
}

// Calls the API as the openai client does and returns choice 0's text as the client has it:
// streamed deltas concatenated, tool calls by their index, arguments fragments joined.
export async function call(client, kind, params) {
  const api = kind === 'chat' ? client.chat.completions : client.completions;
  if (!params.stream) {
    const r = await api.create(params);
    const c = r.choices.find((x) => x.index === 0);
    if (kind !== 'chat') return { text: c.text, reasoning: '', tool_calls: [] };
    return {
      text: c.message.content ?? '',
      reasoning: c.message.reasoning_content ?? '',
      tool_calls: (c.message.tool_calls ?? []).map((t) => ({ name: t.function.name, arguments: t.function.arguments })),
    };
  }
  const seen = { text: '', reasoning: '', calls: new Map() };
  for await (const chunk of await api.create(params)) {
    for (const c of chunk.choices) {
      if (c.index !== 0) continue;
      if (kind !== 'chat') {
        seen.text += c.text ?? '';
        continue;
      }
      seen.text += c.delta.content ?? '';
      seen.reasoning += c.delta.reasoning_content ?? '';
      for (const t of c.delta.tool_calls ?? []) {
        const entry = seen.calls.get(t.index) ?? { name: '', arguments: '' };
        entry.name += t.function?.name ?? '';
        entry.arguments += t.function?.arguments ?? '';
        seen.calls.set(t.index, entry);
      }
    }
  }
  const tool_calls = [...seen.calls.entries()].sort((a, b) => a[0] - b[0]).map((e) => e[1]);
  return { text: seen.text, reasoning: seen.reasoning, tool_calls };
}

function assertSameBytes(actual, expected, what) {
  assert.equal(actual, expected, what);
  assert.ok(Buffer.from(actual, 'utf8').equals(Buffer.from(expected, 'utf8')), `${what}: bytes`);
}

export function assertResponseIsWhatTheClientSaw(outcome, seen, what) {
  assert.deepEqual(Object.keys(outcome).slice(-2), ['error', 'response'], what);
  const r = outcome.response;
  assert.deepEqual(Object.keys(r), ['text', 'reasoning', 'tool_calls', 'truncated'], what);
  assertSameBytes(r.text, seen.text, `${what}: text`);
  assertSameBytes(r.reasoning, seen.reasoning, `${what}: reasoning`);
  assert.equal(r.tool_calls.length, seen.tool_calls.length, `${what}: tool calls`);
  for (let i = 0; i < seen.tool_calls.length; ++i) {
    assertSameBytes(r.tool_calls[i].name, seen.tool_calls[i].name, `${what}: tool call ${i} name`);
    assertSameBytes(r.tool_calls[i].arguments, seen.tool_calls[i].arguments, `${what}: tool call ${i} arguments`);
  }
  assert.equal(r.truncated, false, what);
}

// ---- The Responses and Messages APIs (the openai and @anthropic-ai/sdk clients) ----

// What an openai Responses client received: text, function calls, usage, status, id.
export async function responses(client, params) {
  if (!params.stream) {
    const r = await client.responses.create(params);
    const calls = r.output.filter((i) => i.type === 'function_call').map((i) => ({ name: i.name, arguments: i.arguments }));
    const reasoning = r.output.filter((i) => i.type === 'reasoning')
      .flatMap((i) => i.content ?? []).map((c) => c.text).join('');
    return { r, text: r.output_text, reasoning, calls };
  }
  let text = '';
  let reasoning = '';
  const calls = new Map();
  let r = null;
  for await (const event of await client.responses.create(params)) {
    if (event.type === 'response.output_text.delta') text += event.delta;
    if (event.type === 'response.reasoning_text.delta') reasoning += event.delta;
    if (event.type === 'response.output_item.added' && event.item.type === 'function_call') {
      calls.set(event.output_index, { name: event.item.name, arguments: '' });
    }
    if (event.type === 'response.function_call_arguments.delta') calls.get(event.output_index).arguments += event.delta;
    if (event.type === 'response.completed') r = event.response;
  }
  assert.ok(r, 'the stream ended with response.completed');
  return { r, text, reasoning, calls: [...calls.values()] };
}

export function checkResponsesOutcome(o, seen, what) {
  const { r } = seen;
  assert.equal(o.status, 200, what);
  assert.equal(o.response_id, r.id, `${what}: response_id`);
  assert.equal(o.prompt_tokens, r.usage.input_tokens, `${what}: prompt_tokens`);
  assert.equal(o.completion_tokens, r.usage.output_tokens, `${what}: completion_tokens`);
  assert.equal(o.finish_reason, r.incomplete_details?.reason ?? r.status, `${what}: finish_reason`);
  assert.equal(o.response.text, seen.text, `${what}: text`);
  assert.equal(o.response.reasoning, seen.reasoning, `${what}: reasoning`);
  assert.deepEqual(o.response.tool_calls, seen.calls, `${what}: tool calls`);
  assert.equal(o.response.truncated, false);
  assert.ok(o.ttft_ms > 0 && o.ttft_ms <= o.latency_ms, `${what}: ttft ${o.ttft_ms}`);
}

// What an Anthropic client received (a whole message either way).
export function messageSeen(m) {
  const text = m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  const reasoning = m.content.filter((b) => b.type === 'thinking').map((b) => b.thinking).join('');
  const calls = m.content.filter((b) => b.type === 'tool_use').map((b) => ({ name: b.name, input: b.input }));
  return { m, text, reasoning, calls };
}

export function checkMessagesOutcome(o, seen, what) {
  const { m } = seen;
  const u = m.usage;
  assert.equal(o.status, 200, what);
  assert.equal(o.response_id, m.id, `${what}: response_id`);
  assert.equal(o.prompt_tokens, u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0),
    `${what}: prompt_tokens (cached tokens included)`);
  assert.equal(o.completion_tokens, u.output_tokens, `${what}: completion_tokens`);
  assert.equal(o.finish_reason, m.stop_reason, `${what}: finish_reason`);
  assert.equal(o.response.text, seen.text, `${what}: text`);
  assert.equal(o.response.reasoning, seen.reasoning, `${what}: reasoning`);
  assert.equal(o.response.tool_calls.length, seen.calls.length, `${what}: tool calls`);
  seen.calls.forEach((c, i) => {
    assert.equal(o.response.tool_calls[i].name, c.name);
    assert.deepEqual(JSON.parse(o.response.tool_calls[i].arguments), c.input, `${what}: tool input`);
  });
  assert.ok(o.ttft_ms > 0 && o.ttft_ms <= o.latency_ms, `${what}: ttft ${o.ttft_ms}`);
}

// Responses and Messages requests to the FastAPI upstream (tests/upstream/app.py, answering as
// vLLM does: reasoning first for the model "reasoning", unicode escapes for "unicode", a call
// per tool of the first two) through `server` (a proxy or the middleware), with the openai and
// Anthropic clients. Returns [{ body, check(outcome) }] in the order sent.
export async function sendResponsesAndMessagesToFastApi(server) {
  const { default: Anthropic } = await import('@anthropic-ai/sdk');
  const client = openai(server);
  const anthropic = new Anthropic({ baseURL: url(server), apiKey: 'sk-ant-test', maxRetries: 0 });
  const functions = [{ type: 'function', name: 'get_weather', parameters: { type: 'object' } },
    { type: 'function', name: 'get_time', parameters: { type: 'object' } }];
  const anthropicTools = functions.map((f) => ({ name: f.name, input_schema: f.parameters }));
  const sent = [];
  for (const stream of [true, false]) {
    for (const extra of [{ model: 'reasoning', max_output_tokens: 4 }, { model: 'unicode', max_output_tokens: 7 },
      { model: 'vllm-like', tools: functions }]) {
      const body = { input: 'Name three rivers.', ...extra, stream };
      const seen = await responses(client, body);
      sent.push({ body, check: (o) => checkResponsesOutcome(o, seen, `responses ${extra.model} stream=${stream}`) });
    }
    for (const extra of [{ model: 'reasoning', max_tokens: 4 }, { model: 'unicode', max_tokens: 7 },
      { model: 'vllm-like', max_tokens: 9, tools: anthropicTools }]) {
      const body = { messages: [{ role: 'user', content: 'Name three rivers.' }], ...extra };
      const m = stream ? await anthropic.messages.stream(body).finalMessage() : await anthropic.messages.create(body);
      const seen = messageSeen(m);
      sent.push({ body: stream ? { ...body, stream: true } : body,
        check: (o) => checkMessagesOutcome(o, seen, `messages ${extra.model} stream=${stream}`) });
    }
  }
  return sent;
}

// The capture at `capturePath` holds each of `sent` as sent ({ body, check(outcome) }), in order,
// and each one's outcome line passes its check.
export function checkCaptured(capturePath, sent) {
  const rows = readLines(capturePath);
  assert.deepEqual(rows.map((r) => r.payload), sent.map((s) => s.body));
  const outcomes = new Array(rows.length);
  for (const o of readLines(`${capturePath}.outcomes.ndjson`)) outcomes[o.line - 1] = o;
  sent.forEach((s, i) => s.check(outcomes[i]));
}
