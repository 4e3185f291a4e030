#!/bin/sh
# tests/tls-certs.sh DIR: make the TLS tests' certificates in DIR with openssl (ECDSA P-256 keys but where named):
#   ca.pem ca.key          a CA
#   server.pem server.key  localhost (DNS:localhost, IP:127.0.0.1), by the CA
#   other.pem other.key    other.test and *.wild.test, by the CA (for SNI)
#   expired.pem/.key       localhost, by the CA, valid only in January 2020
#   wrong.pem wrong.key    wrong.test only, by the CA
#   rsa.pem rsa.key        localhost, by the CA, an RSA 2048 key
#   p384.pem p384.key      localhost, by the CA, an ECDSA P-384 key
#   self.pem self.key      localhost, self-signed
#   client.pem client.key  a client certificate by the CA
#   rogue.pem rogue.key    a client certificate by another CA (rogue-ca.pem)
#   chain.pem              server.pem followed by ca.pem
#   server.ocsp            a good OCSP response for server.pem (DER), by the CA
# Exits non-zero with openssl's message if any step fails.
set -eu
d=$1
mkdir -p "$d"
cd "$d"
# key FILE: a new key, ECDSA P-256 unless $keyopts names another algorithm
keyopts="-algorithm EC -pkeyopt ec_paramgen_curve:P-256"
key() { openssl genpkey $keyopts -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -days 30 -subj /CN=turnloop-test-ca -out ca.pem \
	-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
key rogue-ca.key
openssl req -x509 -new -key rogue-ca.key -days 30 -subj /CN=rogue-ca -out rogue-ca.pem \
	-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
# sign NAME CN EXT [CA]: NAME.pem for NAME.key's key, signed by CA (default ca)
sign() {
	ca=${4:-ca}
	key "$1.key"
	openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
	printf '%s\n' "$3" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial -days 30 \
		-extfile "$1.ext" -out "$1.pem" 2>/dev/null
	rm -f "$1.csr" "$1.ext"
}
sign server localhost "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
sign other other.test "subjectAltName=DNS:other.test,DNS:*.wild.test
extendedKeyUsage=serverAuth"
sign wrong wrong.test "subjectAltName=DNS:wrong.test
extendedKeyUsage=serverAuth"
# rsa and p384: localhost again, with keys the TLS layer does not sign with
# libcrypto (only P-256 keys take that path: lib/tls/ecsign.c)
keyopts="-algorithm RSA -pkeyopt rsa_keygen_bits:2048"
sign rsa localhost "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
keyopts="-algorithm EC -pkeyopt ec_paramgen_curve:P-384"
sign p384 localhost "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
keyopts="-algorithm EC -pkeyopt ec_paramgen_curve:P-256"
sign client turnloop-client "extendedKeyUsage=clientAuth"
sign rogue rogue-client "extendedKeyUsage=clientAuth" rogue-ca
key self.key
openssl req -x509 -new -key self.key -days 30 -subj /CN=localhost -out self.pem \
	-addext subjectAltName=DNS:localhost,IP:127.0.0.1
# expired: openssl ca is the one that takes explicit dates
key expired.key
openssl req -new -key expired.key -subj /CN=localhost -out expired.csr
mkdir -p ca-db
: >ca-db/index.txt
echo 01 >ca-db/serial
cat >ca-db/ca.cnf <<EOF
[ ca ]
default_ca = test
[ test ]
database = $PWD/ca-db/index.txt
serial = $PWD/ca-db/serial
new_certs_dir = $PWD/ca-db
default_md = sha256
policy = any
copy_extensions = none
x509_extensions = ext
[ any ]
commonName = supplied
[ ext ]
subjectAltName = DNS:localhost,IP:127.0.0.1
extendedKeyUsage = serverAuth
EOF
openssl ca -batch -config ca-db/ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr \
	-startdate 20200101000000Z -enddate 20200102000000Z -out expired.pem 2>/dev/null
rm -f expired.csr
cat server.pem ca.pem >chain.pem
# server.ocsp: a "good" OCSP response for server.pem, signed by the CA (stapling)
serial=$(openssl x509 -in server.pem -noout -serial | cut -d= -f2)
end=$(openssl x509 -in server.pem -noout -enddate | cut -d= -f2)
printf 'V\t%s\t\t%s\tunknown\t/CN=localhost\n' "$(date -u -d "$end" +%y%m%d%H%M%SZ)" "$serial" >ocsp-index.txt
openssl ocsp -index ocsp-index.txt -rsigner ca.pem -rkey ca.key -CA ca.pem -issuer ca.pem \
	-cert server.pem -respout server.ocsp -ndays 7 >/dev/null 2>&1
test -s server.ocsp
