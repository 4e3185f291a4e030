#!/usr/bin/env python3
"""tests/test_tlproxy.py: tlproxy end to end, with real programs (nginx, wrk, redis, openssl, a DNS responder) started on loopback and stopped by pid; each case checks what it forwarded and that nothing leaked.

Usage: test_tlproxy.py TLPROXY TLSHARD TLECHO CASE    (exit 0 pass, 1 fail, 77 skip)
       test_tlproxy.py --serve MODE ...                (the small servers the cases start)

TLP_E2E_BYTES sets the size of the bulk transfer each way (default 256 MiB; the
sanitizer builds pass less). TLP_E2E_WRAP runs tlproxy under a wrapper such as
valgrind (then use a small TLP_E2E_BYTES).
"""
import errno
import fcntl
import hashlib
import json
import grp
import os
import pwd
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time


class Fail(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def need(prog):
    path = shutil.which(prog)
    if not path:
        raise Skip(f"{prog} is not installed (tools/setup.sh installs it)")
    return path


# ---- what the environment allows: namespaces, mounts, other users ----

# errno values by which the environment refuses a privileged step: no
# capability, a seccomp filter or a security module (EPERM, EACCES); a
# kernel without the feature, an id not mapped in this user namespace, or
# a path that is no mount point, as a chroot's root is not (EINVAL); a
# namespace limit (ENOSPC, EUSERS); no such system call (ENOSYS). Such a
# refusal makes a case (or a part of one) a skip with the reason; any other
# error fails it. The same list as tests/privs.c.
REFUSALS = {errno.EPERM, errno.EACCES, errno.EINVAL, errno.ENOSPC, errno.EUSERS, errno.ENOSYS}
CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x20000, 0x4000, 0x40000


def refusal(steps):
    """Run steps, (name, Python statement) pairs, in order in a child
    process (privileged steps change the process that makes them): None
    when all worked, the reason when the environment refused one (see
    REFUSALS), a failure for any other error. A statement calls the C
    library through call(libc.f(...)) or raises OSError itself."""
    code = ["import ctypes, os, sys",
            "libc = ctypes.CDLL(None, use_errno=True)",
            "def call(rc):",
            "    if rc != 0:",
            "        e = ctypes.get_errno()",
            "        raise OSError(e, os.strerror(e))",
            "step = ''",
            "try:"]
    for name, stmt in steps:
        code += [f"    step = {name!r}", f"    {stmt}"]
    code += ["except OSError as e:",
             "    print(e.errno, step)",
             "    sys.exit(3)"]
    r = subprocess.run([sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, timeout=30)
    if r.returncode == 0:
        return None
    if r.returncode != 3:
        raise Fail(f"probing {steps[0][0]}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    e, step = r.stdout.strip().split(" ", 1)
    e = int(e)
    reason = f"{step}: {os.strerror(e)} ({errno.errorcode.get(e, e)})"
    if e not in REFUSALS:
        raise Fail(f"{reason}, not a refusal of the environment")
    return reason


def become_steps(uid, gid):
    return [(f"switching to uid {uid}, gid {gid}", f"os.setgroups([]); os.setgid({gid}); os.setuid({uid})")]


def own_uid():
    """A user id that belongs to nobody: mapped in this user namespace, no
    passwd or group entry, held by no process we can see, no stats
    directory in /dev/shm; picked at random among high ids so that runs at
    the same time do not meet (tests/privs.c picks its ids the same way)."""
    ranges = []
    with open("/proc/self/uid_map") as f:
        for line in f:
            inside, _, count = map(int, line.split())
            lo, hi = inside, min(inside + count, 0x7ffffff0)
            lo = 0x40000000 if hi > 0x40000001 and lo < 0x40000000 else max(lo, 1000)
            if hi > lo + 1:
                ranges.append((lo, hi))
    used = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/status") as f:
                    m = re.search(r"^Uid:\s+(.*)$", f.read(), re.M)
                used.update(int(u) for u in m.group(1).split())
            except (OSError, AttributeError):
                pass  # gone meanwhile
    for _ in range(200 if ranges else 0):
        lo, hi = random.choice(ranges)
        uid = random.randrange(lo, hi)
        if uid in used or os.path.lexists(f"/dev/shm/turnloop-{uid}"):
            continue
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(uid)
            continue
        except KeyError:
            return uid
    raise Skip("no unused user id is mapped in this user namespace")


def other_user(env, what):
    """A user of the case's own for a part that needs another user than
    root: its uid, or None when this part cannot run here (not root, or
    switching users refused), which is recorded as a skip of that part."""
    if os.geteuid() != 0:
        env.skip_part(what, "needs root to switch users")
        return None
    try:
        uid = own_uid()
    except Skip as e:
        env.skip_part(what, str(e))
        return None
    why = refusal(become_steps(uid, uid))
    if why:
        env.skip_part(what, why)
        return None
    return uid


def need_nobody():
    """For cases whose tlproxy drops to user nobody (the config's user:
    takes a name): root, a passwd entry, and an environment that lets root
    become it; a skip with the reason otherwise. Its passwd entry."""
    if os.geteuid() != 0:
        raise Skip("needs root to switch users")
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        raise Skip("no user nobody in the passwd database") from None
    why = refusal(become_steps(pw.pw_uid, pw.pw_gid))
    if why:
        raise Skip(why)
    return pw


# ---- full duplex: both sides write while they read ----

_say_lock = threading.Lock()


def say(line):
    """One line on stdout, whole: the serve() modes report from a thread per
    connection, and print() writes the text and its newline apart, so two
    reports could interleave into one line a test's pattern then misses."""
    with _say_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def duplex_data(size, side, name):
    """size bytes one side sends: a random MiB, each copy marked with its
    index, the side and the shape, so that bytes out of place, from the other
    side or from another connection change the hash."""
    block = random.Random(side).randbytes(1 << 20)
    tag = sum(name.encode()) & 0xff
    out = b"".join(bytes([i & 0xff, side, tag]) + block[3:] for i in range((size + (1 << 20) - 1) >> 20))
    return out[:size]


def duplex_io(sock, data, wait, chunk):
    """Send data (chunk bytes a send, or all that is left when chunk is 0)
    once wait bytes have come in, then our FIN, while reading to the peer's
    FIN: (bytes read, their SHA-256). One thread, non-blocking: neither side
    ever stops reading to write."""
    import selectors

    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    view, off, got, h = memoryview(data), 0, 0, hashlib.sha256()
    rnd = random.Random(len(data) ^ chunk)
    writing, reading = True, True
    while writing or reading:
        evs = sel.select(timeout=60)
        if not evs:
            raise TimeoutError(f"full duplex stalled: sent {off} of {len(data)}, read {got}")
        for _, ev in evs:
            if ev & selectors.EVENT_READ and reading:
                try:
                    d = sock.recv(1 << 20)
                except BlockingIOError:
                    d = None
                if d == b"":
                    reading = False
                elif d:
                    h.update(d)
                    got += len(d)
            if ev & selectors.EVENT_WRITE and writing and got >= wait:
                n = chunk if chunk > 0 else len(data) - off
                if chunk < 0:  # small writes of random sizes
                    n = rnd.randint(1, -chunk)
                try:
                    off += sock.send(view[off:off + n])
                except BlockingIOError:
                    pass
                if off == len(data):
                    sock.shutdown(socket.SHUT_WR)
                    writing = False
        if writing or reading:
            mask = (selectors.EVENT_READ if reading else 0) | \
                (selectors.EVENT_WRITE if writing and got >= wait else 0)
            sel.modify(sock, mask or selectors.EVENT_READ)
    sel.close()
    sock.setblocking(True)
    return got, h.hexdigest()


# ---- the small servers (run as their own processes: --serve MODE) ----

def serve(argv):
    mode, host, port = argv[0], argv[1], int(argv[2])
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    if host.startswith("unix:"):
        fam = socket.AF_UNIX
    ls = socket.socket(fam, socket.SOCK_STREAM)
    if fam == socket.AF_UNIX:
        try:
            os.unlink(host[5:])
        except FileNotFoundError:
            pass
        ls.bind(host[5:])
    else:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host, port))
    ls.listen(512)
    print("ready", flush=True)

    def ident(c, name):
        # Say who we are, then echo until the client's FIN.
        c.sendall(name.encode() + b"\n")
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
        c.close()

    def pp(c):
        # A PROXY header (v1 or v2) first: answer what it said, then echo.
        buf = b""
        while len(buf) < 16:
            d = c.recv(65536)
            if not d:
                c.close()
                return
            buf += d
        if buf.startswith(b"PROXY "):
            while b"\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    c.close()
                    return
                buf += d
            line, rest = buf.split(b"\r\n", 1)
            c.sendall(b"v1 " + line[6:] + b"\n")
        elif buf.startswith(b"\r\n\r\n\x00\r\nQUIT\n"):
            ver_cmd, fam_, ln = buf[12], buf[13], struct.unpack("!H", buf[14:16])[0]
            while len(buf) < 16 + ln:
                d = c.recv(65536)
                if not d:
                    c.close()
                    return
                buf += d
            body, rest = buf[16:16 + ln], buf[16 + ln:]
            if ver_cmd == 0x20:
                c.sendall(b"v2 LOCAL\n")
            elif fam_ == 0x11:
                s_ip, d_ip = socket.inet_ntop(socket.AF_INET, body[0:4]), socket.inet_ntop(socket.AF_INET, body[4:8])
                sp, dp = struct.unpack("!HH", body[8:12])
                c.sendall(f"v2 TCP4 {s_ip} {d_ip} {sp} {dp}\n".encode())
            elif fam_ == 0x21:
                s_ip, d_ip = socket.inet_ntop(socket.AF_INET6, body[0:16]), socket.inet_ntop(socket.AF_INET6, body[16:32])
                sp, dp = struct.unpack("!HH", body[32:36])
                c.sendall(f"v2 TCP6 {s_ip} {d_ip} {sp} {dp}\n".encode())
            elif fam_ == 0x31:
                c.sendall(b"v2 UNIX\n")
            else:
                c.sendall(b"v2 UNSPEC\n")
        else:
            c.sendall(b"no header: " + buf[:40] + b"\n")
            rest = b""
        if rest:
            c.sendall(rest)
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
        c.close()

    def sink(c):
        # Read to the client's FIN, then answer with the count and a hash,
        # and close: the client's half-close passed on, our answer after it.
        h, n = hashlib.sha256(), 0
        while True:
            d = c.recv(65536)
            if not d:
                break
            h.update(d)
            n += len(d)
        c.sendall(f"{n} {h.hexdigest()}\n".encode())
        c.close()

    def talk_first(c, size):
        # Send size bytes and our FIN first, then read to the client's FIN
        # and report it on stdout: the server's half-close passed on.
        data = random.Random(7).randbytes(size)
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        h, n = hashlib.sha256(), 0
        while True:
            d = c.recv(65536)
            if not d:
                break
            h.update(d)
            n += len(d)
        say(f"got {n} {h.hexdigest()}")
        c.close()

    def hello(c, name):
        # Answer at once with our name and our FIN, then read to the
        # client's end: a server that answered and closed its side.
        c.sendall(name.encode() + b"\n")
        c.shutdown(socket.SHUT_WR)
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass
        c.close()

    def resetter(c):
        # Read one message, then reset the connection.
        c.recv(100)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()

    def echo_reset(c, flag):
        # Echo until the file flag exists, then reset the connection.
        c.settimeout(0.02)
        while not os.path.exists(flag):
            try:
                d = c.recv(1 << 20)
            except socket.timeout:
                continue
            if not d:
                break
            c.settimeout(None)
            c.sendall(d)
            c.settimeout(0.02)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()

    def send_then_read(c, size):
        # Send size bytes (no FIN), then read to the client's FIN, report
        # it on stdout and close.
        c.sendall(random.Random(11).randbytes(size))
        h, n = hashlib.sha256(), 0
        while True:
            d = c.recv(1 << 20)
            if not d:
                break
            h.update(d)
            n += len(d)
        say(f"got {n} {h.hexdigest()}")
        c.close()

    def watch_reset(c):
        # Report on stdout how the client's side ended: eof or reset.
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    say("eof")
                    break
        except ConnectionResetError:
            say("reset")
        c.close()

    def download(c):
        # Wait for the request line, then send without end (until the
        # connection goes), reading nothing more: a large download.
        buf = b""
        while b"\n" not in buf:
            d = c.recv(4096)
            if not d:
                c.close()
                return
            buf += d
        block = random.Random(5).randbytes(1 << 16)
        try:
            while True:
                c.sendall(block)
        except OSError:
            pass
        c.close()

    def duplex_srv(c):
        # A header line (shape, size, wait, chunk), then both ways at once:
        # send size bytes of our own and read the client's to its FIN;
        # report what came on stdout.
        buf = b""
        while b"\n" not in buf:
            d = c.recv(1)
            if not d:
                c.close()
                return
            buf += d
        name, size, wait, chunk = buf.decode().split()
        n, h = duplex_io(c, duplex_data(int(size), 2, name), int(wait), int(chunk))
        say(f"got {name} {n} {h}")
        c.close()

    if mode.startswith("download"):
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    while True:
        c, _ = ls.accept()
        if mode.startswith("ident="):
            t = threading.Thread(target=ident, args=(c, mode[6:]), daemon=True)
        elif mode == "pp":
            t = threading.Thread(target=pp, args=(c,), daemon=True)
        elif mode == "sink":
            t = threading.Thread(target=sink, args=(c,), daemon=True)
        elif mode.startswith("talkfirst="):
            t = threading.Thread(target=talk_first, args=(c, int(mode[10:])), daemon=True)
        elif mode.startswith("hello="):
            t = threading.Thread(target=hello, args=(c, mode[6:]), daemon=True)
        elif mode == "reset":
            t = threading.Thread(target=resetter, args=(c,), daemon=True)
        elif mode.startswith("sendthenread="):
            t = threading.Thread(target=send_then_read, args=(c, int(mode[13:])), daemon=True)
        elif mode.startswith("echoreset="):
            t = threading.Thread(target=echo_reset, args=(c, mode[10:]), daemon=True)
        elif mode == "watchreset":
            t = threading.Thread(target=watch_reset, args=(c,), daemon=True)
        elif mode == "download":
            t = threading.Thread(target=download, args=(c,), daemon=True)
        elif mode == "duplex":
            t = threading.Thread(target=duplex_srv, args=(c,), daemon=True)
        else:
            raise SystemExit(f"unknown mode {mode}")
        t.start()


def serve_dns(argv):
    """A DNS responder on UDP ip:53: A and AAAA queries for any name under
    .test get the IPv4 addresses listed (one per line) in the file argv[1];
    other names NXDOMAIN."""
    ip, path = argv[0], argv[1]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, 53))
    print("ready", flush=True)
    while True:
        q, peer = s.recvfrom(2048)
        if len(q) < 12:
            continue
        qid, flags, qd = struct.unpack("!HHH", q[:6])
        off, labels = 12, []
        while off < len(q) and q[off]:
            labels.append(q[off + 1:off + 1 + q[off]].decode(errors="replace"))
            off += 1 + q[off]
        off += 1
        qtype, qclass = struct.unpack("!HH", q[off:off + 4])
        question = q[12:off + 4]
        name = ".".join(labels).lower()
        answers = b""
        rcode, n = 0, 0
        if not name.endswith(".test"):
            rcode = 3
        elif qtype == 1:
            try:
                with open(path) as f:
                    ips = [x.strip() for x in f if x.strip()]
            except OSError:
                ips = []
            for a in ips:
                answers += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 1, 4) + socket.inet_aton(a)
                n += 1
        hdr = struct.pack("!HHHHHH", qid, 0x8180 | rcode, 1, n, 0, 0)
        s.sendto(hdr + question + answers, peer)


# ---- the harness ----

class Proc:
    def __init__(self, name, p, log):
        self.name, self.p, self.log = name, p, log

    def text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class Env:
    def __init__(self, tlproxy, tlshard, tlecho, case):
        self.tlproxy, self.tlshard, self.tlecho = tlproxy, tlshard, tlecho
        self.case = case
        self.dir = tempfile.mkdtemp(prefix="tlp-e2e-")
        self.procs = []
        self.wrap = os.environ.get("TLP_E2E_WRAP", "").split()
        self.ports_taken = set()

    def port(self):
        # Free on every address: servers here bind the wildcard, and a port
        # free on 127.0.0.1 may still be held on another address (a client
        # of an earlier case, bound to 127.0.1.k, left in TIME-WAIT), which
        # makes a wildcard bind fail with EADDRINUSE.
        while True:
            s = socket.socket()
            s.bind(("0.0.0.0", 0))
            p = s.getsockname()[1]
            s.close()
            if p not in self.ports_taken:
                self.ports_taken.add(p)
                return p

    def path(self, name):
        return os.path.join(self.dir, name)

    def skip_part(self, what, why):
        """A part of the case that cannot run here: said in a SKIP line
        (tools/check lists them), the rest of the case goes on."""
        print(f"SKIP {self.case}/{what}: {why}", flush=True)

    def start(self, name, argv, env=None, wait_line=None, stdin=None, preexec=None):
        log = self.path(name + ".log")
        f = open(log, "w")
        e = dict(os.environ)
        if env:
            e.update(env)
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=e, stdin=stdin or subprocess.DEVNULL,
                             preexec_fn=preexec)
        f.close()
        pr = Proc(name, p, log)
        self.procs.append(pr)
        if wait_line:
            self.wait_for(pr, wait_line)
        return pr

    def serve(self, mode, host, port, name=None):
        return self.start(name or f"serve-{mode}-{port}",
                          [sys.executable, os.path.abspath(__file__), "--serve", mode, host, str(port)],
                          wait_line=r"^ready$")

    def wait_for(self, pr, pattern, timeout=10):
        # pattern is a regular expression over the whole output (re.M): a
        # bare word also matches inside others ("ready" in a traceback's
        # "Address already in use"), so anchor what must be a line.
        t = time.time() + timeout
        while time.time() < t:
            if re.search(pattern, pr.text(), re.M):
                return
            if pr.p.poll() is not None:
                raise Fail(f"{pr.name} exited ({pr.p.returncode}) before '{pattern}': {pr.text()[-2000:]}")
            time.sleep(0.02)
        raise Fail(f"{pr.name}: no '{pattern}' within {timeout} s: {pr.text()[-2000:]}")

    def proxy(self, args, name="tlproxy", env=None, prefix=None, preexec=None):
        if self.wrap:
            # One shard under a wrapper: valgrind serialises threads, and
            # the runtime's stop of several shards hangs under it.
            args = ["1" if i and args[i - 1] == "--shards" else a for i, a in enumerate(args)]
            env = dict(env or {}, TL_SHARDS="1")
        argv = (prefix or []) + self.wrap + [self.tlproxy] + args
        pr = self.start(name, argv, env=env, preexec=preexec)
        # Start-up takes well under a second of CPU, but a machine running
        # other suites can leave it waiting for a core far longer (13.8 s
        # of wall time for 0.39 s of CPU was seen): a hang still fails.
        self.wait_for(pr, r"tlproxy: running", timeout=60 if self.wrap else 30)
        pr.pid = pr.p.pid
        return pr

    def stop(self, pr, sig=signal.SIGTERM, timeout=30):
        if pr.p.poll() is None:
            pr.p.send_signal(sig)
        try:
            pr.p.wait(timeout)
        except subprocess.TimeoutExpired:
            pr.p.kill()
            pr.p.wait()
            raise Fail(f"{pr.name} did not stop within {timeout} s after signal {sig}")
        return pr.p.returncode

    def cleanup(self):
        for pr in reversed(self.procs):
            if pr.p.poll() is None:
                pr.p.kill()
                try:
                    pr.p.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def stats(self, pr):
        """Program values of tlproxy: {family: {label or row: total}}."""
        r = subprocess.run([self.tlshard, "stats", str(pr.pid), "--json"], capture_output=True, text=True)
        check(r.returncode == 0, f"tlshard stats failed: {r.stderr}")
        j = json.loads(r.stdout)
        out = {}
        for f in j["program"]:
            rows = {}
            for row in f["rows"]:
                rows[row["label"] or str(row["row"])] = row["total"]
                rows.setdefault("_per_shard", {})[row["label"] or str(row["row"])] = row["values"]
            out[f["name"]] = rows
        return out

    def stat(self, pr, fam, row="0"):
        return self.stats(pr)[fam].get(row, 0)

    def wait_stat(self, pr, fam, row, want, timeout=10, op="=="):
        t = time.time() + timeout
        got = None
        while time.time() < t:
            got = self.stat(pr, fam, row)
            if (op == "==" and got == want) or (op == ">=" and got >= want):
                return got
            time.sleep(0.05)
        raise Fail(f"stat {fam}[{row}] is {got}, want {op} {want}")

    def fds(self, pr):
        return len(os.listdir(f"/proc/{pr.pid}/fd"))

    def settle_fds(self, pr, want, timeout=10):
        t = time.time() + timeout
        n = None
        while time.time() < t:
            n = self.fds(pr)
            if n == want:
                return
            time.sleep(0.05)
        raise Fail(f"tlproxy has {n} descriptors, {want} at the start: a leak")


def connect(port, host="127.0.0.1", timeout=5, source=None, rcvbuf=None):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if source:
        s.bind((source, 0))
    if rcvbuf:
        # Before the handshake, which announces the window it allows.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect((host, port))
    return s


