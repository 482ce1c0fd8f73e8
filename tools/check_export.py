#!/usr/bin/env python3
"""Check an nqueens-cluster export without nqueens-cluster: Python 3, standard library only.

An export (`nqueens-coordinator export --state RUN.db --to FILE`) lists every counted job of a
run: its fixed queens, its counts and its orbit weight. This script checks, on its own, every
time (none of these solves a row):

  1. form: a header, one canonical JSON row per job in job order, and a last line;
  2. digest: the SHA-256 of the row lines equals the last line's `rows_sha256` (and the result
     file's `export_sha256`, given --result);
  3. sums: the weighted sums of the rows give the last line's (and the result file's) Total,
     Unique and symmetry classes;
  4. coverage: the job list is rebuilt from the header (`n`, `depth`) from first principles:
     one set of border queens per orbit of the 8 symmetries (the smallest of the orbit),
     weighted by the orbit's size, each with every non-attacking way to fill its first `depth`
     searched rows; its job count and fingerprint must be the header's, and every row must be
     the job of its id (queens, fill, weight). Rows that match their jobs are a partition of the
     board's solutions;
  5. published values: Total, Unique, COUNT2, COUNT4 and COUNT8 against the published counts
     (reference/known-counts.tsv and reference/rotation-counts.tsv of the repository, read
     from the files; --known-counts and --rotation-counts name others); a partial export's
     Total may not exceed the published Total;
  6. plausibility: no row claims more solutions than its free squares allow (Bregman's bound
     on the permanent of the free squares of its free rows), and sym90 <= sym180 <= solutions;

and then re-solves rows with its own plain bitboard search: --rows K drawn with --seed (by
default a seed drawn from the operating system's entropy, printed), --rows all, or --shard k/K.

Exit status 0 when everything holds, 1 when anything fails (each failure is printed), 2 on a
usage error or a file that cannot be read as an export (one line on stderr).
"""

import argparse
import gzip
import hashlib
import json
import math
import os
import random
import secrets
import sys
import time
import zlib

ROW_KEYS = ["job", "queens", "fill", "weight", "solutions", "sym180", "sym90",
            "coordinator", "credentials"]
HEADER_KEYS = ["format", "version", "n", "fingerprint", "jobs", "target_jobs", "depth"]
FORMAT, VERSION = "nqueens-export", 2
JOB_FORMAT_VERSION = 1
SHOWN = 10
PARTIAL_TOTAL = " (partial: not the board's)"
HERE = os.path.dirname(os.path.abspath(__file__))


class NotAnExport(Exception):
    pass


def is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_header(header):
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise NotAnExport(f"line 1: not an {FORMAT} header")
    if header.get("version") != VERSION:
        raise NotAnExport(f"line 1: version {header.get('version')}, this script reads {VERSION}")
    if list(header) != HEADER_KEYS:
        raise NotAnExport(f"line 1: fields {list(header)}, expected {HEADER_KEYS}")
    n = header["n"]
    if not is_count(n) or not 1 <= n <= 32 or not isinstance(header["fingerprint"], str) \
            or not all(is_count(header[k]) for k in ("jobs", "target_jobs", "depth")):
        raise NotAnExport("line 1: n must be 1 to 32, jobs, target_jobs and depth counts")


def check_row(number, obj, n):
    if not isinstance(obj, dict) or list(obj) != ROW_KEYS:
        fields = list(obj) if isinstance(obj, dict) else type(obj).__name__
        raise NotAnExport(f"line {number}: fields {fields}, expected {ROW_KEYS}")
    queens = obj["queens"]
    if not isinstance(queens, list) or not all(
            isinstance(q, list) and len(q) == 2 and all(is_count(x) and x < n for x in q)
            for q in queens):
        raise NotAnExport(f"line {number}: queens must be [row, column] pairs on the {n}-board")
    if not all(is_count(obj[k]) for k in ROW_KEYS if k not in ("queens", "coordinator")) \
            or not isinstance(obj["coordinator"], bool):
        raise NotAnExport(f"line {number}: counts must be whole numbers, coordinator a boolean")


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
            try:
                obj = json.loads(text)
            except ValueError as e:
                raise NotAnExport(f"line {number}: not JSON ({e})")
            if number == 1:
                check_header(obj)
                header = obj
                continue
            if end is not None:
                raise NotAnExport(f"line {number}: a line after the last line")
            if isinstance(obj, dict) and "end" in obj:
                end = obj
                continue
            check_row(number, obj, header["n"])
            if json.dumps(obj, separators=(",", ":")) != text:
                raise NotAnExport(f"line {number}: not in canonical form")
            if rows and rows[-1]["job"] >= obj["job"] or obj["job"] >= header["jobs"]:
                raise NotAnExport(f"line {number}: job {obj['job']} out of order or not in the "
                                  f"list")
            sha.update(raw)
            rows.append(obj)
    if header is None or end is None:
        raise NotAnExport("no header or no last line (a cut file?)")
    return header, rows, end, sha.hexdigest()


