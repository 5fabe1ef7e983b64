#!/usr/bin/env bash
# Runs `espalier bench` and the PyTorch Geometric reference script (shared/bench/pyg_peer.py,
# "the peer") on the same graph folder (OGB raw layout) with the same settings, back to back
# in the same run, and prints each side's per-epoch medians and the ratio espalier / PyG
# phase by phase (below 1: espalier faster), as docs/BENCHMARKS.md reports it.
#
#   scripts/compare_pyg.sh [--setup] DIR [K] [FANOUTS] [MODEL] [AGGR]
#
# --setup: create (or reuse) a virtual environment with torch, torch_geometric, numpy and
#   pandas from PyPI (at $VENV, default target/pyg-venv; a few minutes the first time) and
#   use its python, so the comparison is one command on a fresh machine.
# DIR: an OGB folder, e.g. data/cora, or one written by
#   `espalier gen products-like,scale=0.0408 --out syn100k` (graph, features, labels and
#   split, so both sides read exactly the same inputs).
# Environment: ESPALIER (default target/release/espalier), PYG_PEER (default
# ../shared/bench/pyg_peer.py), PYTHON (python3, or the venv's with --setup), EPOCHS (3),
# WARMUP (1), DEVICE (cpu), HIDDEN (256), SEED (0), THREADS (default: all cores; both sides
# get the same count), VENV (target/pyg-venv).
# torch runs with OMP_WAIT_POLICY=PASSIVE: with the default (active) policy its OpenMP
# threads spin, and torch slows down many-fold as soon as another process shares the cores.
set -euo pipefail

setup=0
if [ "${1:-}" = "--setup" ]; then
    setup=1
    shift
fi
dir=${1:?usage: scripts/compare_pyg.sh [--setup] DIR [K] [FANOUTS] [MODEL] [AGGR]}
k=${2:-1}
fanouts=${3:-25,10}
model=${4:-sage}
aggr=${5:-mean}
espalier=${ESPALIER:-target/release/espalier}
peer=${PYG_PEER:-../shared/bench/pyg_peer.py}
python=${PYTHON:-python3}
epochs=${EPOCHS:-3}
warmup=${WARMUP:-1}
device=${DEVICE:-cpu}
hidden=${HIDDEN:-256}
seed=${SEED:-0}
threads=${THREADS:-$(nproc)}
venv=${VENV:-target/pyg-venv}

if [ "$setup" = 1 ]; then
    if [ ! -x "$venv/bin/python" ]; then
        echo "creating $venv (torch, torch_geometric, numpy, pandas from PyPI)" >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check \
            torch torch_geometric numpy pandas
    fi
    python=$venv/bin/python
fi
if ! "$python" -c 'import torch, torch_geometric' 2>/dev/null; then
    echo "error: $python cannot import torch and torch_geometric; run with --setup" >&2
    exit 1
fi
if [ ! -x "$espalier" ]; then
    echo "error: $espalier not found; run cargo build --release first" >&2
    exit 1
fi
if [ ! -e "$peer" ]; then
    echo "error: $peer not found (set PYG_PEER)" >&2
    exit 1
fi
echo "threads $threads each; load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)" >&2

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Graphs without labels get random ones: use the peer's default class count on both sides.
extra=()
if [ ! -e "$dir/raw/node-label.csv.gz" ] && [ ! -e "$dir/raw/node-label.csv" ]; then
    extra=(--classes 47)
fi

# espalier rejects a flag the model does not read: --aggr goes to SAGE only.
model_flags=(--model "$model")
if [ "$model" = sage ]; then
    model_flags+=(--aggr "$aggr")
fi

"$espalier" --threads "$threads" bench --dataset "$dir" "${model_flags[@]}" --fanouts "$fanouts" \
    --micro-batches "$k" --hidden "$hidden" --seed "$seed" --device "$device" \
    --warmup "$warmup" --epochs "$epochs" "${extra[@]}" --json "$out/espalier.json" >&2
OMP_WAIT_POLICY=PASSIVE "$python" "$peer" "$dir" --threads "$threads" --model "$model" --aggr "$aggr" --fanouts "$fanouts" -K "$k" \
    --hidden "$hidden" --seed "$seed" --device "$device" --warmup "$warmup" \
    --epochs "$epochs" --no-eval >"$out/pyg.json"

"$python" - "$out/espalier.json" "$out/pyg.json" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1]))["runs"][0]
peer = json.load(open(sys.argv[2]))
p, q = ours["phase_median_s"], peer["phase_median_s"]
rows = [
    ("sample", p["sample"], q["sample"]),
    # The peer's build = micro-batch blocks + host gather; ours split in three.
    ("build (partition+slice+gather)", p["partition"] + p["slice"] + p["gather"], q["build"]),
    # Ours slices and gathers on a helper thread while the micro-batch before computes;
    # what the trainer waited for is the part on the epoch's path (the peer's build is
    # all on it).
    ("build not hidden (partition+wait)", p["partition"] + p.get("wait", 0.0), q["build"]),
    # Our upload is timed inside forward.
    ("forward (+h2d)", p["forward"], q["forward"] + q.get("h2d", 0.0)),
    ("backward", p["backward"], q["backward"]),
    ("optimizer", p["optimizer"], q["optimizer"]),
    ("epoch", ours["epoch_median_s"], peer["epoch_time_median_s"]),
]
print(f"{'phase':<32}{'espalier ms':>12}{'PyG ms':>10}{'espalier/PyG':>14}")
for name, a, b in rows:
    ratio = a / b if b > 0 else float("inf")
    print(f"{name:<32}{a * 1e3:>12.1f}{b * 1e3:>10.1f}{ratio:>14.2f}")
print(f"peak: espalier {ours['peak_bytes'] / 2**20:.1f} MiB (tracked tensors), "
      f"PyG {peer['peak_memory_bytes'] / 2**20:.1f} MiB "
      f"({'max_memory_allocated' if peer['config'].get('device') == 'cuda' else 'process RSS'})")
print(f"K: espalier {ours['k']} (redundancy {ours['redundancy']:.3f}), "
      f"PyG {peer['config'].get('micro_batches')} (redundancy {peer.get('redundancy_median', float('nan')):.3f})")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)" >&2