def unread(s):
    """How many bytes wait in s's receive queue, unread."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0" * 4))[0]


def recv_line(s, timeout=5):
    s.settimeout(timeout)
    buf = b""
    while b"\n" not in buf:
        d = s.recv(4096)
        if not d:
            break
        buf += d
    return buf.decode(errors="replace").split("\n")[0] if buf else ""


def recv_all(s, timeout=10):
    # A bytearray grows in place: appending to bytes copies all of it each
    # time, which makes a download of tens of MiB cost minutes of copying
    # on a busy machine, and its sender stall meanwhile.
    s.settimeout(timeout)
    out = bytearray()
    while True:
        d = s.recv(65536)
        if not d:
            return bytes(out)
        out += d


def is_closed(s, timeout=3):
    """True when the peer ends the connection (FIN or reset) within timeout
    without sending anything more."""
    s.settimeout(timeout)
    try:
        return s.recv(4096) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def write_cfg(env, name, text):
    p = env.path(name)
    with open(p, "w") as f:
        f.write(text)
    return p


def echo_ok(s, msg=b"ping", timeout=5):
    s.sendall(msg)
    got = b""
    s.settimeout(timeout)
    while len(got) < len(msg):
        d = s.recv(65536)
        if not d:
            break
        got += d
    return got == msg


# ---- the cases ----

def t_http_wrk(env):
    """nginx behind tlproxy under wrk, keep-alive and a new connection per
    request: every request answered, nothing left open, no descriptor leaked."""
    need("nginx")
    wrk = need("wrk")
    up, lp = env.port(), env.port()
    root = env.path("www")
    os.makedirs(root)
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("x" * 4096)
    conf = write_cfg(env, "nginx.conf", f"""
daemon off; master_process off; worker_processes 1; error_log {env.dir}/nginx.err warn; pid {env.dir}/nginx.pid;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 1000000; server {{ listen 127.0.0.1:{up}; root {root}; }} }}
""")
    env.start("nginx", ["nginx", "-p", env.dir, "-c", conf])
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            connect(up).close()
            break
        except OSError:
            time.sleep(0.05)
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2"])
    fd0 = env.fds(px)
    for extra in ([], ["-H", "Connection: close"]):
        r = subprocess.run([wrk, "-t2", "-c32", "-d2s"] + extra + [f"http://127.0.0.1:{lp}/index.html"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"wrk failed: {r.stderr}")
        m = re.search(r"(\d+) requests in", r.stdout)
        check(m and int(m.group(1)) > 200, f"wrk made too few requests: {r.stdout}")
        check("Socket errors" not in r.stdout and "Non-2xx" not in r.stdout,
              f"wrk saw errors through tlproxy ({extra}): {r.stdout}")
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    s = env.stats(px)
    check(s["bytes_out"]["0"] > 200 * 4096, f"bytes_out {s['bytes_out']} too small")
    # wrk ends its run by closing connections with answers unread (resets),
    # so client resets and writes to gone clients are expected; nothing else.
    bad = {k: v for k, v in s["errors"].items()
           if k not in ("_per_shard", "client_reset", "client_error") and v}
    check(not bad, f"errors counted: {bad}")
    check(env.stop(px) == 0, "tlproxy did not exit 0 on SIGTERM")


def t_redis(env):
    """redis-server behind tlproxy under redis-benchmark, the shards parking
    at once (nap_us: 0): every command the benchmark sent reached the
    server."""
    redis_through(env, "nap_us: 0\n")


def t_redis_nap(env):
    """The same with the shards napping 300 us before they park (the
    default is 50): the pipelined load comes in batches, so naps are
    taken, and every command still reaches the server."""
    redis_through(env, "nap_us: 300\n")


def redis_through(env, extra):
    rs = need("redis-server")
    rb = need("redis-benchmark")
    rc = need("redis-cli")
    up, lp = env.port(), env.port()
    env.start("redis", [rs, "--port", str(up), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
              wait_line="Ready to accept connections")
    cfg = write_cfg(env, "redis.yaml", f"""
shards: 2
{extra}listeners:
  - {{name: redis, listen: "127.0.0.1:{lp}", pool: r}}
pools:
  - name: r
    health: {{interval: 1s, timeout: 1s, send: "PING\\r\\n", expect: "+PONG\\r\\n"}}
    servers: [{{address: "127.0.0.1:{up}"}}]
""")
    # A check's timeout of a second: under ASan on a loaded machine passes of
    # 160-180 ms were seen, and a check is meant to fail on redis, not on that.
    px = env.proxy(["--config", cfg])
    fd0 = env.fds(px)
    n = 20000
    r = subprocess.run([rb, "-p", str(lp), "-t", "set,get,lpush", "-n", str(n), "-c", "20", "-P", "4", "-q"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"redis-benchmark failed: {r.stdout} {r.stderr}")
    check(r.stdout.count("requests per second") >= 3, f"redis-benchmark output: {r.stdout}")
    info = subprocess.run([rc, "-p", str(up), "info", "commandstats"], capture_output=True, text=True).stdout
    for cmd in ("set", "get", "lpush"):
        m = re.search(rf"cmdstat_{cmd}:calls=(\d+)", info)
        check(m and int(m.group(1)) >= n, f"the server saw {m.group(1) if m else 0} {cmd} of {n}: {info}")
    pong = subprocess.run([rc, "-p", str(lp), "ping"], capture_output=True, text=True).stdout.strip()
    check(pong == "PONG", f"redis-cli ping through tlproxy said {pong!r}")
    env.wait_stat(px, "health_checks", "pass", 2, op=">=")
    check(env.stat(px, "health_checks", "fail") == 0, "a PING/+PONG health check of redis failed")
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def bulk_size():
    return int(os.environ.get("TLP_E2E_BYTES", str(256 << 20)))


def t_bulk(env):
    """TLP_E2E_BYTES (256 MiB) each way at once through tlproxy to an echo
    server, both directions checked by SHA-256; then the client's FIN."""
    st = bulk_through(env, [])
    check(st["splice"]["bytes"] == 0, f"spliced without --splice: {st['splice']}")


def bulk_through(env, extra):
    """t_bulk's transfer through a tlproxy started with extra arguments; its
    stats once the transfer is done."""
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "1"] + extra)
    fd0 = env.fds(px)
    size = bulk_size()
    s = connect(lp, timeout=60)
    block = random.Random(1).randbytes(1 << 20)
    sent_h, got_h = hashlib.sha256(), hashlib.sha256()
    got = [0]
    err = []

    def reader():
        try:
            while got[0] < size:
                d = s.recv(1 << 20)
                if not d:
                    break
                got_h.update(d)
                got[0] += len(d)
        except Exception as e:  # noqa: BLE001
            err.append(e)

    t = threading.Thread(target=reader)
    t.start()
    sent, i = 0, 0
    while sent < size:
        # Every MiB differs: a byte off by position would change the hash.
        chunk = bytes([i & 0xff]) + block[1:]
        chunk = chunk[:size - sent]
        try:
            s.sendall(chunk)
        except OSError as e:
            raise Fail(f"sending failed after {sent} bytes: {e}")
        sent_h.update(chunk)
        sent += len(chunk)
        i += 1
    t.join(600)
    check(not err, f"reading failed: {err}")
    check(got[0] == size, f"got {got[0]} bytes back of {size}")
    check(got_h.hexdigest() == sent_h.hexdigest(), "the bytes that came back differ from those sent")
    s.shutdown(socket.SHUT_WR)
    check(is_closed(s, 10), "no end of stream after the client's FIN")
    s.close()
    st = env.stats(px)
    check(st["bytes_in"]["0"] == size and st["bytes_out"]["0"] == size,
          f"bytes_in {st['bytes_in']['0']} bytes_out {st['bytes_out']['0']}, want {size} each")
    env.wait_stat(px, "conns_open", "0", 0)
    env.wait_stat(px, "splice_pipes", "busy", 0)
    st = env.stats(px)
    # The pool keeps the pipes it made (two descriptors each) until the end.
    env.settle_fds(px, fd0 + 2 * st["splice_pipes"]["open"])
    check(env.stop(px) == 0, "tlproxy did not exit 0")
    return st


def t_splice_bulk(env):
    """t_bulk through --splice: both directions intact by SHA-256, and most
    of the bytes went through pipes (the splice stats), each direction having
    switched to splicing."""
    size = bulk_size()
    st = bulk_through(env, ["--splice"])
    sp = st["splice"]
    check(sp["to_splice"] >= 2, f"fewer than two switches to splicing: {sp}")
    check(sp["bytes"] >= size, f"only {sp['bytes']} of {2 * size} bytes spliced: {sp}")
    check(sp["refused"] == 0, f"the pool refused splices: {sp}")


def t_splice_refused(env):
    """--splice with a pool of one pipe: once one direction splices, the
    other is refused, copies, and the refusal is counted; both directions
    still arrive intact."""
    st = bulk_through(env, ["--splice", "--splice-pipes", "1"])
    sp = st["splice"]
    check(sp["refused"] >= 1, f"no refusal counted with one pipe for two bulk directions: {sp}")
    check(sp["bytes"] > 0 and sp["to_splice"] >= 1, f"nothing spliced: {sp}")
    check(sp["bytes"] < 2 * bulk_size(), f"everything spliced through one pipe: {sp}")


DUPLEX_SHAPES = [
    # name, bytes a send (0: all that is left; -n: random 1..n), the client
    # waits for that many bytes before it writes, the server likewise
    ("chunks", 65536, 0, 0),
    ("whole", 0, 0, 0),
    ("small", -4096, 0, 0),
    ("server_first", 262144, 1 << 20, 0),
    ("client_first", 262144, 0, 1 << 20),
]


def duplex_size():
    return min(64 << 20, bulk_size())


def duplex_through(env, extra):
    """Full duplex through a tlproxy started with extra arguments: for each
    shape, client and server each send duplex_size() (64 MiB) while reading
    the other's, then their FIN; both directions checked by SHA-256."""
    up, lp = env.port(), env.port()
    srv = env.serve("duplex", "127.0.0.1", up)
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "1"] + extra)
    fd0 = env.fds(px)
    size = duplex_size()
    for name, chunk, cwait, swait in DUPLEX_SHAPES:
        mine, theirs = duplex_data(size, 1, name), duplex_data(size, 2, name)
        s = connect(lp, timeout=60)
        s.sendall(f"{name} {size} {swait} {chunk}\n".encode())
        t0 = time.time()
        try:
            n, h = duplex_io(s, mine, cwait, chunk)
        except (OSError, TimeoutError) as e:
            raise Fail(f"{name}: {e}")
        s.close()
        check(n == size, f"{name}: the client got {n} bytes of {size}")
        check(h == hashlib.sha256(theirs).hexdigest(), f"{name}: the bytes the client got differ from those sent")
        env.wait_for(srv, rf"^got {name} ", timeout=30)
        m = re.search(rf"^got {name} (\d+) (\w+)$", srv.text(), re.M)
        check(m and int(m.group(1)) == size, f"{name}: the server got {m.group(1) if m else '?'} bytes of {size}")
        check(m.group(2) == hashlib.sha256(mine).hexdigest(), f"{name}: the bytes the server got differ from those sent")
        print(f"{name}: {size} bytes each way in {time.time() - t0:.2f} s", flush=True)
    env.wait_stat(px, "conns_open", "0", 0)
    env.wait_stat(px, "splice_pipes", "busy", 0)
    st = env.stats(px)
    check(st["bytes_in"]["0"] == len(DUPLEX_SHAPES) * size + sum(
        len(f"{n} {size} {w} {c}\n") for n, c, _, w in DUPLEX_SHAPES) and
        st["bytes_out"]["0"] == len(DUPLEX_SHAPES) * size,
        f"bytes_in {st['bytes_in']['0']} bytes_out {st['bytes_out']['0']}")
    env.settle_fds(px, fd0 + 2 * st["splice_pipes"]["open"])
    check(env.stop(px) == 0, "tlproxy did not exit 0")
    return st


def t_duplex(env):
    """Full duplex (issue 22): client and server each write 64 MiB while
    reading the other's, in five shapes (64 KiB sends, one send of all,
    small sends of random sizes, the server first, the client first); every
    byte each way arrives, in order, by SHA-256."""
    st = duplex_through(env, [])
    check(st["splice"]["bytes"] == 0, f"spliced without --splice: {st['splice']}")


def t_splice_duplex(env):
    """t_duplex through --splice: the same five shapes, with the directions
    spliced."""
    st = duplex_through(env, ["--splice"])
    check(st["splice"]["bytes"] > 0, f"nothing spliced with --splice: {st['splice']}")


def t_stall(env):
    """Clients that never read their download cannot starve anyone else
    (issue 22): 2 shards, one listener in front of a server that sends every
    connection a download without end, another in front of tlecho; N
    clients (up to the connection limit) each send a request to the first
    and never read, until their connections hold all they can; meanwhile
    four clients of the second keep doing round trips, each within 2 s.
    A shard's pooled buffers are sized from the connection limit, each
    stream holds at most its cap of 8, and each stream that reads has one
    buffer reserved (lib/caps.c); before, a few such clients on io_uring, or
    about 128 a shard on epoll, took every buffer and froze the shard."""
    n, nb = 300, 4
    up, echo, l1, l2 = env.port(), env.port(), env.port(), env.port()
    env.serve("download", "127.0.0.1", up)
    env.start("tlecho", [env.tlecho, "-p", str(echo)], wait_line="listening")
    cfg = write_cfg(env, "stall.yaml", f"""
max_conns: {n + nb + 8}
listeners:
  - name: down
    listen: "127.0.0.1:{l1}"
    pool: dl
    timeouts: {{idle: 120s}}
    socket: {{rcvbuf: 16k, sndbuf: 16k}}
  - {{name: echo, listen: "127.0.0.1:{l2}", pool: echo}}
pools:
  - {{name: dl, servers: [{{address: "127.0.0.1:{up}"}}]}}
  - {{name: echo, servers: [{{address: "127.0.0.1:{echo}"}}]}}
""")
    px = env.proxy(["--config", cfg], env={"TL_SHARDS": "2"})
    fd0 = env.fds(px)
    near = [connect(l2) for _ in range(nb)]
    for s in near:
        check(echo_ok(s, b"before"), "no round trip before the stall")
    stalled = []
    for i in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5)
        s.connect(("127.0.0.1", l1))
        s.sendall(b"GET /big\n")
        stalled.append(s)
    env.wait_stat(px, "conns_open", "0", n + nb, timeout=30, op=">=")

    def leases():
        r = subprocess.run([env.tlshard, "stats", str(px.pid), "--json"], capture_output=True, text=True)
        check(r.returncode == 0, f"tlshard stats failed: {r.stderr}")
        return [int(x["leases_out"]) for x in json.loads(r.stdout)["shard"]]

    # Until the stalled connections hold what they will (no change for 2 s).
    t, last, same = time.time() + 60, None, 0
    while time.time() < t and same < 10:
        cur = leases()
        same = same + 1 if cur == last else 0
        last = cur
        time.sleep(0.2)
    conns = env.stats(px)["conns_open"]["_per_shard"]["0"]
    print(f"{n} stalled downloads hold {last} leases (shards 0, 1; connections {conns})", flush=True)
    check(sum(last) >= n, f"the stalled clients hold only {last} leases: no stall to speak of")
    # Only a download's server side holds leases, its cap of 8 at most.
    check(all(x <= 8 * c for x, c in zip(last, conns)), f"leases {last} over 8 a connection {conns}")
    worst, rounds = 0.0, 0
    for r in range(25):
        for k, s in enumerate(near):
            msg = b"round %d on %d" % (r, k)
            t0 = time.time()
            s.settimeout(2)
            try:
                ok = echo_ok(s, msg)
            except OSError as e:
                raise Fail(f"round trip {r} on neighbour {k} failed beside {n} stalled downloads "
                           f"({leases()} leases out): {e}")
            check(ok, f"round trip {r} on neighbour {k} came back wrong")
            worst = max(worst, time.time() - t0)
            rounds += 1
    print(f"{rounds} round trips beside them, the slowest {worst * 1000:.1f} ms", flush=True)
    check(worst < 2, f"a round trip took {worst:.2f} s")
    for s in stalled + near:
        s.close()
    env.wait_stat(px, "conns_open", "0", 0, timeout=30)
    env.settle_fds(px, fd0)
    check(sum(leases()) == 0, f"leases still out after every connection closed: {leases()}")
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_halfclose(env):
    """Half-close each way: the client's FIN reaches the server while the
    server still answers; the server's FIN reaches the client while the
    client still sends."""
    halfclose(env, False, 500000, 300000, 200000)


def t_splice_halfclose(env):
    """t_halfclose through splice: true, with transfers large enough that
    each direction that carries one switches to splicing (counted), and the
    FIN seen while splicing."""
    st = halfclose(env, True, 8 << 20, 8 << 20, 8 << 20)
    sp = st["splice"]
    check(sp["to_splice"] >= 3, f"fewer than three directions switched to splicing: {sp}")
    check(sp["bytes"] >= 12 << 20, f"only {sp['bytes']} bytes spliced of 24 MiB: {sp}")


