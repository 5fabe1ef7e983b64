// Row gather and its adjoint, the deterministic row scatter-add (src/ops/index_select.rs).
//
// gather_u32(idx [m], x [rows, f], out [m, f], m, f, rows): out[r, :] = x[idx[r], :]. Values
//   are copied as bits, so one entry serves f32 and u32 tensors. Indices are checked on the
//   host; one past `rows` would give 0 here, never a read out of bounds.
//   f >= 32: a warp per output row, lanes over features, 16-byte loads and stores when
//   f % 4 == 0 and both buffers are 16-byte aligned. f < 32: a thread per output value
//   (consecutive threads, consecutive values). Launched warp per row; grid-stride.
// scatter_add_f32(t_indptr [n + 1], t_pos [m], src [m, f], out [n, f], n, f): over the
//   transposed index (for each target row r, the positions that hit it, increasing),
//   out[r, :] = Σ src[pos, :] in that order; rows nothing hits get 0. A warp per target row,
//   lanes over features (float4 when f % 4 == 0 and aligned), positions loaded 32 at a time
//   and broadcast by shuffles. No atomics: each value has one owner, so it is deterministic.

// out[r, c] = Σ_{k in ptr[r]..ptr[r+1]} src[pos[k], c], k increasing; `width` values of V
// per row. Every lane runs every loop (columns past `width` are masked), so the shuffles
// always see the whole warp.
template <typename V>
__device__ __forceinline__ void sum_rows(const u32* ptr, const u32* pos, const V* src, V* out,
                                         u64 rows, u64 width) {
    const u32 lane = lane_id();
    FOR_EACH_ROW_WARP(r, rows) {
        const u32 start = ptr[r], end = ptr[r + 1];
        for (u64 c0 = 0; c0 < width; c0 += 32) {
            const u64 c = c0 + lane;
            const bool active = c < width;
            V acc = zero_value<V>();
            for (u32 base = start; base < end; base += 32) {
                const u32 cnt = end - base < 32u ? end - base : 32u;
                const u32 mine = lane < cnt ? pos[base + lane] : 0u;
#pragma unroll 4
                for (u32 q = 0; q < cnt; ++q) {
                    const u32 p = __shfl_sync(0xffffffffu, mine, q);
                    if (active) add_to(acc, src[(u64)p * width + c]);
                }
            }
            if (active) out[r * width + c] = acc;
        }
    }
}

extern "C" __global__ void gather_u32(const u32* idx, const u32* x, u32* out, u32 m, u32 f,
                                      u32 rows) {
    if (f < 32u) {
        FOR_EACH(i, (u64)m * f) {
            const u64 r = i / f, j = i - r * f;
            const u32 row = idx[r];
            out[i] = row < rows ? x[(u64)row * f + j] : 0u;
        }
        return;
    }
    const u32 lane = lane_id();
    const bool vec = (f & 3u) == 0 && aligned16(x) && aligned16(out);
    FOR_EACH_ROW_WARP(r, m) {
        const u32 row = idx[r];
        const bool ok = row < rows;
        if (vec) {
            const u64 w = f / 4;
            const uint4* from = reinterpret_cast<const uint4*>(x) + (u64)row * w;
            uint4* to = reinterpret_cast<uint4*>(out) + r * w;
            for (u64 c = lane; c < w; c += 32) to[c] = ok ? from[c] : make_uint4(0u, 0u, 0u, 0u);
        } else {
            const u32* from = x + (u64)row * f;
            u32* to = out + r * f;
            for (u64 c = lane; c < f; c += 32) to[c] = ok ? from[c] : 0u;
        }
    }
}

extern "C" __global__ void scatter_add_f32(const u32* t_indptr, const u32* t_pos,
                                           const float* src, float* out, u32 n, u32 f) {
    if ((f & 3u) == 0 && aligned16(src) && aligned16(out)) {
        sum_rows(t_indptr, t_pos, reinterpret_cast<const float4*>(src),
                 reinterpret_cast<float4*>(out), n, f / 4);
    } else {
        sum_rows(t_indptr, t_pos, src, out, n, f);
    }
}
