// Row-wise argmax (src/ops/argmax.rs).
//
// argmax_rows_f32(x, out, r, c): a warp per row (grid-stride), c >= 1. Lane l scans columns
//     l, l + 32, ... (starting from column min(l, c - 1), so every lane holds a real
//     element), then a butterfly over the warp combines (value, column) pairs with the
//     CPU's order: a NaN beats any number (the lowest NaN column wins), else the larger
//     value, ties to the lower column. The order is total, so every lane ends with the
//     CPU's first maximum whatever the combination order; lane 0 writes out[row] (u32).

// True when (v, i) comes before (bv, bi).
__device__ __forceinline__ bool better(float v, u32 i, float bv, u32 bi) {
    const bool vn = is_nan(v), bn = is_nan(bv);
    if (vn != bn) return vn;
    if (!vn && v != bv) return v > bv;
    return i < bi;
}

extern "C" __global__ void argmax_rows_f32(const float* x, u32* out, u32 r, u32 c) {
    FOR_EACH_ROW_WARP(row, r) {
        const float* xr = x + row * c;
        const u32 lane = lane_id();
        u32 bi = lane < c - 1u ? lane : c - 1u;
        float bv = xr[bi];
        for (u64 j = lane + 32u; j < c; j += 32u) {
            const float v = xr[j];
            if (better(v, (u32)j, bv, bi)) {
                bv = v;
                bi = (u32)j;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const u32 oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (lane == 0) out[row] = bi;
    }
}
