#!/usr/bin/env bash
# make_test_certs.sh DIR: throwaway PKI for the security tests, valid for two days, P-256 keys.
#   cluster-ca   signs worker.pem and peer.pem (the coordinator towards its workers); both carry
#                serverAuth and clientAuth, since each is served and presented
#   api-ca       signs api.pem, the coordinator's client port
#   rogue-ca     signs rogue.pem: well-formed, for 127.0.0.1, but from a CA nobody trusts
#   expired.pem  signed by cluster-ca, expired yesterday
# Every leaf is for 127.0.0.1 and localhost.
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"

ca() {  # ca NAME
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=$1" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$1.key" -out "$1.pem" 2>/dev/null
}

leaf() {  # leaf NAME CA DAYS
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$1" \
    -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days "$3" \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

ca cluster-ca
ca api-ca
ca rogue-ca
leaf worker cluster-ca 2
leaf peer cluster-ca 2
leaf api api-ca 2
leaf rogue rogue-ca 2
leaf expired cluster-ca -1
