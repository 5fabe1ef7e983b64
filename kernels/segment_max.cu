// Max aggregation over a block's CSR, with the argmax as an edge position (src/ops/segment_max.rs).
//
// segment_max_f32(indptr [num_dst + 1], indices [E], x [num_src, f], out [num_dst, f],
//   arg [num_dst, f] u32, rows = num_dst, f): scans the in-edges of each dst row in edge
//   order; the first edge wins ties, a NaN wins and stays (so it propagates); arg holds the
//   winning edge position e (an index into indices). A row without in-edges gets 0 and
//   arg 0xffffffff.
// segment_max_backward_f32(t_indptr [num_src + 1], t_dst [E], t_edges [E], arg, g
//   [num_dst, f], grad_x [num_src, f], rows = num_src, f): over the transposed CSR,
//   grad_x[u, j] = Σ g[d, j] over the out-edges (d, e) of u, in CSR order, whose edge
//   position e won (arg[d, j] == e): exact with duplicate edges and self-loops.
// Both: a warp per output row, lanes over features (float4/uint4 when f % 4 == 0 and the
// buffers are 16-byte aligned; lanes stride over wider rows), edge lists loaded 32 at a
// time and broadcast by shuffles. One owner per value: no atomics, deterministic.

// The CPU rule: v replaces the running max m if it is the first, larger, or the first NaN.
__device__ __forceinline__ void take(float& m, u32& a, float v, u32 e, bool first) {
    if (first || (!is_nan(m) && (is_nan(v) || v > m))) {
        m = v;
        a = e;
    }
}

struct Scalar {
    typedef float F;
    typedef u32 U;
    static __device__ __forceinline__ F fzero() { return 0.0f; }
    static __device__ __forceinline__ U none() { return 0xffffffffu; }
    static __device__ __forceinline__ void take_all(F& m, U& a, F v, u32 e, bool first) {
        take(m, a, v, e, first);
    }
    static __device__ __forceinline__ void add_won(F& acc, F g, U a, u32 e) {
        if (a == e) acc += g;
    }
};

struct Vec4 {
    typedef float4 F;
    typedef uint4 U;
    static __device__ __forceinline__ F fzero() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
    static __device__ __forceinline__ U none() {
        return make_uint4(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
    }
    static __device__ __forceinline__ void take_all(F& m, U& a, F v, u32 e, bool first) {
        take(m.x, a.x, v.x, e, first);
        take(m.y, a.y, v.y, e, first);
        take(m.z, a.z, v.z, e, first);
        take(m.w, a.w, v.w, e, first);
    }
    static __device__ __forceinline__ void add_won(F& acc, F g, U a, u32 e) {
        if (a.x == e) acc.x += g.x;
        if (a.y == e) acc.y += g.y;
        if (a.z == e) acc.z += g.z;
        if (a.w == e) acc.w += g.w;
    }
};

// `width` values of V::F per row. Every lane runs every loop (columns past `width` are
// masked), so the shuffles always see the whole warp.
template <typename V>
__device__ __forceinline__ void forward_rows(const u32* indptr, const u32* indices,
                                             const typename V::F* x, typename V::F* out,
                                             typename V::U* arg, u64 rows, u64 width) {
    const u32 lane = lane_id();
    FOR_EACH_ROW_WARP(d, rows) {
        const u32 start = indptr[d], end = indptr[d + 1];
        for (u64 c0 = 0; c0 < width; c0 += 32) {
            const u64 c = c0 + lane;
            const bool active = c < width;
            typename V::F m = V::fzero();
            typename V::U a = V::none();
            for (u32 base = start; base < end; base += 32) {
                const u32 cnt = end - base < 32u ? end - base : 32u;
                const u32 mine = lane < cnt ? indices[base + lane] : 0u;
#pragma unroll 4
                for (u32 q = 0; q < cnt; ++q) {
                    const u32 u = __shfl_sync(0xffffffffu, mine, q);
                    const u32 e = base + q;
                    if (active) V::take_all(m, a, x[(u64)u * width + c], e, e == start);
                }
            }
            if (active) {
                out[d * width + c] = m;
                arg[d * width + c] = a;
            }
        }
    }
}

template <typename V>
__device__ __forceinline__ void backward_rows(const u32* t_indptr, const u32* t_dst,
                                              const u32* t_edges, const typename V::U* arg,
                                              const typename V::F* g, typename V::F* grad_x,
                                              u64 rows, u64 width) {
    const u32 lane = lane_id();
    FOR_EACH_ROW_WARP(u, rows) {
        const u32 start = t_indptr[u], end = t_indptr[u + 1];
        for (u64 c0 = 0; c0 < width; c0 += 32) {
            const u64 c = c0 + lane;
            const bool active = c < width;
            typename V::F acc = V::fzero();
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
                    if (active) {
                        const u64 o = (u64)d * width + c;
                        V::add_won(acc, g[o], arg[o], e);
                    }
                }
            }
            if (active) grad_x[u * width + c] = acc;
        }
    }
}

extern "C" __global__ void segment_max_f32(const u32* indptr, const u32* indices, const float* x,
                                           float* out, u32* arg, u32 rows, u32 f) {
    if ((f & 3u) == 0 && aligned16(x) && aligned16(out) && aligned16(arg)) {
        forward_rows<Vec4>(indptr, indices, reinterpret_cast<const float4*>(x),
                           reinterpret_cast<float4*>(out), reinterpret_cast<uint4*>(arg), rows,
                           f / 4);
    } else {
        forward_rows<Scalar>(indptr, indices, x, out, arg, rows, f);
    }
}

extern "C" __global__ void segment_max_backward_f32(const u32* t_indptr, const u32* t_dst,
                                                    const u32* t_edges, const u32* arg,
                                                    const float* g, float* grad_x, u32 rows,
                                                    u32 f) {
    if ((f & 3u) == 0 && aligned16(arg) && aligned16(g) && aligned16(grad_x)) {
        backward_rows<Vec4>(t_indptr, t_dst, t_edges, reinterpret_cast<const uint4*>(arg),
                            reinterpret_cast<const float4*>(g), reinterpret_cast<float4*>(grad_x),
                            rows, f / 4);
    } else {
        backward_rows<Scalar>(t_indptr, t_dst, t_edges, arg, g, grad_x, rows, f);
    }
}
