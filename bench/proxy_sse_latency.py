#!/usr/bin/env python3
"""proxy_sse_latency.py: latency a proxy adds to an SSE token stream (TTFT and every chunk).

Usage: proxy_sse_latency.py --body FILE --requests N --rounds R NAME=HOST:PORT ...

The first target is the reference (the upstream itself, "direct"). For every round, each target
gets N streaming POST /v1/chat/completions requests on its own keep-alive connection, all from
this one thread, one stream at a time and interleaved: one stream to each target in turn, the
order rotating by one each time, so that background load hits every target alike. Per request
it records the time from the end of sending the request to the first body byte (TTFT as a client
sees it) and the arrival time of every SSE event (an event is complete at its blank line).

Per-chunk latency: for event k (k >= 1) the arrival offset from the request's send minus the
reference target's median offset of event k in the same round. Pooled over all events and
requests, its p50/p99 is a target's per-chunk latency; the reference's own pooled distribution
is subtracted to give the added latency. Inter-event gaps are reported as well. Everything runs
on loopback; the upstream must have a fixed decode step (for example `llmtap sim --itl-ms 2
--itl-jitter-ms 0`) so that events are spread out and each arrives in its own read.

Standard library only. Prints one table per round, the medians of the per-round figures, and
the percentiles of all rounds pooled minus the reference's.
"""
import argparse
import socket
import statistics
import sys
import time


def pct(values, p):
    s = sorted(values)
    if not s:
        return float("nan")
    i = min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[i]


