// Sum and mean aggregation over a block's CSR (src/ops/segment_sum.rs).
//
// segment_sum_f32(indptr [num_dst + 1], indices [E], x [num_src, f], out [num_dst, f],
//   rows = num_dst, f, mean): out[d, :] = Σ x[indices[e], :] over the in-edges e of d in
//   edge order, divided by the in-degree when mean = 1; 0 for a row without in-edges.
// segment_sum_backward_f32(indptr, t_indptr [num_src + 1], t_dst [E], g [num_dst, f],
//   grad_x [num_src, f], rows = num_src, f, mean): over the transposed CSR,
//   grad_x[u, :] = Σ g[d, :] (each term divided by the in-degree of d when mean = 1) over
//   the out-edges of u in CSR order.
// Both: a warp per output row (forward: the prelude's csr_sum_rows, which index_select.cu's
// scatter-add shares), lanes over features (float4 when f % 4 == 0 and the buffers
// are 16-byte aligned; lanes stride over wider rows), edge ids loaded 32 at a time and
// broadcast by shuffles. Each value is summed in the CPU's order by its one owner: no
// atomics, deterministic, and the same floats as the CPU backend.

template <typename V>
__device__ __forceinline__ void backward_rows(const u32* indptr, const u32* t_indptr,
                                              const u32* t_dst, const V* g, V* grad_x, u64 rows,
                                              u64 width, u32 mean) {
    const u32 lane = lane_id();
    FOR_EACH_ROW_WARP(u, rows) {
        const u32 start = t_indptr[u], end = t_indptr[u + 1];
        for (u64 c0 = 0; c0 < width; c0 += 32) {
            const u64 c = c0 + lane;
            const bool active = c < width;
            V acc = zero_value<V>();
            for (u32 base = start; base < end; base += 32) {
                const u32 cnt = end - base < 32u ? end - base : 32u;
                u32 my_d = 0u, my_deg = 1u;
                if (lane < cnt) {
                    my_d = t_dst[base + lane];
                    if (mean == 1u) my_deg = indptr[my_d + 1] - indptr[my_d];
                }
#pragma unroll 4
                for (u32 q = 0; q < cnt; ++q) {
                    const u32 d = __shfl_sync(0xffffffffu, my_d, q);
                    const u32 deg = __shfl_sync(0xffffffffu, my_deg, q);
                    if (active) {
                        const V v = g[(u64)d * width + c];
                        add_to(acc, mean == 1u ? divided(v, (float)deg) : v);
                    }
                }
            }
            if (active) grad_x[u * width + c] = acc;
        }
    }
}

extern "C" __global__ void segment_sum_f32(const u32* indptr, const u32* indices, const float* x,
                                           float* out, u32 rows, u32 f, u32 mean) {
    if ((f & 3u) == 0 && aligned16(x) && aligned16(out)) {
        csr_sum_rows(indptr, indices, reinterpret_cast<const float4*>(x),
                     reinterpret_cast<float4*>(out), rows, f / 4, mean);
    } else {
        csr_sum_rows(indptr, indices, x, out, rows, f, mean);
    }
}

extern "C" __global__ void segment_sum_backward_f32(const u32* indptr, const u32* t_indptr,
                                                    const u32* t_dst, const float* g,
                                                    float* grad_x, u32 rows, u32 f, u32 mean) {
    if ((f & 3u) == 0 && aligned16(g) && aligned16(grad_x)) {
        backward_rows(indptr, t_indptr, t_dst, reinterpret_cast<const float4*>(g),
                      reinterpret_cast<float4*>(grad_x), rows, f / 4, mean);
    } else {
        backward_rows(indptr, t_indptr, t_dst, g, grad_x, rows, f, mean);
    }
}
