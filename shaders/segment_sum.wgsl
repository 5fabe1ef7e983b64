// Sum and mean aggregation over a block's CSR (src/ops/segment_sum.rs).
//
// segment_sum_f32 (forward): 0 params, 1 indptr, 2 indices, 3 x (read), 4 out (write).
//   One invocation per (dst row d, feature j), gi = d * f + j: out[gi] = Σ x[indices[e] * f + j]
//   over the in-edges e of d in edge order (divided by the in-degree for the mean; 0 for none).
// segment_sum_backward_f32: 0 params, 1 indptr, 5 t_indptr, 6 t_dst, 7 g (read),
//   8 grad_x (write). One invocation per (src row u, feature j) over the transposed CSR:
//   grad_x[u * f + j] = Σ g[d * f + j] (/ in-degree of d for the mean) over u's out-edges.
// Consecutive invocations read consecutive features of one row, so loads coalesce and
// each row's index loads are shared. No atomics: one invocation owns one output value.
//
// Splitting (src/device/wgpu/split.rs): a dispatch covers output rows row0 .. (values
// i < n); the offsets, the edge range of those rows and the output are bound as windows.
// The input read at arbitrary rows (x forward; g and the indptr it divides by backward) is
// bound as the window of its tile of rows t0 .. t1; only edges whose input row is in the
// tile are added, to what the previous tile left unless `first`, and the mean divides in
// the `last` tile. Every `*_base` is a window's first element; indices are global.
// Linear index over the 2-D grid: i = gid.x + gid.y * nwg.x * 256.

struct Params {
    n: u32,          // output values in this dispatch
    f: u32,          // features per row
    mean: u32,       // 1: divide by the dst in-degree
    row0: u32,       // first output row
    ptr_base: u32,   // indptr window
    tptr_base: u32,  // t_indptr window (backward)
    edge_base: u32,  // indices (forward) or t_dst (backward) window
    out_base: u32,   // out or grad_x window
    t0: u32,         // the tile of input rows
    t1: u32,
    in_base: u32,    // x or g window
    first: u32,
    last: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> indptr: array<u32>;
@group(0) @binding(2) var<storage, read> indices: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read> t_indptr: array<u32>;
@group(0) @binding(6) var<storage, read> t_dst: array<u32>;
@group(0) @binding(7) var<storage, read> g: array<f32>;
@group(0) @binding(8) var<storage, read_write> grad_x: array<f32>;

@compute @workgroup_size(256)
fn segment_sum_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.row0 * p.f + i;
    let d = gi / p.f;
    let j = gi - d * p.f;
    let start = indptr[d - p.ptr_base];
    let end = indptr[d + 1u - p.ptr_base];
    var acc = 0.0;
    if p.first == 0u {
        acc = out[gi - p.out_base];
    }
    for (var e = start; e < end; e++) {
        let u = indices[e - p.edge_base];
        if u >= p.t0 && u < p.t1 {
            acc += x[u * p.f + j - p.in_base];
        }
    }
    if p.last == 1u && p.mean == 1u && end > start {
        acc = acc / f32(end - start);
    }
    out[gi - p.out_base] = acc;
}

@compute @workgroup_size(256)
fn segment_sum_backward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.row0 * p.f + i;
    let u = gi / p.f;
    let j = gi - u * p.f;
    var acc = 0.0;
    if p.first == 0u {
        acc = grad_x[gi - p.out_base];
    }
    let end = t_indptr[u + 1u - p.tptr_base];
    for (var k = t_indptr[u - p.tptr_base]; k < end; k++) {
        let d = t_dst[k - p.edge_base];
        if d >= p.t0 && d < p.t1 {
            let gv = g[d * p.f + j - p.in_base];
            if p.mean == 1u {
                acc += gv / f32(indptr[d + 1u - p.ptr_base] - indptr[d - p.ptr_base]);
            } else {
                acc += gv;
            }
        }
    }
    grad_x[gi - p.out_base] = acc;
}
