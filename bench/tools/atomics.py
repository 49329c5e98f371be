#!/usr/bin/env python3
"""Counts the atomic read-modify-write instructions a weir binary executed per request, by
function, from a callgrind profile taken with --dump-instr=yes --compress-pos=no
--compress-strings=no: the instructions with a `lock` prefix (and `xchg` with memory, locked
implicitly) are found in the binary's disassembly (objdump), and their execution counts read
from the profile. Each one is a write to a cache line that other cores may share; on one worker
they cost ~20 cycles, across workers they are where scaling stops (issue 35 §5).
Usage: atomics.py BINARY CALLGRIND_OUT REQUESTS"""
import re
import subprocess
import sys
from collections import defaultdict


def locked_addresses(binary):
    """Addresses (as in the file) of locked instructions, with their function."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", binary],
                         capture_output=True, text=True, check=True).stdout
    func, locked, symbols = None, {}, {}
    for line in out.splitlines():
        m = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
        if m:
            func = m.group(2)
            symbols[func] = int(m.group(1), 16)
            continue
        m = re.match(r"^\s+([0-9a-f]+):\s+(.*)$", line)
        if not m:
            continue
        ins = m.group(2)
        if ins.startswith("lock ") or (ins.startswith("xchg") and "(" in ins):
            locked[int(m.group(1), 16)] = (func, ins.split()[1] if ins.startswith("lock") else "xchg")
    return locked, symbols


def executed(profile, binary):
    """Execution counts (Ir) per instruction address of `binary` (not of the libraries), and a
    function's lowest address seen."""
    counts = defaultdict(int)
    lowest = {}
    fn = None
    ours = False
    skip_next = False
    name = binary.rsplit("/", 1)[-1]
    with open(profile) as f:
        for line in f:
            if line.startswith("ob="):
                ours = line.strip().endswith("/" + name)
                continue
            if line.startswith("fn="):
                fn = line[3:].strip()
                continue
            if line.startswith("calls="):
                skip_next = True
                continue
            # "ADDRESS [LINE] Ir": the line number is there unless --dump-line=no.
            m = re.match(r"^0x([0-9a-f]+)((?: \d+)+)$", line.strip())
            if not m:
                continue
            if skip_next:
                skip_next = False
                continue
            if not ours:
                continue
            addr = int(m.group(1), 16)
            counts[addr] += int(m.group(2).split()[-1])
            if fn is not None and (fn not in lowest or addr < lowest[fn]):
                lowest[fn] = addr
    return counts, lowest


def main():
    binary, profile, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])
    locked, symbols = locked_addresses(binary)
    counts, lowest = executed(profile, binary)
    # The load base: the most common (runtime entry - file symbol) over functions in both.
    offsets = defaultdict(int)
    for fn, addr in lowest.items():
        if fn in symbols:
            offsets[addr - symbols[fn]] += 1
    base = max(offsets.items(), key=lambda kv: kv[1])[0] if offsets else 0
    per_fn = defaultdict(float)
    total = 0.0
    for addr, (fn, op) in locked.items():
        n = counts.get(addr + base, 0)
        if n:
            per_fn[(fn, op)] += n / requests
            total += n / requests
    print(f"atomic read-modify-writes per request: {total:.2f}")
    for (fn, op), n in sorted(per_fn.items(), key=lambda kv: -kv[1]):
        if n >= 0.01:
            print(f"{n:8.2f}  {op:8s} {fn[:150]}")


if __name__ == "__main__":
    main()
