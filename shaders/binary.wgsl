// Elementwise binary ops with broadcasting of the right operand (src/ops/binary.rs).
//
// binary_f32:     0 params, 1 a (read), 2 b (read), 3 out (write); one invocation per
//                 element of out; b is indexed through the broadcast mode.
// add_assign_f32: 0 params, 4 src (read), 5 dst (read_write); dst[i] += src[i].
// Chunked (Context::launch_chunked): local index i = gid.x + gid.y * nwg.x * 256 < p.n
// into the chunk's a, out, src, dst (and b when shapes are equal, b being bound whole
// otherwise); the broadcast index of b comes from the global index gi = base + i.

struct Params {
    n: u32,      // elements in this chunk
    base: u32,   // global index of the chunk's first element
    cols: u32,   // columns of a
    op: u32,     // 0 add, 1 sub, 2 mul, 3 div
    bcast: u32,  // 0 none, 1 row, 2 column, 3 scalar
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> src: array<f32>;
@group(0) @binding(5) var<storage, read_write> dst: array<f32>;

fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn binary_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    var j = i;
    switch p.bcast {
        case 1u: { j = (p.base + i) % p.cols; }
        case 2u: { j = (p.base + i) / p.cols; }
        case 3u: { j = 0u; }
        default: {}
    }
    let x = a[i];
    let y = b[j];
    var r: f32;
    switch p.op {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        default: { r = x / y; }
    }
    out[i] = r;
}

@compute @workgroup_size(256)
fn add_assign_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    dst[i] = dst[i] + src[i];
}
