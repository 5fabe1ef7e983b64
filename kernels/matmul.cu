// Tiled matrix product with transpose flags: C[m, n] = op(A) · op(B) (src/ops/matmul.rs).
// cuBLAS does the GEMMs of training; this kernel is the fallback where cuBLAS does not
// load (or ESPALIER_CUDA_GEMM=kernel), and the parity tests run both.
//
// matmul_f32: a block of 16x16 threads computes a 64x64 tile of C (block column =
// blockIdx.x, block rows blockIdx.y, + gridDim.y, ... so any m fits the grid); thread (tx, ty) accumulates the 4x4 values at rows
// ty + 16r, columns tx + 16s (r, s < 4), so C is written coalesced along tx. k advances in
// steps of 16: the 64x16 slice of op(A) and the 16x64 slice of op(B) are staged in shared
// memory (padded rows against bank conflicts). op(A)[i, l] = a[i * k + l], or a[l * m + i]
// when ta; op(B)[l, j] = b[l * n + j], or b[j * k + l] when tb. Out-of-range values load
// as 0; out-of-range outputs are skipped. Each output is one dot product in k order.

#define TILE 64
#define TK 16
#define STRIDE 65

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, u32 m,
                                      u32 n, u32 k, u32 ta, u32 tb) {
    __shared__ float tile_a[TK * STRIDE];  // tile_a[l * STRIDE + i]
    __shared__ float tile_b[TK * STRIDE];  // tile_b[l * STRIDE + j]
    const u32 tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
    const u64 col0 = (u64)blockIdx.x * TILE;
    for (u64 row0 = (u64)blockIdx.y * TILE; row0 < m; row0 += (u64)gridDim.y * TILE) {
        float acc[4][4];
        for (int r = 0; r < 4; r++)
            for (int s = 0; s < 4; s++) acc[r][s] = 0.0f;
        for (u64 l0 = 0; l0 < k; l0 += TK) {
            // 1024 values of each slice, 4 per thread.
            for (u32 e = 0; e < 4; e++) {
                const u32 v = t + 256 * e;
                // op(A) slice: 64 rows x 16 k. Load along the stored contiguous dimension.
                u32 i, l;
                if (ta) { i = v % TILE; l = v / TILE; } else { l = v % TK; i = v / TK; }
                const u64 gi = row0 + i, gl = l0 + l;
                float x = 0.0f;
                if (gi < m && gl < k) x = ta ? a[gl * m + gi] : a[gi * k + gl];
                tile_a[l * STRIDE + i] = x;
                // op(B) slice: 16 k x 64 columns.
                u32 j, lb;
                if (tb) { lb = v % TK; j = v / TK; } else { j = v % TILE; lb = v / TILE; }
                const u64 gj = col0 + j, glb = l0 + lb;
                float y = 0.0f;
                if (gj < n && glb < k) y = tb ? b[gj * k + glb] : b[glb * n + gj];
                tile_b[lb * STRIDE + j] = y;
            }
            __syncthreads();
            for (u32 l = 0; l < TK; l++) {
                float av[4], bv[4];
                for (int r = 0; r < 4; r++) av[r] = tile_a[l * STRIDE + ty + 16 * r];
                for (int s = 0; s < 4; s++) bv[s] = tile_b[l * STRIDE + tx + 16 * s];
                for (int r = 0; r < 4; r++)
                    for (int s = 0; s < 4; s++) acc[r][s] += av[r] * bv[s];
            }
            __syncthreads();
        }
        for (int r = 0; r < 4; r++) {
            const u64 i = row0 + ty + 16 * r;
            if (i >= m) continue;
            for (int s = 0; s < 4; s++) {
                const u64 j = col0 + tx + 16 * s;
                if (j < n) c[i * n + j] = acc[r][s];
            }
        }
    }
}
