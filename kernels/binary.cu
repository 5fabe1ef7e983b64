// Elementwise binary ops with broadcasting of the right operand (src/ops/binary.rs).
//
// binary_f32:     out[i] = a[i] op b[j], j from the broadcast mode: 0 none (j = i),
//                 1 row (j = i % cols), 2 column (j = i / cols), 3 scalar (j = 0);
//                 op: 0 add, 1 sub, 2 mul, 3 div.
// add_assign_f32: dst[i] += src[i] (gradient accumulation, launched by src/device/add.rs,
//                 which also launches binary_f32 for the sum of two gradients).
// Thread per element, grid-stride.

extern "C" __global__ void binary_f32(const float* a, const float* b, float* out, u32 cols,
                                      u32 op, u32 bcast, u32 n) {
    FOR_EACH(i, n) {
        u64 j = i;
        if (bcast == 1) j = i % cols;
        else if (bcast == 2) j = i / cols;
        else if (bcast == 3) j = 0;
        const float x = a[i], y = b[j];
        float r;
        switch (op) {
            case 0: r = x + y; break;
            case 1: r = x - y; break;
            case 2: r = x * y; break;
            default: r = x / y; break;
        }
        out[i] = r;
    }
}

extern "C" __global__ void add_assign_f32(const float* src, float* dst, u32 n) {
    FOR_EACH(i, n) dst[i] = dst[i] + src[i];
}
