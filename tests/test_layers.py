#!/usr/bin/env python3
"""tests/test_layers.py: each layer compiles with only its own include folders: a probe file that includes another layer's private header, compiled with the exact flags the build gives a real file of the layer, must fail; one that includes the layer's own headers must compile.

Usage: test_layers.py SOURCE_ROOT BUILD_ROOT    (exit 0 pass, 1 fail)

The flags come from the build's compile_commands.json, so the test checks the
include path meson really uses, not a copy of it. A second check reads the
sources: a quoted include that climbs out of its layer with "../" would get
past any include path, so none may.
"""
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

# (layer, a real source file of it, a piece of its object's path that names
# the target, headers it may include, headers it must not reach).
CORE_PRIVATE = ['internal.h', 'core.h', 'sysmod.h', 'pool/job.h', 'pool/pool_int.h']
DRIVER_PRIVATE = ['uring_int.h', 'epoll_int.h', 'sim_int.h']
SHARD_PRIVATE = ['runtime_int.h', 'spsc.h', 'stats_region.h', 'stats_reader.h']
SOURCE_ROOT = ['lib/core.h', 'drivers/driver.h', 'shards/runtime_int.h']
LAYERS = [
    ('drivers', 'drivers/epoll/ops.c', 'turnloop_drivers',
     ['driver.h', 'sock.h', 'splice_io.h', 'heap.h', 'os.h', 'tl_config.h', 'turnloop.h'],
     CORE_PRIVATE + SHARD_PRIVATE + ['uring_int.h', 'sim_int.h'] + SOURCE_ROOT),
    ('drivers (io_uring)', 'drivers/uring/net.c', 'turnloop_drivers',
     ['driver.h', 'uring.h'],
     CORE_PRIVATE + SHARD_PRIVATE + ['epoll_int.h', 'sim_int.h']),
    ('shards', 'shards/runtime.c', 'turnloop_shards',
     ['runtime_int.h', 'spsc.h', 'detail.h', 'topo.h', 'os.h', 'tl_config.h', 'turnloop.h'],
     CORE_PRIVATE + DRIVER_PRIVATE + ['driver.h', 'sock.h'] + SOURCE_ROOT),
    ('lib', 'lib/loop.c', 'libturnloop.so',
     ['core.h', 'internal.h', 'pool/job.h', 'driver.h', 'detail.h', 'os.h', 'tl_config.h'],
     DRIVER_PRIVATE + SHARD_PRIVATE + SOURCE_ROOT),
    ('lib/tls', 'lib/tls/ctx.c', 'turnloop_tls',
     ['turnloop.h', 'turnloop/tls.h'],
     CORE_PRIVATE + DRIVER_PRIVATE + SHARD_PRIVATE + ['driver.h', 'detail.h', 'heap.h', 'os.h']),
    ('lib/bufio', 'lib/bufio/bufio.c', 'turnloop_bufio',
     ['turnloop.h', 'turnloop/bufio.h'],
     CORE_PRIVATE + DRIVER_PRIVATE + SHARD_PRIVATE + ['driver.h', 'detail.h', 'heap.h',
                                                      'os.h', 'tl_config.h']),
    ('tools', 'tools/tlecho.c', 'tlecho.p',
     ['turnloop.h', 'cli.h', 'util.h'],
     CORE_PRIVATE + DRIVER_PRIVATE + SHARD_PRIVATE + SOURCE_ROOT +
     ['driver.h', 'sock.h', 'detail.h', 'heap.h', 'os.h', 'tl_config.h']),
    ('tools/tlproxy', 'tools/tlproxy/alog.c', 'tlproxy.p',
     ['turnloop.h', 'config.h', 'util.h'],
     CORE_PRIVATE + DRIVER_PRIVATE + SHARD_PRIVATE + SOURCE_ROOT +
     ['driver.h', 'detail.h', 'heap.h', 'os.h', 'tl_config.h']),
    ('tools/tlhttp', 'tools/tlhttp/main.c', 'tlhttp.p',
     ['turnloop.h', 'tlhttp/parse.h', 'util.h'],
     CORE_PRIVATE + DRIVER_PRIVATE + SHARD_PRIVATE + SOURCE_ROOT +
     ['driver.h', 'detail.h', 'heap.h', 'os.h', 'tl_config.h']),
]
# Folders whose files may not climb out of their own layer.
LAYER_DIRS = ['drivers', 'shards', 'lib', 'tools', 'bench']


