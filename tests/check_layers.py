#!/usr/bin/env python3
# tests/check_layers.py: fails when the files of a folder (tools/tlproxy) depend on each other in a circle: by #include, or by calling a function another file defines.
"""Usage: check_layers.py DIR

A file's stem is its module (world.c and world.h are "world"), and the
parts of a family go with it (balance_rows.h and balance_swrr.c are
"balance": the rows of a policy table and the table). Module A
depends on module B when a file of A includes "B.h", or when code in a file
of A calls a function that B's .c defines (not static). A function called
through a pointer is no dependency: that is how a lower stage reaches a
higher one through a hook. The modules must form no circle; the script
prints every circle it finds and exits 1, or prints the order from the
bottom up and exits 0. Exit 2: bad usage.
"""
import os
import re
import sys


def strip(text):
    """The code without comments, strings and character constants."""
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'//[^\n]*', ' ', text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


DEF = re.compile(r'^(?!static\b)(?!typedef\b)(?!extern\b)[A-Za-z_][\w \t\*]*?\b(\w+)\([^;]*?\)\s*\{',
                 re.M | re.S)
STATIC_DEF = re.compile(r'^static\b[\w \t\*]*?\b(\w+)\([^;]*?\)\s*\{', re.M | re.S)
CALL = re.compile(r'\b(\w+)\s*\(')
# A declaration (a prototype) names a function without calling it.
DECL = re.compile(r'^[A-Za-z_][\w \t\*]*?\b\w+\([^;{}]*?\)\s*(__attribute__\s*\(\(.*?\)\))?\s*;',
                  re.M | re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module(name):
    """world.c -> world; balance_swrr.c -> balance."""
    return name.rsplit('.', 1)[0].split('_', 1)[0]


def graph(folder):
    names = sorted(f for f in os.listdir(folder) if f.endswith(('.c', '.h')))
    code = {}
    for n in names:
        with open(os.path.join(folder, n), encoding='utf-8') as fh:
            code[n] = fh.read()
    stems = {module(n) for n in names}
    owner = {}  # function -> the stem of the .c that defines it
    for n in names:
        if n.endswith('.c'):
            for m in DEF.finditer(strip(code[n])):
                owner[m.group(1)] = module(n)
    edges = {s: set() for s in stems}
    for n in names:
        me = module(n)
        for inc in INCLUDE.findall(code[n]):
            base = os.path.basename(inc)
            if inc == base and base.endswith('.h') and module(base) in stems and module(base) != me:
                edges[me].add(module(base))
        body = DECL.sub(' ', strip(code[n]))
        local = set(STATIC_DEF.findall(body))
        for f in set(CALL.findall(body)):
            if f in owner and owner[f] != me and f not in local:
                edges[me].add(owner[f])
    return edges


def cycles(edges):
    """Each strongly connected set of more than one module (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    edges = graph(sys.argv[1])
    bad = cycles(edges)
    for comp in bad:
        print('circle among: ' + ', '.join(comp))
        for v in comp:
            print('  %s -> %s' % (v, ', '.join(sorted(w for w in edges[v] if w in comp))))
    if bad:
        return 1
    done, order = set(), []
    while len(done) < len(edges):
        for v in sorted(edges):
            if v not in done and edges[v] <= done:
                done.add(v)
                order.append(v)
    print("no circle; bottom up: " + " ".join(order))
    return 0


if __name__ == '__main__':
    sys.exit(main())
