// LSTM aggregation over degree buckets (src/ops/lstm_aggregate.rs). Rows follow the plan's
// layout: row(i, t) = offset + i * k + t for node i of a bucket of degree k. Gates in
// PyTorch's order (i, f, g, o); the cell maths is the one of shaders/lstm_cell.wgsl.
//
// lstm_step_f32 (one bucket, step t): 0 params, 1 xg [rows, 4H] (read), 2 hw [m, 4H] (read;
//     unused at t = 0), 3 acts [rows, 4H] (write), 4 cs [rows, H] (write), 5 h_next [m, H]
//     (write), 6 out [num_dst, H] (write at t = k - 1), 7 dst [m] u32 (read).
// lstm_step_backward_f32 (one bucket, step t, run for t = k-1 down to 0): 0 params,
//     8 acts (read), 9 cs (read), 10 grad [num_dst, H] (read), 7 dst (read), 11 dh [m, H]
//     (read; unused at t = k - 1, where h̄ comes from grad), 12 dc [m, H] (read_write; the
//     gradient of c carried between steps, treated as 0 at t = k - 1), 13 dz [m, 4H]
//     (write), 14 dxg [rows, 4H] (write).
// lstm_hprev_f32: 0 params (n = rows, h), 8 acts, 9 cs, 15 steps [rows] u32 (read),
//     16 hprev [rows, H] (write): hprev[r] = o[r-1] * tanh(c[r-1]), or 0 at step 0.
// One invocation per (node, hidden unit) (per (row, unit) for lstm_hprev_f32), over the
// 2-D grid: idx = gid.x + gid.y * nwg.x * 256.

struct Params {
    m: u32,       // nodes in the bucket (rows for lstm_hprev_f32)
    h: u32,       // hidden units
    k: u32,       // degree = steps
    t: u32,       // current step
    offset: u32,  // first row of the bucket
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> xg: array<f32>;
@group(0) @binding(2) var<storage, read> hw: array<f32>;
@group(0) @binding(3) var<storage, read_write> acts_out: array<f32>;
@group(0) @binding(4) var<storage, read_write> cs_out: array<f32>;
@group(0) @binding(5) var<storage, read_write> h_next: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read> dst: array<u32>;
@group(0) @binding(8) var<storage, read> acts: array<f32>;
@group(0) @binding(9) var<storage, read> cs: array<f32>;
@group(0) @binding(10) var<storage, read> grad: array<f32>;
@group(0) @binding(11) var<storage, read> dh_in: array<f32>;
@group(0) @binding(12) var<storage, read_write> dc: array<f32>;
@group(0) @binding(13) var<storage, read_write> dz: array<f32>;
@group(0) @binding(14) var<storage, read_write> dxg: array<f32>;
@group(0) @binding(15) var<storage, read> steps: array<u32>;
@group(0) @binding(16) var<storage, read_write> hprev: array<f32>;

fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

// tanh that stays finite for any |x| (some drivers build tanh from exp and overflow).
fn tanh_s(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

// Never exponentiates a positive number.
fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        return 1.0 / (1.0 + exp(-x));
    }
    let e = exp(x);
    return e / (1.0 + e);
}

@compute @workgroup_size(256)
fn lstm_step_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.m * p.h {
        return;
    }
    let i = idx / p.h;
    let j = idx % p.h;
    let row = p.offset + i * p.k + p.t;
    let z = row * 4u * p.h + j;
    var zi = xg[z];
    var zf = xg[z + p.h];
    var zg = xg[z + 2u * p.h];
    var zo = xg[z + 3u * p.h];
    var cp = 0.0;
    if p.t > 0u {
        let r = i * 4u * p.h + j;
        zi += hw[r];
        zf += hw[r + p.h];
        zg += hw[r + 2u * p.h];
        zo += hw[r + 3u * p.h];
        cp = cs_out[(row - 1u) * p.h + j];
    }
    let ig = sigmoid(zi);
    let fg = sigmoid(zf);
    let gg = tanh_s(zg);
    let og = sigmoid(zo);
    let c = fg * cp + ig * gg;
    let hv = og * tanh_s(c);
    acts_out[z] = ig;
    acts_out[z + p.h] = fg;
    acts_out[z + 2u * p.h] = gg;
    acts_out[z + 3u * p.h] = og;
    cs_out[row * p.h + j] = c;
    h_next[idx] = hv;
    if p.t + 1u == p.k {
        out[dst[i] * p.h + j] = hv;
    }
}

@compute @workgroup_size(256)
fn lstm_step_backward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.m * p.h {
        return;
    }
    let i = idx / p.h;
    let j = idx % p.h;
    let row = p.offset + i * p.k + p.t;
    let z = row * 4u * p.h + j;
    let ig = acts[z];
    let fg = acts[z + p.h];
    let gg = acts[z + 2u * p.h];
    let og = acts[z + 3u * p.h];
    let c = cs[row * p.h + j];
    var cp = 0.0;
    if p.t > 0u {
        cp = cs[(row - 1u) * p.h + j];
    }
    var hbar = 0.0;
    var cbar = 0.0;
    if p.t + 1u == p.k {
        hbar = grad[dst[i] * p.h + j];
    } else {
        hbar = dh_in[idx];
        cbar = dc[idx];
    }
    let tc = tanh_s(c);
    let dct = cbar + hbar * og * (1.0 - tc * tc);
    let di = dct * gg * ig * (1.0 - ig);
    let df = dct * cp * fg * (1.0 - fg);
    let dg = dct * ig * (1.0 - gg * gg);
    let dov = hbar * tc * og * (1.0 - og);
    let b = i * 4u * p.h + j;
    dz[b] = di;
    dz[b + p.h] = df;
    dz[b + 2u * p.h] = dg;
    dz[b + 3u * p.h] = dov;
    dxg[z] = di;
    dxg[z + p.h] = df;
    dxg[z + 2u * p.h] = dg;
    dxg[z + 3u * p.h] = dov;
    dc[idx] = dct * fg;
}

@compute @workgroup_size(256)
fn lstm_hprev_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.m * p.h {
        return;
    }
    let r = idx / p.h;
    let j = idx % p.h;
    var v = 0.0;
    if steps[r] > 0u {
        v = acts[(r - 1u) * 4u * p.h + 3u * p.h + j] * tanh_s(cs[(r - 1u) * p.h + j]);
    }
    hprev[idx] = v;
}