# --- the board: row 0 on top, column 0 on the left; a queen is [row, column] -----------------

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
    """(top queen's column, bottom queen's column, left queen's row, right queen's row), if each
    border holds exactly one of `queens`."""
    m = n - 1
    found = []
    for on, coordinate in ((lambda q: q[0] == 0, 1), (lambda q: q[0] == m, 1),
                           (lambda q: q[1] == 0, 0), (lambda q: q[1] == m, 0)):
        border = [q for q in queens if on(q)]
        if len(border) != 1:
            return None
        found.append(border[0][coordinate])
    return tuple(found)


def border_queens(n, key):
    top, bottom, left, right = key
    m = n - 1
    return {(0, top), (m, bottom), (left, 0), (right, m)}


def canonical_constellations(n):
    """Every valid constellation that is the smallest of its orbit, in ascending order, with its
    orbit's size."""
    found = []
    for key in ((t, b, left, right) for t in range(n) for b in range(n)
                for left in range(n) for right in range(n)):
        queens = border_queens(n, key)
        if constellation(n, queens) != key or not attack_free(queens):
            continue
        images = {constellation(n, {s(r, c) for r, c in queens}) for s in symmetries(n)}
        if key == min(images):
            found.append((key, len(images)))
    return found


def job_list(n, depth):
    """The jobs of the list in order: (border queens, weight, prefix: the columns of the queens
    in the first `depth` searched rows, the rows without a border queen from the bottom up)."""
    m = n - 1
    for key, weight in canonical_constellations(n):
        border = border_queens(n, key)
        searched = [r for r in range(m, -1, -1) if all(q[0] != r for q in border)]
        rows = searched[:depth]
        cols = {c for _, c in border}
        d1 = {r + c for r, c in border}
        d2 = {r - c for r, c in border}
        prefix = []

        def fill(i):
            if i == len(rows):
                yield list(prefix)
                return
            r = rows[i]
            for c in range(n):
                if c in cols or r + c in d1 or r - c in d2:
                    continue
                cols.add(c); d1.add(r + c); d2.add(r - c); prefix.append(c)
                yield from fill(i + 1)
                cols.discard(c); d1.discard(r + c); d2.discard(r - c); prefix.pop()

        for columns in fill(0):
            queens = sorted(border | {(rows[i], c) for i, c in enumerate(columns)})
            yield key, weight, columns, queens


def fnv(h, data):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def check_coverage(header, rows, fail):
    """The rows against the job list rebuilt from the header; the number of jobs rebuilt."""
    n, depth = header["n"], header["depth"]
    h = fnv(0xcbf29ce484222325, JOB_FORMAT_VERSION.to_bytes(4, "little") + bytes([n]))
    h = fnv(h, depth.to_bytes(8, "little"))
    # The job count comes before the jobs in the fingerprint: the jobs are hashed after listing.
    jobs, next_row, listed = 0, 0, []
    for job_id, (key, weight, columns, queens) in enumerate(job_list(n, depth)):
        listed.append(bytes([*key, weight, len(columns), *columns]))
        if next_row < len(rows) and rows[next_row]["job"] == job_id:
            row = rows[next_row]
            next_row += 1
            given = [tuple(q) for q in row["queens"]]
            if given != queens or row["fill"] != n - len(queens) or row["weight"] != weight:
                fail("COVERAGE", f"job {job_id}: queens {row['queens']}, fill {row['fill']}, "
                     f"weight {row['weight']}; the job of that id has {[list(q) for q in queens]}, "
                     f"{n - len(queens)}, {weight}")
        jobs = job_id + 1
    for row in rows[next_row:]:
        fail("COVERAGE", f"job {row['job']}: not in the rebuilt list of {jobs} jobs")
    h = fnv(h, jobs.to_bytes(8, "little"))
    for job in listed:
        h = fnv(h, job)
    fingerprint = f"n{n}-{h:016x}"
    if header["jobs"] != jobs:
        fail("COVERAGE", f"the header says {header['jobs']} jobs; N = {n} at depth {depth} has "
             f"{jobs}")
    prefix, _, major = header["fingerprint"].rpartition("-p")
    if prefix != fingerprint or not major.isdigit():
        fail("COVERAGE", f"the header's fingerprint {header['fingerprint']} is not the rebuilt "
             f"list's {fingerprint}-p<protocol>")
    return jobs


