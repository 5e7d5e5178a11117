// proxy_api_load.mjs HOST:PORT API REQUESTS CONCURRENCY MAX_TOKENS [ttft]: sends REQUESTS requests
// of one API (chat, responses, messages: streamed, ~1 KB prompts, MAX_TOKENS tokens each;
// embeddings, rerank: not streamed) with CONCURRENCY in flight, reads every body to its end, and
// fails on any status but 200. With `ttft`, prints one JSON line: the count and the p50 and p99 of
// the time from sending each request to its first body bytes, in ms. Used by
// bench/proxy_api_cpu.sh and bench/proxy_shadow.sh.
const [target, api, requests, concurrency, maxTokens, mode] = process.argv.slice(2);
const ttfts = [];
const text = Array(14).fill('the capture proxy forwards every request and records its body').join(' ');
const bodies = {
  chat: ['/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: text }], max_tokens: +maxTokens, stream: true, stream_options: { include_usage: true } }],
  responses: ['/v1/responses', { model: 'm', input: text, max_output_tokens: +maxTokens, stream: true, store: false }],
  messages: ['/v1/messages', { model: 'm', max_tokens: +maxTokens, messages: [{ role: 'user', content: text }], stream: true }],
  embeddings: ['/v1/embeddings', { model: 'm', input: [text] }],
  rerank: ['/v1/rerank', { model: 'm', query: 'the capture proxy', documents: [text, text.slice(0, 200)] }],
};
const [path, body] = bodies[api];
const payload = JSON.stringify(body);
let next = 0;
async function worker() {
  while (next < +requests) {
    ++next;
    const start = performance.now();
    const r = await fetch(`http://${target}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: payload });
    if (mode === 'ttft') {
      const reader = r.body.getReader();
      let first = true;
      for (;;) {
        const { done } = await reader.read();
        if (first && !done) ttfts.push(performance.now() - start);
        first = false;
        if (done) break;
      }
    } else {
      await r.arrayBuffer();
    }
    if (r.status !== 200) throw new Error(`${api}: HTTP ${r.status}`);
  }
}
await Promise.all(Array.from({ length: +concurrency }, worker));
if (mode === 'ttft') {
  ttfts.sort((a, b) => a - b);
  const q = (p) => ttfts[Math.min(ttfts.length - 1, Math.floor(p * ttfts.length))];
  console.log(JSON.stringify({ n: ttfts.length, p50: +q(0.5).toFixed(3), p99: +q(0.99).toFixed(3) }));
}
