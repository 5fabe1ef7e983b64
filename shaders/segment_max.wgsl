// Max aggregation over a block's CSR, with the argmax as an edge position (src/ops/segment_max.rs).
//
// segment_max_f32 (forward): 0 params, 1 indptr, 2 indices, 3 x (read), 4 out (write),
//   5 arg (write). One invocation per (dst row d, feature j), i = d * f + j, scanning the
//   in-edges of d in edge order: the first edge wins ties, a NaN wins and stays (so it
//   propagates); a row without in-edges gets 0 and arg 0xffffffff.
// segment_max_backward_f32: 0 params, 6 t_indptr, 7 t_dst, 8 t_edges, 9 arg_in (read),
//   10 g (read), 11 grad_x (write). One invocation per (src row u, feature j) over the
//   transposed CSR: grad_x[u * f + j] = Σ g[d * f + j] over the out-edges (d, e) of u whose
//   edge position e won, arg[d * f + j] == e (exact with duplicate edges and self-loops).
// Consecutive invocations handle consecutive features of one row (coalesced loads).
// Linear index over the 2-D grid: i = gid.x + gid.y * nwg.x * 256.

struct Params {
    n: u32,  // output values: rows * f
    f: u32,  // features per row
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> indptr: array<u32>;
@group(0) @binding(2) var<storage, read> indices: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> arg: array<u32>;
@group(0) @binding(6) var<storage, read> t_indptr: array<u32>;
@group(0) @binding(7) var<storage, read> t_dst: array<u32>;
@group(0) @binding(8) var<storage, read> t_edges: array<u32>;
@group(0) @binding(9) var<storage, read> arg_in: array<u32>;
@group(0) @binding(10) var<storage, read> g: array<f32>;
@group(0) @binding(11) var<storage, read_write> grad_x: array<f32>;

fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

// From the bits: WGSL lets a compiler assume floats are never NaN, bit tests stay exact.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

@compute @workgroup_size(256)
fn segment_max_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let d = i / p.f;
    let j = i - d * p.f;
    let start = indptr[d];
    let end = indptr[d + 1u];
    var m = 0.0;
    var a = 0xffffffffu;
    for (var e = start; e < end; e++) {
        let v = x[indices[e] * p.f + j];
        // The CPU rule `v > m || (v is NaN && m is not)`, with no comparison against a NaN.
        if e == start || (!is_nan(m) && (is_nan(v) || v > m)) {
            m = v;
            a = e;
        }
    }
    out[i] = m;
    arg[i] = a;
}

@compute @workgroup_size(256)
fn segment_max_backward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let u = i / p.f;
    let j = i - u * p.f;
    var acc = 0.0;
    let end = t_indptr[u + 1u];
    for (var k = t_indptr[u]; k < end; k++) {
        let o = t_dst[k] * p.f + j;
        if arg_in[o] == t_edges[k] {
            acc += g[o];
        }
    }
    grad_x[i] = acc;
}
