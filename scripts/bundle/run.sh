#!/usr/bin/env bash
# Runs espalier's checks and benchmarks from this bundle (built by scripts/bundle.sh) and
# writes every log and JSON into one folder with a summary (file names drop the device's
# colon: check-cuda0-full.json, bench-cora-wgpu1.json). Needs bash, coreutils and
# glibc; an NVIDIA driver or a Vulkan driver for the GPU phases; python3 with torch for
# the PyG phase. Downloads nothing.
#
#   ./run.sh [--budget-s S] [--out DIR] [--devices LIST] [--phases LIST] [--check quick|full]
#            [--products-scale X]
#
# --budget-s S        wall-clock seconds for everything (default 480): a phase starts only
#                     when its least useful time is left, and is stopped when the budget
#                     runs out (a check's JSON keeps what it finished)
# --out DIR           the results folder (default results-DATE); created
# --devices LIST      devices to use, comma-separated (cuda:0,wgpu:1,cpu); default: every
#                     CUDA device and hardware wgpu adapter `espalier devices` lists, and
#                     the CPU for the benchmarks (software adapters and the emulated CUDA
#                     device only when named)
# --phases LIST       phases to run (default all, in this order): devices, check, parity,
#                     bench, pyg (beside bench), cpu-bench
# --check LEVEL       the check's level (default full)
# --products-scale X  scale of the products-like graph of the betty workloads (default 0.1;
#                     1 is ogbn-products' size)
#
# Phases, by value: devices; `check` on each GPU device, CUDA first; `parity.py` (training
# on each GPU device against the CPU: every model kind at K 1 and 4, features on the host
# and on the device, full-graph variants, estimates to the byte, and on CUDA with torch a
# real out-of-memory caused by another process); then per workload
# (cora, syn100k, betty-products-mean, -gat, -lstm) `bench` on each GPU device with the
# PyG script on the CUDA device beside it (the same graph, fanouts, hidden width and K);
# then `bench` on the CPU.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/espalier
budget=480
out=results-$(date +%Y%m%d-%H%M%S)
devices=""
phases="devices,check,parity,bench,pyg,cpu-bench"
level=full
pscale=0.1
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-s) budget=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --devices) devices=${2:?}; shift 2 ;;
    --phases) phases=${2:?}; shift 2 ;;
    --check) level=${2:?}; shift 2 ;;
    --products-scale) pscale=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$budget" in ''|*[!0-9]*) echo "run.sh: --budget-s takes whole seconds" >&2; exit 2 ;; esac
case "$level" in quick|full) ;; *) echo "run.sh: --check is quick or full" >&2; exit 2 ;; esac
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
start=$(date +%s)
summary=$out/summary.txt
records=$out/.phases
: > "$records"
# Seconds kept back at the end for the summary.
reserve=5
# The PyG phase unpacks its wheels here, not into the bundle (which may be read-only).
export ESPALIER_PYLIB=$out/pylib
# Dataset caches go to the results too (a loader writes them beside the data otherwise).
export ESPALIER_CACHE=$out/cache

left() { echo $(( budget - ($(date +%s) - start) )); }
has_phase() { case ",$phases," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
log() { echo "run.sh: $*" | tee -a "$out/run.log" >&2; }

# phase NAME MIN_S LOG CMD...: runs CMD (output to LOG) if MIN_S seconds are left, under a
# timeout of what is left; records its status.
phase() {
  local name=$1 min=$2 logf=$3; shift 3
  local rem; rem=$(left)
  if [ "$rem" -lt $(( min + reserve )) ]; then
    log "skip $name: needs about ${min}s, ${rem}s left"
    printf '%s\tskipped\t0\tneeds about %ss, %ss left\n' "$name" "$min" "$rem" >> "$records"
    return 3
  fi
  log "run  $name (up to $(( rem - reserve ))s): $*"
  local t0 rc status
  t0=$(date +%s)
  timeout --kill-after=5 $(( rem - reserve )) "$@" > "$logf" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124|137) status="timed out" ;;
    *) status="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" $(( $(date +%s) - t0 )) "$(basename "$logf")" >> "$records"
  log "     $name: $status in $(( $(date +%s) - t0 ))s"
  return $rc
}

{
  echo "espalier bundle run, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  cat "$here/VERSION" 2>/dev/null
  echo "host $(uname -srm), $(nproc) cores, budget ${budget}s"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/nvidia-smi: /'
} > "$out/machine.txt"
cat "$out/machine.txt" >&2

# 1. Devices.
"$bin" devices > "$out/devices.txt" 2>&1
"$bin" devices --json > "$out/devices.json" 2>/dev/null
printf 'devices\tok\t0\tdevices.txt\n' >> "$records"

# The GPU devices: named, or every CUDA device and hardware wgpu adapter listed.
gpus=()
bench_cpu=0
if [ -n "$devices" ]; then
  IFS=, read -r -a named <<< "$devices"
  for d in "${named[@]}"; do
    if [ "$d" = cpu ]; then bench_cpu=1; else gpus+=("$d"); fi
  done
