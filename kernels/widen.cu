// Widening half-precision feature values to f32 (src/ops/widen.rs).
//
// widen_f16_f32:  x holds two f16 per u32 word (little-endian); thread per word
//                 (grid-stride): out[2w] from the low half, out[2w + 1] from the high half
//                 when 2w + 1 < n. cvt.f32.f16 widens exactly (no cuda_fp16.h needed).
// widen_bf16_f32: the same for bf16, the top half of an f32: a shift widens it exactly.

__device__ __forceinline__ float f16_bits_to_f32(u32 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
}

extern "C" __global__ void widen_f16_f32(const u32* x, float* out, u32 n) {
    const u64 words = ((u64)n + 1) / 2;
    FOR_EACH(w, words) {
        const u32 word = x[w];
        out[2 * w] = f16_bits_to_f32(word & 0xffffu);
        if (2 * w + 1 < n) out[2 * w + 1] = f16_bits_to_f32(word >> 16);
    }
}

extern "C" __global__ void widen_bf16_f32(const u32* x, float* out, u32 n) {
    const u64 words = ((u64)n + 1) / 2;
    FOR_EACH(w, words) {
        const u32 word = x[w];
        out[2 * w] = __uint_as_float(word << 16);
        if (2 * w + 1 < n) out[2 * w + 1] = __uint_as_float(word & 0xffff0000u);
    }
}
