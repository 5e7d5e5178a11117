#!/usr/bin/env python3
"""make_captures.py OUT_DIR: the captures anonymize_aiperf_test.sh anonymizes (deterministic).

  chat.jsonl (+ .outcomes.ndjson)  mooncake_payload chat requests as `llmtap proxy --capture`
      writes them: a 10-turn conversation ("conv-10": a ~700-word system prompt, user messages
      of 150-350 words, short answers), a 3-turn one sharing its system prompt ("conv-b"), one
      whose third turn edits the history ("conv-edit"), one whose first answer (long reasoning,
      900 completion tokens) is longer than what its second turn adds ("conv-reason"), and
      single requests: max_tokens 0, an outcome with completion_tokens 0, an integer beyond
      2^64 ("seed"), max_completion_tokens. Interleaved by timestamp, as a proxy sees them.
  completions.jsonl  completions prompts, some sharing a long prefix, max_tokens 0 / absent.
  raw.jsonl          raw_payload chat requests (no timestamps) with conv-10's system prompt.
"""
import json
import random
import sys
from pathlib import Path

rng = random.Random(33)
vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
         for _ in range(400)]


def text(n):
    return " ".join(rng.choice(vocab) for _ in range(n)).capitalize() + "."


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    system = text(700)
    rows = []  # (timestamp, payload, session_id or None, completion_tokens or None)

    # answers: each turn's completion_tokens; its text in the next turn's history has as many
    # words, or `history_words` (a reasoning model's answer whose reasoning the client drops).
    def conversation(sid, start, turns, gap, answers, user_words=(150, 350), edit_turn=None,
                     history_words=None):
        msgs = [{"role": "system", "content": system}]
        t = start
        for k in range(turns):
            msgs.append({"role": "user", "content": text(rng.randint(*user_words))})
            if edit_turn == k:  # the client rewrote the previous user message
                msgs[-3]["content"] = text(40)
            rows.append((t, {"model": "m", "messages": [dict(m) for m in msgs], "stream": True,
                             "stream_options": {"include_usage": True}}, sid, answers[k]))
            msgs.append({"role": "assistant", "content": text(history_words or answers[k])})
            t += gap

    conversation("conv-10", 1000, 10, 9000, [rng.randint(15, 45) for _ in range(10)])
    conversation("conv-b", 4000, 3, 11000, [30, 25, 20])
    conversation("conv-edit", 6000, 3, 12000, [20, 20, 20], user_words=(60, 90), edit_turn=2)
    conversation("conv-reason", 8000, 2, 15000, [900, 30], user_words=(50, 60), history_words=30)
    singles = [
        (2500, {"model": "m", "messages": [{"role": "user", "content": text(80)}],
                "max_tokens": 0}, None, None),
        (3500, {"model": "m", "messages": [{"role": "user", "content": text(60)}],
                "max_tokens": 50}, None, 0),
        (5500, {"model": "m", "messages": [{"role": "user", "content": text(90)}],
                "max_tokens": 20, "seed": 123456789012345678901234}, None, None),
        (7500, {"model": "m", "messages": [{"role": "system", "content": system},
                                           {"role": "user", "content": text(30)}],
                "max_completion_tokens": 64}, None, 40),
    ]
    rows += singles
    rows.sort(key=lambda r: r[0])
    with open(out / "chat.jsonl", "w") as f, open(out / "chat.jsonl.outcomes.ndjson", "w") as o:
        for line, (ts, payload, sid, done) in enumerate(rows, start=1):
            row = '{"timestamp":%d,"payload":%s' % (ts, json.dumps(payload, separators=(",", ":")))
            # json.dumps writes the big integer exactly, as a client would.
            row += (',"session_id":"%s"}' % sid) if sid else "}"
            f.write(row + "\n")
            if done is not None:
                o.write(json.dumps({"line": line, "timestamp": ts, "status": 200,
                                    "latency_ms": 500.0, "completion_tokens": done,
                                    "finish_reason": "stop", "cancelled": False,
                                    "error": None}) + "\n")

    prefix = text(600)
    with open(out / "completions.jsonl", "w") as f:
        for i in range(8):
            body = {"model": "m", "prompt": (prefix + " " if i % 2 else "") + text(rng.randint(20, 200))}
            if i % 3 == 1:
                body["max_tokens"] = 0 if i == 4 else 30 + i
            f.write(json.dumps({"timestamp": 100 * i, "payload": body}, separators=(",", ":")) + "\n")

    with open(out / "raw.jsonl", "w") as f:
        for i in range(4):
            body = {"model": "m", "messages": [{"role": "system", "content": system},
                                               {"role": "user", "content": text(40 + 30 * i)}],
                    "max_tokens": 16 * i}
            f.write(json.dumps(body, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