# --- published values ----------------------------------------------------------------------

def read_table(path):
    """{n: {column: int or None}} from a tab-separated table with a header line `n ...`."""
    table, names = {}, None
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if names is None:
                names = fields
                continue
            if len(fields) != len(names):
                raise NotAnExport(f"{path}: a line of {len(fields)} fields, expected {len(names)}")
            values = [None if v == "-" else int(v) for v in fields]
            table[values[0]] = dict(zip(names, values))
    return table


def published_for(n, known_path, rotation_path):
    known = read_table(known_path).get(n, {})
    rotation = read_table(rotation_path).get(n, {})
    figures = {}
    for name, column in (("Total", "total"), ("Unique", "unique"), ("COUNT2", "count2"),
                         ("COUNT4", "count4"), ("COUNT8", "count8")):
        value = known.get(column)
        if value is None:
            value = rotation.get(column)
        if value is not None:
            figures[name] = value
    return figures


# --- rows ----------------------------------------------------------------------------------

LN_FACT_OVER_K = [0.0] + [math.lgamma(k + 1) / k for k in range(1, 33)]


def ln_bound(n, queens):
    """ln of an upper bound on the solutions that contain `queens` (Bregman: the product over
    free rows of (r!)^(1/r), r the row's free squares: free columns no queen attacks along a
    diagonal); -inf where a free row has no free square."""
    m, full = n - 1, (1 << n) - 1
    cols = ld = rd = 0
    used = set()
    for r, c in queens:
        cols |= 1 << c; ld |= 1 << (r + c); rd |= 1 << (c - r + m)
        used.add(r)
    total = 0.0
    for r in range(n):
        if r in used:
            continue
        k = bin(full & ~cols & ~(ld >> r) & ~(rd >> (m - r))).count("1")
        if k == 0:
            return -math.inf
        total += LN_FACT_OVER_K[k]
    return total


def check_plausible(n, rows, fail):
    for row in rows:
        s, s180, s90 = row["solutions"], row["sym180"], row["sym90"]
        if s180 > s or s90 > s180:
            fail("IMPLAUSIBLE", f"job {row['job']}: sym90 {s90} <= sym180 {s180} <= solutions "
                 f"{s} does not hold")
            continue
        bound = ln_bound(n, [tuple(q) for q in row["queens"]])
        if s > 0 and math.log(s) > bound + 1e-9:
            fail("IMPLAUSIBLE", f"job {row['job']}: {s} solutions, but its free squares allow "
                 f"at most {math.floor(math.exp(bound)) if bound > -math.inf else 0}")


def count(n, queens):
    """Solutions containing `queens`: (solutions, sym180, sym90). A plain bitboard search over
    the empty rows in row order."""
    full = (1 << n) - 1
    cols = ld = rd = 0
    placed = [None] * n
    for r, c in queens:
        cols |= 1 << c; ld |= 1 << (r + c); rd |= 1 << (c - r + n - 1)
        placed[r] = c
    empty = [r for r in range(n) if placed[r] is None]
    totals = [0, 0, 0]
    m = n - 1

    def leaf():
        totals[0] += 1
        if all(placed[m - r] == m - placed[r] for r in range(n)):
            totals[1] += 1
            # A quarter turn maps (r, c) to (c, m - r).
            if all(placed[placed[r]] == m - r for r in range(n)):
                totals[2] += 1

    def search(k, cols, ld, rd):
        if k == len(empty):
            leaf()
            return
        r = empty[k]
        bits = full & ~cols & ~(ld >> r) & ~(rd >> (m - r))
        while bits:
            bit = bits & -bits
            bits ^= bit
            c = bit.bit_length() - 1
            placed[r] = c
            search(k + 1, cols | bit, ld | (1 << (r + c)), rd | (1 << (c - r + m)))
            placed[r] = None

    search(0, cols, ld, rd)
    return tuple(totals)


