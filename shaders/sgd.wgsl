// In-place SGD update (src/ops/sgd.rs), f32.
//
// sgd_f32:          0 params, 1 param (read_write), 2 grad (read);
//                   d = g + wd * p; p -= lr * d.
// sgd_momentum_f32: 0 params, 1 param (read_write), 2 grad (read), 3 velocity (read_write);
//                   d = g + wd * p; v = d (first step) or mu * v + d; p -= lr * v.
// Chunked (Context::launch_chunked): one invocation per element of the chunk, local index
// i = gid.x + gid.y * nwg.x * 256 checked against p.n; every buffer is bound to the chunk.

struct Params {
    n: u32,      // elements in this chunk
    base: u32,   // unused
    lr: u32,     // f32 bits
    mu: u32,     // f32 bits
    wd: u32,     // f32 bits
    first: u32,  // 1 on the first step
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> velocity: array<f32>;

@compute @workgroup_size(256)
fn sgd_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let w = param[i];
    let d = grad[i] + bitcast<f32>(p.wd) * w;
    param[i] = w - bitcast<f32>(p.lr) * d;
}

@compute @workgroup_size(256)
fn sgd_momentum_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let w = param[i];
    let d = grad[i] + bitcast<f32>(p.wd) * w;
    var v = d;
    if p.first == 0u {
        v = bitcast<f32>(p.mu) * velocity[i] + d;
    }
    velocity[i] = v;
    param[i] = w - bitcast<f32>(p.lr) * v;
}
