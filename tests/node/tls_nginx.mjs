// A real TLS peer for the TLS tests and benchmarks: one unprivileged nginx process (no master,
// no daemon, everything under a temp dir) terminating TLS in front of an HTTP upstream (usually
// `llmtap sim`), with one server block per case, each on its own free 127.0.0.1 port:
//
//   ok         server.pem, TLS 1.2 and 1.3
//   expired    expired.pem (expired yesterday)
//   wronghost  wronghost.pem (wrong.example only)
//   mtls       server.pem; ssl_verify_client on against ca.pem. nginx finishes the handshake
//              without a client certificate and then answers HTTP 400 ("No required SSL
//              certificate was sent"); a certificate it rejects gets 400 too ("The SSL
//              certificate error"): it never refuses at the TLS layer
//   tls12      server.pem, TLS 1.2 only
//   reconnect  like ok, but keepalive_requests 1 (nginx closes after each response) and
//              session tickets plus a session cache, to test session resumption
//   plain      plain HTTP (http:// to a TLS port is the `ok` port; https:// to a plain one this)
//
// All proxy to http://127.0.0.1:upstreamPort (keep-alive pool, HTTP/1.1, proxy_buffering off so
// that SSE passes through chunk by chunk; every path, /metrics and /health included). Each
// request is logged as one JSON line (see accessLog()) with the port, nginx's connection
// number and its request count, the TLS protocol, whether the session was resumed and the
// client certificate verdict.
//
//   import { startTlsNginx } from './tls_nginx.mjs';
//   const ngx = await startTlsNginx({ upstreamPort: sim.port });
//   try { ... ngx.url('ok', '/v1/chat/completions') ... ngx.caFile ... } finally { await ngx.stop(); }
//
// Needs nginx with http_ssl_module (Debian nginx-light) and the openssl CLI (for
// tests/lib/make_test_certs.sh). As a program, for shell scripts and benchmarks:
//   node tests/node/tls_nginx.mjs UPSTREAM_PORT [CERT_DIR]
// prints one JSON line {"ports":{...},"certDir","caFile","pid","dir"} once every port accepts,
// and runs until SIGTERM or SIGINT (or until nginx exits), then stops nginx and cleans up.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, rmSync, existsSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const MAKE_TEST_CERTS = join(here, '..', 'lib', 'make_test_certs.sh');
export const SERVER_NAMES = ['ok', 'expired', 'wronghost', 'mtls', 'tls12', 'reconnect', 'plain'];

