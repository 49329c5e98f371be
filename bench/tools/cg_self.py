#!/usr/bin/env python3
# Self cost per function from a callgrind dump, divided by a request count: what
# callgrind_annotate gives, for dumps it attributes whole to clone() (a thread made before
# the counters were zeroed). Usage: bench/tools/cg_self.py DUMP REQUESTS
import collections
import re
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)
names={}; self_=collections.Counter(); cur=None; skip=False
def name(tok, table):
    m=re.match(r'\((\d+)\)(?: (.*))?', tok)
    if not m: return tok
    i,n=m.groups()
    if n: table[i]=n
    return table.get(i, i)
fnames={}
for line in open(sys.argv[1], errors='replace'):
    line=line.rstrip('\n')
    if line.startswith('fn='):
        cur=name(line[3:], fnames); continue
    if line.startswith('cfn=') :
        name(line[4:], fnames); continue
    if line.startswith('calls='):
        skip=True; continue
    if line and (line[0].isdigit() or line[0] in '+-*'):
        parts=line.split()
        if skip: skip=False; continue
        if len(parts)>=2 and cur:
            try: self_[cur]+=int(parts[1])
            except: pass
total=sum(self_.values())
n=int(sys.argv[2]) if len(sys.argv)>2 else 5000
print("total", total, "per req", total//n)
for f,c in self_.most_common(60):
    print(f"{c//n:7d} {100*c/total:5.1f}% {f[:150]}")
