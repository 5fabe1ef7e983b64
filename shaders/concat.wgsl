// Concatenation along columns (src/ops/concat.rs); rows need no kernel (one contiguous
// buffer copy per input). Values are copied as 32-bit words, so f32 and u32 alike.
//
// concat_cols_u32: 0 params, 1 src (read), 2 dst (read_write). One invocation per value
//                  of one input [rows, width] (i = gid.x + gid.y * nwg.x * 256, from the
//                  dispatch's first row r0): dst[row * dst_cols + col0 + j] = src[row * width + j].
//                  src and dst are bound as the windows of rows r0 .. (src/device/wgpu/split.rs),
//                  whose first elements are src_base and dst_base.

struct Params {
    n: u32,         // values in this dispatch: rows * width
    width: u32,     // columns of this input
    dst_cols: u32,  // columns of the output
    col0: u32,      // this input's first output column
    r0: u32,        // first row of the dispatch
    src_base: u32,
    dst_base: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn concat_cols_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.r0 * p.width + i;
    let row = gi / p.width;
    let j = gi % p.width;
    dst[row * p.dst_cols + p.col0 + j - p.dst_base] = src[gi - p.src_base];
}
