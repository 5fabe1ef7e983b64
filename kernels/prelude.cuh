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

// Reductions over a warp or a block, one template over the reduction: `Op::apply(a, b)`
// combines two partial results, `Op::identity()` is the value of no element. The butterfly
// order is fixed, so results are deterministic.
struct SumOp {
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
    static __device__ __forceinline__ float identity() { return 0.0f; }
};
struct MaxOp {
    static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
    static __device__ __forceinline__ float identity() { return NEG_INF; }
};

// Op over the 32 lanes of a warp; every lane gets the result.
template <typename Op>
__device__ __forceinline__ float warp_reduce(float v) {
    for (int o = 16; o > 0; o >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Op over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// Uses 33 floats of shared memory (one array per reduction); the trailing barrier lets a
// caller reuse it at once.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v) {
    __shared__ float partial[33];
    const u32 lane = lane_id(), warp = threadIdx.x / 32u, warps = blockDim.x / 32u;
    v = warp_reduce<Op>(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? partial[lane] : Op::identity();
        w = warp_reduce<Op>(w);
        if (lane == 0) partial[32] = w;
    }
    __syncthreads();
    const float total = partial[32];
    __syncthreads();
    return total;
}

__device__ __forceinline__ float warp_sum(float v) { return warp_reduce<SumOp>(v); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce<MaxOp>(v); }
__device__ __forceinline__ float block_sum(float v) { return block_reduce<SumOp>(v); }
__device__ __forceinline__ float block_max(float v) { return block_reduce<MaxOp>(v); }

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

// nan_max as a reduction (a NaN wins).
struct NanMaxOp {
    static __device__ __forceinline__ float apply(float a, float b) { return nan_max(a, b); }
    static __device__ __forceinline__ float identity() { return NEG_INF; }
};

__device__ __forceinline__ float warp_nan_max(float v) { return warp_reduce<NanMaxOp>(v); }
__device__ __forceinline__ float block_nan_max(float v) { return block_reduce<NanMaxOp>(v); }

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

__device__ __forceinline__ float divided(float v, float d) { return v / d; }
__device__ __forceinline__ float4 divided(float4 v, float d) {
    return make_float4(v.x / d, v.y / d, v.z / d, v.w / d);
}

// The warp-per-row CSR sum of segment_sum.cu (forward) and index_select.cu (scatter-add
// over the transposed index): out[r, c] = Σ_{k in ptr[r]..ptr[r+1]} src[ids[k], c], k
// increasing, divided by the row's count when mean = 1 and the row is not empty; `width`
// values of V per row. Ids are loaded 32 at a time and broadcast by shuffles. Every lane
// runs every loop (columns past `width` are masked), so the shuffles always see the whole
// warp.
template <typename V>
__device__ __forceinline__ void csr_sum_rows(const u32* ptr, const u32* ids, const V* src,
                                             V* out, u64 rows, u64 width, u32 mean) {
    const u32 lane = lane_id();
    FOR_EACH_ROW_WARP(r, rows) {
        const u32 start = ptr[r], end = ptr[r + 1];
        for (u64 c0 = 0; c0 < width; c0 += 32) {
            const u64 c = c0 + lane;
            const bool active = c < width;
            V acc = zero_value<V>();
            for (u32 base = start; base < end; base += 32) {
                const u32 cnt = end - base < 32u ? end - base : 32u;
                const u32 mine = lane < cnt ? ids[base + lane] : 0u;
#pragma unroll 4
                for (u32 q = 0; q < cnt; ++q) {
                    const u32 u = __shfl_sync(0xffffffffu, mine, q);
                    if (active) add_to(acc, src[(u64)u * width + c]);
                }
            }
            if (mean == 1u && end > start) acc = divided(acc, (float)(end - start));
            if (active) out[r * width + c] = acc;
        }
    }
}

#line 1
