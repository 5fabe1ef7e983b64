// Concatenation along columns (src/ops/concat.rs); rows need no kernel (one contiguous
// device-to-device copy per input). Values are copied as 32-bit words, so f32 and u32 alike.
//
// concat_cols_u32(src, dst, n, width, dst_cols, col0): a thread per value i < n = rows *
//     width of one input (grid-stride): row = i / width, j = i % width;
//     dst[row * dst_cols + col0 + j] = src[i].

extern "C" __global__ void concat_cols_u32(const u32* src, u32* dst, u32 n, u32 width,
                                           u32 dst_cols, u32 col0) {
    FOR_EACH(i, n) {
        const u32 k = (u32)i;  // i < n, a u32: 32-bit division
        const u32 row = k / width, j = k % width;
        dst[(u64)row * dst_cols + col0 + j] = src[i];
    }
}
