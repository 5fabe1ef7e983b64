// Softmax over each dst node's in-edges, per head (src/ops/segment_softmax.rs).
//
// segment_softmax_f32(indptr [num_dst + 1], x [E, H], y [E, H], num_dst, heads):
//   y[e, h] = exp(x[e, h] - m) / Σ exp(x[e', h] - m) over the in-edges of e's dst node,
//   m their max (exp is stored first, then divided by the sum).
// segment_softmax_backward_f32(indptr, y [E, H], g [E, H], dx [E, H], num_dst, heads):
//   dx[e, h] = y[e, h] · (g[e, h] - Σ g[e', h] · y[e', h]).
// Both: a warp per dst node; its edges' rows are contiguous ([start·H, end·H)). When H
// divides 32 (1, 2, 4, ... 32) the lanes stride over those values, so lane l always holds
// head l % H, and the per-head max and sums are butterfly reductions over the lanes of one
// head. Otherwise the warp loops over heads, lanes over edges. Fixed reduction order:
// deterministic. A node without in-edges writes nothing (it owns no rows).

__device__ __forceinline__ float head_max(float v, u32 heads) {
    for (u32 o = 16; o >= heads && o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float head_sum(float v, u32 heads) {
    for (u32 o = 16; o >= heads && o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void segment_softmax_f32(const u32* indptr, const float* x, float* y,
                                               u32 num_dst, u32 heads) {
    if (heads == 0) return;
    const u32 lane = lane_id();
    const bool packed = heads <= 32u && 32u % heads == 0;
    FOR_EACH_ROW_WARP(d, num_dst) {
        const u64 start = indptr[d], end = indptr[d + 1];
        if (packed) {
            const u64 base = start * heads, n = (end - start) * heads;
            float m = NEG_INF;
            for (u64 k = lane; k < n; k += 32) m = fmaxf(m, x[base + k]);
            m = head_max(m, heads);
            float s = 0.0f;
            for (u64 k = lane; k < n; k += 32) {
                const float v = expf(x[base + k] - m);
                y[base + k] = v;
                s += v;
            }
            s = head_sum(s, heads);
            for (u64 k = lane; k < n; k += 32) y[base + k] = y[base + k] / s;
        } else {
            for (u32 h = 0; h < heads; ++h) {
                float m = NEG_INF;
                for (u64 e = start + lane; e < end; e += 32) m = fmaxf(m, x[e * heads + h]);
                m = warp_max(m);
                float s = 0.0f;
                for (u64 e = start + lane; e < end; e += 32) {
                    const float v = expf(x[e * heads + h] - m);
                    y[e * heads + h] = v;
                    s += v;
                }
                s = warp_sum(s);
                for (u64 e = start + lane; e < end; e += 32) y[e * heads + h] = y[e * heads + h] / s;
            }
        }
    }
}

extern "C" __global__ void segment_softmax_backward_f32(const u32* indptr, const float* y,
                                                        const float* g, float* dx, u32 num_dst,
                                                        u32 heads) {
    if (heads == 0) return;
    const u32 lane = lane_id();
    const bool packed = heads <= 32u && 32u % heads == 0;
    FOR_EACH_ROW_WARP(d, num_dst) {
        const u64 start = indptr[d], end = indptr[d + 1];
        if (packed) {
            const u64 base = start * heads, n = (end - start) * heads;
            float dot = 0.0f;
            for (u64 k = lane; k < n; k += 32) dot += g[base + k] * y[base + k];
            dot = head_sum(dot, heads);
            for (u64 k = lane; k < n; k += 32) dx[base + k] = y[base + k] * (g[base + k] - dot);
        } else {
            for (u32 h = 0; h < heads; ++h) {
                float dot = 0.0f;
                for (u64 e = start + lane; e < end; e += 32) dot += g[e * heads + h] * y[e * heads + h];
                dot = warp_sum(dot);
                for (u64 e = start + lane; e < end; e += 32) {
                    const u64 i = e * heads + h;
                    dx[i] = y[i] * (g[i] - dot);
                }
            }
        }
    }
}
