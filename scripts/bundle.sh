#!/usr/bin/env bash
# Builds a self-contained folder that checks and benchmarks espalier on a machine without
# Rust or network (a borrowed GPU machine): the release binary, stripped; the bundled
# datasets (data/); the PyTorch Geometric reference script (../shared/bench/pyg_peer.py)
# with torch_geometric's pure-Python wheel and the wheels it imports, downloaded now when
# PyPI is reachable; run.sh (scripts/bundle/run.sh), which runs everything and writes
# every result into one folder; and a README saying what the folder holds.
#
#   scripts/bundle.sh [--out DIR] [--no-wheels]
#
# --out DIR      where the folder goes (default: target/espalier-bundle); replaced if it exists
# --no-wheels    carry no Python wheels (run.sh then needs torch_geometric installed)
# Environment: CARGO_TARGET_DIR (the release build is reused when up to date), PYG_PEER
# (default ../shared/bench/pyg_peer.py), PYTHON (python3, for pip download).
#
# The folder must stay under 64 MiB (what a borrowed machine's session carries) and the
# binary under 20 MB; the script fails otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/target/espalier-bundle
wheels=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --no-wheels) wheels=0; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "scripts/bundle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$out" in /*) ;; *) out=$PWD/$out ;; esac
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target=$root/$target ;; esac
peer=${PYG_PEER:-$root/../shared/bench/pyg_peer.py}
python=${PYTHON:-python3}

echo "bundle: cargo build --release (reused when up to date)" >&2
(cd "$root" && cargo build --release --quiet)

rm -rf "$out"
mkdir -p "$out/pyg/wheels"
# Stripped: the release profile keeps line tables for backtraces, 100 MB of them.
strip -o "$out/espalier" "$target/release/espalier"
cp -r "$root/data" "$out/data"
# Dataset caches a checkout's runs left beside the data are not part of it.
rm -rf "$out"/data/*/espalier-cache "$out"/data/*/.espalier-cache
cp "$root/scripts/bundle/run.sh" "$out/run.sh"
cp "$root/scripts/bundle/parity.py" "$out/parity.py"
cp "$root/scripts/bundle/pyg.py" "$out/pyg/pyg.py"
chmod +x "$out/run.sh" "$out/espalier"
if [ -e "$peer" ]; then
  cp "$peer" "$out/pyg/pyg_peer.py"
  [ -e "$(dirname "$peer")/README.md" ] && cp "$(dirname "$peer")/README.md" "$out/pyg/README.md"
else
  echo "bundle: note: $peer not found: the bundle carries no PyG script" >&2
fi

# torch_geometric is pure Python; importing it needs tqdm, requests (urllib3, idna,
# certifi), psutil and xxhash besides torch. psutil's wheel is abi3 (any CPython 3); xxhash
# builds per CPython version, so one wheel per version from 3.9 to 3.13 comes along.
# run.sh adds them behind the machine's own packages: what is installed wins.
wheel_note="none (built with --no-wheels)"
if [ "$wheels" = 1 ]; then
  w=$out/pyg/wheels
  dl() { "$python" -m pip download --quiet --disable-pip-version-check --no-deps --dest "$w" "$@"; }
  if dl torch_geometric tqdm requests urllib3 idna certifi \
      && dl --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.9 psutil \
      && for v in 3.9 3.10 3.11 3.12 3.13; do
           dl --only-binary=:all: --platform manylinux2014_x86_64 --python-version "$v" xxhash || exit 1
         done; then
    wheel_note=$(cd "$w" && ls -1 *.whl | sed 's/^/- /')
  else
    echo "bundle: note: pip download failed (no network?): the bundle carries no wheels" >&2
    rm -f "$w"/*.whl
    wheel_note="none (pip download failed when the bundle was built)"
  fi
fi

commit=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(cd "$root" && git status --porcelain --untracked-files=no 2>/dev/null | head -1)
{
  echo "commit $commit${dirty:+ (with uncommitted changes)}"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) by $(rustc --version 2>/dev/null || echo rustc)"
  echo "espalier $("$out/espalier" --version 2>/dev/null | awk '{print $2}')"
} > "$out/VERSION"

cat > "$out/README.md" <<EOF
# espalier bundle ($commit)

Checks and benchmarks espalier on a machine without Rust or network. Needs glibc, bash
and coreutils; an NVIDIA driver with CUDA 13 (libcuda, with CUDA 13's libnvrtc and
libcublas where the dynamic loader finds them) or a Vulkan driver; optionally python3 with
PyTorch for the PyG comparison.

    ./run.sh [--budget-s 480] [--out DIR] [--devices LIST] [--phases LIST]
             [--check quick|full] [--products-scale X]

\`./run.sh --help\` documents each flag. On a machine lent for a few minutes, split the
work into calls that each fit, and keep time for a rerun: for example
\`./run.sh --budget-s 300 --phases devices,check --out correctness\`, then
\`./run.sh --budget-s 300 --phases devices,bench,pyg --out speed\`. A phase that would
not finish in the time left is skipped and said so; one that runs past the budget is
stopped, and a check's JSON keeps every check it finished.

run.sh runs, in this order, each phase skipped when the time left is too short:

1. \`espalier devices\` (text and JSON);
2. \`espalier check --full\` (\`--check quick\` for the shorter set) on each GPU device,
   CUDA first, then the Vulkan adapters; software adapters such as llvmpipe and the
   emulated CUDA device only when named with --devices;
3. the \`bench\` workloads on each GPU device (cora-sage-mean, syn100k-sage-mean,
   betty-products-mean, -gat and -lstm on a products-like graph at --products-scale,
   default 0.1), each followed by the PyG script on the CUDA device with the same graph,
   fanouts, hidden width and K, when python3 imports torch and torch_geometric (the
   carried wheels fill in what is missing; a note says why the phase is skipped);
4. the cora and syn100k workloads on the CPU.

Every log and JSON goes to the output folder, with summary.txt (each phase, its status and
seconds) and summary.json. Nothing is downloaded. See VERSION for the commit.

Contents: \`espalier\` (stripped release binary), \`data/\` (Cora and email-Enron, see
data/README.md), \`pyg/pyg_peer.py\` (the PyTorch Geometric reference script),
\`pyg/pyg.py\` (runs it with the carried wheels behind the machine's own packages), and the
wheels in \`pyg/wheels/\`:

$wheel_note
EOF

size_bin=$(stat -c %s "$out/espalier")
size_all=$(du -sb "$out" | cut -f1)
echo "bundle: $out: binary $((size_bin / 1000000)) MB, folder $((size_all / 1048576)) MiB" >&2
if [ "$size_bin" -gt 20000000 ]; then
  echo "bundle: error: the stripped binary is $size_bin bytes, over 20 MB" >&2
  exit 1
fi
if [ "$size_all" -gt $((64 * 1048576)) ]; then
  echo "bundle: error: the folder is $size_all bytes, over 64 MiB" >&2
  exit 1
fi
echo "$out"
