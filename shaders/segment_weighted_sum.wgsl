// Attention-weighted sum over each dst node's in-edges, heads as a dimension
// (src/ops/segment_weighted_sum.rs). x is [num_src, H*D], a is [E, H], out is [num_dst, H*D].
//
// segment_weighted_sum_f32:            0 params (rows = num_dst), 1 indptr (read), 2 indices
//     (read), 3 x (read), 4 a (read), 5 out (write); one invocation per (dst d, column c).
// segment_weighted_sum_backward_x_f32: 0 params (rows = num_src), 6 t_indptr, 7 t_dst,
//     8 t_edges (read), 4 a (read), 9 g [num_dst, H*D] (read), 10 dx [num_src, H*D] (write);
//     one invocation per (src u, column c), summing over u's out-edges in CSR order.
// segment_weighted_sum_backward_a_f32: 0 params (rows = num_dst), 1 indptr, 2 indices, 3 x,
//     9 g (read), 11 da [E, H] (write); one invocation per (dst d, head h) over d's edges.
// Linear index over the 2-D grid: idx = gid.x + gid.y * nwg.x * 256.

struct Params {
    rows: u32,
    cols: u32,      // H * D
    heads: u32,     // H
    per_head: u32,  // D
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> indptr: array<u32>;
@group(0) @binding(2) var<storage, read> indices: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read> a: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read> t_indptr: array<u32>;
@group(0) @binding(7) var<storage, read> t_dst: array<u32>;
@group(0) @binding(8) var<storage, read> t_edges: array<u32>;
@group(0) @binding(9) var<storage, read> g: array<f32>;
@group(0) @binding(10) var<storage, read_write> dx: array<f32>;
@group(0) @binding(11) var<storage, read_write> da: array<f32>;

fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn segment_weighted_sum_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.rows * p.cols {
        return;
    }
    let d = idx / p.cols;
    let c = idx % p.cols;
    let h = c / p.per_head;
    var acc = 0.0;
    for (var e = indptr[d]; e < indptr[d + 1u]; e++) {
        acc += a[e * p.heads + h] * x[indices[e] * p.cols + c];
    }
    out[idx] = acc;
}

@compute @workgroup_size(256)
fn segment_weighted_sum_backward_x_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.rows * p.cols {
        return;
    }
    let u = idx / p.cols;
    let c = idx % p.cols;
    let h = c / p.per_head;
    var acc = 0.0;
    for (var k = t_indptr[u]; k < t_indptr[u + 1u]; k++) {
        acc += a[t_edges[k] * p.heads + h] * g[t_dst[k] * p.cols + c];
    }
    dx[idx] = acc;
}

@compute @workgroup_size(256)
fn segment_weighted_sum_backward_a_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.rows * p.heads {
        return;
    }
    let d = idx / p.heads;
    let h = idx % p.heads;
    let base = h * p.per_head;
    for (var e = indptr[d]; e < indptr[d + 1u]; e++) {
        let u = indices[e];
        var acc = 0.0;
        for (var j = 0u; j < p.per_head; j++) {
            acc += g[d * p.cols + base + j] * x[u * p.cols + base + j];
        }
        da[e * p.heads + h] = acc;
    }
}
