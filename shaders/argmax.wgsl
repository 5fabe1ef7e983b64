// Row-wise argmax (src/ops/argmax.rs).
//
// argmax_rows_f32: 0 params, 1 x (read), 2 out (read_write, u32 per row).
// One workgroup of 64 threads per row: row = wid.x + wid.y * nwg.x. Thread t scans columns
// t, t + 64, ... (starting from column min(t, c - 1), so every thread holds a real element),
// then a tree combines (value, column) pairs with the CPU's order: a NaN beats any number
// (the lowest NaN column wins), else the larger value, ties to the lower column. The order
// is total, so the result equals the CPU's first maximum whatever the reduction tree.

struct Params {
    r: u32,
    c: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

var<workgroup> best_v: array<f32, 64>;
var<workgroup> best_i: array<u32, 64>;

// A bit test: `v != v` may be folded away by drivers that assume no NaN.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

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
    let row = wid.x + wid.y * nwg.x;
    let c = p.c;
    let live = row < p.r;
    var bi = min(t, c - 1u);
    var bv = 0.0;
    if live {
        let base = row * c;
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
        out[row] = best_i[0];
    }
}
