// Fused, stable softmax cross-entropy (src/ops/cross_entropy.rs).
//
// Every dispatch covers rows r0 .. r0 + r (src/device/wgpu/split.rs): x and gx are bound as
// the windows of those rows, whose first element is x_base; the per-row vectors (labels,
// lse, row losses, weights, gw) as theirs, whose first element is v_base.
//
// ce_rows_f32:          0 params, 1 x (read), 2 labels (read, u32), 3 lse (read_write),
//                       4 row_loss (read_write). One workgroup of 64 threads per row
//                       (row = r0 + wid.x + wid.y * nwg.x): m = row max (a NaN wins),
//                       l = ln Σ exp(x - m) (0 when m is ±inf or NaN); lse = m + l,
//                       row_loss = l - (x[y] - m), y clamped into the row (ce_mean flags it).
// ce_mean_f32,
// ce_mean_weighted_f32: 0 params, 2 labels, 5 rows (read, the row losses), 6 w (read,
//                       weighted only), 7 loss (read_write, 1 value), 8 status (read_write,
//                       1 u32), 13 scratch (read_write, 512 u32). One workgroup of 256:
//                       thread t adds rows t, t + 256, ... in order, then a tree;
//                       loss = Σ wᵢ·row_lossᵢ / n. status = the first row whose label is
//                       >= c, or 0xffffffff. Rows come in dispatches whose r0 is a multiple
//                       of 256, so each thread keeps its rows and their order: between
//                       dispatches its partial sum and first bad row wait in scratch (read
//                       unless `first`), and only the `last` dispatch runs the tree.
// ce_backward_f32,
// ce_backward_weighted_f32: 0 params, 1 x, 2 labels, 9 lse_in (read), 10 gl (read, the
//                       loss gradient, 1 value), 6 w (weighted only), 11 gx (read_write).
//                       One invocation per logit (1-D, i = gid.x + gid.y * nwg.x * 256):
//                       s = gl · wᵢ / n, gx = s·exp(x - lse) - (s if j == y).
// ce_weight_grad_f32:   0 params, 1 x, 2 labels, 9 lse_in, 10 gl, 12 gw (read_write); one
//                       invocation per row: gw = gl / n · (lse - x[y]).

struct Params {
    r: u32,       // rows in this dispatch
    c: u32,       // classes
    inv_n: u32,   // 1/n as f32 bits
    r0: u32,      // first row
    x_base: u32,  // first element of the x (gx) windows
    v_base: u32,  // first element of the per-row windows
    first: u32,   // ce_mean: 1 in the first dispatch
    last: u32,    // ce_mean: 1 in the last dispatch
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> labels: array<u32>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;
@group(0) @binding(4) var<storage, read_write> row_loss: array<f32>;
@group(0) @binding(5) var<storage, read> rows: array<f32>;
@group(0) @binding(6) var<storage, read> w: array<f32>;
@group(0) @binding(7) var<storage, read_write> loss: array<f32>;
@group(0) @binding(8) var<storage, read_write> status: array<u32>;
@group(0) @binding(9) var<storage, read> lse_in: array<f32>;
@group(0) @binding(10) var<storage, read> gl: array<f32>;
@group(0) @binding(11) var<storage, read_write> gx: array<f32>;
@group(0) @binding(12) var<storage, read_write> gw: array<f32>;
@group(0) @binding(13) var<storage, read_write> scratch: array<u32>;

var<workgroup> part: array<f32, 256>;
var<workgroup> bad: array<u32, 256>;

// The label of global row `row`, clamped into the row.
fn label_col(row: u32) -> u32 {
    return min(labels[row - p.v_base], p.c - 1u);
}

@compute @workgroup_size(64)
fn ce_rows_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = p.r0 + wid.x + wid.y * nwg.x;
    let c = p.c;
    let live = row - p.r0 < p.r;
    let base = row * c - p.x_base;
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
    if t == 0u && live {
        var l = 0.0;
        if finite(mx) {
            l = log(total);
        }
        lse[row - p.v_base] = mx + l;
        row_loss[row - p.v_base] = l - (x[base + label_col(row)] - mx);
    }
}

// Thread t's partial sum so far: 0 in the first dispatch, else what the last one left.
fn start_acc(t: u32) -> f32 {
    if p.first == 1u {
        return 0.0;
    }
    return bitcast<f32>(scratch[t]);
}

// The first bad row among thread t's rows (so far, then in this dispatch), or 0xffffffff.
fn first_bad(t: u32) -> u32 {
    if p.first == 0u && scratch[256u + t] != 0xffffffffu {
        return scratch[256u + t];
    }
    for (var i = t; i < p.r; i += 256u) {
        if labels[p.r0 + i - p.v_base] >= p.c {
            return p.r0 + i;
        }
    }
    return 0xffffffffu;
}

// Before the last dispatch: keep the thread's results in scratch. In the last: a tree over
// the workgroup's partial sums and first bad rows; thread 0 writes the results. Kept free
// of `w`, so that the unweighted entry does not bind it.
fn finish_mean(t: u32, acc: f32, first: u32) {
    if p.last == 0u {
        scratch[t] = bitcast<u32>(acc);
        scratch[256u + t] = first;
        return;
    }
    part[t] = acc;
    bad[t] = first;
    workgroupBarrier();
    for (var half = 128u; half > 0u; half >>= 1u) {
        if t < half {
            part[t] += part[t + half];
            bad[t] = min(bad[t], bad[t + half]);
        }
        workgroupBarrier();
    }
    if t == 0u {
        loss[0] = part[0] * bitcast<f32>(p.inv_n);
        status[0] = bad[0];
    }
}

@compute @workgroup_size(256)
fn ce_mean_f32(@builtin(local_invocation_index) t: u32) {
    var acc = start_acc(t);
    for (var i = t; i < p.r; i += 256u) {
        acc += rows[p.r0 + i - p.v_base];
    }
    finish_mean(t, acc, first_bad(t));
}

@compute @workgroup_size(256)
fn ce_mean_weighted_f32(@builtin(local_invocation_index) t: u32) {
    var acc = start_acc(t);
    for (var i = t; i < p.r; i += 256u) {
        let v = p.r0 + i - p.v_base;
        acc += w[v] * rows[v];
    }
    finish_mean(t, acc, first_bad(t));
}

fn backward_at(i: u32, scale: f32) {
    let row = p.r0 + i / p.c;
    let j = i % p.c;
    let s = gl[0] * bitcast<f32>(p.inv_n) * scale;
    let xi = p.r0 * p.c + i - p.x_base;
    var v = s * exp(x[xi] - lse_in[row - p.v_base]);
    if j == labels[row - p.v_base] {
        v -= s;
    }
    gx[xi] = v;
}

@compute @workgroup_size(256)
fn ce_backward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.r * p.c {
        return;
    }
    backward_at(i, 1.0);
}

@compute @workgroup_size(256)
fn ce_backward_weighted_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.r * p.c {
        return;
    }
    backward_at(i, w[p.r0 + i / p.c - p.v_base]);
}

@compute @workgroup_size(256)
fn ce_weight_grad_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.r {
        return;
    }
    let row = p.r0 + i;
    let v = row - p.v_base;
    gw[v] = gl[0] * bitcast<f32>(p.inv_n) * (lse_in[v] - x[row * p.c + label_col(row) - p.x_base]);
}
