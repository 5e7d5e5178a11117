#!/usr/bin/env bash
# build.sh [--tag IMAGE] DEB|BUILD_DIR: builds the llmtap container image with podman and no
# registry: the .deb (or, given a configured release tree, the .deb CPack makes from it) on a
# Debian 12 base that mmdebstrap makes from this machine's own apt sources. Prints the image's
# name and size. Tags localhost/llmtap:<version> and localhost/llmtap:latest, or only IMAGE.
# build.sh --containers-conf FILE: only writes the containers.conf podman runs with here (below).
#
# 1. The base, localhost/llmtap-base:bookworm-<hash of its package list>, built once and reused
#    while the .deb's Depends stay the same (building another removes the older one):
#    `mmdebstrap --variant=extract` of the .deb's Depends (`dpkg-deb -f`), curl (the health
#    check), ca-certificates and the few tools the builder stage runs (dash, coreutils, sed,
#    grep, mawk, dpkg, tar), unpacked with merged /usr and no maintainer scripts run (10-15 s
#    instead of 29 s for --variant=essential, which also installs perl, PAM, util-linux...). It is only ever a builder: nothing runs from it but the file
#    copies of assemble.sh. Its sources are the machine's "deb" entries for bookworm,
#    bookworm-updates and bookworm-security, read from /etc/apt/sources.list{,.d/*.list} and
#    /etc/apt/sources.list.d/*.sources; docs, man pages and locales are left out (copyrights
#    kept). An extract hook records each package's control fields and file list, so the final
#    image can name the packages its files come from. `podman import` makes the tarball an image.
# 2. `podman build --network=none --pull=never` with Containerfile: the builder stage runs
#    assemble.sh, the final stage is FROM scratch with only what assemble.sh gathered. In the
#    docker image format, because the OCI format has no HEALTHCHECK (podman would drop it).
#
# podman's configuration: CONTAINERS_CONF when set (tests/container/image_test.sh sets it);
# otherwise one written to a temporary file for this run. /etc/containers is never touched.
# What it holds and why:
#   runtime = "runc"       Debian 12's crun refuses hybrid cgroup layouts (v1 controllers plus
#                          a v2 hierarchy at /sys/fs/cgroup/unified), as on these VMs.
#   cgroup_manager = "cgroupfs", events_logger = "file": no systemd running as PID 1 is needed.
#   default_ulimits        root podman's default asks for nofile 1048576, which this VM's hard
#                          limit (ulimit -Hn) may not grant: nofile = the hard limit (at most
#                          1048576), nproc = the hard limit, at most 32768.
#   network_backend = "cni": what Debian 12's podman 4.3 ships with (containernetworking-plugins).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
suite=bookworm

write_containers_conf() {  # write_containers_conf FILE
  local nofile nproc
  nofile=$(ulimit -Hn)
  [[ $nofile == unlimited || $nofile -gt 1048576 ]] && nofile=1048576
  nproc=$(ulimit -Hu)
  [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
  cat >"$1" <<EOF
# Written by llmtap's deploy/container/build.sh; read through CONTAINERS_CONF.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[network]
network_backend = "cni"
EOF
}

apt_lines() {  # apt_lines SUITE: "deb URI SUITE[-updates|-security] COMPONENTS" from the apt sources
  local f
  {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -f $f ]] || continue
      sed -e 's/#.*//' "$f" | awk '$1 == "deb" { sub(/^deb[ \t]+(\[[^]]*\][ \t]+)?/, ""); print }'
    done
    for f in /etc/apt/sources.list.d/*.sources; do  # deb822 stanzas
      [[ -f $f ]] || continue
      awk '
        function flush(  i, j) {
          if (tolower(f["types"]) ~ /(^| )deb( |$)/ && tolower(f["enabled"]) != "no") {
            nu = split(f["uris"], u, /[ \t]+/); ns = split(f["suites"], s, /[ \t]+/)
            for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print u[i], s[j], f["components"]
          }
          delete f; key = ""
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/ { if (key != "") { v = $0; sub(/^[ \t]+/, "", v); f[key] = f[key] " " v }; next }
        {
          key = tolower(substr($0, 1, index($0, ":") - 1)); v = substr($0, index($0, ":") + 1)
          sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v); f[key] = v
        }
        END { flush() }' "$f"
    done
  } | awk -v s="$1" '$2 == s || $2 == s "-updates" || $2 == s "-security" { print "deb " $0 }'
}

if [[ ${1:-} == --containers-conf ]]; then
  [[ $# == 2 ]] || { echo "usage: build.sh --containers-conf FILE" >&2; exit 2; }
  write_containers_conf "$2"
  exit 0
fi
tag=""
if [[ ${1:-} == --tag ]]; then tag=$2; shift 2; fi
[[ $# == 1 ]] || { echo "usage: build.sh [--tag IMAGE] DEB|BUILD_DIR" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z ${CONTAINERS_CONF:-} ]]; then
  write_containers_conf "$tmp/containers.conf"
  export CONTAINERS_CONF=$tmp/containers.conf
fi

# The .deb: given, or made by CPack from the build tree.
if [[ -d $1 ]]; then
  config=$(realpath "$1")/CPackConfig.cmake
  (cd "$tmp" && cpack -G DEB --config "$config" >cpack.log 2>&1) ||
    { cat "$tmp/cpack.log" >&2; exit 1; }
  debs=("$tmp"/llmtap_*_amd64.deb)
  deb=${debs[0]}
else
  deb=$1
fi
[[ -f $deb ]] || { echo "build.sh: no .deb at $deb" >&2; exit 1; }
version=$(dpkg-deb -f "$deb" Version)

# The base's packages: the .deb's Depends (first of each alternative, versions dropped), curl
# for the health check, ca-certificates for https upstreams and uploads, and the builder's tools.
mapfile -t packages < <({
  dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -e 's/|.*//' -e 's/(.*)//' -e 's/[[:space:]]//g'
  printf '%s\n' curl ca-certificates dash coreutils sed grep mawk dpkg tar
} | sed '/^$/d' | sort -u)
recipe="extract-v3 $suite ${packages[*]}"
base=localhost/llmtap-base:$suite-$(sha256sum <<<"$recipe" | cut -c1-12)
if podman image exists "$base"; then
  echo "base: $base (cached)"
