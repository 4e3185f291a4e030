#!/usr/bin/env python3
# tests/test_tlproxy_udp.py: tlproxy's UDP listeners end to end with real peers: dig and dnsperf through it to an NSD on loopback, a one-way stream to socat, a server down and back, the session limit under many source ports, datagram sizes, IPv6.
"""Usage: test_tlproxy_udp.py TLPROXY TLSHARD TLECHO CASE

Each case starts what it needs in a temporary folder, checks, and stops
every process it started by its pid. TL_DRIVER picks tlproxy's driver.
Exit 0 pass, 1 fail (also when a program it needs is missing).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def free_port(family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def free_port_both():
    """A port free for UDP and TCP on 127.0.0.1 (NSD binds both)."""
    for _ in range(100):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        p = u.getsockname()[1]
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            t.bind(("127.0.0.1", p))
            return p
        except OSError:
            pass
        finally:
            t.close()
            u.close()
    raise Fail("no port free for both UDP and TCP")


ZONE = """$ORIGIN test.example.
$TTL 300
@    IN SOA ns.test.example. admin.test.example. 1 3600 600 86400 300
@    IN NS  ns.test.example.
ns   IN A   127.0.0.1
www  IN A   192.0.2.10
mail IN A   192.0.2.25
"""


class Env:
    def __init__(self, tlproxy, tlshard, tlecho):
        self.tlproxy, self.tlshard, self.tlecho = tlproxy, tlshard, tlecho
        self.dir = tempfile.mkdtemp(prefix="tlp-udp.")
        self.procs = []
        self.nsd_port = None
        self.nsd = None

    def spawn(self, args, name):
        err = open(os.path.join(self.dir, name + ".err"), "w")
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
        p.errname = err.name
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- NSD ----
    def nsd_start(self):
        if self.nsd_port is None:
            self.nsd_port = free_port_both()
            d = self.dir
            with open(os.path.join(d, "test.example.zone"), "w") as f:
                f.write(ZONE)
            with open(os.path.join(d, "nsd.conf"), "w") as f:
                f.write(f"""server:
  ip-address: 127.0.0.1
  port: {self.nsd_port}
  username: ""
  chroot: ""
  zonesdir: "{d}"
  database: ""
  pidfile: "{d}/nsd.pid"
  xfrdfile: "{d}/xfrd.state"
  zonelistfile: "{d}/zone.list"
  xfrdir: "{d}"
  server-count: 1
  verbosity: 1
  do-ip6: no
  rrl-ratelimit: 0
remote-control:
  control-enable: no
zone:
  name: test.example
  zonefile: "{d}/test.example.zone"
