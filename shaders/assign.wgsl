// Filling a buffer with one 32-bit word (Tensor::full on wgpu; src/ops/assign.rs).
// assign itself needs no kernel: it is a buffer-to-buffer copy on the queue.
//
// fill_u32: 0 params, 1 out (read_write), chunked (Context::launch_chunked); one
//           invocation per element: out[i] = p.word (an f32's bits or a u32).
// Local index i = gid.x + gid.y * nwg.x * 256, checked against p.n.

struct Params {
    n: u32,     // elements in this chunk
    base: u32,  // global index of the chunk's first element (unused)
    word: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn fill_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    out[i] = p.word;
}
