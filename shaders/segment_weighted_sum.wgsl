// Attention-weighted sum over each dst node's in-edges, heads as a dimension
// (src/ops/segment_weighted_sum.rs). x is [num_src, H*D], a is [E, H], out is [num_dst, H*D].
//
// segment_weighted_sum_f32:            0 params (rows = num_dst), 1 indptr (read), 2 indices
//     (read), 3 x (read), 4 a (read), 5 out (write); one invocation per (dst d, column c).
// segment_weighted_sum_backward_x_f32: 0 params (rows = num_src), 6 t_indptr, 7 t_dst,
//     8 t_edges (read), 4 a (read), 9 g [num_dst, H*D] (read), 10 dx [num_src, H*D] (write);
//     one invocation per (src u, column c), summing over u's out-edges in CSR order.
// Both run a row group of `lanes` threads per output row (row_group in the prelude): its
// lanes walk the row's edges together in edge order, each over its own columns.
// The forward and backward_x loops are twins over different bindings (x/out against g/dx,
// indices against t_dst/t_edges) and the scalar/vec4 pairs twins over element types: naga 30
// rejects storage pointers as function parameters (WGSL's unrestricted_pointer_parameters,
// gfx-rs/wgpu#5158) and WGSL has no generics, so each loop is written per binding and type.
// segment_weighted_sum_vec4_f32, segment_weighted_sum_backward_x_vec4_f32: the same for
// D % 4 == 0 (four columns of one head at once), through 12 x4, 13 out4 (forward) and
// 14 g4, 15 dx4 (backward_x), the same buffers as vec4 arrays (every window base is then a
// multiple of 4); lanes cover H * D / 4 vec4 columns.
//
// Splitting (src/device/wgpu/split.rs): a dispatch covers output rows row0 .. row0 + rows;
// the offsets, the edge range of those rows (indices, a forward, da) and their output and
// gradient rows are bound as windows. A tensor read at arbitrary rows is bound as the window
// of its tile of rows: x (forward, backward_a) and g (backward_x) over rows t0 .. t1, and a
// (backward_x) over edge rows a0 .. a1; only edges whose rows are in the tiles count. Sums
// add to what the previous tiles left unless `first` (backward_x visits a src row's
// out-edges in increasing dst and edge order, so its sums keep their order); backward_a
// writes each edge's weight gradient in the tile of its src row. `*_base` are the windows'
// first elements; indices are global.
// backward_a: one invocation per (edge, head) of the dispatch's rows, linear over the 2-D grid
// (idx = gid.x + gid.y * nwg.x * 256), the edge's dst row found by bisection of the offsets:
// an invocation per (dst, head) looped over a hub's edges, 80,000 iterations for a
// 5,000-edge row of 16-wide heads: serial on any GPU, and past llvmpipe's limit of 65,535
// loop iterations an invocation (Mesa's LP_MAX_TGSI_LOOP_ITERATIONS), after which it
// leaves its loops and wrote wrong gradients.

struct Params {
    rows: u32,       // output rows in this dispatch
    cols: u32,       // H * D
    heads: u32,      // H
    per_head: u32,   // D
    row0: u32,       // first output row
    ptr_base: u32,   // indptr or t_indptr window
    edge_base: u32,  // indices, or t_dst and t_edges, window
    w_base: u32,     // forward: a window (the rows' edges); backward_a: g window (the rows)
    out_base: u32,   // out, dx or da window
    t0: u32,         // the tile of x rows (forward, backward_a) or g rows (backward_x)
    t1: u32,
    in_base: u32,    // x or g window
    a0: u32,         // backward_x: the tile of a's rows
    a1: u32,
    a_base: u32,     // backward_x: a window
    first: u32,
    lanes: u32,      // forward and backward_x: threads per output row, a power of two <= 64
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
@group(0) @binding(12) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(13) var<storage, read_write> out4: array<vec4<f32>>;
@group(0) @binding(14) var<storage, read> g4: array<vec4<f32>>;
@group(0) @binding(15) var<storage, read_write> dx4: array<vec4<f32>>;

// The edges first .. end of dst row d's in-edges (forward, backward_a) and of src row u's
// out-edges in the transposed CSR (backward_x).
fn in_edges(d: u32) -> vec2<u32> {
    return vec2<u32>(indptr[d - p.ptr_base], indptr[d + 1u - p.ptr_base]);
}

fn out_edges(u: u32) -> vec2<u32> {
    return vec2<u32>(t_indptr[u - p.ptr_base], t_indptr[u + 1u - p.ptr_base]);
}

// Whether backward_x counts an out-edge to dst d at edge position e: d in the tile of g's
// rows and e in the tile of a's rows.
fn backward_in_tiles(d: u32, e: u32) -> bool {
    return in_tile(d, p.t0, p.t1) && in_tile(e, p.a0, p.a1);
}

@compute @workgroup_size(64)
fn segment_weighted_sum_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = in_edges(rg.row);
    let o = row_start(rg.row, p.cols, p.out_base, 1u);
    for (var c = rg.lane; c < p.cols; c += p.lanes) {
        let h = c / p.per_head;
        var acc = 0.0;
        if p.first == 0u {
            acc = out[o + c];
        }
        for (var e = r.x; e < r.y; e++) {
            let u = indices[e - p.edge_base];
            if in_tile(u, p.t0, p.t1) {
                acc += a[e * p.heads + h - p.w_base] * x[row_start(u, p.cols, p.in_base, 1u) + c];
            }
        }
        out[o + c] = acc;
    }
}

