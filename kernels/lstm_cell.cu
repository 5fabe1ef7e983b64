// Fused LSTM cell (src/ops/lstm_cell.rs). Gates in PyTorch's order (i, f, g, o).
//
// lstm_cell_forward_f32(gates [n, 4H], c_prev [n, H], out [n, 2H] = [h | c], acts [n, 4H],
//   n, h): acts = (σ(z_i), σ(z_f), tanh(z_g), σ(z_o)), c = f·c_prev + i·g, h = o·tanh(c).
// lstm_cell_backward_f32(acts [n, 4H], c_prev [n, H], grad [n, 2H] = [h̄ | c̄], dgates [n, 4H],
//   dc_prev [n, H], n, h): c is recomputed from acts and c_prev; with τ = tanh(c),
//   ĉ = c̄ + h̄·o·(1 - τ²), z̄ = (ĉ·g·i(1-i), ĉ·c_prev·f(1-f), ĉ·i·(1-g²), h̄·τ·o(1-o)),
//   c̄_prev = ĉ·f.
// A thread per (node r, hidden unit j), idx = r·H + j, grid-stride: consecutive threads
// touch consecutive units of each gate block (coalesced).

extern "C" __global__ void lstm_cell_forward_f32(const float* gates, const float* c_prev,
                                                 float* out, float* acts, u32 n, u32 h) {
    FOR_EACH(idx, (u64)n * h) {
        const u64 r = idx / h, j = idx - r * h;
        const u64 z = r * 4 * h + j;
        const float i = sigmoid(gates[z]);
        const float f = sigmoid(gates[z + h]);
        const float g = tanhf(gates[z + 2 * h]);
        const float o = sigmoid(gates[z + 3 * h]);
        const float c = f * c_prev[idx] + i * g;
        acts[z] = i;
        acts[z + h] = f;
        acts[z + 2 * h] = g;
        acts[z + 3 * h] = o;
        out[r * 2 * h + j] = o * tanhf(c);
        out[r * 2 * h + h + j] = c;
    }
}

extern "C" __global__ void lstm_cell_backward_f32(const float* acts, const float* c_prev,
                                                  const float* grad, float* dgates,
                                                  float* dc_prev, u32 n, u32 h) {
    FOR_EACH(idx, (u64)n * h) {
        const u64 r = idx / h, j = idx - r * h;
        const u64 z = r * 4 * h + j;
        const float i = acts[z];
        const float f = acts[z + h];
        const float g = acts[z + 2 * h];
        const float o = acts[z + 3 * h];
        const float cp = c_prev[idx];
        const float tc = tanhf(f * cp + i * g);
        const float dh = grad[r * 2 * h + j];
        const float dc = grad[r * 2 * h + h + j] + dh * o * (1.0f - tc * tc);
        dgates[z] = dc * g * i * (1.0f - i);
        dgates[z + h] = dc * cp * f * (1.0f - f);
        dgates[z + 2 * h] = dc * i * (1.0f - g * g);
        dgates[z + 3 * h] = dh * tc * o * (1.0f - o);
        dc_prev[idx] = dc * f;
    }
}
