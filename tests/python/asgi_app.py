"""The FastAPI upstream of the proxy's tests (tests/upstream/app.py, imported by path, never
copied) wrapped in llmtap.asgi.CaptureMiddleware and served by uvicorn: the in-process
capture's integration tests (tests/node/asgi.test.mjs) send it what they send `llmtap proxy`
in front of app.py, and compare the captures.

Run (with PYTHONPATH holding the build's python/ directory, where llmtap and _llmtap_fault live):

    python3 asgi_app.py [--workers N] [--lifespan on|off] [--slow-disk-us US] [--disk-space BYTES]
                        [--stall-disk]

-> prints "asgi listening on http://127.0.0.1:PORT" (a free port). Capture settings come from
NIM_CAPTURE_ENABLE / NIM_CAPTURE_ARGS, exactly as for the proxy.

--workers N: uvicorn's multi-process mode (each worker a spawned process that builds the app
from the import string asgi_app:make_app; the options reach it through the environment, and
each worker writes its own requests.pid<PID>.jsonl). --slow-disk-us / --disk-space give the
capture core a slow or full disk through its Env seam (_llmtap_fault, a test-only module);
--stall-disk one whose every write blocks until the process gets SIGUSR1 (one worker only; the
capture's stop waits for its writes, so send SIGUSR1 before SIGTERM).
"""

import argparse
import importlib.util
import os
import socket
import sys

import uvicorn

HERE = os.path.dirname(os.path.abspath(__file__))
UPSTREAM_APP = os.path.join(HERE, "..", "upstream", "app.py")

# The launcher's options as the worker processes see them (spawned interpreters inherit the
# environment).
SLOW_DISK_US = "LLMTAP_TEST_ASGI_SLOW_DISK_US"
DISK_SPACE = "LLMTAP_TEST_ASGI_DISK_SPACE"
STALL_DISK = "LLMTAP_TEST_ASGI_STALL_DISK"


def upstream_app():
    """tests/upstream/app.py's FastAPI app (importing it starts no server)."""
    spec = importlib.util.spec_from_file_location("llmtap_test_upstream_app", UPSTREAM_APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


def make_app():
    """The upstream app in CaptureMiddleware, its disk faults from the environment."""
    from llmtap.asgi import CaptureMiddleware

    core_env = None
    slow_us = int(os.environ.get(SLOW_DISK_US, "0"))
    space = os.environ.get(DISK_SPACE, "")
    stall = os.environ.get(STALL_DISK) == "1"
    if slow_us or space or stall:
        import _llmtap_fault

        disk = _llmtap_fault.FaultDisk()
        if slow_us:
            disk.set_write_delay_us(slow_us)
        if space:
            disk.set_disk_space(int(space))
        if stall:
            import signal

            disk.stall()
            signal.signal(signal.SIGUSR1, lambda *_: disk.unstall())
        core_env = disk.env
    return CaptureMiddleware(upstream_app(), core_env=core_env)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--lifespan", choices=("on", "off"), default="off")
    parser.add_argument("--slow-disk-us", type=int, default=0)
    parser.add_argument("--disk-space", type=int, default=None)
    parser.add_argument("--stall-disk", action="store_true")
    args = parser.parse_args()
    if args.stall_disk:
        os.environ[STALL_DISK] = "1"
    if args.slow_disk_us:
        os.environ[SLOW_DISK_US] = str(args.slow_disk_us)
    if args.disk_space is not None:
        os.environ[DISK_SPACE] = str(args.disk_space)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)  # before the port is printed, so that nobody is refused
    print(f"asgi listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    if args.workers > 1:
        from uvicorn.supervisors import Multiprocess

        config = uvicorn.Config("asgi_app:make_app", factory=True, workers=args.workers,
                                log_level="warning", lifespan=args.lifespan)
        server = uvicorn.Server(config)
        Multiprocess(config, target=server.run, sockets=[sock]).run()
    else:
        config = uvicorn.Config(make_app(), log_level="warning", lifespan=args.lifespan)
        uvicorn.Server(config).run(sockets=[sock])
    # After the lifespan shutdown (where the capture stops with --lifespan on) and before the
    # interpreter's exit (where it stops with --lifespan off): the tests check the order.
    print("asgi: uvicorn returned", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
