// Dropout with a counter-based mask (src/ops/dropout.rs); the hash is src/rng.rs's
// pcg/hash3/uniform3 in u32 arithmetic (wrapping, as in Rust), so the mask is bit-identical
// to the CPU's.
//
// dropout_f32(x, out, c, key, threshold, scale, n): row id = row.
// dropout_ids_f32(x, out, ids, c, key, threshold, scale, n): row id = ids[row].
// A thread per element i < n = rows * c (grid-stride): row = i / c, col = i % c;
// out[i] = x[i] * scale if uniform3(key, id, col) >= threshold, else 0. n fits u32 (the
// host checks), so the division is 32-bit.

__device__ __forceinline__ u32 pcg(u32 v) {
    const u32 state = v * 747796405u + 2891336453u;
    const u32 word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// 24 bits of the hash times 2^-24: exact in f32, so no rounding mode can change it.
__device__ __forceinline__ float uniform3(u32 key, u32 a, u32 b) {
    const u32 h = pcg(pcg(pcg(key) ^ a) ^ b);
    return (float)(h >> 8u) * (1.0f / 16777216.0f);
}

__device__ __forceinline__ float masked(float v, u32 key, u32 id, u32 col, float threshold,
                                        float scale) {
    return uniform3(key, id, col) >= threshold ? v * scale : 0.0f;
}

extern "C" __global__ void dropout_f32(const float* x, float* out, u32 c, u32 key,
                                       float threshold, float scale, u32 n) {
    FOR_EACH(i, n) {
        const u32 k = (u32)i;
        out[i] = masked(x[i], key, k / c, k % c, threshold, scale);
    }
}

extern "C" __global__ void dropout_ids_f32(const float* x, float* out, const u32* ids, u32 c,
                                           u32 key, float threshold, float scale, u32 n) {
    FOR_EACH(i, n) {
        const u32 k = (u32)i;
        out[i] = masked(x[i], key, ids[k / c], k % c, threshold, scale);
    }
}