class Conn:
    def __init__(self, host, port, body):
        self.addr = (host, port)
        self.sock = None
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\n"
            "Content-Type: application/json\r\n"
            "Accept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.request = head.encode() + body
        self.buf = b""

    def connect(self):
        self.sock = socket.create_connection(self.addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None

    def one(self):
        """Sends one request; returns (ttft_ns, [event arrival offsets ns], last_event_bytes)."""
        if self.sock is None:
            self.connect()
        perf = time.perf_counter_ns
        recv = self.sock.recv

        def more(buf, where):
            """Appends the next read to `buf`; returns it and the read's arrival time."""
            data = recv(65536)
            if not data:
                raise RuntimeError("connection closed " + where)
            now = perf()
            return buf + data, now

        self.sock.sendall(self.request)
        t0 = perf()
        buf = self.buf
        # Response head.
        while b"\r\n\r\n" not in buf:
            buf, now = more(buf, "before the response head")
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        if not lines[0].startswith(b"HTTP/1.1 200"):
            raise RuntimeError("status: %r" % lines[0])
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            hdrs[k.strip().lower()] = v.strip().lower()
        if hdrs.get(b"transfer-encoding") != b"chunked":
            raise RuntimeError("expected a chunked SSE response, got %r" % hdrs)
        ttft = None
        events = []
        sse = b""
        last_event = b""
        # Chunked body: decode as bytes arrive; every complete SSE event gets the time of the
        # read that completed it.
        while True:
            # Ensure a chunk-size line.
            while b"\r\n" not in buf:
                buf, now = more(buf, "mid-body")
            size_line, _, rest = buf.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                while len(rest) < 2:
                    rest, _ = more(rest, "in the last chunk")
                self.buf = rest[2:]
                break
            while len(rest) < size + 2:
                rest, now = more(rest, "mid-chunk")
            if ttft is None:
                ttft = now - t0
            sse += rest[:size]
            buf = rest[size + 2:]
            while True:
                i = sse.find(b"\n\n")
                if i < 0:
                    break
                last_event = sse[:i]
                events.append(now - t0)
                sse = sse[i + 2:]
        if hdrs.get(b"connection") == b"close":
            self.close()
        return ttft, events, last_event


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--body", required=True)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("targets", nargs="+", help="NAME=HOST:PORT; the first is the reference")
    a = ap.parse_args()
    body = open(a.body, "rb").read()
    targets = []
    for t in a.targets:
        name, _, hp = t.partition("=")
        host, _, port = hp.rpartition(":")
        targets.append((name, Conn(host, int(port), body)))
    ref = targets[0][0]
    n_events = None
    per_round = {name: [] for name, _ in targets}  # name -> [dict of figures]
    pooled = {name: ([], []) for name, _ in targets}  # name -> (all TTFTs, all chunk lateness)
    for r in range(a.rounds):
        raw = {name: ([], []) for name, _ in targets}
        for name, conn in targets:
            conn.connect()
            for _ in range(a.warmup):
                conn.one()
        # Streams interleave between the targets (one each in turn, the order rotating), so
        # that a burst of background load hits every target alike.
        for i in range(a.requests):
            k = i % len(targets)
            for name, conn in targets[k:] + targets[:k]:
                ttft, ev, last = conn.one()
                if last.strip() != b"data: [DONE]":
                    raise RuntimeError(f"{name}: stream did not end with data: [DONE]: {last[:80]!r}")
                if n_events is None:
                    n_events = len(ev)
                elif len(ev) != n_events:
                    raise RuntimeError(f"{name}: {len(ev)} events, expected {n_events}")
                raw[name][0].append(ttft)
                raw[name][1].append(ev)
        for _, conn in targets:
            conn.close()
        # Reference median offset of each event index.
        ref_offs = raw[ref][1]
        ref_med = [statistics.median(o[k] for o in ref_offs) for k in range(n_events)]
        print(f"round {r + 1}: {a.requests} streams per target, {n_events} SSE events each "
              "(us; chunk = event arrival minus the direct median for that event)")
        print(f"  {'target':<14} {'TTFT p50':>9} {'TTFT p99':>9} {'chunk p50':>10} {'chunk p99':>10}"
              f" {'gap p50':>9} {'gap p99':>9}")
        for name, _ in targets:
            ttfts, offs = raw[name]
            late = [o[k] - ref_med[k] for o in offs for k in range(1, n_events)]
            gaps = [o[k] - o[k - 1] for o in offs for k in range(1, n_events)]
            f = {
                "ttft50": pct(ttfts, 50) / 1e3, "ttft99": pct(ttfts, 99) / 1e3,
                "chunk50": pct(late, 50) / 1e3, "chunk90": pct(late, 90) / 1e3,
                "chunk99": pct(late, 99) / 1e3, "ttft90": pct(ttfts, 90) / 1e3,
                "gap50": pct(gaps, 50) / 1e3, "gap99": pct(gaps, 99) / 1e3,
            }
            per_round[name].append(f)
            pooled[name][0].extend(ttfts)
            pooled[name][1].extend(late)
            print(f"  {name:<14} {f['ttft50']:9.1f} {f['ttft99']:9.1f} {f['chunk50']:10.1f}"
                  f" {f['chunk99']:10.1f} {f['gap50']:9.1f} {f['gap99']:9.1f}")
        sys.stdout.flush()
    print(f"median over {a.rounds} rounds of the per-round added latency vs {ref} (us; goal < 200 at p99):")
    print(f"  {'target':<14} {'TTFT p50':>9} {'TTFT p90':>9} {'TTFT p99':>9} {'chunk p50':>10}"
          f" {'chunk p90':>10} {'chunk p99':>10} {'gap p99':>9}")
    for name, _ in targets[1:]:
        d = {}
        for key in ("ttft50", "ttft90", "ttft99", "chunk50", "chunk90", "chunk99", "gap99"):
            d[key] = statistics.median(
                mine[key] - theirs[key] for mine, theirs in zip(per_round[name], per_round[ref]))
        print(f"  {name:<14} {d['ttft50']:+9.1f} {d['ttft90']:+9.1f} {d['ttft99']:+9.1f}"
              f" {d['chunk50']:+10.1f} {d['chunk90']:+10.1f} {d['chunk99']:+10.1f} {d['gap99']:+9.1f}")
    n = a.rounds * a.requests
    print(f"all {a.rounds} rounds pooled ({n} streams per target): percentile minus {ref}'s (us)")
    print(f"  {'target':<14} {'TTFT p50':>9} {'TTFT p90':>9} {'TTFT p99':>9} {'chunk p50':>10}"
          f" {'chunk p90':>10} {'chunk p99':>10}")
    rt, rl = pooled[ref]
    for name, _ in targets[1:]:
        t, l = pooled[name]
        print(f"  {name:<14}" + "".join(f" {(pct(t, p) - pct(rt, p)) / 1e3:+9.1f}" for p in (50, 90, 99))
              + "".join(f" {(pct(l, p) - pct(rl, p)) / 1e3:+10.1f}" for p in (50, 90, 99)))


if __name__ == "__main__":
    main()
