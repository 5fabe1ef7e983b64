#!/bin/sh
# Writes the host translation unit of one kernels/<stem>.cu: the file (with the prelude, as
# NVRTC compiles it) inside a namespace of its own, its text embedded, and a registry entry
# per `extern "C" __global__` function. Usage: gen_kernel_tu.sh KERNELS_DIR STEM > OUT.cpp
set -eu
dir=$1
stem=$2
cu="$dir/$stem.cu"
names=$(sed -n 's/.*extern "C" __global__ void \([A-Za-z0-9_]*\).*/\1/p' "$cu")
[ -n "$names" ] || { echo "gen_kernel_tu.sh: no extern \"C\" __global__ function in $cu" >&2; exit 1; }
count=$(printf '%s\n' $names | wc -l)
cat <<HEAD
// Generated from kernels/$stem.cu by cuda-emu/gen_kernel_tu.sh: do not edit.
#include "cuda_emu_shim.h"
namespace emu_k_$stem {
#include "prelude.cuh"
#include "$stem.cu"
}  // namespace emu_k_$stem
#include "registry.h"
EMU_INCBIN(emu_src_$stem, "$cu");
static const emu::KernelEntry emu_entries_$stem[] = {
HEAD
for n in $names; do
  echo "    EMU_ENTRY(emu_k_$stem, $n),"
done
cat <<TAIL
};
static emu::FileRegistrar emu_registrar_$stem("$stem", emu_src_$stem, emu_src_${stem}_end,
                                               emu_entries_$stem, $count);
TAIL
