// nginx with its default upstream settings in front of `llmtap sim` and of `llmtap proxy`,
// streaming to curl (issue #35). A plain `location / { proxy_pass http://127.0.0.1:PORT; }`
// speaks HTTP/1.0 upstream with `Connection: close` and buffers (the sim's X-Accel-Buffering:
// no turns that off per response; one server block ignores that field, so that nginx really
// buffers the stream); `proxy_http_version 1.1;` without `proxy_set_header Connection ""`
// speaks HTTP/1.1 with `Connection: close`. Before commit 0bf041a the sim wrote its
// `Connection: close` after the head's end: curl got a stream opening with a stray header line
// through the first, and nginx refused the chunked body through the second. Through every
// block `curl -sN` must get a clean SSE stream (each event `data: {json}`, ending with
// `data: [DONE]`) and the non-streamed JSON, the bytes the sim answers directly (ids and times
// aside); nginx logs no upstream error, and the proxy captures every request.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { startSim, startProxy, stop, url, tempDir, cleanup, readLines, curl } from './proxy_helpers.mjs';
import { checkSse, normalize } from './http_framing.mjs';
import { accepts, freePorts } from './tls_nginx.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The server blocks: name -> [upstream ('sim' or 'proxy'), extra directives].
const BLOCKS = {
  'sim, defaults': ['sim', ''],
  'sim, defaults, buffering the stream': ['sim', 'proxy_ignore_headers X-Accel-Buffering;'],
  'sim, proxy_http_version 1.1': ['sim', 'proxy_http_version 1.1;'],
  'proxy, defaults': ['proxy', ''],
  'proxy, proxy_http_version 1.1': ['proxy', 'proxy_http_version 1.1;'],
};
// The same two settings in front of a recorder of request heads: what nginx sends upstream.
const RECORDED = {
  'recorder, defaults': ['recorder', ''],
  'recorder, proxy_http_version 1.1': ['recorder', 'proxy_http_version 1.1;'],
};
const ALL_BLOCKS = { ...BLOCKS, ...RECORDED };

function nginxConf(dir, ports, upstreams) {
  const blocks = Object.entries(ALL_BLOCKS).map(([name, [up, extra]]) => `  server {  # ${name}
    listen 127.0.0.1:${ports[name]};
    location / {
      ${extra}
      proxy_pass http://127.0.0.1:${upstreams[up]};
    }
  }
`).join('');
  return `# written by tests/node/nginx_default.test.mjs: nginx's proxy defaults
worker_processes 1;
daemon off;
master_process off;
pid ${dir}/nginx.pid;
lock_file ${dir}/nginx.lock;
error_log ${dir}/error.log info;
events { worker_connections 256; }
http {
  access_log ${dir}/access.log;
  client_body_temp_path ${dir}/tmp/body;
  proxy_temp_path ${dir}/tmp/proxy;
  fastcgi_temp_path ${dir}/tmp/fastcgi;
  uwsgi_temp_path ${dir}/tmp/uwsgi;
  scgi_temp_path ${dir}/tmp/scgi;
${blocks}}
`;
}

// nginx (no master, no daemon, everything under `dir`) on free ports, one per block: resolves
// { proc, exited, ports, errorLog() } once nginx wrote its pid file (every socket bound) and
// every port accepts; retries with new ports when one was taken in between.
async function startNginx(dir, upstreams) {
  let lastLog = '';
  for (let attempt = 1; attempt <= 5; ++attempt) {
    mkdirSync(join(dir, 'tmp'), { recursive: true });
    const list = await freePorts(Object.keys(ALL_BLOCKS).length);
    const ports = Object.fromEntries(Object.keys(ALL_BLOCKS).map((n, i) => [n, list[i]]));
    writeFileSync(join(dir, 'nginx.conf'), nginxConf(dir, ports, upstreams));
    writeFileSync(join(dir, 'error.log'), '');
    const proc = spawn('nginx', ['-p', `${dir}/`, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    proc.stderr.on('data', (d) => { stderr += d; });
    let exit = null;
    const exited = new Promise((r) => proc.on('close', (code, signal) => { exit = { code, signal }; r(exit); }));
    proc.on('error', (e) => { stderr += `spawn nginx: ${e.message}\n`; });
    const errorLog = () => readFileSync(join(dir, 'error.log'), 'utf8');
    const pidFile = join(dir, 'nginx.pid');
    const pending = new Set(Object.values(ports));
    // A bound on starting only (a loaded machine), never on what the test measures.
    for (const deadline = Date.now() + 30000; pending.size > 0 && !exit && Date.now() < deadline; await sleep(20)) {
      if (/bind\(\) to \S+ failed/.test(errorLog())) break;
      if (existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim() === String(proc.pid)) {
        for (const p of [...pending]) if (await accepts(p)) pending.delete(p);
      }
    }
    if (pending.size === 0 && !exit) return { proc, exited, ports, errorLog };
    if (!exit) proc.kill('SIGKILL');
    await exited;
    lastLog = `${errorLog()}${stderr}`;
    if (!/Address already in use/.test(lastLog)) break;
  }
  throw new Error(`nginx did not start:\n${lastLog}`);
}

const messages = [{ role: 'user', content: 'Stream through nginx, please.' }];
const REQUESTS = [
  { name: 'chat streamed', path: '/v1/chat/completions', stream: true,
    body: { model: 'm', messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } } },
  { name: 'completions streamed', path: '/v1/completions', stream: true,
    body: { model: 'm', prompt: 'Once upon a time', max_tokens: 6, stream: true } },
  { name: 'chat', path: '/v1/chat/completions', body: { model: 'm', messages, max_tokens: 6 } },
];

let sim;
let proxy;
let nginx;
let dir;
let recorder;
// The heads the recorder received, in order.
const recorded = [];

// Answers every request with a fixed SSE stream (close-delimited, as nginx's HTTP/1.0 upstream
// allows) after recording its head.
function startRecorder() {
  const server = createServer((sock) => {
    let buf = '';
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0 || sock.answered) return;
      sock.answered = true;
      recorded.push(buf.slice(0, end));
      sock.end('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n' +
        'data: {"recorded":true}\n\ndata: [DONE]\n\n');
    });
    sock.on('error', () => {});
  });
  return new Promise((res) => server.listen(0, '127.0.0.1', () => res(server)));
}
const direct = new Map();
let throughProxy = 0;

