// Row gather, its adjoint the deterministic row scatter-add, and the row put
// (src/ops/index_select.rs).
//
// Every dispatch covers output rows r0 .. (values i < p.n from r0 * f): the index arrays and
// the output are bound as the windows of those rows, the table read (gather, scatter-add) or
// written (put) at arbitrary rows as the window of its tile of rows t0 .. t1
// (src/device/wgpu/split.rs); `*_base` is each window's first element, indices are global.
//
// gather_u32: 0 params, 1 idx (read), 2 x (read), 3 out (write). One invocation per output
//   value gi = r * f + j: out[gi] = x[idx[r] * f + j] when idx[r] is in the tile (so over the
//   tiles each value is copied once). Values are copied as bits, so one entry serves f32 and
//   u32 tensors; consecutive invocations read consecutive features (coalesced). Indices are
//   checked on the host.
// put_u32: 0 params, 1 idx (read), 8 rows (read), 9 table (read_write). One invocation per
//   value gi = r * f + j of the rows: table[idx[r] * f + j] = rows[gi] when idx[r] is in the
//   tile; the indices must be distinct.
// scatter_add_f32: 0 params, 4 t_indptr, 5 t_pos, 6 src (read), 7 out_f (write). One
//   invocation per output value gi = r * f + j over the transposed index (for each target
//   row r, the positions that hit it, increasing): out_f[gi] = Σ src[pos * f + j] in that
//   order, over the positions in the tile, added to what the previous tile left unless
//   `first`. Positions increase along the sum and tiles are visited in order, so the
//   additions keep their order. No atomics, so the result is deterministic; rows nothing
//   hits get 0.
// Linear index over the 2-D grid: i = gid.x + gid.y * nwg.x * 256.

struct Params {
    n: u32,         // values in this dispatch
    f: u32,         // features per row
    r0: u32,        // first output row (gather, scatter) or row of `rows` (put)
    idx_base: u32,  // first element of the idx (t_indptr) window
    out_base: u32,  // first element of the out (rows, out_f) window
    t0: u32,        // the tile of table rows (src positions for the scatter)
    t1: u32,
    x_base: u32,    // first element of the x (table, src) window
    pos_base: u32,  // scatter: first element of the t_pos window
    first: u32,     // scatter: 1 for the first tile
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> idx: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
@group(0) @binding(4) var<storage, read> t_indptr: array<u32>;
@group(0) @binding(5) var<storage, read> t_pos: array<u32>;
@group(0) @binding(6) var<storage, read> src: array<f32>;
@group(0) @binding(7) var<storage, read_write> out_f: array<f32>;
@group(0) @binding(8) var<storage, read> rows: array<u32>;
@group(0) @binding(9) var<storage, read_write> table: array<u32>;

@compute @workgroup_size(256)
fn gather_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.r0 * p.f + i;
    let r = gi / p.f;
    let j = gi - r * p.f;
    let row = idx[r - p.idx_base];
    if row >= p.t0 && row < p.t1 {
        out[gi - p.out_base] = x[row * p.f + j - p.x_base];
    }
}

@compute @workgroup_size(256)
fn put_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.r0 * p.f + i;
    let r = gi / p.f;
    let j = gi - r * p.f;
    let row = idx[r - p.idx_base];
    if row >= p.t0 && row < p.t1 {
        table[row * p.f + j - p.x_base] = rows[gi - p.out_base];
    }
}

@compute @workgroup_size(256)
fn scatter_add_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.r0 * p.f + i;
    let r = gi / p.f;
    let j = gi - r * p.f;
    var acc = 0.0;
    if p.first == 0u {
        acc = out_f[gi - p.out_base];
    }
    let end = t_indptr[r + 1u - p.idx_base];
    for (var k = t_indptr[r - p.idx_base]; k < end; k++) {
        let pos = t_pos[k - p.pos_base];
        if pos >= p.t1 {
            break;
        }
        if pos >= p.t0 {
            acc += src[pos * p.f + j - p.x_base];
        }
    }
    out_f[gi - p.out_base] = acc;
}
