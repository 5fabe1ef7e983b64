// Row-wise log-softmax and its backward (src/ops/log_softmax.rs).
//
// log_softmax_f32(x, out, r, c):      m = row max (a NaN wins), l = ln Σ exp(x - m) (0 when
//                                     m is ±inf or NaN), out = (x - m) - l.
// log_softmax_backward_f32(g, y, gx, r, c): gx = g - exp(y) · Σ_row g.
// Both map a warp to a row (grid-stride over rows): lane l visits columns l, l + 32, ... in
// order, then a butterfly over the warp (fixed order: deterministic). The *_block_f32
// twins, same parameters, give a row to a whole block (grid-stride over rows) for long
// rows: thread t visits t, t + blockDim.x, ..., then a reduction over the block.

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
// nan_max over the block, like the prelude's block_max.
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

// One row; thread t of `stride` threads visits columns t, t + stride, ...
template <bool BLOCK>
__device__ __forceinline__ void forward_row(const float* xr, float* yr, u32 c, u32 t,
                                            u32 stride) {
    float m = NEG_INF;
    for (u64 j = t; j < c; j += stride) m = nan_max(m, xr[j]);
    m = row_nan_max<BLOCK>(m);
    float s = 0.0f;
    for (u64 j = t; j < c; j += stride) s += expf(xr[j] - m);
    s = row_sum<BLOCK>(s);
    const float l = finite(m) ? logf(s) : 0.0f;
    for (u64 j = t; j < c; j += stride) yr[j] = (xr[j] - m) - l;
}

template <bool BLOCK>
__device__ __forceinline__ void backward_row(const float* gr, const float* yr, float* xr,
                                             u32 c, u32 t, u32 stride) {
    float s = 0.0f;
    for (u64 j = t; j < c; j += stride) s += gr[j];
    const float total = row_sum<BLOCK>(s);
    for (u64 j = t; j < c; j += stride) xr[j] = gr[j] - expf(yr[j]) * total;
}

extern "C" __global__ void log_softmax_f32(const float* x, float* out, u32 r, u32 c) {
    FOR_EACH_ROW_WARP(row, r) forward_row<false>(x + row * c, out + row * c, c, lane_id(), 32u);
}

extern "C" __global__ void log_softmax_block_f32(const float* x, float* out, u32 r, u32 c) {
    FOR_EACH_ROW_BLOCK(row, r) {
        forward_row<true>(x + row * c, out + row * c, c, threadIdx.x, blockDim.x);
    }
}

extern "C" __global__ void log_softmax_backward_f32(const float* g, const float* y, float* gx,
                                                    u32 r, u32 c) {
    FOR_EACH_ROW_WARP(row, r) {
        backward_row<false>(g + row * c, y + row * c, gx + row * c, c, lane_id(), 32u);
    }
}

extern "C" __global__ void log_softmax_backward_block_f32(const float* g, const float* y,
                                                          float* gx, u32 r, u32 c) {
    FOR_EACH_ROW_BLOCK(row, r) {
        backward_row<true>(g + row * c, y + row * c, gx + row * c, c, threadIdx.x, blockDim.x);
    }
}