before(async () => {
  dir = tempDir();
  sim = await startSim(['--cache-blocks', '0'], { '--output-tokens-stddev': '0' });
  proxy = await startProxy({ upstream: url(sim), args: ['--capture', '--capture-path', join(dir, 'proxy.jsonl')] });
  recorder = await startRecorder();
  nginx = await startNginx(join(dir, 'nginx'), { sim: sim.port, proxy: proxy.port, recorder: recorder.address().port });
  // What the sim answers directly (HTTP/1.1 keep-alive, curl's own framing).
  for (const r of REQUESTS) direct.set(r.name, normalize(await post(url(sim, r.path), r.body)));
});

after(async () => {
  if (nginx && nginx.proc.exitCode === null && nginx.proc.signalCode === null) nginx.proc.kill('SIGTERM');
  if (nginx) await nginx.exited;
  for (const s of [proxy, sim]) if (s) await stop(s).catch(() => {});
  recorder?.close();
  if (dir) cleanup(dir);
});

// curl -sSN --fail: an HTTP error or a broken transfer (a bad chunk from nginx) rejects.
function post(target, body) {
  return curl(['-N', '--fail', '-H', 'Content-Type: application/json', '-d', JSON.stringify(body), target]);
}

test('what nginx sends upstream: HTTP/1.0 by default, HTTP/1.1 with proxy_http_version 1.1; Connection: close both', async () => {
  const seen = [];
  for (const block of Object.keys(RECORDED)) {
    const out = await post(`http://127.0.0.1:${nginx.ports[block]}/v1/chat/completions`, REQUESTS[0].body);
    assert.equal(out, 'data: {"recorded":true}\n\ndata: [DONE]\n\n');
    const head = recorded.at(-1).split('\r\n');
    seen.push([head[0], head.filter((l) => /^connection:/i.test(l))]);
  }
  assert.deepEqual(seen, [
    ['POST /v1/chat/completions HTTP/1.0', ['Connection: close']],
    ['POST /v1/chat/completions HTTP/1.1', ['Connection: close']],
  ]);
});

for (const [block, [upstream]] of Object.entries(BLOCKS)) {
  test(`nginx (${block}) -> llmtap ${upstream}: curl -sN gets clean SSE and JSON`, { timeout: 120000 }, async () => {
    const logStart = nginx.errorLog().length;
    for (const r of REQUESTS) {
      const out = await post(`http://127.0.0.1:${nginx.ports[block]}${r.path}`, r.body);
      if (upstream === 'proxy') throughProxy++;
      if (r.stream) {
        const events = checkSse(Buffer.from(out));
        assert.ok(events.every((e) => e.object === (r.path.includes('chat') ? 'chat.completion.chunk' : 'text_completion')),
          `${r.name}: ${out}`);
      } else {
        assert.equal(JSON.parse(out).object, 'chat.completion', out);
      }
      assert.equal(normalize(out), direct.get(r.name), `${r.name} through nginx (${block}): not the sim's bytes`);
    }
    // This block's lines only (nginx logs an upstream error before the client sees the end).
    const errors = nginx.errorLog().slice(logStart).split('\n').filter((l) => /\[(error|crit|alert|emerg)\]/.test(l));
    assert.deepEqual(errors, [], `nginx (${block}) logged upstream errors`);
  });
}

test('the proxy behind nginx captured every request', { timeout: 120000 }, async () => {
  assert.deepEqual(await stop(proxy), { code: 0, signal: null }, proxy.stderr);
  const rows = readLines(join(dir, 'proxy.jsonl'));
  assert.equal(rows.length, throughProxy);
  const perBlock = REQUESTS.map((r) => JSON.stringify(r.body));
  const expected = Object.values(BLOCKS).filter(([up]) => up === 'proxy').flatMap(() => perBlock);
  assert.deepEqual(rows.map((r) => JSON.stringify(r.payload)).sort(), expected.sort());
});
