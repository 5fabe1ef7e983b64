// Elementwise unary ops and their fused backward (src/ops/unary.rs).
//
// unary_f32:          0 params, 1 x (read), 2 out (read_write); out[i] = f(x[i]).
// unary_backward_f32: 0 params, 3 g (read), 4 s (read), 5 out (read_write);
//                     out[i] = g[i] * f'(s[i]), s the saved output (the input for log).
// One invocation per element of a chunk (Context::launch_chunked): local index
// i = gid.x + gid.y * nwg.x * 256, checked against p.n; buffers are bound to the chunk.
// op: 0 neg, 1 relu, 2 leaky_relu, 3 elu, 4 sigmoid, 5 tanh, 6 exp, 7 log, 8 add_scalar,
// 9 mul_scalar; p.param is the scalar parameter as f32 bits.

struct Params {
    n: u32,      // elements in this chunk
    base: u32,   // global index of the chunk's first element (unused here)
    op: u32,
    param: u32,  // f32 bits
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> s: array<f32>;
@group(0) @binding(5) var<storage, read_write> gout: array<f32>;

fn forward(op: u32, a: f32, v: f32) -> f32 {
    switch op {
        case 0u: { return -v; }
        case 1u: { return max(v, 0.0); }
        case 2u: { return select(a * v, v, v > 0.0); }
        case 3u: { return select(a * (exp(v) - 1.0), v, v > 0.0); }
        case 4u: {
            // Stable: never exponentiates a positive number.
            if v >= 0.0 {
                return 1.0 / (1.0 + exp(-v));
            }
            let e = exp(v);
            return e / (1.0 + e);
        }
        // Some drivers compute tanh from exp(2x), which overflows; tanh(±10) is ±1 in f32.
        // The clamp turns NaN into -10 on some drivers (lavapipe): NaN is passed through.
        case 5u: { return select(tanh(clamp(v, -10.0, 10.0)), v, is_nan(v)); }
        case 6u: { return exp(v); }
        case 7u: { return log(v); }
        case 8u: { return v + a; }
        default: { return v * a; }
    }
}

fn derivative(op: u32, a: f32, v: f32) -> f32 {
    switch op {
        case 0u: { return -1.0; }
        case 1u: { return select(0.0, 1.0, v > 0.0); }
        case 2u: { return select(a, 1.0, v > 0.0); }
        case 3u: { return select(v + a, 1.0, v > 0.0); }
        case 4u: { return v * (1.0 - v); }
        case 5u: { return 1.0 - v * v; }
        case 6u: { return v; }
        case 7u: { return 1.0 / v; }
        case 8u: { return 1.0; }
        default: { return a; }
    }
}

@compute @workgroup_size(256)
fn unary_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    out[i] = forward(p.op, bitcast<f32>(p.param), x[i]);
}

@compute @workgroup_size(256)
fn unary_backward_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    gout[i] = g[i] * derivative(p.op, bitcast<f32>(p.param), s[i]);
}
