#!/usr/bin/env python3
"""tests/test_tlproxy_tls.py: tlproxy terminating and originating TLS, end to end with openssl (s_client, s_server), curl and Python's ssl: handshakes, SNI, ALPN, mTLS, OCSP staples, the handshake deadline, refused server certificates, bulk by hash, the stats and log fields, a takeover.

Usage: test_tlproxy_tls.py TLPROXY TLSHARD TLECHO CASE    (exit 0 pass, 1 fail, 77 skip)

The certificates (ECDSA P-256) are made per case by tests/tls-certs.sh in the
case's temporary folder. The small servers and the harness are
test_tlproxy.py's.
"""
import hashlib
import os
import re
import select
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_tlproxy as T  # noqa: E402
from test_tlproxy import Fail, check, connect, need  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def certs(env):
    need("openssl")
    d = env.path("certs")
    r = subprocess.run(["sh", os.path.join(HERE, "tls-certs.sh"), d], capture_output=True, text=True)
    check(r.returncode == 0, f"tls-certs.sh failed: {r.stderr[-2000:]}")
    return d


def client_ctx(d, cert=None, alpn=None):
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
    if cert:
        ctx.load_cert_chain(os.path.join(d, cert + ".pem"), os.path.join(d, cert + ".key"))
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


def tls_connect(port, ctx, name="localhost", timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        return ctx.wrap_socket(s, server_hostname=name)
    except Exception:
        s.close()
        raise


def tls_echo(t, msg):
    """An ident=NAME server's name line, then msg echoed: the name."""
    line = b""
    while not line.endswith(b"\n"):
        d = t.recv(100)
        check(d, "the server's name did not come")
        line += d
    t.sendall(msg)
    got = b""
    while len(got) < len(msg):
        d = t.recv(65536)
        check(d, f"echo cut after {len(got)} bytes")
        got += d
    check(got == msg, "the echo differs")
    return line.strip().decode()


def refused(port, ctx, name="localhost"):
    """The handshake (or the first read after it: a TLS 1.3 client learns
    of its certificate's refusal there) fails."""
    try:
        t = tls_connect(port, ctx, name)
    except (ssl.SSLError, OSError):
        return True
    try:
        t.settimeout(5)
        d = t.recv(100)
        return not d
    except (ssl.SSLError, OSError):
        return True
    finally:
        t.close()


def log_lines(path, n, timeout=10):
    t = time.time() + timeout
    text = ""
    while time.time() < t:
        text = open(path).read() if os.path.exists(path) else ""
        if text.count("\n") >= n:
            return text
        time.sleep(0.05)
    raise Fail(f"{n} access-log lines did not come: {text!r}")


def tls_pipe(sock, ctx, name, data, wait, pace=None, gate=None, deadline_s=120, closed=None):
    """Over one TLS session on sock (blocking TCP underneath, run through
    memory BIOs so that reading never waits behind writing): send data once
    wait bytes have come in, then close_notify and the FIN, while reading
    to the peer's close_notify. pace: spread the sending over that many
    seconds; gate (fraction, event): stop sending at that fraction of data
    until the event is set; closed: an event set once the peer's
    close_notify was read. Returns (bytes read, their SHA-256)."""
    t_start = time.time()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=name)
    sock.setblocking(False)
    view, off, got, h = memoryview(data), 0, 0, hashlib.sha256()
    state = "hs"  # hs, data, closing, done
    pending = b""
    eof_in = peer_closed = False
    deadline = time.time() + deadline_s
    while not (state == "done" and peer_closed and not pending):
        check(time.time() < deadline, f"TLS pipe stalled: sent {off} of {len(data)}, read {got}")
        progress = False
        if state == "hs":
            try:
                obj.do_handshake()
                state = "data"
                progress = True
            except ssl.SSLWantReadError:
                pass
        if state in ("data", "closing", "done") and not peer_closed:
            while True:
                try:
                    d = obj.read(1 << 16)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:
                    peer_closed = True
                    break
                if not d:
                    peer_closed = True
                    break
                h.update(d)
                got += len(d)
                progress = True
        held = (pace and off / len(data) * pace > time.time() - t_start) or \
            (gate and off >= len(data) * gate[0] and not gate[1].is_set())
        if state == "data" and got >= wait and len(pending) < (1 << 20) and not held:
            if off < len(data):
                n = obj.write(view[off:off + (1 << 16)])
                off += n
                progress = True
            else:
                state = "closing"
        if state == "closing":
            try:
                obj.unwrap()
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                pass
            state = "done"
            progress = True
        pending += out.read()
        if pending:
            try:
                n = sock.send(pending)
                pending = pending[n:]
                progress = progress or n > 0
            except BlockingIOError:
                pass
        if state == "done" and not pending and not eof_in:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            eof_in = True
        try:
            d = sock.recv(1 << 20)
            if d:
                inc.write(d)
                progress = True
            elif not peer_closed:
                raise Fail(f"the stream ended without close_notify (read {got})")
        except BlockingIOError:
            pass
        if peer_closed and closed is not None:
            closed.set()
        if not progress:
            select.select([sock], [sock] if pending else [], [], 0.05 if held else 0.5)
    return got, h.hexdigest()


def s_client_echo(port, d):
    """openssl s_client sends "ping" and, once its echo is back, ends: its
    output."""
    p = subprocess.Popen(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost",
                          "-CAfile", os.path.join(d, "ca.pem"), "-verify_return_error"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    p.stdin.write(b"ping\n")
    p.stdin.flush()
    out = b""
    deadline = time.time() + 15
    while not re.search(rb"^ping$", out, re.M) and time.time() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            d2 = os.read(p.stdout.fileno(), 65536)
            if not d2:
                break
            out += d2
    p.stdin.close()
    try:
        out += p.stdout.read()
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    return out.decode(errors="replace")


def proxy_tls(env, d, extra=None, shards="1"):
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", shards,
                    "--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server.key")]
                   + (extra or []))
    return px, lp, up


