// Slice of rows or columns and its backward (src/ops/slice.rs). A slice of rows needs no
// kernel (one contiguous buffer copy).
//
// slice_cols_u32: 0 params, 1 src (read), 2 dst (read_write). One invocation per output
//                 value: gi = base + i, row = gi / len, j = gi % len;
//                 dst[gi] = src[row * c + start + j]. 32-bit words: f32 or u32.
// slice_pad_f32:  0 params, 3 g (read), 4 out (read_write). One invocation per value of the
//                 input's shape [r, c]: gi = base + i, row = gi / c, col = gi % c;
//                 out[gi] = g at (row - start, col) for dim 0 or (row, col - start) for
//                 dim 1 when inside the slice, else 0.
// A dispatch covers a range of rows, i = gid.x + gid.y * nwg.x * 256 < p.n from its first
// value `base`; src or g and dst or out are bound as the windows those rows read and write
// (src/device/wgpu/split.rs), whose first elements are src_base and dst_base.

struct Params {
    n: u32,         // values in this dispatch
    base: u32,      // global index of the dispatch's first value
    c: u32,         // columns of the sliced tensor
    start: u32,     // first row (dim 0) or column (dim 1) of the slice
    len: u32,       // rows or columns in the slice
    dim: u32,
    src_base: u32,  // first element of the src (g) window
    dst_base: u32,  // first element of the dst (out) window
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn slice_cols_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.base + i;
    let row = gi / p.len;
    let j = gi % p.len;
    dst[gi - p.dst_base] = src[row * p.c + p.start + j - p.src_base];
}

@compute @workgroup_size(256)
fn slice_pad_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.base + i;
    let row = gi / p.c;
    let col = gi % p.c;
    var v = 0.0;
    if p.dim == 0u {
        if row >= p.start && row - p.start < p.len {
            v = g[(row - p.start) * p.c + col - p.src_base];
        }
    } else if col >= p.start && col - p.start < p.len {
        v = g[row * p.len + (col - p.start) - p.src_base];
    }
    out[gi - p.dst_base] = v;
}
