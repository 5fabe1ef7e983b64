// Sums over a dimension of a 2-D tensor, and its inverse expand (src/ops/reduce.rs).
// Every sum adds in a fixed order (no atomics), so results are the same run to run.
//
// sum_rows_f32(x, out, r, c, nb, chunk): a block per work item w < r * nb (grid-stride),
//     row = w / nb, blk = w % nb; thread t adds columns blk*chunk + t, + blockDim.x, ...
//     below min(c, (blk + 1) * chunk) in order, then block_sum; out[row * nb + blk].
//     The host repeats it with c = nb until the rows are short (long rows, sum_all).
// sum_rows_small_f32(x, out, r, c): a warp per row (grid-stride); lane l adds columns
//     l, l + 32, ... in order, then warp_sum; out[row].
// sum_cols_f32(x, out, r, c, rows_per): a thread per (block of rows_per rows, column),
//     i < ceil(r / rows_per) * c (grid-stride, consecutive threads on consecutive columns,
//     so loads coalesce): out[blk * c + col] = x[blk*rows_per, col] + ... in row order.
//     The host repeats it over the block sums until one block is left.
// expand_f32(v, out, c, dim, n): a thread per output value i < n (grid-stride):
//     out[i] = v[i % c] (dim 0, a row repeated) or v[i / c] (dim 1, a column repeated).

extern "C" __global__ void sum_rows_f32(const float* x, float* out, u32 r, u32 c, u32 nb,
                                        u32 chunk) {
    const u64 items = (u64)r * nb;
    FOR_EACH_ROW_BLOCK(w, items) {
        const u64 row = w / nb, blk = w % nb;
        const u64 start = blk * chunk;
        const u64 end = start + chunk < (u64)c ? start + chunk : (u64)c;
        const float* xr = x + row * c;
        float acc = 0.0f;
        for (u64 j = start + threadIdx.x; j < end; j += blockDim.x) acc += xr[j];
        const float total = block_sum(acc);
        if (threadIdx.x == 0) out[row * nb + blk] = total;
    }
}

extern "C" __global__ void sum_rows_small_f32(const float* x, float* out, u32 r, u32 c) {
    FOR_EACH_ROW_WARP(row, r) {
        const float* xr = x + row * c;
        float acc = 0.0f;
        for (u32 j = lane_id(); j < c; j += 32u) acc += xr[j];
        acc = warp_sum(acc);
        if (lane_id() == 0) out[row] = acc;
    }
}

extern "C" __global__ void sum_cols_f32(const float* x, float* out, u32 r, u32 c,
                                        u32 rows_per) {
    const u64 nblk = ((u64)r + rows_per - 1) / rows_per;
    FOR_EACH(i, nblk * c) {
        const u64 blk = i / c, col = i % c;
        const u64 start = blk * rows_per;
        const u64 end = start + rows_per < (u64)r ? start + rows_per : (u64)r;
        float acc = 0.0f;
        for (u64 row = start; row < end; row++) acc += x[row * c + col];
        out[i] = acc;
    }
}

extern "C" __global__ void expand_f32(const float* v, float* out, u32 c, u32 dim, u32 n) {
    FOR_EACH(i, n) {
        const u32 k = (u32)i;  // i < n, a u32: 32-bit division
        out[i] = dim == 0 ? v[k % c] : v[k / c];
    }
}
