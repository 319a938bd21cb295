#!/usr/bin/env python3
"""Where one decode step's time goes, kernel by kernel, from an Nsight Compute CSV of bench_cuda.

The CSV is `ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw bench_cuda ...`
(bench/gpu/profile_decode.sh makes it). A decode step is taken as the launches after one head GEMM (the
only kernels reading more than 1.5 GB) up to the next: its logit summary, then the next step's layers and
head. ncu times
each kernel alone with cold caches, so the total runs above what a graph replay takes; the shares are
what to look at.

    kernel_breakdown.py NCU_CSV
"""
import collections
import csv
import io
import re
import sys


def short_name(name):
    name = re.sub(r"\(.*", "", name).replace("void ", "").replace("layerpipe::<unnamed>::", "")
    if name.startswith("nvjet") or "gemm" in name.lower():
        return "cuBLASLt gemm"
    if "splitKreduce" in name:
        return "cuBLASLt split-K reduce"
    return re.sub(r"<.*>", "", name)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    lines = open(sys.argv[1]).read().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, data = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
    col = {h: i for i, h in enumerate(header)}
    number = lambda r, key: float(r[col[key]].replace(",", ""))
    names = [r[col["Kernel Name"]] for r in data]
    us = [number(r, "gpu__time_duration.sum") / 1e3 for r in data]
    gb = [number(r, "dram__bytes_read.sum") / 1e9 for r in data]
    heads = [i for i, g in enumerate(gb) if g > 1.5]
    if len(heads) < 2:
        raise SystemExit("kernel_breakdown.py: fewer than two head GEMMs in the profile: no whole decode step")
    step = list(range(heads[-2] + 1, heads[-1] + 1))
    agg = collections.OrderedDict()
    for i in step:
        a = agg.setdefault(short_name(names[i]), [0, 0.0, 0.0])
        a[0] += 1
        a[1] += us[i]
        a[2] += gb[i]
    total = sum(a[1] for a in agg.values())
    print(f"one decode step: {len(step)} kernels, {total / 1e3:.2f} ms as ncu times them (each alone, caches cold)")
    print(f"{'kernel':30s} {'calls':>5s} {'ms':>7s} {'share':>6s} {'GB read':>8s} {'TB/s':>6s}")
    for name, (calls, t, g) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:30s} {calls:5d} {t / 1e3:7.2f} {100 * t / total:5.1f}% {g:8.2f} {g / (t / 1e6) / 1e3 if t else 0:6.2f}")


if __name__ == "__main__":
    main()
