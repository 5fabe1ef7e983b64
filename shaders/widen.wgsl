// Widening half-precision feature values to f32 (src/ops/widen.rs).
//
// widen_f16_f32:  0 params, 1 x (read, two f16 per u32 word, little-endian), 2 out (write).
// widen_bf16_f32: the same for bf16.
// One invocation per word of x (a pair of values): out[2w] from the low half, out[2w + 1]
// from the high half when 2w + 1 < p.n. f16 unpacks with the core builtin
// unpack2x16float (no shader-f16 feature needed); bf16 is the top half of an f32, so a
// shift widens it exactly. Linear word index w = gid.x + gid.y * nwg.x * 256, checked
// against the word count ceil(p.n / 2).

struct Params {
    n: u32,  // values (not words)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

fn word_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn widen_f16_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = word_index(gid, nwg);
    if w >= (p.n + 1u) / 2u {
        return;
    }
    let v = unpack2x16float(x[w]);
    out[2u * w] = v.x;
    if 2u * w + 1u < p.n {
        out[2u * w + 1u] = v.y;
    }
}

@compute @workgroup_size(256)
fn widen_bf16_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = word_index(gid, nwg);
    if w >= (p.n + 1u) / 2u {
        return;
    }
    let word = x[w];
    out[2u * w] = bitcast<f32>(word << 16u);
    if 2u * w + 1u < p.n {
        out[2u * w + 1u] = bitcast<f32>(word & 0xffff0000u);
    }
}
