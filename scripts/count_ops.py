#!/usr/bin/env python3
"""Instructions per iteration of the wgpu graph benchmarks, for two or more builds.

Runs each build's `wgpu_graph` bench binary in its count mode (ESPALIER_COUNT_ITERS=N: every
`wgpu:0` benchmark, or those matching FILTER, warmed up twice, then N and 2N iterations,
each phase ended by a call to `count_mark`) under `valgrind --tool=callgrind
--dump-before='*count_mark*'`, so that each phase is one dump. A benchmark's instructions
per iteration are (dump of 2N - dump of N) / N: device creation, shader compilation and the
inputs' setup cancel. Every thread is counted (lavapipe's queue and the JIT'd shaders
included); the split puts callgrind's unknown objects (`???`: the code llvmpipe JIT-compiles
from the shaders) under "shader" and everything else under "host".

    scripts/count_ops.py [--iters N] [--filter S] [--keep DIR] LABEL=BIN [LABEL=BIN ...]

BIN: a bench binary of `benches/wgpu_graph.rs` with the count mode (built with
`cargo bench --bench wgpu_graph --no-run`; its path is the one cargo prints: two checkouts
of the same package version get the same path in one target folder, so copy each binary
away before building the next), or a
directory of callgrind dumps kept by an earlier `--keep` run (`DIR/LABEL`), so that builds
can be counted one at a time, in parallel, and compared afterwards. Ratios are each build's
over the first one's. Pass the same binary twice to see how repeatable the count is.

Environment given to the binaries: LP_NUM_THREADS=0 (llvmpipe runs compute in the calling
thread), MESA_SHADER_CACHE_DISABLE=true, RAYON_NUM_THREADS=1. With N=1 the 20 rows took
about 10 minutes a build under callgrind (three builds at once on a shared 2-core machine);
two runs of one binary agreed to 0.003% a row. What the counts do and do not show:
docs/BENCHMARKS.md, issue 34.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ENV = {
    "LP_NUM_THREADS": "0",
    "MESA_SHADER_CACHE_DISABLE": "true",
    "RAYON_NUM_THREADS": "1",
}


def run_build(binary, iters, filt, out_dir):
    """Runs `binary` in count mode under callgrind, dumps and its stdout into `out_dir`."""
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, ESPALIER_COUNT_ITERS=str(iters), **ENV)
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--dump-before=*count_mark*",
        "--dump-instr=no",
        f"--callgrind-out-file={out_dir}/cg.out",
        binary,
    ]
    if filt:
        cmd.append(filt)
    with open(f"{out_dir}/stdout.txt", "w") as out, open(f"{out_dir}/valgrind.txt", "w") as err:
        rc = subprocess.run(cmd, env=env, stdout=out, stderr=err).returncode
    if rc != 0:
        sys.exit(f"{binary} exited with {rc}: see {out_dir}/valgrind.txt")


# The host's parts, by object file: the bench binary (espalier, wgpu, naga and std are linked
# into it), Mesa (lavapipe and llvmpipe's C code), the C library, the rest (LLVM, valgrind's
# preload, ...). Callgrind names code outside any mapped file, which is what llvmpipe
# JIT-compiles from the shaders, `???`.
PARTS = ("exe", "mesa", "libc", "other")


def category(obj, exe):
    """Which part of the process an object file is: "shader" or one of PARTS."""
    if obj == "???":
        return "shader"
    if exe and os.path.basename(obj) == os.path.basename(exe):
        return "exe"
    base = os.path.basename(obj)
    if "lvp" in base or "gallium" in base or "vulkan" in base:
        return "mesa"
    if base.startswith(("libc.", "libc-", "ld-linux", "libm.", "libpthread")):
        return "libc"
    return "other"


def parse_dump(path):
    """(part number, {category: self instructions}) of one callgrind dump."""
    part, costs = None, {}
    names, obj, in_call = {}, "???", False
    exe = None
    with open(path) as f:
        for line in f:
            c = line[0]
            if c.isdigit() or c in "+-*":
                if in_call:
                    in_call = False
                    continue
                fields = line.split()
                if len(fields) > 1:
                    cat = category(obj, exe)
                    costs[cat] = costs.get(cat, 0) + int(fields[1])
                continue
            if line.startswith("part:"):
                part = int(line.split()[1])
            elif line.startswith("cmd:"):
                exe = line.split()[1]
            elif line.startswith("ob=") or line.startswith("cob="):
                m = re.match(r"c?ob=(?:\((\d+)\))? ?(.*)", line.rstrip("\n"))
                ident, name = m.group(1), m.group(2)
                if ident and name:
                    names[ident] = name
                elif ident:
                    name = names[ident]
                if line.startswith("ob="):
                    obj = name
            elif line.startswith("calls="):
                in_call = True
    return part, costs


def phases(out_dir):
    """{benchmark: {"n": costs, "2n": costs}} from a kept run's dumps and stdout."""
    marks = [
        line.split(maxsplit=2)[1:]
        for line in open(f"{out_dir}/stdout.txt")
        if line.startswith("count_mark ")
    ]
    iters = int(open(f"{out_dir}/iters").read())
    dumps = {}
    for path in glob.glob(f"{out_dir}/cg.out*"):
        part, costs = parse_dump(path)
        if part is not None:
            dumps[part] = costs
    rows = {}
    # Dump k (from 1) is the interval that ended at the k-th mark.
    for k, (phase, bench) in enumerate(marks, start=1):
        if phase in ("n", "2n"):
            if k not in dumps:
                sys.exit(f"{out_dir}: no dump {k} for {phase} {bench.strip()}")
            rows.setdefault(bench.strip(), {})[phase] = dumps[k]
    return rows, iters


