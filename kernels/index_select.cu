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
//   and broadcast by shuffles (the prelude's csr_sum_rows, which segment_sum.cu shares). No
//   atomics: each value has one owner, so it is deterministic.

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
        csr_sum_rows(t_indptr, t_pos, reinterpret_cast<const float4*>(src),
                     reinterpret_cast<float4*>(out), n, f / 4, 0u);
    } else {
        csr_sum_rows(t_indptr, t_pos, src, out, n, f, 0u);
    }
}
