// Fused LSTM cell (src/ops/lstm_cell.rs). Gates in PyTorch's order (i, f, g, o).
//
// lstm_cell_forward_f32:  0 params, 1 gates [n, 4H] (read), 2 c_prev [n, H] (read),
//                         3 out [n, 2H] = [h | c] (write), 4 acts [n, 4H] (write).
// lstm_cell_backward_f32: 0 params, 5 acts (read), 2 c_prev (read), 6 grad [n, 2H] (read),
//                         7 dgates [n, 4H] (write), 8 dc_prev [n, H] (write).
// One invocation per (node r, hidden unit j): r = r0 + idx / H, j = idx % H over the 2-D
// grid, idx = gid.x + gid.y * nwg.x * 256. A dispatch covers nodes r0 .. r0 + n; every
// buffer is bound as the window of those rows (src/device/wgpu/split.rs): the [n, 4H] ones
// from element base4, the [n, H] ones from base1, the [n, 2H] ones from base2.

struct Params {
    n: u32,  // nodes in this dispatch
    h: u32,  // hidden units
    r0: u32,
    base4: u32,
    base1: u32,
    base2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gates: array<f32>;
@group(0) @binding(2) var<storage, read> c_prev: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read_write> acts_out: array<f32>;
@group(0) @binding(5) var<storage, read> acts: array<f32>;
@group(0) @binding(6) var<storage, read> grad: array<f32>;
@group(0) @binding(7) var<storage, read_write> dgates: array<f32>;
@group(0) @binding(8) var<storage, read_write> dc_prev: array<f32>;

@compute @workgroup_size(256)
fn lstm_cell_forward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.n * p.h {
        return;
    }
    let r = p.r0 + idx / p.h;
    let j = idx % p.h;
    let z = r * 4u * p.h + j - p.base4;
    let c1 = r * p.h + j - p.base1;
    let o = r * 2u * p.h + j - p.base2;
    let i = sigmoid(gates[z]);
    let f = sigmoid(gates[z + p.h]);
    let g = tanh_s(gates[z + 2u * p.h]);
    let og = sigmoid(gates[z + 3u * p.h]);
    let c = f * c_prev[c1] + i * g;
    acts_out[z] = i;
    acts_out[z + p.h] = f;
    acts_out[z + 2u * p.h] = g;
    acts_out[z + 3u * p.h] = og;
    out[o] = og * tanh_s(c);
    out[o + p.h] = c;
}

@compute @workgroup_size(256)
fn lstm_cell_backward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = linear(gid, nwg);
    if idx >= p.n * p.h {
        return;
    }
    let r = p.r0 + idx / p.h;
    let j = idx % p.h;
    let z = r * 4u * p.h + j - p.base4;
    let c1 = r * p.h + j - p.base1;
    let o2 = r * 2u * p.h + j - p.base2;
    let i = acts[z];
    let f = acts[z + p.h];
    let g = acts[z + 2u * p.h];
    let o = acts[z + 3u * p.h];
    let cp = c_prev[c1];
    let tc = tanh_s(f * cp + i * g);
    let dh = grad[o2];
    let dc = grad[o2 + p.h] + dh * o * (1.0 - tc * tc);
    dgates[z] = dc * g * i * (1.0 - i);
    dgates[z + p.h] = dc * cp * f * (1.0 - f);
    dgates[z + 2u * p.h] = dc * i * (1.0 - g * g);
    dgates[z + 3u * p.h] = dh * tc * o * (1.0 - o);
    dc_prev[c1] = dc * f;
}
