// Elementwise binary ops with broadcasting of the right operand (src/ops/binary.rs).
//
// binary_f32:     0 params, 1 a (read), 2 b (read), 3 out (write); one invocation per
//                 element of out; b is indexed through the broadcast mode. Ranges of
//                 elements (Context::launch_followed): gi = base + i (i < p.n); a and out
//                 are bound as the range's windows (first element same_base), b as the
//                 window of the values the range reads (first element follow_base).
// add_assign_f32: 0 params, 4 src (read), 5 dst (read_write); dst[i] += src[i] (gradient accumulation,
//                 launched by src/device/add.rs, and ops::add_assign). Chunked
//                 (Context::launch_chunked): local index i into the chunk's src and dst.
// i = gid.x + gid.y * nwg.x * 256.

struct Params {
    n: u32,            // elements in this range or chunk
    base: u32,         // global index of its first element
    same_base: u32,    // binary_f32: first element of the a and out windows
    follow_base: u32,  // binary_f32: first element of the b window
    cols: u32,         // columns of a
    op: u32,           // 0 add, 1 sub, 2 mul, 3 div
    bcast: u32,        // 0 none, 1 row, 2 column, 3 scalar
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> src: array<f32>;
@group(0) @binding(5) var<storage, read_write> dst: array<f32>;

// x / y, correct where |y| > 2^126 too. WGSL leaves division there to the
// implementation, and NVIDIA's Vulkan driver computes x * (1 / y) with 1 / y flushed to 0:
// inf / 3e38 gave NaN and 3e38 / 3e38 gave 0 on an H200 (`espalier check --full`). Scaling
// both by 1/4 is exact (powers of two) and brings y back into range; a result that small
// differs from x / y only below the smallest normal, where WGSL may flush it anyway.
fn div(x: f32, y: f32) -> f32 {
    if abs(y) > 8.507059e37 {
        return (x * 0.25) / (y * 0.25);
    }
    return x / y;
}

@compute @workgroup_size(256)
fn binary_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.base + i;
    var j = gi;
    switch p.bcast {
        case 1u: { j = gi % p.cols; }
        case 2u: { j = gi / p.cols; }
        case 3u: { j = 0u; }
        default: {}
    }
    let x = a[gi - p.same_base];
    let y = b[j - p.follow_base];
    var r: f32;
    switch p.op {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        default: { r = div(x, y); }
    }
    out[gi - p.same_base] = r;
}

@compute @workgroup_size(256)
fn add_assign_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    dst[i] = dst[i] + src[i];
}
