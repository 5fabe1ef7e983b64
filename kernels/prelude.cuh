// Prepended to every kernels/<op>.cu before NVRTC compiles it (src/device/cuda/nvrtc.rs).
// Values are f32 and indices u32, as on every backend. Launches cap their grid
// (Context::grid_1d, Context::grid_rows), so every kernel loops with a grid stride and
// works for any size; loop counters are 64-bit so that no index product overflows.

typedef unsigned int u32;
typedef unsigned long long u64;

// -inf and +inf without math.h (NVRTC has no standard headers).
#define NEG_INF __int_as_float(0xff800000u)
#define POS_INF __int_as_float(0x7f800000u)

// Thread-per-item grid-stride loop over n items.
#define FOR_EACH(i, n)                                                      \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n); \
         i += (u64)blockDim.x * gridDim.x)

// Warp-per-row grid-stride loop over `rows`: the 32 lanes of a warp share `row`, so a
// warp-wide reduction inside the loop always has every lane present (blockDim.x is a
// multiple of 32).
#define FOR_EACH_ROW_WARP(row, rows)                                               \
    for (u64 row = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;             \
         row < (u64)(rows); row += ((u64)blockDim.x * gridDim.x) / 32)

// Block-per-row grid-stride loop: every thread of the block shares `row`.
#define FOR_EACH_ROW_BLOCK(row, rows) \
    for (u64 row = blockIdx.x; row < (u64)(rows); row += gridDim.x)

__device__ __forceinline__ u32 lane_id() { return threadIdx.x & 31u; }

// Sum and max over the 32 lanes of a warp; every lane gets the result. The butterfly
// order is fixed, so results are deterministic.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// Uses 33 floats of shared memory; the trailing barrier lets a caller reuse it at once.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[33];
    const u32 lane = lane_id(), warp = threadIdx.x / 32u, warps = blockDim.x / 32u;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? partial[lane] : 0.0f;
        w = warp_sum(w);
        if (lane == 0) partial[32] = w;
    }
    __syncthreads();
    float total = partial[32];
    __syncthreads();
    return total;
}

// Max over the block, like block_sum.
__device__ __forceinline__ float block_max(float v) {
    __shared__ float partial[33];
    const u32 lane = lane_id(), warp = threadIdx.x / 32u, warps = blockDim.x / 32u;
    v = warp_max(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? partial[lane] : NEG_INF;
        w = warp_max(w);
        if (lane == 0) partial[32] = w;
    }
    __syncthreads();
    float total = partial[32];
    __syncthreads();
    return total;
}

// Helpers several kernel files share: NaN-aware max (a NaN wins, so it propagates as on
// the CPU), reductions over the threads sharing a row, float/float4 accumulation for the
// vectorised row kernels, and the logistic sigmoid of the LSTM kernels.

// NaN from the bits, like the WGSL: immune to any fast-math folding of `v != v`.
__device__ __forceinline__ bool is_nan(float v) {
    return (__float_as_uint(v) & 0x7fffffffu) > 0x7f800000u;
}

__device__ __forceinline__ bool finite(float v) {
    return (__float_as_uint(v) & 0x7fffffffu) < 0x7f800000u;
}

// The larger of two values, a NaN winning so that it propagates (fmaxf would drop it).
__device__ __forceinline__ float nan_max(float a, float b) {
    if (is_nan(a)) return a;
    if (b > a || is_nan(b)) return b;
    return a;
}

__device__ __forceinline__ float warp_nan_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// nan_max over the block, like block_max above.
__device__ __forceinline__ float block_nan_max(float v) {
    __shared__ float partial[33];
    const u32 lane = lane_id(), warp = threadIdx.x / 32u, warps = blockDim.x / 32u;
    v = warp_nan_max(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? partial[lane] : NEG_INF;
        w = warp_nan_max(w);
        if (lane == 0) partial[32] = w;
    }
    __syncthreads();
    const float total = partial[32];
    __syncthreads();
    return total;
}

// Reductions over the threads sharing a row: the warp, or the whole block.
template <bool BLOCK>
__device__ __forceinline__ float row_sum(float v) {
    if constexpr (BLOCK) return block_sum(v);
    else return warp_sum(v);
}

template <bool BLOCK>
__device__ __forceinline__ float row_nan_max(float v) {
    if constexpr (BLOCK) return block_nan_max(v);
    else return warp_nan_max(v);
}

// Never exponentiates a positive number.
__device__ __forceinline__ float sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

__device__ __forceinline__ bool aligned16(const void* p) {
    return ((u64)p & 15ull) == 0;
}

__device__ __forceinline__ void add_to(float& a, float v) { a += v; }
__device__ __forceinline__ void add_to(float4& a, float4 v) {
    a.x += v.x;
    a.y += v.y;
    a.z += v.z;
    a.w += v.w;
}

template <typename V>
__device__ __forceinline__ V zero_value();
template <>
__device__ __forceinline__ float zero_value<float>() { return 0.0f; }
template <>
__device__ __forceinline__ float4 zero_value<float4>() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

#line 1
