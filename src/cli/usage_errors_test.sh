#!/usr/bin/env bash
# usage_errors_test.sh LLMTAP SOURCE_DIR: every usage error of every subcommand (an unknown flag,
# a bad flag value, a missing argument) exits 2 with one line on stderr that names the command
# and what was wrong, and nothing on stdout. The table below must name every subcommand that
# `llmtap --help` (and `llmtap report --help`) lists.
source "$2/tests/lib/cli_test.sh"
trace=$data/mixed_mooncake.jsonl

# One row: SUBCOMMAND (words joined by '+') | WHAT STDERR MUST CONTAIN | ARGUMENTS...
rows=(
  "capture-demo|--no-such-flag|--no-such-flag"
  "capture-demo|--requests|--requests abc"
  "sim|--no-such-flag|--no-such-flag"
  "sim|--listen|--listen nonsense"
  "sim|--threads|--threads abc"
  "proxy|--no-such-flag|--no-such-flag"
  "proxy|--sample-rate is the number 5|--sample-rate 5"
  "proxy|--capture-format is|--capture-format bogus"
  "proxy|--max-request-bytes is|--max-request-bytes -1"
  "proxy|--endpoint-pattern is|--endpoint-pattern ("
  "proxy|--rotate-seconds is|--rotate-seconds 0"
  "proxy|--listen|--listen nonsense"
  "proxy|--cacert applies to an https:// --upstream|--cacert /dev/null"
  "proxy|--tls-key needs --tls-cert|--tls-key /dev/null"
  "proxy|--grace|--grace abc"
  "split|--no-such-flag|$trace --no-such-flag"
  "split|required|"
  "validate|--no-such-flag|$trace --no-such-flag"
  "validate|required|"
  "stats|--no-such-flag|$trace --no-such-flag"
  "stats|--format|$trace --format bogus"
  "merge|--no-such-flag|$trace --output $tmp/m.jsonl --no-such-flag"
  "merge|--output is required|$trace"
  "convert|--no-such-flag|$trace --to raw_payload --no-such-flag"
  "convert|--to|$trace --to bogus"
  "anonymize|--no-such-flag|$trace --tokenizer builtin --no-such-flag"
  "anonymize|--tokenizer is required|$trace"
  "specdec|--no-such-flag|$trace --tokenizer builtin --no-such-flag"
  "specdec|--tokenizer is required|$trace"
  "specdec|--k 0..3: '0' is not a whole number|$trace --tokenizer builtin --k 0..3"
  "specdec|no --ngram-min is <= any --ngram-max|$trace --tokenizer builtin --ngram-min 6 --ngram-max 5"
  "specdec|--method|$trace --tokenizer builtin --method eagle"
  "specdec|--tokenizer /nowhere|$trace --tokenizer /nowhere"
  "sessions|--no-such-flag|$trace --output $tmp/s.jsonl --no-such-flag"
  "replay|--no-such-flag|$trace --no-such-flag"
  "replay|--rate|$trace --url http://127.0.0.1:1 --rate abc"
  "replay|--paired-url needs --pairs PATH or --out DIR|$trace --url http://127.0.0.1:1 --paired-url http://127.0.0.1:1"
  "replay|--paired-url must start with http|$trace --paired-url ftp://x --pairs $tmp/p.ndjson"
  "replay|need --paired-url|$trace --url http://127.0.0.1:1 --pairs $tmp/p.ndjson"
  "compare|--no-such-flag|$tmp $tmp --no-such-flag"
  "compare|required|"
  "report|subcommand is required|"
  "report+merge|--no-such-flag|$tmp --out $tmp/merged --no-such-flag"
  "report+html|--no-such-flag|$tmp --no-such-flag"
  "shadow|subcommand is required|"
  "shadow+report|--no-such-flag|$tmp/p.ndjson --no-such-flag"
  "shadow+report|required|"
  "shadow+report|--threshold 5: want a fraction|$tmp/p.ndjson --threshold 5"
  "shadow+report|--aa bogus|$tmp/p.ndjson --aa bogus"
  "fidelity|--no-such-flag|$tmp --no-such-flag"
  "fidelity|required|"
  "fidelity|--tolerance 150%: not a share|$tmp --tolerance 150%"
  "fidelity|--points -1: not a number of points|$tmp --points -1"
  "fidelity|unknown metric 'ttft'|$tmp --gates ttft"
  "fidelity|fidelity-pairs.ndjson|$tmp"
  "replay|--certify judges the fidelity pairs, which need --out DIR|$trace --certify"
  "replay|--fidelity-equal-share 0: not a share|$trace --fidelity-equal-share 0"
)

covered=" "
for row in "${rows[@]}"; do
  IFS='|' read -r sub want args <<<"$row"
  words=(${sub//+/ })
  covered+="${sub} "
  read -r -a argv <<<"$args"
  expect 2 "llmtap ${words[*]} $args" -- "$llmtap" "${words[@]}" "${argv[@]}"
  lines=$(wc -l <"$tmp/err")
  if [[ $lines != 1 ]]; then
    echo "FAIL: llmtap ${words[*]} $args: $lines lines on stderr, want 1:"; cat "$tmp/err"
    fails=$((fails + 1))
  fi
  contains "$tmp/err" "llmtap ${words[*]}"
  contains "$tmp/err" "$want"
  if [[ -s $tmp/out ]]; then
    echo "FAIL: llmtap ${words[*]} $args: wrote to stdout:"; cat "$tmp/out"; fails=$((fails + 1))
  fi
done

# Every subcommand is in the table.
listed() {  # listed PREFIX HELP_ARGS...: the subcommands a --help lists, PREFIX+ before each
  local prefix=$1
  shift
  "$llmtap" "$@" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && /^  [a-z]/ {print $1}' |
    sed "s/^/$prefix/"
}
for sub in $(listed "") $(listed "report+" report) $(listed "shadow+" shadow); do
  [[ $covered == *" $sub "* ]] || { echo "FAIL: no usage-error row for '${sub//+/ }'"; fails=$((fails + 1)); }
done

((fails == 0)) && echo "usage errors: ${#rows[@]} rows, all exit 2 with one line"
exit $((fails > 0))
