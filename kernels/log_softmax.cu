// Row-wise log-softmax and its backward (src/ops/log_softmax.rs).
//
// log_softmax_f32(x, out, r, c):      m = row max (a NaN wins), l = ln Σ exp(x - m) (0 when
//                                     m is ±inf or NaN), out = (x - m) - l.
// log_softmax_backward_f32(g, y, gx, r, c): gx = g - exp(y) · Σ_row g.
// Both map a warp to a row (grid-stride over rows): lane l visits columns l, l + 32, ... in
// order, then a butterfly over the warp (fixed order: deterministic). The *_block_f32
// twins, same parameters, give a row to a whole block (grid-stride over rows) for long
// rows: thread t visits t, t + blockDim.x, ..., then a reduction over the block.

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
