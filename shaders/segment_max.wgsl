// Max aggregation over a block's CSR, with the argmax as an edge position (src/ops/segment_max.rs).
//
// segment_max_f32 (forward): 0 params, 1 indptr, 2 indices, 3 x (read), 4 out (write),
//   5 arg (write). out[d * f + j] is the max of x[indices[e] * f + j] over the in-edges e
//   of d, scanned in edge order: the first edge wins ties, a NaN wins and stays (so it
//   propagates); a row without in-edges gets 0 and arg 0xffffffff.
// segment_max_vec4_f32: the forward for f % 4 == 0, four features at once through 12 x4,
//   13 out4, 14 arg4 (the same buffers as vec4 arrays; every window base is then a
//   multiple of 4).
// segment_max_backward_f32: 0 params, 6 t_indptr, 7 t_dst, 8 t_edges, 9 arg_in (read),
//   10 g (read), 11 grad_x (write). Over the transposed CSR: grad_x[u * f + j] =
//   Σ g[d * f + j] over the out-edges (d, e) of u whose edge position e won,
//   arg[d * f + j] == e (exact with duplicate edges and self-loops).
// segment_max_backward_vec4_f32: the backward for f % 4 == 0, four features at once through
//   15 arg_in4, 16 g4, 17 grad_x4 (the same buffers as vec4 arrays); a gradient that did not
//   win adds nothing (not a 0.0, so the sums equal the scalar kernel's bit for bit).
// A row group of `lanes` threads owns an output row (row_group in the prelude): its lanes
// walk the row's edges together, each scanning its own features. One invocation owns each
// output value, in edge order: no atomics, and the result does not depend on `lanes`.
//
// Splitting (src/device/wgpu/split.rs): a dispatch covers output rows row0 .. row0 + rows;
// the offsets, the edge range of those rows and the outputs are bound as windows.
// The input read at arbitrary rows (x forward; g and arg_in backward) is bound as the window
// of its tile of rows t0 .. t1, and only edges whose input row is in the tile count. Forward
// continues from the max and argmax the previous tile left unless `first`; a candidate
// replaces the running one by the CPU's order (a NaN first, then the larger value, then the
// lower edge position), which is a total order, so tiles give the first max in edge order
// as one pass does. Backward adds to the previous tile's sum, in the same order as one pass
// (a src row's out-edges list increasing dst rows). `*_base` are the windows' first elements.

struct Params {
    rows: u32,       // output rows in this dispatch
    f: u32,          // features per row
    row0: u32,       // first output row
    ptr_base: u32,   // indptr or t_indptr window
    edge_base: u32,  // indices, or t_dst and t_edges, window
    out_base: u32,   // out and arg, or grad_x, window
    t0: u32,         // the tile of input rows
    t1: u32,
    in_base: u32,    // x, or g and arg_in, window
    first: u32,
    lanes: u32,      // threads per output row: a power of two <= 64
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
@group(0) @binding(12) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(13) var<storage, read_write> out4: array<vec4<f32>>;
@group(0) @binding(14) var<storage, read_write> arg4: array<vec4<u32>>;
@group(0) @binding(15) var<storage, read> arg_in4: array<vec4<u32>>;
@group(0) @binding(16) var<storage, read> g4: array<vec4<f32>>;
@group(0) @binding(17) var<storage, read_write> grad_x4: array<vec4<f32>>;

// The edges first .. end of dst row d's in-edges (forward) and of src row u's out-edges
// in the transposed CSR (backward).
fn in_edges(d: u32) -> vec2<u32> {
    return vec2<u32>(indptr[d - p.ptr_base], indptr[d + 1u - p.ptr_base]);
}

fn out_edges(u: u32) -> vec2<u32> {
    return vec2<u32>(t_indptr[u - p.ptr_base], t_indptr[u + 1u - p.ptr_base]);
}

// True when candidate (v, edge e) comes before the running (m, edge a) in the CPU's order.
fn beats(v: f32, e: u32, m: f32, a: u32) -> bool {
    if is_nan(v) {
        return !is_nan(m) || e < a;
    }
    return !is_nan(m) && (v > m || (v == m && e < a));
}

@compute @workgroup_size(64)
fn segment_max_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = in_edges(rg.row);
    let o = row_start(rg.row, p.f, p.out_base, 1u);
    for (var j = rg.lane; j < p.f; j += p.lanes) {
        var m = 0.0;
        var a = 0xffffffffu;
        if p.first == 0u {
            m = out[o + j];
            a = arg[o + j];
        }
        for (var e = r.x; e < r.y; e++) {
            let u = indices[e - p.edge_base];
            if in_tile(u, p.t0, p.t1) {
                let v = x[row_start(u, p.f, p.in_base, 1u) + j];
                if a == 0xffffffffu || beats(v, e, m, a) {
                    m = v;
                    a = e;
                }
            }
        }
        out[o + j] = m;
        arg[o + j] = a;
    }
}

