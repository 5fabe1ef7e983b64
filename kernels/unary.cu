// Elementwise unary ops and their fused backward (src/ops/unary.rs).
//
// unary_f32:          out[i] = f(x[i]).
// unary_backward_f32: out[i] = g[i] * f'(s[i]), s the saved output (the input for log).
// Thread per element, grid-stride. op: 0 neg, 1 relu, 2 leaky_relu, 3 elu, 4 sigmoid,
// 5 tanh, 6 exp, 7 log, 8 add_scalar, 9 mul_scalar; a is the scalar parameter.

__device__ __forceinline__ float forward(u32 op, float a, float v) {
    switch (op) {
        case 0: return -v;
        case 1: return fmaxf(v, 0.0f);
        case 2: return v > 0.0f ? v : a * v;
        case 3: return v > 0.0f ? v : a * (expf(v) - 1.0f);
        case 4: {
            // Stable: never exponentiates a positive number.
            if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
            float e = expf(v);
            return e / (1.0f + e);
        }
        case 5: return tanhf(v);
        case 6: return expf(v);
        case 7: return logf(v);
        case 8: return v + a;
        default: return v * a;
    }
}

__device__ __forceinline__ float derivative(u32 op, float a, float v) {
    switch (op) {
        case 0: return -1.0f;
        case 1: return v > 0.0f ? 1.0f : 0.0f;
        case 2: return v > 0.0f ? 1.0f : a;
        case 3: return v > 0.0f ? 1.0f : v + a;
        case 4: return v * (1.0f - v);
        case 5: return 1.0f - v * v;
        case 6: return v;
        case 7: return 1.0f / v;
        case 8: return 1.0f;
        default: return a;
    }
}

extern "C" __global__ void unary_f32(const float* x, float* out, u32 op, float a, u32 n) {
    FOR_EACH(i, n) out[i] = forward(op, a, x[i]);
}

extern "C" __global__ void unary_backward_f32(const float* g, const float* s, float* out,
                                              u32 op, float a, u32 n) {
    FOR_EACH(i, n) out[i] = g[i] * derivative(op, a, s[i]);
}
