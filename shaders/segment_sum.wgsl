// Sum and mean aggregation over a block's CSR (src/ops/segment_sum.rs).
//
// segment_sum_f32 (forward): 0 params, 1 indptr, 2 indices, 3 x (read), 4 out (write).
//   One invocation per (dst row d, feature j), i = d * f + j: out[i] = Σ x[indices[e] * f + j]
//   over the in-edges e of d in edge order (divided by the in-degree for the mean; 0 for none).
// segment_sum_backward_f32: 0 params, 1 indptr, 5 t_indptr, 6 t_dst, 7 g (read),
//   8 grad_x (write). One invocation per (src row u, feature j) over the transposed CSR:
//   grad_x[u * f + j] = Σ g[d * f + j] (/ in-degree of d for the mean) over u's out-edges.
// Consecutive invocations read consecutive features of one row, so loads coalesce and
// each row's index loads are shared. No atomics: one invocation owns one output value.
// Linear index over the 2-D grid: i = gid.x + gid.y * nwg.x * 256.

struct Params {
    n: u32,     // output values: rows * f
    f: u32,     // features per row
    mean: u32,  // 1: divide by the dst in-degree
    _pad: u32,
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

fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn segment_sum_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let d = i / p.f;
    let j = i - d * p.f;
    let start = indptr[d];
    let end = indptr[d + 1u];
    var acc = 0.0;
    for (var e = start; e < end; e++) {
        acc += x[indices[e] * p.f + j];
    }
    if p.mean == 1u && end > start {
        acc = acc / f32(end - start);
    }
    out[i] = acc;
}

@compute @workgroup_size(256)
fn segment_sum_backward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let u = i / p.f;
    let j = i - u * p.f;
    var acc = 0.0;
    let end = t_indptr[u + 1u];
    for (var k = t_indptr[u]; k < end; k++) {
        let d = t_dst[k];
        let gv = g[d * p.f + j];
        if p.mean == 1u {
            acc += gv / f32(indptr[d + 1u] - indptr[d]);
        } else {
            acc += gv;
        }
    }
    grad_x[i] = acc;
}
