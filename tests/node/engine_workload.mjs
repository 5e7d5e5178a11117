// A multi-turn chat workload for the real engine (engine_fidelity.test.mjs and
// bench/fidelity_engine.sh): `sessions` conversations of `turns` turns, each on one of two shared
// long system prompts (~800 and ~900 Llama 3 tokens with the template), its own questions, the
// assistant's answers in its history, a seeded think time between turns, sessions started
// `staggerMs` apart; streamed with include_usage, temperature 0, through the real `openai`
// client. The plan (prompts, questions, max_tokens, think times) depends only on `seed`.
import OpenAI from 'openai';
import { mulberry32 } from './mulberry32.mjs';

const WORDS = ('account access alert backup balance billing bucket budget cache capacity cluster '
  + 'config container cost cpu credential dashboard database deploy disk driver endpoint error '
  + 'event export firewall gateway gpu health image incident index instance invoice job kernel key '
  + 'latency limit log memory metric migration model monitor network node notebook object owner '
  + 'partition password patch pipeline policy pool port project quota queue region replica '
  + 'request restart role rollback route scale schedule secret service session snapshot storage '
  + 'subnet support team template ticket token training upgrade usage user version volume '
  + 'workload zone always never briefly carefully clearly politely promptly exactly only first '
  + 'then before after unless when check confirm explain escalate verify refuse suggest '
  + 'summarize document mention avoid include').split(' ');
const TOPICS = ['training job', 'invoice', 'GPU quota', 'storage bucket', 'notebook', 'API key',
  'region', 'snapshot', 'driver version', 'network latency', 'replica count', 'container image'];

export function workloadPlan({ sessions = 12, turns = 3, seed = 1, staggerMs = 150,
  thinkMs = [300, 800], maxTokens = [24, 48] } = {}) {
  const rand = mulberry32(seed);
  const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
  const pick = (xs) => xs[Math.floor(rand() * xs.length)];
  const system = (name, rules) => [`You are ${name}, a support agent for a GPU cloud. Follow these rules.`,
    ...Array.from({ length: rules }, (_, r) => `Rule ${r + 1}: ${Array.from({ length: int(8, 14) }, () => pick(WORDS)).join(' ')}.`),
  ].join('\n');
  const systems = [system('Ada', 45), system('Bob', 56)];
  return Array.from({ length: sessions }, (_, s) => ({
    id: `fid-${seed}-s${s}`,
    system: systems[s % 2],
    startMs: s * staggerMs,
    turns: Array.from({ length: turns }, (_, t) => ({
      question: `Session ${s} turn ${t}: my ${pick(TOPICS)} shows ${pick(WORDS)} ${pick(WORDS)} `
        + `since ${int(1, 59)} minutes. What should I ${pick(['check', 'do', 'verify', 'change'])}?`,
      maxTokens: int(maxTokens[0], maxTokens[1]),
      thinkMs: t + 1 < turns ? int(thinkMs[0], thinkMs[1]) : 0,
    })),
  }));
}

// Sends the plan to `baseURL` (…/v1), each session with `header: <its id>`; resolves with one
// record per request (session, turn, usage, finish reason).
export async function runWorkload(baseURL, plan, { model = 'tiny-llama', header = 'x-session-id' } = {}) {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const results = [];
  await Promise.all(plan.map(async (p) => {
    await sleep(p.startMs);
    const api = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 300000,
      defaultHeaders: { [header]: p.id } });
    const messages = [{ role: 'system', content: p.system }];
    for (const [t, turn] of p.turns.entries()) {
      messages.push({ role: 'user', content: turn.question });
      let text = '', usage = null, finish = null;
      const stream = await api.chat.completions.create({ model, messages, max_tokens: turn.maxTokens,
        temperature: 0, stream: true, stream_options: { include_usage: true } });
      for await (const c of stream) {
        text += c.choices[0]?.delta?.content ?? '';
        if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
        if (c.usage) usage = c.usage;
      }
      results.push({ session: p.id, turn: t, usage, finish_reason: finish });
      messages.push({ role: 'assistant', content: text });
      if (turn.thinkMs) await sleep(turn.thinkMs);
    }
  }));
  return results;
}
