"""CaptureMiddleware: llmtap's payload capture inside an ASGI application.

vLLM::

    NIM_CAPTURE_ENABLE=1 vllm serve MODEL --middleware llmtap.asgi.CaptureMiddleware

Any ASGI app (FastAPI, Starlette, ...)::

    app = FastAPI()
    app.add_middleware(CaptureMiddleware)      # or: app = CaptureMiddleware(app)

What it does, per HTTP request (a pure ASGI middleware: no framework is imported):

- Settings come from ``NIM_CAPTURE_ENABLE`` and ``NIM_CAPTURE_ARGS`` exactly as ``llmtap proxy``
  reads them (same defaults, same warnings, invalid JSON disables capture). With capture off the
  middleware passes every call straight through.
- A POST whose path matches ``endpoint_pattern`` has its body teed as the app reads it: the app
  gets the very ``receive`` messages the server sent (chunked or not), the middleware keeps
  references to their bytes until the last one, then hands them to the core (which compacts and
  queues them with the GIL released) and drops them. Nothing is read that the app did not read.
  A body past ``max_request_bytes`` is not kept; it is counted as too large, as in the proxy.
  Other requests are only counted.
- With ``outcomes`` on, ``send`` is watched for the status, the first body byte and the end of
  the response, and each body chunk goes through the core's usage scanner (JSON or SSE) on its
  way out; nothing is buffered.
- Capture starts on the ASGI ``lifespan`` startup (or the first request) and stops on shutdown:
  the queue drains and the manifest is written. SIGHUP finishes the current file, as in the
  proxy.
- A process started by ``multiprocessing`` (uvicorn ``--workers N``, vLLM's API server count)
  writes its own file, ``requests.pid<PID>.jsonl`` beside the configured path, each with its own
  manifest; ``llmtap merge`` joins them.
"""

import asyncio
import atexit
import multiprocessing
import os
import signal
import threading
import time

from llmtap import _native

__all__ = ["CaptureMiddleware"]


def _default_file_tag():
    # A worker process of a multi-process server: its own file.
    return f"pid{os.getpid()}" if multiprocessing.parent_process() is not None else ""


def _header(headers, name):
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