else
  mapfile -t mirrors < <(apt_lines "$suite")
  ((${#mirrors[@]})) ||
    { echo "build.sh: the apt sources name no \"deb\" entry for $suite" >&2; exit 1; }
  start=$SECONDS
  # The extract hook: each package's control fields and file list ("PATH [LINK TARGET]" lines),
  # under /var/lib/llmtap-base; and the base keeps no copy of the machine's apt sources.
  record='mkdir -p "$1/var/lib/llmtap-base"
    for d in "$1"/var/cache/apt/archives/*.deb; do
      p=$(dpkg-deb -f "$d" Package)
      dpkg-deb -f "$d" >"$1/var/lib/llmtap-base/$p.control"
      dpkg-deb -c "$d" | awk "{ print substr(\$6, 2), (\$7 == \"->\" ? \$8 : \"\") }" \
        >"$1/var/lib/llmtap-base/$p.list"
    done
    : >"$1/etc/apt/sources.list"'
  mmdebstrap --quiet --variant=extract --include="$(IFS=,; echo "${packages[*]}")" \
    --setup-hook=/usr/share/mmdebstrap/hooks/merged-usr/setup00.sh --extract-hook="$record" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    "$suite" "$tmp/base.tar" "${mirrors[@]}" >"$tmp/mmdebstrap.log" 2>&1 ||
    { cat "$tmp/mmdebstrap.log" >&2; exit 1; }
  podman import -q --message "llmtap builder base: $recipe" "$tmp/base.tar" "$base" >/dev/null
  rm -f "$tmp/base.tar"
  echo "base: $base (built in $((SECONDS - start)) s)"
  # One base is kept: those of other package lists (older .debs) go.
  podman images --format '{{.Repository}}:{{.Tag}}' localhost/llmtap-base |
    grep -vxF "$base" | xargs -r podman rmi >/dev/null 2>&1 || true
fi

mkdir "$tmp/context"
cp "$deb" "$tmp/context/llmtap.deb"
cp "$here/assemble.sh" "$tmp/context/"
tags=()
if [[ -n $tag ]]; then tags=(--tag "$tag"); else
  tags=(--tag "localhost/llmtap:$version" --tag localhost/llmtap:latest)
  tag=localhost/llmtap:$version
fi
old_id=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
start=$SECONDS
podman build --quiet --layers=false --pull=never --network=none --format docker \
  --build-arg "BASE=$base" "${tags[@]}" -f "$here/Containerfile" "$tmp/context" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log" >&2; exit 1; }
# The image this build took the tag from goes, unless another tag still names it.
if [[ -n $old_id && $old_id != $(podman image inspect --format '{{.Id}}' "$tag") ]]; then
  podman rmi "$old_id" >/dev/null 2>&1 || true
fi
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "image: $tag ($((size / 1000)) kB, built in $((SECONDS - start)) s)"
