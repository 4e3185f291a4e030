#!/usr/bin/env python3
"""tests/tlkv_check.py: a client of tlkv that checks every reply: a pipelined batch of commands on one socket whose replies must come back in request order and equal what a model of the key space says, and bad input that must get one error line and a closed connection.

Usage: tlkv_check.py PORT MODE...   (exit 0: every reply right)
MODE: pipeline[:N[:DEPTH]] (default 2000 commands, 64 in flight), bad,
count (new keys, then DBSIZE in the same pipeline), split (commands and
empty lines sent a byte at a time), or files:DIR:KEYS (SAVE's files in DIR
hold KEYS keys in all).
"""
import os
import random
import socket
import sys


def resp(*args):
    out = b'*%d\r\n' % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b'$%d\r\n%s\r\n' % (len(a), a)
    return out


class Reader:
    """Replies parsed off a socket, one at a time, as Python values: bytes
    for simple and bulk strings, int, None for nil, ('err', text), list."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b''

    def fill(self):
        data = self.sock.recv(65536) if self.sock else b''

        if not data:
            raise EOFError('the server closed the connection')
        self.buf += data

    def line(self):
        while b'\r\n' not in self.buf:
            self.fill()
        ln, self.buf = self.buf.split(b'\r\n', 1)
        return ln

    def reply(self):
        ln = self.line()
        t, rest = ln[:1], ln[1:]
        if t == b'+':
            return rest
        if t == b'-':
            return ('err', rest.decode())
        if t == b':':
            return int(rest)
        if t == b'$':
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.fill()
            v, self.buf = self.buf[:n], self.buf[n + 2:]
            return v
        if t == b'*':
            return [self.reply() for _ in range(int(rest))]
        raise ValueError('not a reply: %r' % ln)


def pipeline(port, n, depth):
    """n commands (SET, GET, INCR, MGET, DEL) on keys spread over every shard,
    depth of them in flight at once; each reply checked against the model."""
    rnd = random.Random(29)
    model = {}
    run = os.urandom(6).hex()  # keys of their own: a run starts from an empty model
    keys = ['chk:%s:%d' % (run, i) for i in range(64)]
    s = socket.create_connection(('127.0.0.1', port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rd = Reader(s)
    expect = []
    sent = checked = 0

    def one():
        k = rnd.choice(keys)
        op = rnd.random()
        if op < 0.3:
            v = str(rnd.randrange(-1000, 1000)) if rnd.random() < 0.7 else 'v%d' % rnd.randrange(10**6)
            if rnd.random() < 0.1:  # long: read in place by its owner, and GET's reply too long to copy
                v = 'L' + v * rnd.randrange(20, 400)
            model[k] = v.encode()
            return resp('SET', k, v), b'OK'
        if op < 0.55:
            return resp('GET', k), model.get(k)
        if op < 0.8:
            v = model.get(k, b'0')
            try:
                nv = int(v) + 1
            except ValueError:
                return resp('INCR', k), ('err', 'ERR value is not an integer or out of range')
            model[k] = str(nv).encode()
            return resp('INCR', k), nv
        if op < 0.93:
            ks = rnd.sample(keys, rnd.randrange(1, 6))
            return resp('MGET', *ks), [model.get(x) for x in ks]
        ks = rnd.sample(keys, rnd.randrange(1, 4))
        cnt = sum(1 for x in ks if model.pop(x, None) is not None)
        return resp('DEL', *ks), cnt

    while checked < n:
        batch = b''
        while sent < n and sent - checked < depth:
            cmd, exp = one()
            batch += cmd
            expect.append((cmd, exp))
            sent += 1
        if batch:
            s.sendall(batch)
        while checked < sent and (sent - checked > depth // 2 or sent == n):
            got = rd.reply()
            cmd, exp = expect[checked]
            if got != exp:
                print('FAIL: reply %d to %r: got %r, expected %r' % (checked, cmd, got, exp))
                return 1
            checked += 1
    s.close()
    print('ok: %d pipelined replies in order and right (depth %d)' % (n, depth))
    return 0


def bad(port):
    """Each bad input gets its error line, then the connection closes; the
    replies owed before it still come first; others are served meanwhile."""
    cases = [
        (b'hello world\r\n', [], "ERR Protocol error: expected '*'"),
        (b'*1\r\n$999999999\r\n', [], 'ERR Protocol error: invalid bulk length'),
        (b'*1\r\n$3\r\nPINGX\r\n', [], 'ERR Protocol error: invalid bulk length'),
        (b'*99999\r\n', [], 'ERR Protocol error: invalid multibulk length'),
        (resp('SET', 'bad:a', '1') + resp('GET', 'bad:a') + b'*x\r\n', [b'OK', b'1'],
         'ERR Protocol error: invalid multibulk length'),
    ]
    for data, before, err in cases:
        s = socket.create_connection(('127.0.0.1', port))
        s.settimeout(5)
        s.sendall(data)
        rd = Reader(s)
        for want in before:
            got = rd.reply()
            if got != want:
                print('FAIL: %r: got %r before the error, expected %r' % (data, got, want))
                return 1
        got = rd.reply()
        if not (isinstance(got, tuple) and got[1].startswith(err)):
            print('FAIL: %r: got %r, expected an error starting %r' % (data, got, err))
            return 1
        try:
            rd.reply()
            print('FAIL: %r: the connection stayed open after the error' % data)
            return 1
        except EOFError:
            pass
        s.close()
        o = socket.create_connection(('127.0.0.1', port))
        o.sendall(resp('PING'))
        if Reader(o).reply() != b'PONG':
            print('FAIL: no PONG after %r' % data)
            return 1
        o.close()
    print('ok: %d kinds of bad input: an error line, then the close' % len(cases))
    return 0


def count(port, n=200):
    """SETs of n new keys (on every shard), then DBSIZE and the keys' DEL in
    the same pipeline: the count includes every key set before it, and the
    DEL finds them all (a connection's commands reach each shard in order)."""
    s = socket.create_connection(('127.0.0.1', port))
    s.settimeout(10)
    rd = Reader(s)
    s.sendall(resp('DBSIZE'))
    before = rd.reply()
    keys = ['cnt:%s:%d' % (os.urandom(6).hex(), i) for i in range(n)]
    s.sendall(b''.join(resp('SET', k, 'v') for k in keys) + resp('DBSIZE') + resp('DEL', *keys) +
              resp('DBSIZE'))
    got = [rd.reply() for _ in range(n + 3)]
    want = [b'OK'] * n + [before + n, n, before]
    s.close()
    if got != want:
        bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
        print('FAIL: count: %d replies wrong, the first (index, got, expected): %r' % (len(bad), bad[0]))
        return 1
    print('ok: DBSIZE after %d new keys in one pipeline: %d, then %d after their DEL' % (n, before + n, before))
    return 0


def split(port):
    """Commands and the empty lines redis-cli --pipe sends, written a byte
    at a time with a pause after each (every read may end anywhere, an
    empty line's CR apart from its LF): every reply right, the connection
    kept."""
    import time
    key = 'split:%s' % os.urandom(6).hex()
    data = resp('SET', key, 'hello') + b'\r\n' + resp('GET', key) + b'\r\n\r\n' + resp('DEL', key) + resp('PING')
    s = socket.create_connection(('127.0.0.1', port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(10)
    want = [b'OK', b'hello', 1, b'PONG']
    try:
        for i in range(len(data)):
            s.sendall(data[i:i + 1])
            time.sleep(0.002)
        rd = Reader(s)
        got = [rd.reply() for _ in range(4)]
    except (OSError, EOFError) as e:
        got = 'the connection ended (%s)' % e
    s.close()
    if got != want:
        print('FAIL: split: got %r, expected %r' % (got, want))
        return 1
    print('ok: %d bytes sent one at a time: every reply right' % len(data))
    return 0


def leave(port, n=5):
    """Clients that send a pipeline of GETs of a 400 KB value and leave
    without reading, some closing at once (the server's writes then meet
    EPIPE: no SIGPIPE may end it), some resetting the connection once
    replies flow: the server still answers a new client."""
    import struct
    import time
    key = 'leave:%s' % os.urandom(6).hex()
    s = socket.create_connection(('127.0.0.1', port))
    s.settimeout(10)
    rd = Reader(s)
    s.sendall(resp('SET', key, 'x' * 400000))
    ok = rd.reply() == b'OK'
    s.close()
    for i in range(2 * n):
        c = socket.create_connection(('127.0.0.1', port))
        if i % 2:  # a reset at the close; else a FIN before any reply came, the reset after it
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        c.sendall(resp('GET', key) * 50)
        if i % 2:
            time.sleep(0.02)
        c.close()
    time.sleep(0.2)
    try:
        s = socket.create_connection(('127.0.0.1', port))
        s.settimeout(10)
        rd = Reader(s)
        s.sendall(resp('DEL', key) + resp('PING'))
        got = [rd.reply(), rd.reply()]
        s.close()
    except (OSError, EOFError) as e:
        got = 'no answer (%s)' % e
    if not ok or got != [1, b'PONG']:
        print('FAIL: leave: after %d clients left mid-reply: %r' % (2 * n, got))
        return 1
    print('ok: %d clients left mid-reply (a close, a reset): the server still answers' % (2 * n))
    return 0


def files(d, n):
    """SAVE's files: a file per shard, each a run of SET commands (what
    `redis-cli --pipe` replays), n keys in all and none twice."""
    keys, per = set(), []
    for name in sorted(os.listdir(d)):
        if not (name.startswith('tlkv-') and name.endswith('.resp')):
            continue
        rd, count = Reader(None), 0
        with open(os.path.join(d, name), 'rb') as f:
            rd.buf = f.read()
        while rd.buf:
            cmd = rd.reply()
            if not (isinstance(cmd, list) and len(cmd) == 3 and cmd[0] == b'SET') or cmd[1] in keys:
                print('FAIL: %s: %r is no SET of a new key' % (name, cmd[:2]))
                return 1
            keys.add(cmd[1])
            count += 1
        per.append(count)
    if len(keys) != n or len(per) < 2 or 0 in per:
        print('FAIL: SAVE\'s files hold %d keys (expected %d), per file %r' % (len(keys), n, per))
        return 1
    print('ok: SAVE\'s files hold the %d keys, per shard %r' % (n, per))
    return 0


def main():
    port = int(sys.argv[1])
    for mode in sys.argv[2:]:
        m = mode.split(':')
        if m[0] == 'pipeline':
            rc = pipeline(port, int(m[1]) if len(m) > 1 else 2000, int(m[2]) if len(m) > 2 else 64)
        elif m[0] == 'files':
            rc = files(m[1], int(m[2]))
        elif m[0] == 'bad':
            rc = bad(port)
        elif m[0] == 'count':
            rc = count(port)
        elif m[0] == 'split':
            rc = split(port)
        elif m[0] == 'leave':
            rc = leave(port)
        else:
            print('FAIL: no mode %r' % mode)
            rc = 2
        if rc:
            return rc
    return 0


if __name__ == '__main__':
    sys.exit(main())
