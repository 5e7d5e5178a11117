#!/bin/sh
# assemble.sh DEB OUT: runs in the Containerfile's builder stage (the mmdebstrap base of build.sh)
# and gathers in OUT the whole tree of the final image, which is FROM scratch:
#   - the .deb's contents (dpkg-deb -x): /usr/bin/llmtap, its man page, README, bash completion
#     and sample systemd unit;
#   - /usr/bin/curl, the one program added, for the HEALTHCHECK (its libraries are libcurl's,
#     which llmtap links anyway);
#   - the shared libraries the two programs load, as the dynamic loader resolves them (ld.so
#     --list, what ldd runs), at their Debian paths (real file plus soname link), under merged
#     /usr (/bin, /lib, /lib64 link into /usr as on Debian 12);
#   - for each Debian package those files come from, its copyright file (that of the package its
#     doc directory links to, for libstdc++6 and the like) and, in
#     /var/lib/dpkg/status.d/<package>, its control fields (as distroless images do, so image
#     scanners see the package versions), llmtap's own included;
#   - the CA certificates (Mozilla's set, which update-ca-certificates puts in the same bundle by
#     default) at /etc/ssl/certs/ca-certificates.crt, with OpenSSL's /usr/lib/ssl/cert.pem link,
#     for https upstreams and uploads;
#   - /etc/passwd and /etc/group with root and the user llmtap (10001), a minimal
#     /etc/nsswitch.conf, /tmp (1777) and /captures owned by llmtap.
# A library the loader cannot find fails the build.
set -eu
deb=$1
out=$2
meta=/var/lib/llmtap-base   # the base's <package>.control and <package>.list (build.sh)
ld=/lib64/ld-linux-x86-64.so.2

mkdir -p "$out/usr/bin" "$out/usr/lib" "$out/usr/lib64" "$out/usr/sbin"
for d in bin lib lib64 sbin; do ln -s "usr/$d" "$out/$d"; done
dpkg-deb -x "$deb" "$out"
cp -p /usr/bin/curl "$out/usr/bin/curl"

# Every library path the loader resolves for the two programs, the loader itself included.
"$ld" --list "$out/usr/bin/llmtap" >/tmp/libs.txt
"$ld" --list /usr/bin/curl >>/tmp/libs.txt
if grep -q 'not found' /tmp/libs.txt; then
  echo "assemble.sh: libraries not found:" >&2
  grep 'not found' /tmp/libs.txt >&2
  exit 1
fi
# (mawk by name: the base is unpacked, so no alternatives made /usr/bin/awk; no pipes, whose
# failures sh would not see.)
mawk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' /tmp/libs.txt >/tmp/paths.txt

# Which package holds a path: the base's file lists, with / paths as under merged /usr.
for list in "$meta"/*.list; do
  p=$(basename "$list" .list)
  sed -e 's#^/\(bin\|sbin\|lib\|lib64\)/#/usr/\1/#' -e "s#^#$p #" "$list"
done >/tmp/owners.txt
echo curl >/tmp/packages.txt

while read -r path; do
  link=$(readlink -f "$(dirname "$path")")/$(basename "$path")   # the path under /usr
  real=$(readlink -f "$path")
  mkdir -p "$out$(dirname "$real")" "$out$(dirname "$link")"
  cp -p "$real" "$out$real"
  [ "$link" = "$real" ] || ln -sf "$real" "$out$link"
  mawk -v a="$link" -v b="$real" '$2 == a || $2 == b { print $1 }' /tmp/owners.txt >>/tmp/packages.txt
done </tmp/paths.txt

mkdir -p "$out/var/lib/dpkg/status.d"
sort -u /tmp/packages.txt >/tmp/packages.sorted
for p in $(cat /tmp/packages.sorted); do
  cp "$meta/$p.control" "$out/var/lib/dpkg/status.d/$p"
  # The copyright file; a doc directory that is a link (libstdc++6 -> gcc-12-base) stays one.
  doc=$(mawk -v d="/usr/share/doc/$p" '$1 == d && $2 != "" { print $2 }' "$meta/$p.list")
  if [ -n "$doc" ]; then
    ln -s "$doc" "$out/usr/share/doc/$p"
    p=$doc
  fi
  mkdir -p "$out/usr/share/doc/$p"
  cp "/usr/share/doc/$p/copyright" "$out/usr/share/doc/$p/copyright"
done
dpkg-deb -f "$deb" >"$out/var/lib/dpkg/status.d/llmtap"

mkdir -p "$out/etc/ssl/certs" "$out/usr/lib/ssl"
for c in /usr/share/ca-certificates/mozilla/*.crt; do
  sed -e '$a\' "$c"
done >"$out/etc/ssl/certs/ca-certificates.crt"
ln -s /etc/ssl/certs/ca-certificates.crt "$out/usr/lib/ssl/cert.pem"

printf '%s\n' 'root:x:0:0:root:/root:/usr/sbin/nologin' \
  'llmtap:x:10001:10001:llmtap:/captures:/usr/sbin/nologin' >"$out/etc/passwd"
printf '%s\n' 'root:x:0:' 'llmtap:x:10001:' >"$out/etc/group"
printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$out/etc/nsswitch.conf"
mkdir -m 1777 "$out/tmp"
mkdir -m 0755 "$out/captures"
chown 10001:10001 "$out/captures"
