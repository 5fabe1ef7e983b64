// Widening half-precision feature values to f32 (src/ops/widen.rs).
//
// widen_f16_f32:  0 params, 1 x (read, two f16 per u32 word, little-endian), 2 out (write).
// widen_bf16_f32: the same for bf16.
// One invocation per word of x (a pair of values): out[2w] from the low half, out[2w + 1]
// from the high half when 2w + 1 < p.n. f16 widens by moving its bits (half_bits below):
// exact, and portable to adapters without the f16-in-f32 capability that the builtin
// unpack2x16float needs (some downlevel adapters lack it). bf16 is the top half of an
// f32, so a shift widens it exactly. Linear word index w = linear(gid, nwg), checked
// against the word count ceil(p.n / 2).

struct Params {
    n: u32,  // values (not words)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// The f32 of the IEEE half in the low 16 bits of h: normal values re-bias the exponent
// (15 to 127) and shift the mantissa; subnormals are mantissa * 2^-24 (exact in f32);
// infinities stay infinite, a NaN keeps its mantissa bits and is made quiet (as the CPU's
// conversion does); the sign is copied (so -0 stays -0).
fn half_bits(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if e == 0u {
        return bitcast<f32>(sign | bitcast<u32>(f32(m) * 5.9604645e-8));
    }
    if e == 31u {
        if m == 0u {
            return bitcast<f32>(sign | 0x7f800000u);
        }
        return bitcast<f32>(sign | 0x7fc00000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

@compute @workgroup_size(256)
fn widen_f16_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = linear(gid, nwg);
    if w >= (p.n + 1u) / 2u {
        return;
    }
    let word = x[w];
    out[2u * w] = half_bits(word & 0xffffu);
    if 2u * w + 1u < p.n {
        out[2u * w + 1u] = half_bits(word >> 16u);
    }
}

@compute @workgroup_size(256)
fn widen_bf16_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = linear(gid, nwg);
    if w >= (p.n + 1u) / 2u {
        return;
    }
    let word = x[w];
    out[2u * w] = bitcast<f32>(word << 16u);
    if 2u * w + 1u < p.n {
        out[2u * w + 1u] = bitcast<f32>(word & 0xffff0000u);
    }
}
