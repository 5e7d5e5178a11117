// A real engine for the node tests: llama.cpp's llama-server from the machines' offline bundle
// (tests/engine/llamacpp.sh), started on a free loopback port and stopped by its PID file.
import { execFile } from 'node:child_process';
import net from 'node:net';
import { join, dirname } from 'node:path';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const LLAMACPP = join(here, '..', 'engine', 'llamacpp.sh');

function sh(args, env = {}) {
  return new Promise((resolve) => {
    execFile('bash', [LLAMACPP, ...args], { env: { ...process.env, ...env }, maxBuffer: 16 << 20 },
      (err, stdout, stderr) => resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }));
  });
}

async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

// Starts llama-server with `flags` (after the bundle's defaults: 4 slots of 8192 tokens, one
// thread, prefix caching on) and resolves with { port, url, model, stop() } once it answers
// /health. `cycle: true` serves the bundle's cycle model (greedy output follows a fixed
// permutation of the tokens: n-gram drafts get accepted). A port taken between choosing it and
// the server's bind is tried again with another.
//
// `cpu`: pin the server's threads to that CPU (taskset), so that a test timing it keeps the
// client, the proxy and llmtap off its core (they go on another with `pinned()`); ignored on a
// machine with one CPU.
export async function startLlamaServer({ flags = [], cycle = false, cpu } = {}) {
  const env = {};
  let model = 'tiny-llama';
  if (cycle) {
    const work = (await sh(['work'])).stdout.trim();
    env.LLAMA_MODEL = join(work, 'model', 'tiny-llama-cycle.gguf');
    env.LLAMA_ALIAS = model = 'tiny-llama-cycle';
  }
  let last;
  for (let attempt = 0; attempt < 5; ++attempt) {
    const port = await freePort();
    last = await sh(['start', String(port), ...flags], env);
    if (last.code === 0) {
      if (cpu !== undefined && cpus().length > 1) {
        const work = (await sh(['work'])).stdout.trim();
        const pid = readFileSync(join(work, 'run', `${port}.pid`), 'utf8').trim();
        await new Promise((resolve) => execFile('taskset', ['-a', '-cp', String(cpu), pid], resolve));
      }
      return {
        port,
        model,
        url: (path = '') => `http://127.0.0.1:${port}${path}`,
        stop: () => sh(['stop', String(port)]),
      };
    }
    if (!/address already in use|bind/i.test(last.stderr)) break;
  }
  throw new Error(`llama-server did not start:\n${last.stdout}\n${last.stderr}`);
}

// A command line run on CPU `cpu` (taskset -c), beside a server pinned to another: [program,
// ...args] for startProxy's `command` or run(). Unpinned on a machine with one CPU.
export function pinned(cpu, command) {
  return cpus().length > 1 ? ['taskset', '-c', String(cpu), ...command] : command;
}
