#!/usr/bin/env python3
"""Check an nqueens-cluster export without nqueens-cluster: Python 3, standard library only.

An export (`nqueens-coordinator export --state RUN.db --to FILE`) lists every counted job of a
run: its fixed queens, its counts and its orbit weight. This script checks, on its own:

  1. form: a header, one canonical JSON row per job in job order, and a last line;
  2. digest: the SHA-256 of the row lines equals the last line's `rows_sha256` (and the result
     file's `export_sha256`, given --result);
  3. sums: the weighted sums of the rows give the last line's (and the result file's) Total,
     Unique and symmetry classes;
  4. coverage (--coverage, on by default): the rows are a partition of all solutions, so that
     their weighted sum is the board's count if every row is right: one constellation (the
     queens on the four borders) per orbit of the 8 symmetries, with that orbit's size as its
     weight; each constellation's rows pre-place exactly every non-attacking way to fill one set of
     rows; an orbit without rows has no solution at all;
  5. rows: --rows K re-solves K rows drawn with --seed (or --rows all: every row) with its own
     plain bitboard search, counting the solutions and those a half turn and a quarter turn
     map onto themselves.

Exit status 0 when everything holds, 1 when anything fails (each failure is printed), 2 on a
usage error or a file that is not an export.
"""

import argparse
import gzip
import hashlib
import json
import random
import sys
import time

ROW_KEYS = ["job", "queens", "fill", "weight", "solutions", "sym180", "sym90",
            "coordinator", "credentials"]
FORMAT, VERSION = "nqueens-export", 1


class NotAnExport(Exception):
    pass


def open_export(path):
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_export(path):
    """The header, the rows (parsed), the last line, and the digest of the row lines."""
    sha = hashlib.sha256()
    rows, header, end = [], None, None
    with open_export(path) as f:
        for number, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n"):
                raise NotAnExport(f"line {number}: no newline (a cut file?)")
            text = raw[:-1].decode("utf-8")
            obj = json.loads(text)
            if number == 1:
                header = obj
                if header.get("format") != FORMAT or header.get("version") != VERSION:
                    raise NotAnExport(f"not a {FORMAT} version {VERSION} file: {text[:200]}")
                continue
            if end is not None:
                raise NotAnExport(f"line {number}: a line after the last line")
            if "end" in obj:
                end = obj
                continue
            if list(obj) != ROW_KEYS:
                raise NotAnExport(f"line {number}: fields {list(obj)}, expected {ROW_KEYS}")
            if json.dumps(obj, separators=(",", ":")) != text:
                raise NotAnExport(f"line {number}: not in canonical form")
            if rows and rows[-1]["job"] >= obj["job"]:
                raise NotAnExport(f"line {number}: job {obj['job']} out of order")
            sha.update(raw)
            rows.append(obj)
    if header is None or end is None:
        raise NotAnExport("no header or no last line (a cut file?)")
    return header, rows, end, sha.hexdigest()


# --- the board -----------------------------------------------------------------------------

def symmetries(n):
    m = n - 1
    return [
        lambda r, c: (r, c), lambda r, c: (c, m - r), lambda r, c: (m - r, m - c),
        lambda r, c: (m - c, r), lambda r, c: (r, m - c), lambda r, c: (m - r, c),
        lambda r, c: (c, r), lambda r, c: (m - c, m - r),
    ]


def attack_free(queens):
    rows, cols, d1, d2 = set(), set(), set(), set()
    for r, c in queens:
        if r in rows or c in cols or r + c in d1 or r - c in d2:
            return False
        rows.add(r); cols.add(c); d1.add(r + c); d2.add(r - c)
    return True


def constellation(n, queens):
    """The queens on the four borders, if each border holds exactly one queen."""
    m = n - 1
    border = frozenset(q for q in queens if q[0] in (0, m) or q[1] in (0, m))
    for on in (lambda q: q[0] == 0, lambda q: q[0] == m, lambda q: q[1] == 0, lambda q: q[1] == m):
        if sum(1 for q in border if on(q)) != 1:
            return None
    return border


def all_constellations(n):
    """Every valid set of border queens (one on each border, none attacking another)."""
    m, found = n - 1, set()
    for t in range(n):
        for b in range(n):
            for left in range(n):
                for right in range(n):
                    queens = {(0, t), (m, b), (left, 0), (right, m)}
                    c = constellation(n, queens)
                    if c is not None and len(c) == len(queens) and attack_free(c):
                        found.add(c)
    return found


