#!/usr/bin/env bash
# tests/tlproxy/make-hellos.sh: capture real TLS ClientHellos from `openssl s_client` into tests/tlproxy/hello/*.bin (the SNI tests' vectors); run by hand, its output is committed.
#
# A small Python listener on 127.0.0.1 takes one connection, keeps the
# client's first TLS records until the whole ClientHello is in, writes them
# to the file and closes; s_client then fails, which is expected. The host
# name each file carries is in its name's table below and in
# tests/test_tlp_sni.c.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/hello"

capture() { # file, s_client options...
	local out=$1 port
	shift
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	rm -f "$out.ready"
	python3 - "$port" "$out" <<'PY' &
import socket, sys
port, out = int(sys.argv[1]), sys.argv[2]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(1)
open(out + ".ready", "w").close()
srv.settimeout(10)
conn, _ = srv.accept()
conn.settimeout(10)
data = b""
def need(n):
    global data
    while len(data) < n:
        chunk = conn.recv(65536)
        if not chunk:
            raise SystemExit("client closed early")
        data += chunk
# Records until the handshake message (4-byte header + body) is whole.
pos, hs = 0, b""
while True:
    need(pos + 5)
    rl = int.from_bytes(data[pos + 3:pos + 5], "big")
    need(pos + 5 + rl)
    hs += data[pos + 5:pos + 5 + rl]
    pos += 5 + rl
    if len(hs) >= 4 and len(hs) >= 4 + int.from_bytes(hs[1:4], "big"):
        break
open(out, "wb").write(data[:pos])
conn.close()
PY
	local srv=$! i
	for i in $(seq 100); do [ -e "$out.ready" ] && break; sleep 0.1; done
	rm -f "$out.ready"
	timeout 10 openssl s_client -connect "127.0.0.1:$port" "$@" </dev/null >/dev/null 2>&1 || true
	wait $srv
	echo "$out: $(stat -c %s "$out") bytes"
}

capture tls13-www.example.com.bin -tls1_3 -servername www.example.com
capture tls12-a.example.com.bin -tls1_2 -servername a.example.com
capture alpn-api.example.org.bin -servername api.example.org -alpn h2,http/1.1
capture mixed-case.bin -servername MiXeD.Example.COM
capture no-sni.bin -noservername
