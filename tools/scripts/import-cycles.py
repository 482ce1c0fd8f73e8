#!/usr/bin/env python3
"""Import circles between the files of each crate's library (and binary) sources.

A file imports another when its non-test code names a path into it: `use crate::...`,
`use super::...`, `use self::...`, or such a path written inline (`crate::a::f()`). A name
re-exported with `pub use` is followed to the module that defines it, so `use crate::Answer`
points at the file of `Answer`, not at `lib.rs`. A parent naming its own child (`mod child;`
alone) is not an import. A module and the modules under it are one unit (a child takes its
parent's items through `super::`, the parent re-exports its children's), so arrows between a
file and its own ancestor are left out unless `--with-parents` is given. Prints every circle
(a strongly connected set of files) and exits 1 when there is one; `--all` also prints the edges.

Usage: tools/scripts/import-cycles.py [--all] [--with-parents] [CRATE_DIR ...]   (default: every crate)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CRATES = ["core", "gpu", "proto", "process", "scheduler", "store", "result", "coordinator",
          "worker", "tests", "tools"]


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


def drop_test_code(text):
    """Cuts inline `#[cfg(test)] mod name { ... }` blocks and `#[cfg(test)] use` lines."""
    out, i = [], 0
    pat = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
    while True:
        m = pat.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    text = "".join(out)
    return re.sub(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?use[^;]*;", "", text)


def expand(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    m = re.search(r"\{", tree)
    if not m:
        return [re.sub(r"as\w+$", "", tree)] if tree else []
    prefix, depth, parts, cur = tree[:m.start()], 0, [], ""
    for ch in tree[m.end():-1]:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    res = []
    for p in parts:
        for e in expand(p):
            res.append(prefix + e if e != "self" else prefix.rstrip(":"))
    return res


class Crate:
    def __init__(self, root_file):
        self.files = {}  # module path (tuple) -> file
        self.test = set()
        self.load(root_file, (), os.path.dirname(root_file))

    def load(self, path, modpath, child_dir):
        self.files[modpath] = path
        raw = open(path).read()
        text = strip_comments(raw)
        decl = re.compile(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
        for m in decl.finditer(text):
            attrs, name = m.group(1), m.group(2)
            pm = re.search(r'#\[path\s*=\s*"([^"]*)"\]', strip_comments_keep(raw, m, text))
            if pm:
                child = os.path.join(os.path.dirname(path), pm.group(1))
                sub = os.path.splitext(child)[0]
            else:
                child = os.path.join(child_dir, name + ".rs")
                sub = os.path.join(child_dir, name)
                if not os.path.exists(child):
                    child = os.path.join(child_dir, name, "mod.rs")
            if not os.path.exists(child):
                continue
            if "cfg(test)" in attrs:
                self.test.add(modpath + (name,))
                continue
            self.load(child, modpath + (name,), sub)

    def code(self, modpath):
        return drop_test_code(strip_comments(open(self.files[modpath]).read()))


def strip_comments_keep(raw, m, text):
    # `#[path]` strings are emptied by strip_comments; find the attribute in the raw text.
    name = m.group(2)
    hit = re.search(r'#\[path\s*=\s*"[^"]*"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+'
                    + name + r"\s*;", raw)
    return hit.group(0) if hit else ""


def reexports(crate):
    """(module, name) -> module path the name is defined in, for `pub use` names."""
    table = {}
    for mod in crate.files:
        for m in re.finditer(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", crate.code(mod)):
            for p in expand(m.group(1)):
                segs = p.split("::")
                if not segs[-1] or segs[-1] == "*":
                    continue
                table[(mod, segs[-1])] = absolute(mod, segs)
    return table


def absolute(mod, segs):
    segs = list(segs)
    if segs[0] == "crate":
        base = ()
        segs = segs[1:]
    elif segs[0] in ("super", "self"):
        base = mod
        while segs and segs[0] in ("super", "self"):
            base = base[:-1] if segs[0] == "super" else base
            segs = segs[1:]
    else:
        base = mod  # a child module named plainly (`pub use child::X`)
    return base + tuple(segs)


def target(crate, table, path, seen=0):
    """The file a module path (ending in an item or a module) lives in."""
    best = ()
    for k in range(len(path), -1, -1):
        if path[:k] in crate.files:
            best = path[:k]
            break
    rest = path[len(best):]
    if rest and (best, rest[0]) in table and seen < 8:
        return target(crate, table, table[(best, rest[0])] + rest[1:], seen + 1)
    if rest and best + (rest[0],) in crate.test:
        return None
    return best


def edges(crate):
    table = reexports(crate)
    out = {}
    for mod in crate.files:
        code = crate.code(mod)
        paths = []
        for m in re.finditer(r"(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
            for p in expand(m.group(1)):
                segs = p.split("::")
                if segs[0] in ("crate", "super", "self"):
                    paths.append(absolute(mod, segs))
                elif mod + (segs[0],) in crate.files:
                    paths.append(mod + tuple(segs))
        code_wo_use = re.sub(r"use\s+[^;]+;", "", code)
        for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", code_wo_use):
            paths.append(absolute(mod, m.group(1).split("::")))
        for p in paths:
            t = target(crate, table, p)
            if t is None or t == mod:
                continue
            out.setdefault(mod, set()).add(t)
    return out


def sccs(nodes, adj):
    index, low, stack, on, res, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
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
                res.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return res


def roots(crate_dir):
    found = []
    for rel in ("src/lib.rs", "src/main.rs", "src/cli/main.rs"):
        p = os.path.join(ROOT, crate_dir, rel)
        if os.path.exists(p):
            found.append(p)
    return found


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_all = "--all" in sys.argv
    circles = 0
    for crate_dir in args or CRATES:
        for root in roots(crate_dir):
            crate = Crate(root)
            adj = edges(crate)
            if "--with-parents" not in sys.argv:
                adj = {a: {b for b in bs if a[:len(b)] != b and b[:len(a)] != a}
                       for a, bs in adj.items()}
            rel = lambda m: os.path.relpath(crate.files[m], ROOT)
            if show_all:
                for a in sorted(adj):
                    for b in sorted(adj[a]):
                        print(f"edge {rel(a)} -> {rel(b)}")
            for comp in sccs(sorted(crate.files), adj):
                circles += 1
                names = sorted(rel(m) for m in comp)
                print(f"circle: {', '.join(names)}")
                members = set(comp)
                for a in sorted(comp):
                    for b in sorted(adj.get(a, ())):
                        if b in members:
                            print(f"    {rel(a)} -> {rel(b)}")
    print(f"{circles} circle(s)")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