def orbit(n, queens):
    return {frozenset(s(r, c) for r, c in queens) for s in symmetries(n)}


def count(n, queens, order=None, limit=None):
    """Solutions containing `queens`: (solutions, sym180, sym90, nodes). A plain bitboard search
    over the empty rows in row order (or the emptiest row first, order="fewest")."""
    full = (1 << n) - 1
    cols = ld = rd = 0
    placed = [None] * n
    for r, c in queens:
        cols |= 1 << c; ld |= 1 << (r + c); rd |= 1 << (c - r + n - 1)
        placed[r] = c
    empty = [r for r in range(n) if placed[r] is None]
    totals = [0, 0, 0, 0]
    m = n - 1

    def free(r, cols, ld, rd):
        return full & ~cols & ~(ld >> r) & ~(rd >> (m - r))

    def leaf():
        totals[0] += 1
        if all(placed[m - r] == m - placed[r] for r in range(n)):
            totals[1] += 1
            # A quarter turn maps (r, c) to (c, m - r).
            if all(placed[placed[r]] == m - r for r in range(n)):
                totals[2] += 1

    def search(k, cols, ld, rd):
        totals[3] += 1
        if limit is not None and totals[3] > limit:
            raise RuntimeError("search limit")
        if k == len(empty):
            leaf()
            return
        if order == "fewest":
            best = min(range(k, len(empty)),
                       key=lambda i: bin(free(empty[i], cols, ld, rd)).count("1"))
            empty[k], empty[best] = empty[best], empty[k]
        r = empty[k]
        bits = free(r, cols, ld, rd)
        while bits:
            bit = bits & -bits
            bits ^= bit
            c = bit.bit_length() - 1
            placed[r] = c
            search(k + 1, cols | bit, ld | (1 << (r + c)), rd | (1 << (c - r + m)))
            placed[r] = None

    search(0, cols, ld, rd)
    return tuple(totals)


def placements(n, border, rows):
    """Every non-attacking way to put one queen in each of `rows` beside the `border` queens."""
    out = []
    rows = sorted(rows)

    def go(i, queens):
        if i == len(rows):
            out.append(frozenset(queens))
            return
        r = rows[i]
        for c in range(n):
            q = (r, c)
            if attack_free(queens | {q}):
                go(i + 1, queens | {q})

    go(0, set(border))
    return out


# --- the checks ----------------------------------------------------------------------------

