"""Executed warp instructions by SASS opcode for the two kernels of one ncu source-page export, and the difference.

    ncu --import REP.ncu-rep --page source --csv --print-source sass > ncu_sass.csv
    python3 bench/results/h200-2026-12-03-xla-ptx/sass_ops.py ncu_sass.csv[.gz] [ROWS]

Takes the first two kernels of the export (the Triton kernel, then the Pallas kernel, as bench.gpu_ncu_kernel
launches them); ROWS (default 65,536) divides the differences into instructions a row.
"""
import collections
import csv
import gzip
import io
import sys

path = sys.argv[1]
rows_per = int(sys.argv[2]) if len(sys.argv) > 2 else 65536
text = gzip.open(path, "rt").read() if path.endswith(".gz") else open(path).read()
kernels, hdr, name = {}, None, None
for r in csv.reader(io.StringIO(text)):
    if len(r) >= 2 and r[0] == "Kernel Name":
        name = f"{r[1]} ({len(kernels)})"
        kernels[name] = collections.Counter()
        hdr = None
        continue
    if r and r[0] == "Address":
        hdr = r
        continue
    if hdr and name and len(r) == len(hdr):
        d = dict(zip(hdr, r, strict=True))
        op = d["Source"].split()
        if not op:
            continue
        o = (op[1] if op[0].startswith("@") else op[0]).split(".")[0]
        kernels[name][o] += int(d["Instructions Executed"].replace(",", "") or 0)
names = list(kernels)[:2]
a, b = (kernels[n] for n in names)
print(f"| opcode | {names[0]} | {names[1]} | difference a row |")
print("|---|---|---|---|")
print(f"| all | {sum(a.values()):,} | {sum(b.values()):,} | {(sum(b.values()) - sum(a.values())) / rows_per:+.2f} |")
for o in sorted(set(a) | set(b), key=lambda o: -abs(a[o] - b[o]))[:25]:
    print(f"| {o} | {a[o]:,} | {b[o]:,} | {(b[o] - a[o]) / rows_per:+.2f} |")