def t_tls_basic(env):
    """--tls-cert/--tls-key: Python's ssl, openssl s_client and curl through
    a terminating tlproxy to a plain server; the stats count the
    handshakes; --splice with TLS is refused in one line."""
    d = certs(env)
    px, lp, up = proxy_tls(env, d)
    fd0 = env.fds(px)
    ctx = client_ctx(d)
    for i in range(3):
        t = tls_connect(lp, ctx)
        check(t.version() in ("TLSv1.3", "TLSv1.2"), f"version {t.version()}")
        check(tls_echo(t, b"hello %d" % i) == "S", "not the server")
        t.unwrap()
        t.close()
    out = s_client_echo(lp, d)
    check("Verify return code: 0 (ok)" in out, f"s_client did not verify: {out[-1500:]}")
    check(re.search(r"^S\nping$", out, re.M), f"s_client got no echo: {out[-1500:]}")
    env.wait_stat(px, "tls_handshakes", "ok", 4)
    # curl to a plain HTTP server behind the proxy.
    www = env.path("www")
    os.mkdir(www)
    body = os.urandom(1 << 20)
    with open(os.path.join(www, "f.bin"), "wb") as f:
        f.write(body)
    hp, hl = env.port(), env.port()
    env.start("http", [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", www, str(hp)])
    deadline = time.time() + 10
    while True:
        try:
            connect(hp).close()
            break
        except OSError:
            check(time.time() < deadline, "http.server did not start")
            time.sleep(0.05)
    px2 = env.proxy(["--listen", f"127.0.0.1:{hl}", "--upstream", f"127.0.0.1:{hp}", "--shards", "1",
                     "--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server.key")],
                    name="tlproxy-http")
    need("curl")
    out = env.path("got.bin")
    r = subprocess.run(["curl", "-sS", "--http1.1", "--cacert", os.path.join(d, "ca.pem"), "-o", out,
                        f"https://localhost:{hl}/f.bin"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, f"curl failed: {r.stderr}")
    check(hashlib.sha256(open(out, "rb").read()).digest() == hashlib.sha256(body).digest(), "curl got other bytes")
    check(env.stop(px2) == 0, "the second tlproxy did not exit 0")
    # A client that is not TLS, and one that does not trust the certificate.
    s = connect(lp)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    check(T.is_closed(s), "a plain-text client was not closed")
    s.close()
    check(refused(lp, ssl.create_default_context()), "a client without the CA connected")
    env.wait_stat(px, "errors", "tls_handshake", 2)
    st = env.stats(px)["tls_handshakes"]
    print("tls_handshakes:", {k: v for k, v in st.items() if k != "_per_shard" and v}, flush=True)
    check(st["protocol"] >= 1, f"the plain-text client was not counted as protocol: {st}")
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")
    r = subprocess.run([env.tlproxy, "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2", "--splice",
                        "--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server.key")],
                       capture_output=True, text=True, timeout=20)
    check(r.returncode == 2 and r.stderr.startswith("tlproxy: --splice is for plain TCP: not with --tls-cert"),
          f"--splice with --tls-cert: exit {r.returncode}, {r.stderr!r}")


def sni_cfg(env, d, lp, pa, pb, log, extra=""):
    return T.write_cfg(env, "tls.yaml", f"""
access_log: {log}
listeners:
  - name: tls
    listen: "127.0.0.1:{lp}"
    pool: a
    sni:
      - {{name: "other.test", pool: b}}
      - {{name: "*.wild.test", pool: b}}
    tls:
      certificates:
        - {{cert: "{d}/server.pem", key: "{d}/server.key"}}
        - {{cert: "{d}/other.pem", key: "{d}/other.key"}}
      alpn: "h2,http/1.1"
{extra}
pools:
  - {{name: a, servers: [{{address: "127.0.0.1:{pa}"}}]}}
  - {{name: b, servers: [{{address: "127.0.0.1:{pb}"}}]}}
""")


def t_tls_sni(env):
    """tls: with two certificates and sni: rules: each name gets its
    certificate and its pool, an unknown name the first ones; ALPN is
    agreed; the access log has the TLS fields."""
    d = certs(env)
    pa, pb, lp = env.port(), env.port(), env.port()
    env.serve("ident=A", "127.0.0.1", pa)
    env.serve("ident=B", "127.0.0.1", pb)
    log = env.path("access.log")
    px = env.proxy(["--config", sni_cfg(env, d, lp, pa, pb, log)])
    fd0 = env.fds(px)
    for name, want in (("localhost", "A"), ("other.test", "B"), ("x.wild.test", "B")):
        t = tls_connect(lp, client_ctx(d, alpn=["http/1.1"]), name)
        cn = dict(x[0] for x in t.getpeercert()["subject"])["commonName"]
        check(cn == ("localhost" if name == "localhost" else "other.test"), f"{name}: certificate {cn}")
        check(t.selected_alpn_protocol() == "http/1.1", f"{name}: ALPN {t.selected_alpn_protocol()}")
        check(tls_echo(t, b"x") == want, f"{name} did not reach server {want}")
        t.unwrap()
        t.close()
    # An unknown name: the first certificate (which does not name it: the
    # client is told not to check) and the default pool.
    ctx = client_ctx(d, alpn=["h2", "http/1.1"])
    ctx.check_hostname = False
    t = tls_connect(lp, ctx, "nope.test")
    check(t.selected_alpn_protocol() == "h2", f"ALPN {t.selected_alpn_protocol()}, want the server's first")
    check(tls_echo(t, b"y") == "A", "an unknown name did not reach the default pool")
    t.unwrap()
    t.close()
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{lp}", "-servername", "other.test",
                        "-alpn", "http/1.1"], input="", capture_output=True, text=True, timeout=20)
    check("ALPN protocol: http/1.1" in r.stdout, f"s_client ALPN: {r.stdout[-800:]}")
    text = log_lines(log, 5)
    check(re.search(r" end=done retries=0 tls=1\.[23] cipher=\S+ sni=other\.test alpn=http/1\.1 resumed=0 "
                    r"hs_ms=[\d.]+\n", text), f"no TLS fields in the log: {text!r}")
    check(re.search(r" tls=1\.[23] cipher=\S+ sni=nope\.test alpn=h2 ", text), f"no h2 line: {text!r}")
    env.wait_stat(px, "tls_handshakes", "ok", 5)
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_tls_mtls(env):
    """client_ca with verify on: a client certificate by the CA is let in,
    one by another CA and none at all are refused, each reason counted."""
    d = certs(env)
    pa, pb, lp = env.port(), env.port(), env.port()
    env.serve("ident=A", "127.0.0.1", pa)
    env.serve("ident=B", "127.0.0.1", pb)
    log = env.path("access.log")
    px = env.proxy(["--config", sni_cfg(env, d, lp, pa, pb, log, f"""      client_ca: "{d}/ca.pem"
      verify: on""")])
    t = tls_connect(lp, client_ctx(d, cert="client"))
    check(tls_echo(t, b"m") == "A", "a good client certificate was not let in")
    t.unwrap()
    t.close()
    check(refused(lp, client_ctx(d, cert="rogue")), "a client certificate by another CA was let in")
    check(refused(lp, client_ctx(d)), "a client without a certificate was let in")
    env.wait_stat(px, "tls_handshakes", "ok", 1)
    env.wait_stat(px, "tls_handshakes", "cert-untrusted", 1)
    env.wait_stat(px, "tls_handshakes", "no-cert", 1)
    text = log_lines(log, 3)
    check(re.search(r" end=tls_handshake retries=0 tls=failed reason=cert-untrusted ", text), f"log: {text!r}")
    check(env.stop(px) == 0, "tlproxy did not exit 0")


