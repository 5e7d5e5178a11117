// Shared by the capture_responses tests (proxy_responses.test.mjs, asgi_responses.test.mjs): the
// openai client's view of choice 0's text, and the check that an outcome line's "response" is
// that text byte for byte.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { url } from './proxy_helpers.mjs';

export const messages = [{ role: 'user', content: 'Name three rivers in Europe.' }];
export const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } },
];

export function openai(server) {
  return new OpenAI({ baseURL: url(server, '/v1'), apiKey: 'sk-test', maxRetries: 0, timeout: 10000 });
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