""")
        self.nsd = self.spawn(["nsd", "-d", "-c", os.path.join(self.dir, "nsd.conf")], "nsd")
        t = time.time() + 10
        while time.time() < t:
            if query("127.0.0.1", self.nsd_port, "www.test.example", timeout=0.2) is not None:
                return
            check(self.nsd.poll() is None, "nsd exited: " + open(self.nsd.errname).read()[-300:])
        raise Fail("nsd does not answer")

    def nsd_stop(self):
        self.nsd.send_signal(signal.SIGTERM)
        self.nsd.wait(10)

    # ---- tlproxy ----
    def proxy(self, args, ports=(), name="tlproxy"):
        p = self.spawn([self.tlproxy] + args, name)
        t = time.time() + 10
        while time.time() < t:
            if "running:" in open(p.errname).read():
                return p
            check(p.poll() is None, "tlproxy exited: " + open(p.errname).read()[-400:])
            time.sleep(0.02)
        raise Fail("tlproxy did not start")

    def config(self, text):
        path = os.path.join(self.dir, "tlproxy.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def stop(self, p, want=0):
        p.send_signal(signal.SIGTERM)
        rc = p.wait(15)
        check(rc == want, f"tlproxy exit {rc}, want {want}: " + open(p.errname).read()[-400:])

    def stats(self, p):
        r = subprocess.run([self.tlshard, "stats", str(p.pid), "--json"], capture_output=True,
                           text=True)
        check(r.returncode == 0, "tlshard stats: " + r.stderr)
        out = {}
        for f in json.loads(r.stdout)["program"]:
            out[f["name"]] = {(row["label"] or str(row["row"])): row["total"] for row in f["rows"]}
        return out

    def wait_stat(self, p, fam, row, want, timeout=10):
        t = time.time() + timeout
        got = None
        while time.time() < t:
            got = self.stats(p).get(fam, {}).get(row, 0)
            if got == want:
                return
            time.sleep(0.05)
        raise Fail(f"stat {fam}[{row}] is {got}, want {want}")

    def echo_big(self):
        return self.echo(size=65536)

    def echo(self, family=socket.AF_INET, size=32768):
        port = free_port(family)
        args = [self.tlecho, "-p", str(port), "--udp", "--buffer-size", str(size)]
        if family == socket.AF_INET6:
            args += ["--host", "::1"]
        p = self.spawn(args, "tlecho%d" % port)
        t = time.time() + 10
        while time.time() < t and "listening" not in open(p.errname).read():
            check(p.poll() is None, "tlecho exited: " + open(p.errname).read()[-300:])
            time.sleep(0.02)
        return port


def dns_query(name, qid, qtype=1):
    q = qid.to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for part in name.split("."):
        q += bytes([len(part)]) + part.encode()
    return q + b"\x00" + qtype.to_bytes(2, "big") + b"\x00\x01"


def query(host, port, name, timeout=1.0, family=socket.AF_INET):
    """One A query; (rcode, answers) or None without an answer. Checks
    the ID and the question name."""
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    qid = int.from_bytes(os.urandom(2), "big")
    q = dns_query(name, qid)
    try:
        s.sendto(q, (host, port))
        r = s.recv(4096)
    except (socket.timeout, ConnectionRefusedError):
        return None
    finally:
        s.close()
    check(int.from_bytes(r[:2], "big") == qid, "answer with the wrong ID")
    check(r[12:12 + len(q) - 12] == q[12:], "answer to another question")
    return r[3] & 0xf, int.from_bytes(r[6:8], "big")


def dig(port, name, extra=()):
    r = subprocess.run(["dig", "@127.0.0.1", "-p", str(port), name, "A", "+tries=1", "+time=2"]
                       + list(extra), capture_output=True, text=True, timeout=20)
    return r.stdout


def log_lines(env, path, n, timeout=10):
    t = time.time() + timeout
    lines = []
    while time.time() < t:
        if os.path.exists(path):
            lines = [l for l in open(path).read().splitlines() if l]
            if len(lines) >= n:
                return lines
        time.sleep(0.05)
    raise Fail(f"access log has {len(lines)} lines, want {n}")


# ---- cases ----

def t_cli_dig(env):
    """--udp on the command line; dig through it to NSD; SIGTERM drains."""
    env.nsd_start()
    port = free_port()
    p = env.proxy(["--udp", "--listen", f"127.0.0.1:{port}", "--upstream",
                   f"127.0.0.1:{env.nsd_port}", "--shards", "1"])
    out = dig(port, "www.test.example")
    check("status: NOERROR" in out and re.search(r"www\.test\.example\.\s+\d+\s+IN\s+A\s+192\.0\.2\.10", out),
          "dig: " + out)
    out = dig(port, "nope.test.example")
    check("status: NXDOMAIN" in out, "dig nxdomain: " + out)
    st = env.stats(p)
    check(st["udp"]["dgrams_in"] == 2 and st["udp"]["dgrams_out"] == 2, f"stats {st['udp']}")
    env.stop(p)


def dns_config(env, port, extra=""):
    return env.config(f"""access_log: {env.dir}/access.log
shards: 1
listeners:
  - name: dns
    proto: udp
    responses: 1
    listen: [127.0.0.1:{port}]
    pool: nsd
{extra}pools:
  - name: nsd
    servers:
      - address: 127.0.0.1:{env.nsd_port}
