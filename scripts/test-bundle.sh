#!/usr/bin/env bash
# The bundle test CI runs: builds the bundle (scripts/bundle.sh, reusing the release build),
# copies it out of the checkout and runs its run.sh there on the CPU with a short budget
# and without Rust on the PATH, then checks what it wrote: the devices, a benchmark's JSON,
# a summary naming every phase, nothing failed; and that a budget too short for a phase
# skips it and says so.
#
#   scripts/test-bundle.sh [--no-wheels]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test-bundle: FAIL: $*" >&2; exit 1; }

"$root/scripts/bundle.sh" --out "$tmp/built" "$@" >/dev/null
# A copy elsewhere: nothing may point back into the checkout.
cp -r "$tmp/built" "$tmp/bundle"
rm -rf "$tmp/built"
sleep 1
touch "$tmp/copied"
for f in espalier run.sh README.md VERSION data/cora/raw pyg/pyg.py; do
  [ -e "$tmp/bundle/$f" ] || fail "the bundle lacks $f"
done
# The PyG reference script comes along wherever the checkout has it (CI: ../shared/bench).
if [ -e "${PYG_PEER:-$root/../shared/bench/pyg_peer.py}" ]; then
  [ -s "$tmp/bundle/pyg/pyg_peer.py" ] || fail "the bundle lacks pyg/pyg_peer.py"
fi

clean_env=(env -i PATH=/usr/bin:/bin HOME="$tmp" LANG=C.UTF-8)
cd "$tmp"
"${clean_env[@]}" "$tmp/bundle/run.sh" --budget-s 60 --devices cpu --out "$tmp/results" \
  > "$tmp/run.out" 2>&1 || { cat "$tmp/run.out" >&2; fail "run.sh exited non-zero"; }
r=$tmp/results
for f in machine.txt devices.txt devices.json summary.txt summary.json bench-cora-cpu.json; do
  [ -s "$r/$f" ] || { cat "$tmp/run.out" >&2; fail "run.sh did not write $f"; }
done
grep -q '^cpu ' "$r/devices.txt" || fail "devices.txt does not list the cpu"
grep -q '"epoch_median_s"' "$r/bench-cora-cpu.json" || fail "bench-cora-cpu.json has no epoch_median_s"
grep -q 'bench cora on cpu *ok' "$r/summary.txt" || fail "the summary does not say bench cora ran: $(cat "$r/summary.txt")"
grep -q '"status": "failed' "$r/summary.json" && fail "a phase failed: $(cat "$r/summary.txt")"
[ -d "$r/data" ] && fail "the generated graphs stayed in the results"
[ -n "$(find "$tmp/bundle" -newer "$tmp/copied" -print -quit)" ] \
  && fail "run.sh wrote into the bundle: $(find "$tmp/bundle" -newer "$tmp/copied" | head -3)"

# A budget that leaves no phase its time: each is skipped with the reason, none fails.
"${clean_env[@]}" "$tmp/bundle/run.sh" --budget-s 6 --devices cpu --out "$tmp/short" \
  > "$tmp/short.out" 2>&1 || { cat "$tmp/short.out" >&2; fail "run.sh with a short budget exited non-zero"; }
grep -q 'bench cora on cpu *skipped.*needs about' "$tmp/short/summary.txt" \
  || fail "a phase the budget does not fit was not skipped: $(cat "$tmp/short/summary.txt")"

# parity.py (run.sh runs it beside GPU devices): the CPU against itself, one model kind,
# so that the script, its flags and its JSON stay in step with the binary.
py=$(python3 -c 'import sys; print(sys.executable)')
"${clean_env[@]}" ESPALIER_CACHE="$tmp/parity-cache" "$py" "$tmp/bundle/parity.py" --bin "$tmp/bundle/espalier" \
  --data "$tmp/bundle/data/cora" --devices cpu --quick --epochs 1 --out "$tmp/parity" \
  > "$tmp/parity.out" 2>&1 || { cat "$tmp/parity.out" >&2; fail "parity.py failed on the CPU"; }
grep -q '"failed": 0' "$tmp/parity/parity.json" || fail "parity.json does not say 0 failed"
grep -q 'sage-mean-K4 on cpu vs cpu' "$tmp/parity.out" || fail "parity.py compared nothing: $(cat "$tmp/parity.out")"

echo "test-bundle: ok: $(du -sh "$tmp/bundle" | cut -f1) bundle; run.sh wrote $(ls "$r" | wc -l) files" >&2
sed -n '/^phase/,$p' "$r/summary.txt" >&2
