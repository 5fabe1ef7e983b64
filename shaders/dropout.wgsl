// Dropout with a counter-based mask (src/ops/dropout.rs); the hash is src/rng.rs's
// pcg/hash3/uniform3 in u32 arithmetic, so the mask is bit-identical to the CPU's.
//
// dropout_f32:     0 params, 1 x (read), 2 out (read_write); row id = row.
// dropout_ids_f32: 0 params, 1 x, 2 out, 3 ids (read, u32 per row); row id = ids[row].
// Ranges of elements (Context::launch_followed): i = gid.x + gid.y * nwg.x * 256 (checked
// against p.n), global index gi = base + i gives row = gi / c, col = gi % c; x and out are
// bound as the range's windows (first element same_base), ids as the window of the range's
// rows (first element follow_base). out = x * scale if uniform3(key, id, col) >= threshold,
// else 0.

struct Params {
    n: u32,            // elements in this range
    base: u32,         // global index of the range's first element
    same_base: u32,    // first element of the x and out windows
    follow_base: u32,  // first element of the ids window
    c: u32,            // columns
    key: u32,
    threshold: u32,  // p as f32 bits
    scale: u32,      // 1/(1 - p) as f32 bits
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> ids: array<u32>;

// PCG-style permutation (Jarzynski & Olano); u32 arithmetic wraps, as in the Rust code.
fn pcg(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

fn uniform3(key: u32, a: u32, b: u32) -> f32 {
    let h = pcg(pcg(pcg(key) ^ a) ^ b);
    return f32(h >> 8u) * (1.0 / 16777216.0);
}

fn masked(i: u32, id: u32, col: u32) {
    var v = 0.0;
    if uniform3(p.key, id, col) >= bitcast<f32>(p.threshold) {
        v = x[i] * bitcast<f32>(p.scale);
    }
    out[i] = v;
}

@compute @workgroup_size(256)
fn dropout_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.base + i;
    masked(gi - p.same_base, gi / p.c, gi % p.c);
}

@compute @workgroup_size(256)
fn dropout_ids_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let gi = p.base + i;
    masked(gi - p.same_base, ids[gi / p.c - p.follow_base], gi % p.c);
}
