// In-place Adam / AdamW update (src/ops/adam.rs), f32.
//
// adam_f32: 0 params, 1 param (read_write), 2 grad (read), 3 m (read_write), 4 v (read_write).
// Adam (L2): g += wd * p. AdamW (decoupled): p *= shrink. Then m = b1 m + (1 - b1) g,
// v = b2 v + (1 - b2) g², p -= lr * (m / bc1) / (sqrt(v / bc2) + eps); the bias
// corrections bc1 = 1 - b1^t, bc2 = 1 - b2^t and shrink = 1 - lr * wd come from the host.
// Chunked (Context::launch_chunked): one invocation per element of the chunk, local index
// i = gid.x + gid.y * nwg.x * 256 checked against p.n; every buffer is bound to the chunk.

struct Params {
    n: u32,          // elements in this chunk
    base: u32,       // unused
    lr: u32,         // f32 bits, like every value below
    b1: u32,
    b2: u32,
    eps: u32,
    wd: u32,
    bc1: u32,
    bc2: u32,
    shrink: u32,
    decoupled: u32,  // 1 for AdamW
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> m1: array<f32>;
@group(0) @binding(4) var<storage, read_write> m2: array<f32>;

@compute @workgroup_size(256)
fn adam_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let b1 = bitcast<f32>(p.b1);
    let b2 = bitcast<f32>(p.b2);
    var w = param[i];
    var g = grad[i];
    if p.decoupled != 0u {
        w = w * bitcast<f32>(p.shrink);
    } else {
        g = g + bitcast<f32>(p.wd) * w;
    }
    let m = b1 * m1[i] + (1.0 - b1) * g;
    let v = b2 * m2[i] + (1.0 - b2) * g * g;
    m1[i] = m;
    m2[i] = v;
    let mhat = m / bitcast<f32>(p.bc1);
    let vhat = v / bitcast<f32>(p.bc2);
    param[i] = w - bitcast<f32>(p.lr) * mhat / (sqrt(vhat) + bitcast<f32>(p.eps));
}
