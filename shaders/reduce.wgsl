// Sums over a dimension of a 2-D tensor, and its inverse expand (src/ops/reduce.rs).
// Every sum adds in a fixed order, so results are deterministic; no atomics.
// Every dispatch covers a range of the work (src/device/wgpu/split.rs): `base` is its
// first item (global index), `n` how many; out (expanded) and x (v) are windows whose
// first elements are same_base and follow_base (out has one value per item, x is read
// through a map), indexed with global element indices. expand_f32 runs through
// Context::launch_followed, which sets the same four.
//
// sum_rows_f32:       0 params, 1 x (read), 2 out (read_write). Workgroup of 256 threads
//                     per work item w = base + wid.x + wid.y * nwg.x (row = w / nb,
//                     blk = w % nb): thread t adds columns blk*1024 + t + 256e (e = 0..3),
//                     then wg_sum256 (prelude); out[w] = out[row * nb + blk].
//                     The host repeats it with c = nb until nb = 1 (long rows, sum_all).
// sum_rows_small_f32: 0 params, 1 x, 2 out; one invocation per row (short rows):
//                     out[row] = x[row, 0] + x[row, 1] + ... in column order.
// sum_cols_f32:       0 params, 1 x, 2 out; one invocation per (block of R rows, column),
//                     i = blk * c + col: out[i] = sum of x[blk*R .. min(r, blk*R + R), col]
//                     in row order. The host repeats it over the block sums until one
//                     block is left. A dispatch sums only rows row_lo .. row_hi of its
//                     blocks; one that starts inside a block adds to what out holds (the
//                     same additions in the same order as one dispatch).
// expand_f32:         0 params, 3 v (read), 4 out (read_write); one invocation per output
//                     element gi: out[gi] = v[gi % c] (dim 0) or v[gi / c] (dim 1).
// 1-D invocation index: i = gid.x + gid.y * nwg.x * 256 (local to the dispatch).

struct Params {
    n: u32,            // work items, rows, invocations or elements in this dispatch
    base: u32,         // global index of the dispatch's first item
    same_base: u32,    // first element of the out (expanded) window
    follow_base: u32,  // first element of the x (v) window
    c: u32,         // columns
    d: u32,         // sum_rows: blocks per row nb; sum_cols: rows per block R; expand: dim
    r: u32,         // sum_cols: rows
    row_lo: u32,    // sum_cols: rows this dispatch sums
    row_hi: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> expanded: array<f32>;

@compute @workgroup_size(256)
fn sum_rows_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let c = p.c;
    let nb = p.d;
    let local = wid.x + wid.y * nwg.x;
    let live = local < p.n;
    let w = p.base + local;
    let row = w / nb;
    let blk = w % nb;
    var acc = 0.0;
    if live {
        for (var e = 0u; e < 4u; e++) {
            let col = blk * 1024u + e * 256u + t;
            if col < c {
                acc += x[row * c + col - p.follow_base];
            }
        }
    }
    let total = wg_sum256(t, acc);
    if t == 0u && live {
        out[w - p.same_base] = total;
    }
}

@compute @workgroup_size(256)
fn sum_rows_small_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let row = p.base + i;
    let c = p.c;
    var acc = 0.0;
    for (var j = 0u; j < c; j++) {
        acc += x[row * c + j - p.follow_base];
    }
    out[row - p.same_base] = acc;
}

@compute @workgroup_size(256)
fn sum_cols_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let local = linear(gid, nwg);
    if local >= p.n {
        return;
    }
    let c = p.c;
    let i = p.base + local;
    let blk = i / c;
    let col = i % c;
    let start = max(blk * p.d, p.row_lo);
    let end = min(min(p.r, blk * p.d + p.d), p.row_hi);
    var acc = 0.0;
    if start > blk * p.d {
        acc = out[i - p.same_base];
    }
    for (var row = start; row < end; row++) {
        acc += x[row * c + col - p.follow_base];
    }
    out[i - p.same_base] = acc;
}

@compute @workgroup_size(256)
fn expand_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.base + i;
    let c = p.c;
    expanded[gi - p.same_base] = v[select(gi / c, gi % c, p.d == 0u) - p.follow_base];
}
