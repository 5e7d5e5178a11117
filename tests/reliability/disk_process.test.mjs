// Reliability of `llmtap proxy` under disk and process faults, with real processes on free
// loopback ports: a full filesystem (a small tmpfs in the proxy's own mount namespace), a
// very slow disk (through the capture core's Env seam: llmtap_slow_disk), a destination that
// is unwritable and then writable, the capture file moved away under load,
// SIGKILL under load. In every case: every request is answered, every record is either in a
// file or counted, every file holds whole lines, and capture resumes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync, rmSync, renameSync, readdirSync, readFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import {
  LLMTAP, startProcess, startSim, startProxy, stop, url, readLines, readManifest,
  checkAIPerfRows, tempDir, cleanup, logged,
} from '../node/proxy_helpers.mjs';

const LISTENING = /listening on http:\/\/127\.0\.0\.1:(\d+)/;

// One chat request of about `bytes` bytes; resolves to the HTTP status.
async function send(proxy, i, { bytes = 1000, stream = false } = {}) {
  const body = JSON.stringify({
    model: 'm', max_tokens: 2, stream,
    messages: [{ role: 'user', content: `request ${i} ${'x'.repeat(Math.max(0, bytes - 90))}` }],
  });
  const r = await fetch(url(proxy, '/v1/chat/completions'), { method: 'POST', body });
  await r.text();
  return r.status;
}

// The capture counters from the proxy's metrics endpoint.
async function counters(proxy) {
  const text = await (await fetch(url(proxy, '/llmtap/metrics'))).text();
  const c = {};
  for (const m of text.matchAll(/^llmtap_capture_(\w+?)(?:_total)? (\d+)$/gm)) c[m[1]] = Number(m[2]);
  return c;
}

