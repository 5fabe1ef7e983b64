"""Training parity of a GPU device against the CPU, through `espalier train --json`.

    python3 parity.py --bin ESPALIER --data CORA_DIR --devices cuda:0,wgpu:0 --out DIR
                      [--epochs 4] [--oom-dataset DIR] [--quick]

Each case trains on Cora (the bundle's data/cora) on the CPU and on every device named,
and asserts, writing one line per check and DIR/parity.json:
- losses: every epoch's loss on the device within 1e-4 relative of the CPU's (every model
  kind at K 1 and 4; features on the host and on the device, f32 and bf16 uploads, on a
  synthetic Cora-sized graph with 128 features;
  full-graph training in chunks, with --overlap on and off, --dedup-transfers on and off,
  and --hybrid);
- bit-identical: variants that must not change a value give the same losses to the bit on
  each device (features on the host against on the device; the four overlap/dedup runs);
- estimate: every micro-batch's and every full-graph chunk's estimated peak equals the
  peak measured, to the byte, on every device (the CPU too);
- with --oom-dataset (a CUDA device and python3 with torch): a real driver out-of-memory.
  Another process holds all of the GPU's memory but 1 GiB plus half of the run's peak, the
  run is repeated, and it must split micro-batches and end with the loss of the free run.
--quick runs one model kind and no full-graph variants. Exit status 1 when a check fails.
Only the standard library is used (the machine running the bundle may have nothing else)."""
import argparse
import json
import os
import subprocess
import sys
import time

TOL = 1e-4
KINDS = [
    ("sage-mean", ["--model", "sage", "--aggr", "mean"]),
    ("sage-sum", ["--model", "sage", "--aggr", "sum"]),
    ("sage-max", ["--model", "sage", "--aggr", "max"]),
    ("sage-pool", ["--model", "sage", "--aggr", "pool"]),
    ("sage-lstm", ["--model", "sage", "--aggr", "lstm", "--hidden", "64"]),
    ("gcn", ["--model", "gcn"]),
    ("gat", ["--model", "gat", "--heads", "4", "--hidden", "32"]),
]


class Run:
    def __init__(self, args):
        self.args = args
        self.records = []
        self.failed = 0

    def say(self, status, name, detail):
        self.records.append({"status": status, "name": name, "detail": detail})
        if status == "FAIL":
            self.failed += 1
        print("  %-5s %-58s %s" % (status, name, detail), flush=True)

    def train(self, tag, device, extra, dataset=None, epochs=None):
        """`espalier train` with `extra`; returns its JSON, or None (reported) on failure."""
        a = self.args
        out = os.path.join(a.out, "%s-%s.json" % (tag, device.replace(":", "")))
        cmd = [a.bin, "train", "--dataset", dataset or a.data, "--epochs", str(epochs or a.epochs),
               "--device", device, "--eval-every", "0", "--json", out] + extra
        t0 = time.time()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            tail = " | ".join(p.stdout.strip().splitlines()[-3:])
            self.say("FAIL", "%s on %s runs" % (tag, device), "exit %d: %s" % (p.returncode, tail))
            return None
        with open(out) as f:
            d = json.load(f)
        d["_seconds"] = time.time() - t0
        return d


def losses(d):
    return [e["loss"] for e in d["epochs"]]


def rel_diff(a, b):
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b)), default=0.0)


def estimates(d):
    """(estimated, measured, where) of every micro-batch and full-graph chunk."""
    out = []
    for mb in d.get("micro_batches", []):
        for i, b in enumerate(mb.get("batches", [])):
            out.append((b["est_peak_bytes"], b["peak_bytes"], "epoch %d mb %d" % (mb["epoch"], i)))
    for e in d["epochs"]:
        fg = e.get("full_graph")
        if not fg:
            continue
        for c in fg.get("chunk_runs", []):
            out.append((c["est_peak_bytes"], c["peak_bytes"], "epoch %d layer %d %s chunk %d"
                        % (e["epoch"], c["layer"], c["pass"], c["chunk"])))
    return out


def check_losses(run, name, dev, d, ref):
    r = rel_diff(losses(d), losses(ref))
    run.say("pass" if r <= TOL else "FAIL", "%s on %s vs cpu" % (name, dev),
            "largest relative loss difference %.1e; last loss %.5f" % (r, losses(d)[-1]))


def check_estimates(run, name, dev, d):
    pairs = estimates(d)
    off = [(e, m, w) for e, m, w in pairs if e != m]
    if not pairs:
        run.say("FAIL", "%s on %s: estimate vs measured" % (name, dev), "no estimates in the JSON")
    elif off:
        e, m, w = max(off, key=lambda t: abs(t[0] - t[1]))
        run.say("FAIL", "%s on %s: estimate vs measured" % (name, dev),
                "%d of %d off; largest at %s: estimated %d, measured %d (%+d bytes)"
                % (len(off), len(pairs), w, e, m, e - m))
    else:
        run.say("pass", "%s on %s: estimate vs measured" % (name, dev),
                "%d micro-batches or chunks, all equal (largest peak %d bytes)"
                % (len(pairs), max(m for _, m, _ in pairs)))


