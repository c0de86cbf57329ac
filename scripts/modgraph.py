#!/usr/bin/env python3
"""Checks the module graph of src/ (from its `crate::` paths) against the
layer map in src/lib.rs: the modules named in its `# Layout` doc comment,
in that order, each of which may use only those listed before it.

Prints, and exits 1 for: a module of src/ the map does not name (or one it
names that is not there), an arrow back up (a module using one listed
after it), a cycle. --edges also prints every arrow (module -> modules it
uses), each annotated with the map's order.

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
    print()
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
# The layer map: modules in order of first mention in lib.rs's `# Layout`
# bullets (`* `name`` or `* [`name`]`).
lib = open(os.path.join(root, "lib.rs")).read()
layout = []
for l in lib.split("# Layout", 1)[-1].splitlines()[1:]:
    if not l.startswith("//!"):
        break
    layout.append(l)
layout = "\n".join(layout)
order = []
for m in re.finditer(r"^//! \* \[?`([a-z_]+)`\]?", layout, re.M):
    if m.group(1) not in order:
        order.append(m.group(1))
declared = set(re.findall(r"^pub(?:\(crate\))? mod ([a-z_]+);", lib, re.M))
problems = []
for m in sorted(declared - set(order)):
    problems.append(f"not in the layer map (src/lib.rs, # Layout): {m}")
for m in sorted(set(order) - declared):
    problems.append(f"in the layer map but not a module: {m}")
rank = {m: i for i, m in enumerate(order)}
for s in sorted(edges):
    for d in sorted(edges[s]):
        if s in rank and d in rank and rank[d] > rank[s]:
            problems.append(f"arrow back up: {s} -> {d} ({d} is listed after {s})")
for c in sccs:
    problems.append("cycle: " + " <-> ".join(c))
for p in problems:
    print(p)
if not problems and "--edges" not in sys.argv:
    print(f"modgraph: {len(order)} modules, {sum(len(v) for v in edges.values())} arrows, all down the layer map")
sys.exit(1 if problems else 0)
