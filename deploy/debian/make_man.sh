#!/usr/bin/env bash
# make_man.sh LLMTAP OUT: writes the llmtap(1) man page (roff) to OUT from the program's own
# --help: the top level and every subcommand's, so the page says what the binary does.
set -euo pipefail
llmtap=$1
out=$2
version=$("$llmtap" --version | awk '{print $2}')
roff() {  # escapes backslashes and leading dots/quotes for roff
  sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\&'/"
}
subcommands() {  # subcommands [WORDS...]: the subcommands `llmtap WORDS --help` lists
  "$llmtap" "$@" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && /^  [a-z]/ {print $1}'
}
section() {  # section WORDS...: one subcommand's help as a man section
  echo ".SS \"llmtap $*\""
  echo ".nf"
  "$llmtap" "$@" --help | sed 's/^Usage: .*llmtap /Usage: llmtap /' | roff
  echo ".fi"
}
{
  echo ".TH LLMTAP 1 \"\" \"llmtap $version\" \"User Commands\""
  echo ".SH NAME"
  echo "llmtap \\- capture the requests that reach an OpenAI-compatible inference server, and replay them"
  echo ".SH SYNOPSIS"
  echo ".B llmtap"
  echo "\\fICOMMAND\\fR [\\fIOPTIONS\\fR]"
  echo ".SH DESCRIPTION"
  echo ".nf"
  "$llmtap" --help | sed 's/^Usage: .*llmtap /Usage: llmtap /' | roff
  echo ".fi"
  echo ".SH COMMANDS"
  for sub in $(subcommands); do
    section "$sub"
    for nested in $(subcommands "$sub"); do section "$sub" "$nested"; done
  done
  echo ".SH EXIT STATUS"
  echo "0 on success; 1 when some rows failed or were skipped (trace tools); 2 on a usage error"
  echo "(an unknown flag, a bad flag value, a missing argument) or an I/O error."
  echo ".SH ENVIRONMENT"
  echo ".TP"
  echo ".B NIM_CAPTURE_ENABLE, NIM_CAPTURE_ARGS"
  echo "capture on or off, and its settings as a JSON object (see \\fBllmtap proxy \\-\\-help\\fR)."
  echo ".TP"
  echo ".B AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL_S3"
  echo "credentials and endpoint of the S3-compatible store for \\fB\\-\\-upload\\-url\\fR and s3:// inputs."
} >"$out"
