// Attention-weighted sum over each dst node's in-edges, heads as a dimension
// (src/ops/segment_weighted_sum.rs). x is [num_src, H*D], a is [E, H], out is [num_dst, H*D];
// column c belongs to head c / D.
//
// segment_weighted_sum_f32(indptr, indices, x, a, out, rows = num_dst, cols, heads, per_head):
//   out[d, c] = Σ a[e, h] · x[indices[e], c] over the in-edges e of d in edge order.
// segment_weighted_sum_backward_x_f32(t_indptr, t_dst, t_edges, a, g [num_dst, H*D],
//   dx [num_src, H*D], rows = num_src, cols, heads, per_head): over the transposed CSR,
//   dx[u, c] = Σ a[e, h] · g[d, c] over the out-edges (d, e) of u in CSR order.
// segment_weighted_sum_backward_a_f32(indptr, indices, x, g, da [E, H], rows = num_dst, cols,
//   heads, per_head): da[e, h] = Σ_j g[d, h·D + j] · x[indices[e], h·D + j] for each in-edge e
//   of d.
// Forward and backward x: a warp per output row, lanes over columns (float4 when cols and D
// are multiples of 4 and the buffers 16-byte aligned, so the 4 columns share a head; lanes
// stride over wider rows), edge lists loaded 32 at a time and broadcast by shuffles; each
// value summed in the CPU's edge order, products rounded before the add as on the CPU.
// Backward a: a warp per edge, its dst row found by bisection of indptr (a warp per dst row
// worked through a hub's edges one after another: serial where the work is largest); when D
// divides 32 the lanes stride over the columns and each head's dot product is a butterfly over
// its D lanes, otherwise the warp loops over heads, lanes over the head's columns. One owner
// per value: no atomics, deterministic.

// acc += w · v with the product rounded on its own (never fused into an FMA), like the CPU.
__device__ __forceinline__ void add_scaled(float& acc, float w, float v) {
    acc += __fmul_rn(w, v);
}
__device__ __forceinline__ void add_scaled(float4& acc, float w, float4 v) {
    acc.x += __fmul_rn(w, v.x);
    acc.y += __fmul_rn(w, v.y);
    acc.z += __fmul_rn(w, v.z);
    acc.w += __fmul_rn(w, v.w);
}

// `width` values of V per row, `per` columns of one value; head of value c = c·per / D.
// Every lane runs every loop (values past `width` are masked), so the shuffles always see
// the whole warp.
template <typename V>
__device__ __forceinline__ void forward_rows(const u32* indptr, const u32* indices, const V* x,
                                             const float* a, V* out, u64 rows, u64 width,
                                             u32 per, u32 heads, u32 per_head) {
    const u32 lane = lane_id();
    FOR_EACH_ROW_WARP(d, rows) {
        const u32 start = indptr[d], end = indptr[d + 1];
        for (u64 c0 = 0; c0 < width; c0 += 32) {
            const u64 c = c0 + lane;
            const bool active = c < width;
            const u64 h = active ? c * per / per_head : 0;
            V acc = zero_value<V>();
            for (u32 base = start; base < end; base += 32) {
                const u32 cnt = end - base < 32u ? end - base : 32u;
                const u32 mine = lane < cnt ? indices[base + lane] : 0u;
#pragma unroll 4
                for (u32 q = 0; q < cnt; ++q) {
                    const u32 u = __shfl_sync(0xffffffffu, mine, q);
                    const u64 e = base + q;
                    if (active) add_scaled(acc, a[e * heads + h], x[(u64)u * width + c]);
                }
            }
            if (active) out[d * width + c] = acc;
        }
    }
}

template <typename V>
__device__ __forceinline__ void backward_x_rows(const u32* t_indptr, const u32* t_dst,
                                                const u32* t_edges, const float* a, const V* g,
                                                V* dx, u64 rows, u64 width, u32 per, u32 heads,
                                                u32 per_head) {
    const u32 lane = lane_id();
    FOR_EACH_ROW_WARP(u, rows) {
        const u32 start = t_indptr[u], end = t_indptr[u + 1];
        for (u64 c0 = 0; c0 < width; c0 += 32) {
            const u64 c = c0 + lane;
            const bool active = c < width;
            const u64 h = active ? c * per / per_head : 0;
            V acc = zero_value<V>();
            for (u32 base = start; base < end; base += 32) {
                const u32 cnt = end - base < 32u ? end - base : 32u;
                u32 my_d = 0u, my_e = 0u;
                if (lane < cnt) {
                    my_d = t_dst[base + lane];
                    my_e = t_edges[base + lane];
                }
#pragma unroll 4
                for (u32 q = 0; q < cnt; ++q) {
                    const u32 d = __shfl_sync(0xffffffffu, my_d, q);
                    const u32 e = __shfl_sync(0xffffffffu, my_e, q);
                    if (active) add_scaled(acc, a[(u64)e * heads + h], g[(u64)d * width + c]);
                }
            }
            if (active) dx[u * width + c] = acc;
        }
    }
}

