// Tiled matrix product with transpose flags: C[m, n] = op(A) · op(B) (src/ops/matmul.rs).
//
// matmul_f32: 0 params, 1 a (read), 2 b (read), 3 c (read_write).
// A workgroup of 16x16 threads computes a 64x64 tile of C: block column = wid.x, block row
// = wid.y + wid.z * nwg.y (rows fold into z past the per-dimension workgroup limit).
// Thread (tx, ty) accumulates the 4x4 values at rows ty + 16r, columns tx + 16s (r, s < 4),
// so a warp reads shared memory without bank conflicts and writes C coalesced along tx.
// k advances in steps of 16: the 64x16 slice of op(A) and the 16x64 slice of op(B) are
// staged in workgroup memory (2 x 16 x 65 floats, padded against bank conflicts), each
// thread loading 4 values of each along the stored operand's contiguous dimension.
// op(A)[i, l] = a[i * k + l], or a[l * m + i] when ta; op(B)[l, j] = b[l * n + j], or
// b[j * k + l] when tb. Out-of-range values load as 0, out-of-range outputs are skipped.
// When p.accumulate is 1 the tile is added to C (the host splits a long k into chunks
// bound one after another and accumulates them in order).
//
// copy2d_f32: 0 params, 4 src (read), 5 dst (read_write). Copies a block of a strided matrix:
// one invocation per value of the tile of rows tr .. and columns tc .. tc + w of the block
// at (r0, c0) (i = gid.x + gid.y * nwg.x * 256 < count):
// dst[off + r * drs + c * dcs] = src[(r0 + r) * srs + (c0 + c) * scs]. src and dst are bound
// as the windows the tile reads and writes (src/device/wgpu/split.rs), whose first elements
// are src_base and dst_base. The host copies blocks of the operands into compact buffers
// this way when it cannot bind them where they lie (src/ops/matmul.rs, `blocked`).

struct Params {
    m: u32,
    n: u32,
    k: u32,
    ta: u32,
    tb: u32,
    accumulate: u32,
    count: u32,     // copy2d_f32 only, from here on
    w: u32,
    tr: u32,
    tc: u32,
    r0: u32,
    c0: u32,
    srs: u32,
    scs: u32,
    drs: u32,
    dcs: u32,
    off: u32,
    src_base: u32,
    dst_base: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
@group(0) @binding(4) var<storage, read> src: array<f32>;
@group(0) @binding(5) var<storage, read_write> dst: array<f32>;

const TILE: u32 = 64u;
const TK: u32 = 16u;
const STRIDE: u32 = 65u;

var<workgroup> tile_a: array<f32, 1040>;  // [TK][STRIDE]: tile_a[l * STRIDE + i]
var<workgroup> tile_b: array<f32, 1040>;  // [TK][STRIDE]: tile_b[l * STRIDE + j]

@compute @workgroup_size(16, 16)
fn matmul_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let m = p.m;
    let n = p.n;
    let k = p.k;
    let tx = lid.x;
    let ty = lid.y;
    let t = ty * 16u + tx;
    let row0 = (wid.y + wid.z * nwg.y) * TILE;
    let col0 = wid.x * TILE;

    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);

    for (var k0 = 0u; k0 < k; k0 += TK) {
        for (var q = 0u; q < 4u; q++) {
            let e = t + q * 256u;
            // op(A) tile: 64 rows i by 16 columns l.
            var ia: u32;
            var la: u32;
            if p.ta == 0u {
                ia = e / TK;
                la = e % TK;
            } else {
                ia = e % TILE;
                la = e / TILE;
            }
            let gi = row0 + ia;
            let gl = k0 + la;
            var va = 0.0;
            if gi < m && gl < k {
                if p.ta == 0u {
                    va = a[gi * k + gl];
                } else {
                    va = a[gl * m + gi];
                }
            }
            tile_a[la * STRIDE + ia] = va;
            // op(B) tile: 16 rows l by 64 columns j.
            var lb: u32;
            var jb: u32;
            if p.tb == 0u {
                lb = e / TILE;
                jb = e % TILE;
            } else {
                lb = e % TK;
                jb = e / TK;
            }
            let gj = col0 + jb;
            let gk = k0 + lb;
            var vb = 0.0;
            if gj < n && gk < k {
                if p.tb == 0u {
                    vb = b[gk * n + gj];
                } else {
                    vb = b[gj * k + gk];
                }
            }
            tile_b[lb * STRIDE + jb] = vb;
        }
        workgroupBarrier();
        for (var l = 0u; l < TK; l++) {
            let ra = l * STRIDE + ty;
            let rb = l * STRIDE + tx;
            let bv = vec4<f32>(tile_b[rb], tile_b[rb + 16u], tile_b[rb + 32u], tile_b[rb + 48u]);
            acc0 += tile_a[ra] * bv;
            acc1 += tile_a[ra + 16u] * bv;
            acc2 += tile_a[ra + 32u] * bv;
            acc3 += tile_a[ra + 48u] * bv;
        }
        workgroupBarrier();
    }

    var accs = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
    for (var r = 0u; r < 4u; r++) {
        let gi = row0 + ty + 16u * r;
        if gi >= m {
            break;
        }
        let acc = accs[r];
        for (var s = 0u; s < 4u; s++) {
            let gj = col0 + tx + 16u * s;
            if gj < n {
                let idx = gi * n + gj;
                if p.accumulate != 0u {
                    c[idx] += acc[s];
                } else {
                    c[idx] = acc[s];
                }
            }
        }
    }
}

@compute @workgroup_size(256)
fn copy2d_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.count {
        return;
    }
    let r = p.tr + i / p.w;
    let c = p.tc + i % p.w;
    let s = (p.r0 + r) * p.srs + (p.c0 + c) * p.scs;
    dst[p.off + r * p.drs + c * p.dcs - p.dst_base] = src[s - p.src_base];
}
