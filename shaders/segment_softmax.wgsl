// Softmax over each dst node's in-edges, per head (src/ops/segment_softmax.rs).
//
// segment_softmax_f32:          0 params, 1 indptr [num_dst + 1] u32 (read), 2 x [E, H] (read),
//                               3 y [E, H] (write).
// segment_softmax_backward_f32: 0 params, 1 indptr (read), 4 y (read), 5 g [E, H] (read),
//                               6 dx [E, H] (write): dx = y * (g - Σ_seg g * y).
// One invocation per (dst d, head h): d = d0 + idx / H, h = idx % H over the 2-D grid,
// idx = gid.x + gid.y * nwg.x * 256; it loops over the node's edges, so it owns its rows.
// A dispatch covers dst rows d0 .. d0 + num_dst: indptr is bound as the window of their
// offsets (first element ptr_base) and the [E, H] tensors as the windows of their edges
// (first element e_base; src/device/wgpu/split.rs).

struct Params {
    num_dst: u32,  // dst rows in this dispatch
    heads: u32,
    d0: u32,
    ptr_base: u32,
    e_base: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> indptr: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> y_in: array<f32>;
@group(0) @binding(5) var<storage, read> g: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx: array<f32>;

@compute @workgroup_size(256)
fn segment_softmax_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.num_dst * p.heads {
        return;
    }
    let d = p.d0 + idx / p.heads;
    let h = idx % p.heads;
    let start = indptr[d - p.ptr_base];
    let end = indptr[d + 1u - p.ptr_base];
    if start == end {
        return;
    }
    var m = x[start * p.heads + h - p.e_base];
    for (var e = start + 1u; e < end; e++) {
        m = max(m, x[e * p.heads + h - p.e_base]);
    }
    var sum = 0.0;
    for (var e = start; e < end; e++) {
        let v = exp(x[e * p.heads + h - p.e_base] - m);
        y[e * p.heads + h - p.e_base] = v;
        sum += v;
    }
    for (var e = start; e < end; e++) {
        y[e * p.heads + h - p.e_base] = y[e * p.heads + h - p.e_base] / sum;
    }
}

@compute @workgroup_size(256)
fn segment_softmax_backward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.num_dst * p.heads {
        return;
    }
    let d = p.d0 + idx / p.heads;
    let h = idx % p.heads;
    let start = indptr[d - p.ptr_base];
    let end = indptr[d + 1u - p.ptr_base];
    var dot = 0.0;
    for (var e = start; e < end; e++) {
        dot += g[e * p.heads + h - p.e_base] * y_in[e * p.heads + h - p.e_base];
    }
    for (var e = start; e < end; e++) {
        let i = e * p.heads + h - p.e_base;
        dx[i] = y_in[i] * (g[i] - dot);
    }
}