else
  bench_cpu=1
  # `espalier devices` prints `  cuda:N  NAME` and `  wgpu:N  NAME` lines, each followed
  # by details: `emulated:` for the emulated CUDA device, `type Cpu` for a software adapter.
  mapfile -t gpus < <(awk '
    /^  (cuda|wgpu):[0-9]+ / { if (dev != "" && !soft) print dev; dev = $1; soft = 0; next }
    /^          / { if ($0 ~ /emulated:|type Cpu/) soft = 1; next }
    { if (dev != "" && !soft) print dev; dev = "" }
    END { if (dev != "" && !soft) print dev }
  ' "$out/devices.txt" | sort -t: -k1,1 -s)
fi
cuda=""
for d in "${gpus[@]}"; do case $d in cuda*) [ -z "$cuda" ] && cuda=$d ;; esac; done
log "GPU devices: ${gpus[*]:-none}${cuda:+; PyG runs beside $cuda}"

# 2. Checks.
if has_phase check; then
  for d in "${gpus[@]}"; do
    phase "check --$level $d" 60 "$out/check-${d//:/}-$level.log" \
      "$bin" check "--$level" --device "$d" --data "$here/data" --json "$out/check-${d//:/}-$level.json"
  done
fi

# Training parity against the CPU (python3, standard library; the out-of-memory case also
# needs torch, to hold the GPU's memory from another process).
syn=$out/data/syn100k
products=$out/data/products-like
if has_phase parity && [ "${#gpus[@]}" -gt 0 ]; then
  if command -v python3 >/dev/null; then
    oom=()
    if [ -n "$cuda" ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null \
        && phase "gen products-like scale $pscale" 60 "$out/gen-products.log" \
          "$bin" gen "products-like,scale=$pscale" --out "$products"; then
      oom=(--oom-dataset "$products")
    fi
    IFS=, ; list="${gpus[*]}"; unset IFS
    phase "parity on $list" 60 "$out/parity.log" python3 "$here/parity.py" --bin "$bin" \
      --data "$here/data/cora" --devices "$list" --out "$out/parity" "${oom[@]}"
  else
    printf 'parity\tskipped\t0\tno python3\n' >> "$records"
  fi
fi

# The PyG phase's python: probed once.
pyg_ok=0
if has_phase pyg && [ -n "$cuda" ]; then
  if command -v python3 >/dev/null && python3 "$here/pyg/pyg.py" --probe > "$out/pyg-probe.txt" 2>&1; then
    pyg_ok=1
  fi
  log "PyG: $(tail -n 1 "$out/pyg-probe.txt" 2>/dev/null || echo 'no python3')"
  [ "$pyg_ok" = 1 ] || printf 'pyg\tskipped\t0\t%s\n' "$(tail -n 1 "$out/pyg-probe.txt" 2>/dev/null || echo 'no python3')" >> "$records"
elif has_phase pyg; then
  printf 'pyg\tskipped\t0\tno CUDA device to run it beside\n' >> "$records"
fi

# bench_one DEVICE NAME MIN_S ARGS...: espalier bench of one workload.
bench_one() {
  local dev=$1 name=$2 min=$3; shift 3
  phase "bench $name on $dev" "$min" "$out/bench-$name-${dev//:/}.log" \
    "$bin" bench --device "$dev" "$@" --json "$out/bench-$name-${dev//:/}.json"
}

# The K of an espalier bench JSON's first run (the betty workloads choose it).
k_of() {
  sed -n 's/^ *"k": \([0-9]*\),*$/\1/p' "$1" 2>/dev/null | head -n 1
}

# 3-4. Benchmarks on each GPU device, PyG beside the CUDA one.
if has_phase bench && [ "${#gpus[@]}" -gt 0 ]; then
  for d in "${gpus[@]}"; do
    bench_one "$d" cora 20 --workload cora-sage-mean --dataset "$here/data/cora" --split per-class-20
  done
  for k in 1 4; do
    [ "$pyg_ok" = 1 ] && phase "pyg cora K=$k on cuda" 30 "$out/pyg-cora-K$k.log" \
      sh -c "OMP_WAIT_POLICY=PASSIVE python3 '$here/pyg/pyg.py' '$here/data/cora' --split per-class-20 \
        --device cuda --model sage --aggr mean --fanouts 25,10 -K $k --hidden 256 --warmup 1 \
        --epochs 3 --no-eval > '$out/pyg-cora-K$k.json'"
  done
  if phase "gen syn100k" 30 "$out/gen-syn100k.log" "$bin" gen products-like,scale=0.0408 --out "$syn"; then
    for d in "${gpus[@]}"; do
      bench_one "$d" syn100k 30 --workload syn100k-sage-mean --dataset "$syn"
    done
    for k in 1 4; do
      [ "$pyg_ok" = 1 ] && phase "pyg syn100k K=$k on cuda" 40 "$out/pyg-syn100k-K$k.log" \
        sh -c "OMP_WAIT_POLICY=PASSIVE python3 '$here/pyg/pyg.py' '$syn' --device cuda --model sage \
          --aggr mean --fanouts 10,25 -K $k --hidden 256 --warmup 1 --epochs 3 --no-eval \
          > '$out/pyg-syn100k-K$k.json'"
    done
  fi
  if [ -d "$products" ] || phase "gen products-like scale $pscale" 60 "$out/gen-products.log" \
      "$bin" gen "products-like,scale=$pscale" --out "$products"; then
    for w in mean gat lstm; do
      for d in "${gpus[@]}"; do
        bench_one "$d" "betty-products-$w" 60 --workload "betty-products-$w" --dataset "$products"
      done
      k=$(k_of "$out/bench-betty-products-$w-${cuda//:/}.json")
      if [ "$pyg_ok" = 1 ] && [ -n "$k" ]; then
        case $w in
          gat) model=(--model gat --heads 4) ;;
          *) model=(--model sage --aggr "$w") ;;
        esac
        phase "pyg betty-products-$w K=$k on cuda" 60 "$out/pyg-betty-products-$w-K$k.log" \
          sh -c "OMP_WAIT_POLICY=PASSIVE python3 '$here/pyg/pyg.py' '$products' --device cuda \
            ${model[*]} --fanouts 10,25 -K $k --hidden 256 --warmup 1 --epochs 3 --no-eval \
            > '$out/pyg-betty-products-$w-K$k.json'"
      fi
    done
  fi
