// Anthropic's Messages API on `llmtap sim` (POST /v1/messages), through the official
// `@anthropic-ai/sdk` client. run_sim_tests.sh starts the server (serving the model names
// 'llmtap-sim' and 'm', output lengths drawn around 20 tokens) and passes its base URL in
// LLMTAP_SIM_URL. Every wait is bounded by the server's answer or the connection's end, none by
// a clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const base = process.env.LLMTAP_SIM_URL;
if (!base) throw new Error('LLMTAP_SIM_URL is not set; run through run_sim_tests.sh');
const root = base.replace(/\/v1$/, '');
// The SDK appends /v1/messages to its baseURL.
const client = new Anthropic({ baseURL: root, apiKey: 'unused', maxRetries: 0 });

const system = 'You are terse.';
const messages = [{ role: 'user', content: 'Name three rivers in Europe.' }];

function checkUsage(usage, outputTokens) {
  assert.equal(typeof usage.input_tokens, 'number');
  assert.equal(typeof usage.cache_read_input_tokens, 'number');
  assert.equal(usage.cache_creation_input_tokens, 0);
  assert.ok(usage.input_tokens + usage.cache_read_input_tokens > 0);
  if (outputTokens !== undefined) assert.equal(usage.output_tokens, outputTokens);
  assert.ok(usage.output_tokens >= 1);
}

test('messages.create, non-streamed: a text message ending its turn', async () => {
  const m = await client.messages.create({ model: 'llmtap-sim', system, messages, max_tokens: 400 });
  assert.match(m.id, /^msg_[0-9a-f]{32}$/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, 'llmtap-sim');
  assert.equal(m.content.length, 1);
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0);
  // max_tokens caps the drawn length (around 20 here): the model ends its turn first.
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  checkUsage(m.usage);
  assert.ok(m.usage.output_tokens < 400);
});

test('max_tokens reached: stop_reason max_tokens, output_tokens = max_tokens', async () => {
  const m = await client.messages.create({ model: 'm', system, messages, max_tokens: 3 });
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.model, 'llmtap-sim');  // answers name the first served name, as chat's
  checkUsage(m.usage, 3);
  const s = await client.messages.stream({ model: 'm', system, messages, max_tokens: 3 }).finalMessage();
  assert.equal(s.stop_reason, 'max_tokens');
  assert.equal(s.content[0].text, m.content[0].text);
  checkUsage(s.usage, 3);
});

test('messages.stream: events in order, finalMessage() is the deltas joined and the whole answer', async () => {
  const stream = client.messages.stream({ model: 'llmtap-sim', system, messages, max_tokens: 400 });
  const types = [];
  let text = '';
  let id = null;
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'message_start') {
      id = event.message.id;
      assert.deepEqual(event.message.content, []);
      assert.equal(event.message.stop_reason, null);
      assert.equal(event.message.model, 'llmtap-sim');
      assert.ok(event.message.usage.input_tokens > 0);
    } else if (event.type === 'content_block_start') {
      assert.equal(event.index, 0);
      assert.deepEqual(event.content_block, { type: 'text', text: '' });
    } else if (event.type === 'content_block_delta') {
      assert.equal(event.index, 0);
      assert.equal(event.delta.type, 'text_delta');
      text += event.delta.text;
    } else if (event.type === 'message_delta') {
      assert.equal(event.delta.stop_reason, 'end_turn');
      assert.ok(event.usage.output_tokens >= 1);
    }
  }
  const deltas = types.filter((t) => t === 'content_block_delta').length;
  assert.ok(deltas >= 1);
  assert.deepEqual(types, ['message_start', 'content_block_start',
    ...Array(deltas).fill('content_block_delta'), 'content_block_stop', 'message_delta',
    'message_stop']);
  const final = await stream.finalMessage();
  assert.equal(final.id, id);
  assert.equal(final.content.length, 1);
  assert.equal(final.content[0].text, text);
  assert.equal(final.stop_reason, 'end_turn');
  checkUsage(final.usage);
  // A delta per engine step: one token, or more when a speculative draft is accepted.
  assert.ok(final.usage.output_tokens >= deltas);
  // The same request not streamed: the same text and token counts (deterministic).
  const whole = await client.messages.create({ model: 'llmtap-sim', system, messages, max_tokens: 400 });
  assert.equal(whole.content[0].text, text);
  assert.equal(whole.usage.output_tokens, final.usage.output_tokens);
  assert.equal(whole.usage.input_tokens + whole.usage.cache_read_input_tokens,
    final.usage.input_tokens + final.usage.cache_read_input_tokens);
});

