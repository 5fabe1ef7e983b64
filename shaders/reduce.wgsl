// Sums over a dimension of a 2-D tensor, and its inverse expand (src/ops/reduce.rs).
// Every sum adds in a fixed order, so results are deterministic; no atomics.
//
// sum_rows_f32:       0 params, 1 x (read), 2 out (read_write). Workgroup of 256 threads
//                     per (row, block of 1024 columns): w = wid.x + wid.y * nwg.x,
//                     row = w / nb, blk = w % nb; thread t adds columns blk*1024 + t + 256e
//                     (e = 0..3), then a tree over the workgroup; out[row * nb + blk].
//                     The host repeats it with c = nb until nb = 1 (long rows, sum_all).
// sum_rows_small_f32: 0 params, 1 x, 2 out; one invocation per row (short rows):
//                     out[row] = x[row, 0] + x[row, 1] + ... in column order.
// sum_cols_f32:       0 params, 1 x, 2 out; one invocation per (block of R rows, column):
//                     out[blk, col] = sum of x[blk*R .. min(r, blk*R + R), col] in row order.
//                     The host repeats it over the block sums until one block is left.
// expand_f32:         0 params, 3 v (read), 4 out (read_write), chunked
//                     (Context::launch_chunked): global index gi = base + i;
//                     out[i] = v[gi % c] (dim 0) or v[gi / c] (dim 1).
// 1-D invocation index: i = gid.x + gid.y * nwg.x * 256.

struct Params {
    a: u32,  // sum_*: rows r;     expand: elements in the chunk
    b: u32,  // sum_*: columns c;  expand: base
    d: u32,  // sum_rows: blocks per row nb; sum_cols: rows per block R; expand: columns c
    e: u32,  // expand: dimension (0 or 1)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> expanded: array<f32>;

var<workgroup> partial: array<f32, 256>;

fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn sum_rows_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let r = p.a;
    let c = p.b;
    let nb = p.d;
    let w = wid.x + wid.y * nwg.x;
    let row = w / nb;
    let blk = w % nb;
    var acc = 0.0;
    if row < r {
        for (var e = 0u; e < 4u; e++) {
            let col = blk * 1024u + e * 256u + t;
            if col < c {
                acc += x[row * c + col];
            }
        }
    }
    partial[t] = acc;
    workgroupBarrier();
    for (var half = 128u; half > 0u; half >>= 1u) {
        if t < half {
            partial[t] += partial[t + half];
        }
        workgroupBarrier();
    }
    if t == 0u && row < r {
        out[row * nb + blk] = partial[0];
    }
}

@compute @workgroup_size(256)
fn sum_rows_small_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = linear(gid, nwg);
    if row >= p.a {
        return;
    }
    let c = p.b;
    var acc = 0.0;
    for (var j = 0u; j < c; j++) {
        acc += x[row * c + j];
    }
    out[row] = acc;
}

@compute @workgroup_size(256)
fn sum_cols_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = p.a;
    let c = p.b;
    let rows_per = p.d;
    let i = linear(gid, nwg);
    let nblk = (r + rows_per - 1u) / rows_per;
    if i >= nblk * c {
        return;
    }
    let blk = i / c;
    let col = i % c;
    let start = blk * rows_per;
    let end = min(r, start + rows_per);
    var acc = 0.0;
    for (var row = start; row < end; row++) {
        acc += x[row * c + col];
    }
    out[blk * c + col] = acc;
}

@compute @workgroup_size(256)
fn expand_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.a {
        return;
    }
    let gi = p.b + i;
    let c = p.d;
    expanded[i] = select(v[gi / c], v[gi % c], p.e == 0u);
}
