// Sum and mean aggregation over a block's CSR (src/ops/segment_sum.rs).
//
// segment_sum_f32 (forward): 0 params, 1 indptr, 2 indices, 3 x (read), 4 out (write).
//   out[d * f + j] = Σ x[indices[e] * f + j] over the in-edges e of dst row d in edge order
//   (divided by the in-degree for the mean; 0 for none).
// segment_sum_backward_f32: 0 params, 1 indptr, 5 t_indptr, 6 t_dst, 7 g (read),
//   8 grad_x (write). Over the transposed CSR: grad_x[u * f + j] = Σ g[d * f + j]
//   (/ in-degree of d for the mean) over the out-edges of src row u.
// segment_sum_vec4_f32 and segment_sum_backward_vec4_f32: the same for f % 4 == 0, reading
// and writing four features at once through 9 x4, 10 out4, 11 g4, 12 grad_x4 (the same
// buffers as vec4 arrays; every window base is then a multiple of 4).
//
// A row group of `lanes` threads owns an output row (see row_group in the prelude): its
// lanes walk the row's edges together, each summing its own features. One invocation owns
// each output value and adds in edge order, as the CPU does: no atomics, and the result
// does not depend on `lanes`.
//
// Splitting (src/device/wgpu/split.rs): a dispatch covers output rows row0 .. row0 + rows;
// the offsets, the edge range of those rows and the output are bound as windows. The input
// read at arbitrary rows (x forward; g and the indptr it divides by backward) is bound as
// the window of its tile of rows t0 .. t1; only edges whose input row is in the tile are
// added, to what the previous tile left unless `first`, and the mean divides in the `last`
// tile. Every `*_base` is a window's first element (in f32 words); indices are global.

struct Params {
    rows: u32,       // output rows in this dispatch
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
    lanes: u32,      // threads per output row: a power of two <= 64
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
@group(0) @binding(9) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(10) var<storage, read_write> out4: array<vec4<f32>>;
@group(0) @binding(11) var<storage, read> g4: array<vec4<f32>>;
@group(0) @binding(12) var<storage, read_write> grad_x4: array<vec4<f32>>;

// The row's first edge and edge count: dst rows' in-edges forward (indptr), src rows'
// out-edges backward (t_indptr).
fn forward_row(d: u32) -> vec2<u32> {
    let s = indptr[d - p.ptr_base];
    return vec2<u32>(s, indptr[d + 1u - p.ptr_base] - s);
}

fn backward_row(u: u32) -> vec2<u32> {
    let s = t_indptr[u - p.tptr_base];
    return vec2<u32>(s, t_indptr[u + 1u - p.tptr_base] - s);
}

// Whether the forward ends with the mean's division: the last tile of a row with edges.
fn divides(deg: u32) -> bool {
    return p.last == 1u && p.mean == 1u && deg > 0u;
}

// The in-degree of dst row d (in the tile: its offsets are bound), the mean's divisor.
fn in_degree(d: u32) -> f32 {
    return f32(indptr[d + 1u - p.ptr_base] - indptr[d - p.ptr_base]);
}

@compute @workgroup_size(64)
fn segment_sum_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = forward_row(rg.row);
    let o = row_start(rg.row, p.f, p.out_base, 1u);
    for (var j = rg.lane; j < p.f; j += p.lanes) {
        var acc = 0.0;
        if p.first == 0u {
            acc = out[o + j];
        }
        for (var e = r.x; e < r.x + r.y; e++) {
            let u = indices[e - p.edge_base];
            if in_tile(u, p.t0, p.t1) {
                acc += x[row_start(u, p.f, p.in_base, 1u) + j];
            }
        }
        if divides(r.y) {
            acc = acc / f32(r.y);
        }
        out[o + j] = acc;
    }
}

@compute @workgroup_size(64)
fn segment_sum_vec4_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = forward_row(rg.row);
    let o = row_start(rg.row, p.f, p.out_base, 4u);
    for (var j = rg.lane; j < p.f / 4u; j += p.lanes) {
        var acc = vec4<f32>(0.0);
        if p.first == 0u {
            acc = out4[o + j];
        }
        for (var e = r.x; e < r.x + r.y; e++) {
            let u = indices[e - p.edge_base];
            if in_tile(u, p.t0, p.t1) {
                acc += x4[row_start(u, p.f, p.in_base, 4u) + j];
            }
        }
        if divides(r.y) {
            acc = acc / f32(r.y);
        }
        out4[o + j] = acc;
    }
}

@compute @workgroup_size(64)
fn segment_sum_backward_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = backward_row(rg.row);
    let o = row_start(rg.row, p.f, p.out_base, 1u);
    for (var j = rg.lane; j < p.f; j += p.lanes) {
        var acc = 0.0;
        if p.first == 0u {
            acc = grad_x[o + j];
        }
        for (var k = r.x; k < r.x + r.y; k++) {
            let d = t_dst[k - p.edge_base];
            if in_tile(d, p.t0, p.t1) {
                var v = g[row_start(d, p.f, p.in_base, 1u) + j];
                if p.mean == 1u {
                    v = v / in_degree(d);
                }
                acc += v;
            }
        }
        grad_x[o + j] = acc;
    }
}

@compute @workgroup_size(64)
fn segment_sum_backward_vec4_f32(ids: RowIds) {
    let rg = row_group(ids, p.lanes, p.rows, p.row0);
    if !rg.live {
        return;
    }
    let r = backward_row(rg.row);
    let o = row_start(rg.row, p.f, p.out_base, 4u);
    for (var j = rg.lane; j < p.f / 4u; j += p.lanes) {
        var acc = vec4<f32>(0.0);
        if p.first == 0u {
            acc = grad_x4[o + j];
        }
        for (var k = r.x; k < r.x + r.y; k++) {
            let d = t_dst[k - p.edge_base];
            if in_tile(d, p.t0, p.t1) {
                var v = g4[row_start(d, p.f, p.in_base, 4u) + j];
                if p.mean == 1u {
                    v = v / in_degree(d);
                }
                acc += v;
            }
        }
        grad_x4[o + j] = acc;
    }
}
