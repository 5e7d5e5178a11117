#!/usr/bin/env python3
"""check.py DIR: the assertions of anonymize_aiperf_test.sh on the files it left in DIR.

  chat.jsonl             the capture (make_captures.py); chat.whole.jsonl: it anonymized without
                         session ids (every row whole: the captured prompts' lengths and blocks)
  chat.anon.jsonl        anonymized with sessions; chat.aiperf.json: AIPerf's load of it with
                         --simulate-sessions; chat.replay.jsonl: the bodies llmtap replay sent
  completions.anon.jsonl, raw.anon.jsonl and their .aiperf.json loads

Checks: AIPerf refused nothing (no error, 0 rows rejected, 0 diffs, every row a turn); every
output_length >= 1; no row dropped. Sessions: AIPerf's simulated turns of the 10-turn
conversation, with the referee's 8-word answers replaced by answers of output_length tokens, are
within one block of the captured prompt lengths (and with the referee's answers as they are,
too); each turn goes out as the previous turn's prompt + answer + its new content; rows written
whole share leading block ids exactly as the captured prompts do; llmtap replay sent every turn
with the same messages and the same prompt tokens as AIPerf. Prints the 10-turn table.
"""
import json
import sys
from pathlib import Path

BLOCK = 512
ANSWER_CHARS = len("w " * 8)  # the referee's stand-in answer (aiperf_load.py)
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def aiperf_ok(d, name, n_rows):
    r = json.load(open(d / f"{name}.aiperf.json"))
    check("error" not in r, f"{name}: AIPerf refused the file: {r.get('error')}")
    check(r.get("rows_rejected") == [], f"{name}: rows rejected: {r.get('rows_rejected')}")
    check(r.get("diff_count") == 0, f"{name}: diffs: {r.get('diffs')}")
    check(r.get("matched_turns") == n_rows, f"{name}: {r.get('matched_turns')} turns for {n_rows} rows")
    check(r.get("rows") == n_rows, f"{name}: AIPerf read {r.get('rows')} rows, want {n_rows}")
    return r


def shared(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main(d):
    d = Path(d)
    cap = rows(d / "chat.jsonl")
    whole = rows(d / "chat.whole.jsonl")
    anon = rows(d / "chat.anon.jsonl")
    check(len(anon) == len(cap) == len(whole), f"rows: capture {len(cap)}, anonymized {len(anon)}")
    for name in ("chat", "completions", "raw"):
        out = anon if name == "chat" else rows(d / f"{name}.anon.jsonl")
        check(all(r["output_length"] >= 1 for r in out), f"{name}: an output_length below 1")
    chat = aiperf_ok(d, "chat", len(anon))
    aiperf_ok(d, "completions", len(rows(d / "completions.anon.jsonl")))
    aiperf_ok(d, "raw", len(rows(d / "raw.anon.jsonl")))

    # Rows written whole (sessionless rows, a session's first turn, a new part's first turn):
    # leading ids shared exactly as the captured prompts share them.
    firsts, seen = [], set()
    for i, r in enumerate(anon):
        sid = r.get("session_id")
        if sid is None or sid not in seen:
            firsts.append(i)
            if sid is not None:
                seen.add(sid)
            check(r["input_length"] == whole[i]["input_length"], f"row {i + 1}: not whole")
    for x in firsts:
        for y in firsts:
            if x < y:
                check(shared(anon[x]["hash_ids"], anon[y]["hash_ids"]) ==
                      shared(whole[x]["hash_ids"], whole[y]["hash_ids"]),
                      f"rows {x + 1},{y + 1}: leading ids shared otherwise than in the capture")
    check(any(shared(anon[x]["hash_ids"], anon[y]["hash_ids"]) > 0
              for x in firsts for y in firsts if x < y), "no two first turns share a block")

    # The 10-turn conversation through AIPerf's session code and through llmtap replay.
    conv = [i for i, c in enumerate(cap) if c.get("session_id") == "conv-10"]
    check(len(conv) == 10, f"conv-10 has {len(conv)} turns")
    sid = anon[conv[0]]["session_id"]
    check(all(anon[i]["session_id"] == sid for i in conv), "conv-10 split into parts")
    sim = next((s for s in chat.get("session_replay", []) if s["session"] == sid), None)
    if not check(sim is not None, f"AIPerf simulated no session {sid}: {chat.get('session_replay_error')}"):
        return
    replay = [json.loads(l) for l in open(d / "chat.replay.jsonl")]
    first_prompt = None
    print("turn  captured  AIPerf(chars)  AIPerf(answers=output_length)  llmtap replay  old anonymize")
    old = rows(d / "chat.old.jsonl") if (d / "chat.old.jsonl").exists() else None
    new_sum = blocks = answers = 0
    old_sum = 0
    prev = None
    for k, i in enumerate(conv):
        t = sim["turns"][k]
        L = whole[i]["input_length"]
        new_sum += anon[i]["input_length"]
        blocks += len(anon[i]["hash_ids"])
        # AIPerf's prompt in tokens: each block's first token is a separator its byte-level
        # tokenizer decodes to nothing; the referee's answers are 16 characters (tokens).
        aiperf_tokens = t["content_chars"] + blocks
        check(aiperf_tokens == new_sum + ANSWER_CHARS * k, f"turn {k}: AIPerf sent {aiperf_tokens}")
        with_answers = aiperf_tokens - ANSWER_CHARS * k + answers
        check(abs(with_answers - L) <= BLOCK, f"turn {k}: AIPerf {with_answers} vs captured {L}")
        check(abs(t["content_chars"] - L) <= BLOCK, f"turn {k}: AIPerf {t['content_chars']} chars vs captured {L}")
        check(t["messages"] == 2 * k + 1, f"turn {k}: AIPerf sent {t['messages']} messages")
        if prev is not None:
            check(t["content_chars"] == prev["content_chars"] + ANSWER_CHARS + t["this_turn_prompt_chars"],
                  f"turn {k}: not the previous turn + answer + new content")
        prev = t
        # llmtap replay: the body with this turn's message count that starts with turn 0's prompt.
        if k == 0:
            first_prompt = anon[i]["input_length"]
        body = [b for b in replay if len(b.get("messages", [])) == 2 * k + 1 and
                len(b["messages"][0]["content"].split()) == first_prompt and
                (k == 0 or b["messages"][1]["content"] == "w " * 8)]
        if not check(len(body) >= 1, f"turn {k}: llmtap replay sent no such turn"):
            continue
        msgs = body[0]["messages"]
        user = sum(len(m["content"].split()) for m in msgs if m["role"] == "user")
        check([m["role"] for m in msgs] == ["user", "assistant"] * k + ["user"],
              f"turn {k}: llmtap replay's roles {[m['role'] for m in msgs]}")
        check(user == new_sum, f"turn {k}: llmtap replay sent {user} prompt tokens, AIPerf {new_sum}")
        check(body[0]["max_tokens"] == anon[i]["output_length"], f"turn {k}: replay max_tokens")
        old_txt = "-"
        if old:
            old_sum += old[i]["input_length"]
            old_txt = "%d (%.2fx)" % (old_sum + answers, (old_sum + answers) / L)
        print("%4d  %8d  %13d  %29d  %13d  %s" % (k, L, t["content_chars"], with_answers,
                                                  user + answers, old_txt))
        answers += anon[i]["output_length"]


if __name__ == "__main__":
    main(sys.argv[1])
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)