def percent(p):
    pct = p * 100
    decimals = 1 if pct >= 10 or pct == 0 else max(1, 1 - math.floor(math.log10(pct)))
    return f"{pct:.{decimals}f}%"


# --- the checks ----------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export", help="the export file (plain or gzip)")
    p.add_argument("--result", help="the run's published result file (JSON)")
    p.add_argument("--rows", default="64", help="rows to re-solve: a number, or 'all' (default 64)")
    p.add_argument("--seed", type=int,
                   help="seed of the rows drawn (default: drawn from the operating system's "
                        "entropy, and printed)")
    p.add_argument("--shard", metavar="k/K",
                   help="re-solve every K-th row from row k-1 instead: shards 1/K to K/K "
                        "together re-solve every row once")
    p.add_argument("--known-counts", default=os.path.join(HERE, "..", "reference",
                                                          "known-counts.tsv"),
                   help="the published counts (default: the repository's reference/)")
    p.add_argument("--rotation-counts", default=os.path.join(HERE, "..", "reference",
                                                             "rotation-counts.tsv"),
                   help="the published COUNT2/COUNT4 beyond the known Totals")
    args = p.parse_args()
    if args.rows != "all" and not (args.rows.isdigit()):
        p.error(f"--rows {args.rows}: a number or 'all'")
    if args.shard is not None:
        k, _, of = args.shard.partition("/")
        if not (k.isdigit() and of.isdigit() and 1 <= int(k) <= int(of)):
            p.error(f"--shard {args.shard}: expected k/K with 1 <= k <= K, e.g. 3/10")
        args.shard = (int(k), int(of))
    return args


def check_sums(header, rows, end, digest, fail):
    """The figures the rows give, compared with the last line's."""
    n = header["n"]
    total = sum(r["weight"] * r["solutions"] for r in rows)
    sym180 = sum(r["weight"] * r["sym180"] for r in rows)
    sym90 = sum(r["weight"] * r["sym90"] for r in rows)
    figures = {"rows": len(rows), "complete": len(rows) == header["jobs"], "total": total,
               "sym180": sym180, "sym90": sym90, "unique": None, "count2": None,
               "count4": None, "count8": None, "rows_sha256": digest}
    if figures["complete"] and n > 1:
        if not (sym90 <= sym180 <= total and sym90 % 2 == 0 and (sym180 - sym90) % 4 == 0
                and (total - sym180) % 8 == 0):
            fail("SUMS", f"total={total} sym180={sym180} sym90={sym90} break the symmetry "
                 f"identities")
        c2, c4, c8 = sym90 // 2, (sym180 - sym90) // 4, (total - sym180) // 8
        figures.update(unique=c2 + c4 + c8, count2=c2, count4=c4, count8=c8)
    if n == 1 and figures["complete"]:
        figures["unique"] = total
    for key, value in figures.items():
        if end.get(key) != value:
            fail("DISAGREE", f"the last line says {key} = {end.get(key)}, the rows give {value}")
    return figures


def check_result(path, n, header, figures, fail):
    try:
        with open(path) as f:
            result = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise NotAnExport(f"--result {path}: {e}")
    if not isinstance(result, dict):
        raise NotAnExport(f"--result {path}: not a result file (a JSON object)")
    published = {"n": n, "jobs": header["jobs"], "total": figures["total"],
                 "unique": figures["unique"], "count2": figures["count2"],
                 "count4": figures["count4"], "count8": figures["count8"],
                 "export_sha256": figures["rows_sha256"]}
    for key, value in published.items():
        if result.get(key) != value:
            fail("DISAGREE", f"the result file says {key} = {result.get(key)}, the export "
                 f"gives {value}")
    print(f"result     {path}: Total {result.get('total')}, "
          f"export_sha256 {result.get('export_sha256')}")


