// LSTM aggregation over degree buckets (src/ops/lstm_aggregate.rs). Rows follow the plan's
// layout: row(i, t) = offset + i·k + t for node i of a bucket of degree k. Gates in
// PyTorch's order (i, f, g, o); the cell maths is the one of kernels/lstm_cell.cu.
//
// lstm_step_f32(xw [num_src, 4H], idx [rows], hw [m, 4H], acts [rows, 4H], cs [rows, H],
//   h_next [m, H], out [num_dst, H], dst [m], m, h, k, t, offset): one step t of one
//   bucket: z = xw[idx[row]], the input projection of the row's src node read in place
//   (no gathered copy), + hw[i], the h_{t-1}·W_hh of node i, when t > 0 (hw is not read at
//   t = 0); c_prev = cs[row - 1] (0 at t = 0); writes the activated gates to acts[row], c
//   to cs[row], h to h_next[i], and at t = k - 1 also to out[dst[i]].
// lstm_step_backward_f32(acts, cs, grad [num_dst, H], dst [m], dh [m, H], dc [m, H],
//   dz [m, 4H], dxg [rows, 4H], m, h, k, t, offset): run for t = k-1 down to 0. h̄ is
//   grad[dst[i]] at t = k - 1 (where dh and dc are not read, c̄ = 0), else dh[i] and dc[i];
//   writes z̄ to dz[i] and dxg[row], and c̄_{t-1} back to dc[i].
// lstm_hprev_f32(acts, cs, steps [rows], hprev [rows, H], rows, h): hprev[r] =
//   o[r-1]·tanh(c[r-1]), or 0 where steps[r] = 0.
// A thread per (node i, hidden unit j) (per (row, unit) for lstm_hprev_f32), linear index
// i·H + j, grid-stride: consecutive threads touch consecutive units of each gate block
// (coalesced; in the forward, of the row of xw that idx names).

extern "C" __global__ void lstm_step_f32(const float* xw, const u32* idx, const float* hw,
                                         float* acts, float* cs, float* h_next, float* out,
                                         const u32* dst, u32 m, u32 h, u32 k, u32 t,
                                         u32 offset) {
    FOR_EACH(n, (u64)m * h) {
        const u64 i = n / h, j = n - i * h;
        const u64 row = (u64)offset + i * k + t;
        const u64 z = row * 4 * h + j;
        const u64 x = (u64)idx[row] * 4 * h + j;
        float zi = xw[x], zf = xw[x + h], zg = xw[x + 2 * h], zo = xw[x + 3 * h];
        float cp = 0.0f;
        if (t > 0) {
            const u64 r = i * 4 * h + j;
            zi += hw[r];
            zf += hw[r + h];
            zg += hw[r + 2 * h];
            zo += hw[r + 3 * h];
            cp = cs[(row - 1) * h + j];
        }
        const float ig = sigmoid(zi);
        const float fg = sigmoid(zf);
        const float gg = tanhf(zg);
        const float og = sigmoid(zo);
        const float c = fg * cp + ig * gg;
        const float hv = og * tanhf(c);
        acts[z] = ig;
        acts[z + h] = fg;
        acts[z + 2 * h] = gg;
        acts[z + 3 * h] = og;
        cs[row * h + j] = c;
        h_next[n] = hv;
        if (t + 1 == k) out[(u64)dst[i] * h + j] = hv;
    }
}

extern "C" __global__ void lstm_step_backward_f32(const float* acts, const float* cs,
                                                  const float* grad, const u32* dst,
                                                  const float* dh, float* dc, float* dz,
                                                  float* dxg, u32 m, u32 h, u32 k, u32 t,
                                                  u32 offset) {
    FOR_EACH(idx, (u64)m * h) {
        const u64 i = idx / h, j = idx - i * h;
        const u64 row = (u64)offset + i * k + t;
        const u64 z = row * 4 * h + j;
        const float ig = acts[z], fg = acts[z + h], gg = acts[z + 2 * h], og = acts[z + 3 * h];
        const float c = cs[row * h + j];
        const float cp = t > 0 ? cs[(row - 1) * h + j] : 0.0f;
        float hbar, cbar;
        if (t + 1 == k) {
            hbar = grad[(u64)dst[i] * h + j];
            cbar = 0.0f;
        } else {
            hbar = dh[idx];
            cbar = dc[idx];
        }
        const float tc = tanhf(c);
        const float dct = cbar + hbar * og * (1.0f - tc * tc);
        const float di = dct * gg * ig * (1.0f - ig);
        const float df = dct * cp * fg * (1.0f - fg);
        const float dg = dct * ig * (1.0f - gg * gg);
        const float dov = hbar * tc * og * (1.0f - og);
        const u64 b = i * 4 * h + j;
        dz[b] = di;
        dz[b + h] = df;
        dz[b + 2 * h] = dg;
        dz[b + 3 * h] = dov;
        dxg[z] = di;
        dxg[z + h] = df;
        dxg[z + 2 * h] = dg;
        dxg[z + 3 * h] = dov;
        dc[idx] = dct * fg;
    }
}

extern "C" __global__ void lstm_hprev_f32(const float* acts, const float* cs, const u32* steps,
                                          float* hprev, u32 rows, u32 h) {
    FOR_EACH(idx, (u64)rows * h) {
        const u64 r = idx / h, j = idx - r * h;
        float v = 0.0f;
        if (steps[r] > 0) v = acts[(r - 1) * 4 * h + 3 * h + j] * tanhf(cs[(r - 1) * h + j]);
        hprev[idx] = v;
    }
}
