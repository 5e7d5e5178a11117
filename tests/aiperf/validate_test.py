#!/usr/bin/env python3
"""The differential test of `llmtap validate` against AIPerf's own loader (issue #33).

Every corpus file (tests/aiperf/corpus/*.jsonl) goes through AIPerf 0.11.0's real dataset
loading (the referee, tests/aiperf/referee/aiperf_load.py, its main() called in this one Python
process: the imports are paid once, each load then takes milliseconds) and through
`llmtap validate --json`, once per run its sidecar (<name>.cases) lists:

    # runs: mooncake_trace chat; mooncake_trace completions; mooncake_trace chat --fixed-schedule
    <line>: what the row tests

AIPerf's verdict on a file: it loads (no error at the config, load, metadata or fixed-schedule
stage), or it refuses it. The referee validates every row on its own as well (rows_rejected),
so one file can hold many rows the model refuses; a file AIPerf refuses for a rule of the file
(a session, the Turn a row becomes, the schedule) has no rejected rows and holds one case.
validate agrees when:
  - AIPerf loads the file: validate fails no line (deliberate warnings are allowed);
  - AIPerf refuses rows on their own: validate fails exactly those lines (such a file must hold
    only refused rows, or AIPerf's verdict on the others would be unknown);
  - AIPerf refuses the file for a file rule: validate fails a line of it.
Each deliberate warning validate gives must be one its --help lists (as a rule AIPerf loads),
and every rule listed must be met in the corpus. Exit 0 when there is no other disagreement.

Two stand-ins around the referee, none in what decides a verdict: its stages' errors count as
refusals although its exit code only counts the load stage's ("resolver_error",
"fixed_schedule_error", "metadata_error": a real run stops there too), and its compare() (what
AIPerf would send, after the verdict) is wrapped so that a row the referee's own binary reader
cannot parse (a mooncake line AIPerf reads as text) or cannot serialize does not crash it.

Usage: validate_test.py --llmtap BIN --referee DIR --corpus DIR [--only NAME]
Run with the PYTHONPATH of tests/aiperf/aiperf.sh setup (validate_test.sh does).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REFUSALS = ("error", "resolver_error", "fixed_schedule_error", "metadata_error")


def load_referee(referee_dir: str):
    sys.path.insert(0, referee_dir)
    import aiperf_load  # noqa: E402  (the referee, unmodified)

    original = aiperf_load.compare

    def compare(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except Exception as e:  # after the verdict: what AIPerf would send
            return ([f"referee compare() failed: {type(e).__name__}: {e}"], 0, [], 0)

    aiperf_load.compare = compare
    return aiperf_load


def parse_cases(path: Path):
    runs, tags = [], {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.startswith("# runs:"):
            for run in raw[len("# runs:"):].split(";"):
                words = run.split()
                if words:
                    runs.append(words)
        elif raw.startswith("#") or not raw.strip():
            continue
        else:
            n, _, tag = raw.partition(":")
            tags[int(n)] = tag.strip()
    return runs, tags


def corpus_lines(path: Path):
    """Line number -> bytes of every line that holds more than JSON whitespace."""
    out = {}
    for n, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if raw.strip(b" \t\r"):
            out[n] = raw
    return out


def aiperf_verdict(referee, path: Path, run, workdir: Path):
    fmt, endpoint, *flags = run
    args = [str(path), "--type", fmt, "--endpoint-type", endpoint, "--json",
            str(workdir / "aiperf.json")]
    if "--fixed-schedule" in flags:
        args += ["--fixed-schedule", "--auto-offset"]
    with contextlib.redirect_stdout(io.StringIO()):
        referee.main(args)
    rep = json.loads((workdir / "aiperf.json").read_text())
    errors = {k: rep[k] for k in REFUSALS if k in rep}
    rejected = {}
    for entry in rep.get("rows_rejected", []):
        m = re.match(r"[^:]+:(\d+): (.*)", entry)
        rejected[int(m.group(1))] = m.group(2)
    return errors, rejected, rep


def validate_verdict(llmtap: str, path: Path, run):
    fmt, endpoint, *flags = run
    cmd = [llmtap, "validate", "--json", "--format", fmt, "--endpoint-type", endpoint,
           "--max-errors", "100000", str(path)]
    if "--fixed-schedule" in flags:
        cmd.insert(3, "--fixed-schedule")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    rep = json.loads(p.stdout)
    if rep["failures_not_listed"] or rep["row_warnings_not_listed"]:
        raise RuntimeError(f"{path}: validate did not list every failure")
    if rep.get("aiperf_version") != "0.11.0":
        raise RuntimeError(f"validate --json names AIPerf {rep.get('aiperf_version')!r}, not 0.11.0")
    return ({f["line"]: f["reason"] for f in rep["failures"]},
            rep["row_warnings"], rep["warnings"], p.returncode)


def documented_rules(llmtap: str):
    """The deliberate warnings `validate --help` lists: '  <rule>: ... AIPerf loads ...'."""
    text = subprocess.run([llmtap, "validate", "--help"], capture_output=True, text=True).stdout
    if "AIPerf 0.11.0" not in text:
        raise RuntimeError("validate --help does not name AIPerf 0.11.0")
    section = text.split("Deliberate warnings", 1)
    if len(section) != 2:
        raise RuntimeError("validate --help has no 'Deliberate warnings' section")
    rules = {}
    for line in section[1].splitlines():
        m = re.match(r"\s+([a-z][a-z0-9-]+): (.*)", line)
        if m:
            rules[m.group(1)] = m.group(2)
    for rule, text in rules.items():
        if "AIPerf loads" not in text:
            raise RuntimeError(f"validate --help: deliberate warning {rule} does not say AIPerf loads the row")
    return rules


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--llmtap", required=True)
    ap.add_argument("--referee", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--only", help="run the corpus files whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    start = time.monotonic()
    referee = load_referee(args.referee)
    rules = documented_rules(args.llmtap)
    corpus = sorted(Path(args.corpus).glob("*.jsonl"))
    if args.only:
        corpus = [p for p in corpus if args.only in p.name]
    problems, seen_rules = [], {}
    rows_total = runs_total = 0
    loads = refusals = 0
    with tempfile.TemporaryDirectory(prefix="validate-test-") as tmp:
        work = Path(tmp)
        for path in corpus:
            cases = path.with_suffix(".cases")
            if not cases.exists():
                problems.append(f"{path.name}: no sidecar {cases.name}")
                continue
            runs, tags = parse_cases(cases)
            lines = corpus_lines(path)
            rows_total += len(lines)
            untagged = sorted(set(lines) - set(tags))
            stray = sorted(set(tags) - set(lines))
            if untagged or stray or not runs:
                problems.append(f"{path.name}: sidecar out of step (untagged lines {untagged}, "
                                f"tags for no line {stray}, runs {runs})")
                continue

            def tag(n):
                return f"{path.name}:{n} [{tags.get(n, '?')}]"

            for run in runs:
                runs_total += 1
                how = " ".join(run)
                errors, rejected, rep = aiperf_verdict(referee, path, run, work)
                failed, row_warnings, file_warnings, _ = validate_verdict(args.llmtap, path, run)
                for w in row_warnings:
                    seen_rules.setdefault(w["rule"], tag(w["line"]))
                    if "AIPerf loads" not in w["reason"]:
                        problems.append(f"{tag(w['line'])} ({how}): warning {w['rule']} does not "
                                        f"say AIPerf loads the row: {w['reason']}")
                    if w["rule"] not in rules:
                        problems.append(f"{tag(w['line'])} ({how}): warning rule {w['rule']!r} "
                                        "is not listed in validate --help")
                if not errors:
                    loads += 1
                    for n, why in sorted(failed.items()):
                        problems.append(f"{tag(n)} ({how}): AIPerf loads the file, validate "
                                        f"fails the line: {why}")
                    if args.verbose:
                        print(f"{path.name} ({how}): AIPerf loads it; validate passes "
                              f"{len(lines)} lines, {len(row_warnings)} row warnings")
                    continue
                refusals += 1
                if rejected:
                    if set(rejected) != set(lines):
                        problems.append(
                            f"{path.name} ({how}): corpus: AIPerf refuses lines "
                            f"{sorted(rejected)} on their own but not lines "
                            f"{sorted(set(lines) - set(rejected))}: their verdict is unknown; "
                            "keep refused rows and loadable rows in separate files")
                        continue
                    for n in sorted(set(rejected) - set(failed)):
                        problems.append(f"{tag(n)} ({how}): AIPerf refuses the row "
                                        f"({rejected[n]}), validate passes it")
                    for n in sorted(set(failed) - set(rejected)):
                        problems.append(f"{tag(n)} ({how}): validate fails the line, AIPerf "
                                        f"takes it: {failed[n]}")
                elif not failed:
                    first = next(iter(errors.items()))
                    problems.append(f"{path.name} ({how}): AIPerf refuses the file "
                                    f"({first[0]}: {str(first[1])[:200]}), validate passes "
                                    "every line")
                if args.verbose:
                    print(f"{path.name} ({how}): AIPerf refuses it "
                          f"({len(rejected)} rows on their own; {sorted(errors)}); validate "
                          f"fails lines {sorted(failed)}")
    for rule in sorted(set(rules) - set(seen_rules)):
        problems.append(f"deliberate warning {rule!r} (validate --help) is met nowhere in the "
                        "corpus: add a row AIPerf loads that gives it")
    took = time.monotonic() - start
    print(f"validate_test: {len(corpus)} corpus files, {rows_total} lines, {runs_total} runs "
          f"({loads} loaded by AIPerf, {refusals} refused); {len(seen_rules)} deliberate "
          f"warning rules met; {took:.1f} s")
    for rule, where in sorted(seen_rules.items()):
        print(f"  warning {rule}: e.g. {where}")
    if problems:
        print(f"{len(problems)} undocumented disagreements between validate and AIPerf 0.11.0:")
        for p in problems:
            print("  " + p)
        return 1
    print("0 undocumented disagreements between validate and AIPerf 0.11.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
