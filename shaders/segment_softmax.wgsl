// Softmax over each dst node's in-edges, per head (src/ops/segment_softmax.rs).
//
// segment_softmax_f32:          0 params, 1 indptr [num_dst + 1] u32 (read), 2 x [E, H] (read),
//                               3 y [E, H] (write).
// segment_softmax_backward_f32: 0 params, 1 indptr (read), 4 y (read), 5 g [E, H] (read),
//                               6 dx [E, H] (write): dx = y * (g - Σ_seg g * y).
// One invocation per (dst d, head h): d = d0 + idx / H, h = idx % H over the 2-D grid,
// idx = gid.x + gid.y * nwg.x * 256; it loops over the node's edges, so it owns its rows.
// It skips the long rows (in-degree >= long_deg), which the *_long_* entries own.
//
// segment_softmax_long_f32, segment_softmax_long_backward_f32: the same bindings and 7
// long_rows (read), the dst rows (global ids) of this dispatch whose in-degree is at least
// long_deg; one 64-thread workgroup per (long row, head), workgroup w = wid.x + wid.y *
// nwg.x taking row long_rows[w / H] and head w % H. Its threads stride over the row's edges
// and combine their max and sums with the prelude's wg_max64 / wg_sum64 (subgroup
// operations where the adapter has them, a shared-memory tree otherwise: CUDA's
// warp-per-row). The max is NaN-propagating; a NaN or an infinity makes the row's sum NaN,
// as on the CPU. Sums are a tree, not the CPU's serial order.
//
// A dispatch covers dst rows d0 .. d0 + num_dst: indptr is bound as the window of their
// offsets (first element ptr_base) and the [E, H] tensors as the windows of their edges
// (first element e_base; src/device/wgpu/split.rs).

struct Params {
    num_dst: u32,  // dst rows in this dispatch
    heads: u32,
    d0: u32,
    ptr_base: u32,
    e_base: u32,
    long_deg: u32, // rows of at least this in-degree are long
    num_long: u32, // long rows listed in long_rows (the long entries)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> indptr: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> y_in: array<f32>;
@group(0) @binding(5) var<storage, read> g: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx: array<f32>;
@group(0) @binding(7) var<storage, read> long_rows: array<u32>;

// The edges first .. end of dst row d.
fn in_edges(d: u32) -> vec2<u32> {
    return vec2<u32>(indptr[d - p.ptr_base], indptr[d + 1u - p.ptr_base]);
}

// Value (e, h) of an [E, H] window.
fn at(e: u32, h: u32) -> u32 {
    return e * p.heads + h - p.e_base;
}

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
    if start == end || end - start >= p.long_deg {
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
    if end - start >= p.long_deg {
        return;
    }
    var dot = 0.0;
    for (var e = start; e < end; e++) {
        dot += g[e * p.heads + h - p.e_base] * y_in[e * p.heads + h - p.e_base];
    }
    for (var e = start; e < end; e++) {
        let i = e * p.heads + h - p.e_base;
        dx[i] = y_in[i] * (g[i] - dot);
    }
}

// The long row's edges and head (first, end, h) of a workgroup, the same for every
// thread: loaded as workgroup-uniform values, so that the reductions' barriers stay in
// uniform control flow. An idle workgroup (w >= num_long * H) gets no edges.
var<workgroup> long_row: vec3<u32>;

fn long_row_of(ids: RowIds) -> vec3<u32> {
    if ids.t == 0u {
        let w = ids.wid.x + ids.wid.y * ids.nwg.x;
        var r = vec3<u32>(0u, 0u, 0u);
        if w < p.num_long * p.heads {
            r = vec3<u32>(in_edges(long_rows[w / p.heads]), w % p.heads);
        }
        long_row = r;
    }
    return workgroupUniformLoad(&long_row);
}

@compute @workgroup_size(64)
fn segment_softmax_long_f32(ids: RowIds) {
    let r = long_row_of(ids);
    let h = r.z;
    var m = bitcast<f32>(0xff800000u);
    for (var e = r.x + ids.t; e < r.y; e += 64u) {
        m = nan_max(m, x[at(e, h)]);
    }
    m = wg_max64(ids.t, m);
    var s = 0.0;
    for (var e = r.x + ids.t; e < r.y; e += 64u) {
        s += exp(x[at(e, h)] - m);
    }
    s = wg_sum64(ids.t, s);
    for (var e = r.x + ids.t; e < r.y; e += 64u) {
        y[at(e, h)] = exp(x[at(e, h)] - m) / s;
    }
}

@compute @workgroup_size(64)
fn segment_softmax_long_backward_f32(ids: RowIds) {
    let r = long_row_of(ids);
    let h = r.z;
    var dot = 0.0;
    for (var e = r.x + ids.t; e < r.y; e += 64u) {
        dot += g[at(e, h)] * y_in[at(e, h)];
    }
    dot = wg_sum64(ids.t, dot);
    for (var e = r.x + ids.t; e < r.y; e += 64u) {
        let i = at(e, h);
        dx[i] = y_in[i] * (g[i] - dot);
    }
}