""")


def t_dnsperf(env):
    """dnsperf for 3 s: nothing lost, every answer NOERROR; responses: 1
    ends each session with its answer (end=done)."""
    env.nsd_start()
    port = free_port()
    p = env.proxy(["--config", dns_config(env, port)])
    qf = os.path.join(env.dir, "queries")
    with open(qf, "w") as f:
        f.write("www.test.example A\nmail.test.example A\nns.test.example A\n")
    r = subprocess.run(["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", qf, "-l", "3",
                        "-c", "4", "-q", "64", "-t", "2"], capture_output=True, text=True, timeout=60)
    out = r.stdout
    m = re.search(r"Queries completed:\s+(\d+)", out)
    lost = re.search(r"Queries lost:\s+(\d+)", out)
    codes = re.search(r"Response codes:\s+(.*)", out)
    check(m and lost and codes, "dnsperf output: " + out + r.stderr)
    done = int(m.group(1))
    check(done > 100, f"only {done} queries completed")
    check(int(lost.group(1)) == 0, "lost queries: " + out)
    check(re.fullmatch(rf"NOERROR {done} \(100\.00%\)", codes.group(1).strip()),
          "response codes: " + codes.group(1))
    env.wait_stat(p, "udp_sessions", "0", 0)
    st = env.stats(p)["udp"]
    check(st["dgrams_in"] == done and st["dgrams_out"] == done, f"stats {st}")
    check(st["drop_limit"] == 0 and st["drop_error"] == 0, f"stats {st}")
    env.stop(p)
    lines = log_lines(env, os.path.join(env.dir, "access.log"), 1)
    check(all(" udp " in l for l in lines), "log: " + lines[0])
    bad = [l for l in lines if "end=done" not in l]
    check(not bad, "log: " + "\n".join(bad[:3]))


def t_oneway(env):
    """responses: 0 (syslog-like): every datagram reaches socat; each
    session ends once its datagrams are sent."""
    sink = free_port()
    out = os.path.join(env.dir, "sink.out")
    s = env.spawn(["socat", "-u", f"UDP-RECV:{sink},bind=127.0.0.1", f"OPEN:{out},creat,append"],
                  "socat")
    time.sleep(0.3)
    port = free_port()
    p = env.proxy(["--udp", "--responses", "0", "--listen", f"127.0.0.1:{port}", "--upstream",
                   f"127.0.0.1:{sink}", "--shards", "1"])
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(200):
        c.sendto(b"<13>line %d\n" % i, ("127.0.0.1", port))
        if i % 50 == 49:
            time.sleep(0.05)
    c.close()
    t = time.time() + 10
    n = 0
    while time.time() < t:
        n = len(open(out).read().splitlines()) if os.path.exists(out) else 0
        if n >= 200:
            break
        time.sleep(0.05)
    check(n == 200, f"socat got {n} of 200 lines")
    env.wait_stat(p, "udp_sessions", "0", 0)
    st = env.stats(p)["udp"]
    check(st["dgrams_in"] == 200 and st["dgrams_out"] == 0, f"stats {st}")
    env.stop(p)
    s.kill()


def t_down_up(env):
    """The server goes down (ICMP unreachable ends the session,
    end=server_error) and comes back (the next query is answered)."""
    env.nsd_start()
    port = free_port()
    p = env.proxy(["--config", dns_config(env, port)])
    check(query("127.0.0.1", port, "www.test.example") == (0, 1), "first query")
    env.nsd_stop()
    check(query("127.0.0.1", port, "www.test.example", timeout=0.5) is None, "answer with NSD down")
    env.wait_stat(p, "udp_sessions", "0", 0)
    check(env.stats(p)["errors"].get("server_error", 0) >= 1, "no server_error counted")
    env.nsd_start()
    check(query("127.0.0.1", port, "www.test.example") == (0, 1), "query after NSD came back")
    env.stop(p)
    lines = log_lines(env, os.path.join(env.dir, "access.log"), 3)
    check(any("end=server_error" in l and "err=ECONNREFUSED" in l for l in lines),
          "log: " + "\n".join(lines))


def yaml_bytes(b):
    """b as a YAML double-quoted string, every byte escaped."""
    return '"' + "".join("\\x%02x" % c for c in b) + '"'


def wait_log(p, pattern, timeout=10):
    t = time.time() + timeout
    while time.time() < t:
        if re.search(pattern, open(p.errname).read(), re.M):
            return
        check(p.poll() is None, "tlproxy exited: " + open(p.errname).read()[-400:])
        time.sleep(0.05)
    raise Fail(f"tlproxy never logged /{pattern}/: " + open(p.errname).read()[-600:])


def t_udp_health(env):
    """health: {proto: udp}: a DNS query as the probe, its answer's ID as
    expect. A server whose port is closed (ICMP unreachable) is down after
    one round and gets no session; a server that takes UDP only (tlecho
    --udp: a TCP check would call it down) stays up; NSD stopped goes down,
    restarted comes back up; a probe whose answer does not begin with
    expect fails; a UDP probe without send is refused with one line."""
    env.nsd_start()
    port, dead, eport = free_port(), free_port(), free_port()
    probe = yaml_bytes(dns_query("www.test.example", 0x4242))
    echo = env.echo()  # UDP only: a TCP connect to it is refused

    def cfg(expect):
        return env.config(f"""shards: 1
listeners:
  - name: dns
    proto: udp
    responses: 1
    listen: [127.0.0.1:{port}]
    pool: two
  - name: echo
    proto: udp
    responses: 1
    listen: [127.0.0.1:{eport}]
    pool: echo
pools:
  - name: two
    health: {{proto: udp, interval: 200ms, timeout: 150ms, rise: 1, fall: 1,
              send: {probe}, expect: {expect}}}
    servers:
      - address: 127.0.0.1:{env.nsd_port}
      - address: 127.0.0.1:{dead}
  - name: echo
    health: {{proto: udp, interval: 200ms, timeout: 150ms, rise: 1, fall: 1, send: "ping", expect: "pi"}}
    servers:
      - address: 127.0.0.1:{echo}
""")
    r = subprocess.run([env.tlproxy, "--config", env.config(f"""listeners:
  - {{name: d, proto: udp, listen: "127.0.0.1:{port}", pool: p}}
pools:
  - {{name: p, health: {{proto: udp}}, servers: [{{address: "127.0.0.1:{dead}"}}]}}