// Makes the test certificates (tests/lib/make_test_certs.sh) in `dir` (a new temp dir by
// default) and returns the dir.
export function makeTestCerts(dir = mkdtempSync(join(tmpdir(), 'llmtap-certs-'))) {
  execFileSync('bash', [MAKE_TEST_CERTS, dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  return dir;
}

// `count` distinct free loopback ports: all bound to port 0 at once, then closed. Another
// process may take one before nginx binds it; startTlsNginx retries then.
export async function freePorts(count) {
  const servers = [];
  try {
    for (let i = 0; i < count; ++i) {
      const s = createServer();
      servers.push(s);
      await new Promise((res, rej) => { s.once('error', rej); s.listen(0, '127.0.0.1', res); });
    }
    return servers.map((s) => s.address().port);
  } finally {
    await Promise.all(servers.map((s) => new Promise((res) => (s.listening ? s.close(res) : res()))));
  }
}

function serverBlock(name, port, certDir) {
  const cert = (n) => `ssl_certificate ${join(certDir, `${n}.pem`)};\n    ssl_certificate_key ${join(certDir, `${n}.key`)};`;
  const lines = {
    ok: `${cert('server')}\n    ssl_protocols TLSv1.2 TLSv1.3;`,
    expired: `${cert('expired')}\n    ssl_protocols TLSv1.2 TLSv1.3;`,
    wronghost: `${cert('wronghost')}\n    ssl_protocols TLSv1.2 TLSv1.3;`,
    mtls: `${cert('server')}\n    ssl_protocols TLSv1.2 TLSv1.3;\n` +
      `    ssl_client_certificate ${join(certDir, 'ca.pem')};\n    ssl_verify_client on;\n    ssl_verify_depth 2;`,
    tls12: `${cert('server')}\n    ssl_protocols TLSv1.2;`,
    reconnect: `${cert('server')}\n    ssl_protocols TLSv1.2 TLSv1.3;\n    keepalive_requests 1;\n` +
      `    ssl_session_tickets on;\n    ssl_session_cache shared:reconnect:1m;\n    ssl_session_timeout 10m;`,
    plain: '',
  }[name];
  const tls = name === 'plain' ? '' : ' ssl';
  return `  server {  # ${name}
    listen 127.0.0.1:${port}${tls};
    ${lines}
    location / { proxy_pass http://sim; }
  }
`;
}

function nginxConf(dir, ports, certDir, upstreamPort) {
  return `# written by tests/node/tls_nginx.mjs
worker_processes 1;
daemon off;
master_process off;
pid ${dir}/nginx.pid;
lock_file ${dir}/nginx.lock;
error_log ${dir}/error.log info;
events { worker_connections 1024; }
http {
  log_format tap escape=json '{"server_port":$server_port,"connection":$connection,'
    '"connection_requests":$connection_requests,"ssl_protocol":"$ssl_protocol",'
    '"ssl_session_reused":"$ssl_session_reused","ssl_client_verify":"$ssl_client_verify",'
    '"status":$status,"request":"$request"}';
  access_log ${dir}/access.log tap;
  client_body_temp_path ${dir}/tmp/body;
  proxy_temp_path ${dir}/tmp/proxy;
  fastcgi_temp_path ${dir}/tmp/fastcgi;
  uwsgi_temp_path ${dir}/tmp/uwsgi;
  scgi_temp_path ${dir}/tmp/scgi;
  client_max_body_size 64m;
  client_body_buffer_size 1m;
  keepalive_timeout 60s;
  upstream sim {
    server 127.0.0.1:${upstreamPort};
    keepalive 16;
  }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_buffering off;
  proxy_read_timeout 300s;
${SERVER_NAMES.map((n) => serverBlock(n, ports[n], certDir)).join('')}}
`;
}

// Resolves true once 127.0.0.1:port accepts a TCP connection, false when it refuses.
export function accepts(port) {
  return new Promise((res) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => { s.destroy(); res(true); });
    s.once('error', () => res(false));
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Running nginx processes, killed if this process exits without stopping them.
const running = new Set();
process.on('exit', () => {
  for (const p of running) { try { p.kill('SIGKILL'); } catch {} }
});

// One nginx attempt on the given ports: resolves { proc, exited } once every port accepts,
// or { failed: log } when nginx exits or does not listen within `timeoutMs`.
async function launch(dir, ports, timeoutMs) {
  const proc = spawn('nginx', ['-p', `${dir}/`, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  running.add(proc);
  let exit = null;
  const exited = new Promise((r) => proc.on('close', (code, signal) => {
    running.delete(proc);
    exit = { code, signal };
    r(exit);
  }));
  proc.on('error', (e) => { stderr += `spawn nginx: ${e.message}\n`; });
  const log = () => {
    const f = join(dir, 'error.log');
    return `${existsSync(f) ? readFileSync(f, 'utf8') : ''}${stderr}`;
  };
  // nginx writes its pid file once every listening socket is bound (a port another process
  // holds makes it log the bind() failure and retry for 2.5 s: given up on at once here), so
  // a port that accepts before that may be someone else's.
  const pidFile = join(dir, 'nginx.pid');
  const deadline = Date.now() + timeoutMs;
  const pending = new Set(Object.values(ports));
  const fail = async (why) => {
    if (!exit) proc.kill('SIGKILL');
    await exited;
    return { failed: `${why}:\n${log()}` };
  };
  for (;;) {
    if (exit) return { failed: `nginx exited (${JSON.stringify(exit)}):\n${log()}` };
    if (/bind\(\) to \S+ failed/.test(log())) return fail('nginx could not bind a port');
    const bound = existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim() === String(proc.pid);
    if (bound) {
      for (const p of [...pending]) if (await accepts(p)) pending.delete(p);
      if (pending.size === 0) break;
    }
    if (Date.now() > deadline) {
      return fail(bound ? `nginx did not accept on ${[...pending].join(', ')} within ${timeoutMs} ms`
        : `nginx wrote no pid file within ${timeoutMs} ms`);
    }
    await sleep(20);
  }
  return { proc, exited };
}

// Starts nginx in front of http://127.0.0.1:upstreamPort. certDir: certificates made by
// make_test_certs.sh (made in a temp dir, removed by stop(), when not given). Returns
// {
//   ports: { ok, expired, wronghost, mtls, tls12, reconnect, plain },
//   url(name, path = ''): 'https://127.0.0.1:PORT' + path ('http://' for plain),
//   certDir, caFile, cert(name) -> { cert, key } paths (e.g. cert('client')),
//   pid, dir (nginx's prefix: nginx.conf, error.log, access.log),
//   errorLog() -> text, accessLog() -> [{ server_port, connection, connection_requests,
//     ssl_protocol, ssl_session_reused ('r' or '.'), ssl_client_verify, status, request }],
//   waitAccessLog(name, count, waitMs = 30000) -> (async) the access log lines of server
//     `name` once there are at least `count` (nginx logs after the response went out),
//   stop(): SIGTERM by PID (SIGKILL after 3 s), then removes the temp dirs,
// }
// and throws with nginx's error.log when it does not start (retrying with new ports, up to
// `attempts` times, when a port was taken in between).
export async function startTlsNginx({ upstreamPort, certDir, attempts = 5, timeoutMs = 30000, keepDir = false } = {}) {
  if (!Number.isInteger(upstreamPort) || upstreamPort <= 0) {
    throw new Error(`startTlsNginx: upstreamPort must be a port number, not ${upstreamPort}`);
  }
  const ownCerts = !certDir;
  certDir = resolve(certDir ?? makeTestCerts());
  const dir = mkdtempSync(join(tmpdir(), 'llmtap-tls-nginx-'));
  const removeDirs = () => {
    if (!keepDir) rmSync(dir, { recursive: true, force: true });
    if (ownCerts) rmSync(certDir, { recursive: true, force: true });
  };
  let started;
  let lastFailure = '';
  try {
    for (let attempt = 1; attempt <= attempts && !started; ++attempt) {
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(join(dir, 'tmp'), { recursive: true });
      const list = await freePorts(SERVER_NAMES.length);
      const ports = Object.fromEntries(SERVER_NAMES.map((n, i) => [n, list[i]]));
      writeFileSync(join(dir, 'nginx.conf'), nginxConf(dir, ports, certDir, upstreamPort));
      const r = await launch(dir, ports, timeoutMs);
      if (r.failed) {
        lastFailure = r.failed;
        if (!/Address already in use/.test(r.failed)) break;
        continue;
      }
      started = { ...r, ports };
    }
  } catch (e) {
    removeDirs();
    throw e;
  }
  if (!started) {
    removeDirs();
    throw new Error(`startTlsNginx: nginx did not start: ${lastFailure}`);
  }
  const { proc, exited, ports } = started;
  const accessLog = () => {
    const f = join(dir, 'access.log');
    if (!existsSync(f)) return [];
    return readFileSync(f, 'utf8').split('\n').filter((l) => l.endsWith('}')).map((l) => JSON.parse(l));
  };
  let stopped = null;
  return {
    ports,
    url: (name, path = '') => `${name === 'plain' ? 'http' : 'https'}://127.0.0.1:${ports[name]}${path}`,
    certDir,
    caFile: join(certDir, 'ca.pem'),
    cert: (name) => ({ cert: join(certDir, `${name}.pem`), key: join(certDir, `${name}.key`) }),
    pid: proc.pid,
    dir,
    proc,
    exited,
    errorLog: () => {
      const f = join(dir, 'error.log');
      return existsSync(f) ? readFileSync(f, 'utf8') : '';
    },
    accessLog,
    // nginx logs a request after its response went out, so a client may see the end first:
    // this waits until the log holds at least `count` requests to server `name`, and returns
    // those.
    async waitAccessLog(name, count, waitMs = 30000) {
      const deadline = Date.now() + waitMs;
      for (;;) {
        const lines = accessLog().filter((l) => l.server_port === ports[name]);
        if (lines.length >= count) return lines;
        if (Date.now() > deadline) {
          throw new Error(`nginx logged ${lines.length} requests to ${name}, not ${count}, within ${waitMs} ms`);
        }
        await sleep(10);
      }
    },
    stop() {
      stopped ??= (async () => {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), 3000);
        const exit = await exited;
        clearTimeout(timer);
        removeDirs();
        return exit;
      })();
      return stopped;
    },
  };
}

// As a program: node tls_nginx.mjs UPSTREAM_PORT [CERT_DIR]
if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const [port, certDir] = process.argv.slice(2);
  if (!/^\d+$/.test(port ?? '')) {
    console.error('usage: node tls_nginx.mjs UPSTREAM_PORT [CERT_DIR]');
    process.exit(2);
  }
  const ngx = await startTlsNginx({ upstreamPort: Number(port), certDir });
  const { ports, caFile, pid, dir } = ngx;
  console.log(JSON.stringify({ ports, certDir: ngx.certDir, caFile, pid, dir }));
  let stopping = false;
  const done = async (code) => { stopping = true; await ngx.stop(); process.exit(code); };
  process.on('SIGTERM', () => done(0));
  process.on('SIGINT', () => done(0));
  ngx.exited.then(() => {
    if (stopping) return;
    console.error(`tls_nginx: nginx exited:\n${ngx.errorLog()}`);
    done(1);
  });
}