class PP2Server:
    """A server that reads the PROXY v2 header each connection opens with
    and keeps its TLVs (type: value; PP2_TYPE_SSL as its client byte,
    verify and sub-TLVs), then answers "ok" and closes."""

    def __init__(self, port, tls=None):
        self.tls = tls  # an ssl server context: TLS after the header
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", port))
        self.ls.listen(16)
        self.got = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    @staticmethod
    def tlvs(b):
        out = {}
        while len(b) >= 3:
            ty, n = b[0], b[1] << 8 | b[2]
            v, b = b[3:3 + n], b[3 + n:]
            if ty == 0x20:
                out[ty] = {"client": v[0], "verify": struct.unpack(">I", v[1:5])[0],
                           "sub": PP2Server.tlvs(v[5:])}
            else:
                out[ty] = v
        return out

    def run(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            with c:
                c.settimeout(5)
                h = T.recv_exact(c, 16)
                if len(h) < 16:
                    continue
                body = T.recv_exact(c, h[14] << 8 | h[15])
                addr = {0x11: 12, 0x21: 36, 0x31: 216}.get(h[13], 0)
                self.got.append(self.tlvs(body[addr:]))
                if self.tls:
                    try:
                        t = self.tls.wrap_socket(c, server_side=True)
                        t.sendall(b"ok tls\n")
                        t.close()
                    except (ssl.SSLError, OSError) as e:
                        self.got[-1]["error"] = str(e)
                    continue
                c.sendall(b"ok\n")

    def close(self):
        self.ls.close()


def t_tls_pp2(env):
    """A pool's proxy_protocol: v2 behind a tls: listener: the header the
    server gets carries the client's TLS as TLVs (ALPN, the SNI as
    AUTHORITY, PP2_TYPE_SSL with the version and cipher), with the client
    bits and verify field for no client certificate and for one that
    verified (mTLS)."""
    d = certs(env)
    up, lp, lm, up2, lo = env.port(), env.port(), env.port(), env.port(), env.port()
    srv = PP2Server(up)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(os.path.join(d, "server.pem"), os.path.join(d, "server.key"))
    srv2 = PP2Server(up2, tls=sctx)
    cfg = T.write_cfg(env, "pp2.yaml", f"""
listeners:
  - name: tls
    listen: "127.0.0.1:{lp}"
    pool: pp
    tls:
      certificates: [{{cert: "{d}/server.pem", key: "{d}/server.key"}}]
      alpn: "h2,http/1.1"
  - name: mtls
    listen: "127.0.0.1:{lm}"
    pool: pp
    tls:
      certificates: [{{cert: "{d}/server.pem", key: "{d}/server.key"}}]
      client_ca: "{d}/ca.pem"
      verify: on
  - {{name: orig, listen: "127.0.0.1:{lo}", pool: ppt}}
pools:
  - {{name: pp, proxy_protocol: v2, servers: [{{address: "127.0.0.1:{up}"}}]}}
  - {{name: ppt, proxy_protocol: v2, servers: [{{address: "127.0.0.1:{up2}"}}],
     tls: {{ca: "{d}/ca.pem", server_name: localhost}}}}
""")
    px = env.proxy(["--config", cfg])
    try:
        for port, cert, alpn in ((lp, None, ["http/1.1"]), (lm, "client", None)):
            t = tls_connect(port, client_ctx(d, cert=cert, alpn=alpn))
            check(t.recv(10) == b"ok\n", "the server did not answer")
            version, cipher = t.version(), t.cipher()[0]
            t.close()
            check(srv.got, "the server got no PROXY header")
            g = srv.got.pop()
            ssl_tlv = g.get(0x20)
            check(ssl_tlv, f"no PP2_TYPE_SSL: {g}")
            check(ssl_tlv["sub"].get(0x21) == version.encode(), f"SSL_VERSION {ssl_tlv}, want {version}")
            check(ssl_tlv["sub"].get(0x23), f"no SSL_CIPHER: {ssl_tlv}")
            check(g.get(0x02) == b"localhost", f"AUTHORITY {g.get(0x02)!r}, want the SNI")
            if cert:
                check(ssl_tlv["client"] == 0x03 and ssl_tlv["verify"] == 0,
                      f"a verified client certificate: client {ssl_tlv['client']:#x}, verify {ssl_tlv['verify']}")
                check(0x01 not in g, f"an ALPN TLV with none agreed: {g}")
            else:
                check(ssl_tlv["client"] == 0x01 and ssl_tlv["verify"] == 1,
                      f"no client certificate: client {ssl_tlv['client']:#x}, verify {ssl_tlv['verify']}")
                check(g.get(0x01) == b"http/1.1", f"ALPN TLV {g.get(0x01)!r}")
            print(f"PROXY v2 TLVs ({'mTLS' if cert else 'TLS'}, {version} {cipher}): {g}", flush=True)
        # A tls: pool with proxy_protocol: the header in the clear, then
        # the TLS handshake.
        s = connect(lo)
        got = s.recv(100)
        s.close()
        check(got == b"ok tls\n", f"through a tls: pool with PROXY headers: {got!r} {srv2.got}")
        check(srv2.got and "error" not in srv2.got[-1], f"the server behind it: {srv2.got}")
        check(env.stop(px) == 0, "tlproxy did not exit 0")
    finally:
        srv.close()
        srv2.close()


def t_tls_reload(env):
    """SIGHUP reads certificates and keys off the shards' loops: with a
    certificate path that blocks its reader (a FIFO nobody writes yet),
    the only shard goes on serving, TLS clients included; the file, once
    it opens, is refused (not a regular file) and the running configuration
    stays; a reload with another certificate then serves it, while a
    connection made before goes on."""
    d = certs(env)
    up, lp, lt = env.port(), env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    fifo = env.path("cert.fifo")
    os.mkfifo(fifo)

    def cfg(cert, key):
        return T.write_cfg(env, "reload.yaml", f"""shards: 1
listeners:
  - {{name: plain, listen: "127.0.0.1:{lp}", pool: p}}
  - name: tls
    listen: "127.0.0.1:{lt}"
    pool: p
    tls:
      certificates: [{{cert: "{cert}", key: "{d}/{key}.key"}}]
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")

    def cn(t):
        return dict(x[0] for x in t.getpeercert()["subject"])["commonName"]

    px = env.proxy(["--config", cfg(os.path.join(d, "server.pem"), "server")])
    before = tls_connect(lt, client_ctx(d))
    check(tls_echo(before, b"a") == "S" and cn(before) == "localhost", "TLS before the reloads")
    cfg(fifo, "server")
    px.p.send_signal(signal.SIGHUP)
    time.sleep(0.3)  # the reload is now waiting for the FIFO
    for i in range(20):
        s = connect(lp, timeout=3)
        try:
            got = s.recv(100)
        except socket.timeout:
            raise Fail(f"connection {i}: no answer while a reload reads its certificate")
        check(got.startswith(b"S"), f"connection {i}: {got!r}")
        s.close()
    t = tls_connect(lt, client_ctx(d), timeout=3)
    check(tls_echo(t, b"b") == "S", "no TLS while a reload reads its certificate")
    t.close()
    w = open(fifo, "w")  # lets the reader's open return
    w.close()
    env.wait_for(px, r"reload of \S+ refused; the running configuration stays: listener tls: tls: .*not a "
                     r"regular file")
    # Another certificate: new clients get it, the old session goes on.
    ctx = client_ctx(d)
    ctx.check_hostname = False
    cfg(os.path.join(d, "other.pem"), "other")
    px.p.send_signal(signal.SIGHUP)
    env.wait_for(px, r"reloaded: 2 listeners")
    t = tls_connect(lt, ctx)
    check(cn(t) == "other.test", f"after the reload the certificate is {cn(t)}")
    check(tls_echo(t, b"c") == "S", "no TLS after the reload")
    t.close()
    before.sendall(b"z")
    check(before.recv(10) == b"z", "the connection made before the reloads broke")
    before.close()
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_tls_reload_first(env):
    """A process started without TLS takes its first tls: listener and
    tls: pool at a reload: each shard makes its TLS context then, and TLS
    clients are served through to a TLS server."""
    d = certs(env)
    up, lp, lt, lo = env.port(), env.port(), env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    ts = env.port()
    start_s_server(env, d, "server", ts)
    ca = os.path.join(d, "ca.pem")
    head = f"""listeners:
  - {{name: plain, listen: "127.0.0.1:{lp}", pool: p}}
"""
    pools = f"""pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
"""
    path = T.write_cfg(env, "first.yaml", head + pools)
    px = env.proxy(["--config", path])
    T.write_cfg(env, "first.yaml", head + f"""  - name: tls
    listen: "127.0.0.1:{lt}"
    pool: p
    tls:
      certificates: [{{cert: "{d}/server.pem", key: "{d}/server.key"}}]
  - {{name: orig, listen: "127.0.0.1:{lo}", pool: s}}
""" + pools + f"""  - {{name: s, servers: [{{address: "127.0.0.1:{ts}"}}], tls: {{ca: "{ca}", server_name: localhost}}}}
""")
    px.p.send_signal(signal.SIGHUP)
    env.wait_for(px, r"reloaded: 3 listeners")
    t_end = time.time() + 10  # the shards bind the new listeners as the generation reaches them
    while refused_port(lt) or refused_port(lo):
        check(time.time() < t_end, "the listeners the reload added are not there")
        time.sleep(0.05)
    for i in range(4):  # on both shards
        t = tls_connect(lt, client_ctx(d))
        check(tls_echo(t, b"%d" % i) == "S", f"TLS client {i} after the reload")
        t.close()
        s = connect(lo)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        page = T.recv_all(s)
        s.close()
        check(page.startswith(b"HTTP/1.0 200"), f"no page from the TLS server after the reload: {page[:100]!r}")
    check("no TLS context" not in px.text(), "a shard had no TLS context")
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def s_client_status(port, d, name, *extra):
    """openssl s_client -status, verifying against the CA: its output."""
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", name, "-status",
                        "-CAfile", os.path.join(d, "ca.pem"), "-verify_return_error", *extra],
                       input="", capture_output=True, text=True, timeout=20)
    check("Verify return code: 0 (ok)" in r.stdout, f"s_client to {name} did not verify: {r.stdout[-1500:]}")
    return r.stdout


def stapled(out):
    return "OCSP Response Status: successful" in out and re.search(r"^\s*Cert Status: good$", out, re.M)


def t_tls_ocsp(env):
    """OCSP staples per certificate: openssl s_client -status gets the
    staple of the certificate that has one (TLS 1.3 and 1.2) and none for
    the SNI name of one that has none; a reload reads the staple again
    (another file), and one whose staple cannot be read is refused with the
    reason while the running one goes on stapling; --tls-ocsp staples for
    --tls-cert; a staple that cannot be read, or that is not for its
    certificate, stops the start with one line."""
    d = certs(env)
    up, lp, lc = env.port(), env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)

    def cfg(ocsp, first="server", name="ocsp.yaml"):
        return T.write_cfg(env, name, f"""shards: 1
max_conns: 100
listeners:
  - name: tls
    listen: "127.0.0.1:{lp}"
    pool: p
    tls:
      certificates:
        - {{cert: "{d}/{first}.pem", key: "{d}/{first}.key", ocsp: "{ocsp}"}}
        - {{cert: "{d}/other.pem", key: "{d}/other.key"}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")

    px = env.proxy(["--config", cfg(os.path.join(d, "server.ocsp"))])
    out = s_client_status(lp, d, "localhost")
    check(stapled(out), f"no staple for localhost: {out[-2500:]}")
    out = s_client_status(lp, d, "localhost", "-tls1_2")
    check(stapled(out), f"no staple for localhost over TLS 1.2: {out[-2500:]}")
    out = s_client_status(lp, d, "other.test")
    check("OCSP response: no response sent" in out and "OCSP Response Status" not in out,
          f"other.test, whose certificate has no staple, got one: {out[-2500:]}")
    t = tls_connect(lp, client_ctx(d))
    check(tls_echo(t, b"o") == "S", "no echo through the stapling listener")
    t.close()
    # A reload reads the staple again, from the file it names now.
    copy = env.path("copy.ocsp")
    with open(os.path.join(d, "server.ocsp"), "rb") as f, open(copy, "wb") as g:
        g.write(f.read())
    cfg(copy)
    px.p.send_signal(signal.SIGHUP)
    env.wait_for(px, r"reloaded: 1 listeners")
    out = s_client_status(lp, d, "localhost")
    check(stapled(out), f"no staple after the reload: {out[-2500:]}")
    # A staple that cannot be read refuses the reload; the running one stays.
    missing = env.path("missing.ocsp")
    cfg(missing)
    px.p.send_signal(signal.SIGHUP)
    env.wait_for(px, r"reload of \S+ refused; the running configuration stays: listener tls: tls: "
                     + re.escape(missing) + ": ")
    out = s_client_status(lp, d, "localhost")
    check(stapled(out), f"no staple after a refused reload: {out[-2500:]}")
    env.wait_stat(px, "tls_handshakes", "ok", 6)
    check(env.stop(px) == 0, "tlproxy did not exit 0")
    # The command line's certificate.
    tls = ["--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server.key")]
    px2 = env.proxy(["--listen", f"127.0.0.1:{lc}", "--upstream", f"127.0.0.1:{up}", "--shards", "1"] + tls
                    + ["--tls-ocsp", os.path.join(d, "server.ocsp")], name="tlproxy-cli")
    out = s_client_status(lc, d, "localhost")
    check(stapled(out), f"no staple from --tls-ocsp: {out[-2500:]}")
    check(env.stop(px2) == 0, "the second tlproxy did not exit 0")
    # Staples that stop the start: one line each, exit 1 (2: the command line).
    for what, argv, code, want in (
            ("--tls-ocsp MISSING", ["--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2", "--max-conns", "100"]
             + tls + ["--tls-ocsp", missing], 1,
             "tlproxy: listener default: tls: " + re.escape(missing) + r": No such file or directory"),
            ("ocsp: MISSING", ["--config", cfg(missing, name="missing.yaml")], 1,
             "tlproxy: listener tls: tls: " + re.escape(missing) + r": No such file or directory"),
            ("another certificate's staple",
             ["--config", cfg(os.path.join(d, "server.ocsp"), first="other", name="mismatch.yaml")], 1,
             "tlproxy: listener tls: tls: " + re.escape(os.path.join(d, "server.ocsp"))
             + ": the OCSP response is not for this certificate"),
            ("--tls-ocsp alone", ["--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2", "--tls-ocsp",
                                  os.path.join(d, "server.ocsp")], 2,
             r"tlproxy: --tls-ocsp is for --tls-cert .*")):
        r = subprocess.run([env.tlproxy] + argv, capture_output=True, text=True, timeout=30)
        check(r.returncode == code and re.fullmatch(want + "\n", r.stderr),
              f"{what}: exit {r.returncode} (want {code}), {r.stderr!r}")


def refused_port(port):
    """True when nothing listens on port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except OSError:
        return True


def t_tls_slow(env):
    """A client that sends its hello a byte at a time is ended by
    handshake_timeout, however long it keeps sending."""
    d = certs(env)
    pa, pb, lp = env.port(), env.port(), env.port()
    env.serve("ident=A", "127.0.0.1", pa)
    env.serve("ident=B", "127.0.0.1", pb)
    log = env.path("access.log")
    px = env.proxy(["--config", sni_cfg(env, d, lp, pa, pb, log, "      handshake_timeout: 600ms")])
    fd0 = env.fds(px)
    hello = T.tls_hello("localhost")
    s = connect(lp)
    t0 = time.time()
    closed = False
    for b in hello:
        try:
            s.send(bytes([b]))
        except OSError:
            closed = True
            break
        r, _, _ = select.select([s], [], [], 0.05)
        if r:
            try:
                closed = s.recv(100) == b""
            except OSError:
                closed = True
            if closed:
                break
        check(time.time() - t0 < 5, "the slow client was not ended")
    if not closed:
        closed = T.is_closed(s, 5)
    took = time.time() - t0
    s.close()
    check(closed, "the slow client was not closed")
    check(0.5 < took < 2.5, f"a handshake_timeout of 600 ms ended it after {took:.2f} s")
    env.wait_stat(px, "tls_handshakes", "timeout", 1)
    text = log_lines(log, 1)
    check(" tls=failed reason=timeout " in text, f"log: {text!r}")
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_tls_bulk(env):
    """16 MiB each way (8 under the sanitizers) through a terminating
    tlproxy, client first then server, both checked by SHA-256, with a
    close_notify each way at the end."""
    d = certs(env)
    up, lp = env.port(), env.port()
    srv = env.serve("duplex", "127.0.0.1", up)
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "1",
                    "--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server.key")])
    fd0 = env.fds(px)
    size = (8 if os.environ.get("TLP_E2E_SANITIZED") else 16) << 20
    for name, cwait, swait in (("tls-seq", 0, size), ("tls-duplex", 0, 0)):
        mine, theirs = T.duplex_data(size, 1, name), T.duplex_data(size, 2, name)
        s = socket.create_connection(("127.0.0.1", lp), timeout=60)
        head = f"{name} {size} {swait} 0\n".encode()
        t0 = time.time()
        n, h = tls_pipe(s, client_ctx(d), "localhost", head + mine, cwait)
        s.close()
        check(n == size, f"{name}: the client got {n} bytes of {size}")
        check(h == hashlib.sha256(theirs).hexdigest(), f"{name}: the client got other bytes")
        env.wait_for(srv, rf"^got {name} ", timeout=30)
        m = re.search(rf"^got {name} (\d+) (\w+)$", srv.text(), re.M)
        check(m and int(m.group(1)) == size, f"{name}: the server got {m.group(1) if m else '?'} bytes")
        check(m.group(2) == hashlib.sha256(mine).hexdigest(), f"{name}: the server got other bytes")
        print(f"{name}: {size} bytes each way in {time.time() - t0:.2f} s", flush=True)
    env.wait_stat(px, "conns_open", "0", 0)
    st = env.stats(px)
    check(st["errors"].get("client_reset", 0) == 0, f"errors {st['errors']}")
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def echo_more(t, msg, chunk=64 << 10):
    """msg echoed on a connection whose server line was read already, a
    chunk at a time (so neither side's buffers fill)."""
    for i in range(0, len(msg), chunk):
        part = msg[i:i + chunk]
        t.sendall(part)
        got = b""
        while len(got) < len(part):
            d = t.recv(65536)
            check(d, f"echo cut after {i + len(got)} of {len(msg)} bytes")
            got += d
        check(got == part, "the echo differs")


def t_tls_takeover(env):
    """Takeovers of a process with TLS listeners, under load (wrk over HTTPS,
    a new TLS client every 5 ms, none failing, and TLP_E2E_BYTES (256 MiB;
    32 under the sanitizers) each way through TLS by SHA-256, the client's
    under way during both switches; 2 shards, then 1, then 2 again): TLS connections open at
    the time (TLS 1.3 and TLS 1.2, each with 128 KiB of echo under way, then 1 MiB more,
    and a half-closed one whose server had finished, our close_notify sent, and one
    whose handshake began after the switch had: awaited, then handed over) move
    to the new process with their sessions' record state and carry on
    there: they echo after it, the old process exits at once (nothing is
    left to drain), a second takeover moves them again (out of sessions
    that were themselves imported), KeyUpdates from openssl s_client that
    ask for ours work before the moves and after them, and each client's close_notify ends
    its connection cleanly; new clients handshake with the newest process,
    and a session ticket issued before the takeovers resumes after them
    (tls.ticket_key: the same key file for every process; one of 63 bytes
    is refused with one line)."""
    d = certs(env)
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    sock = env.path("ho.sock")
    wrk = T.need("wrk")
    T.need("nginx")
    web_up, wp, bulk_up, bp = env.port(), env.port(), env.port(), env.port()
    T.start_nginx(env, web_up)
    dsrv = env.serve("duplex", "127.0.0.1", bulk_up)
    tkey = env.path("ticket.key")
    with open(tkey, "wb") as f:
        f.write(os.urandom(63))
    tls = f"""    tls:
      certificates: [{{cert: "{d}/server.pem", key: "{d}/server.key"}}]
      ticket_key: "{tkey}"
"""
    cfgs = {}
    for n in (2, 1):
        cfgs[n] = T.write_cfg(env, f"tls-takeover{n}.yaml", f"""shards: {n}
listeners:
  - name: echo
    listen: "127.0.0.1:{lp}"
    pool: up
{tls}  - name: web
    listen: "127.0.0.1:{wp}"
    pool: web
{tls}  - name: bulk
    listen: "127.0.0.1:{bp}"
    pool: bulk
{tls}pools:
  - {{name: up, servers: [{{address: "127.0.0.1:{up}"}}]}}
  - {{name: web, servers: [{{address: "127.0.0.1:{web_up}"}}]}}
  - {{name: bulk, servers: [{{address: "127.0.0.1:{bulk_up}"}}]}}
""")
    cfg = cfgs[2]
    # a ticket key file of the wrong size: one line, exit 1
    r = subprocess.run([env.tlproxy, "--config", cfg], capture_output=True, text=True, timeout=30)
    check(r.returncode == 1 and "ticket_key" in r.stderr and "not 64 bytes" in r.stderr,
          f"a 63-byte ticket key: exit {r.returncode}: {r.stderr.strip()}")
    with open(tkey, "wb") as f:
        f.write(os.urandom(64))
    args = ["--config", cfg]
    old = env.proxy(args + ["--handover-socket", sock], name="tlproxy-old")
    ctx13 = client_ctx(d)
    ctx12 = client_ctx(d)
    ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
    held = [tls_connect(lp, ctx13), tls_connect(lp, ctx12)]
    check([h.version() for h in held] == ["TLSv1.3", "TLSv1.2"], f"versions {[h.version() for h in held]}")
    for h in held:
        check(tls_echo(h, b"before") == "S", "no echo before the takeover")
    # a ticket issued before the takeovers, to resume after them
    early = tls_connect(lp, ctx13)
    check(tls_echo(early, b"ticket") == "S", "no echo for the ticket's connection")
    ticket = early.session
    check(ticket is not None and ticket.has_ticket, "no session ticket before the takeovers")
    early.unwrap()
    early.close()
    # s_client, interactive (its K command sends a KeyUpdate asking for ours)
    sc = env.start("s_client", ["openssl", "s_client", "-connect", f"127.0.0.1:{lp}", "-tls1_3",
                                "-CAfile", os.path.join(d, "ca.pem"), "-servername", "localhost"],
                   stdin=subprocess.PIPE)
    env.wait_for(sc, r"^S$", 10)
    # a KeyUpdate asking for ours before the switches (the session then
    # moves at its second generation of keys)
    sc.p.stdin.write(b"K\n")  # alone in its read: s_client drops what follows a command
    sc.p.stdin.flush()
    env.wait_for(sc, r"^KEYUPDATE$", 10)
    time.sleep(0.2)
    sc.p.stdin.write(b"before\n")
    sc.p.stdin.flush()
    env.wait_for(sc, r"^before$", 10)
    big = os.urandom(1 << 20)
    # Load through both switches: wrk over HTTPS, and a new TLS client
    # every 5 ms (a full handshake each); none may fail.
    probe = {"ok": 0, "bad": []}
    stop = threading.Event()

    def prober():
        i = 0
        while not stop.is_set():
            try:
                c = tls_connect(lp, ctx13, timeout=20)
                if tls_echo(c, b"probe %d" % i) != "S":
                    probe["bad"].append(f"probe {i}: not served")
                else:
                    probe["ok"] += 1
                c.close()
            except (OSError, T.Fail) as e:
                probe["bad"].append(f"probe {i}: {e}")
            i += 1
            time.sleep(0.005)

    pt = threading.Thread(target=prober, daemon=True)
    pt.start()
    # A long transfer each way through TLS, by hash, paced over the switches
    # (its last quarter waits for the second one to be over).
    size = (32 << 20) if os.environ.get("TLP_E2E_SANITIZED") else T.bulk_size()
    mine, theirs = T.duplex_data(size, 1, "tls-moving"), T.duplex_data(size, 2, "tls-moving")
    switched = threading.Event()

    def paced(head, data, closed=None):
        """A thread sending head + data through TLS to the duplex server,
        paced over the switches; its result ("r" or "err") in a dict."""
        res = {}

        def run():
            try:
                bs = socket.create_connection(("127.0.0.1", bp), timeout=60)
                res["r"] = tls_pipe(bs, ctx13, "localhost", head.encode() + data, 0, pace=6,
                                    gate=(0.75, switched), deadline_s=600, closed=closed)
                bs.close()
            except Exception as e:  # noqa: BLE001
                res["err"] = e

        th = threading.Thread(target=run, daemon=True)
        th.start()
        return th, res

    bt, bulk_res = paced(f"tls-moving {size} 0 0\n", mine)
    # A half-closed one: the server sends 1 MiB and its FIN at once (our
    # close_notify to the client), the client sends 8 MiB paced over both
    # switches: it moves with its session's write side closed, twice.
    hsize = 8 << 20
    hmine, htheirs = T.duplex_data(hsize, 1, "tls-half"), T.duplex_data(1 << 20, 2, "tls-half")
    half_closed = threading.Event()
    ht, half_res = paced(f"tls-half {1 << 20} 0 0\n", hmine, closed=half_closed)
    check(half_closed.wait(30), f"the half-closed connection's server did not finish: {half_res}")
    # wrk runs until both switches are over (then SIGINT ends it with its report)
    w = subprocess.Popen([wrk, "-t1", "-c8", "-d300s", "--timeout", "5s", f"https://127.0.0.1:{wp}/index.html"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    env.procs.append(T.Proc("wrk", w, env.path("wrk.none")))  # killed at the end, should a check fail first
    time.sleep(1)
    procs = [old]
    for k in range(2):
        # bytes in flight both ways while the connections move
        for h in held:
            h.sendall(big[: 128 << 10])
        if k == 0:
            # a client that connects before the switch and sends its
            # ClientHello only once the handing over has begun: awaited,
            # then handed over with the rest
            slow = socket.create_connection(("127.0.0.1", lp), timeout=20)
            time.sleep(0.2)
        # 2 shards, then 1, then 2 again
        new = env.proxy(["--config", cfgs[1 if k == 0 else 2], "--takeover", sock, "--handover-socket", sock],
                        name=f"tlproxy-new{k}")
        if k == 0:
            time.sleep(0.5)
            slow = ctx13.wrap_socket(slow, server_hostname="localhost")
            check(tls_echo(slow, b"late") == "S", "no echo for the client that handshook during the switch")
        env.wait_for(new, r"takeover done: \d+ connections carried on, 0 cut", 30)
        moved = int(re.search(r"takeover done: (\d+) connections carried on", new.text()).group(1))
        check(moved >= 3 + 8 + 2 + 1, f"takeover {k}: {moved} connections carried on, want the 3 held, "
                                       f"wrk's 8, the long transfer, the half-closed one and the late "
                                       f"handshake at least")
        prev = procs[-1]
        try:
            rc = prev.p.wait(30)
        except subprocess.TimeoutExpired:
            raise Fail(f"takeover {k}: the old process kept running: TLS connections were left to drain in it")
        check(rc == 0, f"takeover {k}: the old process exited {rc}")
        fig = re.search(r"takeover by pid \d+: (\d+ connections? handed over .*)", prev.text())
        print(f"switch {k}: {fig.group(1) if fig else '?'}; new: {moved} carried on", flush=True)
        procs.append(new)
        for h in held:
            got = b""
            while len(got) < (128 << 10):
                dd = h.recv(65536)
                check(dd, f"takeover {k}: the echo in flight was cut after {len(got)} bytes")
                got += dd
            check(got == big[: 128 << 10], f"takeover {k}: the echo in flight differs")
            echo_more(h, big)
        # the late handshake's connection outlived the old process
        slow.sendall(b"after%d" % k)
        check(slow.recv(100) == b"after%d" % k, f"takeover {k}: no echo for the late handshake's client")
        sc.p.stdin.write(f"moved{k}\n".encode())
        sc.p.stdin.flush()
        env.wait_for(sc, rf"^moved{k}$", 10)
    switched.set()
    bt.join(600)
    check("err" not in bulk_res, f"the long TLS transfer failed: {bulk_res.get('err')}")
    n, h = bulk_res["r"]
    check(n == size, f"the long TLS transfer got {n} bytes of {size}")
    check(h == hashlib.sha256(theirs).hexdigest(), "the long TLS transfer got other bytes")
    ht.join(600)
    check("err" not in half_res, f"the half-closed TLS transfer failed: {half_res.get('err')}")
    n, h = half_res["r"]
    check(n == 1 << 20 and h == hashlib.sha256(htheirs).hexdigest(),
          f"the half-closed connection's client got {n} bytes, or other bytes")
    env.wait_for(dsrv, r"^got tls-half ", timeout=60)
    m = re.search(r"^got tls-half (\d+) (\w+)$", dsrv.text(), re.M)
    check(m and int(m.group(1)) == hsize and m.group(2) == hashlib.sha256(hmine).hexdigest(),
          f"the server got other bytes of the half-closed connection: {m.group(0) if m else '?'}, sent {hsize}")
    env.wait_for(dsrv, r"^got tls-moving ", timeout=60)
    m = re.search(r"^got tls-moving (\d+) (\w+)$", dsrv.text(), re.M)
    check(m and int(m.group(1)) == size and m.group(2) == hashlib.sha256(mine).hexdigest(),
          f"the server got other bytes of the long TLS transfer: {m.group(0) if m else dsrv.text()[-300:]}, "
          f"sent {size}")
    w.send_signal(signal.SIGINT)
    out, werr = w.communicate(timeout=60)
    stop.set()
    pt.join(60)
    check(w.returncode == 0, f"wrk failed: {werr}")
    m = re.search(r"(\d+) requests in", out)
    check(m and int(m.group(1)) > 100, f"wrk made too few requests: {out}")
    check("Socket errors" not in out and "Non-2xx" not in out, f"wrk saw errors across the takeovers: {out}")
    check(not probe["bad"], f"{len(probe['bad'])} new TLS clients failed across the switches: {probe['bad'][:5]}")
    check(probe["ok"] > 20, f"only {probe['ok']} probes went through")
    print(f"tls_takeover: {probe['ok']} TLS probes, {m.group(1)} HTTPS requests and {size} bytes each way "
          f"across two switches", flush=True)
    # a KeyUpdate asking for ours, after the moves
    mark = len(sc.text())
    sc.p.stdin.write(b"K\n")
    sc.p.stdin.flush()
    t_end = time.time() + 10
    while "KEYUPDATE" not in sc.text()[mark:]:
        check(time.time() < t_end, "s_client did not send its second KeyUpdate")
        time.sleep(0.02)
    time.sleep(0.2)
    sc.p.stdin.write(b"updated\n")
    sc.p.stdin.flush()
    env.wait_for(sc, r"^updated$", 10)
    new = procs[-1]
    t = tls_connect(lp, ctx13)
    check(tls_echo(t, b"new") == "S", "a new client was not served after the takeovers")
    t.unwrap()
    t.close()
    # the ticket from before resumes with the newest process (the same ticket_key file)
    raw = socket.create_connection(("127.0.0.1", lp), timeout=10)
    t = ctx13.wrap_socket(raw, server_hostname="localhost", session=ticket)
    check(tls_echo(t, b"resumed") == "S", "the resumed client was not served")
    check(t.session_reused, "a ticket issued before the takeovers did not resume after them")
    t.unwrap()
    t.close()
    env.wait_stat(new, "tls_resumed", "0", 1, op=">=")
    for h in held + [slow]:
        h.unwrap()  # close_notify, and the proxy's back: a clean end
        h.close()
    sc.p.stdin.write(b"Q\n")
    sc.p.stdin.flush()
    env.wait_stat(new, "conns_open", "0", 0)
    check(env.stop(new) == 0, "the new process did not exit 0")


def start_s_server(env, d, cert, port):
    pr = env.start("s_server-" + cert, ["openssl", "s_server", "-accept", f"127.0.0.1:{port}",
                                       "-cert", os.path.join(d, cert + ".pem"), "-key", os.path.join(d, cert + ".key"),
                                       "-www", "-quiet"], stdin=subprocess.PIPE)
    deadline = time.time() + 10
    while True:
        try:
            connect(port).close()
            return pr
        except OSError:
            check(time.time() < deadline, "s_server did not start")
            time.sleep(0.05)


def t_tls_origin(env):
    """A pool's tls: towards openssl s_server -www: a server whose
    certificate verifies is reached, and the connections after the first
    resume its session; self-signed and wrong-name ones are
    refused with the reason counted and logged, and so is an expired one;
    then a plain client, an
    originating tlproxy, a terminating one and a plain server in a row
    carry 16 MiB each way (8 under the sanitizers), checked by SHA-256."""
    d = certs(env)
    good, selfp, wrong, lp = env.port(), env.port(), env.port(), env.port()
    start_s_server(env, d, "server", good)
    start_s_server(env, d, "self", selfp)
    start_s_server(env, d, "wrong", wrong)
    expp = env.port()
    start_s_server(env, d, "expired", expp)
    log = env.path("access.log")
    ca = os.path.join(d, "ca.pem")
    cfg = T.write_cfg(env, "origin.yaml", f"""
access_log: {log}
listeners:
  - {{name: good, listen: "127.0.0.1:{lp}", pool: good}}
  - {{name: self, listen: "127.0.0.1:{env.port()}", pool: self}}
pools:
  - {{name: good, servers: [{{address: "127.0.0.1:{good}"}}], tls: {{ca: "{ca}"}}}}
  - {{name: self, servers: [{{address: "127.0.0.1:{selfp}"}}], tls: {{ca: "{ca}", server_name: localhost}}}}
  - {{name: wrong, servers: [{{address: "127.0.0.1:{wrong}"}}], tls: {{ca: "{ca}", server_name: localhost}}}}
  - {{name: expired, servers: [{{address: "127.0.0.1:{expp}"}}], tls: {{ca: "{ca}", server_name: localhost}}}}
""")
    text = open(cfg).read()
    lself = int(re.search(r'name: self, listen: "127\.0\.0\.1:(\d+)"', text).group(1))
    lwrong = env.port()
    lexp = env.port()
    text = text.replace("pools:\n", f'  - {{name: wrong, listen: "127.0.0.1:{lwrong}", pool: wrong}}\n'
                        f'  - {{name: expired, listen: "127.0.0.1:{lexp}", pool: expired}}\npools:\n', 1)
    open(cfg, "w").write(text)
    px = env.proxy(["--config", cfg])
    fd0 = env.fds(px)

    def get(port):
        """The answer to a request, b"" when the proxy closed or reset."""
        s = connect(port)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        try:
            return T.recv_all(s)
        except ConnectionResetError:
            return b""
        finally:
            s.close()

    page = get(lp)
    check(page.startswith(b"HTTP/1.0 200") and b"s_server" in page, f"no page through the pool: {page[:200]!r}")
    # The next connections to that server resume a session instead of a
    # full handshake: each shard keeps the resume data of its first one
    # once it ended, so of 6 connections on the 2 shards at most 2 are
    # full handshakes.
    env.wait_stat(px, "conns_open", "0", 0)
    for i in range(5):
        check(get(lp).startswith(b"HTTP/1.0 200"), f"no page through the pool, connection {i + 2}")
        env.wait_stat(px, "conns_open", "0", 0)
    env.wait_stat(px, "tls_server_handshakes", "ok", 6)
    env.wait_stat(px, "tls_server_resumed", "0", 4, op=">=")
    check(get(lself) == b"", "a self-signed server was not refused")
    check(get(lwrong) == b"", "a server whose certificate names another host was not refused")
    check(get(lexp) == b"", "a server whose certificate expired was not refused")
    env.wait_stat(px, "tls_server_handshakes", "cert-untrusted", 1)
    env.wait_stat(px, "tls_server_handshakes", "cert-name", 1)
    env.wait_stat(px, "tls_server_handshakes", "cert-expired", 1)
    env.wait_for(px, r"pool expired: server 127\.0\.0\.1:\d+: TLS handshake failed: cert-expired")
    env.wait_for(px, r"pool self: server 127\.0\.0\.1:\d+: TLS handshake failed: cert-untrusted")
    env.wait_for(px, r"pool wrong: server 127\.0\.0\.1:\d+: TLS handshake failed: cert-name")
    text = log_lines(log, 9)
    check(re.search(r" good .* end=done retries=0 up_tls=1\.[23]\n", text), f"log: {text!r}")
    check(len(re.findall(r" good .* end=done retries=0 up_tls=1\.[23] up_resumed=1\n", text)) >= 4,
          f"log: {text!r}")
    check(re.search(r" self .* end=server_tls_handshake retries=0 up_tls=failed up_reason=cert-untrusted\n", text),
          f"log: {text!r}")
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")

    # plain client -> originating tlproxy -> terminating tlproxy -> plain server
    up, lt, lo = env.port(), env.port(), env.port()
    srv = env.serve("duplex", "127.0.0.1", up)
    term = env.proxy(["--listen", f"127.0.0.1:{lt}", "--upstream", f"127.0.0.1:{up}", "--shards", "1",
                      "--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server.key")],
                     name="tlproxy-term")
    ocfg = T.write_cfg(env, "orig.yaml", f"""
shards: 1
listeners:
  - {{name: in, listen: "127.0.0.1:{lo}", pool: tls}}
pools:
  - {{name: tls, servers: [{{address: "127.0.0.1:{lt}"}}], tls: {{ca: "{ca}", server_name: localhost}}}}
""")
    orig = env.proxy(["--config", ocfg], name="tlproxy-orig")
    size = (8 if os.environ.get("TLP_E2E_SANITIZED") else 16) << 20
    name = "chain"
    mine, theirs = T.duplex_data(size, 1, name), T.duplex_data(size, 2, name)
    s = connect(lo, timeout=60)
    s.sendall(f"{name} {size} 0 0\n".encode())
    t0 = time.time()
    n, h = T.duplex_io(s, mine, 0, 0)
    s.close()
    check(n == size, f"the client got {n} bytes of {size}")
    check(h == hashlib.sha256(theirs).hexdigest(), "the client got other bytes")
    env.wait_for(srv, rf"^got {name} ", timeout=30)
    m = re.search(rf"^got {name} (\d+) (\w+)$", srv.text(), re.M)
    check(m and int(m.group(1)) == size and m.group(2) == hashlib.sha256(mine).hexdigest(),
          "the server got other bytes")
    print(f"{name}: {size} bytes each way through two tlproxies in {time.time() - t0:.2f} s", flush=True)
    env.wait_stat(orig, "tls_server_handshakes", "ok", 1)
    env.wait_stat(term, "tls_handshakes", "ok", 1)
    env.wait_stat(orig, "conns_open", "0", 0)
    env.wait_stat(term, "conns_open", "0", 0)
    check(env.stop(orig) == 0 and env.stop(term) == 0, "a tlproxy did not exit 0")


CASES = {name[2:]: fn for name, fn in globals().items() if name.startswith("t_")}


def main():
    return T.run_case(CASES, __doc__)


if __name__ == "__main__":
    sys.exit(main())
