#!/usr/bin/env bash
# make_test_certs.sh DIR: a test CA and the certificates the TLS tests use, made with the openssl
# CLI (EC P-256, so it takes well under a second). Writes into DIR:
#   ca.pem ca.key                  the test CA (not in any system store)
#   server.pem/key                 localhost, 127.0.0.1, ::1; valid 30 days
#   server2.pem/key                the same names, a new key and serial (certificate rotation)
#   wronghost.pem/key              wrong.example only (host-name mismatch)
#   expired.pem/key                localhost, 127.0.0.1; expired yesterday
#   notyet.pem/key                 localhost, 127.0.0.1; valid from 10 days on, for 30 days
#   soon.pem/key                   localhost, 127.0.0.1; expires in 3 days
#   client.pem/key                 a client certificate (mutual TLS)
#   other-ca.pem other-ca.key      a second CA that signed nothing here (unknown-CA cases)
set -euo pipefail
dir=${1:?usage: make_test_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
export OPENSSL_CONF=/dev/null  # the system openssl.cnf must not add extensions

ca() {  # ca NAME CN
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc -days 30 \
    -keyout "$1.key" -out "$1.pem" -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
}

leaf() {  # leaf NAME SAN DAYS [EKU]
  local ext
  ext=$(mktemp)
  printf 'basicConstraints=critical,CA:FALSE\nsubjectAltName=%s\nextendedKeyUsage=%s\n' \
    "$2" "${4:-serverAuth}" >"$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc -keyout "$1.key" \
    -subj "/CN=$1" 2>/dev/null |
    openssl x509 -req -CA ca.pem -CAkey ca.key -CAcreateserial -days "$3" -out "$1.pem" \
      -extfile "$ext" 2>/dev/null
  rm -f "$ext"
}

# dated NAME SAN START END: a leaf valid from START to END (date(1) strings such as "+10 days");
# `openssl ca`, as OpenSSL 3.0's `openssl x509` cannot set notBefore.
dated() {
  local db
  db=$(mktemp -d)
  : >"$db/index.txt"
  echo 01 >"$db/serial"
  printf '%s\n' '[ca]' 'default_ca = test' '[test]' "database = $db/index.txt" \
    "new_certs_dir = $db" "serial = $db/serial" 'default_md = sha256' 'policy = any' \
    'unique_subject = no' '[any]' 'commonName = supplied' '[leaf]' \
    'basicConstraints = critical,CA:FALSE' "subjectAltName = $2" \
    'extendedKeyUsage = serverAuth' >"$db/ca.cnf"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc -keyout "$1.key" \
    -subj "/CN=$1" -out "$db/req.csr" 2>/dev/null
  openssl ca -batch -config "$db/ca.cnf" -cert ca.pem -keyfile ca.key -in "$db/req.csr" \
    -out "$1.pem" -extensions leaf -notext -startdate "$(date -u -d "$3" +%Y%m%d%H%M%SZ)" \
    -enddate "$(date -u -d "$4" +%Y%m%d%H%M%SZ)" >/dev/null 2>&1
  rm -rf "$db"
}

ca ca "llmtap test CA"
ca other-ca "llmtap other test CA"
leaf server "DNS:localhost,IP:127.0.0.1,IP:::1" 30
leaf server2 "DNS:localhost,IP:127.0.0.1,IP:::1" 30
leaf wronghost "DNS:wrong.example" 30
leaf expired "DNS:localhost,IP:127.0.0.1" -1
dated notyet "DNS:localhost,IP:127.0.0.1" "+10 days" "+40 days"
leaf soon "DNS:localhost,IP:127.0.0.1" 3
leaf client "DNS:client" 30 clientAuth
rm -f ca.srl