""")], capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "a UDP probe needs send" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          f"a UDP probe without send: exit {r.returncode}: {r.stderr.strip()}")
    p = env.proxy(["--config", cfg(yaml_bytes(b"\x42\x42"))])
    wait_log(p, rf"server \S*:{dead}\S* is down \(health check: [^;]*refused")
    time.sleep(0.5)  # a few more rounds: NSD and the UDP-only echo stay up
    for up in (env.nsd_port, echo):
        check(not re.search(rf"server \S*:{up}\S* is down", open(p.errname).read()),
              f"the server on port {up} went down: " + open(p.errname).read()[-400:])
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(2)
    c.sendto(b"hello", ("127.0.0.1", eport))
    check(c.recv(100) == b"hello", "no echo through the UDP-only server's pool")
    c.close()
    for i in range(20):
        check(query("127.0.0.1", port, "www.test.example") == (0, 1), f"query {i} through the healthy server")
    check(env.stats(p)["errors"].get("server_error", 0) == 0, "a session went to the dead server")
    env.nsd_stop()
    wait_log(p, rf"server \S*:{env.nsd_port}\S* is down")
    env.nsd_start()
    wait_log(p, rf"server \S*:{env.nsd_port}\S* is up")
    check(query("127.0.0.1", port, "www.test.example") == (0, 1), "query after NSD came back")
    env.stop(p)
    # an answer that does not begin with expect: down
    p = env.proxy(["--config", cfg(yaml_bytes(b"\x42\x43"))])
    wait_log(p, rf"server \S*:{env.nsd_port}\S* is down \(health check: unexpected reply")
    env.stop(p)


def t_limit(env):
    """40 source ports against sessions: 4: 4 are answered, 36 dropped and
    counted; when they go idle, new clients get in."""
    echo = env.echo()
    port = free_port()
    p = env.proxy(["--udp", "--sessions", "4", "--idle-timeout", "2s", "--listen",
                   f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{echo}", "--shards", "1"])
    socks = []
    for i in range(40):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(0.02)
        s.sendto(b"hi %d" % i, ("127.0.0.1", port))
        socks.append(s)
    env.wait_stat(p, "udp", "drop_limit", 36)
    st = env.stats(p)
    check(st["udp"]["sessions"] == 4 and st["udp_sessions"]["0"] == 4, f"stats {st}")
    got = 0
    for i, s in enumerate(socks):
        try:
            check(s.recv(100) == b"hi %d" % i, "a reply to the wrong client")
            got += 1
        except socket.timeout:
            pass
    check(got == 4, f"{got} clients answered, limit 4")
    env.wait_stat(p, "udp_sessions", "0", 0, timeout=5)
    for i, s in enumerate(socks[4:8]):
        s.settimeout(2)
        s.sendto(b"again", ("127.0.0.1", port))
        check(s.recv(100) == b"again", "no answer after the idle ones ended")
    for s in socks:
        s.close()
    env.stop(p)


def t_sizes(env, family=socket.AF_INET):
    """Datagrams of 0 to 16384 bytes both ways, whole; one longer than a
    pooled buffer is dropped and counted, never sent cut."""
    lo = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    echo = env.echo(family)
    port = free_port(family)
    b = f"[{lo}]" if family == socket.AF_INET6 else lo
    p = env.proxy(["--udp", "--listen", f"{b}:{port}", "--upstream", f"{b}:{echo}", "--shards", "1"])
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(2)
    for n in (1, 100, 1472, 9000, 16384):
        data = os.urandom(n)
        s.sendto(data, (lo, port))
        check(s.recv(70000) == data, f"{n} bytes did not come back whole")
    s.sendto(os.urandom(20000), (lo, port))
    env.wait_stat(p, "udp", "drop_trunc", 1)
    s.close()
    env.stop(p)


def t_ipv6(env):
    t_sizes(env, socket.AF_INET6)


class UdpServer:
    """A UDP server on 127.0.0.1 and a thread of its own: each datagram
    goes to answer(data, addr), which subclasses define."""

    def __init__(self):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind(("127.0.0.1", 0))
        self.s.settimeout(0.1)
        self.port = self.s.getsockname()[1]
        self.run = True
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while self.run:
            try:
                d, a = self.s.recvfrom(70000)
            except socket.timeout:
                continue
            except OSError:
                return
            self.answer(d, a)

    def stop(self):
        self.run = False
        self.t.join(5)
        self.s.close()


class SizedReplies(UdpServer):
    """A UDP server whose reply to a request b"N" is N bytes (a reply
    longer than the request, which no echo gives)."""

    def answer(self, q, a):
        n = int(q)
        self.s.sendto(bytes((i * 7 + n) & 0xff for i in range(n)), a)


def t_large(env):
    """max_datagram up to 65,507: datagrams of every size class to it pass
    whole both ways, from many sessions at once; a longer one is dropped
    and counted either way, never sent cut; bad values are refused."""
    for args, why in ((["--max-datagram", "65508"], "not a number from 1 to 65507"),
                      (["--max-datagram", "0"], "not a number from 1 to 65507"),
                      (["--max-datagram", "65507", "--sessions", "20000"], "over 1 GiB"),):
        r = subprocess.run([env.tlproxy, "--udp", "--listen", "127.0.0.1:1", "--upstream",
                            "127.0.0.1:2"] + args, capture_output=True, text=True)
        first = r.stderr.split("\n")[0]
        check(r.returncode != 0 and why in first and first.startswith("tlproxy: "),
              f"{args}: {r.returncode} {r.stderr!r}")
    r = subprocess.run([env.tlproxy, "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2",
                        "--max-datagram", "100"], capture_output=True, text=True)
    check(r.returncode != 0 and "are for --udp" in r.stderr, "--max-datagram without --udp: " + r.stderr)
    cfg = env.config("listeners:\n  - {name: t, listen: [\"127.0.0.1:1\"], pool: p, max_datagram: 100}\n"
                     "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:2\"}]}\n")
    r = subprocess.run([env.tlproxy, "--check", cfg], capture_output=True, text=True)
    check(r.returncode != 0 and "max_datagram is for proto: udp" in r.stderr, "--check: " + r.stderr)

    # Every size class both ways through an echo, 8 sessions at once.
    echo = env.echo_big()
    port = free_port()
    p = env.proxy(["--udp", "--listen", f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{echo}",
                   "--shards", "1", "--max-datagram", "65507"])
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(8)]
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        s.settimeout(3)
    for n in (1, 1472, 16384, 16385, 32768, 50000, 65507):
        # Two sessions' datagrams in flight at a time: more than a
        # socket's default receive buffer (208 KiB) of them would be
        # dropped by the kernel, before any proxy sees them.
        for k in range(0, len(socks), 2):
            pair = socks[k:k + 2]
            sent = [os.urandom(n) for _ in pair]
            for s, d in zip(pair, sent):
                s.sendto(d, ("127.0.0.1", port))
            for s, d in zip(pair, sent):
                got = s.recv(70000)
                check(got == d, f"{n} bytes came back as {len(got)} bytes, not whole")
    st = env.stats(p)["udp"]
    check(st.get("drop_trunc", 0) == 0 and st.get("sessions", 0) == 8, f"stats {st}")
    for s in socks:
        s.close()
    env.stop(p)

    # A smaller max_datagram: over it, a reply and a request are dropped.
    srv = SizedReplies()

    def limited(n):
        """tlproxy with max_datagram n: a reply of n bytes comes whole, a
        reply and a request of n + 1 are dropped and counted."""
        p = env.proxy(["--udp", "--listen", f"127.0.0.1:{port}", "--upstream",
                       f"127.0.0.1:{srv.port}", "--shards", "1", "--max-datagram", str(n)])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.sendto(b"%d" % n, ("127.0.0.1", port))
        check(len(s.recv(70000)) == n, f"a reply of max_datagram ({n}) bytes did not come whole")
        s.sendto(b"%d" % (n + 1), ("127.0.0.1", port))
        env.wait_stat(p, "udp", "drop_trunc", 1)
        s.sendto(b"7" * (n + 1), ("127.0.0.1", port))
        env.wait_stat(p, "udp", "drop_trunc", 2)
        return p, s

    try:
        p, s = limited(30000)
        s.sendto(b"20000", ("127.0.0.1", port))
        check(len(s.recv(70000)) == 20000, "after the drops, a reply did not come")
        st = env.stats(p)["udp"]
        check(st["dgrams_out"] == 2 and st["dgrams_in"] == 3, f"stats {st}")
        s.close()
        env.stop(p)
        # ... and under a pooled buffer's size too.
        p, s = limited(512)
        s.close()
        env.stop(p)
    finally:
        srv.stop()


def t_noalloc(env):
    """Sessions that start, carry datagrams both ways and end (by their
    reply, and by idleness) allocate nothing on the shards once warm: the
    allocator calls an LD_PRELOAD shim counts do not grow."""
    shim = os.environ.get("TLP_ALLOC_SHIM", "")
    check(os.path.exists(shim), "no allocation shim (TLP_ALLOC_SHIM)")
    echo = env.echo_big()
    l1, l2, l3 = free_port(), free_port(), free_port()
    adir = os.path.join(env.dir, "alloc")
    os.makedirs(adir)
    cfg = env.config(f"""shards: 2
