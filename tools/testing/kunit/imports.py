#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The module import graph of a Rust crate laid out as `foo.rs` + `foo/` files.

    imports.py DIR ROOT PREFIX [-v] [--order]

DIR holds the crate's files, ROOT is the crate root's file name without `.rs`
(`ulp_main`, `rdma`), PREFIX how the crate's own paths start (`crate`, or
`crate::rdma` for kernel::rdma inside the kernel crate). A module depends on
every module one of its paths names: `use` trees, paths written inline
(`crate::x::Y`, `super::x`, `self::x`) and child modules named by their own
name. A child naming its parent (`super::Item`) is not counted: a parent and
its children are one module split into files, and Rust nests that way. Every
other edge must point down: the graph must have no cycle.

Prints the cycles (or "none"), every edge with -v; exits 1 on a cycle.
With --order, also checks that the crate root declares its modules bottom up
(`mod x;` after every module x imports) and exits 1 if not.
"""
import os
import re
import sys


def files(root, top):
    mods = {}
    for dirpath, _, names in os.walk(root):
        for f in names:
            if f.endswith('.rs'):
                rel = os.path.relpath(os.path.join(dirpath, f), root)[:-3]
                mods[() if rel == top else tuple(rel.split('/'))] = os.path.join(dirpath, f)
    return mods


def split_top(text):
    """Splits 'a, b::{c, d}' at its top-level commas."""
    parts, depth, cur = [], 0, ''
    for ch in text:
        depth += ch == '{'
        depth -= ch == '}'
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    return parts + [cur]


def expand(tree):
    """'a::{b, c::{d}}' -> [['a', 'b'], ['a', 'c', 'd']]."""
    m = re.match(r'^((?:[A-Za-z_]\w*\s*::\s*)*)(\{.*\}|[A-Za-z_*]\w*(?:\s+as\s+\w+)?)$', tree.strip(), re.S)
    if not m:
        return []
    head = [s.strip() for s in m.group(1).split('::') if s.strip()]
    tail = m.group(2)
    if not tail.startswith('{'):
        return [head + [tail.split()[0]]]
    return [head + e for p in split_top(tail[1:-1]) if p.strip() for e in expand(p)]


def resolve(mods, prefix, m, path):
    """The module (a key of mods) that path, written in module m, names; None if outside."""
    if path[0] == 'crate':
        if path[1:len(prefix)] != prefix[1:]:
            return None
        rel = path[len(prefix):]
    elif path[0] in ('super', 'self'):
        base, rel = list(m), list(path)
        while rel and rel[0] == 'super':
            base, rel = base[:-1], rel[1:]
        if rel and rel[0] == 'self':
            rel = rel[1:]
        rel = base + rel
    elif tuple(m) + (path[0],) in mods:
        rel = list(m) + path
    else:
        return None
    for i in range(len(rel), -1, -1):
        if tuple(rel[:i]) in mods:
            return tuple(rel[:i])
    return None


def graph(root, top, prefix):
    mods = files(root, top)
    edges = {}
    for m, path in mods.items():
        src = open(path, encoding='utf-8').read()
        src = re.sub(r'//[^\n]*', '', src)  # comments and doc comments
        src = re.sub(r'"(?:[^"\\]|\\.)*"', '""', src)
        paths = []
        for u in re.finditer(r'\buse\s+([^;]*);', src, re.S):
            paths += expand(u.group(1))
        for u in re.finditer(r'\b((?:crate|super|self)(?:\s*::\s*[A-Za-z_]\w*)+)', src):
            paths.append([s.strip() for s in u.group(1).split('::')])
        for u in re.finditer(r'(?<![:\w])([a-z_]\w*)\s*::\s*([A-Za-z_]\w*)', src):
            if tuple(m) + (u.group(1),) in mods:
                paths.append([u.group(1), u.group(2)])
        deps = set()
        for p in paths:
            r = resolve(mods, prefix, m, p)
            # Itself, or an ancestor (a child using its parent's items).
            if r is not None and m[:len(r)] != r:
                deps.add(r)
        edges[m] = deps
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
                found.append(comp)

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def order(edges, root_file):
    """The top-level modules declared before a module they are imported by."""
    decl = re.findall(r'^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', open(root_file, encoding='utf-8').read(), re.M)
    pos = {m: i for i, m in enumerate(decl)}
    bad = []
    for m, deps in edges.items():
        if not m:
            continue
        for d in deps:
            if d and d[0] != m[0] and pos.get(d[0], -1) > pos.get(m[0], -1):
                bad.append((m[0], d[0]))
    return sorted(set(bad))


def main():
    args = [a for a in sys.argv[1:] if a not in ('-v', '--order')]
    if len(args) != 3:
        sys.exit(__doc__)
    edges = graph(args[0], args[1], args[2].split('::'))
    name = lambda t: '::'.join(t) or '<root>'
    if '-v' in sys.argv:
        for m in sorted(edges):
            print(f"{name(m)} -> {', '.join(sorted(map(name, edges[m])))}")
    found = cycles(edges)
    for comp in found:
        print(f"{args[0]}: import cycle: {' -> '.join(name(x) for x in comp)}")
    if not found:
        print(f"{args[0]}: no import cycle")
    late = []
    if '--order' in sys.argv:
        root_file = os.path.join(args[0], args[1] + '.rs')
        late = order(edges, root_file)
        for m, d in late:
            print(f"{root_file}: `mod {m};` comes before `mod {d};`, which it imports")
        if not late:
            print(f"{root_file}: modules declared bottom up")
    sys.exit(1 if found or late else 0)


if __name__ == '__main__':
    main()
