// Row-wise log-softmax and its backward (src/ops/log_softmax.rs).
//
// log_softmax_f32:          0 params, 1 x (read), 2 out (read_write).
//                           m = row max (a NaN wins), l = ln Σ exp(x - m) (0 when m is
//                           ±inf or NaN), out = (x - m) - l.
// log_softmax_backward_f32: 0 params, 3 g (read), 4 y (read), 5 gx (read_write);
//                           gx = g - exp(y) · Σ_row g.
// One workgroup of 64 threads per row: row = r0 + wid.x + wid.y * nwg.x; thread t visits
// columns t, t + 64, ... in order, then a tree over the workgroup (fixed order:
// deterministic). A dispatch covers rows r0 .. r0 + r; every buffer is bound as the window of
// those rows (src/device/wgpu/split.rs), whose first element is `base`.

struct Params {
    r: u32,     // rows in this dispatch
    c: u32,
    r0: u32,    // first row
    base: u32,  // first element of the windows
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> gx: array<f32>;

@compute @workgroup_size(64)
fn log_softmax_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let local = wid.x + wid.y * nwg.x;
    let c = p.c;
    let live = local < p.r;
    let base = (p.r0 + local) * c - p.base;
    // Start from a real element of the row, so no identity value is needed.
    var m = 0.0;
    if live {
        m = x[base + min(t, c - 1u)];
        for (var j = t + 64u; j < c; j += 64u) {
            m = nan_max(m, x[base + j]);
        }
    }
    let mx = wg_max64(t, m);
    var s = 0.0;
    if live {
        for (var j = t; j < c; j += 64u) {
            s += exp(x[base + j] - mx);
        }
    }
    let total = wg_sum64(t, s);
    var l = 0.0;
    if finite(mx) {
        l = log(total);
    }
    if live {
        for (var j = t; j < c; j += 64u) {
            out[base + j] = (x[base + j] - mx) - l;
        }
    }
}

@compute @workgroup_size(64)
fn log_softmax_backward_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let local = wid.x + wid.y * nwg.x;
    let c = p.c;
    let live = local < p.r;
    let base = (p.r0 + local) * c - p.base;
    var s = 0.0;
    if live {
        for (var j = t; j < c; j += 64u) {
            s += g[base + j];
        }
    }
    let total = wg_sum64(t, s);
    if live {
        for (var j = t; j < c; j += 64u) {
            gx[base + j] = g[base + j] - exp(y[base + j]) * total;
        }
    }
}