test('the stream on the wire: event names, a ping, each data object typed as its event', async () => {
  const r = await fetch(`${base}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'llmtap-sim', messages, max_tokens: 4, stream: true }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const body = await r.text();  // ends with the response
  assert.ok(body.endsWith('\n\n'));
  const events = body.slice(0, -2).split('\n\n').map((e) => {
    const m = /^event: ([a-z_]+)\ndata: (.*)$/.exec(e);
    assert.ok(m, e);
    const data = JSON.parse(m[2]);
    assert.equal(data.type, m[1]);
    return data;
  });
  const deltas = events.length - 6;
  assert.ok(deltas >= 1 && deltas <= 4);  // a delta per engine step, 4 tokens in all
  assert.deepEqual(events.map((e) => e.type), ['message_start', 'content_block_start', 'ping',
    ...Array(deltas).fill('content_block_delta'), 'content_block_stop', 'message_delta',
    'message_stop']);
  const end = events.at(-2);
  assert.equal(end.delta.stop_reason, 'max_tokens');
  assert.equal(end.usage.output_tokens, 4);
});

test('tool use loop: tool_choice any -> tool_use -> tool_result -> a text answer', async () => {
  const tools = [{
    name: 'get_weather',
    description: 'The weather in a city.',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  }];
  const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const first = await client.messages.create({
    model: 'llmtap-sim', system, messages: ask, tools, tool_choice: { type: 'any' }, max_tokens: 64,
  });
  assert.equal(first.stop_reason, 'tool_use');
  assert.equal(first.content.length, 1);
  const use = first.content[0];
  assert.equal(use.type, 'tool_use');
  assert.match(use.id, /^toolu_[0-9a-f]+$/);
  assert.equal(use.name, 'get_weather');
  assert.equal(typeof use.input.input, 'string');
  assert.ok(use.input.input.length > 0);

  // Streamed, the SDK assembles the input from its input_json_delta pieces: the same block.
  const streamed = await client.messages.stream({
    model: 'llmtap-sim', system, messages: ask, tools,
    tool_choice: { type: 'tool', name: 'get_weather' }, max_tokens: 64,
  }).finalMessage();
  assert.equal(streamed.stop_reason, 'tool_use');
  assert.equal(streamed.content[0].type, 'tool_use');
  assert.equal(streamed.content[0].name, 'get_weather');
  assert.deepEqual(streamed.content[0].input, use.input);

  const answer = await client.messages.create({
    model: 'llmtap-sim', system, tools, max_tokens: 400,
    messages: [...ask, { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 C.' }] }],
  });
  assert.equal(answer.stop_reason, 'end_turn');
  assert.equal(answer.content[0].type, 'text');
  assert.ok(answer.content[0].text.length > 0);
  // The conversation grew: more prompt tokens than the first turn's.
  assert.ok(answer.usage.input_tokens + answer.usage.cache_read_input_tokens >
    first.usage.input_tokens + first.usage.cache_read_input_tokens);
});

test('missing max_tokens: the SDK raises a 400 invalid_request_error', async () => {
  await assert.rejects(
    client.messages.create({ model: 'llmtap-sim', messages }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 &&
      e.type === 'invalid_request_error' && /max_tokens/.test(e.apiMessage) &&
      e.error.type === 'error');
});

test('unknown model: 404 not_found_error, streamed or not', async () => {
  for (const stream of [false, true]) {
    await assert.rejects(
      client.messages.create({ model: 'claude-nope', messages, max_tokens: 5, stream }),
      (e) => e instanceof Anthropic.NotFoundError && e.status === 404 &&
        e.type === 'not_found_error' && /claude-nope/.test(e.apiMessage));
  }
});

test('wrong method: 405 in Anthropic error shape', async () => {
  const r = await fetch(`${base}/messages`);
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'POST');
  const body = await r.json();
  assert.equal(body.type, 'error');
  assert.equal(body.error.type, 'invalid_request_error');
  assert.equal(typeof body.error.message, 'string');
});

// The sim renders a Messages request as the chat request vLLM turns it into (api/prompt.h): a
// conversation with a system prompt, a tool_use and its tool_result costs the same prompt tokens
// and gets the same answer through either API.
test('a Messages conversation renders as its chat equivalent: the same prompt tokens and answer', async () => {
  const system = 'You are a careful assistant.';
  const use = { type: 'tool_use', id: 'call_1', name: 'read_file', input: { file: 'b.cc' } };
  const m = await client.messages.create({
    model: 'llmtap-sim', system, max_tokens: 4096, messages: [
      { role: 'user', content: 'Read b.cc and summarize it.' },
      { role: 'assistant', content: [{ type: 'text', text: 'Reading it.' }, use] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: 'int main() {}' }] }],
  });
  const chat = await (await fetch(`${base}/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'llmtap-sim', messages: [
      { role: 'system', content: system },
      { role: 'user', content: 'Read b.cc and summarize it.' },
      { role: 'assistant', content: 'Reading it.', tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'read_file', arguments: '{"file":"b.cc"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'int main() {}' }] }),
  })).json();
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, chat.usage.prompt_tokens);
  assert.equal(m.content[0].text, chat.choices[0].message.content);
});
