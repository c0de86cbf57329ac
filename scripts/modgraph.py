#!/usr/bin/env python3
"""Prints the module graph of src/ from its `crate::` paths: one line per
arrow (module -> module it uses), then any cycles, and any arrow from relay
or fault into intercept, commands or control. Exit 1 if either exists.

usage: scripts/modgraph.py [--edges]"""
import os, re, sys
root = os.path.join(os.path.dirname(__file__), "..", "src")
TOP = 1  # group by top-level module
edges = {}
for dp, _, fs in os.walk(root):
    for f in fs:
        if not f.endswith(".rs"):
            continue
        rel = os.path.relpath(os.path.join(dp, f), root)[:-3].split(os.sep)
        if rel[-1] in ("mod", "lib", "main"):
            rel = rel[:-1]
        if not rel:
            continue
        src = "::".join(rel[:TOP]) if rel[0] not in ("lib", "main") else rel[0]
        text = open(os.path.join(dp, f)).read()
        # drop test modules: arrows from tests do not count
        text = re.split(r"#\[cfg\(test\)\]\s*(pub\(crate\) )?mod (tests|testing)", text)[0]
        text = re.sub(r"//[^\n]*", "", text)
        for m in re.finditer(r"\bcrate::([a-z_]+)", text):
            dst = m.group(1)
            if dst != src.split("::")[0]:
                edges.setdefault(src, set()).add(dst)
        for m in re.finditer(r"\buse crate::\{([^}]*)\}", text):
            for part in m.group(1).split(","):
                dst = part.strip().split("::")[0]
                if dst and dst != src.split("::")[0]:
                    edges.setdefault(src, set()).add(dst)
if "--edges" in sys.argv:
    for s in sorted(edges):
        print(f"{s} -> {', '.join(sorted(edges[s]))}")
# cycles (Tarjan SCC)
index, low, stack, on, sccs = {}, {}, [], set(), []
def visit(v, i=[0]):
    index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        c = []
        while True:
            w = stack.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: sccs.append(sorted(c))
for v in list(edges):
    if v not in index:
        visit(v)
bad = [(s, d) for s in ("relay", "fault") for d in edges.get(s, ()) if d in ("intercept", "commands", "control")]
for c in sccs:
    print("cycle:", " <-> ".join(c))
for s, d in bad:
    print(f"forbidden: {s} -> {d}")
sys.exit(1 if sccs or bad else 0)