// Waits until `fn` holds; `ms` is a guard against a hang only (every wait here ends on an event
// the test caused, so a loaded machine makes it later, never red).
async function waitFor(what, fn, ms = 120000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// The process's whole stderr once it exited: `stop` resolves on the exit, when the pipe may still
// hold the last lines (Node emits 'exit' before the child's stdio streams close).
async function allStderr(p) {
  if (!p.proc.stderr.closed) await new Promise((r) => p.proc.stderr.once('close', r));
  return p.stderr;
}

// Every counted request is in exactly one outcome.
function assertAccounted(c) {
  assert.equal(c.matched, c.recorded + c.skipped_too_large + c.sampled_out + c.invalid_body + c.non_standard_json +
    c.dropped_queue_full + c.write_failed_records + c.queued_records, JSON.stringify(c));
  assert.equal(c.queued_records, 0);
}

// Whole lines only: the file ends with '\n' and every line is JSON.
function assertWholeLines(path) {
  const text = readFileSync(path, 'utf8');
  assert.ok(text === '' || text.endsWith('\n'), `${path} ends with a complete line`);
  return readLines(path);
}

// Stops the proxy (exit 0) and checks its capture: whole lines, one per recorded request,
// and `sent` = recorded + the counted drops of kind `dropped` (a manifest counter).
async function stopAndCheckCapture(proxy, capturePath, sent, dropped) {
  assert.deepEqual(await stop(proxy), { code: 0, signal: null });
  const rows = assertWholeLines(capturePath);
  const m = readManifest(capturePath);
  assert.equal(m.counters.recorded, rows.length);
  assert.equal(m.counters.recorded + m.counters[dropped], sent);
  assertAccounted(m.counters);
  checkAIPerfRows(rows, 'mooncake_payload');
}

test('full filesystem: requests unaffected, losses counted exactly, capture resumes', async () => {
  const dir = tempDir();
  const mnt = join(dir, 'mnt');
  mkdirSync(mnt);
  const sim = await startSim();
  // The proxy runs in its own mount namespace with a 256 KiB tmpfs at `mnt`; this process
  // sees that filesystem through /proc/PID/root. `exec` keeps the proxy's PID.
  const proxy = await startProcess('unshare', ['-m', '--propagation', 'private', 'sh', '-c',
    'mount -t tmpfs -o size=256k tmpfs "$0" && exec "$1" proxy --listen 127.0.0.1:0 --threads 2 ' +
    '--upstream "$2" --capture --capture-path "$0/requests.jsonl"', mnt, LLMTAP, url(sim)],
  { pattern: LISTENING });
  const inside = `/proc/${proxy.proc.pid}/root${mnt}`;
  try {
    // Fill most of the filesystem, then send more than the rest can hold.
    writeFileSync(join(inside, 'filler'), Buffer.alloc(200 * 1024));
    let i = 0;
    for (; i < 150; ++i) assert.equal(await send(proxy, i), 200);
    await waitFor('the writer to give up on the full disk', async () => (await counters(proxy)).queued_records === 0);
    const full = await counters(proxy);
    assert.ok(full.write_failed_records > 0, `some records lost: ${JSON.stringify(full)}`);
    assert.ok(full.recorded > 0);
    assert.equal(assertWholeLines(join(inside, 'requests.jsonl')).length, full.recorded);
    assertAccounted(full);
    await logged(proxy, /No space left on device/);  // stderr is a pipe of its own: waited for

    // Space comes back: capture resumes (after the writer's back-off) without a restart.
    rmSync(join(inside, 'filler'));
    const resumed = full.recorded;
    await waitFor('capture to resume', async () => {
      assert.equal(await send(proxy, i++), 200);
      return (await counters(proxy)).recorded > resumed;
    });
    for (let k = 0; k < 20; ++k) assert.equal(await send(proxy, i++), 200);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    // The proxy has exited; its mount namespace (and the tmpfs) is gone with it, so the
    // final manifest was the last thing it wrote there. Check the counters it reported.
    const lastLine = (await allStderr(proxy)).match(/capture stopped: (\d+) recorded, (\d+) not recorded/);
    assert.ok(lastLine, proxy.stderr);
    assert.equal(Number(lastLine[1]) + Number(lastLine[2]), i, 'every request recorded or counted');
    assert.ok(Number(lastLine[1]) >= resumed + 20);
  } finally {
    // The sim is stopped even when the proxy's stop fails (a sanitizer report): a process left
    // running keeps this file's node process alive until ctest's timeout.
    try {
      await stop(proxy);
    } finally {
      await stop(sim);
      cleanup(dir);
    }
  }
});

test('very slow writer (Env seam): requests answered, queue-full drops counted exactly, capture resumes', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  // Every capture write waits until the test sends SIGUSR1 (then the disk is fast): the slowest
  // disk, one that does not answer. The queue holds about 14 records, so it overflows after
  // about 15 requests however fast they come (with writes that took 0.5 s each, requests slower
  // than 36 ms apart, as on a loaded machine, never filled it).
  const slowDisk = [join(dirname(LLMTAP), 'llmtap_slow_disk'), '--stall'];
  const sim = await startSim();
  const proxy = await startProxy({
    upstream: url(sim), command: slowDisk,
    args: ['--capture', '--capture-path', capturePath, '--max-request-bytes', '8192',
      '--max-queue-bytes', '16384'],
  });
  try {
    // Requests one after another until the queue overflowed: each is answered without waiting
    // for the writer (had one waited, the first would never have been answered: the test hangs
    // until ctest's timeout fails it).
    let i = 0;
    for (; i < 60 || (i < 1000 && (await counters(proxy)).dropped_queue_full === 0); ++i) {
      assert.equal(await send(proxy, i), 200);
    }
    const during = await counters(proxy);
    assert.ok(during.dropped_queue_full > 0, JSON.stringify(during));
    proxy.proc.kill('SIGUSR1');  // the disk is fast again
    await waitFor('capture to resume on the fast disk', async () => {
      const before = (await counters(proxy)).recorded;
      assert.equal(await send(proxy, i++), 200);
      await new Promise((r) => setTimeout(r, 100));
      return (await counters(proxy)).recorded > before && (await counters(proxy)).queued_records === 0;
    });
    await stopAndCheckCapture(proxy, capturePath, i, 'dropped_queue_full');
  } finally {
    proxy.proc.kill('SIGUSR1');  // a stalled writer would hold the stop forever
    // The sim is stopped even when the proxy's stop fails (a sanitizer report): a process left
    // running keeps this file's node process alive until ctest's timeout.
    try {
      await stop(proxy);
    } finally {
      await stop(sim);
      cleanup(dir);
    }
  }
});

test('unwritable destination that becomes writable: serving unaffected, then capture resumes', async () => {
  const dir = tempDir();
  // A regular file where the capture's directory should be: even root cannot write there.
  writeFileSync(join(dir, 'captures'), 'not a directory');
  const capturePath = join(dir, 'captures', 'requests.jsonl');
  const sim = await startSim();
  const proxy = await startProxy({ upstream: url(sim), args: ['--capture', '--capture-path', capturePath] });
  try {
    // Logged at the start, on stderr: a pipe of its own, which this side may read after the
    // "listening" line on stdout that startProxy waited for. Waited for, not read at once.
    await logged(proxy, /cannot be written/);
    let i = 0;
    for (; i < 10; ++i) assert.equal(await send(proxy, i), 200);
    await waitFor('the losses to be counted', async () => (await counters(proxy)).write_failed_records === 10);
    rmSync(join(dir, 'captures'));
    await waitFor('capture to resume', async () => {
      assert.equal(await send(proxy, i++), 200);
      return (await counters(proxy)).recorded > 0;
    });
    await stopAndCheckCapture(proxy, capturePath, i, 'write_failed_records');
  } finally {
    // The sim is stopped even when the proxy's stop fails (a sanitizer report): a process left
    // running keeps this file's node process alive until ctest's timeout.
    try {
      await stop(proxy);
    } finally {
      await stop(sim);
      cleanup(dir);
    }
  }
});