extern "C" __global__ void segment_weighted_sum_f32(const u32* indptr, const u32* indices,
                                                    const float* x, const float* a, float* out,
                                                    u32 rows, u32 cols, u32 heads,
                                                    u32 per_head) {
    if (heads == 0 || per_head == 0) return;
    if ((cols & 3u) == 0 && (per_head & 3u) == 0 && aligned16(x) && aligned16(out)) {
        forward_rows(indptr, indices, reinterpret_cast<const float4*>(x), a,
                     reinterpret_cast<float4*>(out), rows, cols / 4, 4u, heads, per_head);
    } else {
        forward_rows(indptr, indices, x, a, out, rows, cols, 1u, heads, per_head);
    }
}

extern "C" __global__ void segment_weighted_sum_backward_x_f32(const u32* t_indptr,
                                                               const u32* t_dst,
                                                               const u32* t_edges,
                                                               const float* a, const float* g,
                                                               float* dx, u32 rows, u32 cols,
                                                               u32 heads, u32 per_head) {
    if (heads == 0 || per_head == 0) return;
    if ((cols & 3u) == 0 && (per_head & 3u) == 0 && aligned16(g) && aligned16(dx)) {
        backward_x_rows(t_indptr, t_dst, t_edges, a, reinterpret_cast<const float4*>(g),
                        reinterpret_cast<float4*>(dx), rows, cols / 4, 4u, heads, per_head);
    } else {
        backward_x_rows(t_indptr, t_dst, t_edges, a, g, dx, rows, cols, 1u, heads, per_head);
    }
}

// The dst row of edge e: the last d < rows with indptr[d] <= e (rows without edges share
// their next row's offset, so the row found is the one that holds e).
__device__ __forceinline__ u32 dst_of(const u32* indptr, u32 rows, u64 e) {
    u32 lo = 0, hi = rows;
    while (hi - lo > 1u) {
        const u32 mid = lo + (hi - lo) / 2u;
        if ((u64)indptr[mid] <= e) lo = mid;
        else hi = mid;
    }
    return lo;
}

extern "C" __global__ void segment_weighted_sum_backward_a_f32(const u32* indptr,
                                                               const u32* indices,
                                                               const float* x, const float* g,
                                                               float* da, u32 rows, u32 cols,
                                                               u32 heads, u32 per_head) {
    if (heads == 0 || per_head == 0 || rows == 0) return;
    const u32 lane = lane_id();
    const bool packed = per_head <= 32u && 32u % per_head == 0;
    const u64 edges = indptr[rows];
    FOR_EACH_ROW_WARP(e, edges) {
        const u32 d = dst_of(indptr, rows, e);
        const float* gd = g + (u64)d * cols;
        const float* xu = x + (u64)indices[e] * cols;
        float* dae = da + e * heads;
        if (packed) {
            // Chunks of 32 columns start on a head boundary (D divides 32), so each head
            // lies in D consecutive lanes and is wholly in or out of range.
            for (u32 c0 = 0; c0 < cols; c0 += 32) {
                const u32 c = c0 + lane;
                float p = c < cols ? gd[c] * xu[c] : 0.0f;
                for (u32 o = per_head >> 1; o > 0; o >>= 1)
                    p += __shfl_xor_sync(0xffffffffu, p, o);
                if (c < cols && c % per_head == 0) dae[c / per_head] = p;
            }
        } else {
            for (u32 h = 0; h < heads; ++h) {
                const u32 col = h * per_head;
                float p = 0.0f;
                for (u32 j = lane; j < per_head; j += 32) p += gd[col + j] * xu[col + j];
                p = warp_sum(p);
                if (lane == 0) dae[h] = p;
            }
        }
    }
}
