// Fused, stable softmax cross-entropy (src/ops/cross_entropy.rs).
//
// ce_rows_f32(x, labels, lse, row_loss, r, c): a warp per row (grid-stride): lane l visits
//     columns l, l + 32, ...; m = row max (a NaN wins), l = ln Σ exp(x - m) (0 when m is ±inf
//     or NaN); lse = m + l, row_loss = l - (x[y] - m), y clamped into the row (ce_mean
//     flags it). ce_rows_block_f32, same parameters: a block per row, for long rows.
// ce_mean_f32(labels, rows, w, loss, status, r, c, inv_n): ONE block (any multiple of 32
//     threads up to 1024): thread t adds rows t, t + blockDim.x, ... in order, then a block
//     reduction; loss[0] = Σ wᵢ·row_lossᵢ · inv_n, wᵢ = 1 when w is null (no weights).
//     status = [first row whose label is >= c, its label], or [0xffffffff, 0] if none.
// ce_backward_f32(x, labels, lse, gl, w, gx, r, c, inv_n): a thread per logit i
//     (grid-stride), row = i / c, j = i % c: s = gl[0]·inv_n·wᵢ (w null: no weights),
//     gx = s·exp(x - lse) - (s if j == y). gl is the loss gradient (one value, on the device).
// ce_weight_grad_f32(x, labels, lse, gl, gw, r, c, inv_n): a thread per row (grid-stride):
//     gw = gl[0]·inv_n·(lse - x[y]).

#define NO_ROW 0xffffffffu

// Minimum over the block of a u32, like the prelude's block_sum.
__device__ __forceinline__ u32 block_min_u32(u32 v) {
    __shared__ u32 partial[33];
    const u32 lane = lane_id(), warp = threadIdx.x / 32u, warps = blockDim.x / 32u;
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        u32 w = lane < warps ? partial[lane] : NO_ROW;
        for (int o = 16; o > 0; o >>= 1) w = min(w, __shfl_xor_sync(0xffffffffu, w, o));
        if (lane == 0) partial[32] = w;
    }
    __syncthreads();
    const u32 total = partial[32];
    __syncthreads();
    return total;
}

// Row `row`; thread t of `stride` threads visits columns t, t + stride, ...
template <bool BLOCK>
__device__ __forceinline__ void ce_row(const float* x, const u32* labels, float* lse,
                                       float* row_loss, u64 row, u32 c, u32 t, u32 stride) {
    const float* xr = x + row * c;
    float m = NEG_INF;
    for (u64 j = t; j < c; j += stride) m = nan_max(m, xr[j]);
    m = row_nan_max<BLOCK>(m);
    float s = 0.0f;
    for (u64 j = t; j < c; j += stride) s += expf(xr[j] - m);
    s = row_sum<BLOCK>(s);
    if (t == 0) {
        const float l = finite(m) ? logf(s) : 0.0f;
        const u32 y = min(labels[row], c - 1u);
        lse[row] = m + l;
        row_loss[row] = l - (xr[y] - m);
    }
}

extern "C" __global__ void ce_rows_f32(const float* x, const u32* labels, float* lse,
                                       float* row_loss, u32 r, u32 c) {
    FOR_EACH_ROW_WARP(row, r) ce_row<false>(x, labels, lse, row_loss, row, c, lane_id(), 32u);
}

extern "C" __global__ void ce_rows_block_f32(const float* x, const u32* labels, float* lse,
                                             float* row_loss, u32 r, u32 c) {
    FOR_EACH_ROW_BLOCK(row, r) {
        ce_row<true>(x, labels, lse, row_loss, row, c, threadIdx.x, blockDim.x);
    }
}

// The mean of the (weighted) row losses and the first bad label, by one block. A null `w`
// is the same for every thread, so the branch costs no divergence.
extern "C" __global__ void ce_mean_f32(const u32* labels, const float* rows, const float* w,
                                       float* loss, u32* status, u32 r, u32 c, float inv_n) {
    float acc = 0.0f;
    u32 first = NO_ROW;
    for (u64 i = threadIdx.x; i < r; i += blockDim.x) {
        if (w != nullptr) acc += w[i] * rows[i];
        else acc += rows[i];
        if (first == NO_ROW && labels[i] >= c) first = (u32)i;
    }
    const float total = block_sum(acc);
    const u32 bad = block_min_u32(first);
    if (threadIdx.x == 0) {
        loss[0] = total * inv_n;
        status[0] = bad;
        status[1] = bad == NO_ROW ? 0u : labels[bad];
    }
}

extern "C" __global__ void ce_backward_f32(const float* x, const u32* labels, const float* lse,
                                           const float* gl, const float* w, float* gx, u32 r,
                                           u32 c, float inv_n) {
    const float base = gl[0] * inv_n;
    FOR_EACH(i, (u64)r * c) {
        const u32 k = (u32)i;  // r * c fits u32 (the host checks): 32-bit division
        const u32 row = k / c, j = k % c;
        float s = base;
        if (w != nullptr) s = s * w[row];
        float v = s * expf(x[i] - lse[row]);
        if (j == labels[row]) v -= s;
        gx[i] = v;
    }
}

extern "C" __global__ void ce_weight_grad_f32(const float* x, const u32* labels,
                                              const float* lse, const float* gl, float* gw,
                                              u32 r, u32 c, float inv_n) {
    const float base = gl[0] * inv_n;
    FOR_EACH(row, r) {
        const u32 y = min(labels[row], c - 1u);
        gw[row] = base * (lse[row] - x[row * c + y]);
    }
}