def halfclose(env, splice, n_up, n_talk, n_late):
    up1, up2, lp1, lp2 = env.port(), env.port(), env.port(), env.port()
    env.serve("sink", "127.0.0.1", up1)
    talker = env.serve(f"talkfirst={n_talk}", "127.0.0.1", up2)
    sp = ", splice: true" if splice else ""
    cfg = write_cfg(env, "hc.yaml", f"""
listeners:
  - {{name: a, listen: "127.0.0.1:{lp1}", pool: sink{sp}}}
  - {{name: b, listen: "127.0.0.1:{lp2}", pool: talk{sp}}}
pools:
  - {{name: sink, servers: [{{address: "127.0.0.1:{up1}"}}]}}
  - {{name: talk, servers: [{{address: "127.0.0.1:{up2}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    fd0 = env.fds(px)
    # Client -> server FIN: the server reads to EOF and answers after it.
    s = connect(lp1)
    data = random.Random(3).randbytes(n_up)
    s.sendall(data)
    if splice:
        # The FIN comes while the direction splices (it stays so at rest).
        env.wait_stat(px, "splice_pipes", "busy", 1)
    s.shutdown(socket.SHUT_WR)
    line = recv_line(s, 10)
    check(line == f"{len(data)} {hashlib.sha256(data).hexdigest()}",
          f"the server answered {line!r} after the client's FIN")
    check(is_closed(s), "the server's close did not reach the client")
    s.close()
    # Server -> client FIN: the client reads to EOF and then sends.
    s = connect(lp2)
    first = recv_all(s, 10)
    want = random.Random(7).randbytes(n_talk)
    check(first == want, f"got {len(first)} bytes before the server's FIN, want {len(want)}")
    late = random.Random(9).randbytes(n_late)
    s.sendall(late)
    if splice:
        env.wait_stat(px, "splice_pipes", "busy", 1)
    s.shutdown(socket.SHUT_WR)
    env.wait_for(talker, r"got \d+", 10)
    check(f"got {len(late)} {hashlib.sha256(late).hexdigest()}" in talker.text(),
          f"the server did not get what the client sent after its FIN: {talker.text()}")
    s.close()
    env.wait_stat(px, "conns_open", "0", 0)
    st = env.stats(px)
    if not splice:
        check(st["splice"]["bytes"] == 0, f"spliced without splice: true: {st['splice']}")
    env.settle_fds(px, fd0 + 2 * st["splice_pipes"]["open"])
    check(env.stop(px) == 0, "tlproxy did not exit 0")
    return st


def t_halfclose_count(env):
    """How a half-closed pair counts. With half_close on (the default) a
    server that answered and closed while its client lingers keeps its
    place: with max_conns 1 per server and no queue, two lingering clients
    fill the pool and a third is refused, until timeouts.server_fin ends
    them. With half_close off the pair ends once the answer and its FIN
    are out: five lingering clients are served one after another, counts
    back to 0 within a second (not server_fin's 2 s); and a client's FIN ends the pair too (the server's
    later answer is not forwarded)."""
    ports = [env.port() for _ in range(5)]
    a1, b1, a2, b2, sk = ports
    lon, loff, lsink = env.port(), env.port(), env.port()
    for name, port in (("A1", a1), ("B1", b1), ("A2", a2), ("B2", b2)):
        env.serve("hello=" + name, "127.0.0.1", port)
    env.serve("sink", "127.0.0.1", sk)
    sock = env.path("admin.sock")
    cfg = write_cfg(env, "hc.yaml", f"""
admin: {sock}
listeners:
  - {{name: on, listen: "127.0.0.1:{lon}", pool: pon, timeouts: {{server_fin: 2s}}}}
  - {{name: off, listen: "127.0.0.1:{loff}", pool: poff, half_close: false}}
  - {{name: sinkoff, listen: "127.0.0.1:{lsink}", pool: psink, half_close: false}}
pools:
  - name: pon
    balance: leastconn
    servers: [{{address: "127.0.0.1:{a1}", max_conns: 1}}, {{address: "127.0.0.1:{b1}", max_conns: 1}}]
  - name: poff
    balance: leastconn
    servers: [{{address: "127.0.0.1:{a2}", max_conns: 1}}, {{address: "127.0.0.1:{b2}", max_conns: 1}}]
  - {{name: psink, servers: [{{address: "127.0.0.1:{sk}"}}]}}
""")
    px = env.proxy(["--config", cfg], env={"TL_SHARDS": "2"})

    def conns(pool):
        out = admin(sock, f"show servers {pool}")
        return sum(int(m) for m in re.findall(r" conns=(\d+)", out))

    def linger(port):
        s = connect(port)
        s.settimeout(10)
        buf = b""
        while True:
            d = s.recv(100)
            if not d:
                break
            buf += d
        return s, buf.decode().strip()   # the server's answer and FIN are in; s stays open

    # On: the lingering pairs hold their servers.
    held, names = [], set()
    for _ in range(2):
        s, n = linger(lon)
        held.append(s)
        names.add(n)
        t_fin = time.time()  # the server's FIN is in: server_fin runs from about here
    check(names == {"A1", "B1"}, f"leastconn gave {names} to two lingering clients")
    check(conns("pon") == 2, f"half_close on: {conns('pon')} connections counted, want 2 lingering pairs: {admin(sock, 'show servers')}")
    s = connect(lon)
    check(is_closed(s, 2), "half_close on: a third client was served though both servers hold a lingering pair")
    s.close()
    env.wait_stat(px, "errors", "queue_full", 1)
    while conns("pon") and time.time() - t_fin < 8:
        time.sleep(0.1)
    dt = time.time() - t_fin
    check(conns("pon") == 0 and dt > 1.5, f"the lingering pairs ended {dt:.2f} s after the last server's FIN "
          f"(server_fin 2s)")
    env.wait_stat(px, "errors", "server_fin_timeout", 2)
    for s in held:
        s.close()
    # Off: each pair ends once the answer and the FIN are out.
    held, names = [], []
    for _ in range(5):
        s, n = linger(loff)
        held.append(s)
        names.append(n)
    check(sorted(set(names)) == ["A2", "B2"] and len(names) == 5,
          f"half_close off: five lingering clients got {names}")
    # The pair ends once its answer and FIN are out: the client can see
    # the FIN a moment before the proxy has closed the server's side and
    # counted it, so "at once" is within a second, half of server_fin.
    t = time.time() + 1.0
    while conns("poff") and time.time() < t:
        time.sleep(0.02)
    check(conns("poff") == 0, f"half_close off: {conns('poff')} connections counted for lingering clients")
    check(env.stat(px, "errors", "server_fin_timeout") == 2, "half_close off: a pair waited for server_fin")
    for s in held:
        s.close()
    # Off, the client's FIN first: the pair ends; no answer comes after it.
    s = connect(lsink)
    s.sendall(b"x" * 1000)
    s.shutdown(socket.SHUT_WR)
    got = recv_all(s, 3)
    s.close()
    check(got == b"", f"half_close off: the server's answer after the client's FIN was forwarded: {got!r}")
    env.wait_stat(px, "conns_open", "0", 0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_splice_reset(env):
    """t_reset while splicing: a server that resets while both directions
    splice (after echoing bulk) is seen as a reset by the client, and a
    client that resets while its direction splices is seen as a reset by the
    server; each counted as t_reset counts them."""
    up1, up2, lp1, lp2 = env.port(), env.port(), env.port(), env.port()
    flag = env.path("reset-now")
    env.serve(f"echoreset={flag}", "127.0.0.1", up1, name="echoreset")
    watcher = env.serve("watchreset", "127.0.0.1", up2)
    cfg = write_cfg(env, "rst.yaml", f"""
listeners:
  - {{name: a, listen: "127.0.0.1:{lp1}", pool: rst, splice: true}}
  - {{name: b, listen: "127.0.0.1:{lp2}", pool: watch, splice: true}}
pools:
  - {{name: rst, servers: [{{address: "127.0.0.1:{up1}"}}]}}
  - {{name: watch, servers: [{{address: "127.0.0.1:{up2}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    fd0 = env.fds(px)
    # Echo 1 MiB bursts until both directions splice at rest.
    s = connect(lp1)
    block = random.Random(5).randbytes(1 << 20)
    for _ in range(20):
        s.sendall(block)
        got = 0
        while got < len(block):
            d = s.recv(1 << 20)
            check(d, "the echo ended early")
            got += len(d)
        time.sleep(0.1)
        if env.stat(px, "splice_pipes", "busy") == 2:
            break
    check(env.stat(px, "splice_pipes", "busy") == 2, "the echo's directions are not both splicing")
    open(flag, "w").close()
    s.settimeout(5)
    try:
        d = s.recv(100)
        raise Fail(f"the server's reset reached the client as {d!r}, not as a reset")
    except ConnectionResetError:
        pass
    s.close()
    os.unlink(flag)
    env.wait_stat(px, "errors", "server_reset", 1)
    env.wait_stat(px, "splice_pipes", "busy", 0)
    # The client's direction splicing at rest, then its reset.
    s = connect(lp2)
    for _ in range(20):
        s.sendall(block)
        time.sleep(0.1)
        if env.stat(px, "splice_pipes", "busy") == 1:
            break
    check(env.stat(px, "splice_pipes", "busy") == 1, "the client's direction is not splicing")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    env.wait_for(watcher, r"^(eof|reset)$", 5)
    check("reset" in watcher.text().split(), f"the server saw the client's reset as: {watcher.text()}")
    env.wait_stat(px, "errors", "client_reset", 1)
    env.wait_stat(px, "conns_open", "0", 0)
    st = env.stats(px)
    check(st["errors"]["server_error"] == 0 and st["errors"]["client_error"] == 0,
          f"a reset counted as a write error: {st['errors']}")
    check(st["splice"]["to_splice"] >= 3, f"fewer than three directions spliced: {st['splice']}")
    env.settle_fds(px, fd0 + 2 * st["splice_pipes"]["open"])
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_splice_idle(env):
    """timeouts.idle through splice: true, as when copying. A connection
    whose one direction moves bytes for three idle periods while the other,
    spliced, waits lives on (that waiting direction goes back to copying,
    counted in to_copy); one quiet both ways ends after about the idle
    timeout, counted as idle_timeout. The idle period is 2 s: a python
    server on a very busy machine can take a second to send its first
    byte."""
    up, lp = env.port(), env.port()
    n = 4 << 20
    server = env.serve(f"sendthenread={n}", "127.0.0.1", up, name="sendthenread")
    cfg = write_cfg(env, "idle.yaml", f"""
listeners:
  - {{name: a, listen: "127.0.0.1:{lp}", pool: p, splice: true, timeouts: {{idle: 2s}}}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    fd0 = env.fds(px)
    # The client sends from the moment it connects until three idle
    # periods after the download ended, while it reads the download: the
    # connection is never quiet both ways. (Waiting for the server's first
    # byte before sending left the connection quiet until then: on a loaded
    # machine the python server took over 2 s to send it, and the proxy
    # rightly ended the connection at its idle timeout. Sending only after
    # reading it all left a gap too: the proxy's idle period starts when it wrote its last
    # byte, and its socket buffers can hold seconds of a slow client's
    # reading; the connection then ended, rightly, before the first byte
    # sent.) That the download spliced is read from the counters afterwards.
    s = connect(lp)
    # 256 KiB each 0.1 s: enough for that direction to splice too, and
    # little for a slow server to read after the client stops.
    h, block = hashlib.sha256(), random.Random(12).randbytes(256 << 10)
    sent, errs, stop = [0], [], threading.Event()

    def sender():
        while not stop.is_set():
            try:
                s.sendall(block)
            except OSError as e:
                errs.append(e)
                return
            h.update(block)
            sent[0] += len(block)
            time.sleep(0.1)

    th = threading.Thread(target=sender)
    th.start()
    got = bytearray()
    try:
        while len(got) < n:
            d = s.recv(1 << 20)
            check(d, f"the server's {n} bytes ended after {len(got)}")
            got += d
        t_end = time.time() + 3 * 2
        while time.time() < t_end and not errs:
            time.sleep(0.05)
    finally:
        stop.set()
        th.join()
    check(not errs, f"the connection ended after {sent[0]} bytes while the client sent: "
          f"{errs[0] if errs else ''}")
    sent = sent[0]
    check(got == random.Random(11).randbytes(n), "the server's bytes differ")
    s.shutdown(socket.SHUT_WR)
    env.wait_for(server, r"got \d+", 10)
    check(f"got {sent} {h.hexdigest()}" in server.text(),
          f"the server did not get the {sent} bytes sent: {server.text()}")
    check(is_closed(s, 5), "the server's close did not reach the client")
    s.close()
    st = env.stats(px)
    check(st["errors"]["idle_timeout"] == 0, f"a moving connection timed out: {st['errors']}")
    check(st["splice"]["to_splice"] >= 2 and st["splice"]["to_copy"] >= 1,
          f"the waiting direction did not splice and go back to copying: {st['splice']}")
    # Quiet both ways while its server's direction splices: ends at idle,
    # from the splice that waited (to_splice one more, to_copy as it was:
    # counters, read after the close, since the pipe is given back then).
    spl0 = st["splice"]
    t_conn = time.time()
    s = connect(lp)
    got = bytearray()
    while len(got) < n:
        d = s.recv(1 << 20)
        check(d, f"the server's bytes ended early: {len(got)} of {n}, "
              f"{time.time() - t_conn:.2f} s after the connect (idle is 2 s)")
        got += d
    t0 = time.time()
    check(is_closed(s, 10), "a quiet connection was not closed")
    t1 = time.time()
    # Its idle period began when the proxy wrote the last byte: after the
    # connect, and before the client read it (how long before depends on
    # the socket buffers and on how fast a busy machine lets the client
    # read). So it lived at least the idle period, and ended within a few
    # seconds of the last byte read.
    check(t1 - t_conn >= 2.0 and t1 - t0 <= 5,
          f"a quiet connection closed {t1 - t_conn:.2f} s after its connect and "
          f"{t1 - t0:.2f} s after its last byte, idle is 2 s")
    s.close()
    env.wait_stat(px, "errors", "idle_timeout", 1)
    env.wait_stat(px, "conns_open", "0", 0)
    st = env.stats(px)
    check(st["splice"]["to_splice"] == spl0["to_splice"] + 1
          and st["splice"]["to_copy"] == spl0["to_copy"],
          f"the quiet download was not spliced to its end: {spl0} then {st['splice']}")
    env.settle_fds(px, fd0 + 2 * st["splice_pipes"]["open"])
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_reset(env):
    """A reset from either side is seen as a reset by the other."""
    up1, up2, lp1, lp2 = env.port(), env.port(), env.port(), env.port()
    env.serve("reset", "127.0.0.1", up1)
    watcher = env.serve("watchreset", "127.0.0.1", up2)
    cfg = write_cfg(env, "rst.yaml", f"""
listeners:
  - {{name: a, listen: "127.0.0.1:{lp1}", pool: rst}}
  - {{name: b, listen: "127.0.0.1:{lp2}", pool: watch}}
pools:
  - {{name: rst, servers: [{{address: "127.0.0.1:{up1}"}}]}}
  - {{name: watch, servers: [{{address: "127.0.0.1:{up2}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    fd0 = env.fds(px)
    s = connect(lp1)
    s.sendall(b"hello")
    s.settimeout(5)
    try:
        d = s.recv(100)
        raise Fail(f"the server's reset reached the client as {d!r}, not as a reset")
    except ConnectionResetError:
        pass
    s.close()
    s = connect(lp2)
    s.sendall(b"data before the reset")
    time.sleep(0.3)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    env.wait_for(watcher, r"^(eof|reset)$", 5)
    check("reset" in watcher.text().split(), f"the server saw the client's reset as: {watcher.text()}")
    env.wait_stat(px, "errors", "client_reset", 1)
    env.wait_stat(px, "errors", "server_reset", 1)
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def ident_of(port, host="127.0.0.1", source=None):
    s = connect(port, host, source=source)
    name = recv_line(s)
    return s, name


def t_failover(env):
    """A server that is down: connects retried on the next server; health
    checks take it out and bring it back when it recovers."""
    a, b, lp = env.port(), env.port(), env.port()
    sa = env.serve("ident=A", "127.0.0.1", a)
    env.serve("ident=B", "127.0.0.1", b)
    cfg = write_cfg(env, "fo.yaml", f"""
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p, timeouts: {{connect: 1s}}}}
pools:
  - name: p
    balance: roundrobin
    retries: 2
    health: {{interval: 200ms, timeout: 150ms, rise: 2, fall: 2}}
    servers: [{{address: "127.0.0.1:{a}"}}, {{address: "127.0.0.1:{b}"}}]
""")
    px = env.proxy(["--config", cfg])
    seen = set()
    for _ in range(6):
        s, n = ident_of(lp)
        seen.add(n)
        s.close()
    check(seen == {"A", "B"}, f"round robin over both servers gave {seen}")
    # A goes away: every connection still succeeds (retried on B at once),
    # then the checks mark A down.
    sa.p.kill()
    sa.p.wait()
    for _ in range(6):
        s, n = ident_of(lp)
        check(n == "B", f"with A down a client got {n!r}")
        s.close()
    env.wait_for(next(p for p in env.procs if p.name == "tlproxy"), r"server p/127\.0\.0\.1:%d is down" % a, 5)
    check(env.stat(px, "server_state", f"p/127.0.0.1:{a}") == 0, "A's state is not down in the stats")
    # A comes back: after `rise` passes it takes connections again.
    env.serve("ident=A", "127.0.0.1", a, name="serve-A-again")
    env.wait_for(px, r"server p/127\.0\.0\.1:%d is up" % a, 5)
    seen = set()
    for _ in range(6):
        s, n = ident_of(lp)
        seen.add(n)
        s.close()
    check(seen == {"A", "B"}, f"after A recovered clients got {seen}")
    st = env.stats(px)
    check(st["health_changes"]["0"] >= 2, f"health_changes {st['health_changes']}")
    check(st["health_checks"]["fail"] >= 2, f"health_checks {st['health_checks']}")
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_retry_wide(env):
    """A retry leaves out every server its connection tried, in a pool
    wider than 64: with `hash`, a client whose server is dead would get
    the same server again on each retry unless it is left out. 80
    servers, the last 16 (beyond the first 64) refusing; 60 clients from
    different addresses are all served, none closed."""
    b, d, lp = env.port(), env.port(), env.port()
    env.serve("ident=W", "0.0.0.0", b)
    alive = [f'{{address: "127.0.0.{k}:{b}"}}' for k in range(1, 65)]
    dead = [f'{{address: "127.0.0.{k}:{d}"}}' for k in range(65, 81)]
    log = env.path("rw.log")
    cfg = write_cfg(env, "rw.yaml", f"""
access_log: {log}
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
pools:
  - name: p
    balance: hash
    retries: 10
    servers: [{", ".join(alive + dead)}]
""")
    px = env.proxy(["--config", cfg], env={"TL_SHARDS": "1"})
    for k in range(1, 61):
        s = connect(lp, source=f"127.0.1.{k}")
        n = recv_line(s)
        s.close()
        if n != "W":
            st = env.stats(px)
            env.stop(px)
            check(False, f"the client from 127.0.1.{k} got {n!r}: its retries did not leave out "
                  f"the dead servers they tried (errors {st['errors']}; servers down: "
                  f"{[r for r, v in st.get('server_state', {}).items() if r != '_per_shard' and v == 0]}; "
                  f"access log: {open(log).read()[-2000:] if os.path.exists(log) else 'none'})")
    st = env.stats(px)["errors"]
    check(st.get("connect_failed", 0) == 0, f"clients closed after their retries: {st}")
    check(env.stop(px) == 0, "tlproxy did not exit 0")
    # A client whose server was dead says so in its line: retries spent.
    text = open(log).read()
    check(re.search(r" web 127\.0\.1\.\d+:\d+ 127\.0\.0\.\d+:%d in=0 out=2 ms=[\d.]+ end=done "
                    r"retries=[1-9]" % b, text),
          f"no line of a client served after a retry: {text[-1000:]}")


def t_health_expect(env):
    """Health checks with send/expect: a server whose reply does not start
    with expect goes down; a PROXY-sending pool's checks send a header
    without addresses (LOCAL), which the server sees."""
    a, b, pps, lp, lp2 = env.port(), env.port(), env.port(), env.port(), env.port()
    env.serve("ident=A", "127.0.0.1", a)
    env.serve("ident=B", "127.0.0.1", b)
    env.serve("pp", "127.0.0.1", pps)
    cfg = write_cfg(env, "he.yaml", f"""
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
  - {{name: ppl, listen: "127.0.0.1:{lp2}", pool: ppp}}
pools:
  - name: p
    health: {{interval: 200ms, timeout: 150ms, rise: 1, fall: 1, send: "hello\\n", expect: "A\\n"}}
    servers: [{{address: "127.0.0.1:{a}"}}, {{address: "127.0.0.1:{b}"}}]
  - name: ppp
    proxy_protocol: v2
    health: {{interval: 200ms, timeout: 150ms, rise: 1, fall: 1, expect: "v2 LOCAL\\n"}}
    servers: [{{address: "127.0.0.1:{pps}"}}]
""")
    px = env.proxy(["--config", cfg])
    env.wait_for(px, r"server p/127\.0\.0\.1:%d is down \(health check: unexpected reply" % b, 5)
    for _ in range(4):
        s, n = ident_of(lp)
        check(n == "A", f"with B failing its check a client got {n!r}")
        s.close()
    time.sleep(0.6)
    check(f"server p/127.0.0.1:{a} is down" not in px.text(), "A went down although it answers as expected")
    check(f"server ppp/127.0.0.1:{pps} is down" not in px.text(), "the LOCAL header check failed")
    s = connect(lp2)
    me = s.getsockname()
    check(recv_line(s) == f"v2 TCP4 127.0.0.1 127.0.0.1 {me[1]} {lp2}", "a client's header after LOCAL checks")
    s.close()
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_passive(env):
    """Without health checks: failed connects to a dead server mark it down
    for a while (passive), and clients are retried on the next server; a
    connect that hangs is given up at timeouts.connect and retried too. One
    failure fewer than `failures` leaves the server up; it comes back
    after down_for."""
    a, b, h, lp, lp2, lsolo = env.port(), env.port(), env.port(), env.port(), env.port(), env.port()
    sock = env.path("admin.sock")
    env.serve("ident=B", "127.0.0.1", b)
    # A server that never accepts: its queue full, new SYNs are dropped.
    hang = socket.socket()
    hang.bind(("127.0.0.1", h))
    hang.listen(0)
    fill = []
    for _ in range(3):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(("127.0.0.1", h))
        fill.append(f)
    time.sleep(0.2)
    cfg = write_cfg(env, "pv.yaml", f"""
admin: {sock}
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
  - {{name: slow, listen: "127.0.0.1:{lp2}", pool: q, timeouts: {{connect: 300ms}}}}
  - {{name: solo, listen: "127.0.0.1:{lsolo}", pool: solo}}
pools:
  - name: p
    retries: 1
    passive: {{failures: 2, down_for: 2s}}
    servers: [{{address: "127.0.0.1:{a}"}}, {{address: "127.0.0.1:{b}"}}]
  - name: q
    retries: 1
    servers: [{{address: "127.0.0.1:{h}"}}, {{address: "127.0.0.1:{b}"}}]
  - name: solo
    retries: 0
    passive: {{failures: 2, down_for: 2s}}
    servers: [{{address: "127.0.0.1:{a}"}}]
""")
    px = env.proxy(["--config", cfg], env={"TL_SHARDS": "1"})
    for _ in range(8):
        s, n = ident_of(lp)
        check(n == "B", f"a client got {n!r}, want B (A is dead)")
        s.close()
    env.wait_for(px, r"server p/127\.0\.0\.1:%d is down for 2000 ms" % a, 5)
    check(env.stat(px, "errors", "connect_failed") == 0, "a client was closed although B was up")
    slow = 0
    for _ in range(4):
        t0 = time.time()
        s, n = ident_of(lp2)
        dt = time.time() - t0
        check(n == "B", f"a client of the pool with a hanging server got {n!r}")
        check(dt < 1.5, f"a retry after a hanging connect took {dt:.2f} s")
        slow += dt > 0.25
        s.close()
    check(slow >= 1, "no connect ever waited for timeouts.connect: the hanging server was never tried")
    for f in fill:
        f.close()
    hang.close()
    # One failure is not enough (failures: 2), two are; after down_for the
    # server takes connections again.
    def state():
        m = re.search(r"solo/127\.0\.0\.1:%d state=(\S+)" % a, admin(sock, "show servers solo"))
        return m.group(1) if m else None
    s = connect(lsolo)
    check(is_closed(s), "a client of a pool whose one server is dead was served")
    s.close()
    env.wait_stat(px, "errors", "connect_failed", 1)
    check(state() == "up", f"one failed connect took the server down (failures: 2): {state()}")
    s = connect(lsolo)
    check(is_closed(s), "a client of a pool whose one server is dead was served")
    s.close()
    env.wait_for(px, r"server solo/127\.0\.0\.1:%d is down for 2000 ms: 2 failed" % a, 5)
    t0 = time.time()
    check(state() == "passive-down", f"two failed connects did not take the server down: {state()}")
    s = connect(lsolo)
    check(is_closed(s), "a client was served with the pool's one server down")
    s.close()
    env.wait_stat(px, "errors", "no_server", 1)
    env.serve("ident=A", "127.0.0.1", a)
    while state() != "up":
        check(time.time() - t0 < 5, f"the server is still {state()} {time.time() - t0:.1f} s after down_for 2s")
        time.sleep(0.05)
    check(time.time() - t0 > 1.5, f"the server came back {time.time() - t0:.2f} s into down_for 2s")
    s, n = ident_of(lsolo)
    check(n == "A", f"the server back after down_for did not serve: {n!r}")
    s.close()
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_maxconns_backlog(env):
    """--max-conns: at the process's limit the listeners stop accepting;
    clients past it wait (in the backlog, or held) without being refused,
    and each place freed, on whichever shard, serves one of them."""
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--max-conns", "4",
                    "--shards", "2"])
    fd0 = env.fds(px)
    held = [ident_of(lp)[0] for _ in range(4)]
    waiting = [connect(lp) for _ in range(3)]
    r, _, _ = select.select(waiting, [], [], 1)
    check(not r, f"{len(r)} clients past --max-conns 4 were served or closed: "
          f"{[x.recv(100) for x in r]}, errors {env.stats(px)['errors']}")
    st = env.stats(px)["errors"]
    check(st.get("limit", 0) == 0 and st.get("connect_failed", 0) == 0,
          f"clients past --max-conns were refused: {st}")
    for k in range(3):
        held.pop(0).close()
        # 10 s: serving one means an accept, a connect and the python
        # server's answer, which took over 3 s on a loaded machine (twice,
        # on epoll in a chroot run); a second client served would be seen
        # as soon as the first.
        r, _, _ = select.select(waiting, [], [], 10)
        if len(r) == 1:
            r2, _, _ = select.select([w for w in waiting if w is not r[0]], [], [], 0.2)
            r += r2
        check(len(r) == 1, f"{len(r)} waiting clients served when one place freed (round {k})")
        check(recv_line(r[0]) == "S", "a waiting client was not served")
        waiting.remove(r[0])
        held.append(r[0])
    for h in held:
        h.close()
    s, n = ident_of(lp)
    check(n == "S", "a new client after the wait was not served")
    s.close()
    st = env.stats(px)["errors"]
    check(st.get("limit", 0) == 0 and st.get("connect_failed", 0) == 0, f"errors: {st}")
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_fd_limit(env):
    """At its descriptor limit (a low RLIMIT_NOFILE) the proxy stops
    accepting instead of failing connects: its servers stay up (active
    checks and passive failures count nothing of EMFILE, with fall 2 over
    three rounds and failures 1), clients past the limit wait and are served, in turn, as
    connections end, none closed as connect_failed, and the waiting costs
    no CPU. Run twice: with an odd number of descriptors free the last
    client accepted finds none to connect with (and waits held), with an
    even number the accept itself finds none."""
    import resource
    a, b, lp = env.port(), env.port(), env.port()
    env.serve("ident=A", "127.0.0.1", a)
    env.serve("ident=B", "127.0.0.1", b)
    sock = env.path("admin.sock")
    cfg = write_cfg(env, "fd.yaml", f"""
admin: {sock}
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
pools:
  - name: p
    health: {{interval: 1s, timeout: 1s, rise: 1, fall: 2}}
    passive: {{failures: 1, down_for: 30s}}
    servers: [{{address: "127.0.0.1:{a}"}}, {{address: "127.0.0.1:{b}"}}]
""")

    def at_limit(limit, name):
        def low():
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
        return env.proxy(["--config", cfg], name=name, env={"TL_SHARDS": "1"}, preexec=low)

    def cpu(pr):
        f = open(f"/proc/{pr.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    probe = at_limit(256, "tlproxy-probe")
    base = env.fds(probe)
    env.stop(probe)
    for parity in (1, 0):
        limit = base + 2 * 12 + parity
        px = at_limit(limit, f"tlproxy-{parity}")
        fd0 = env.fds(px)
        check(fd0 == base, f"tlproxy holds {fd0} descriptors at the start, {base} before")
        # One at a time (a burst would have its clients accepted first and
        # their connects wait): 12 are served, the rest wait.
        served, waiting = [], []
        for _ in range(12 + 6):
            s = connect(lp)
            if waiting or not select.select([s], [], [], 3.0)[0]:
                waiting.append(s)
                continue
            line = recv_line(s, 2)
            check(line in ("A", "B"), f"a client at the descriptor limit got {line!r} (closed?)")
            served.append(s)
        check(len(served) == 12 and len(waiting) == 6,
              f"{len(served)} served and {len(waiting)} waiting with 12 pairs of descriptors free")
        check(not select.select(waiting, [], [], 0.5)[0], "a client past the descriptor limit was served or closed")
        env.wait_for(px, r"Too many open files: accepting stops until a descriptor is free", 5)
        c0 = cpu(px)
        time.sleep(3.0)  # three health rounds at the limit (fall 2)
        used = cpu(px) - c0
        check(used < 0.5, f"waiting at the descriptor limit took {used:.2f} s of CPU in 3 s")
        # (The stats region, not the admin socket: a client of that needs a
        # descriptor too.)
        ss = env.stats(px)["server_state"]
        check(ss.get(f"p/127.0.0.1:{a}") == 1 and ss.get(f"p/127.0.0.1:{b}") == 1,
              f"servers went down at the proxy's own descriptor limit: {ss}")
        check(not re.search(r"is down", px.text()), f"a server was marked down: {px.text()[-500:]}")
        st = env.stats(px)["errors"]
        check(st.get("connect_failed", 0) == 0 and st.get("limit", 0) == 0,
              f"clients were refused at the descriptor limit: {st}")
        # Places freed one by one serve the waiting clients.
        while waiting:
            served.pop(0).close()
            r, _, _ = select.select(waiting, [], [], 3)
            check(r, f"no waiting client was served when a connection ended ({len(waiting)} waiting)")
            for s in r:
                check(recv_line(s, 2) in ("A", "B"), "a waiting client was not served")
                waiting.remove(s)
                served.append(s)
        for s in served:
            check(echo_ok(s, b"still here"), "a connection served at the limit does not forward")
            s.close()
        env.wait_stat(px, "conns_open", "0", 0)
        out = admin(sock, "show servers")
        check(out.count("state=up") == 2 and "health=down" not in out, f"servers not up after the limit: {out}")
        st = env.stats(px)["errors"]
        check(st.get("connect_failed", 0) == 0, f"clients were refused at the descriptor limit: {st}")
        env.settle_fds(px, fd0)
        check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_dns(env):
    """Servers by host name, re-resolved: a DNS responder on loopback reached
    through a private /etc/resolv.conf (a mount namespace); the fleet moves
    from one address to another without dropping the open connection."""
    if os.geteuid() != 0:
        raise Skip("needs root (unshare -m, a DNS responder on port 53)")
    need("unshare")
    # What unshare -m does before the command runs; where it is refused
    # (a container without CAP_SYS_ADMIN; a chroot, whose root is no mount
    # point) a mount there could reach the host's /etc/resolv.conf.
    why = refusal([("unshare(CLONE_NEWNS)", f"call(libc.unshare({CLONE_NEWNS}))"),
                   ("making / private (mount MS_REC|MS_PRIVATE)",
                    f"call(libc.mount(None, b'/', None, {MS_REC | MS_PRIVATE}, None))")])
    if why:
        hint = " (/ is no mount point here: a chroot?)" if "EINVAL" in why else ""
        raise Skip(f"no private mount namespace for tlproxy's /etc/resolv.conf: {why}{hint}")
    ns_ip = f"127.{random.randint(1, 250)}.{random.randint(1, 250)}.53"
    answers = env.path("answers")
    with open(answers, "w") as f:
        f.write("127.0.0.2\n")
    resolv = write_cfg(env, "resolv.conf", f"nameserver {ns_ip}\noptions timeout:1 attempts:2\n")
    env.start("dns", [sys.executable, os.path.abspath(__file__), "--dns", ns_ip, answers], wait_line=r"^ready$")
    port, lp = env.port(), env.port()
    env.serve("ident=A", "127.0.0.2", port)
    env.serve("ident=B", "127.0.0.3", port)
    cfg = write_cfg(env, "dns.yaml", f"""
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
pools:
  - name: p
    resolve_interval: 1s
    servers: [{{address: "backend.test:{port}"}}]
""")
    script = f"mount --bind {resolv} /etc/resolv.conf && exec \"$@\""
    px = env.proxy(["--config", cfg], prefix=["unshare", "-m", "sh", "-c", script, "sh"])
    s_old, n = ident_of(lp)
    check(n == "A", f"first answer 127.0.0.2: a client got {n!r}")
    with open(answers, "w") as f:
        f.write("127.0.0.3\n")
    env.wait_for(px, r"backend\.test now resolves to 1 address: 127\.0\.0\.3", 10)
    # The shards take the new list at their next pass (over the mesh).
    deadline = time.time() + 3
    while True:
        s, n = ident_of(lp)
        s.close()
        if n == "B" or time.time() > deadline:
            break
        time.sleep(0.05)
    for _ in range(4):
        s, n = ident_of(lp)
        check(n == "B", f"after the DNS change a client got {n!r}")
        s.close()
    check(echo_ok(s_old, b"still here"), "the connection opened before the change was dropped")
    with open(answers, "w") as f:
        f.write("127.0.0.2\n127.0.0.3\n")
    env.wait_for(px, r"backend\.test now resolves to 2 addresses", 10)
    time.sleep(0.3)
    seen = set()
    for _ in range(6):
        s, n = ident_of(lp)
        seen.add(n)
        s.close()
    check(seen == {"A", "B"}, f"with two addresses clients got {seen}")
    s_old.close()
    check(env.stat(px, "dns", "changed") >= 2, "dns[changed] not counted")
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_proxy_protocol(env):
    """PROXY headers sent (v1, v2) to a server that parses them, and accepted
    from trusted peers only: the server sees the addresses the header said."""
    up, l1, l2, l3 = env.port(), env.port(), env.port(), env.port()
    env.serve("pp", "127.0.0.1", up)
    cfg = write_cfg(env, "pp.yaml", f"""
listeners:
  - {{name: v1, listen: "127.0.0.1:{l1}", pool: v1}}
  - {{name: v2, listen: "127.0.0.1:{l2}", pool: v2}}
  - {{name: lb, listen: "127.0.0.1:{l3}", pool: v1, proxy_protocol_from: ["127.0.0.2"]}}
pools:
  - {{name: v1, proxy_protocol: v1, servers: [{{address: "127.0.0.1:{up}"}}]}}
  - {{name: v2, proxy_protocol: v2, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    s = connect(l1)
    me = s.getsockname()
    line = recv_line(s)
    check(line == f"v1 TCP4 127.0.0.1 127.0.0.1 {me[1]} {l1}", f"v1 header seen: {line!r}")
    check(echo_ok(s), "no echo after the v1 header")
    s.close()
    s = connect(l2)
    me = s.getsockname()
    line = recv_line(s)
    check(line == f"v2 TCP4 127.0.0.1 127.0.0.1 {me[1]} {l2}", f"v2 header seen: {line!r}")
    check(echo_ok(s), "no echo after the v2 header")
    s.close()
    # A trusted load balancer (127.0.0.2) says who the client is.
    s = connect(l3, source="127.0.0.2")
    s.sendall(b"PROXY TCP4 192.0.2.7 198.51.100.1 4242 443\r\nhello")
    want = b"v1 TCP4 192.0.2.7 198.51.100.1 4242 443\nhello"
    got = b""
    s.settimeout(5)
    while len(got) < len(want):
        d = s.recv(100)
        if not d:
            break
        got += d
    check(got == want, f"accepted header and the bytes after it passed on as {got!r}")
    s.close()
    # A binary v2 header from the trusted peer.
    body = socket.inet_aton("203.0.113.9") + socket.inet_aton("198.51.100.2") + struct.pack("!HH", 5555, 80)
    hdr = b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", len(body)) + body
    s = connect(l3, source="127.0.0.2")
    s.sendall(hdr + b"x")
    line = recv_line(s)
    check(line == "v1 TCP4 203.0.113.9 198.51.100.2 5555 80", f"v2 header passed on as {line!r}")
    s.close()
    # A malformed header from the trusted peer: closed, nothing forwarded.
    s = connect(l3, source="127.0.0.2")
    s.sendall(b"PROXY TCP4 192.0.2.7 not-an-ip 1 2\r\n")
    check(is_closed(s), "a malformed PROXY header was not refused")
    s.close()
    # Someone else's PROXY line is not believed: forwarded as data.
    s = connect(l3, source="127.0.0.1")
    me = s.getsockname()
    s.sendall(b"PROXY TCP4 192.0.2.7 198.51.100.1 4242 443\r\n")
    line = recv_line(s)
    check(line == f"v1 TCP4 127.0.0.1 127.0.0.1 {me[1]} {l3}", f"untrusted peer's header was believed: {line!r}")
    s.close()
    env.wait_stat(px, "errors", "proxy_header_bad", 1)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def make_cert(env, cn):
    key, crt = env.path(cn + ".key"), env.path(cn + ".crt")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=" + cn],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"openssl req failed: {r.stderr}")
    return key, crt


def s_client(port, name):
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", name],
                       input="", capture_output=True, text=True, timeout=20)
    m = re.search(r"subject=.*CN\s*=\s*([\w.-]+)", r.stdout)
    return m.group(1) if m else None


def t_sni(env):
    """TLS passthrough by SNI with openssl s_server and s_client: each name
    reaches its server, others the default; a client that is not TLS, or
    silent past the peek deadline, is closed."""
    need("openssl")
    pa, pb, lp = env.port(), env.port(), env.port()
    for cn, port in (("srva", pa), ("srvb", pb)):
        key, crt = make_cert(env, cn)
        env.start("s_server-" + cn, ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-key", key,
                                     "-cert", crt, "-www", "-quiet"], stdin=subprocess.PIPE)
    for port in (pa, pb):
        deadline = time.time() + 5
        while True:
            try:
                connect(port).close()
                break
            except OSError:
                check(time.time() < deadline, "s_server did not start")
                time.sleep(0.05)
    cfg = write_cfg(env, "sni.yaml", f"""
listeners:
  - name: tls
    listen: "127.0.0.1:{lp}"
    pool: a
    sni_timeout: 500ms
    sni:
      - {{name: "a.example.test", pool: a}}
      - {{name: "*.b.example.test", pool: b}}
pools:
  - {{name: a, servers: [{{address: "127.0.0.1:{pa}"}}]}}
  - {{name: b, servers: [{{address: "127.0.0.1:{pb}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    fd0 = env.fds(px)
    check(s_client(lp, "a.example.test") == "srva", "a.example.test did not reach server a")
    check(s_client(lp, "x.b.example.test") == "srvb", "x.b.example.test did not reach server b")
    check(s_client(lp, "b.example.test") == "srva", "b.example.test (no rule) did not reach the default")
    s = connect(lp)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    check(is_closed(s), "a client that is not TLS was not closed")
    s.close()
    s = connect(lp)
    t0 = time.time()
    check(is_closed(s, 5), "a silent client was not closed at the peek deadline")
    check(time.time() - t0 < 2.5, f"the peek deadline of 500 ms took {time.time() - t0:.2f} s")
    s.close()
    env.wait_stat(px, "errors", "sni_bad", 1)
    env.wait_stat(px, "errors", "peek_timeout", 1)
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def tls_hello(sni, pad=0, sni_twice=None, cut=None):
    """A ClientHello in one TLS record: server_name sni (and a second
    server_name extension if sni_twice), a padding extension of pad bytes
    first; cut: only the first cut bytes."""
    def ext_sni(name):
        n = name.encode()
        return struct.pack("!HHHBH", 0, len(n) + 5, len(n) + 3, 0, len(n)) + n
    exts = b""
    if pad:
        exts += struct.pack("!HH", 21, pad) + bytes(pad)
    exts += ext_sni(sni)
    if sni_twice:
        exts += ext_sni(sni_twice)
    body = (b"\x03\x03" + bytes(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" +
            struct.pack("!H", len(exts)) + exts)
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    rec = b"\x16\x03\x01" + struct.pack("!H", len(hs)) + hs
    return rec[:cut] if cut else rec


def t_peek_hostile(env):
    """Hostile clients on a listener that reads PROXY headers and
    ClientHellos first: 600 slow handshakes on one shard do not make
    legitimate TLS clients wait or fail (the peek reads into a record of
    each connection's own); slow clients past the small record wait for a
    big buffer first come first served, and take none from small hellos; a
    PROXY v1 line that cannot be valid is refused at once (proxy_header_bad,
    not at the peek deadline); a hello with two server_name extensions is
    refused (sni_bad)."""
    need("openssl")
    import resource
    import ssl
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 and hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    pt, pi, lp, lpp = env.port(), env.port(), env.port(), env.port()
    key, crt = make_cert(env, "legit")
    env.start("s_server", ["openssl", "s_server", "-accept", f"127.0.0.1:{pt}", "-key", key,
                           "-cert", crt, "-www", "-quiet"], stdin=subprocess.PIPE)
    env.serve("ident=I", "127.0.0.1", pi)
    deadline = time.time() + 5
    while True:
        try:
            connect(pt).close()
            break
        except OSError:
            check(time.time() < deadline, "s_server did not start")
            time.sleep(0.05)
    cfg = write_cfg(env, "peek.yaml", f"""
listeners:
  - name: tls
    listen: "127.0.0.1:{lp}"
    pool: tls
    sni_timeout: 10s
    sni:
      - {{name: "legit.example.test", pool: tls}}
      - {{name: "id.example.test", pool: id}}
  - name: pp
    listen: "127.0.0.1:{lpp}"
    pool: id
    proxy_protocol_from: ["127.0.0.0/8"]
pools:
  - {{name: tls, servers: [{{address: "127.0.0.1:{pt}"}}]}}
  - {{name: id, servers: [{{address: "127.0.0.1:{pi}"}}]}}
""")
    px = env.proxy(["--config", cfg], env={"TL_SHARDS": "1"})
    fd0 = env.fds(px)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE

    def legit(n, threads=4):
        times, fails = [], []
        lock = threading.Lock()

        def one():
            t0 = time.time()
            try:
                s = connect(lp, timeout=8)
                ss = ctx.wrap_socket(s, server_hostname="legit.example.test")
                ss.sendall(b"GET / HTTP/1.0\r\n\r\n")
                got = ss.recv(64)
                ss.close()
                ok = got.startswith(b"HTTP/1.0 200")
            except (OSError, ssl.SSLError) as e:
                ok, got = False, repr(e)
            with lock:
                (times if ok else fails).append(time.time() - t0 if ok else got)

        def worker(k):
            for _ in range(k):
                one()
        ts = [threading.Thread(target=worker, args=(n // threads,)) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        times.sort()
        return times, fails

    times, fails = legit(40)
    check(not fails and len(times) == 40, f"legitimate TLS clients failed with no load: {fails[:3]}")
    # 600 slow handshakes: connected, a piece of a hello sent, then silence.
    partial = tls_hello("slow.example.test", pad=600)[:200]
    slow = []
    for i in range(600):
        s = connect(lp)
        s.sendall(partial)
        slow.append(s)
    time.sleep(0.3)
    t0 = time.time()
    times, fails = legit(40)
    check(not fails and len(times) == 40,
          f"{len(fails)} of 40 legitimate TLS clients failed beside 600 slow handshakes: {fails[:3]}")
    p99 = times[int(len(times) * 0.99) - 1] if times else 0
    check(times[-1] < 2.0, f"legitimate TLS clients beside 600 slow handshakes: slowest {times[-1]:.2f} s, "
          f"p99 {p99:.2f} s, median {times[len(times) // 2]:.3f} s")
    check(all(not is_closed(s, 0.01) for s in slow[:20]), "a slow handshake was closed before sni_timeout")
    # Past the record: 64 slow hellos of 12 KiB hold the big buffers, a
    # 65th waits; a complete 6 KiB hello waits behind it, and gets the
    # second buffer freed; small hellos go on meanwhile.
    bigpart = tls_hello("slow.example.test", pad=12000, cut=5000)
    bigs = []
    for i in range(65):
        s = connect(lp)
        s.sendall(bigpart)
        bigs.append(s)
    time.sleep(0.3)
    big_ok = connect(lp)
    big_ok.sendall(tls_hello("id.example.test", pad=6000))
    big_ok.settimeout(0.5)
    try:
        got = big_ok.recv(10)
        raise Fail(f"a 6 KiB hello was served while every big buffer was held: {got!r}")
    except socket.timeout:
        pass
    times, fails = legit(8, threads=2)
    check(not fails, f"small hellos failed while the big buffers were held: {fails[:3]}")
    bigs.pop(0).close()
    time.sleep(0.3)
    big_ok.settimeout(0.3)
    try:
        got = big_ok.recv(10)
        raise Fail(f"a waiting hello jumped the line: {got!r}")
    except socket.timeout:
        pass
    bigs.pop(0).close()
    t0 = time.time()
    got = recv_line(big_ok, 3)
    check(got == "I", f"the 6 KiB hello was not served when a big buffer came free: {got!r}")
    check(time.time() - t0 < 1.0, f"the 6 KiB hello waited {time.time() - t0:.2f} s for a freed buffer")
    big_ok.close()
    for s in slow + bigs:
        s.close()
    env.wait_stat(px, "conns_open", "0", 0, timeout=15)
    # A PROXY line that cannot be valid: refused at once.
    bad0 = env.stat(px, "errors", "proxy_header_bad")
    s = connect(lpp)
    t0 = time.time()
    s.sendall(b"PROXY INVALID")
    check(is_closed(s, 5), "PROXY INVALID was not refused")
    dt = time.time() - t0
    s.close()
    check(dt < 0.5, f"PROXY INVALID (no line end) was refused after {dt:.2f} s, not at once")
    env.wait_stat(px, "errors", "proxy_header_bad", bad0 + 1)
    s = connect(lpp)
    s.sendall(b"PROXY TCP4 192.0.2.1 192.0.2.2 1000 2000\r\nhello")
    check(recv_line(s) == "I", "a good PROXY header was not served")
    s.close()
    # Two server_name extensions: refused, whichever name is routed.
    sni0 = env.stat(px, "errors", "sni_bad")
    s = connect(lp)
    s.sendall(tls_hello("id.example.test", sni_twice="legit.example.test"))
    check(is_closed(s, 3), "a hello with two server_name extensions was routed")
    s.close()
    env.wait_stat(px, "errors", "sni_bad", sni0 + 1)
    s = connect(lp)
    s.sendall(tls_hello("id.example.test"))
    check(recv_line(s) == "I", "a hello with one server_name was not routed")
    s.close()
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_limits(env):
    """max_conns of a listener: a client past it waits (the listener stops
    accepting: it stays in the backlog, or held) and is served when a place
    frees, nobody refused; max_conns of a server with the queue: waiting
    clients get a server when one frees up, past queue.max they are refused,
    past queue.timeout closed."""
    up, l1, l2 = env.port(), env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    cfg = write_cfg(env, "lim.yaml", f"""
listeners:
  - {{name: capped, listen: "127.0.0.1:{l1}", pool: open, max_conns: 3}}
  - {{name: queued, listen: "127.0.0.1:{l2}", pool: small, queue: {{max: 2, timeout: 4s}}}}
pools:
  - {{name: open, servers: [{{address: "127.0.0.1:{up}"}}]}}
  - {{name: small, servers: [{{address: "127.0.0.1:{up}", max_conns: 2}}]}}
""")
    px = env.proxy(["--config", cfg, ], env={"TL_SHARDS": "2"})
    fd0 = env.fds(px)
    held = [ident_of(l1)[0] for _ in range(3)]
    waiting = [connect(l1) for _ in range(2)]
    for w in waiting:
        w.settimeout(0.5)
        try:
            d = w.recv(10)
            raise Fail(f"a client past a listener's max_conns 3 was served or closed: {d!r}")
        except socket.timeout:
            pass
    check(env.stat(px, "errors", "limit") == 0, "a client past max_conns was refused, not made to wait")
    # One place freed, one waiting client served (each shard keeps its own
    # backlog, so which of the two is the kernel's choice).
    held.pop().close()
    r, _, _ = select.select(waiting, [], [], 3)
    check(len(r) == 1, f"{len(r)} of 2 waiting clients were served when one place freed")
    check(recv_line(r[0], 3) == "S", "a waiting client was not served when a place freed")
    other = waiting[1] if r[0] is waiting[0] else waiting[0]
    r, _, _ = select.select([other], [], [], 0.3)
    check(not r, "two waiting clients were served for one place freed")
    held.pop().close()
    check(recv_line(other, 3) == "S", "the other waiting client was not served when a place freed")
    waiting.pop(0).close()
    s, n = ident_of(l1)
    check(n == "S", "a place freed by a closed client was not given again")
    held += waiting + [s]
    for h in held:
        h.close()
    check(env.stat(px, "errors", "limit") == 0, "errors.limit counted a client that waited")
    # The queue.
    served = [ident_of(l2)[0] for _ in range(2)]
    t0 = time.time()
    # The second waits from well after the first: whichever shards took
    # them, the first is first in the process-wide line.
    waiting = [connect(l2)]
    time.sleep(0.25)
    waiting.append(connect(l2))
    for w in waiting:
        w.settimeout(0.2)
        try:
            d = w.recv(10)
            raise Fail(f"a client past max_conns was served at once: {d!r}")
        except socket.timeout:
            pass
    q = env.stats(px)["queued"]
    check(q["0"] == 2, f"queued gauge is {q}, want 2")
    over = connect(l2)
    check(is_closed(over), "a client past the queue's max was not refused")
    over.close()
    env.wait_stat(px, "errors", "queue_full", 1)
    served.pop().close()
    # The place goes to the client that has waited longest.
    r, _, _ = select.select(waiting, [], [], 1)
    check(r == [waiting[0]], f"{len(r)} queued clients answered when one place freed, "
          f"{'the first' if waiting[0] in r else 'not the first'}")
    first, second = waiting
    got = recv_line(first, 1)
    check(got == "S", f"the queued client was not served when a place freed: {got!r}")
    check(is_closed(second, 6), "the other queued client was not closed at queue.timeout")
    dt = time.time() - t0 - 0.25
    check(3.8 < dt < 5.5, f"queue.timeout of 4 s ended the wait after {dt:.2f} s")
    env.wait_stat(px, "errors", "queue_timeout", 1)
    for s in served + waiting:
        s.close()
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_drain(env):
    """SIGTERM drains: new clients refused, the open connection keeps working
    until it closes, then the process exits 0."""
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2"])
    s, n = ident_of(lp)
    px.p.send_signal(signal.SIGTERM)
    env.wait_for(px, "draining", 5)
    time.sleep(0.2)
    try:
        connect(lp).close()
        raise Fail("a new client was accepted while draining")
    except ConnectionRefusedError:
        pass
    check(echo_ok(s, b"still served"), "the open connection stopped working during the drain")
    check(px.p.poll() is None, "tlproxy exited with a connection still open")
    s.close()
    try:
        rc = px.p.wait(10)
    except subprocess.TimeoutExpired:
        raise Fail("tlproxy did not exit once its last connection closed")
    check(rc == 0, f"tlproxy exited {rc} after the drain")


def t_reload(env):
    """SIGHUP re-reads the file: new servers take the new clients, the open
    connection stays, a listener added is bound and one removed is closed;
    a broken file is refused and the old one stays."""
    a, b, lp, lp2 = env.port(), env.port(), env.port(), env.port()
    env.serve("ident=A", "127.0.0.1", a)
    env.serve("ident=B", "127.0.0.1", b)
    text = """
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{port}"}}]}}
"""
    two = """
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
  - {{name: extra, listen: "127.0.0.1:{lp2}", pool: q}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{port}"}}]}}
  - {{name: q, servers: [{{address: "127.0.0.1:{a}"}}]}}
"""
    cfg = write_cfg(env, "rl.yaml", text.format(lp=lp, port=a))
    px = env.proxy(["--config", cfg])
    fd0 = env.fds(px)
    s_old, n = ident_of(lp)
    check(n == "A", f"before the reload: {n!r}")
    write_cfg(env, "rl.yaml", two.format(lp=lp, lp2=lp2, port=b, a=a))
    px.p.send_signal(signal.SIGHUP)
    env.wait_for(px, "reloaded", 5)
    time.sleep(0.2)
    for _ in range(3):
        s, n = ident_of(lp)
        check(n == "B", f"after the reload a client got {n!r}")
        s.close()
    s, n = ident_of(lp2)
    check(n == "A", f"the listener added by the reload gave {n!r}")
    s.close()
    check(echo_ok(s_old, b"old one"), "the connection from before the reload was dropped")
    write_cfg(env, "rl.yaml", text.format(lp=lp, port=b))
    px.p.send_signal(signal.SIGHUP)
    env.wait_for(px, r"reloaded(.|\n)*reloaded", 5)
    time.sleep(0.2)
    try:
        connect(lp2).close()
        raise Fail("the listener removed by a reload still accepts")
    except ConnectionRefusedError:
        pass
    write_cfg(env, "rl.yaml", "listeners: [\n")
    px.p.send_signal(signal.SIGHUP)
    env.wait_for(px, "refused", 5)
    s, n = ident_of(lp)
    check(n == "B", f"after a refused reload a client got {n!r}")
    s.close()
    check(echo_ok(s_old, b"old one again"), "the old connection did not survive two reloads")
    s_old.close()
    env.wait_stat(px, "conns_open", "0", 0)
    env.settle_fds(px, fd0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def admin(path, cmd, timeout=5):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    s.sendall(cmd.encode() + b"\n")
    s.shutdown(socket.SHUT_WR)
    out = recv_all(s, timeout)
    s.close()
    return out.decode()


def t_admin(env):
    """The admin socket: show state, disable, drain and enable a server; a
    client of another user is refused (SO_PEERCRED)."""
    a, b, lp = env.port(), env.port(), env.port()
    env.serve("ident=A", "127.0.0.1", a)
    env.serve("ident=B", "127.0.0.1", b)
    sock = env.path("admin.sock")
    cfg = write_cfg(env, "adm.yaml", f"""
admin: {sock}
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{a}"}}, {{address: "127.0.0.1:{b}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    check(oct(os.stat(sock).st_mode & 0o777) == "0o600", f"admin socket mode {oct(os.stat(sock).st_mode)}")
    out = admin(sock, "show servers")
    check(f"p/127.0.0.1:{a} state=up" in out and f"p/127.0.0.1:{b} state=up" in out, f"show servers: {out}")
    check(admin(sock, f"disable p/127.0.0.1:{a}").strip() == "ok", "disable refused")
    for _ in range(4):
        s, n = ident_of(lp)
        check(n == "B", f"with A disabled a client got {n!r}")
        s.close()
    check(f"p/127.0.0.1:{a} state=disabled" in admin(sock, "show servers"), "disabled state not shown")
    check(admin(sock, f"drain p/127.0.0.1:{b}").strip() == "ok", "drain refused")
    s = connect(lp)
    check(is_closed(s), "with every server out a client was served")
    s.close()
    check(admin(sock, f"enable p/127.0.0.1:{a}").strip() == "ok", "enable refused")
    check(admin(sock, f"enable p/127.0.0.1:{b}").strip() == "ok", "enable refused")
    seen = set()
    for _ in range(4):
        s, n = ident_of(lp)
        seen.add(n)
        s.close()
    check(seen == {"A", "B"}, f"after enabling both: {seen}")
    check("no server" in admin(sock, "disable p/nowhere:1"), "an unknown server was not reported")
    check("unknown command" in admin(sock, "frobnicate"), "an unknown command was not reported")
    other = other_user(env, "other_user")
    if other is not None:
        # Let the other user reach it: SO_PEERCRED must refuse it.
        os.chmod(env.dir, 0o711)
        os.chmod(sock, 0o666)
        r = subprocess.run([sys.executable, "-c", f"""
import os, socket
os.setgroups([]); os.setgid({other}); os.setuid({other})
s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect({sock!r})
d = b""
try:
    s.sendall(b"show servers\\n"); s.shutdown(socket.SHUT_WR)
    while True:
        x = s.recv(4096)
        if not x: break
        d += x
except OSError:
    pass
print("GOT", len(d))
"""], capture_output=True, text=True, timeout=20)
        check("GOT 0" in r.stdout, f"another user's client was answered: {r.stdout} {r.stderr}")
        env.wait_for(px, f"admin: refused a client of uid {other}", 5)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_admin_lines(env):
    """The admin socket takes commands however they are split: far more than
    4 KiB of them in one write, lines cut at every byte; a line past 4096
    bytes gets an error and the next line is run; an unknown pool gets an
    error line; a client idle for admin_timeout is told and closed; a 17th
    client is told that all 16 slots are taken, and one place freed is
    given again."""
    a, lp = env.port(), env.port()
    env.serve("ident=A", "127.0.0.1", a)
    sock = env.path("admin.sock")
    cfg = write_cfg(env, "adm.yaml", f"""
admin: {sock}
admin_timeout: 2s
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{a}"}}]}}
""")
    px = env.proxy(["--config", cfg])

    def session(chunks, pause=0.0):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(sock)
        for c in chunks:
            s.sendall(c)
            if pause:
                time.sleep(pause)
        s.shutdown(socket.SHUT_WR)
        out = recv_all(s, 10).decode()
        s.close()
        return out

    # 2000 commands, 22 KB, in one write: an answer for each, in order.
    line = b"show pools\nshow servers p\n"
    out = session([line * 1000])
    want = f"p balance=roundrobin servers=1 queued=0\np/127.0.0.1:{a} state=up"
    check(out.count("p balance=roundrobin") == 1000 and out.count(f"p/127.0.0.1:{a} state=up") == 1000,
          f"1000 pairs of commands in one write: {out.count('balance=')} and "
          f"{out.count('state=up')} answers: {out[:200]!r}")
    check(out.startswith(want), f"answers out of order: {out[:200]!r}")
    # The same bytes cut at random places, written with pauses.
    rnd, data, chunks = random.Random(5), line * 20, []
    while data:
        k = rnd.randint(1, 9)
        chunks.append(data[:k])
        data = data[k:]
    out = session(chunks)
    check(out.count("balance=") == 20 and out.count("state=up") == 20, f"split commands: {out!r}")
    # Byte by byte, with pauses: the line waits for its end.
    out = session([bytes([c]) for c in b"show pools\n"], pause=0.01)
    check(out.startswith("p balance=roundrobin"), f"a command sent a byte at a time: {out!r}")
    # A line too long, then a good one.
    out = session([b"x" * 5000 + b"\n" + b"show pools\n"])
    check(out.startswith("line longer than 4096 bytes: skipped\np balance="), f"over-long line: {out!r}")
    out = session([b"show servers " + b"y" * 9000 + b"\nshow pools"])
    check(out.startswith("line longer than 4096 bytes: skipped\np balance="),
          f"over-long line in pieces, last line without its end: {out!r}")
    # An unknown pool.
    out = session([b"show servers nosuch\n"])
    check(out == "no pool 'nosuch' (show pools lists them)\n", f"show servers of an unknown pool: {out!r}")
    # Idle: told and closed after admin_timeout.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(sock)
    t0 = time.time()
    got = recv_all(s, 5).decode()
    dt = time.time() - t0
    s.close()
    check(got == "closing: idle for 2000 ms\n" and 1.9 < dt < 3.5,
          f"an idle admin client got {got!r} after {dt:.2f} s (admin_timeout 2s)")
    # Every slot taken: the 17th is told so; a freed slot is given again.
    held = []
    for _ in range(16):
        h = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        h.settimeout(5)
        h.connect(sock)
        h.sendall(b"show pools\n")
        check(recv_line(h).startswith("p balance="), "a held admin client was not answered")
        held.append(h)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(sock)
    got = recv_all(s, 5).decode()
    s.close()
    check(got == "busy: all 16 admin connections are in use; try again later\n",
          f"the 17th admin client got {got!r}")
    held.pop().close()
    time.sleep(0.2)
    check(session([b"show pools\n"]).startswith("p balance="), "a freed admin slot was not given again")
    for h in held:
        h.close()
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_check(env):
    """--check validates a file and names the line of each error."""
    good = write_cfg(env, "good.yaml", """
listeners:
  - {name: web, listen: "127.0.0.1:8080", pool: p}
pools:
  - {name: p, servers: [{address: "127.0.0.1:9000"}]}
""")
    r = subprocess.run([env.tlproxy, "--check", good], capture_output=True, text=True)
    check(r.returncode == 0 and "ok" in r.stdout, f"--check of a good file: {r.returncode} {r.stdout} {r.stderr}")
    bad = write_cfg(env, "bad.yaml", """listeners:
  - name: web
    listen: "127.0.0.1:8080"
    pool: nowhere
    timeouts: {idle: 300}
pools:
  - {name: p, servers: [{address: "127.0.0.1:99999"}]}
""")
    r = subprocess.run([env.tlproxy, "--check", bad], capture_output=True, text=True)
    check(r.returncode == 1, f"--check of a bad file exited {r.returncode}")
    for ln in ("bad.yaml:4:", "bad.yaml:5:", "bad.yaml:7:"):
        check(ln in r.stderr, f"--check did not name line {ln}: {r.stderr}")
    r = subprocess.run([env.tlproxy, "--listen", "127.0.0.1:1"], capture_output=True, text=True)
    check(r.returncode == 2 and "--upstream" in r.stderr, f"a missing --upstream: {r.returncode} {r.stderr}")
    # A bad command line is one line (the usage is --help's), an unknown
    # option named as such even with no value after it.
    check(len(r.stderr.strip().splitlines()) == 1, f"a bad command line printed {r.stderr!r}")
    r = subprocess.run([env.tlproxy, "--listen", "127.0.0.1:1", "--bogus"], capture_output=True, text=True)
    check(r.returncode == 2 and r.stderr == "tlproxy: unknown option '--bogus' (see --help)\n",
          f"an unknown option: {r.returncode} {r.stderr!r}")


def t_access_log(env):
    """The access log: a line per connection with bytes and cause, written by
    its own thread; SIGUSR1 reopens it after a rotation."""
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    log = env.path("access.log")
    cfg = write_cfg(env, "al.yaml", f"""
access_log: {log}
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p, deny: ["127.0.0.9"]}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    s, _ = ident_of(lp)
    check(echo_ok(s, b"12345"), "no echo")
    port = s.getsockname()[1]
    s.close()
    s = connect(lp, source="127.0.0.9")
    check(is_closed(s), "a denied client was served")
    s.close()
    deadline = time.time() + 5
    text = ""
    while time.time() < deadline:
        text = open(log).read()
        if text.count("\n") >= 2:
            break
        time.sleep(0.05)
    check(re.search(rf" web 127\.0\.0\.1:{port} 127\.0\.0\.1:{up} in=5 out=7 ms=[\d.]+ end=done retries=0\n", text),
          f"no line for the served connection: {text!r}")
    check(re.search(r" web 127\.0\.0\.9:\d+ - in=0 out=0 ms=[\d.]+ end=denied retries=0\n", text),
          f"no line for the denied one: {text!r}")
    os.rename(log, log + ".1")
    px.p.send_signal(signal.SIGUSR1)
    env.wait_for(px, "reopening", 5)
    time.sleep(0.2)
    s, _ = ident_of(lp)
    s.close()
    deadline = time.time() + 5
    while time.time() < deadline and not (os.path.exists(log) and "end=done" in open(log).read()):
        time.sleep(0.05)
    check(os.path.exists(log) and "end=done" in open(log).read(), "no line in the reopened log")
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_acl_idle(env):
    """Allow/deny lists, and the idle timeout."""
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    cfg = write_cfg(env, "acl.yaml", f"""
listeners:
  - name: web
    listen: "127.0.0.1:{lp}"
    pool: p
    allow: ["127.0.0.0/24", "127.0.1.0/24"]
    deny: ["127.0.0.5"]
    timeouts: {{idle: 400ms}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    for src, ok in (("127.0.0.1", True), ("127.0.1.1", True), ("127.0.0.5", False), ("127.0.2.1", False)):
        s = connect(lp, source=src)
        if ok:
            check(recv_line(s) == "S", f"allowed {src} was not served")
        else:
            check(is_closed(s), f"{src} was served although refused")
        s.close()
    env.wait_stat(px, "errors", "denied", 2)
    s, _ = ident_of(lp)
    t0 = time.time()
    check(is_closed(s, 5), "an idle connection was not closed")
    dt = time.time() - t0
    check(0.3 < dt < 2, f"the idle timeout of 400 ms took {dt:.2f} s")
    env.wait_stat(px, "errors", "idle_timeout", 1)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_sockets(env):
    """IPv6 and Unix-domain sockets on either side; balancing by hash keeps
    a client on one server; least connections spreads held connections."""
    a, b, lp6 = env.port(), env.port(), env.port()
    usock, lsock = env.path("up.sock"), env.path("listen.sock")
    env.serve("ident=U", f"unix:{usock}", 0)
    try:
        env.serve("ident=V6", "::1", a)
    except Fail:
        raise Skip("no IPv6 loopback")
    env.serve("ident=B", "127.0.0.1", b)
    lh, ll = env.port(), env.port()
    cfg = write_cfg(env, "sock.yaml", f"""
listeners:
  - {{name: six, listen: "[::1]:{lp6}", pool: unixpool}}
  - {{name: unix, listen: "unix:{lsock}", pool: six}}
  - {{name: hash, listen: "127.0.0.1:{lh}", pool: hashed}}
  - {{name: least, listen: "127.0.0.1:{ll}", pool: least}}
pools:
  - {{name: unixpool, servers: [{{address: "unix:{usock}"}}]}}
  - {{name: six, servers: [{{address: "[::1]:{a}"}}]}}
  - {{name: hashed, balance: hash, servers: [{{address: "[::1]:{a}"}}, {{address: "127.0.0.1:{b}"}}, {{address: "unix:{usock}"}}]}}
  - {{name: least, balance: leastconn, servers: [{{address: "[::1]:{a}"}}, {{address: "127.0.0.1:{b}"}}]}}
""")
    px = env.proxy(["--config", cfg, ], env={"TL_SHARDS": "2"})
    s, n = ident_of(lp6, "::1")
    check(n == "U" and echo_ok(s), f"IPv6 client to a Unix server: {n!r}")
    s.close()
    u = socket.socket(socket.AF_UNIX)
    u.settimeout(5)
    u.connect(lsock)
    check(recv_line(u) == "V6" and echo_ok(u), "Unix client to an IPv6 server failed")
    u.close()
    names = set()
    for _ in range(6):
        s, n = ident_of(lh, source="127.0.0.7")
        names.add(n)
        s.close()
    check(len(names) == 1, f"hash balancing moved one client across servers: {names}")
    held, names = [], []
    for _ in range(6):
        s, n = ident_of(ll)
        held.append(s)
        names.append(n)
    check(names.count("V6") == 3 and names.count("B") == 3, f"least connections gave {names}")
    for s in held:
        s.close()
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_user(env):
    """user: the process runs as that user after binding; the stats stay
    readable by it (and root)."""
    pw = need_nobody()
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    cfg = write_cfg(env, "user.yaml", f"""
user: nobody
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    status = open(f"/proc/{px.pid}/status").read()
    uid = re.search(r"^Uid:\s+(\d+)\s+(\d+)", status, re.M)
    check(uid and uid.group(1) == str(pw.pw_uid) and uid.group(2) == str(pw.pw_uid),
          f"uids: {uid.group(0) if uid else status}")
    caps = re.search(r"^CapEff:\s+([0-9a-f]+)", status, re.M).group(1)
    check(int(caps, 16) == 1 << 10, f"effective capabilities {caps}, want CAP_NET_BIND_SERVICE only")
    s, n = ident_of(lp)
    check(n == "S", "not served after dropping privileges")
    s.close()
    check(env.stat(px, "conns") >= 1, "stats not readable after the drop")
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_stats(env):
    """tlshard stats PID shows tlproxy's per-shard counters and gauges."""
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2"])
    held = []
    for _ in range(10):
        s, _ = ident_of(lp)
        echo_ok(s, b"x" * 100)
        held.append(s)
    st = env.stats(px)
    check(st["conns_open"]["0"] == 10, f"conns_open {st['conns_open']}")
    check(st["conns"]["0"] == 10, f"conns {st['conns']}")
    check(st["bytes_in"]["0"] == 1000, f"bytes_in {st['bytes_in']}")
    check(st["server_conns"][f"default/127.0.0.1:{up}"] == 10, f"server_conns {st['server_conns']}")
    check(st["server_state"][f"default/127.0.0.1:{up}"] == 1, f"server_state {st['server_state']}")
    table = subprocess.run([env.tlshard, "stats", str(px.pid)], capture_output=True, text=True).stdout
    check(re.search(r"^conns_open\s+gauge(\s+\d+)+\s+10$", table, re.M), f"tlshard table: {table}")
    check(f"server_conns[default/127.0.0.1:{up}]" in table, "server rows missing from the table")
    check("server_conns[1]" not in table, "unused server rows shown")
    for s in held:
        s.close()
    env.wait_stat(px, "conns_open", "0", 0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_noalloc(env):
    """Accepting, forwarding (plain, with PROXY headers sent and received,
    spliced) and closing allocate nothing on the shards once warm: their
    allocator calls, counted by an LD_PRELOAD shim, do not grow."""
    if os.environ.get("TLP_E2E_SANITIZED") or env.wrap:
        raise Skip("the sanitizer or wrapper owns the allocator")
    shim = os.environ.get("TLP_ALLOC_SHIM", "")
    if not os.path.exists(shim):
        raise Skip("no allocation shim (TLP_ALLOC_SHIM)")
    up, l1, l2, l3 = env.port(), env.port(), env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    adir = env.path("alloc")
    os.makedirs(adir)
    cfg = write_cfg(env, "na.yaml", f"""
listeners:
  - {{name: plain, listen: "127.0.0.1:{l1}", pool: p, timeouts: {{idle: 200ms}}}}
  - {{name: lb, listen: "127.0.0.1:{l2}", pool: v2, proxy_protocol_from: ["127.0.0.2"]}}
  - {{name: sp, listen: "127.0.0.1:{l3}", pool: p, splice: true}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
  - {{name: v2, proxy_protocol: v2, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    px = env.proxy(["--config", cfg], env={"LD_PRELOAD": shim, "TLP_ALLOC_DIR": adir, "TL_SHARDS": "2"})

    def allocs():
        out = os.path.join(adir, "count")
        if os.path.exists(out):
            os.unlink(out)
        open(os.path.join(adir, "ask"), "w").close()
        deadline = time.time() + 5
        while not os.path.exists(out):
            check(time.time() < deadline, "the shim did not answer")
            time.sleep(0.02)
        return int(open(out).read())

    def traffic(rounds):
        for i in range(rounds):
            s, n = ident_of(l1)
            check(n == "S" and echo_ok(s, b"x" * 3000), "plain connection failed")
            if i % 10 == 0:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            s = connect(l2, source="127.0.0.2")
            s.sendall(b"PROXY TCP4 192.0.2.1 192.0.2.2 1000 2000\r\n")
            check(recv_line(s).startswith("S"), "PROXY connection failed")
            s.close()
            if i % 5 == 0:
                # Bulk enough to splice: 64 KiB pieces echoed.
                s, n = ident_of(l3)
                for _ in range(6):
                    check(echo_ok(s, b"y" * 65536), "spliced connection failed")
                s.close()
        idle, _ = ident_of(l1)
        check(is_closed(idle, 3), "idle timeout did not fire")
        idle.close()
        env.wait_stat(px, "conns_open", "0", 0)

    traffic(100)
    before = allocs()
    check(before > 0, "the shim counted no allocation at all (the shards' setup makes some)")
    sp0 = env.stats(px)["splice"]["to_splice"]
    traffic(300)
    after = allocs()
    check(after == before, f"the shards allocated {after - before} times in steady state")
    sp = env.stats(px)["splice"]
    check(sp["to_splice"] > sp0, f"nothing spliced in the measured phase: {sp}")
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_sockopts(env):
    """Socket options of a listener apply to both sides: keepalive (its
    timer shows in ss) and buffer sizes (ss shows them, doubled)."""
    ss = need("ss")
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    cfg = write_cfg(env, "so.yaml", f"""
listeners:
  - name: web
    listen: "127.0.0.1:{lp}"
    pool: p
    socket: {{nodelay: false, keepalive: {{idle: 7s, interval: 3s, count: 2}}, rcvbuf: 64k, sndbuf: 96k}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    px = env.proxy(["--config", cfg])
    s, n = ident_of(lp)
    check(n == "S", "not served")
    for side, filt in (("client", f"( sport = :{lp} )"), ("server", f"( dport = :{up} )")):
        out = subprocess.run([ss, "-tnoim", "state", "established", filt], capture_output=True, text=True).stdout
        check("timer:(keepalive" in out, f"no keepalive on the {side} side: {out}")
        check("rb131072" in out and "tb196608" in out, f"buffer sizes on the {side} side: {out}")
    s.close()
    check(env.stop(px) == 0, "tlproxy did not exit 0")


def t_nofile(env):
    """RLIMIT_NOFILE: raised to what max_conns needs, or a clear line when
    the hard limit is lower (and cannot be raised)."""
    up, lp = env.port(), env.port()
    import resource

    def lim(soft, hard):
        return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    argv = [env.tlproxy, "--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "1"]
    log = env.path("nofile1.log")
    with open(log, "w") as f:
        p = subprocess.Popen(argv + ["--max-conns", "1000"], stdout=f, stderr=subprocess.STDOUT, preexec_fn=lim(256, 8192))
    pr = Proc("tlproxy-nofile", p, log)
    env.procs.append(pr)
    env.wait_for(pr, "running")
    limits = open(f"/proc/{p.pid}/limits").read()
    m = re.search(r"Max open files\s+(\d+)\s+(\d+)", limits)
    check(m and int(m.group(1)) == 3024, f"soft limit {m.group(1) if m else '?'}, want 2 x 1000 + 1024")
    check("cannot be raised" not in pr.text(), "a line about the limit although it was raised")
    env.stop(pr)
    log = env.path("nofile2.log")
    with open(log, "w") as f:
        p = subprocess.Popen(argv + ["--max-conns", "100000"], stdout=f, stderr=subprocess.STDOUT, preexec_fn=lim(256, 1024))
    pr = Proc("tlproxy-nofile2", p, log)
    env.procs.append(pr)
    env.wait_for(pr, "running")
    m = re.search(r"Max open files\s+(\d+)\s+(\d+)", open(f"/proc/{p.pid}/limits").read())
    if int(m.group(1)) < 201024:
        check(re.search(r"descriptor limit \(RLIMIT_NOFILE\) is \d+ and cannot be raised; the configured "
                        r"connection limits need up to 201024", pr.text()), f"no clear line: {pr.text()}")
    env.stop(pr)


def t_notify(env):
    """Under systemd (NOTIFY_SOCKET): READY=1 once listening, RELOADING=1 and
    READY=1 around a reload (one refused too), STOPPING=1 on SIGTERM."""
    up, lp = env.port(), env.port()
    path = env.path("notify.sock")
    n = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    n.bind(path)
    n.settimeout(5)
    cfg = write_cfg(env, "nt.yaml", f"""
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    px = env.proxy(["--config", cfg], env={"NOTIFY_SOCKET": path})
    got = [n.recv(100)]
    px.p.send_signal(signal.SIGHUP)
    got += [n.recv(100), n.recv(100)]
    # A reload that shard 0 refuses (a file is read fine, but its pools
    # would take the registry past 1024 since the start: the fifth of
    # these, 256 new pools each) ends with READY=1 too, or systemd would
    # wait for it until its timeout.
    for k in range(5):
        pools = "".join(f'  - {{name: p{k}_{i}, servers: [{{address: "127.0.0.1:{up}"}}]}}\n'
                        for i in range(256))
        write_cfg(env, "nt.yaml", f"""
listeners:
  - {{name: web, listen: "127.0.0.1:{lp}", pool: p{k}_0}}
pools:
""" + pools)
        px.p.send_signal(signal.SIGHUP)
        got += [n.recv(100), n.recv(100)]
    env.wait_for(px, "reload failed: more than 1024 pools since the start", 5)
    px.p.send_signal(signal.SIGTERM)
    got.append(n.recv(100))
    want = [b"READY=1"] + [b"RELOADING=1", b"READY=1"] * 6 + [b"STOPPING=1"]
    check(got == want, f"notifications: {got}")
    check(px.p.wait(10) == 0, "tlproxy did not exit 0")


def t_listen_fds(env):
    """Sockets handed over as systemd does (LISTEN_FDS, LISTEN_PID, from
    descriptor 3): the listeners with those addresses adopt them instead of
    binding; with SO_REUSEPORT on it (ReusePort=yes) the other shards join
    its group and every shard takes connections; a socket no listener names
    is closed."""
    up, lp = env.port(), env.port()
    env.serve("ident=S", "127.0.0.1", up)
    tcp = socket.socket()
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    tcp.bind(("127.0.0.1", lp))
    tcp.listen(64)
    upath = env.path("act.sock")
    us = socket.socket(socket.AF_UNIX)
    us.bind(upath)
    us.listen(64)
    extra = socket.socket()
    extra.bind(("127.0.0.1", 0))
    extra.listen(1)
    cfg = write_cfg(env, "lf.yaml", f"""
shards: 2
listeners:
  - {{name: act, listen: ["127.0.0.1:{lp}", "unix:{upath}"], pool: p}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    fds = [tcp.fileno(), us.fileno(), extra.fileno()]

    def child():
        # As systemd: the sockets at 3, 4, 5 and LISTEN_PID naming the child.
        moved = [os.dup(f) for f in fds]
        for i, f in enumerate(moved):
            os.dup2(f, 3 + i)
        os.environ["LISTEN_PID"] = str(os.getpid())
        os.environ["LISTEN_FDS"] = str(len(fds))

    log = env.path("lf.log")
    with open(log, "w") as f:
        p = subprocess.Popen([env.tlproxy, "--config", cfg], stdout=f, stderr=subprocess.STDOUT,
                             preexec_fn=child, pass_fds=fds)
    pr = Proc("tlproxy", p, log)
    pr.pid = p.pid
    env.procs.append(pr)
    env.wait_for(pr, "running")
    check("adopted 2 listening sockets" in pr.text(), f"no adoption line: {pr.text()}")
    check("matches no listener" in pr.text(), f"the spare socket was not reported: {pr.text()}")
    for _ in range(24):
        s, n = ident_of(lp)
        check(n == "S" and echo_ok(s), "a client of the adopted TCP socket was not served")
        s.close()
    u = socket.socket(socket.AF_UNIX)
    u.settimeout(5)
    u.connect(upath)
    check(recv_line(u) == "S", "a client of the adopted Unix socket was not served")
    u.close()
    st = env.stats(pr)
    check(all(v > 0 for v in st["conns"]["_per_shard"]["0"]), f"not every shard accepted: {st['conns']}")
    fdt = [os.readlink(f"/proc/{p.pid}/fd/{x}") for x in os.listdir(f"/proc/{p.pid}/fd")]
    ino = f"socket:[{os.fstat(extra.fileno()).st_ino}]"
    check(ino not in fdt, "the socket no listener names is still open in tlproxy")
    check(env.stop(pr) == 0, "tlproxy did not exit 0")


def start_nginx(env, up):
    root = env.path("www")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("x" * 4096)
    conf = write_cfg(env, "nginx.conf", f"""
daemon off; master_process off; worker_processes 1; error_log {env.dir}/nginx.err warn; pid {env.dir}/nginx.pid;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 1000000; server {{ listen 127.0.0.1:{up}; root {root}; }} }}
""")
    env.start("nginx", ["nginx", "-p", env.dir, "-c", conf])
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            connect(up).close()
            return
        except OSError:
            time.sleep(0.05)
    raise Fail("nginx did not start")


def takeover_to(env, old, cfg, sock_from, sock_to, name):
    """Start a process that takes over from old; wait until old exited 0.
    Returns the new process and the figures both logged."""
    t0 = time.time()
    new = env.proxy(["--config", cfg, "--takeover", sock_from, "--handover-socket", sock_to], name=name)
    env.wait_for(new, r"takeover done", 30)
    try:
        rc = old.p.wait(30)
    except subprocess.TimeoutExpired:
        raise Fail(f"{old.name} did not exit after the takeover by {name}")
    check(rc == 0, f"{old.name} exited {rc} after the takeover")
    mo = re.search(r"takeover by pid \d+: (\d+) connections? handed over in ([\d.]+) ms \(listeners "
                   r"([\d.]+) ms before\), (\d+) left to drain here, ([\d]+) bytes carried", old.text())
    mn = re.search(r"takeover done: (\d+) connections? carried on, (\d+) cut", new.text())
    check(mo and mn, f"no takeover figures in the logs: {old.text()[-1500:]} {new.text()[-1500:]}")
    check(int(mn.group(1)) == int(mo.group(1)) and mn.group(2) == "0",
          f"{old.name} handed {mo.group(1)}, {name} carried on {mn.group(1)} and cut {mn.group(2)}")
    f = {"handed": int(mo.group(1)), "ms": float(mo.group(2)), "listen_ms": float(mo.group(3)),
         "left": int(mo.group(4)), "carried": int(mo.group(5)), "total_ms": (time.time() - t0) * 1000}
    print(f"{old.name} -> {name}: {f['handed']} connections handed over in {f['ms']} ms, "
          f"{f['carried']} bytes carried, {f['left']} left behind; the successor accepted "
          f"{f['listen_ms']} ms after its HELLO; {f['total_ms']:.0f} ms from its start to the end",
          flush=True)
    return new, f


def t_takeover(env, splice=False):
    """A new tlproxy takes over a running one under load (--takeover), twice
    (2 shards, then 1, then 2 again): wrk through it, a long transfer each
    way checked by SHA-256, idle connections and a stream of new ones; no
    connect refused, no request failed, the transfer ends intact through the
    last process, every idle connection answers after, the old processes
    exit 0, and the last spreads what it took over its shards."""
    sp = ", splice: true" if splice else ""
    need("nginx")
    wrk = need("wrk")
    web_up, echo_up, web, echo = env.port(), env.port(), env.port(), env.port()
    start_nginx(env, web_up)
    env.start("tlecho", [env.tlecho, "-p", str(echo_up)], wait_line="listening")
    cfgs = []
    for n in (2, 1):
        cfgs.append(write_cfg(env, f"takeover{n}.yaml", f"""
shards: {n}
listeners:
  - {{name: web, listen: "127.0.0.1:{web}", pool: web{sp}}}
  - {{name: echo, listen: "127.0.0.1:{echo}", pool: echo{sp}}}
pools:
  - {{name: web, servers: [{{address: "127.0.0.1:{web_up}"}}]}}
  - {{name: echo, servers: [{{address: "127.0.0.1:{echo_up}"}}]}}
"""))
    # b serves the path it took over from (it replaces the file; a must not
    # remove b's when it exits), c another one.
    socks = [env.path("ho.sock"), env.path("ho.sock"), env.path("ho-c.sock")]
    a = env.proxy(["--config", cfgs[0], "--handover-socket", socks[0]], name="tlproxy-a")
    n_idle = 50
    idle = []
    for i in range(n_idle):
        s = connect(echo)
        check(echo_ok(s, b"hello %d" % i), f"idle connection {i} does not echo before")
        idle.append(s)

    # The long transfer, paced so that it is under way during both switches:
    # its last quarter waits for the second switch to be over, however
    # long a successor takes to start (the sanitizers, a busy machine).
    size = bulk_size()
    secs = 12.0
    switched = threading.Event()
    bulk = connect(echo, timeout=60)
    block = random.Random(3).randbytes(1 << 20)
    sent_h, got_h = hashlib.sha256(), hashlib.sha256()
    got, sent, err = [0], [0], []

    def reader():
        try:
            while got[0] < size:
                d = bulk.recv(1 << 20)
                if not d:
                    break
                got_h.update(d)
                got[0] += len(d)
        except Exception as e:  # noqa: BLE001
            err.append(e)

    def writer():
        try:
            i, t0 = 0, time.time()
            while sent[0] < size:
                chunk = (bytes([i & 0xff]) + block[1:])[:size - sent[0]]
                bulk.sendall(chunk)
                sent_h.update(chunk)
                sent[0] += len(chunk)
                i += 1
                if sent[0] >= size * 3 // 4 and not switched.is_set():
                    switched.wait(300)
                ahead = sent[0] / size * secs - (time.time() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        except Exception as e:  # noqa: BLE001
            err.append(e)

    # New connections all along: none may be refused or fail.
    probe = {"ok": 0, "bad": []}
    stop = threading.Event()

    def prober():
        i = 0
        while not stop.is_set():
            try:
                s = None
                s = connect(echo, timeout=5)
                # 20 s for the echo: once (ASan, a load of 12) this
                # process's prober thread did not read an echo that had
                # reached its socket within 5 s. A connection stranded in
                # a listen queue never echoes, so it still fails here, and
                # the join below waits longer than this.
                if not echo_ok(s, b"probe %d" % i, timeout=20):
                    probe["bad"].append(f"probe {i}: no echo")
                else:
                    probe["ok"] += 1
                s.close()
            except OSError as e:
                # Where that connection is, for the report: ss shows
                # which process holds it, or a listening queue.
                port = s.getsockname()[1] if s else None
                ss = subprocess.run(["ss", "-tanpi"], capture_output=True, text=True).stdout
                probe["bad"].append(f"probe {i}: {'echo' if s else 'connect'}: {e} (port {port}, "
                                    f"{time.strftime('%H:%M:%S', time.gmtime())}) " +
                                    " | ".join(ln for ln in ss.splitlines() if port and f":{port} " in ln))
            i += 1
            time.sleep(0.005)

    # Daemons: a failed check must not leave the test waiting for them.
    threads = [threading.Thread(target=f, daemon=True) for f in (reader, writer, prober)]
    for t in threads:
        t.start()
    # Under the sanitizers a successor takes seconds to start: wrk runs on
    # through both switches there too.
    dur = "20s" if os.environ.get("TLP_E2E_SANITIZED") else "10s"
    w = subprocess.Popen([wrk, "-t2", "-c16", "-d" + dur, "--timeout", "5s",
                          f"http://127.0.0.1:{web}/index.html"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    if splice:
        # a has spliced by now (the long transfer; wrk's answers are small).
        env.wait_stat(a, "splice", "to_splice", 1, op=">=")
    b, fb = takeover_to(env, a, cfgs[1], socks[0], socks[1], "tlproxy-b")
    check(fb["handed"] >= n_idle + 1, f"only {fb['handed']} connections handed over to b")
    check(fb["left"] == 0, f"{fb['left']} connections left to drain in a")
    check(os.path.exists(socks[1]), "the old process removed its successor's handover socket")
    at_b = got[0]
    time.sleep(2)
    c, fc = takeover_to(env, b, cfgs[0], socks[1], socks[2], "tlproxy-c")
    check(fc["handed"] >= n_idle + 1, f"only {fc['handed']} connections handed over to c")
    check(fc["left"] == 0, f"{fc['left']} connections left to drain in b")
    at_c = got[0]
    switched.set()
    out, werr = w.communicate(timeout=60)
    check(w.returncode == 0, f"wrk failed: {werr}")
    m = re.search(r"(\d+) requests in", out)
    check(m and int(m.group(1)) > 200, f"wrk made too few requests: {out}")
    check("Socket errors" not in out and "Non-2xx" not in out, f"wrk saw errors across the takeovers: {out}")
    threads[0].join(600)
    threads[1].join(600)
    stop.set()
    threads[2].join(30)
    check(not err, f"the long transfer failed: {err}")
    check(got[0] == size, f"the long transfer got {got[0]} bytes back of {size}")
    check(got_h.hexdigest() == sent_h.hexdigest(), "the long transfer's bytes differ from those sent")
    check(at_b < size and at_c < size, f"the transfer was over before a switch ({at_b}, {at_c} of {size})")
    check(not probe["bad"], f"{len(probe['bad'])} new connections failed across the switches: {probe['bad'][:5]}")
    check(probe["ok"] > 20, f"only {probe['ok']} probes went through")
    for i, s in enumerate(idle):
        check(echo_ok(s, b"still here %d" % i), f"idle connection {i} does not answer after the takeovers")
    # They are c's now: its gauge counts them and the long one, on both shards.
    st = env.stats(c)
    per = st["conns_open"]["_per_shard"]["0"]
    check(st["conns_open"]["0"] >= n_idle + 1,
          f"the last process holds {st['conns_open']['0']} connections, want >= {n_idle + 1}")
    check(len(per) == 2 and min(per) >= n_idle // 3, f"c's shards hold {per}: not spread")
    bulk.shutdown(socket.SHUT_WR)
    check(is_closed(bulk, 10), "no end of the long transfer after the client's FIN")
    bulk.close()
    for s in idle:
        s.close()
    env.wait_stat(c, "conns_open", "0", 0)
    print(f"takeover: {probe['ok']} probes and {m.group(1)} wrk requests across two switches", flush=True)
    check(env.stop(c) == 0, "the last process did not exit 0")


def t_takeover_splice(env):
    """t_takeover with every listener splicing (splice: true): a direction
    in a splice at the switch is cancelled, its pipe flushed to the other
    side, and the connection handed over with nothing lost."""
    t_takeover(env, splice=True)


def t_takeover_carry(env):
    """A successor writes the bytes its predecessor had read and not yet
    written before anything else, in both directions, and passes on a FIN
    the predecessor had read: a predecessor played by the test hands over
    a listening socket and connections with carried bytes and half-closes.
    One whose listener the successor lacks is cut, and counted as cut,
    not as carried on."""
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    fake = env.path("fake-old.sock")
    ls = socket.socket(socket.AF_UNIX)
    ls.bind(fake)
    ls.listen(1)
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    lsock.bind(("127.0.0.1", lp))
    lsock.listen(64)
    # Connection pairs as the predecessor would hold them: the client's
    # socket accepted on lp, a socket connected to the server.
    pairs = []
    for _ in range(3):
        cl = connect(lp)
        acc, _ = lsock.accept()
        srv = connect(up)
        pairs.append((cl, acc, srv))
    peer = struct.pack("<H", socket.AF_INET) + struct.pack(">H", 4000) + socket.inet_aton("127.0.0.1") + b"\0" * 8

    def conn_rec(flags, c0, c1, listener=b"default"):
        names = [listener, b"default", f"127.0.0.1:{up}".encode()]
        # (the fixed part ends with a UDP session's datagram counts and
        # replies owed: zero for a connection pair)
        body = struct.pack("<IIQQQHHHHIIIIQQI", flags, 0, 100, 200, 10**9, *[len(n) for n in names], len(peer),
                           len(c0), len(c1), 0, 0, 0, 0, 0)
        return ho_record(6, body + b"".join(names) + peer + c0 + c1, nfds=2)

    res = {}

    def fake_old():
        try:
            c, _ = ls.accept()
            r = ho_reply(c)
            res["hello"] = r
            c.sendall(ho_record(1, struct.pack("<II", os.getpid(), 0)))
            a = struct.pack("<H", socket.AF_INET) + struct.pack(">H", lp) + socket.inet_aton("127.0.0.1") + b"\0" * 8
            socket.send_fds(c, [ho_record(3, struct.pack("<HH", 0, len(a)) + a, nfds=1)], [lsock.fileno()])
            c.sendall(ho_record(4, struct.pack("<I", 1)))
            res["ready"] = ho_reply(c, timeout=30)
            # 0: bytes both ways; 1: the client's FIN read and not passed on,
            # after bytes for the server; 2: a listener the successor lacks.
            recs = [(conn_rec(0, b"to-server-0|", b"to-client-0|"), pairs[0]),
                    (conn_rec(1, b"last words|", b""), pairs[1]),
                    (conn_rec(0, b"x", b"y", listener=b"gone"), pairs[2])]
            for rec, (_, acc, srv) in recs:
                socket.send_fds(c, [rec], [acc.fileno(), srv.fileno()])
                acc.close()
                srv.close()
            c.sendall(ho_record(7, struct.pack("<II", 3, 0)))
            time.sleep(0.5)
            c.close()
        except Exception as e:  # noqa: BLE001
            res["err"] = e

    t = threading.Thread(target=fake_old)
    t.start()
    new = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2",
                     "--takeover", fake], name="tlproxy-new")
    env.wait_for(new, r"takeover done: 2 connections carried on, 1 cut", 20)
    t.join(20)
    check("err" not in res, f"the fake predecessor failed: {res.get('err')}")
    check(res["hello"][0] == HO_VER and res["hello"][1] == 1, f"the successor's HELLO: {res['hello']}")
    check(res["ready"] and res["ready"][1] == 5, f"no READY: {res['ready']}")
    lsock.close()  # the successor has its own descriptor of it
    # Pair 0: its carry to the client comes first, then the echo of what
    # was carried to the server, then it forwards as usual.
    cl0 = pairs[0][0]
    want = b"to-client-0|to-server-0|"
    got = b""
    cl0.settimeout(5)
    try:
        while len(got) < len(want):
            d = cl0.recv(4096)
            if not d:
                break
            got += d
    except socket.timeout:
        pass
    check(got == want, f"pair 0 got {got!r}, want {want!r}")
    check(echo_ok(cl0, b"and on"), "pair 0 does not forward after the takeover")
    # Pair 1: the carried bytes reach the server, then the FIN: the echo
    # server answers with them and closes, and the client sees the end.
    try:
        got = recv_all(pairs[1][0], 10)
    except socket.timeout:
        got = b"(no end within 10 s)"
    check(got == b"last words|", f"pair 1 got {got!r} before its end")
    # Pair 2: no listener "gone" in the successor: cut, counted.
    check(is_closed(pairs[2][0], 5), "a connection of an unknown listener was not cut")
    env.wait_for(new, r"cannot carry on a connection: .*No such file")
    # The listening socket it took accepts.
    s = connect(lp)
    check(echo_ok(s, b"new client"), "the listening socket handed over does not serve")
    s.close()
    cl0.close()
    for p_ in pairs[1:]:
        p_[0].close()
    env.wait_stat(new, "conns_open", "0", 0)
    check(env.stop(new) == 0, "the successor did not exit 0")


def t_takeover_deadline(env):
    """A connection that cannot be handed over by --handover-deadline (a
    splice into a client that reads nothing: its pipe must drain into that
    client first) carries on in the old process, intact, and the old
    process exits once it ends; a half-closed connection (the server's FIN
    passed on) moves and its client's bytes and FIN still reach the server
    through the new one."""
    up, lp = env.port(), env.port()
    # More than the socket buffers, the leases and a pipe hold, whatever
    # the build.
    size = 32 << 20
    srv = env.serve(f"talkfirst={size}", "127.0.0.1", up)
    sock = env.path("ho.sock")
    # s1 waits half-closed while s2 is set up: a FIN timeout that a busy
    # machine cannot reach.
    cfg = write_cfg(env, "deadline.yaml", f"""
shards: 1
listeners:
  - {{name: default, listen: "127.0.0.1:{lp}", pool: p, splice: true,
      timeouts: {{server_fin: 600s}}}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    old = env.proxy(["--config", cfg, "--handover-socket", sock, "--handover-deadline", "1"], name="tlproxy-old")
    want = hashlib.sha256(random.Random(7).randbytes(size)).hexdigest()
    # s1 takes all the server sends and its FIN: half-closed.
    s1 = connect(lp, timeout=30)
    d = recv_all(s1, 30)
    check(len(d) == size and hashlib.sha256(d).hexdigest() == want, f"s1 got {len(d)} bytes, not the server's")
    # s2 reads nothing: the splice into it cannot drain its pipe.
    s2 = connect(lp, timeout=30)
    env.wait_stat(old, "splice", "to_splice", 2, op=">=", timeout=20)
    time.sleep(0.5)
    new = env.proxy(["--config", cfg, "--takeover", sock], name="tlproxy-new")
    env.wait_for(new, r"takeover done: 1 connection carried on, 0 cut, 1 left to drain in the old process", 20)
    env.wait_for(old, r"takeover by pid \d+: 1 connection handed over .*, 1 left to drain here")
    check(old.p.poll() is None, "the old process exited with a connection left to drain")
    # s1, now the new process's: its bytes and FIN reach the server.
    s1.sendall(b"z" * 1000)
    s1.shutdown(socket.SHUT_WR)
    env.wait_for(srv, r"got 1000 " + hashlib.sha256(b"z" * 1000).hexdigest())
    check(is_closed(s1, 10), "s1 did not end after both FINs")
    s1.close()
    # s2, still the old process's, gets every byte.
    d = recv_all(s2, 60)
    check(len(d) == size and hashlib.sha256(d).hexdigest() == want,
          f"s2 got {len(d)} bytes across the takeover, not the server's {size}")
    s2.shutdown(socket.SHUT_WR)
    env.wait_for(srv, r"got 0 ")
    s2.close()
    try:
        rc = old.p.wait(15)
    except subprocess.TimeoutExpired:
        raise Fail("the old process did not exit after its last connection ended")
    check(rc == 0, f"the old process exited {rc}")
    s = connect(lp)
    s.settimeout(10)
    check(len(recv_all(s, 30)) == size, "a new client through the new process did not get the server's bytes")
    s.close()
    env.wait_stat(new, "conns_open", "0", 0)
    check(env.stop(new) == 0, "the new process did not exit 0")


def exit_code(pr, timeout):
    """pr's exit status once it exits within timeout, else None."""
    try:
        return pr.p.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def slow_reader(s, size, rate, out, hold=None):
    """Read s to its end at about rate bytes/s into out: the byte count, a
    SHA-256 and how it ended ("eof", "reset" or the exception). With hold
    (an Event), the last quarter waits until it is set."""
    h, n, t0 = hashlib.sha256(), 0, time.time()
    s.settimeout(60)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                out["end"] = "eof"
                break
            h.update(d)
            n += len(d)
            out["n"] = n
            if hold and n >= size * 3 // 4 and not hold.is_set():
                hold.wait(300)
                t0 = time.time() - n / rate
            ahead = n / rate - (time.time() - t0)
            if ahead > 0:
                time.sleep(ahead)
    except ConnectionResetError:
        out["end"] = "reset"
    except Exception as e:  # noqa: BLE001
        out["end"] = repr(e)
    out["n"], out["hash"] = n, h.hexdigest()


def t_takeover_slow(env):
    """Writes in flight move: a client reading a download slowly, and one
    reading nothing at all, are handed over twice (a to b to c) with the
    bytes the proxy had not written yet to them carried (the second time
    also what b had not written of a's carry); both get every byte, by
    SHA-256, then the server's end; nothing is left to drain behind."""
    up, lp = env.port(), env.port()
    size = 24 << 20
    env.serve(f"talkfirst={size}", "127.0.0.1", up)
    want = hashlib.sha256(random.Random(7).randbytes(size)).hexdigest()
    socks = [env.path("ho-a.sock"), env.path("ho-b.sock"), env.path("ho-c.sock")]
    args = ["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2"]
    a = env.proxy(args + ["--handover-socket", socks[0]], name="tlproxy-a")
    # Small receive buffers: the proxy has writes waiting for them.
    slow, still = connect(lp, timeout=60, rcvbuf=32768), connect(lp, timeout=60, rcvbuf=32768)
    res = {}
    # Its last quarter waits for the second switch, however long the
    # successors take to start.
    switched = threading.Event()
    t = threading.Thread(target=slow_reader, args=(slow, size, 3 << 20, res, switched), daemon=True)
    t.start()
    # The switch starts once the download flows to both and the one that
    # reads nothing is full: the proxy then has a write waiting for it (far
    # more is owed than the socket buffers hold). The server may take
    # seconds to start sending on a busy machine; a fixed pause would let
    # the switch come before there is anything in flight.
    queued, since, deadline = -1, time.time(), time.time() + 60
    while time.time() < deadline:
        n = unread(still)
        if n != queued:
            queued, since = n, time.time()
        elif n > 0 and res.get("n", 0) > 0 and time.time() - since >= 0.3:
            break
        time.sleep(0.05)
    else:
        raise Fail(f"the download did not fill the client that reads nothing ({queued} bytes "
                   f"waiting in it, {res.get('n', 0)} read by the slow one)")

    def switch(old, frm, to, name):
        new = env.proxy(args + ["--takeover", frm, "--handover-socket", to], name=name)
        env.wait_for(new, r"takeover done: 2 connections carried on, 0 cut, 0 left to drain", 30)
        check(exit_code(old, 30) == 0, f"{old.name} did not exit 0")
        m = re.search(r"2 connections handed over .*, 0 left to drain here, (\d+) bytes carried", old.text())
        check(m, f"{old.name} did not hand both over: {old.text()[-1500:]}")
        return new, int(m.group(1))

    b, carried_ab = switch(a, socks[0], socks[1], "tlproxy-b")
    check(carried_ab > 0, "nothing was carried from a to b, though a had a write waiting for the client that reads nothing")
    check(res.get("n", 0) < size, "the slow download was over before the first switch")
    time.sleep(1)
    c, carried_bc = switch(b, socks[1], socks[2], "tlproxy-c")
    check(carried_bc > 0, "nothing was carried from b to c")
    check(res.get("n", 0) < size, "the slow download was over before the second switch")
    switched.set()
    t.join(120)
    check(res.get("end") == "eof" and res["n"] == size and res["hash"] == want,
          f"the slow reader got {res.get('n')} of {size} bytes, ended by {res.get('end')}")
    # The one that read nothing reads it all now, from c.
    out = {}
    slow_reader(still, size, 1 << 40, out)
    check(out.get("end") == "eof" and out["n"] == size and out["hash"] == want,
          f"the client that read nothing got {out.get('n')} of {size} bytes, ended by {out.get('end')}")
    for s_ in (slow, still):
        s_.close()
    env.wait_stat(c, "conns_open", "0", 0)
    check(env.stop(c) == 0, "the last process did not exit 0")


def t_drain_limit(env):
    """A SIGTERM drain that reaches its limit (--drain-timeout, 3 s here)
    cuts what is still open with a reset: a download whose client stopped
    reading ends, for that client, in a reset, never in an end of stream
    that would look like the whole transfer; the process exits 0."""
    up, lp = env.port(), env.port()
    size = 64 << 20
    env.serve(f"talkfirst={size}", "127.0.0.1", up)
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2",
                    "--drain-timeout", "3s"])
    s = connect(lp, timeout=60)
    got = len(s.recv(1 << 20))
    check(got > 0, "no bytes of the download")
    t0 = time.time()
    px.p.send_signal(signal.SIGTERM)
    env.wait_for(px, r"draining: .* within 3\.0 s", 5)
    try:
        rc = px.p.wait(60)
    except subprocess.TimeoutExpired:
        raise Fail("tlproxy did not stop at the drain's limit")
    check(rc == 0, f"tlproxy exited {rc} after the drain")
    # Not before the limit; well before the 30 s default.
    check(2.5 <= time.time() - t0 < 20, f"tlproxy stopped {time.time() - t0:.1f} s into a 3 s drain")
    out = {}
    slow_reader(s, size, 1 << 40, out)
    s.close()
    check(out.get("end") == "reset", f"the cut download ended by {out.get('end')} after "
                                     f"{got + out.get('n', 0)} of {size} bytes, not by a reset")


def echo_all(socks, tag, timeout=10):
    """Send a line on each socket at once and read each echo back: the
    indexes of those that did not echo (end of stream, reset, silence)."""
    bad, want, got, left = set(), {}, {}, {}
    po = select.poll()
    for i, s_ in enumerate(socks):
        want[i] = b"%s %d\n" % (tag, i)
        got[i] = b""
        try:
            s_.sendall(want[i])
        except OSError:
            bad.add(i)
            continue
        left[s_.fileno()] = i
        po.register(s_, select.POLLIN)
    end = time.time() + timeout
    while left and time.time() < end:
        for fd, _ in po.poll(200):
            i = left[fd]
            try:
                d = socks[i].recv(4096)
            except OSError:
                d = b""
            got[i] += d
            if not d or len(got[i]) >= len(want[i]):
                if got[i] != want[i]:
                    bad.add(i)
                po.unregister(fd)
                del left[fd]
    return sorted(bad | set(left.values()))


def fake_successor(path, take, ack):
    """A successor played by the test: it takes over through path, reads
    `take` connection records (their descriptors included), acknowledges
    the first `ack` of them and goes away, closing everything."""
    u = socket.socket(socket.AF_UNIX)
    u.connect(path)
    u.sendall(ho_record(1, struct.pack("<II", os.getpid(), 0)))
    check(ho_reply(u, timeout=10)[1] == 1, "the fake successor got no HELLO")
    got_fds = []

    def record():
        hdr, fds = b"", []
        while len(hdr) < 16:
            d, f, _, _ = socket.recv_fds(u, 16 - len(hdr), 4)
            check(d, "the old process ended the conversation")
            hdr += d
            fds += f
        n = struct.unpack("<I", hdr[8:12])[0]
        body = u.recv(n, socket.MSG_WAITALL) if n else b""
        got_fds.extend(fds)
        return struct.unpack("<H", hdr[6:8])[0], body

    while record()[0] != 4:  # LISTENER records, then LISTENERS_END
        pass
    u.sendall(ho_record(5, b""))
    for k in range(take):
        t, _ = record()
        check(t == 6, f"record {k} is of type {t}, not a connection")
        if k < ack:
            u.sendall(ho_record(8, struct.pack("<I", k + 1)))
    for fd in got_fds:
        os.close(fd)
    u.close()


def t_takeover_end_ack(env):
    """A successor that says READY, reads END and goes away without
    acknowledging it, with no connection in flight (so no other
    acknowledgement can be missed): the old process sees the takeover fail,
    takes its listeners back and serves on, instead of draining into a
    process that is gone."""
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    sock = env.path("ho.sock")
    args = ["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2"]
    old = env.proxy(args + ["--handover-socket", sock], name="tlproxy-old")
    u = socket.socket(socket.AF_UNIX)
    u.connect(sock)
    u.sendall(ho_record(1, struct.pack("<II", os.getpid(), 0)))
    check(ho_reply(u, timeout=10)[1] == 1, "no HELLO from the old process")
    fds = []
    while True:
        hdr = b""
        while len(hdr) < 16:
            d, f, _, _ = socket.recv_fds(u, 16 - len(hdr), 4)
            check(d, "the old process ended the conversation")
            hdr += d
            fds += f
        t, n = struct.unpack("<H", hdr[6:8])[0], struct.unpack("<I", hdr[8:12])[0]
        if n:
            u.recv(n, socket.MSG_WAITALL)
        if t == 4:  # LISTENERS_END: say READY
            u.sendall(ho_record(5, b""))
        check(t != 6, "a connection record with no connection open")
        if t == 7:  # END: leave without acknowledging it
            break
    for fd in fds:
        os.close(fd)
    u.close()
    env.wait_for(old, r"takeover by pid \d+ failed \(.*\): 0 connections it had taken go with it, "
                      r"0 taken back .*; still serving", 15)
    time.sleep(0.5)
    check(old.p.poll() is None, "the old process exited: it drained into a successor that was gone")
    s_ = connect(lp)
    check(echo_ok(s_, b"still here"), "the old process does not serve after the failed takeover")
    s_.close()
    check(env.stop(old) == 0, "the old process did not exit 0")


def t_takeover_kill(env):
    """A successor that dies in the middle of a takeover, under load (1500
    clients holding connections): the old process takes back every
    connection the successor had not acknowledged, its records never sent
    and those sent but unread or unacknowledged included, and the number it
    logs as gone with the successor is exactly the number of clients that
    stopped working. Killed before it accepted, right after it said it
    runs, and stopped for a while first (records left unread in its
    socket); and a successor played by the test that reads 40 records and
    acknowledges 15 before it goes. New clients are served after each, and
    a last successor takes everything over."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 8192 and (hard == resource.RLIM_INFINITY or hard >= 8192):
        resource.setrlimit(resource.RLIMIT_NOFILE, (8192, hard))
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    sock = env.path("ho.sock")
    args = ["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2"]
    old = env.proxy(args + ["--handover-socket", sock], name="tlproxy-old")
    n = 1500
    socks = []
    for i in range(n):
        socks.append(connect(lp, timeout=10))
    bad = echo_all(socks, b"hello")
    check(not bad, f"{len(bad)} clients did not echo before any takeover")
    fails = 0
    failed = (r"takeover by pid \d+ (failed before it accepted|failed \(.*\): (\d+) connections? it had taken "
              r"go(?:es)? with it, (\d+) taken back and carried on here \((\d+) of them cut\); still serving)")
    for k, point in enumerate(["listeners", "running", "stopped", "fake"]):
        # Each point starts from the full load: the clients an earlier
        # successor took with it are replaced by new ones, so that a
        # successor that took nearly everything leaves the fake one the 40
        # records it reads.
        while len(socks) < n:
            socks.append(connect(lp, timeout=10))
        bad = echo_all(socks, b"before %d" % k)
        check(not bad, f"{point}: {len(bad)} clients did not echo before the takeover")
        mark = len(old.text())
        if point == "fake":
            fake_successor(sock, 40, 15)
        else:
            succ = env.start(f"tlproxy-killed-{point}", [env.tlproxy] + args + ["--takeover", sock])
            env.wait_for(succ, r"takeover: \d+ listening socket" if point == "listeners" else r"tlproxy: running", 30)
            if point == "stopped":
                succ.p.send_signal(signal.SIGSTOP)
                time.sleep(0.5)
            succ.p.kill()
            succ.p.wait(10)
        t_end = time.time() + 30
        m = None
        while time.time() < t_end and not m:
            check(old.p.poll() is None, f"{point}: the old process exited: the takeover was over before the kill")
            m = re.search(failed, old.text()[mark:])
            time.sleep(0.05)
        check(m, f"{point}: no failure line in the old process: {old.text()[mark:][-1500:]}")
        check(point != "listeners" or m.group(2) is None, f"listeners: {m.group(0)}")
        gone = int(m.group(2)) + int(m.group(4)) if m.group(2) else 0
        check(point != "fake" or (m.group(2) == "15" and m.group(4) == "0"),
              f"the fake successor acknowledged 15 and the old process says: {m.group(0)}")
        bad = echo_all(socks, b"after %d" % k)
        print(f"{point}: {m.group(0)}; {len(bad)} of {len(socks)} clients failed", flush=True)
        check(len(bad) == gone, f"{point}: {len(bad)} clients failed, the old process says {gone}")
        fails += len(bad)
        for i in reversed(bad):
            socks[i].close()
            del socks[i]
        s_ = connect(lp)
        check(echo_ok(s_, b"new after %d" % k), f"{point}: a new client is not served")
        s_.close()
    new = env.proxy(args + ["--takeover", sock], name="tlproxy-new")
    env.wait_for(new, r"takeover done: %d connections carried on, 0 cut" % len(socks), 30)
    check(exit_code(old, 30) == 0, "the old process did not exit 0")
    bad = echo_all(socks, b"at last")
    check(not bad, f"{len(bad)} clients failed after the last takeover")
    print(f"takeover_kill: {fails} clients went with the successors that died", flush=True)
    for s_ in socks:
        s_.close()
    env.wait_stat(new, "conns_open", "0", 0)
    check(env.stop(new) == 0, "the new process did not exit 0")


def t_takeover_lockout(env):
    """A successor killed once it had the listening sockets (and had made
    its own handover socket, under a temporary name) takes the name from
    nobody: a later takeover through the same path succeeds, and the path
    then names the successor's socket."""
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    sock = env.path("ho.sock")
    args = ["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "1"]
    old = env.proxy(args + ["--handover-socket", sock], name="tlproxy-old")
    held = connect(lp)
    check(echo_ok(held, b"before"), "no echo before")
    ino = os.stat(sock).st_ino
    killed = env.start("tlproxy-killed", [env.tlproxy] + args + ["--takeover", sock, "--handover-socket", sock])
    # Killed as soon as it has made its handover socket, whatever its name.
    t_end = time.time() + 30
    while time.time() < t_end and not os.path.exists(f"{sock}.new-{killed.p.pid}") and os.stat(sock).st_ino == ino:
        check(killed.p.poll() is None, f"the successor exited: {killed.text()}")
        time.sleep(0.001)
    killed.p.kill()
    killed.p.wait(10)
    env.wait_for(old, r"still serving", 30)
    check(echo_ok(held, b"after the kill"), "the held connection broke when the successor was killed")
    new = env.proxy(args + ["--takeover", sock, "--handover-socket", sock], name="tlproxy-new")
    env.wait_for(new, r"takeover done: 1 connection carried on, 0 cut", 30)
    check(exit_code(old, 30) == 0, "the old process did not exit 0")
    check(echo_ok(held, b"after the takeover"), "the held connection broke in the takeover")
    # The path is the new process's now: a third takes over from it.
    third = env.proxy(args + ["--takeover", sock, "--handover-socket", sock], name="tlproxy-third")
    env.wait_for(third, r"takeover done: 1 connection carried on, 0 cut", 30)
    check(exit_code(new, 30) == 0, "the second process did not exit 0")
    check(os.path.exists(sock), "the handover socket's name is gone")
    check(not os.path.exists(f"{sock}.new-{third.pid}"), "the temporary name stayed after the takeover")
    held.close()
    env.wait_stat(third, "conns_open", "0", 0)
    check(env.stop(third) == 0, "the third process did not exit 0")
    check(not os.path.exists(sock), "the handover socket stayed after its process exited")


def t_takeover_fds(env):
    """A successor keeps no descriptor of the takeover itself: once the
    connections it took over have closed, it holds as many descriptors as
    the process it replaced held at its start (same arguments), and so
    does the successor of that successor. The conversation with the old
    process ends when its last record is read, not when the process
    exits."""
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    sock = env.path("ho.sock")
    args = ["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2"]
    old = env.proxy(args + ["--handover-socket", sock], name="tlproxy-a")
    # A round trip first, so that whatever a connection opens lazily is open.
    s = connect(lp)
    check(echo_ok(s, b"warm"), "no echo before")
    s.close()
    env.wait_stat(old, "conns_open", "0", 0)
    fd0 = env.fds(old)
    n = 8
    for name in ("tlproxy-b", "tlproxy-c"):
        held = [connect(lp) for _ in range(n)]
        for i, s in enumerate(held):
            check(echo_ok(s, b"before %d" % i), f"connection {i} does not echo before {name}")
        new = env.proxy(args + ["--takeover", sock, "--handover-socket", sock], name=name)
        env.wait_for(new, rf"takeover done: {n} connections carried on, 0 cut", 30)
        check(exit_code(old, 30) == 0, f"{old.name} did not exit 0 after the takeover")
        for i, s in enumerate(held):
            check(echo_ok(s, b"after %d" % i), f"connection {i} does not echo after {name} took over")
            s.close()
        env.wait_stat(new, "conns_open", "0", 0)
        env.settle_fds(new, fd0)
        old = new
    check(env.stop(old) == 0, "the last process did not exit 0")


def t_takeover_silent(env):
    """Clients of the handover socket that never say HELLO hold up no
    takeover: with three of them connected, a successor is answered at
    once (not 5 s per silent client), and the silent ones are refused."""
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    sock = env.path("ho.sock")
    args = ["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "1"]
    old = env.proxy(args + ["--handover-socket", sock], name="tlproxy-old")
    silent = []
    for _ in range(3):
        u = socket.socket(socket.AF_UNIX)
        u.connect(sock)
        silent.append(u)
    time.sleep(0.2)
    t0 = time.time()
    new = env.start("tlproxy-new", [env.tlproxy] + args + ["--takeover", sock])
    env.wait_for(old, r"takeover by pid \d+: handing over the listening sockets", 30)
    waited = time.time() - t0
    check(waited < 4, f"the successor was answered {waited:.1f} s after it started, behind silent clients")
    env.wait_for(new, r"takeover done: 0 connections carried on, 0 cut", 30)
    check(exit_code(old, 30) == 0, "the old process did not exit 0")
    for u in silent:
        r = ho_reply(u, timeout=10)
        check(r and r[1] == 2, f"a silent client got {r}, not a refusal")
        u.close()
    new.pid = new.p.pid
    check(env.stop(new) == 0, "the new process did not exit 0")


def t_takeover_race(env):
    """Two successors started at once: one takes over, the other is
    refused (another takeover is under way, or done) and exits 1 with one
    line saying so; the old process exits 0 and the winner serves."""
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    sock = env.path("ho.sock")
    args = ["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "1"]
    old = env.proxy(args + ["--handover-socket", sock], name="tlproxy-old")
    held = connect(lp)
    check(echo_ok(held, b"before"), "no echo before")
    p = [env.start(f"tlproxy-{k}", [env.tlproxy] + args + ["--takeover", sock]) for k in ("x", "y")]
    t_end = time.time() + 60
    while time.time() < t_end and all(pr.p.poll() is None for pr in p):
        time.sleep(0.05)
    losers = [pr for pr in p if pr.p.poll() is not None]
    check(len(losers) == 1, f"{len(losers)} successors exited")
    loser, winner = losers[0], [pr for pr in p if pr is not losers[0]][0]
    check(loser.p.returncode == 1, f"the loser exited {loser.p.returncode}")
    lines = [ln for ln in loser.text().splitlines() if "descriptor limit" not in ln and ln.strip()]
    check(len(lines) == 1 and re.match(r"tlproxy: --takeover \S+: refused: (another takeover \(pid \d+\) is under "
                                       r"way|this process was taken over by pid \d+); this one gives up$", lines[0]),
          f"the loser said: {lines}")
    env.wait_for(winner, r"takeover done: 1 connection carried on, 0 cut", 30)
    check(exit_code(old, 30) == 0, "the old process did not exit 0")
    check(echo_ok(held, b"after"), "the held connection broke in the takeover")
    held.close()
    winner.pid = winner.p.pid
    env.wait_stat(winner, "conns_open", "0", 0)
    check(env.stop(winner) == 0, "the winner did not exit 0")


def t_takeover_closed_side(env):
    """A connection whose server side has fully closed (its FIN came, the
    client's went) while the proxy still writes to a client that reads
    slowly: it moves, the new process carries it on with no server socket
    to adopt (no longer a connection) and counts it as carried on; the
    client gets every byte, then the end, after a second switch too."""
    up, lp = env.port(), env.port()
    size = 96 << 10
    env.serve(f"talkfirst={size}", "127.0.0.1", up)
    want = hashlib.sha256(random.Random(7).randbytes(size)).hexdigest()
    sock = env.path("ho.sock")
    # Small buffers toward the client: what it has not read waits in the
    # proxy's writes, the server's bytes all read.
    cfg = write_cfg(env, "closed.yaml", f"""
shards: 1
listeners:
  - {{name: default, listen: "127.0.0.1:{lp}", pool: p, socket: {{sndbuf: 4k}}}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    args = ["--config", cfg]
    old = env.proxy(args + ["--handover-socket", sock], name="tlproxy-old")
    args += ["--handover-socket", sock]
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(("127.0.0.1", lp))
    s.shutdown(socket.SHUT_WR)
    time.sleep(1.5)  # the server's bytes and FIN reach the proxy, which has ours passed on
    new = env.proxy(args + ["--takeover", sock], name="tlproxy-new")
    env.wait_for(new, r"takeover done: \d+ connections? carried on, \d+ cut", 30)
    check(exit_code(old, 30) == 0, "the old process did not exit 0")
    m = re.search(r"(\d+) connections? handed over .*, (\d+) bytes carried", old.text())
    check(m and m.group(1) == "1" and int(m.group(2)) > 0,
          f"not one connection with bytes in flight handed over: {old.text()[-800:]}")
    check(re.search(r"takeover done: 1 connection carried on, 0 cut", new.text()),
          f"the new process did not carry it on: {new.text()[-800:]}")
    # Once more, now that its server side has no socket at all: an
    # unconnected one stands for it.
    third = env.proxy(args + ["--takeover", sock], name="tlproxy-third")
    env.wait_for(third, r"takeover done: 1 connection carried on, 0 cut", 30)
    check(exit_code(new, 30) == 0, "the second process did not exit 0")
    out = {}
    slow_reader(s, size, 1 << 40, out)
    s.close()
    check(out.get("end") == "eof" and out["n"] == size and out["hash"] == want,
          f"the client got {out.get('n')} of {size} bytes, ended by {out.get('end')}")
    env.wait_stat(third, "conns_open", "0", 0)
    check(env.stop(third) == 0, "the third process did not exit 0")


def t_takeover_user(env):
    """With user: both processes run as that user: the successor connects
    after dropping its privileges and is accepted; a root peer is another
    user and is refused. A Unix-domain listener moves too."""
    pw = need_nobody()
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    run = env.path("run")
    os.makedirs(run)
    os.chown(run, pw.pw_uid, pw.pw_gid)
    os.chmod(env.dir, 0o755)
    cfg = write_cfg(env, "user.yaml", f"""
user: nobody
shards: 2
listeners:
  - {{name: web, listen: ["127.0.0.1:{lp}", "unix:{run}/l.sock"], pool: p}}
pools:
  - {{name: p, servers: [{{address: "127.0.0.1:{up}"}}]}}
""")
    sock = os.path.join(run, "ho.sock")
    old = env.proxy(["--config", cfg, "--handover-socket", sock], name="tlproxy-old")
    check(os.stat(sock).st_uid == pw.pw_uid and (os.stat(sock).st_mode & 0o777) == 0o600,
          f"the handover socket is {oct(os.stat(sock).st_mode)} of uid {os.stat(sock).st_uid}")
    held = connect(lp)
    check(echo_ok(held, b"before"), "no echo before")
    uheld = socket.socket(socket.AF_UNIX)
    uheld.connect(os.path.join(run, "l.sock"))
    check(echo_ok(uheld, b"unix before"), "no echo through the Unix listener before")
    u = socket.socket(socket.AF_UNIX)
    u.connect(sock)
    try:
        u.sendall(ho_record(1, struct.pack("<II", os.getpid(), 0)))
    except BrokenPipeError:
        pass
    r = ho_reply(u)
    check(r and r[1] == 2 and struct.unpack("<H", r[2][:2])[0] == 2, f"a root peer got {r}")
    u.close()
    env.wait_for(old, rf"takeover refused: pid \d+ runs as uid 0, only uid {pw.pw_uid} may take over")
    new = env.proxy(["--config", cfg, "--takeover", sock], name="tlproxy-new")
    env.wait_for(new, r"takeover done: 2 connections carried on, 0 cut", 20)
    check(exit_code(old, 30) == 0, "the old process did not exit 0")
    check(echo_ok(held, b"after"), "the connection does not answer after the takeover")
    check(echo_ok(uheld, b"unix after"), "the Unix-domain connection does not answer after the takeover")
    held.close()
    uheld.close()
    u2 = socket.socket(socket.AF_UNIX)
    u2.connect(os.path.join(run, "l.sock"))
    check(echo_ok(u2, b"unix new"), "the Unix listener does not serve in the new process")
    u2.close()
    env.wait_stat(new, "conns_open", "0", 0)
    check(env.stop(new) == 0, "the new process did not exit 0")


HO_VER = 4  # TLP_HO_VERSION (tools/tlproxy/handover.h)


def ho_record(t, body, ver=HO_VER, nfds=0):
    return b"TLHO" + struct.pack("<HHIB3x", ver, t, len(body), nfds) + body


def recv_exact(s, n):
    """n bytes from stream s, or fewer if it ends first."""
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            break
        b += d
    return b


def ho_reply(s, timeout=5):
    """The record the other side answers with: (version, type, body)."""
    s.settimeout(timeout)
    hdr = recv_exact(s, 16)
    if len(hdr) < 16:
        return None
    magic, ver, t, n = hdr[:4], *struct.unpack("<HHI", hdr[4:12])
    check(magic == b"TLHO", f"handover reply magic {magic!r}")
    return ver, t, recv_exact(s, n)


def t_takeover_refuse(env):
    """A takeover of another format version, or by another user, is refused
    and the running process keeps serving; a new process refused exits 1."""
    up, lp = env.port(), env.port()
    env.start("tlecho", [env.tlecho, "-p", str(up)], wait_line="listening")
    sock = env.path("ho.sock")
    px = env.proxy(["--listen", f"127.0.0.1:{lp}", "--upstream", f"127.0.0.1:{up}", "--shards", "2",
                    "--handover-socket", sock])
    held = connect(lp)
    check(echo_ok(held, b"before"), "no echo before")
    # Version 2 asks: REFUSE (reason 1, version), closed, still serving.
    u = socket.socket(socket.AF_UNIX)
    u.connect(sock)
    u.sendall(ho_record(1, struct.pack("<II", os.getpid(), 0), ver=HO_VER + 1))
    r = ho_reply(u)
    check(r and r[0] == HO_VER and r[1] == 2 and struct.unpack("<H", r[2][:2])[0] == 1,
          f"a version {HO_VER + 1} HELLO got {r}")
    check(f"version {HO_VER} here, {HO_VER + 1} asked".encode() in r[2], f"refusal text {r[2]!r}")
    check(is_closed(u), "the handover socket stayed open after the refusal")
    u.close()
    env.wait_for(px, rf"takeover refused \(pid \d+\): handover format version {HO_VER} here, {HO_VER + 1} asked; "
                     r"still serving")
    # Garbage: refused too.
    u = socket.socket(socket.AF_UNIX)
    u.connect(sock)
    u.sendall(b"GET / HTTP/1.0\r\n\r\n")
    r = ho_reply(u)
    check(r and r[1] == 2 and struct.unpack("<H", r[2][:2])[0] == 4, f"garbage got {r}")
    u.close()
    # Another user (as root: a child that becomes a user of the case's own).
    other = other_user(env, "other_user")
    if other is not None:
        os.chmod(env.dir, 0o755)
        os.chmod(sock, 0o777)
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(rd)
                os.setgroups([])
                os.setgid(other)
                os.setuid(other)
                c = socket.socket(socket.AF_UNIX)
                c.connect(sock)
                try:
                    c.sendall(ho_record(1, struct.pack("<II", os.getpid(), 0)))
                except BrokenPipeError:
                    pass  # refused before it read the HELLO: the refusal is there to read
                rr = ho_reply(c)
                os.write(wr, repr(rr).encode())
            except Exception as e:  # noqa: BLE001
                os.write(wr, repr(e).encode())
            finally:
                os._exit(0)
        os.close(wr)
        got = b""
        while True:
            d = os.read(rd, 4096)
            if not d:
                break
            got += d
        os.close(rd)
        os.waitpid(pid, 0)
        check(got.startswith(f"({HO_VER}, 2, b'\\x02\\x00".encode()), f"another user's HELLO got {got!r}")
        env.wait_for(px, rf"takeover refused: pid \d+ runs as uid {other}, only uid 0 may take over; still serving")
    check(echo_ok(held, b"after"), "the running process stopped serving after the refusals")
    s = connect(lp)
    check(echo_ok(s, b"new"), "a new connection failed after the refusals")
    s.close()
    # A new process refused by a predecessor of another version exits 1
    # with the reason: a fake predecessor answers in another version.
    fake = env.path("fake.sock")
    ls = socket.socket(socket.AF_UNIX)
    ls.bind(fake)
    ls.listen(1)

    def fake_old():
        c, _ = ls.accept()
        ho_reply(c)
        c.sendall(ho_record(1, struct.pack("<II", 1, 0), ver=HO_VER + 1))
        time.sleep(1)
        c.close()

    t = threading.Thread(target=fake_old)
    t.start()
    lp2 = env.port()
    r = subprocess.run([env.tlproxy, "--listen", f"127.0.0.1:{lp2}", "--upstream", f"127.0.0.1:{up}",
                        "--takeover", fake], capture_output=True, text=True, timeout=30)
    t.join(10)
    check(r.returncode == 1, f"a refused takeover exited {r.returncode}: {r.stderr}")
    check(f"speaks handover format version {HO_VER + 1}, this one {HO_VER}: refused" in r.stderr,
          f"stderr: {r.stderr}")
    # And the real one refuses a takeover of its own version? No: it accepts;
    # a takeover whose peer goes away before READY leaves it serving.
    u = socket.socket(socket.AF_UNIX)
    u.connect(sock)
    u.sendall(ho_record(1, struct.pack("<II", os.getpid(), 0)))
    r = ho_reply(u)
    check(r and r[1] == 1, f"a version {HO_VER} HELLO got {r}")
    u.close()
    env.wait_for(px, r"failed (before it accepted|\(listeners\)).*still serving")
    check(echo_ok(held, b"after an abandoned takeover"), "the open connection broke after an abandoned takeover")
    held.close()
    s = connect(lp)
    check(echo_ok(s, b"new again"), "a new connection failed after an abandoned takeover")
    s.close()
    env.wait_stat(px, "conns_open", "0", 0)
    # A successor that says READY and vanishes: the old process had stopped
    # accepting and takes its listening sockets back, and the connection it
    # was handing over. One connection is open so that the old process waits
    # for its acknowledgement and sees the successor go: with none, a
    # successor that vanishes after READY and before END goes unseen if END
    # is written before its close (a gap of the handover format, TLPROXY.md).
    kept = connect(lp)
    check(echo_ok(kept, b"before the vanishing successor"), "no echo before the vanishing successor")
    u = socket.socket(socket.AF_UNIX)
    u.connect(sock)
    u.sendall(ho_record(1, struct.pack("<II", os.getpid(), 0)))
    check(ho_reply(u)[1] == 1, "no HELLO back")
    fds_got = []
    while True:
        msg, fds, _, _ = socket.recv_fds(u, 16, 4)
        fds_got += fds
        body_len = struct.unpack("<I", msg[8:12])[0]
        if body_len:
            u.recv(body_len, socket.MSG_WAITALL)
        if struct.unpack("<H", msg[6:8])[0] == 4:
            break
    nsh = 1 if env.wrap else 2  # a wrapper runs one shard
    check(len(fds_got) == nsh, f"{len(fds_got)} listening sockets handed over by {nsh} shards")
    for fd in fds_got:
        os.close(fd)
    u.sendall(ho_record(5, b""))
    u.close()
    env.wait_for(px, r"takeover by pid \d+ failed \(.*\): 0 connections it had taken go with it, [01] taken back "
                     r"and carried on here \(0 of them cut\); still serving")
    check(echo_ok(kept, b"after the vanishing successor"), "the open connection broke when the successor vanished")
    kept.close()
    for i in range(20):
        try:
            s = connect(lp)
        except OSError as e:
            raise Fail(f"new connection {i} after the successor vanished: {e}")
        check(echo_ok(s, b"taken back %d" % i), f"new connection {i} failed after the successor vanished")
        s.close()
    env.wait_stat(px, "conns_open", "0", 0)
    check(env.stop(px) == 0, "tlproxy did not exit 0")


CASES = {name[2:]: fn for name, fn in globals().items() if name.startswith("t_")}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2:])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--dns":
        serve_dns(sys.argv[2:])
        return 0
    return run_case(CASES, __doc__)


def run_case(cases, doc):
    """Run the case sys.argv[4] of cases with an Env of sys.argv[1:5]: the
    exit status (0 pass, 77 skip, 1 fail with tlproxy's output, 2 usage).
    The other case files of tlproxy run theirs through this too."""
    if len(sys.argv) != 5 or sys.argv[4] not in cases:
        print(doc + "\ncases: " + " ".join(cases), file=sys.stderr)
        return 2
    env = Env(*sys.argv[1:5])
    try:
        cases[sys.argv[4]](env)
        print(f"PASS {sys.argv[4]}")
        return 0
    except Skip as e:
        print(f"SKIP {sys.argv[4]}: {e}")
        return 77
    except Fail as e:
        print(f"FAIL {sys.argv[4]}: {e}")
        for pr in env.procs:
            if pr.name.startswith("tlproxy"):
                print(f"--- {pr.name} output:\n{pr.text()[-4000:]}")
        return 1
    finally:
        env.cleanup()


if __name__ == "__main__":
    sys.exit(main())
