// Row-wise argmax (src/ops/argmax.rs).
//
// argmax_rows_f32: 0 params, 1 x (read), 2 out (read_write, u32 per row).
// One workgroup of 64 threads per row: row = r0 + wid.x + wid.y * nwg.x. A dispatch covers
// rows r0 .. r0 + r; x and out are bound as the windows of those rows, whose first elements
// are x_base and out_base (src/device/wgpu/split.rs). Thread t scans columns
// t, t + 64, ... (starting from column min(t, c - 1), so every thread holds a real element),
// then a tree combines (value, column) pairs with the CPU's order: a NaN beats any number
// (the lowest NaN column wins), else the larger value, ties to the lower column. The order
// is total, so the result equals the CPU's first maximum whatever the reduction tree.

struct Params {
    r: u32,  // rows in this dispatch
    c: u32,
    r0: u32,
    x_base: u32,
    out_base: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

var<workgroup> best_v: array<f32, 64>;
var<workgroup> best_i: array<u32, 64>;

// True when (v, i) comes before (bv, bi).
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    let vn = is_nan(v);
    let bn = is_nan(bv);
    if vn != bn {
        return vn;
    }
    if !vn && v != bv {
        return v > bv;
    }
    return i < bi;
}

@compute @workgroup_size(64)
fn argmax_rows_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = p.r0 + wid.x + wid.y * nwg.x;
    let c = p.c;
    let live = row - p.r0 < p.r;
    var bi = min(t, c - 1u);
    var bv = 0.0;
    if live {
        let base = row * c - p.x_base;
        bv = x[base + bi];
        for (var j = t + 64u; j < c; j += 64u) {
            let v = x[base + j];
            if better(v, j, bv, bi) {
                bv = v;
                bi = j;
            }
        }
    }
    best_v[t] = bv;
    best_i[t] = bi;
    workgroupBarrier();
    for (var half = 32u; half > 0u; half >>= 1u) {
        if t < half && better(best_v[t + half], best_i[t + half], best_v[t], best_i[t]) {
            best_v[t] = best_v[t + half];
            best_i[t] = best_i[t + half];
        }
        workgroupBarrier();
    }
    if t == 0u && live {
        out[row - p.out_base] = best_i[0];
    }
}