listeners:
  - {{name: one, proto: udp, responses: 1, listen: ["127.0.0.1:{l1}"], pool: e}}
  - {{name: any, proto: udp, listen: ["127.0.0.1:{l2}"], pool: e, timeouts: {{idle: 200ms}}}}
  - {{name: big, proto: udp, responses: 1, max_datagram: 65507, listen: ["127.0.0.1:{l3}"], pool: e}}
pools:
  - {{name: e, servers: [{{address: "127.0.0.1:{echo}"}}]}}
""")
    os.environ["LD_PRELOAD"] = shim
    os.environ["TLP_ALLOC_DIR"] = adir
    try:
        p = env.proxy(["--config", cfg])
    finally:
        del os.environ["LD_PRELOAD"]

    def allocs():
        out = os.path.join(adir, "count")
        if os.path.exists(out):
            os.unlink(out)
        open(os.path.join(adir, "ask"), "w").close()
        t = time.time() + 5
        while not os.path.exists(out):
            check(time.time() < t, "the shim did not answer")
            time.sleep(0.02)
        return int(open(out).read())

    def traffic():
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(16)]
        for s in socks:
            s.settimeout(2)
        for r in range(10):
            for port in (l1, l2):
                for i, s in enumerate(socks):
                    s.sendto(b"q%d.%d" % (r, i), ("127.0.0.1", port))
                for i, s in enumerate(socks):
                    check(s.recv(100) == b"q%d.%d" % (r, i), "a reply went astray")
            # Large datagrams (own buffers), one at a time: the kernel's
            # receive buffers hold only a few.
            for i, s in enumerate(socks):
                s.sendto(b"Q%d.%d" % (r, i) * 5000, ("127.0.0.1", l3))
                check(s.recv(70000) == b"Q%d.%d" % (r, i) * 5000, "a large reply went astray")
        for s in socks:
            s.close()
        env.wait_stat(p, "udp_sessions", "0", 0)

    traffic()
    before = allocs()
    check(before > 0, "the shim counted no allocation at all (the shards' setup makes some)")
    traffic()
    traffic()
    after = allocs()
    check(after == before, f"the shards allocated {after - before} times in the steady state")
    env.stop(p)


def port_free(port):
    """Can a socket without SO_REUSEPORT bind UDP 127.0.0.1:port now?"""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def t_reload(env):
    """SIGHUP changes UDP listeners in place: a listener the file keeps
    keeps its sockets and its sessions (each with its server) while new
    sessions take its new pool; one the file drops takes no new client and
    gives its port back; one it adds answers; max_datagram stays until a
    restart, and the log says so."""
    echo = env.echo()
    sized = SizedReplies()
    hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # never answers
    hole.bind(("127.0.0.1", 0))
    la, lb, lc = free_port(), free_port(), free_port()
    pools = f"""pools:
  - {{name: echo, servers: [{{address: "127.0.0.1:{echo}"}}]}}
  - {{name: sized, servers: [{{address: "127.0.0.1:{sized.port}"}}]}}
  - {{name: hole, servers: [{{address: "127.0.0.1:{hole.getsockname()[1]}"}}]}}