def check_published(args, n, figures, fail):
    try:
        known = published_for(n, args.known_counts, args.rotation_counts)
    except (OSError, ValueError, NotAnExport) as e:
        raise NotAnExport(f"the published counts: {e} (name them with --known-counts and "
                          f"--rotation-counts)")
    mine = {"Total": figures["total"], "Unique": figures["unique"], "COUNT2": figures["count2"],
            "COUNT4": figures["count4"], "COUNT8": figures["count8"]}
    if figures["complete"]:
        for name, value in known.items():
            if value != mine[name]:
                fail("PUBLISHED", f"{name} is {mine[name]} but the published value is {value}")
    elif "Total" in known and figures["total"] > known["Total"]:
        fail("PUBLISHED", f"a partial Total of {figures['total']} is above the published "
             f"Total {known['Total']}")
    if not known:
        print(f"published  nothing published for N={n}: the Total rests on the rows")
    else:
        print(f"published  {', '.join(known)} of N={n}: "
              f"{'compared' if figures['complete'] else 'a partial Total against the Total'}")


def resolve(args, n, rows, fail):
    """Re-solves the rows asked for; how many, and the words for what was drawn."""
    if args.shard:
        k, of = args.shard
        picked, how = [i for i in range(len(rows)) if i % of == k - 1], f"shard {k}/{of}"
    elif args.rows == "all":
        picked, how = list(range(len(rows))), "every row"
    else:
        seed, drawn = args.seed, args.seed is None
        if drawn:
            seed = secrets.randbits(63)
        k = min(int(args.rows), len(rows))
        picked = sorted(random.Random(seed).sample(range(len(rows)), k))
        how = f"seed {seed}, drawn: --seed {seed} repeats this draw" if drawn else f"seed {seed}"
    wrong = 0
    for i in picked:
        row = rows[i]
        got = count(n, [tuple(q) for q in row["queens"]])
        want = (row["solutions"], row["sym180"], row["sym90"])
        if got != want:
            wrong += 1
            fail("WRONG", f"job {row['job']}: the export says solutions/sym180/sym90 = {want}, "
                 f"solved again {got}")
    return len(picked), wrong, how


def main():
    args = parse_args()
    started = time.time()
    failures = {}

    def fail(kind, message):
        failures.setdefault(kind, []).append(message)
        if len(failures[kind]) <= SHOWN:
            print(f"FAIL {kind} {message}")
        elif len(failures[kind]) == SHOWN + 1:
            print(f"FAIL {kind} ... (more not shown)")

    try:
        header, rows, end, digest = read_export(args.export)
    except (NotAnExport, OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise NotAnExport(f"{args.export}: {e}")
    n, partial = header["n"], len(rows) != header["jobs"]
    print(f"export     N={n}, {len(rows)} rows of {header['jobs']} jobs, run "
          f"{header['fingerprint']}{' PARTIAL' if partial else ''}")
    figures = check_sums(header, rows, end, digest, fail)
    unique = "-" if figures["unique"] is None else figures["unique"]
    print(f"rows give  Total {figures['total']} Unique {unique}"
          f"{PARTIAL_TOTAL if partial else ''}, rows_sha256 {digest}")
    if args.result:
        check_result(args.result, n, header, figures, fail)
    check_published(args, n, figures, fail)
    jobs = check_coverage(header, rows, fail)
    print(f"coverage   {len(rows)} rows against the {jobs} jobs rebuilt from the header "
          f"(depth {header['depth']})")
    check_plausible(n, rows, fail)
    print("plausible  every row's solutions against its free squares' bound")
    checked, wrong, how = resolve(args, n, rows, fail)
    print(f"checked    {checked} rows solved again ({how}): {checked - wrong} agree, {wrong} "
          f"wrong ({time.time() - started:.1f}s in all)")
    count_failures = sum(len(v) for v in failures.values())
    if failures:
        print("FAILED", count_failures, "failures:",
              ", ".join(f"{len(v)} {k}" for k, v in failures.items()))
    else:
        print("OK PARTIAL" if partial else "OK", "the digest, sums, coverage, published values "
              f"and every row's bound hold; the {checked} rows solved again agree")
    note = f" This export is PARTIAL: its Total counts {len(rows)} of {header['jobs']} jobs." \
        if partial else ""
    if checked == len(rows):
        print(f"shown      every row solved again: each count is its row's.{note}")
    else:
        chance = checked / len(rows)
        print(f"not shown  re-solved {checked} of {len(rows)} rows: a single forged row is found "
              f"with probability {percent(chance)}; re-solve more with --rows K, or every row "
              f"over machines with --shard k/K.{note}")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NotAnExport as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # never a traceback: one line, whatever the input did
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
