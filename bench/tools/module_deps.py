#!/usr/bin/env python3
"""Prints the dependency graph between the top-level modules of a crate (crates/weir/src, or
the crate directory given) and any cycle.

A module depends on another when its files name `crate::other` (in `use` or a path), or
`super::other` from a file directly in the module's folder. Exit status 1 if there is a cycle.
Usage: python3 bench/tools/module_deps.py [crates/weir-cache]
"""
import os
import re
import sys

ROOT = (
    os.path.join(sys.argv[1], "src")
    if len(sys.argv) > 1
    else os.path.join(os.path.dirname(__file__), "..", "..", "crates", "weir", "src")
)
mods = {}
for entry in sorted(os.listdir(ROOT)):
    path = os.path.join(ROOT, entry)
    name = entry[:-3] if entry.endswith(".rs") else entry
    if name in ("lib", "main"):
        continue
    files = []
    if os.path.isdir(path):
        for d, _, fs in os.walk(path):
            files += [os.path.join(d, f) for f in fs if f.endswith(".rs")]
    elif entry.endswith(".rs"):
        files = [path]
    mods[name] = files

deps = {m: set() for m in mods}
for m, files in mods.items():
    for f in files:
        text = open(f).read()
        # Comments and doc comments do not count.
        text = re.sub(r"//[^\n]*", "", text)
        for other in re.findall(r"\bcrate::(\w+)", text):
            if other in mods and other != m:
                deps[m].add(other)
        # `use crate::{a, b::c}` groups.
        for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
            for other in re.findall(r"(?:^|,)\s*(\w+)", group):
                if other in mods and other != m:
                    deps[m].add(other)

for m in sorted(deps):
    print(f"{m:10} -> {', '.join(sorted(deps[m])) or '-'}")

# Cycle search (DFS).
cycles = []
def dfs(node, stack, seen):
    for nxt in sorted(deps[node]):
        if nxt in stack:
            cycle = stack[stack.index(nxt):] + [nxt]
            if sorted(cycle[:-1]) not in [sorted(c[:-1]) for c in cycles]:
                cycles.append(cycle)
        elif nxt not in seen:
            seen.add(nxt)
            dfs(nxt, stack + [nxt], seen)
for m in sorted(deps):
    dfs(m, [m], {m})
if cycles:
    for c in cycles:
        print("cycle: " + " -> ".join(c))
    sys.exit(1)
print("no cycles")
