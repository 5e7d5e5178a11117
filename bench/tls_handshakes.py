#!/usr/bin/env python3
"""TLS handshakes per second: `llmtap proxy --tls-cert/--tls-key` against nginx (listen ssl),
both one worker on CPU --proxy-cpu in front of the same `llmtap sim`, measured in the same run.

Each cycle is what a client that does not keep connections alive does: connect, handshake, one
small request (GET /health, answered by the sim through the proxy) and its response, close.
Modes, per TLS version (1.3 and 1.2):
  new     a full handshake every time (no session offered)
  resume  the previous connection's session offered (TLS 1.3 ticket, TLS 1.2 session id);
          the share of cycles the server resumed is printed
The client (Python's ssl, one thread, on --client-cpu with the sim) limits the rate, so the
figure to compare is the server's CPU time per cycle (utime + stime of the proxy process from
/proc), with the cycles per second beside it. Rounds alternate the order of the targets.

usage: tls_handshakes.py [--build DIR] [--seconds S] [--rounds N]
"""
import argparse
import json
import os
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, cpu, pattern, log):
    """Starts a server with its output in `log`; its port from the first line matching."""
    with open(log, "w") as out:
        proc = subprocess.Popen(["taskset", "-c", str(cpu), *args], stdout=out,
                                stderr=subprocess.STDOUT)
    for _ in range(200):
        with open(log) as f:
            m = re.search(pattern, f.read())
        if m:
            return proc, int(m.group(1))
        time.sleep(0.05)
    raise SystemExit(f"{args[0]} {args[1]} did not start: " + open(log).read())


def start_nginx(work, certs, sim_port, cpu):
    port = free_port()
    conf = f"""worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/error.log error;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {work}/body;
  proxy_temp_path {work}/proxy;
  upstream sim {{ server 127.0.0.1:{sim_port}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {certs}/server.pem;
    ssl_certificate_key {certs}/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:tls:1m;
    location / {{
      proxy_pass http://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"""
    with open(f"{work}/nginx.conf", "w") as f:
        f.write(conf)
    proc = subprocess.Popen(["taskset", "-c", str(cpu), "nginx", "-p", work, "-c",
                             f"{work}/nginx.conf", "-e", f"{work}/error.log"])
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout
    return proc, port, int(out.split()[0])


def cycle(ctx, port, session):
    with socket.create_connection(("127.0.0.1", port)) as raw:
        # Without it the request after a resumed TLS 1.2 handshake waits out Nagle against the
        # server's delayed ACK (40 ms).
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            if not data.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"port {port} answered {data[:80]!r}")
            return s.session, s.session_reused


def measure(ctx, port, pid, seconds, resume):
    session = None
    n = reused = 0
    cpu0, t0 = cpu_s(pid), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        got, was_reused = cycle(ctx, port, session if resume else None)
        if resume:
            session = got
        n += 1
        reused += was_reused
    elapsed = time.perf_counter() - t0
    return {"per_s": n / elapsed, "cpu_us": (cpu_s(pid) - cpu0) * 1e6 / n,
            "resumed": reused / n}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    a = ap.parse_args()
    llmtap = os.path.realpath(os.path.join(a.build, "llmtap"))
    work = tempfile.mkdtemp(prefix="llmtap-tls-hs-")
    certs = f"{work}/certs"
    subprocess.run(["bash", f"{ROOT}/tests/lib/make_test_certs.sh", certs], check=True)
    procs = []
    try:
        sim, sim_port = start([llmtap, "sim", "--listen", "127.0.0.1:0", "--threads", "1"],
                              a.client_cpu, r"listening on http://127\.0\.0\.1:(\d+)",
                              f"{work}/sim.log")
        procs.append(sim)
        lt, lt_port = start([llmtap, "proxy", "--listen", "127.0.0.1:0", "--threads", "1",
                             "--no-capture", "--upstream", f"http://127.0.0.1:{sim_port}",
                             "--tls-cert", f"{certs}/server.pem", "--tls-key",
                             f"{certs}/server.key"],
                            a.proxy_cpu, r"listening on https://127\.0\.0\.1:(\d+)",
                            f"{work}/proxy.log")
        procs.append(lt)
        ngx, ngx_port, ngx_worker = start_nginx(work, certs, sim_port, a.proxy_cpu)
        procs.append(ngx)
        os.sched_setaffinity(0, {a.client_cpu})
        targets = [("nginx", ngx_port, ngx_worker), ("llmtap", lt_port, lt.pid)]
        print(f"host: {os.cpu_count()} CPUs; servers on CPU {a.proxy_cpu}, client and sim on "
              f"CPU {a.client_cpu}; {a.rounds} rounds of {a.seconds} s per target and mode; "
              f"load average {os.getloadavg()[0]:.2f}")
        results = {}
        for version in ("TLSv1.3", "TLSv1.2"):
            ctx = ssl.create_default_context(cafile=f"{certs}/ca.pem")
            ctx.minimum_version = ctx.maximum_version = {
                "TLSv1.3": ssl.TLSVersion.TLSv1_3, "TLSv1.2": ssl.TLSVersion.TLSv1_2}[version]
            for mode in ("new", "resume"):
                for r in range(a.rounds):
                    order = targets if r % 2 == 0 else targets[::-1]
                    for name, port, pid in order:
                        m = measure(ctx, port, pid, a.seconds, mode == "resume")
                        results.setdefault((version, mode, name), []).append(m)
                        print(f"  {version} {mode} round {r + 1} {name}: {m['per_s']:.0f}/s, "
                              f"server {m['cpu_us']:.1f} us/cycle, resumed {m['resumed']:.0%}")
        print("\n| TLS | mode | target | cycles/s | server CPU us/cycle | resumed | CPU "
              "efficiency vs nginx |")
        print("|---|---|---|---|---|---|---|")
        med = statistics.median
        for version in ("TLSv1.3", "TLSv1.2"):
            for mode in ("new", "resume"):
                for name in ("nginx", "llmtap"):
                    v = results[(version, mode, name)]
                    eff = med(n["cpu_us"] / max(l["cpu_us"], 1e-9) for n, l in
                              zip(results[(version, mode, "nginx")], v))
                    print(f"| {version} | {mode} | {name} | {med(x['per_s'] for x in v):.0f} | "
                          f"{med(x['cpu_us'] for x in v):.1f} | "
                          f"{med(x['resumed'] for x in v):.0%} | "
                          f"{'' if name == 'nginx' else f'{eff:.2f}x'} |")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
        print("JSON " + json.dumps({"|".join(k): v for k, v in results.items()}))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