fi

# 5. Benchmarks on the CPU.
if has_phase cpu-bench && [ "$bench_cpu" = 1 ]; then
  bench_one cpu cora 20 --workload cora-sage-mean --dataset "$here/data/cora" --split per-class-20
  if [ -d "$syn" ] || phase "gen syn100k" 30 "$out/gen-syn100k.log" "$bin" gen products-like,scale=0.0408 --out "$syn"; then
    bench_one cpu syn100k 30 --workload syn100k-sage-mean --dataset "$syn"
  fi
fi

# The generated graphs (tens of MB; `espalier gen SPEC` writes them again, bit for bit),
# the dataset caches and the unpacked wheels do not stay in the results.
rm -rf "$out/data" "$out/pylib" "$out/cache"

# Summary: every phase with its status and seconds, then each JSON's headline figures.
{
  cat "$out/machine.txt"
  echo
  printf '%-48s %-22s %8s  %s\n' phase status seconds "log or reason"
  while IFS=$'\t' read -r name status secs note; do
    printf '%-48s %-22s %8s  %s\n' "$name" "$status" "$secs" "$note"
  done < "$records"
  echo
  for f in "$out"/check-*.json; do
    [ -e "$f" ] || continue
    printf '%s: %s passed, %s failed, finished %s\n' "$(basename "$f")" \
      "$(sed -n 's/^  "passed": \([0-9]*\),$/\1/p' "$f")" \
      "$(sed -n 's/^  "failed": \([0-9]*\),$/\1/p' "$f")" \
      "$(sed -n 's/^  "finished": \([a-z]*\),$/\1/p' "$f")"
  done
  if [ -e "$out/parity/parity.json" ]; then
    printf 'parity.json: %s passed, %s failed\n' \
      "$(sed -n 's/^ "passed": \([0-9]*\),$/\1/p' "$out/parity/parity.json")" \
      "$(sed -n 's/^ "failed": \([0-9]*\),$/\1/p' "$out/parity/parity.json")"
  fi
  for f in "$out"/bench-*.json; do
    [ -e "$f" ] || continue
    printf '%s: epoch medians (s) %s\n' "$(basename "$f")" \
      "$(sed -n 's/^ *"epoch_median_s": \([0-9.e-]*\),$/\1/p' "$f" | tr '\n' ' ')"
  done
  for f in "$out"/pyg-*.json; do
    [ -s "$f" ] || continue
    printf '%s: epoch median (s) %s\n' "$(basename "$f")" \
      "$(grep -o '"epoch_time_median_s": [0-9.e-]*' "$f" | head -n 1 | cut -d' ' -f2)"
  done
  echo
  echo "total $(( $(date +%s) - start ))s of ${budget}s"
} > "$summary"
# The same as JSON: one object per phase.
{
  echo '{"phases": ['
  first=1
  while IFS=$'\t' read -r name status secs note; do
    [ $first = 1 ] || echo ','
    first=0
    esc() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
    printf '  {"name": "%s", "status": "%s", "seconds": %s, "note": "%s"}' \
      "$(esc "$name")" "$(esc "$status")" "$secs" "$(esc "$note")"
  done < "$records"
  printf '\n], "budget_s": %s, "total_s": %s}\n' "$budget" $(( $(date +%s) - start ))
} > "$out/summary.json"
rm -f "$records"
cat "$summary"
echo "results in $out" >&2
# Non-zero when a check or a phase failed (a skipped or timed-out phase is not a failure).
if grep -q '"status": "failed' "$out/summary.json"; then
  exit 1
fi
exit 0