"""
    try:
        path = env.config(f"""shards: 2
listeners:
  - {{name: a, proto: udp, listen: ["127.0.0.1:{la}"], pool: echo}}
  - {{name: b, proto: udp, responses: 1, listen: ["127.0.0.1:{lb}"], pool: hole,
       timeouts: {{idle: 1500ms}}}}
""" + pools)
        p = env.proxy(["--config", path])
        olds = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(8)]
        for i, s in enumerate(olds):
            s.settimeout(2)
            s.sendto(b"%d" % (i + 1), ("127.0.0.1", la))
            check(s.recv(100) == b"%d" % (i + 1), "before the reload: no echo")
        # A session of b that waits for its reply.
        q = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        q.settimeout(0.5)
        q.sendto(b"9", ("127.0.0.1", lb))
        env.wait_stat(p, "udp_sessions", "0", 9)
        check(not port_free(lb), "listener b's port is free while it listens")

        env.config(f"""shards: 2
listeners:
  - {{name: a, proto: udp, max_datagram: 30000, listen: ["127.0.0.1:{la}"], pool: sized}}
  - {{name: c, proto: udp, listen: ["127.0.0.1:{lc}"], pool: echo}}
""" + pools)
        p.send_signal(signal.SIGHUP)
        wait_log(p, r"reloaded: 2 listeners")
        # The sessions of a go on with their server (an echo), on both
        # shards: the sockets are the same, so the kernel sends each
        # client to the shard it went to before.
        for i, s in enumerate(olds):
            s.sendto(b"%d" % (i + 11), ("127.0.0.1", la))
            check(s.recv(100) == b"%d" % (i + 11), "a session begun before the reload lost its server")
        n = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        n.settimeout(2)
        n.sendto(b"7", ("127.0.0.1", la))
        got = n.recv(100)
        check(len(got) == 7 and got != b"7", f"a new session of a did not take the new pool: {got!r}")
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.settimeout(2)
        c.sendto(b"hello", ("127.0.0.1", lc))
        check(c.recv(100) == b"hello", "the listener the reload added does not answer")
        # b is gone for new clients, but stays for its waiting session
        # until it goes idle; then its port is free.
        q3 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        q3.sendto(b"new", ("127.0.0.1", lb))
        env.wait_stat(p, "udp", "drop_closing", 1)
        check(not port_free(lb), "listener b closed under its waiting session")
        t = time.time() + 5
        while not port_free(lb):
            check(time.time() < t, "the listener the reload dropped still holds its port")
            time.sleep(0.05)
        q3.close()
        q.sendto(b"8", ("127.0.0.1", lb))
        try:
            q.recv(100)
            raise Fail("the listener the reload dropped still answers")
        except (socket.timeout, ConnectionRefusedError):
            pass
        wait_log(p, r"udp listener a keeps max_datagram 16384 until a restart")
        # A second reload brings b back on its port.
        env.config(f"""shards: 2
listeners:
  - {{name: a, proto: udp, listen: ["127.0.0.1:{la}"], pool: sized}}
  - {{name: b, proto: udp, responses: 1, listen: ["127.0.0.1:{lb}"], pool: echo}}
