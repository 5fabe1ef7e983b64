// LSTM aggregation over degree buckets (src/ops/lstm_aggregate.rs). Rows follow the plan's
// layout: row(i, t) = offset + i * k + t for node i of a bucket of degree k. Gates in
// PyTorch's order (i, f, g, o); the cell maths is the one of shaders/lstm_cell.wgsl.
//
// lstm_step_f32 (one bucket, step t): 0 params, 1 xw [num_src, 4H] (read), 6 src_row [rows]
//     u32 (read; the op's idx), 2 hw [m, 4H] (read; unused at t = 0), 3 acts [rows, 4H]
//     (write), 4 cs [rows, H] (write), 5 h_next [m, H] (write). A row's input projection is
//     row src_row[row] of xw, read in place (no gathered copy). The host puts the last
//     step's h_next into the output rows of the bucket's dst nodes.
// lstm_step_backward_f32 (one bucket, step t, run for t = k-1 down to 0): 0 params,
//     8 acts (read), 9 cs (read), 11 dh [m, H] (read: h̄ of the step, at t = k - 1 the
//     output gradient's rows of the bucket's dst nodes), 12 dc [m, H] (read_write; the
//     gradient of c carried between steps, treated as 0 at t = k - 1), 13 dz [m, 4H]
//     (write), 14 dxg [rows, 4H] (write).
// lstm_hprev_f32: 0 params (m = rows, offset = first row), 8 acts, 9 cs, 15 steps [rows] u32
//     (read), 16 hprev [rows, H] (write): hprev[r] = o[r-1] * tanh(c[r-1]), or 0 at step 0.
// One invocation per (node, hidden unit) (per (row, unit) for lstm_hprev_f32), over the
// 2-D grid: idx = gid.x + gid.y * nwg.x * 256.
//
// A dispatch covers nodes i0 .. i0 + m of the bucket (rows offset .. offset + m of the
// layout for lstm_hprev_f32); every buffer is bound as the window those nodes read and
// write (src/device/wgpu/split.rs), indexed with global indices less its first element:
// row_base for the [rows, 4H] buffers, cs_base for [rows, H], wide_base for [m, 4H]
// (steps for lstm_hprev_f32), node_base for [m, H] (hprev for lstm_hprev_f32), idx_base
// for src_row. xw, read at arbitrary rows, is bound as the window of its tile of rows
// t0 .. t1 (first element x_base): lstm_step_f32 runs once per tile, and an invocation
// whose src row lies outside the tile returns at once, so over the tiles each (node,
// unit) runs once, and with one tile (xw within one binding) there is one dispatch.