class CaptureMiddleware:
    """Records the requests reaching ``app`` with llmtap's capture core (see the module doc)."""

    def __init__(self, app, *, environ=None, file_tag=None, core_env=None):
        """environ: where NIM_CAPTURE_ENABLE / NIM_CAPTURE_ARGS are read (os.environ).
        file_tag: inserted in the capture file's name ("pid<PID>" in a multiprocessing worker,
        else none). core_env: the capture core's Env seam (tests: _llmtap_fault.FaultDisk().env).
        """
        env = os.environ if environ is None else environ
        self.app = app
        self.capture = _native.Capture(
            env.get("NIM_CAPTURE_ENABLE"),
            env.get("NIM_CAPTURE_ARGS"),
            _default_file_tag() if file_tag is None else file_tag,
            env=core_env,
        )
        self._enabled = self.capture.enabled
        self._outcomes = self._enabled and self.capture.outcomes
        self._limit = self.capture.max_request_bytes
        self._started = False
        self._stopped = False
        self._lock = threading.Lock()

    # --- start and stop ---

    def start(self):
        """Starts the capture (idempotent); the lifespan startup or the first request calls it."""
        with self._lock:
            if self._started or not self._enabled:
                return
            self._started = True
        self.capture.start()  # an unwritable destination is logged; the core keeps retrying
        atexit.register(self.stop)
        self._install_sighup()

    def stop(self):
        """Drains the queue, writes the manifest, stops the writer (idempotent)."""
        with self._lock:
            if self._stopped or not self._started:
                return
            self._stopped = True
        self.capture.stop()

    def _install_sighup(self):
        # Only where SIGHUP would otherwise end the process (its default): never over a
        # handler the server installed.
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL:
            return
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.capture.rotate)
        except (RuntimeError, NotImplementedError):
            signal.signal(signal.SIGHUP, lambda signum, frame: self.capture.rotate())

    async def _lifespan(self, scope, receive, send):
        async def lifespan_receive():
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.start()
            return message

        async def lifespan_send(message):
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await asyncio.get_running_loop().run_in_executor(None, self.stop)
            await send(message)

        await self.app(scope, lifespan_receive, lifespan_send)

    # --- requests ---

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind == "lifespan" and self._enabled:
            return await self._lifespan(scope, receive, send)
        if kind != "http" or not self._enabled or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        if not self._started:
            self.start()
        started_ns = time.monotonic_ns()
        capture = self.capture
        # The path as the client sent it (percent-encoded), as the proxy sees its target.
        raw = scope.get("raw_path")
        path = raw.decode("latin-1") if raw else scope["path"]
        if not capture.would_record(path):
            capture.offer(path, b"")  # counted (offered, not matched), as in the proxy
            return await self.app(scope, receive, send)

        limit = self._limit
        state = _RequestState()

        async def tee_receive():
            message = await receive()
            if state.offered:
                if message["type"] == "http.disconnect":
                    state.disconnected = True
                return message
            kind = message["type"]
            if kind == "http.request":
                body = message.get("body", b"")
                if body:
                    state.size += len(body)
                    if state.chunks is not None:
                        if state.size > limit:
                            state.chunks = None  # too large: not kept
                        else:
                            state.chunks.append(bytes(body) if type(body) is not bytes else body)
                if not message.get("more_body", False):
                    state.offered = True
                    chunks, state.chunks = state.chunks, None
                    if chunks is None:
                        capture.offer_oversized(path, state.size)
                    else:
                        state.ticket = capture.offer(
                            path, chunks[0] if len(chunks) == 1 else chunks, scope.get("headers")
                        )
            elif kind == "http.disconnect":
                state.disconnected = True
            return message

        if not self._outcomes:
            return await self.app(scope, tee_receive, send)

        async def watch_send(message):
            if state.ticket:
                kind = message["type"]
                if kind == "http.response.start":
                    state.status = message["status"]
                    state.scanner = _native.UsageScanner(
                        _header(message.get("headers", ()), b"content-type")
                    )
                elif kind == "http.response.body":
                    body = message.get("body", b"")
                    if body:
                        if state.first_byte_ns == 0:
                            state.first_byte_ns = time.monotonic_ns()
                        if state.scanner is not None:
                            state.scanner.feed(bytes(body) if type(body) is not bytes else body)
                    if not message.get("more_body", False):
                        state.end_ns = time.monotonic_ns()
            await send(message)

        app_error = False
        try:
            await self.app(scope, tee_receive, watch_send)
        except asyncio.CancelledError:
            state.disconnected = True  # the server cancels the app when its client is gone
            raise
        except BaseException:
            app_error = True
            raise
        finally:
            if state.ticket:
                end_ns = state.end_ns or time.monotonic_ns()
                status = state.status
                if status == 0 and app_error:
                    status = 500  # what the server answers for an app that raised first
                capture.report(
                    state.ticket,
                    status,
                    (state.first_byte_ns - started_ns) // 1000 if state.first_byte_ns else -1,
                    (end_ns - started_ns) // 1000,
                    state.scanner,
                    state.disconnected and state.end_ns == 0,
                    app_error,
                )


class _RequestState:
    __slots__ = (
        "chunks",
        "size",
        "offered",
        "ticket",
        "disconnected",
        "status",
        "scanner",
        "first_byte_ns",
        "end_ns",
    )

    def __init__(self):
        self.chunks = []
        self.size = 0
        self.offered = False
        self.ticket = 0
        self.disconnected = False
        self.status = 0
        self.scanner = None
        self.first_byte_ns = 0
        self.end_ns = 0
