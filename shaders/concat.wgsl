// Concatenation along columns (src/ops/concat.rs); rows need no kernel (one contiguous
// buffer copy per input). Values are copied as 32-bit words, so f32 and u32 alike.
//
// concat_cols_u32: 0 params, 1 src (read), 2 dst (read_write). One invocation per value
//                  of one input [rows, width] (i = gid.x + gid.y * nwg.x * 256):
//                  dst[row * dst_cols + col0 + j] = src[row * width + j].

struct Params {
    n: u32,         // rows * width
    width: u32,     // columns of this input
    dst_cols: u32,  // columns of the output
    col0: u32,      // this input's first output column
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn concat_cols_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if i >= p.n {
        return;
    }
    let row = i / p.width;
    let j = i % p.width;
    dst[row * p.dst_cols + p.col0 + j] = src[i];
}
