// Widening half-precision feature values to f32 (src/ops/widen.rs).
//
// widen_f16_f32:  x holds two f16 per u32 word (little-endian); thread per word
//                 (grid-stride): out[2w] from the low half, out[2w + 1] from the high half
//                 when 2w + 1 < n. cvt.f32.f16 widens exactly (no cuda_fp16.h needed); the
//                 host build of the CUDA emulator widens the bits by hand.
// widen_bf16_f32: the same for bf16, the top half of an f32: a shift widens it exactly.

__device__ __forceinline__ float f16_bits_to_f32(u32 h) {
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
#else
    // Host build (the CUDA emulator, which has no PTX): the same exact widening on the bits.
    const u32 sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu;
    u32 mant = h & 0x3ffu;
    if (exp == 0x1fu && mant == 0) return __uint_as_float(sign | 0x7f800000u);  // ±inf
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7fc00000u | (mant << 13));  // NaN, made quiet
    if (exp != 0) return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return __uint_as_float(sign);  // ±0
    u32 e = 113;  // subnormal: normalise the mantissa
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return __uint_as_float(sign | (e << 23) | ((mant & 0x3ffu) << 13));
#endif
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
