// Runs one block of a kernel on the calling host thread: every thread of the block is a
// fiber, and the block scheduler switches between them where they wait for each other
// (`__syncthreads`, warp shuffles).
#pragma once

#include <cstdint>
#include <string>

#include "../include/cuda_emu_shim.h"

namespace emu {

// One kernel launch, shared by the host threads that run its blocks.
struct KernelCall {
    // Calls `fn` with the arguments `params` points to (one pointer per parameter).
    void (*invoke)(void* fn, void* const* params);
    void* fn;
    void* const* params;
    dim3 grid;
    dim3 block;
    const char* name;
};

// Runs block `linear` (x fastest, then y, then z) of `call`. On a barrier or shuffle that
// not every thread reaches, returns false with `error` saying which threads waited where.
bool run_block(const KernelCall& call, uint64_t linear, std::string* error);

}  // namespace emu
