// Helpers of the `llmtap proxy` integration tests: start real processes on free loopback ports
// (each prints the port it bound), stop them by PID, read captures, check AIPerf's row rules.
import { spawn, execFile } from 'node:child_process';
import net from 'node:net';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Readable } from 'node:stream';
import assert from 'node:assert/strict';

export const LLMTAP = process.env.LLMTAP_BIN;
if (!LLMTAP) throw new Error('LLMTAP_BIN is not set; run through run_proxy_tests.sh');
export const PYTHON = process.env.LLMTAP_PYTHON || '/usr/bin/python3';
const here = dirname(fileURLToPath(import.meta.url));
export const UPSTREAM_APP = join(here, '..', 'upstream', 'app.py');
// The same FastAPI app in llmtap.asgi.CaptureMiddleware (run_asgi_tests.sh sets
// LLMTAP_PYTHONPATH to the build's python/ directory).
export const ASGI_APP = join(here, '..', 'python', 'asgi_app.py');

export function tempDir() {
  return mkdtempSync(join(tmpdir(), 'llmtap-proxy-test-'));
}

// Spawns a server and resolves once its stdout shows `pattern` (whose group 1 is the port), or
// fails after 30 s (a TSan build, or the Python upstream, starting on a loaded machine).
export function startProcess(cmd, args, { env = {}, pattern, cwd } = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(cmd, args, {
      cwd,
      env: { ...cleanEnv(), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const server = { proc, stdout: '', stderr: '', port: 0 };
    server.exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${cmd} did not start:\n${server.stdout}\n${server.stderr}`));
    }, 30000);
    proc.stdout.on('data', (d) => {
      server.stdout += d;
      const m = server.stdout.match(pattern);
      if (m && !server.port) {
        server.port = Number(m[1]);
        clearTimeout(timer);
        resolve(server);
      }
    });
    proc.stderr.on('data', (d) => { server.stderr += d; });
    proc.on('exit', () => {
      if (!server.port) {
        clearTimeout(timer);
        reject(new Error(`${cmd} exited before listening:\n${server.stdout}\n${server.stderr}`));
      }
    });
  });
}

// The environment without any NIM_CAPTURE_* of the caller's.
function cleanEnv() {
  const e = { ...process.env };
  delete e.NIM_CAPTURE_ENABLE;
  delete e.NIM_CAPTURE_ARGS;
  return e;
}

// --any-model: these tests are about the proxy, replay and capture, whatever model their
// requests name; the sim's own model-name rules are tested in sim.test.mjs.
export const SIM_ARGS = ['--any-model', '--seed', '7', '--ttft-ms', '2', '--prefill-us-per-token', '1',
  '--itl-ms', '0.5', '--itl-jitter-ms', '0', '--output-tokens-mean', '12',
  '--output-tokens-stddev', '3'];

// `llmtap sim` with the fast test timings, some of them replaced ({ '--itl-ms': '20' }), plus
// other flags.
export function startSim(extra = [], overrides = {}) {
  const args = [...SIM_ARGS];
  for (const [k, v] of Object.entries(overrides)) args[args.indexOf(k) + 1] = v;
  return startProcess(LLMTAP, ['sim', '--listen', '127.0.0.1:0', ...args, ...extra], {
    pattern: /listening on http:\/\/127\.0\.0\.1:(\d+)/,
  });
}

// `command`: the program and its own leading arguments, before `proxy` (a test program that
// runs the real proxy command with a seam swapped, e.g. llmtap_slow_disk).
export function startProxy({ upstream, env = {}, args = [], cwd, command = [LLMTAP] } = {}) {
  const a = ['proxy', '--listen', '127.0.0.1:0', '--threads', '2'];
  if (upstream) a.push('--upstream', upstream);
  return startProcess(command[0], [...command.slice(1), ...a, ...args], {
    env, cwd, pattern: /listening on https?:\/\/127\.0\.0\.1:(\d+)/,
  });
}

export function startUpstream() {
  return startProcess(PYTHON, [UPSTREAM_APP], {
    pattern: /upstream listening on http:\/\/127\.0\.0\.1:(\d+)/,
  });
}

// tests/python/asgi_app.py: the upstream app with the in-process capture; `env` holds
// NIM_CAPTURE_* and `args` the launcher's flags (--workers, --lifespan, --slow-disk-us, ...).
export function startAsgi({ env = {}, args = [] } = {}) {
  const pythonpath = process.env.LLMTAP_PYTHONPATH;
  if (!pythonpath) throw new Error('LLMTAP_PYTHONPATH is not set; run through run_asgi_tests.sh');
  return startProcess(PYTHON, [ASGI_APP, ...args], {
    env: { PYTHONPATH: pythonpath, ...env },
    pattern: /asgi listening on http:\/\/127\.0\.0\.1:(\d+)/,
  });
}

// Resolves with the process's stderr after its first `from` characters once that matches
// `pattern`, or rejects if the process exits first: a wait bounded by the event, not the clock.
export function logged(server, pattern, from = 0) {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (!pattern.test(server.stderr.slice(from))) return false;
      server.proc.stderr.off('data', onData);
      resolve(server.stderr.slice(from));
      return true;
    };
    // After startProcess's own listener has appended the chunk.
    const onData = () => setImmediate(check);
    if (check()) return;
    server.proc.stderr.on('data', onData);
    server.exited.then(() => { if (!check()) reject(new Error(`exited without ${pattern}:\n${server.stderr}`)); });
  });
}

// Sends `signal` to the process by PID and waits for it to exit. A sanitizer report in its
// stderr (the suite also runs against ASan/UBSan and TSan builds) fails the test.
export async function stop(server, signal = 'SIGTERM') {
  if (server.proc.exitCode === null && server.proc.signalCode === null) {
    server.proc.kill(signal);
  }
  const exit = await server.exited;
  failOnSanitizerReport(server.stderr, server.proc.spawnfile);
  return exit;
}

// Throws when `stderr` (of `who`) holds a sanitizer report.
function failOnSanitizerReport(stderr, who) {
  const report = stderr.match(/(ThreadSanitizer|AddressSanitizer|LeakSanitizer|runtime error:).*/);
  if (report) throw new Error(`sanitizer report from ${who}:\n${stderr}`);
}

// A loopback port that refuses connections for the rest of this process: the local end of a
// connection the process holds open to a listener of its own. A connection to it finds no
// listener (ECONNREFUSED), and while the held connection lives no socket can bind the port, so
// no server (another test's, or the very proxy a test starts next on port 0) can listen there.
// A port bound and closed again is free for the next bind: on a busy machine, with other tests
// binding ports meanwhile, it could be listening again by the time it is used.
export async function closedPort() {
  const holder = net.createServer((accepted) => accepted.unref());
  await new Promise((resolve, reject) => {
    holder.on('error', reject);
    holder.listen(0, '127.0.0.1', resolve);
  });
  const held = net.connect(holder.address().port, '127.0.0.1');
  await new Promise((resolve, reject) => {
    held.on('error', reject);
    held.on('connect', resolve);
  });
  // Held until the process exits, without keeping it alive.
  holder.unref();
  held.unref();
  return held.localPort;
}

export function url(server, path = '') {
  return `http://127.0.0.1:${server.port}${path}`;
}

// The proxy's metrics text once `done(text)` holds, polled: counters that move after the client
// saw its answer are waited for, not read at an instant. The 60 s cap only ends a test that
// hangs, with the text it saw last. `path`: the proxy's --metrics-path.
export async function metricsWhen(server, done, path = '/llmtap/metrics') {
  for (const end = Date.now() + 60000; ;) {
    const text = await curl([url(server, path)]);
    if (done(text)) return text;
    if (Date.now() > end) assert.fail(`no such metrics within 60 s:\n${text}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// The proxy's metrics once every request it received has ended and been counted: a request is
// counted (status class, upstream errors, cancels) after its answer went out, so possibly after
// its client read that answer, and llmtap_proxy_active_requests goes back down last.
export function metricsSettled(server) {
  return metricsWhen(server, (t) => /^llmtap_proxy_active_requests 0$/m.test(t));
}

// A fetch function over node:http or node:https (`module`) with `agent` (a CA to trust, one
// kept-alive socket, ...), for the clients that take one (the openai client's global fetch can be
// given neither).
export function fetchVia(module, agent) {
  return (input, init = {}) => new Promise((resolve, reject) => {
    const req = module.request(new URL(String(input.url ?? input)), {
      method: init.method ?? 'GET', headers: Object.fromEntries(new Headers(init.headers)), agent,
    }, (res) => {
      const headers = new Headers();
      for (const [k, v] of Object.entries(res.headers)) headers.set(k, [v].flat().join(', '));
      resolve(new Response(Readable.toWeb(res), { status: res.statusCode, headers }));
    });
    req.on('error', reject);
    init.signal?.addEventListener('abort', () => req.destroy(new Error('aborted')));
    req.end(init.body);
  });
}

export function curl(args) {
  return new Promise((resolve, reject) => {
    execFile('curl', ['-sS', ...args], { maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`curl ${args.join(' ')}: ${err.message} ${stderr}`));
      else resolve(stdout);
    });
  });
}

export function run(cmd, args) {
  return new Promise((resolve) => {
    execFile(cmd, args, { maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err ? err.code : 0, stdout, stderr });
    });
  });
}

// `llmtap replay ARGS` ({ code, stdout, stderr }); a sanitizer report in its stderr fails the
// test. `command`: the program and its leading arguments before LLMTAP (taskset -c N, to pin
// it).
export async function replay(args, { command = [] } = {}) {
  const r = command.length ? await run(command[0], [...command.slice(1), LLMTAP, 'replay', ...args])
    : await run(LLMTAP, ['replay', ...args]);
  failOnSanitizerReport(r.stderr, 'llmtap replay');
  return r;
}

// Response ids and creation times differ between two requests; everything else in a body
// must be byte-equal. This replaces only the values of "id" and "created".
export function normalize(body) {
  return body.replace(/"id":"[^"]*"/g, '"id":"X"').replace(/"created":\d+/g, '"created":X');
}

export function readLines(path) {
  if (!existsSync(path)) return [];
  const text = readFileSync(path, 'utf8');
  assert.ok(text === '' || text.endsWith('\n'), 'capture ends with a newline');
  return text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
}

export function readManifest(capturePath) {
  return JSON.parse(readFileSync(`${capturePath}.manifest.json`, 'utf8'));
}

// AIPerf's rules for the rows of a capture (a test helper beside `llmtap validate`).
export function checkAIPerfRows(rows, format) {
  let last = -1;
  for (const row of rows) {
    assert.equal(typeof row, 'object');
    assert.ok(row !== null && !Array.isArray(row));
    let payload = row;
    if (format === 'mooncake_payload') {
      // A row may name its conversation (session_headers / session_fields): AIPerf reads it.
      const keys = Object.keys(row);
      if (keys.length === 3) {
        assert.deepEqual(keys, ['timestamp', 'payload', 'session_id']);
        assert.ok(typeof row.session_id === 'string' && row.session_id !== '', 'session_id is a non-empty string');
      } else {
        assert.deepEqual(keys, ['timestamp', 'payload']);
      }
      assert.ok(Number.isInteger(row.timestamp) && row.timestamp >= 0);
      assert.ok(row.timestamp >= last, 'timestamps never decrease');
      last = row.timestamp;
      payload = row.payload;
      assert.ok(typeof payload === 'object' && payload !== null && !Array.isArray(payload));
      assert.ok(Object.keys(payload).length > 0, 'payload is a non-empty object');
    }
    assert.ok('messages' in payload || 'prompt' in payload, 'chat rows have messages, completion rows prompt');
  }
}

// `llmtap validate` on the file, when this build has it.
export async function validateWithLlmtap(path) {
  const help = await run(LLMTAP, ['validate', '--help']);
  if (help.code !== 0) return;
  const r = await run(LLMTAP, ['validate', path]);
  assert.equal(r.code, 0, `llmtap validate ${path}:\n${r.stdout}\n${r.stderr}`);
}

export function cleanup(dir) {
  rmSync(dir, { recursive: true, force: true });
}

// `clients` clients sending numbered chat requests ("request <i>", streaming every other one) to
// `server` one after another, until finish() is called or the server refuses them (it is
// stopping). `answered` holds the numbers answered 200. For "no answered record lost" checks.
export function chatLoad(server, clients) {
  const answered = new Set();
  let next = 0;
  let stopping = false;
  const worker = async () => {
    while (!stopping) {
      const i = next++;
      try {
        const r = await fetch(url(server, '/v1/chat/completions'), {
          method: 'POST',
          body: JSON.stringify({ messages: [{ role: 'user', content: `request ${i}` }], max_tokens: 3, stream: i % 2 === 0 }),
        });
        await r.text();
        if (r.status === 200) answered.add(i);
      } catch {
        return;  // refused or cut: the server is stopping
      }
    }
  };
  const workers = Array.from({ length: clients }, worker);
  return {
    answered,
    finish: async () => {
      stopping = true;
      await Promise.all(workers);
    },
  };
}
