#!/usr/bin/env python3
"""Runs the llmtap command lines of deploy/k8s/*.yaml against a local S3 store (Ceph RGW from
tests/lib/with_rgw.sh) and `llmtap sim`, so that the manifests cannot rot: the capture sidecar
behind which traffic is sent, the merge of a day from the bucket, the Indexed replay Job (every
index, on one shared schedule), and the merge of the shards' reports.

Only what depends on the machine is replaced: listen and upstream addresses (the sim stands in
for the inference server), the replay target URL, the merge window (today instead of the
manifest's example day), START_AT (a few seconds ahead), and the bucket's endpoint and
credentials (the store's, not the Secret's placeholders). Everything else runs as written.

usage: k8s_commands_test.py LLMTAP_BINARY REPO_DIR
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

LLMTAP, REPO = sys.argv[1], sys.argv[2]
K8S = os.path.join(REPO, "deploy", "k8s")
BUCKET = "llmtap-traces"


def containers(manifest):
    """Every container of every document in a manifest file: (kind, container)."""
    with open(os.path.join(K8S, manifest)) as f:
        for doc in yaml.safe_load_all(f):
            spec = doc.get("spec", {})
            pod = spec.get("template", {}).get("spec", {})
            for c in pod.get("containers", []):
                yield doc["kind"], doc, c


def command_of(manifest, name):
    for kind, doc, c in containers(manifest):
        if c["name"] == name:
            return doc, c
    raise SystemExit(f"{manifest}: no container {name}")


def expand(args, env):
    """Kubernetes' $(VAR) expansion in command arguments."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]


def env_of(container, extra):
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
    env.update(extra)
    return env


def replace_arg(args, flag, value):
    i = args.index(flag)
    args[i + 1] = value


def binary(args):
    assert args[0] == "llmtap", args
    return [LLMTAP] + args[1:]


def start(args, env, pattern):
    proc = subprocess.Popen(args, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120  # a guard against a hang only: the line ends the wait
    for line in proc.stdout:
        m = re.search(pattern, line)
        if m:
            return proc, int(m.group(1))
        if time.time() > deadline:
            break
    proc.kill()
    raise SystemExit(f"{args[:3]} did not start: {proc.stderr.read()}")


def run(args, env=None):
    r = subprocess.run(args, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def main():
    subprocess.run(["bash", os.environ["LLMTAP_RGW"], "mb", os.environ["LLMTAP_RGW_DIR"], BUCKET],
                   check=True, stdout=subprocess.DEVNULL)
    listening = r"listening on http://127\.0\.0\.1:(\d+)"
    sim, sim_port = start([LLMTAP, "sim", "--listen", "127.0.0.1:0", "--ttft-ms", "1",
                           "--itl-ms", "0.2", "--output-tokens-mean", "8"], {}, listening)
    sim_url = f"http://127.0.0.1:{sim_port}"
    work = tempfile.mkdtemp(prefix="llmtap-k8s-")
    try:
        # 1. The sidecar of inference-with-capture.yaml, as pod llm-test-0.
        doc, c = command_of("inference-with-capture.yaml", "llmtap")
        assert doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30
        args = expand(c["command"], env_of(c, {"POD_NAME": "llm-test-0"}))
        replace_arg(args, "--listen", "127.0.0.1:0")
        replace_arg(args, "--upstream", sim_url)
        replace_arg(args, "--capture-path", os.path.join(work, "captures", "requests.jsonl"))
        env = {k: v for k, v in env_of(c, {}).items() if k != "POD_NAME"}
        proxy, port = start(binary(args), env, listening)
        n = 60
        for i in range(n):
            body = json.dumps({"model": "llmtap-sim", "max_tokens": 4, "stream": i % 2 == 0,
                               "messages": [{"role": "user", "content": f"k8s request {i}"}]})
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                         data=body.encode(), method="POST")
            with urllib.request.urlopen(req) as r:
                assert r.status == 200
                r.read()
        proxy.send_signal(signal.SIGTERM)  # a pod's deletion: the last file goes up
        assert proxy.wait(timeout=60) == 0, proxy.stderr.read()

        # 2. merge-day.yaml, over today.
        doc, c = command_of("merge-day.yaml", "merge")
        args = expand(c["command"], env_of(c, {}))
        today = time.strftime("%Y-%m-%d", time.gmtime())
        tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 86400))
        replace_arg(args, "--from", f"{today}T00:00:00Z")
        replace_arg(args, "--to", f"{tomorrow}T00:00:00Z")
        run(binary(args))
        merged = args[args.index("-o") + 1]
        out = run([LLMTAP, "validate", merged]).stdout
        assert f"chat {n}" in out.replace(":", ""), out

        # 3. replay-job.yaml: every index of the Indexed Job, on one schedule.
        doc, c = command_of("replay-job.yaml", "replay")
        shards = doc["spec"]["completions"]
        start_at = f"{time.time() + 3:.3f}"
        procs = []
        for index in range(shards):
            args = expand(c["command"], env_of(c, {"JOB_COMPLETION_INDEX": str(index),
                                                   "START_AT": start_at}))
            replace_arg(args, "--url", sim_url)
            procs.append(subprocess.Popen(binary(args), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        for p in procs:
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0, f"replay shard exited {p.returncode}:\n{stdout}\n{stderr}"

        # 4. merge-reports.yaml: one run from the shards.
        doc, c = command_of("merge-reports.yaml", "report")
        args = expand(c["command"], env_of(c, {}))
        run(binary(args))
        out_dir = args[args.index("-o") + 1]
        text = subprocess.run(["curl", "-sS", "--fail", "--noproxy", "*", "--aws-sigv4",
                               f"aws:amz:{os.environ['AWS_REGION']}:s3", "-u",
                               f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
                               "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                               os.environ["AWS_ENDPOINT_URL_S3"] + "/" +
                               out_dir[len("s3://"):].rstrip("/") + "/summary.json"],
                              capture_output=True, text=True, check=True).stdout
        requests = json.loads(text)["requests"]
        assert requests["sent"] == n and requests["completed"] == n and requests["errors"] == 0, \
            requests
        print(f"k8s commands: {n} requests captured through the sidecar, merged from the bucket, "
              f"replayed by {shards} shards, reports merged: OK")
    finally:
        sim.kill()
        subprocess.run(["rm", "-rf", work])


main()
