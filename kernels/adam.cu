// In-place Adam / AdamW update (src/ops/adam.rs), f32.
//
// adam_f32(param, grad, m1, m2, lr, b1, b2, eps, wd, bc1, bc2, shrink, decoupled, n):
// Adam (L2): g += wd * p. AdamW (decoupled != 0): p *= shrink. Then m = b1 m + (1 - b1) g,
// v = b2 v + (1 - b2) g², p -= lr * (m / bc1) / (sqrt(v / bc2) + eps); the bias
// corrections bc1 = 1 - b1^t, bc2 = 1 - b2^t and shrink = 1 - lr * wd come from the host,
// rounded from f64 like the CPU kernel's constants.
// A thread per element i < n (grid-stride).

extern "C" __global__ void adam_f32(float* param, const float* grad, float* m1, float* m2,
                                    float lr, float b1, float b2, float eps, float wd,
                                    float bc1, float bc2, float shrink, u32 decoupled, u32 n) {
    FOR_EACH(i, n) {
        float w = param[i];
        float g = grad[i];
        if (decoupled != 0u) {
            w = w * shrink;
        } else {
            g = g + wd * w;
        }
        const float m = b1 * m1[i] + (1.0f - b1) * g;
        const float v = b2 * m2[i] + (1.0f - b2) * g * g;
        m1[i] = m;
        m2[i] = v;
        const float mhat = m / bc1;
        const float vhat = v / bc2;
        param[i] = w - lr * mhat / (sqrtf(vhat) + eps);
    }
}