def per_iter(row, iters):
    """{category: instructions per iteration, "total": ...} of one benchmark."""
    out = {}
    for cat in ("shader",) + PARTS:
        out[cat] = (row["2n"].get(cat, 0) - row["n"].get(cat, 0)) / iters
    out["host"] = sum(out[p] for p in PARTS)
    out["total"] = out["host"] + out["shader"]
    # The N phase alone, per iteration, against the difference: equal when the count is
    # steady from one iteration to the next.
    out["n_only"] = sum(row["n"].values()) / iters
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=1)
    ap.add_argument("--filter", default=None)
    ap.add_argument("--keep", default=None, help="keep the dumps under this folder")
    ap.add_argument("builds", nargs="+", help="LABEL=BIN (or LABEL=DIR of a kept run)")
    a = ap.parse_args()
    keep = a.keep
    results = []
    for spec in a.builds:
        label, _, path = spec.partition("=")
        if os.path.isdir(path):
            out_dir = path
        else:
            keep = keep or tempfile.mkdtemp(prefix="count_ops.")
            out_dir = os.path.join(keep, label)
            print(f"counting {label} ({path}), N={a.iters} ...", file=sys.stderr, flush=True)
            run_build(path, a.iters, a.filter, out_dir)
            with open(f"{out_dir}/iters", "w") as f:
                f.write(str(a.iters))
        rows, iters = phases(out_dir)
        results.append((label, {b: per_iter(r, iters) for b, r in rows.items()}))
    print_table(results)
    if keep:
        print(f"\ndumps kept under {keep}", file=sys.stderr)


def print_table(results):
    base_label, base = results[0]
    head = ["benchmark", f"{base_label} (M instr/iter)"]
    for label, _ in results[1:]:
        head += [f"{label} (M)", f"{label}/{base_label}", "host ratio", "shader ratio"]
    head += [f"{base_label} host/shader (M)"]
    for label, _ in results[1:]:
        head += [f"{label} host/shader (M)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for bench in base:
        b = base[bench]
        cells = [f"`{short(bench)}`", f"{b['total'] / 1e6:,.2f}"]
        for _, rows in results[1:]:
            r = rows.get(bench)
            if r is None:
                cells += ["-"] * 4
                continue
            cells += [
                f"{r['total'] / 1e6:,.2f}",
                ratio(r["total"], b["total"]),
                ratio(r["host"], b["host"]),
                ratio(r["shader"], b["shader"]),
            ]
        for _, rows in results:
            r = rows.get(bench)
            cells.append("-" if r is None else f"{r['host'] / 1e6:,.2f} / {r['shader'] / 1e6:,.2f}")
        print("| " + " | ".join(cells) + " |")
    print("\nthe host's parts, M instructions per iteration (" + " / ".join(PARTS) + "):")
    for bench in base:
        cells = [f"`{short(bench)}`"]
        for _, rows in results:
            r = rows.get(bench)
            cells.append("-" if r is None else " / ".join(f"{r[p] / 1e6:,.2f}" for p in PARTS))
        print("| " + " | ".join(cells) + " |")
    print("\nsteadiness (N-phase instructions per iteration over the difference's):")
    for label, rows in results:
        worst = max(abs(r["n_only"] / r["total"] - 1) for r in rows.values() if r["total"])
        print(f"  {label}: worst row off by {worst * 100:.2f}%")


def short(bench):
    """`segment_sum/wgpu:0/E=55188,f=64` as `segment_sum E=55188,f=64`."""
    return bench.replace("/wgpu:0/", " ")


def ratio(x, y):
    return f"{x / y:.4f}" if y else "-"


if __name__ == "__main__":
    main()
