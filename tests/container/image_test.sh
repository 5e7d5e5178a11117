#!/usr/bin/env bash
# image_test.sh BUILD_DIR SOURCE_DIR: builds the container image (deploy/container/build.sh: the
# .deb CPack makes from the release tree, on the mmdebstrap base made from this machine's apt
# sources), checks what the image holds and how it is configured (non-root user, /captures
# volume, health check, the proxy as entry point, no shell), runs it with a published loopback
# port (the proxy in front of its built-in simulator, capturing into a host directory mounted
# at /captures), measures the start-up (`podman run` -> the proxy's first 200), sends requests
# (a streaming one among them), runs the health check, stops it (SIGTERM: the proxy drains and
# writes the manifest) and validates the capture with the host's llmtap. Prints the image's size
# and the start-up time.
# Skipped (exit 0, "SKIPPED: ...") only when podman is missing or cannot run a container here.
# Removes the containers and the image it made; the base image (localhost/llmtap-base:*) stays
# cached in podman's storage for the next build (build.sh keeps one).
set -uo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
tmp=$(mktemp -d)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tag=localhost/llmtap-image-test:$$
ctr=""
image_made=0
cleanup() {
  [[ -n $ctr ]] && podman rm -f -t 0 "$ctr" >/dev/null 2>&1
  ((image_made)) && podman rmi -f "$tag" >/dev/null 2>&1
  if [[ $(id -u) != 0 ]] && command -v podman >/dev/null; then
    podman unshare rm -rf "$tmp/captures" 2>/dev/null  # files of the container's subordinate uid
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
now() { date +%s.%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (b - a) * 1000 }'; }
test_start=$(now)

command -v podman >/dev/null ||
  { echo "SKIPPED: container_image_test: podman is not installed (scripts/setup.sh installs it)"; exit 0; }
bash "$src/deploy/container/build.sh" --containers-conf "$tmp/containers.conf"
export CONTAINERS_CONF=$tmp/containers.conf
# Can podman run a container here? A root file system of /usr/bin/true and its libraries,
# run with --rootfs: no image, no registry, no network.
probe=$tmp/probe-root
mkdir -p "$probe/usr/bin" "$probe/usr/lib" "$probe/usr/lib64"
for d in bin lib lib64; do ln -s "usr/$d" "$probe/$d"; done
cp /usr/bin/true "$probe/usr/bin/"
for lib in $(ldd /usr/bin/true | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
  mkdir -p "$probe$(dirname "$(realpath "$lib")")"
  cp -L "$lib" "$probe$(realpath "$lib")"
  [[ -e $probe$lib ]] || ln -s "$(realpath "$lib")" "$probe$lib"
done
if ! podman run --rm --network=none --rootfs "$probe" /usr/bin/true </dev/null >"$tmp/probe.log" 2>&1; then
  echo "SKIPPED: container_image_test: podman cannot run a container here: $(tail -1 "$tmp/probe.log")"
  exit 0
fi

# The .deb, as deb_package_test makes it, and the image.
start=$(now)
(cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" >cpack.log 2>&1) ||
  { cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/llmtap_*_amd64.deb)
echo "package: $(basename "$deb"), $(stat -c %s "$deb") bytes, made in $(ms "$start" "$(now)") ms"
start=$(now)
bash "$src/deploy/container/build.sh" --tag "$tag" "$deb" >"$tmp/build.out" 2>&1 ||
  { cat "$tmp/build.out"; echo "FAIL: build.sh"; exit 1; }
image_made=1
build_ms=$(ms "$start" "$(now)")
cat "$tmp/build.out"
size=$(podman image inspect --format '{{.Size}}' "$tag")
base=$(sed -n 's/^base: \([^ ]*\).*/\1/p' "$tmp/build.out")
base_size=$(podman image inspect --format '{{.Size}}' "$base")

# Its configuration.
inspect() { podman image inspect --format "$1" "$tag"; }
[[ $(inspect '{{.Config.User}}') == 10001:10001 ]] || fail "image user: '$(inspect '{{.Config.User}}')'"
[[ $(inspect '{{json .Config.Entrypoint}}') == '["llmtap","proxy","--listen","0.0.0.0:8000"]' ]] ||
  fail "entrypoint: $(inspect '{{json .Config.Entrypoint}}')"
[[ $(inspect '{{json .Config.Volumes}}') == *'"/captures"'* ]] ||
  fail "no /captures volume: $(inspect '{{json .Config.Volumes}}')"
[[ $(inspect '{{json .Config.ExposedPorts}}') == *'"8000/tcp"'* ]] ||
  fail "port 8000 not exposed: $(inspect '{{json .Config.ExposedPorts}}')"
[[ $(inspect '{{json .Config.Healthcheck}}') == *'http://127.0.0.1:8000/llmtap/metrics'* ]] ||
  fail "health check: $(inspect '{{json .Config.Healthcheck}}')"

# What it holds: the .deb's files, curl, libraries, their copyrights and control fields; no
# shell, no package manager, no other program.
ctr=$(podman create --pull=never "$tag" </dev/null)
podman export "$ctr" | tar -t | sed -e 's#^\./##' -e 's#/$##' | sort >"$tmp/files.txt"
podman rm -f "$ctr" >/dev/null 2>&1
ctr=""
while read -r f; do
  grep -qxF "$f" "$tmp/files.txt" || fail "$f of the .deb is not in the image"
done < <(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\.\//, "", $6); print $6 }')
programs=$(grep -E '^usr/s?bin/.' "$tmp/files.txt" | tr '\n' ' ')
[[ $programs == "usr/bin/curl usr/bin/llmtap " ]] || fail "programs in the image: $programs"
for f in usr/lib/x86_64-linux-gnu/libre2.so.9 usr/lib/x86_64-linux-gnu/libicudata.so.72 \
         usr/share/doc/libre2-9/copyright var/lib/dpkg/status.d/libssl3 \
         var/lib/dpkg/status.d/llmtap etc/ssl/certs/ca-certificates.crt etc/passwd; do
  grep -qxF "$f" "$tmp/files.txt" || fail "$f is not in the image"
done
echo "image holds $(wc -l <"$tmp/files.txt") paths, $(grep -c '\.so' "$tmp/files.txt") of them libraries;" \
  "packages: $(grep '^var/lib/dpkg/status.d/.' "$tmp/files.txt" | sed 's#.*/##' | tr '\n' ' ')"

# Run it: the proxy on its built-in simulator, port 8000 published on a free loopback port,
# a host directory as /captures. Where no systemd runs (CI VMs), podman cannot time the health
# checks (it logs an error and carries on), so the test runs the check itself.
cap=$tmp/captures
mkdir "$cap"
if [[ $(id -u) == 0 ]]; then chown 10001:10001 "$cap"; else chmod 0777 "$cap"; fi
start=$(now)
ctr=$(podman run -d --pull=never -p 127.0.0.1::8000 -v "$cap:/captures" "$tag" \
  </dev/null 2>"$tmp/run.err") || { cat "$tmp/run.err"; echo "FAIL: podman run"; exit 1; }
run_returned=$(now)
port=$(podman port "$ctr" 8000/tcp | sed 's/.*://')
up=""
# Until it answers (120 s: a guard against a hang only; the start-up time is measured, not bounded).
deadline=$((SECONDS + 120))
while ((SECONDS <= deadline)); do
  if [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/llmtap/metrics") == 200 ]]; then
    up=$(now)
    break
  fi
  sleep 0.01
done
[[ -n $up ]] || { podman logs "$ctr"; echo "FAIL: the proxy did not answer on port $port in 120 s"; exit 1; }
startup_ms=$(ms "$start" "$up")
echo "start-up: podman run -> first 200 in $startup_ms ms (podman run returned after $(ms "$start" "$run_returned") ms)"

[[ $(podman top "$ctr" user huser | awk 'NR == 2 { print $1 }') == llmtap ]] ||
  fail "the proxy's user in the container: $(podman top "$ctr" user huser)"
podman healthcheck run "$ctr" >"$tmp/health.out" 2>&1 || fail "health check: $(cat "$tmp/health.out")"
[[ $(podman inspect --format '{{.State.Health.Status}}' "$ctr") == healthy ]] ||
  fail "health status: $(podman inspect --format '{{.State.Health.Status}}' "$ctr")"
if podman exec "$ctr" /bin/sh -c true >/dev/null 2>&1; then fail "the image has a shell"; fi

url=http://127.0.0.1:$port
post() {  # post PATH BODY OUT: the status code
  curl -s -N -o "$3" -w '%{http_code}' "$url$1" -H 'content-type: application/json' -d "$2"
}
code=$(post /v1/chat/completions \
  '{"model":"llmtap-sim","messages":[{"role":"user","content":"hi"}],"max_tokens":8}' "$tmp/a1")
[[ $code == 200 ]] || fail "chat: $code $(cat "$tmp/a1")"
code=$(post /v1/chat/completions \
  '{"model":"llmtap-sim","messages":[{"role":"user","content":"a trace?"}],"max_tokens":16,"stream":true}' "$tmp/a2")
[[ $code == 200 && $(tail -c 200 "$tmp/a2") == *'data: [DONE]'* ]] || fail "streaming chat: $code $(tail -c 300 "$tmp/a2")"
code=$(post /v1/completions \
  '{"model":"llmtap-sim","prompt":"Once upon a time","max_tokens":16,"stream":true}' "$tmp/a3")
[[ $code == 200 && $(grep -c '^data: ' "$tmp/a3") -gt 2 ]] || fail "streaming completions: $code $(tail -c 300 "$tmp/a3")"
code=$(curl -s -o "$tmp/health" -w '%{http_code}' "$url/health")
[[ $code == 200 ]] || fail "/health through the proxy: $code"

# Stop: SIGTERM, the proxy drains the capture and writes its manifest, exits 0.
start=$(now)
# SIGKILL only after 120 s (a guard against a hang: the drain ends the proxy long before).
podman stop -t 120 "$ctr" >/dev/null 2>"$tmp/stop.err" || fail "podman stop: $(cat "$tmp/stop.err")"
stop_ms=$(ms "$start" "$(now)")
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$ctr")
[[ $exit_code == 0 ]] || { fail "the proxy exited $exit_code on SIGTERM"; podman logs "$ctr" | tail; }
podman logs "$ctr" >"$tmp/proxy.log" 2>&1
podman rm "$ctr" >/dev/null 2>&1
ctr=""

# The capture, on the host: 3 rows, valid for AIPerf, with its manifest, owned by the
# container's user.
rows=$cap/requests.jsonl
manifest=$cap/requests.jsonl.manifest.json
if [[ -f $rows ]]; then
  [[ $(wc -l <"$rows") == 3 ]] || fail "capture rows: $(wc -l <"$rows")"
  "$build/llmtap" validate "$rows" >"$tmp/validate.out" 2>&1 ||
    { fail "llmtap validate of the capture"; cat "$tmp/validate.out"; }
  if [[ $(id -u) == 0 ]]; then
    [[ $(stat -c %u "$rows") == 10001 ]] || fail "capture owned by uid $(stat -c %u "$rows"), not 10001"
  fi
else
  fail "no capture at $rows: $(ls -la "$cap")"
  cat "$tmp/proxy.log"
fi
if [[ -f $manifest ]]; then
  grep -q '"capture_path": "/captures/requests.jsonl"' "$manifest" || fail "manifest: $(head -c 400 "$manifest")"
else
  fail "no manifest at $manifest"
fi

echo "image: $tag, $((size / 1000)) kB (base $base: $((base_size / 1000)) kB), build $build_ms ms;" \
  "start-up $startup_ms ms; stop $stop_ms ms; test $(ms "$test_start" "$(now)") ms"
((fails == 0)) && echo "container_image_test: built, ran, captured, stopped: all checks passed"
exit $((fails > 0))
