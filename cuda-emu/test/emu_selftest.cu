// Kernels for the emulator's own tests (cuda-emu/test/selftest.cpp): CUDA semantics the
// engine's kernels rely on, and misuses the emulator must report instead of hanging.

// One warp: each lane's results of the four shuffles.
extern "C" __global__ void shuffles(int* out) {
    const int lane = threadIdx.x & 31;
    out[lane * 4 + 0] = __shfl_xor_sync(0xffffffffu, lane, 5);
    out[lane * 4 + 1] = __shfl_sync(0xffffffffu, lane * 10, 7);
    out[lane * 4 + 2] = __shfl_down_sync(0xffffffffu, lane, 3);
    out[lane * 4 + 3] = __shfl_up_sync(0xffffffffu, lane, 2);
}

// Each block reverses its 256 values through shared memory.
extern "C" __global__ void reverse_blocks(const float* in, float* out) {
    __shared__ float tile[256];
    const unsigned t = threadIdx.x, base = blockIdx.x * 256;
    tile[t] = in[base + t];
    __syncthreads();
    out[base + t] = tile[255 - t];
}

// threadIdx, blockIdx, blockDim and gridDim of every thread of a 3-D launch.
extern "C" __global__ void coords(unsigned* out) {
    const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned i = b * blockDim.x * blockDim.y * blockDim.z + t;
    out[i] = (threadIdx.x << 24) | (threadIdx.y << 16) | (threadIdx.z << 12) | (blockIdx.x << 8) |
             (blockIdx.y << 4) | blockIdx.z;
}

// Half the block leaves before a barrier the other half waits at.
extern "C" __global__ void divergent_barrier(int* out) {
    if (threadIdx.x < 16) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

// A shuffle in a block of 48 threads: the second warp has 16 lanes.
extern "C" __global__ void partial_warp_shuffle(int* out) {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}