def check_coverage(n, rows, fail):
    """The rows are a partition of the board's solutions (see the module doc)."""
    by_constellation = {}
    for row in rows:
        queens = frozenset(tuple(q) for q in row["queens"])
        if len(queens) != len(row["queens"]) or not attack_free(queens) or \
                any(not (0 <= r < n and 0 <= c < n) for r, c in queens):
            fail(f"job {row['job']}: its queens {row['queens']} are not a partial solution")
            continue
        if row["fill"] != n - len(queens):
            fail(f"job {row['job']}: fill {row['fill']}, its queens leave {n - len(queens)} rows")
        c = constellation(n, queens)
        if c is None:
            fail(f"job {row['job']}: not exactly one queen on each border")
            continue
        by_constellation.setdefault(c, []).append((queens, row))
    seen_orbits = {}
    for c, members in by_constellation.items():
        o = frozenset(orbit(n, c))
        if o in seen_orbits:
            fail(f"two constellations of one orbit: jobs {members[0][1]['job']} and "
                 f"{seen_orbits[o]}")
        seen_orbits[o] = members[0][1]["job"]
        for _, row in members:
            if row["weight"] != len(o):
                fail(f"job {row['job']}: weight {row['weight']}, its orbit has {len(o)}")
        row_sets = {frozenset(r for r, _ in queens - c) for queens, _ in members}
        if len(row_sets) != 1:
            fail(f"constellation of job {members[0][1]['job']}: its rows pre-place "
                 f"different rows")
            continue
        wanted = placements(n, c, next(iter(row_sets)))
        given = [queens for queens, _ in members]
        if len(set(given)) != len(given) or set(given) != set(wanted):
            fail(f"constellation of job {members[0][1]['job']}: {len(given)} rows, but "
                 f"{len(wanted)} ways to fill its pre-placed rows")
    missing = 0
    for c in all_constellations(n):
        o = frozenset(orbit(n, c))
        if o in seen_orbits:
            continue
        seen_orbits[o] = None
        missing += 1
        solutions = count(n, c, order="fewest")[0]
        if solutions:
            fail(f"the orbit of {sorted(c)} has no row but {solutions} solutions")
    return len(by_constellation), missing


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export", help="the export file (plain or gzip)")
    p.add_argument("--result", help="the run's published result file (JSON)")
    p.add_argument("--rows", default="64", help="rows to re-solve: a number, or 'all'")
    p.add_argument("--seed", type=int, default=1, help="seed of the rows drawn (default 1)")
    p.add_argument("--no-coverage", action="store_true",
                   help="skip the partition check (about a minute at N = 28)")
    args = p.parse_args()
    started = time.time()
    failures = []

    def fail(message):
        failures.append(message)
        print("FAIL", message)

    try:
        header, rows, end, digest = read_export(args.export)
    except (NotAnExport, ValueError, OSError) as e:
        print(f"error: {args.export}: {e}", file=sys.stderr)
        return 2
    n = header["n"]
    print(f"export     N={n}, {len(rows)} rows of {header['jobs']} jobs, "
          f"run {header['fingerprint']}")

    # Digest and sums.
    total = sum(r["weight"] * r["solutions"] for r in rows)
    sym180 = sum(r["weight"] * r["sym180"] for r in rows)
    sym90 = sum(r["weight"] * r["sym90"] for r in rows)
    figures = {"rows": len(rows), "complete": len(rows) == header["jobs"], "total": total,
               "sym180": sym180, "sym90": sym90, "rows_sha256": digest}
    if figures["complete"] and n > 1:
        if not (sym90 <= sym180 <= total and sym90 % 2 == 0 and (sym180 - sym90) % 4 == 0
                and (total - sym180) % 8 == 0):
            fail(f"the sums total={total} sym180={sym180} sym90={sym90} break the symmetry "
                 f"identities")
        c2, c4, c8 = sym90 // 2, (sym180 - sym90) // 4, (total - sym180) // 8
        figures.update(unique=c2 + c4 + c8, count2=c2, count4=c4, count8=c8)
    for key, value in figures.items():
        if end.get(key) != value:
            fail(f"the last line says {key} = {end.get(key)}, the rows give {value}")
    print(f"rows give  Total {total} Unique {figures.get('unique', '-')}, rows_sha256 {digest}")
    if args.result:
        with open(args.result) as f:
            result = json.loads(f.read())
        published = {"n": n, "jobs": header["jobs"], "total": total,
                     "unique": figures.get("unique"), "count2": figures.get("count2"),
                     "count4": figures.get("count4"), "count8": figures.get("count8"),
                     "export_sha256": digest}
        for key, value in published.items():
            if result.get(key) != value:
                fail(f"the result file says {key} = {result.get(key)}, the export gives {value}")
        print(f"result     {args.result}: Total {result.get('total')}, "
              f"export_sha256 {result.get('export_sha256')}")

    # Coverage.
    if not args.no_coverage:
        constellations, empty = check_coverage(n, rows, fail)
        print(f"coverage   {constellations} constellations with rows, {empty} orbits without "
              f"(each searched: no solution)")

    # Rows solved again.
    if args.rows == "all":
        picked = list(range(len(rows)))
    else:
        k = min(int(args.rows), len(rows))
        picked = sorted(random.Random(args.seed).sample(range(len(rows)), k))
    wrong = 0
    for i in picked:
        row = rows[i]
        queens = [tuple(q) for q in row["queens"]]
        got = count(n, queens)[:3]
        want = (row["solutions"], row["sym180"], row["sym90"])
        if got != want:
            wrong += 1
            fail(f"job {row['job']}: the export says solutions/sym180/sym90 = {want}, "
                 f"solved again {got}")
    print(f"checked    {len(picked)} rows solved again "
          f"({'every row' if args.rows == 'all' else f'seed {args.seed}'}): "
          f"{len(picked) - wrong} agree, {wrong} wrong ({time.time() - started:.1f}s in all)")
    print("FAILED" if failures else "OK", f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