""" + pools)
        p.send_signal(signal.SIGHUP)
        wait_log(p, r"reloaded: 2 listeners(.|\n)*reloaded: 2 listeners")
        q2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        q2.settimeout(2)
        q2.sendto(b"10", ("127.0.0.1", lb))
        check(q2.recv(100) == b"10", "listener b did not come back with the second reload")
        t = time.time() + 5
        while not port_free(lc):
            check(time.time() < t, "listener c kept its port after the second reload")
            time.sleep(0.05)
        for s in olds + [n, c, q, q2]:
            s.close()
        env.stop(p)
    finally:
        sized.stop()
        hole.close()


class TaggingServer(UdpServer):
    """A UDP server that answers each datagram with it and the source port
    it came from ("payload@port"), so a client sees which socket of the
    proxy's carries its session; a payload starting with "slow" is
    answered 0.4 s later (a reply still owed while the proxy changes)."""

    def __init__(self):
        self.timers = []
        super().__init__()

    def answer(self, d, a):
        r = d + b"@%d" % a[1]
        if d.startswith(b"slow"):
            t = threading.Timer(0.4, self.s.sendto, (r, a))
            t.start()
            self.timers.append(t)
        else:
            self.s.sendto(r, a)

    def stop(self):
        for t in self.timers:
            t.cancel()
        super().stop()


def ask(s, port, payload, timeout=3.0):
    """Send payload from s to the proxy; the answer's upstream port, or
    raise if none comes (or another one does)."""
    s.settimeout(timeout)
    s.sendto(payload, ("127.0.0.1", port))
    try:
        r = s.recv(65535)
    except socket.timeout:
        raise Fail(f"no answer to {payload!r}")
    check(r.startswith(payload + b"@"), f"answer {r!r} to {payload!r}")
    return int(r.split(b"@")[-1])


def takeover_figures(old, new):
    """What the old process says it handed over and the new one carried."""
    wait_log(new, r"takeover done", 30)
    rc = old.wait(30)
    check(rc == 0, f"the old process exited {rc}: " + open(old.errname).read()[-600:])
    mo = re.search(r"takeover by pid \d+: (\d+) connections? handed over", open(old.errname).read())
    mn = re.search(r"takeover done: (\d+) connections? carried on, (\d+) cut", open(new.errname).read())
    check(mo and mn, "no takeover figures: " + open(old.errname).read()[-600:] + open(new.errname).read()[-600:])
    return int(mo.group(1)), int(mn.group(1)), int(mn.group(2))


def t_takeover(env):
    """A live takeover carries UDP sessions: a new process (2 shards, then
    1) takes over the listening sockets and every session, each with its
    socket to its server, so the server sees the same source port for a
    client before and after; a reply owed across the switch reaches its
    client; a client sending all along loses nothing; the old processes
    exit 0 and the new one says it carried every session on, none cut."""
    up = TaggingServer()
    port = free_port()
    socks = [os.path.join(env.dir, "ho-%d.sock" % i) for i in range(3)]
    base = ["--udp", "--listen", f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{up.port}"]
    try:
        a = env.proxy(base + ["--shards", "2", "--handover-socket", socks[0]], name="tlproxy-a")
        clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(24)]
        before = [ask(c, port, b"c%d-0" % i) for i, c in enumerate(clients)]
        check(len(set(before)) == len(clients), f"sessions share a server socket: {before}")
        env.wait_stat(a, "udp_sessions", "0", len(clients))
        # A client that keeps asking through both switches.
        stream = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        done, lost, asked, errs = threading.Event(), [], [0], []

        def streamer():
            try:
                while not done.is_set():
                    ask(stream, port, b"s%d" % asked[0])
                    asked[0] += 1
                    time.sleep(0.002)
            except Fail as e:
                lost.append(str(e))
            except Exception as e:  # noqa: BLE001
                errs.append(e)

        th = threading.Thread(target=streamer, daemon=True)
        th.start()
        procs = [a]
        for i, shards in enumerate((2, 1)):
            # Replies owed across the switch.
            slow = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
            for j, s in enumerate(slow):
                s.sendto(b"slow%d" % j, ("127.0.0.1", port))
            time.sleep(0.05)
            new = env.proxy(base + ["--shards", str(shards), "--takeover", socks[i],
                                    "--handover-socket", socks[i + 1]], name="tlproxy-%d" % i)
            handed, carried, cut = takeover_figures(procs[-1], new)
            procs.append(new)
            check(cut == 0 and carried == handed and handed >= len(clients) + 1,
                  f"takeover {i + 1}: {handed} handed over, {carried} carried on, {cut} cut")
            for j, s in enumerate(slow):
                s.settimeout(3)
                try:
                    r = s.recv(100)
                except socket.timeout:
                    raise Fail(f"takeover {i + 1}: the reply owed to slow{j} never came")
                check(r.startswith(b"slow%d@" % j), f"slow{j} got {r!r}")
                s.close()
            for k, c in enumerate(clients):
                got = ask(c, port, b"c%d-%d" % (k, i + 1))
                check(got == before[k], f"takeover {i + 1}: client {k}'s session moved from "
                                        f"server port {before[k]} to {got}")
        done.set()
        th.join(10)
        check(not errs and not lost, f"the streaming client: {lost or errs}")
        check(asked[0] > 20, f"the streaming client asked only {asked[0]} times")
        last = procs[-1]
        st = env.stats(last)
        check(st["udp"].get("drop_error", 0) == 0 and st["udp"].get("drop_late", 0) == 0,
              f"the last process dropped datagrams: {st['udp']}")
        for c in clients:
            c.close()
        stream.close()
        env.stop(last)
    finally:
        up.stop()


def proxy_nofile(env, args, name):
    """tlproxy with args under a descriptor limit of 256 (hard 16384), once
    running, and the soft limit it raised itself to."""
    import resource

    def lim():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 16384))

    err = open(os.path.join(env.dir, name + ".err"), "w")
    p = subprocess.Popen([env.tlproxy] + args, stdout=subprocess.DEVNULL, stderr=err,
                         preexec_fn=lim)
    p.errname = err.name
    env.procs.append(p)
    wait_log(p, "running:")
    m = re.search(r"Max open files\s+(\d+)", open(f"/proc/{p.pid}/limits").read())
    check(m, "no descriptor limit in /proc")
    return p, int(m.group(1))


def t_nofile(env):
    """The descriptor limit is raised for the UDP sessions too (a socket
    each): --max-conns 1000 and --sessions 5000 on one shard need 2 x 1000
    + 1024 + 5000."""
    echo = env.echo()
    port = free_port()
    p, soft = proxy_nofile(env, ["--udp", "--listen", f"127.0.0.1:{port}", "--upstream",
                                 f"127.0.0.1:{echo}", "--shards", "1", "--max-conns", "1000",
                                 "--sessions", "5000"], "nofile")
    check(soft == 8024, f"soft limit {soft}, want 8024")
    env.stop(p)


def t_udp_only(env):
    """A file without TCP listeners sizes a shard's connection tables for
    its health checks and admin clients (1,024), not for 15,872 clients:
    with 5000 sessions on one shard it raises the descriptor limit to
    2 x 1024 + 1024 + 5000, not to 37,768. A reload that adds a TCP
    listener says how many connections a shard it gets until a restart,
    and the listener forwards."""
    echo = env.echo()
    # TCP ports free for TCP too (a port free for UDP may be a TCP
    # connection's), and a new one if another test takes it between the
    # probe and the bind.
    for attempt in range(5):
        tcp = free_port_both()
        te = env.spawn([env.tlecho, "-p", str(tcp)], "tlecho-tcp%d" % attempt)
        t = time.time() + 10
        while "listening" not in open(te.errname).read() and te.poll() is None:
            check(time.time() < t, "the TCP echo server did not start")
            time.sleep(0.02)
        if te.poll() is None:
            break
        err = open(te.errname).read()
        check("already in use" in err, "the TCP echo server exited: " + err[-300:])
    check(te.poll() is None, "the TCP echo server found no free port in 5 tries")
    port, lt = free_port(), free_port_both()
    udp_part = f"""shards: 1