@compute @workgroup_size(64)
fn segment_weighted_sum_backward_x_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = out_edges(rg.row);
    let o = row_start(rg.row, p.cols, p.out_base, 1u);
    for (var c = rg.lane; c < p.cols; c += p.lanes) {
        let h = c / p.per_head;
        var acc = 0.0;
        if p.first == 0u {
            acc = dx[o + c];
        }
        for (var k = r.x; k < r.y; k++) {
            let d = t_dst[k - p.edge_base];
            let e = t_edges[k - p.edge_base];
            if backward_in_tiles(d, e) {
                acc += a[e * p.heads + h - p.a_base] * g[row_start(d, p.cols, p.in_base, 1u) + c];
            }
        }
        dx[o + c] = acc;
    }
}

@compute @workgroup_size(64)
fn segment_weighted_sum_vec4_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = in_edges(rg.row);
    let o = row_start(rg.row, p.cols, p.out_base, 4u);
    for (var c = rg.lane; c < p.cols / 4u; c += p.lanes) {
        let h = c * 4u / p.per_head;
        var acc = vec4<f32>(0.0);
        if p.first == 0u {
            acc = out4[o + c];
        }
        for (var e = r.x; e < r.y; e++) {
            let u = indices[e - p.edge_base];
            if in_tile(u, p.t0, p.t1) {
                acc += a[e * p.heads + h - p.w_base] * x4[row_start(u, p.cols, p.in_base, 4u) + c];
            }
        }
        out4[o + c] = acc;
    }
}

@compute @workgroup_size(64)
fn segment_weighted_sum_backward_x_vec4_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = out_edges(rg.row);
    let o = row_start(rg.row, p.cols, p.out_base, 4u);
    for (var c = rg.lane; c < p.cols / 4u; c += p.lanes) {
        let h = c * 4u / p.per_head;
        var acc = vec4<f32>(0.0);
        if p.first == 0u {
            acc = dx4[o + c];
        }
        for (var k = r.x; k < r.y; k++) {
            let d = t_dst[k - p.edge_base];
            let e = t_edges[k - p.edge_base];
            if backward_in_tiles(d, e) {
                acc += a[e * p.heads + h - p.a_base] * g4[row_start(d, p.cols, p.in_base, 4u) + c];
            }
        }
        dx4[o + c] = acc;
    }
}

@compute @workgroup_size(256)
fn segment_weighted_sum_backward_a_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    let e0 = indptr[p.row0 - p.ptr_base];
    let e1 = indptr[p.row0 + p.rows - p.ptr_base];
    if idx >= (e1 - e0) * p.heads {
        return;
    }
    let e = e0 + idx / p.heads;
    let u = indices[e - p.edge_base];
    if !in_tile(u, p.t0, p.t1) {
        return;
    }
    let d = dst_of(e);
    let h = idx % p.heads;
    let base = h * p.per_head;
    var acc = 0.0;
    for (var j = 0u; j < p.per_head; j++) {
        acc += g[d * p.cols + base + j - p.w_base] * x[u * p.cols + base + j - p.in_base];
    }
    da[e * p.heads + h - p.out_base] = acc;
}

// The dst row of edge e among this dispatch's rows: the last d with indptr[d] <= e, by
// bisection over the offsets window (rows without edges share their next row's offset).
fn dst_of(e: u32) -> u32 {
    var lo = p.row0;
    var hi = p.row0 + p.rows;
    while hi - lo > 1u {
        let mid = lo + (hi - lo) / 2u;
        if indptr[mid - p.ptr_base] <= e {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}