def find_entry(entries, build, src, marker):
    """The compile command of src for the target whose object path holds marker."""
    for e in entries:
        path = os.path.normpath(os.path.join(e['directory'], e['file']))
        if path == src and marker in e.get('output', ''):
            return e
    return None


def probe_args(entry, probe):
    """The entry's arguments with its source, object and depfile replaced by a syntax check of probe."""
    args = entry.get('arguments') or shlex.split(entry['command'])
    out, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
            continue
        if a in ('-o', '-c', '-MQ', '-MF', '-MT'):
            skip = 1
            continue
        if a in ('-MD', '-MMD'):
            continue
        out.append(a)
    return out + ['-fsyntax-only', probe]


def compiles(entry, header, tmp):
    probe = tempfile.mkstemp(suffix='.c', dir=tmp)[1]
    with open(probe, 'w') as f:
        f.write('#include "%s"\nint tl__probe(void);\nint tl__probe(void) { return 0; }\n' % header)
    r = subprocess.run(probe_args(entry, probe), cwd=entry['directory'],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0, r.stdout


def check_climbs(root):
    """Quoted includes with ../ that leave the including file's layer."""
    bad = []
    inc_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for top in LAYER_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith(('.c', '.h')):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, errors='replace') as f:
                    for n, line in enumerate(f, 1):
                        m = inc_re.match(line)
                        if not m or '..' not in m.group(1):
                            continue
                        target = os.path.normpath(os.path.join(dirpath, m.group(1)))
                        rel = os.path.relpath(target, root)
                        if rel.split(os.sep)[0] != top:
                            bad.append('%s:%d: includes %s' % (os.path.relpath(path, root), n, rel))
    return bad


def main():
    if len(sys.argv) != 3:
        print('usage: test_layers.py SOURCE_ROOT BUILD_ROOT', file=sys.stderr)
        return 1
    root, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    db = os.path.join(build, 'compile_commands.json')
    if not os.path.exists(db):
        print('FAIL: %s missing (the ninja backend writes it)' % db)
        return 1
    with open(db) as f:
        entries = json.load(f)
    failed = checked = 0
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        jobs = []
        for layer, src, marker, allowed, forbidden in LAYERS:
            entry = find_entry(entries, build, os.path.join(root, src), marker)
            if entry is None and layer == 'lib/tls':
                # A build without GnuTLS (-Dtls=disabled) compiles only the
                # stub, with the same flags.
                entry = find_entry(entries, build, os.path.join(root, 'lib/tls/stub.c'), marker)
            if entry is None:
                print('FAIL %s: no compile command for %s in %s' % (layer, src, marker))
                failed += 1
                continue
            for h in allowed:
                jobs.append((layer, h, True, pool.submit(compiles, entry, h, tmp)))
            for h in forbidden:
                jobs.append((layer, h, False, pool.submit(compiles, entry, h, tmp)))
        for layer, h, own, job in jobs:
            ok, out = job.result()
            checked += 1
            if own:
                if not ok:
                    failed += 1
                    print('FAIL %s: its own header %s does not compile:\n%s' % (layer, h, out))
            else:
                if ok:
                    failed += 1
                    print('FAIL %s: %s compiles, but it belongs to another layer' % (layer, h))
                elif 'No such file' not in out:
                    failed += 1
                    print('FAIL %s: %s failed for another reason than the path:\n%s' %
                          (layer, h, out))
    for b in check_climbs(root):
        failed += 1
        print('FAIL ' + b + ' (another layer, reached with ../)')
    print('%d include probes, %d failures' % (checked, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
