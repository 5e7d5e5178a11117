// fixed_rate.mjs: an open-loop load generator for latency measurements (wrk in Debian has no
// fixed-rate mode). Sends POSTs at a fixed rate whatever the answers take, on keep-alive
// connections, alternating a non-streaming and a streaming chat request with a ~2 KB prompt,
// and measures each request from its send to the end of its response body.
//
//   node fixed_rate.mjs --url http://127.0.0.1:PORT --rate 200 --seconds 20 [--warmup-s 2]
//
// Prints one JSON object: sent, ok (status 200), non_200, errors, and latency p50/p90/p99/max
// in ms over the requests sent after the warm-up.
import http from 'node:http';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({
  options: {
    url: { type: 'string' },
    rate: { type: 'string', default: '200' },
    seconds: { type: 'string', default: '20' },
    'warmup-s': { type: 'string', default: '2' },
    'max-tokens': { type: 'string', default: '8' },
  },
});
const target = new URL('/v1/chat/completions', a.url);
const rate = Number(a.rate);
const seconds = Number(a.seconds);
const warmupMs = Number(a['warmup-s']) * 1000;
const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
const pad = 'the quick brown fox jumps over the lazy dog '.repeat(45);

function body(i) {
  return JSON.stringify({
    model: 'm', max_tokens: Number(a['max-tokens']), stream: i % 2 === 1,
    messages: [{ role: 'user', content: `latency ${i} ${pad}` }],
  });
}

function once(i) {
  return new Promise((resolve) => {
    const payload = body(i);
    const start = process.hrtime.bigint();
    const req = http.request(target, {
      method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
    }, (res) => {
      res.on('data', () => {});
      res.on('end', () => resolve({ status: res.statusCode, ms: Number(process.hrtime.bigint() - start) / 1e6 }));
      res.on('error', () => resolve({ status: 0, ms: 0 }));
    });
    req.on('error', () => resolve({ status: 0, ms: 0 }));
    req.end(payload);
  });
}

const total = Math.round(rate * seconds);
const t0 = performance.now();
const pending = [];
const warm = [];
let i = 0;
await new Promise((done) => {
  const tick = () => {
    const now = performance.now();
    while (i < total && t0 + (i * 1000) / rate <= now) {
      const measured = t0 + (i * 1000) / rate >= t0 + warmupMs;
      (measured ? pending : warm).push(once(i));
      ++i;
    }
    if (i >= total) return done();
    setTimeout(tick, Math.max(0, t0 + (i * 1000) / rate - performance.now()));
  };
  tick();
});
const results = await Promise.all(pending);
const warmResults = await Promise.all(warm);
agent.destroy();
const all = [...warmResults, ...results];
const lat = results.filter((r) => r.status === 200).map((r) => r.ms).sort((x, y) => x - y);
const q = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] : null);
const round = (v) => (v === null ? null : Math.round(v * 1000) / 1000);
console.log(JSON.stringify({
  sent: all.length,
  ok: all.filter((r) => r.status === 200).length,
  non_200: all.filter((r) => r.status !== 200 && r.status !== 0).length,
  errors: all.filter((r) => r.status === 0).length,
  measured: lat.length,
  seconds: round((performance.now() - t0) / 1000),
  p50_ms: round(q(0.5)), p90_ms: round(q(0.9)), p99_ms: round(q(0.99)), max_ms: round(lat[lat.length - 1] ?? null),
}));
