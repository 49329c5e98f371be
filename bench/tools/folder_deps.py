#!/usr/bin/env python3
"""Imports between the files of one folder of crates/weir/src (default: server), for the
architecture review's figures (issue 54 §2): the import circles among its modules (strongly
connected components of more than one module) and the imports that run back up inside it (a
module in a sub-folder naming a module of a folder above it, through `super::super::`,
`crate::server::...` or `super::` from a folder's own files).

A module is a file; a folder's `mod.rs` is the folder. An import is any path in the file's
code (not its comments) that names another module of the folder: `use` lines and inline
paths alike.

Usage: bench/tools/folder_deps.py [FOLDER] [SRC_ROOT]
"""
import os
import re
import sys

FOLDER = sys.argv[1] if len(sys.argv) > 1 else "server"
SRC = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    os.path.dirname(__file__), "..", "..", "crates", "weir", "src")
BASE = os.path.join(SRC, FOLDER)


def module_of(path):
    """`a/b.rs` -> ('a', 'b'); `a/mod.rs` -> ('a',); relative to the folder."""
    rel = os.path.relpath(path, BASE)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    return tuple(rel)


modules = {}
for dirpath, _, files in os.walk(BASE):
    for f in files:
        if f.endswith(".rs"):
            p = os.path.join(dirpath, f)
            modules[module_of(p)] = p
names = set(modules)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.split("\n"))


def resolve(mod, path):
    """The module of this folder a path (`super::x::y`, `crate::server::x`) names, if any."""
    parts = path.split("::")
    if parts[0] == "crate":
        if len(parts) < 2 or parts[1] != FOLDER:
            return None
        target, rest = [], parts[2:]
    elif parts[0] == "super":
        # A module's parent: `server/tls.rs` is server::tls, its `super` the folder itself.
        target, rest = list(mod), parts
        while rest and rest[0] == "super":
            if not target:
                return None
            target, rest = target[:-1], rest[1:]
    elif parts[0] == "self":
        target, rest = list(mod), parts[1:]
    else:
        return None
    best = tuple(target)
    for p in rest:
        cand = tuple(target + [p])
        if cand in names:
            target.append(p)
            best = cand
        else:
            break
    if best == mod or best not in names:
        return None
    return best


edges = {m: set() for m in modules}
for mod, path in modules.items():
    code = strip_comments(open(path).read())
    # Tests (a `mod tests` at the end of the file) are not the module's imports.
    code = re.split(r"#\[cfg\(test\)\]\s*(?:#\[path[^\]]*\]\s*)?mod tests", code)[0]
    # `use super::{a, b::c}` groups: expanded one level.
    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)*)::\{([^}]*)\}", code):
        for item in m.group(2).split(","):
            item = item.strip().split(" ")[0]
            if item:
                t = resolve(mod, m.group(1) + "::" + item)
                if t:
                    edges[mod].add(t)
    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", code):
        t = resolve(mod, m.group(1))
        if t:
            edges[mod].add(t)
    # A child module named by a bare path (`driver::Driver` in h2/mod.rs, `use park::X`).
    for m in re.finditer(r"(?<![\w:])(\w+)::", code):
        child = mod + (m.group(1),)
        if child in names:
            edges[mod].add(child)


def sccs(graph):
    index, low, stack, on, out, i = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = i[0]
        i[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def name(m):
    return "/".join(m) or "(mod.rs)"


circles = [sorted(c) for c in sccs(edges) if len(c) > 1]
# Back up: a module importing one of its ancestors (its folder's `mod.rs`, or one above):
# what makes a folder and its files a circle.
up = sorted((m, t) for m, ts in edges.items() for t in ts if len(t) < len(m) and m[: len(t)] == t)
print(f"{FOLDER}/: {len(modules)} modules, {sum(len(t) for t in edges.values())} imports among them")
print(f"import circles: {len(circles)}")
for c in circles:
    print(f"  {len(c)} modules: {', '.join(name(m) for m in c)}")
print(f"imports back up: {len(up)}")
for a, b in sorted(up):
    print(f"  {name(a)} -> {name(b)}")