struct Params {
    m: u32,          // nodes in this dispatch (rows for lstm_hprev_f32)
    h: u32,          // hidden units
    k: u32,          // degree = steps
    t: u32,          // current step
    offset: u32,     // first row of the bucket (of the dispatch for lstm_hprev_f32)
    i0: u32,         // first node of the dispatch
    row_base: u32,
    cs_base: u32,
    wide_base: u32,
    node_base: u32,
    idx_base: u32,   // lstm_step_f32: first element of the src_row window
    t0: u32,         // lstm_step_f32: the tile of xw's rows
    t1: u32,
    x_base: u32,     // lstm_step_f32: first element of the xw window
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> xw: array<f32>;
@group(0) @binding(2) var<storage, read> hw: array<f32>;
@group(0) @binding(3) var<storage, read_write> acts_out: array<f32>;
@group(0) @binding(4) var<storage, read_write> cs_out: array<f32>;
@group(0) @binding(5) var<storage, read_write> h_next: array<f32>;
@group(0) @binding(6) var<storage, read> src_row: array<u32>;
@group(0) @binding(8) var<storage, read> acts: array<f32>;
@group(0) @binding(9) var<storage, read> cs: array<f32>;
@group(0) @binding(11) var<storage, read> dh_in: array<f32>;
@group(0) @binding(12) var<storage, read_write> dc: array<f32>;
@group(0) @binding(13) var<storage, read_write> dz: array<f32>;
@group(0) @binding(14) var<storage, read_write> dxg: array<f32>;
@group(0) @binding(15) var<storage, read> steps: array<u32>;
@group(0) @binding(16) var<storage, read_write> hprev: array<f32>;

@compute @workgroup_size(256)
fn lstm_step_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.m * p.h {
        return;
    }
    let i = p.i0 + idx / p.h;
    let j = idx % p.h;
    let row = p.offset + i * p.k + p.t;
    let s = src_row[row - p.idx_base];
    if s < p.t0 || s >= p.t1 {
        return;
    }
    let x = s * 4u * p.h + j - p.x_base;
    let z = row * 4u * p.h + j - p.row_base;
    var zi = xw[x];
    var zf = xw[x + p.h];
    var zg = xw[x + 2u * p.h];
    var zo = xw[x + 3u * p.h];
    var cp = 0.0;
    if p.t > 0u {
        let r = i * 4u * p.h + j - p.wide_base;
        zi += hw[r];
        zf += hw[r + p.h];
        zg += hw[r + 2u * p.h];
        zo += hw[r + 3u * p.h];
        cp = cs_out[(row - 1u) * p.h + j - p.cs_base];
    }
    let ig = sigmoid(zi);
    let fg = sigmoid(zf);
    let gg = tanh_s(zg);
    let og = sigmoid(zo);
    let c = fg * cp + ig * gg;
    acts_out[z] = ig;
    acts_out[z + p.h] = fg;
    acts_out[z + 2u * p.h] = gg;
    acts_out[z + 3u * p.h] = og;
    cs_out[row * p.h + j - p.cs_base] = c;
    h_next[i * p.h + j - p.node_base] = og * tanh_s(c);
}

@compute @workgroup_size(256)
fn lstm_step_backward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.m * p.h {
        return;
    }
    let i = p.i0 + idx / p.h;
    let j = idx % p.h;
    let row = p.offset + i * p.k + p.t;
    let z = row * 4u * p.h + j - p.row_base;
    let ig = acts[z];
    let fg = acts[z + p.h];
    let gg = acts[z + 2u * p.h];
    let og = acts[z + 3u * p.h];
    let c = cs[row * p.h + j - p.cs_base];
    var cp = 0.0;
    if p.t > 0u {
        cp = cs[(row - 1u) * p.h + j - p.cs_base];
    }
    let n = i * p.h + j - p.node_base;
    let hbar = dh_in[n];
    var cbar = 0.0;
    if p.t + 1u < p.k {
        cbar = dc[n];
    }
    let tc = tanh_s(c);
    let dct = cbar + hbar * og * (1.0 - tc * tc);
    let di = dct * gg * ig * (1.0 - ig);
    let df = dct * cp * fg * (1.0 - fg);
    let dg = dct * ig * (1.0 - gg * gg);
    let dov = hbar * tc * og * (1.0 - og);
    let b = i * 4u * p.h + j - p.wide_base;
    dz[b] = di;
    dz[b + p.h] = df;
    dz[b + 2u * p.h] = dg;
    dz[b + 3u * p.h] = dov;
    dxg[z] = di;
    dxg[z + p.h] = df;
    dxg[z + 2u * p.h] = dg;
    dxg[z + 3u * p.h] = dov;
    dc[n] = dct * fg;
}

@compute @workgroup_size(256)
fn lstm_hprev_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.m * p.h {
        return;
    }
    let r = p.offset + idx / p.h;
    let j = idx % p.h;
    var v = 0.0;
    if steps[r - p.wide_base] > 0u {
        let a = (r - 1u) * 4u * p.h + 3u * p.h + j - p.row_base;
        v = acts[a] * tanh_s(cs[(r - 1u) * p.h + j - p.cs_base]);
    }
    hprev[r * p.h + j - p.node_base] = v;
}