def check_same(run, name, dev, runs):
    base = losses(runs[0][1])
    differ = [t for t, d in runs[1:] if losses(d) != base]
    run.say("pass" if not differ else "FAIL", "%s on %s: bit-identical" % (name, dev),
            "%d runs, losses equal to the bit" % len(runs) if not differ
            else "differs from %s: %s" % (runs[0][0], ", ".join(differ)))


def cases(quick):
    """(name, arguments) of the runs compared with the CPU."""
    kinds = KINDS[:1] if quick else KINDS
    out = []
    for name, model in kinds:
        for k in (1, 4):
            out.append(("%s-K%d" % (name, k), model + ["--micro-batches", str(k)]))
    return out


def full_graph_variants():
    fg = ["--full-graph", "--chunks", "4", "--layers", "2", "--model", "sage", "--aggr", "mean"]
    return fg, [("fg-overlap-%s-dedup-%s" % (o, d), fg + ["--overlap", o, "--dedup-transfers", d])
                for o in ("true", "false") for d in ("on", "off")]


def training(run, devices):
    for name, extra in cases(run.args.quick):
        ref = run.train(name, "cpu", extra)
        if ref:
            check_estimates(run, name, "cpu", ref)
        for dev in devices:
            d = run.train(name, dev, extra)
            if ref and d:
                check_losses(run, name, dev, d, ref)
                check_estimates(run, name, dev, d)
    # Features on the host against on the device, f32 and bf16 uploads: on a synthetic
    # Cora-sized graph of even width (half-precision rows are gathered on a GPU in pairs).
    syn = "synthetic:cora-like"
    for dtype in ("f32", "bf16"):
        extra = ["--micro-batches", "4", "--feature-dtype", dtype, "--feat-dim", "128"]
        ref = run.train("features-%s" % dtype, "cpu", extra, dataset=syn)
        for dev in devices:
            runs = []
            for where in ("host", "device"):
                tag = "features-%s-%s" % (dtype, where)
                d = run.train(tag, dev, extra + ["--features", where], dataset=syn)
                if d:
                    runs.append((tag, d))
                    if ref:
                        check_losses(run, tag, dev, d, ref)
            if len(runs) == 2:
                check_same(run, "features-%s host vs device" % dtype, dev, runs)
    if run.args.quick:
        return
    fg, variants = full_graph_variants()
    ref = run.train("fg", "cpu", fg + ["--overlap", "false"])
    if ref:
        check_estimates(run, "full-graph", "cpu", ref)
    for dev in devices:
        runs = []
        for tag, extra in variants:
            d = run.train(tag, dev, extra)
            if d:
                runs.append((tag, d))
                if ref:
                    check_losses(run, tag, dev, d, ref)
                check_estimates(run, tag, dev, d)
        if len(runs) > 1:
            check_same(run, "full-graph overlap x dedup", dev, runs)
    hy = fg + ["--hybrid"]
    ref = run.train("fg-hybrid", "cpu", hy)
    for dev in devices:
        d = run.train("fg-hybrid", dev, hy)
        if ref and d:
            check_losses(run, "fg-hybrid", dev, d, ref)
            check_estimates(run, "fg-hybrid", dev, d)


HOLDER = r"""
import sys, time, torch
leave = int(sys.argv[1])
free, total = torch.cuda.mem_get_info()
held = torch.empty(max(free - leave, 0), dtype=torch.uint8, device="cuda")
print("held %d of %d free bytes" % (held.numel(), free), flush=True)
time.sleep(900)
"""


def oom(run, device):
    """A driver out-of-memory: the same run with most of the GPU held by another process."""
    extra = ["--model", "sage", "--aggr", "lstm", "--hidden", "256", "--fanouts", "10,25",
             "--micro-batches", "1"]
    free = run.train("oom-free", device, extra, dataset=run.args.oom_dataset, epochs=2)
    if not free:
        return
    peak = free["peak_bytes"]
    leave = (1 << 30) + peak // 2
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(leave)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        line = holder.stdout.readline().strip()
        if not line.startswith("held"):
            run.say("FAIL", "oom: another process holds the GPU", line or "the holder printed nothing")
            return
        d = run.train("oom-held", device, extra, dataset=run.args.oom_dataset, epochs=2)
    finally:
        holder.kill()
        holder.wait()
    if not d:
        return
    splits = sum(mb.get("oom_splits", 0) for mb in d.get("micro_batches", []))
    r = rel_diff(losses(d), losses(free))
    ok = splits > 0 and r <= TOL
    run.say("pass" if ok else "FAIL", "oom on %s: splits, same losses" % device,
            "%s; %d splits with %.2f GiB left of a %.2f GiB peak; relative loss difference %.1e"
            % (line, splits, leave / 2**30, peak / 2**30, r))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--devices", required=True, help="comma-separated, e.g. cuda:0,wgpu:0")
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--oom-dataset")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    run = Run(args)
    devices = [d for d in args.devices.split(",") if d]
    t0 = time.time()
    training(run, devices)
    if args.oom_dataset:
        for dev in devices:
            if dev.startswith("cuda"):
                oom(run, dev)
    summary = {"passed": sum(r["status"] == "pass" for r in run.records), "failed": run.failed,
               "seconds": time.time() - t0, "devices": devices, "records": run.records}
    with open(os.path.join(args.out, "parity.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("%d checks in %.0f s: %d passed, %d failed"
          % (len(run.records), summary["seconds"], summary["passed"], run.failed))
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main())
