#!/usr/bin/env bash
# Runs `espalier bench` and the PyTorch Geometric reference script
# (shared/bench/pyg_peer.py, "the peer" below) on the same graph
# folder (OGB raw layout) with the same settings, and prints each side's per-epoch
# medians and their ratio, phase by phase.
#
#   scripts/compare_pyg.sh DIR [K] [FANOUTS] [MODEL] [AGGR]
#
# DIR: an OGB folder, e.g. ../shared/data/cora, or one written by
#   `espalier gen products-like,scale=0.0408 --out syn100k` (graph, features, labels and
#   split, so both sides read exactly the same inputs).
# Environment: ESPALIER (default target/release/espalier), PYG_PEER (default
# ../shared/bench/pyg_peer.py), PYTHON (python3), EPOCHS (3), WARMUP (1), DEVICE (cpu),
# HIDDEN (256), SEED (0). Needs torch and torch_geometric for the peer.
set -euo pipefail

dir=${1:?usage: scripts/compare_pyg.sh DIR [K] [FANOUTS] [MODEL] [AGGR]}
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

"$espalier" bench --dataset "$dir" "${model_flags[@]}" --fanouts "$fanouts" \
    --micro-batches "$k" --hidden "$hidden" --seed "$seed" --device "$device" \
    --warmup "$warmup" --epochs "$epochs" "${extra[@]}" --json "$out/espalier.json" >&2
"$python" "$peer" "$dir" --model "$model" --aggr "$aggr" --fanouts "$fanouts" -K "$k" \
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
    # Our upload is timed inside forward.
    ("forward (+h2d)", p["forward"], q["forward"] + q.get("h2d", 0.0)),
    ("backward", p["backward"], q["backward"]),
    ("optimizer", p["optimizer"], q["optimizer"]),
    ("epoch", ours["epoch_median_s"], peer["epoch_time_median_s"]),
]
print(f"{'phase':<32}{'espalier ms':>12}{'PyG ms':>10}{'PyG/espalier':>14}")
for name, a, b in rows:
    ratio = b / a if a > 0 else float("inf")
    print(f"{name:<32}{a * 1e3:>12.1f}{b * 1e3:>10.1f}{ratio:>14.2f}")
print(f"peak: espalier {ours['peak_bytes'] / 2**20:.1f} MiB (tracked tensors), "
      f"PyG {peer['peak_memory_bytes'] / 2**20:.1f} MiB "
      f"({'max_memory_allocated' if peer['config'].get('device') == 'cuda' else 'process RSS'})")
print(f"K: espalier {ours['k']} (redundancy {ours['redundancy']:.3f}), "
      f"PyG {peer['config'].get('micro_batches')} (redundancy {peer.get('redundancy_median', float('nan')):.3f})")
PY
