#!/usr/bin/env python3
"""check-counts.py KNOWN_COUNTS_TSV N RESULT_JSON_LINE

Compares a result line (the fields of `solve --json`) with the row for N of the reference table
(shared/reference/known-counts.tsv): Total, Unique and COUNT2/4/8. Exit 0 and one summary line when
they match; exit non-zero naming every difference otherwise. Counts are never hard-coded here."""
import json
import sys

path, n, line = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [l.rstrip("\n").split("\t") for l in open(path) if l.strip() and not l.startswith("#")]
header, body = rows[0], rows[1:]
ref = next((dict(zip(header, r)) for r in body if int(r[0]) == n), None)
if ref is None:
    sys.exit(f"no row for n={n} in {path}")
got = json.loads(line)
bad = []
if got.get("n") != n:
    bad.append(f"n: got {got.get('n')}, want {n}")
for key in ("total", "unique", "count2", "count4", "count8"):
    want = None if ref[key] == "-" else int(ref[key])
    if got.get(key) != want:
        bad.append(f"{key}: got {got.get(key)}, want {want}")
if bad:
    sys.exit(f"n={n} result differs from {path}: " + "; ".join(bad))
print(f"n={n}: total={got['total']} unique={got['unique']} count2={got['count2']} "
      f"count4={got['count4']} count8={got['count8']} match the reference ({got.get('jobs')} jobs)")
