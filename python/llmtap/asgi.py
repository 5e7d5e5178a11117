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
  the response, and each body chunk goes through the core's response reader (JSON or SSE, by
  the request's API) on its way out; nothing is held back. With ``capture_responses`` on (which
  turns ``outcomes`` on), the reader also keeps choice 0's generated text for the outcome line,
  one event (or a whole unstreamed body) at a time, as in the proxy.
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
        self._wants_headers = self._enabled and self.capture.wants_headers
        self._started = False
        self._stopped = False
        self._lock = threading.Lock()
        # raw path -> (path, whether endpoint_pattern matches it): a dict lookup instead of a
        # decode and a call into the core per request. Bounded.
        self._paths = {}

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
        capture = self.capture
        # The path as the client sent it (percent-encoded), as the proxy sees its target.
        raw = scope.get("raw_path") or scope["path"].encode("latin-1", "replace")
        known = self._paths.get(raw)
        path, matches = known if known is not None else self._match(raw)
        if not matches:
            capture.offer(path, b"")  # counted (offered, not matched), as in the proxy
            return await self.app(scope, receive, send)
        if self._outcomes:
            return await self._call_with_outcomes(scope, receive, send, path)

        # Outcomes off: only the body is teed (no clock, no watch).
        headers = scope.get("headers") if self._wants_headers else None
        return await self.app(
            scope, _teed_receive(receive, capture, path, headers, self._limit, None), send
        )

    def _match(self, raw):
        """(path, whether endpoint_pattern matches it) for the raw path bytes, remembered."""
        path = raw.decode("latin-1")
        known = (path, self.capture.would_record(path))
        if self._started and not self._stopped:  # would_record is False outside a run
            if len(self._paths) >= 1024:
                self._paths.clear()
            self._paths[raw] = known
        return known

    async def _call_with_outcomes(self, scope, receive, send, path):
        """Outcomes on: the body teed as in __call__, and the response watched by the core's
        ResponseWatch (status, first body byte, end, usage), which passes every message on."""
        capture = self.capture
        watch = _native.ResponseWatch(capture, send, time.monotonic_ns(), path)
        headers = scope.get("headers") if self._wants_headers else None
        tee_receive = _teed_receive(receive, capture, path, headers, self._limit, watch)

        app_error = False
        try:
            await self.app(scope, tee_receive, watch)
        except asyncio.CancelledError:
            watch.disconnected = True  # the server cancels the app when its client is gone
            raise
        except BaseException:
            app_error = True
            raise
        finally:
            watch.finish(app_error)


_DONE = object()  # a request whose body was offered


def _teed_receive(receive, capture, path, headers, limit, watch):
    """The app's `receive`: the server's, with each http.request message's body teed to the
    capture (see _BodyTee), and a disconnect noted on `watch` (outcomes on; else None)."""
    tee = None  # a _BodyTee once the body comes in several messages; _DONE once offered

    async def tee_receive():
        nonlocal tee
        message = await receive()
        kind = message["type"]
        if kind != "http.request":
            if kind == "http.disconnect" and watch is not None:
                watch.disconnected = True
            return message
        if tee is _DONE:
            return message
        if tee is None:
            if not message.get("more_body", False):  # the whole body in one message (common)
                tee = _DONE
                ticket = _offer_whole(capture, path, message.get("body", b""), headers, limit)
                if watch is not None:
                    watch.ticket = ticket
                return message
            tee = _BodyTee(capture, path, headers, limit)
        ticket = tee.feed(message)
        if tee.done:
            tee = _DONE
            if watch is not None:
                watch.ticket = ticket
        return message

    return tee_receive


def _offer_whole(capture, path, body, headers, limit):
    """Offers a complete body (bytes-like); returns the ticket (0: none)."""
    if len(body) > limit:
        capture.offer_oversized(path, len(body))  # counted as too large, as in the proxy
        return 0
    return capture.offer(path, body if type(body) is bytes else bytes(body), headers)


class _BodyTee:
    """A request body that comes in several http.request messages, as the app reads them: the
    chunks are kept (none past max_request_bytes) and offered once the last one has passed."""

    __slots__ = ("capture", "path", "headers", "limit", "chunks", "size", "done")

    def __init__(self, capture, path, headers, limit):
        self.capture = capture
        self.path = path
        self.headers = headers
        self.limit = limit
        self.chunks = []
        self.size = 0
        self.done = False

    def feed(self, message):
        """Takes the next http.request message; returns the ticket once the body was offered."""
        body = message.get("body", b"")
        if body:
            self.size += len(body)
            if self.chunks is not None:
                if self.size > self.limit:
                    self.chunks = None  # too large: not kept
                else:
                    self.chunks.append(body if type(body) is bytes else bytes(body))
        if message.get("more_body", False):
            return 0
        self.done = True
        chunks, self.chunks = self.chunks, None
        if chunks is None:
            self.capture.offer_oversized(self.path, self.size)
            return 0
        if len(chunks) <= 1:
            return _offer_whole(self.capture, self.path, chunks[0] if chunks else b"",
                                self.headers, self.limit)
        return self.capture.offer(self.path, chunks, self.headers)
