// Slice of columns and the backward of any slice (src/ops/slice.rs). A slice of rows needs
// no kernel (one contiguous device-to-device copy).
//
// slice_cols_u32(src, dst, c, start, len, n): a thread per output value i < n = rows * len
//     (grid-stride): row = i / len, j = i % len; dst[i] = src[row * c + start + j].
//     32-bit words: f32 or u32.
// slice_pad_f32(g, out, c, start, len, dim, n): a thread per value i < n = r * c of the
//     input's shape (grid-stride): row = i / c, col = i % c; out[i] = g at (row - start, col)
//     for dim 0 or (row, col - start) for dim 1 when inside the slice, else 0.

extern "C" __global__ void slice_cols_u32(const u32* src, u32* dst, u32 c, u32 start, u32 len,
                                          u32 n) {
    FOR_EACH(i, n) {
        const u32 k = (u32)i;  // i < n, a u32: 32-bit division
        const u32 row = k / len, j = k % len;
        dst[i] = src[(u64)row * c + start + j];
    }
}

extern "C" __global__ void slice_pad_f32(const float* g, float* out, u32 c, u32 start,
                                         u32 len, u32 dim, u32 n) {
    FOR_EACH(i, n) {
        const u32 k = (u32)i;  // i < n, a u32: 32-bit division
        const u32 row = k / c, col = k % c;
        float v = 0.0f;
        if (dim == 0) {
            if (row >= start && row - start < len) v = g[(u64)(row - start) * c + col];
        } else if (col >= start && col - start < len) {
            v = g[(u64)row * len + (col - start)];
        }
        out[i] = v;
    }
}
