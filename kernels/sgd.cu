// In-place SGD update (src/ops/sgd.rs), f32.
//
// sgd_f32(param, grad, lr, wd, n):          d = g + wd * p; p -= lr * d.
// sgd_momentum_f32(param, grad, velocity, lr, mu, wd, first, n):
//                                           d = g + wd * p; v = d (first != 0) or
//                                           mu * v + d; p -= lr * v.
// A thread per element i < n (grid-stride).

extern "C" __global__ void sgd_f32(float* param, const float* grad, float lr, float wd,
                                   u32 n) {
    FOR_EACH(i, n) {
        const float w = param[i];
        const float d = grad[i] + wd * w;
        param[i] = w - lr * d;
    }
}

extern "C" __global__ void sgd_momentum_f32(float* param, const float* grad, float* velocity,
                                            float lr, float mu, float wd, u32 first, u32 n) {
    FOR_EACH(i, n) {
        const float w = param[i];
        const float d = grad[i] + wd * w;
        const float v = first != 0u ? d : mu * velocity[i] + d;
        velocity[i] = v;
        param[i] = w - lr * v;
    }
}