test('capture file moved away under load: nothing lost, a new file starts at the path', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const moved = join(dir, 'shipped.jsonl');
  const sim = await startSim();
  const proxy = await startProxy({ upstream: url(sim), args: ['--capture', '--capture-path', capturePath] });
  try {
    let next = 0;
    let moving = true;
    const worker = async () => {
      while (moving) assert.equal(await send(proxy, next++, { stream: next % 2 === 0 }), 200);
    };
    const workers = Array.from({ length: 8 }, worker);
    // 300 ms of load before the move and after it, and each time not before the file at the path
    // holds records: the writer creates it with its first record, which a TSan proxy on a loaded
    // machine may not have written 300 ms in (renameSync would throw ENOENT), and after the move
    // the new file must have begun before the load ends (or it holds nothing).
    await new Promise((r) => setTimeout(r, 300));
    await waitFor('the first records', () => existsSync(capturePath));
    renameSync(capturePath, moved);
    await new Promise((r) => setTimeout(r, 300));
    await waitFor('a new file at the capture path', () => existsSync(capturePath));
    moving = false;
    await Promise.all(workers);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const before = assertWholeLines(moved);
    const after = assertWholeLines(capturePath);
    assert.ok(before.length > 0 && after.length > 0, `${before.length} + ${after.length}`);
    const ids = [...before, ...after].map((r) => Number(r.payload.messages[0].content.split(' ')[1]));
    assert.equal(new Set(ids).size, next, 'every request is in one of the two files, once');
    assert.equal(after[0].timestamp, 0, 'the new file counts from its own first record');
    assert.match(await allStderr(proxy), /moved or deleted/);
  } finally {
    // The sim is stopped even when the proxy's stop fails (a sanitizer report): a process left
    // running keeps this file's node process alive until ctest's timeout.
    try {
      await stop(proxy);
    } finally {
      await stop(sim);
      cleanup(dir);
    }
  }
});

test('SIGKILL under load: every line parses; the torn tail is cut at the next start', async () => {
  const dir = tempDir();
  const capturePath = join(dir, 'requests.jsonl');
  const sim = await startSim();
  let proxy = await startProxy({ upstream: url(sim), args: ['--capture', '--capture-path', capturePath] });
  try {
    let next = 0;
    let running = true;
    const worker = async () => {
      while (running) {
        try {
          await send(proxy, next++, { bytes: 3000 + (next % 7) * 1000 });
        } catch {
          return;  // the proxy is gone
        }
      }
    };
    const workers = Array.from({ length: 16 }, worker);
    // Killed 500 ms into the load, and not before more than 20 lines are on disk (checked
    // below): a TSan proxy on a loaded machine may not have written that many in 500 ms.
    await new Promise((r) => setTimeout(r, 500));
    await waitFor('more than 20 lines on disk', () =>
      existsSync(capturePath) && readFileSync(capturePath, 'utf8').split('\n').length > 22);
    assert.deepEqual(await stop(proxy, 'SIGKILL'), { code: null, signal: 'SIGKILL' });
    running = false;
    await Promise.all(workers);
    // Whatever the kill left: complete lines parse; at most the last line is torn.
    const text = readFileSync(capturePath, 'utf8');
    const lines = text.split('\n');
    const torn = lines.pop();
    for (const l of lines) JSON.parse(l);
    assert.ok(lines.length > 20, `${lines.length} lines`);

    // The next start keeps the old capture (torn tail cut) and starts a new file.
    proxy = await startProxy({ upstream: url(sim), args: ['--capture', '--capture-path', capturePath] });
    assert.equal(await send(proxy, 'after'), 200);
    assert.deepEqual(await stop(proxy), { code: 0, signal: null });
    const asides = readdirSync(dir).filter((n) => /^requests\.\d{8}T\d{6}\.\d{3}Z\.jsonl$/.test(n));
    assert.equal(asides.length, 1, readdirSync(dir).join(' '));
    const kept = assertWholeLines(join(dir, asides[0]));
    assert.equal(kept.length, lines.length);
    if (torn !== '') assert.match(await allStderr(proxy), /cut a torn last line/);
    assert.equal(readLines(capturePath).length, 1);
  } finally {
    // The sim is stopped even when the proxy's stop fails (a sanitizer report): a process left
    // running keeps this file's node process alive until ctest's timeout.
    try {
      await stop(proxy);
    } finally {
      await stop(sim);
      cleanup(dir);
    }
  }
});
