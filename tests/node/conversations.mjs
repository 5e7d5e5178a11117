// What the multi-turn tests (sessions_infer, sessions_responses) share: the tool an agent loop
// offers, a seeded random source, a streamed answer put together as a streaming client does,
// and a wait for the capture to hold N rows.
import { url, curl } from './proxy_helpers.mjs';

export const TOOLS = [{
  type: 'function',
  function: {
    name: 'lookup',
    description: 'Look a term up in the knowledge base',
    parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
  },
}];

// Deterministic pseudo-random numbers (a test must not flake on its own choices).
export function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A streamed answer put together as a streaming client does: content, and tool calls from
// their deltas (id and name first, then pieces of the arguments).
export async function streamed(api, body) {
  const message = { role: 'assistant', content: null };
  let finish = null;
  for await (const chunk of await api.chat.completions.create({ ...body, stream: true })) {
    for (const c of chunk.choices) {
      if (c.delta.content) message.content = (message.content ?? '') + c.delta.content;
      for (const d of c.delta.tool_calls ?? []) {
        message.tool_calls ??= [];
        const call = (message.tool_calls[d.index] ??= { id: d.id, type: 'function', function: { name: d.function.name, arguments: '' } });
        call.function.arguments += d.function.arguments ?? '';
      }
      finish = c.finish_reason ?? finish;
    }
  }
  return { choices: [{ message, finish_reason: finish }] };
}

// Until the proxy's capture has recorded `n` rows (a guard of about 30 s against a hang).
export async function waitRecorded(proxy, n) {
  for (let i = 0; i < 1200; ++i) {
    const text = await curl([url(proxy, '/llmtap/metrics')]);
    const m = text.match(/^llmtap_capture_recorded_total (\d+)$/m);
    if (m && Number(m[1]) >= n) return;
    await sleep(25);
  }
  throw new Error(`the capture did not record ${n} rows`);
}