// beats for four features at once; a running argmax of 0xffffffff (none yet) loses to any.
fn beats4(v: vec4<f32>, e: u32, m: vec4<f32>, a: vec4<u32>) -> vec4<bool> {
    let ev = vec4<u32>(e);
    let mask = vec4<u32>(0x7fffffffu);
    let inf = vec4<u32>(0x7f800000u);
    let vn = (bitcast<vec4<u32>>(v) & mask) > inf;
    let mn = (bitcast<vec4<u32>>(m) & mask) > inf;
    let plain = !mn & ((v > m) | ((v == m) & (ev < a)));
    let nan = !mn | (ev < a);
    return (a == vec4<u32>(0xffffffffu)) | select(plain, nan, vn);
}

@compute @workgroup_size(64)
fn segment_max_vec4_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = in_edges(rg.row);
    let o = row_start(rg.row, p.f, p.out_base, 4u);
    for (var j = rg.lane; j < p.f / 4u; j += p.lanes) {
        var m = vec4<f32>(0.0);
        var a = vec4<u32>(0xffffffffu);
        if p.first == 0u {
            m = out4[o + j];
            a = arg4[o + j];
        }
        for (var e = r.x; e < r.y; e++) {
            let u = indices[e - p.edge_base];
            if in_tile(u, p.t0, p.t1) {
                let v = x4[row_start(u, p.f, p.in_base, 4u) + j];
                let take = beats4(v, e, m, a);
                m = select(m, v, take);
                a = select(a, vec4<u32>(e), take);
            }
        }
        out4[o + j] = m;
        arg4[o + j] = a;
    }
}

@compute @workgroup_size(64)
fn segment_max_backward_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = out_edges(rg.row);
    let o = row_start(rg.row, p.f, p.out_base, 1u);
    for (var j = rg.lane; j < p.f; j += p.lanes) {
        var acc = 0.0;
        if p.first == 0u {
            acc = grad_x[o + j];
        }
        for (var k = r.x; k < r.y; k++) {
            let d = t_dst[k - p.edge_base];
            if in_tile(d, p.t0, p.t1) {
                let i = row_start(d, p.f, p.in_base, 1u) + j;
                if arg_in[i] == t_edges[k - p.edge_base] {
                    acc += g[i];
                }
            }
        }
        grad_x[o + j] = acc;
    }
}

@compute @workgroup_size(64)
fn segment_max_backward_vec4_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = out_edges(rg.row);
    let o = row_start(rg.row, p.f, p.out_base, 4u);
    for (var j = rg.lane; j < p.f / 4u; j += p.lanes) {
        var acc = vec4<f32>(0.0);
        if p.first == 0u {
            acc = grad_x4[o + j];
        }
        for (var k = r.x; k < r.y; k++) {
            let d = t_dst[k - p.edge_base];
            if in_tile(d, p.t0, p.t1) {
                let i = row_start(d, p.f, p.in_base, 4u) + j;
                let won = arg_in4[i] == vec4<u32>(t_edges[k - p.edge_base]);
                // Adding -0.0 leaves every sum (never -0.0 itself) as it was.
                acc += select(vec4<f32>(-0.0), g4[i], won);
            }
        }
        grad_x4[o + j] = acc;
    }
}