listeners:
  - {{name: u, proto: udp, sessions: 5000, listen: ["127.0.0.1:{port}"], pool: e}}
"""
    pools = f"""pools:
  - {{name: e, servers: [{{address: "127.0.0.1:{echo}"}}]}}
  - {{name: t, servers: [{{address: "127.0.0.1:{tcp}"}}]}}
"""
    p, soft = proxy_nofile(env, ["--config", env.config(udp_part + pools)], "udponly")
    check(soft == 8072, f"soft limit {soft}, want 8072")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(b"ping", ("127.0.0.1", port))
    check(s.recv(100) == b"ping", "the UDP listener does not answer")
    check(te.poll() is None, "the TCP echo server exited")
    env.config(udp_part + f"""  - {{name: t, listen: "127.0.0.1:{lt}", pool: t}}
""" + pools)
    p.send_signal(signal.SIGHUP)
    wait_log(p, r"started without TCP listeners: its TCP listeners take up to 1024 connections")
    wait_log(p, r"reloaded: 2 listeners")
    c = socket.create_connection(("127.0.0.1", lt), timeout=2)
    c.sendall(b"hello over tcp")
    got = b""
    while len(got) < 14:
        d = c.recv(100)
        check(d, "the TCP listener the reload added closed")
        got += d
    check(got == b"hello over tcp", f"the TCP listener the reload added echoed {got!r}")
    c.close()
    s.close()
    env.stop(p)


CASES = {"cli_dig": t_cli_dig, "dnsperf": t_dnsperf, "oneway": t_oneway, "down_up": t_down_up,
         "udp_health": t_udp_health,
         "limit": t_limit, "sizes": t_sizes, "ipv6": t_ipv6, "large": t_large,
         "reload": t_reload, "nofile": t_nofile, "udp_only": t_udp_only, "takeover": t_takeover,
         "noalloc": t_noalloc}


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in CASES:
        print(__doc__, file=sys.stderr)
        return 2
    need = {"cli_dig": ["nsd", "dig"], "dnsperf": ["nsd", "dnsperf"], "down_up": ["nsd"], "udp_health": ["nsd"],
            "oneway": ["socat"]}.get(sys.argv[4], [])
    os.environ["PATH"] += ":/usr/sbin"
    for prog in need:
        if not shutil.which(prog):
            print(f"FAIL: {prog} is not installed (tools/setup.sh installs it)")
            return 1
    env = Env(*sys.argv[1:4])
    try:
        CASES[sys.argv[4]](env)
    except Fail as e:
        print("FAIL:", e)
        for p in env.procs:
            try:
                print(f"--- {p.args[0]}:", open(p.errname).read()[-600:])
            except OSError:
                pass
        return 1
    finally:
        env.close()
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
