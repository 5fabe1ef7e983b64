// Appended to every shaders/<op>.wgsl before it is validated and compiled
// (src/device/wgpu_shader.rs), so the shader's own line numbers stay as they are in its
// file. Module-scope WGSL names are visible before their declaration, so a shader calls
// these helpers as if it declared them. Nothing here binds a resource: an entry point's
// bind-group layout only ever lists the shader's own bindings.

// The global invocation index of a 2-D grid of 256-thread workgroups (Context::grid).
fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

// Bit tests: WGSL lets a compiler assume floats are never NaN, so `v != v` may be folded
// away; a test of the bits stays exact.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) < 0x7f800000u;
}

// The larger of two values, a NaN winning so that it propagates.
fn nan_max(a: f32, b: f32) -> f32 {
    if is_nan(a) {
        return a;
    }
    if b > a || is_nan(b) {
        return b;
    }
    return a;
}

// tanh that stays finite for any |x| (some drivers build tanh from exp and overflow).
fn tanh_s(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

// Never exponentiates a positive number.
fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        return 1.0 / (1.0 + exp(-x));
    }
    let e = exp(x);
    return e / (1.0 + e);
}

// Row reductions of a 64-thread workgroup: thread t passes its partial value and every
// thread gets the row's result. Called from uniform control flow (they hold barriers);
// the tree's order is fixed, so results do not depend on scheduling.
var<workgroup> wg64: array<f32, 64>;

fn wg_max64(t: u32, v: f32) -> f32 {
    wg64[t] = v;
    workgroupBarrier();
    for (var half = 32u; half > 0u; half >>= 1u) {
        if t < half {
            wg64[t] = nan_max(wg64[t], wg64[t + half]);
        }
        workgroupBarrier();
    }
    let r = wg64[0];
    workgroupBarrier();
    return r;
}

fn wg_sum64(t: u32, v: f32) -> f32 {
    wg64[t] = v;
    workgroupBarrier();
    for (var half = 32u; half > 0u; half >>= 1u) {
        if t < half {
            wg64[t] += wg64[t + half];
        }
        workgroupBarrier();
    }
    let r = wg64[0];
    workgroupBarrier();
    return r;
}

// Row groups of the 64-thread segment kernels: `lanes` threads (a power of two <= 64) own
// one output row, so a workgroup covers 64 / lanes consecutive rows of its dispatch; thread
// t is lane t % lanes of row slot t / lanes. The lanes of a row walk its edges together, in
// edge order, each over its own features: every lane loads the same edge id at the same
// step (one broadcast load on a GPU), and no barrier is needed.
struct RowGroup {
    row: u32,   // the output row, counted from the dispatch's first
    live: bool, // row < rows of the dispatch
    lane: u32,
}

fn row_group(wid: vec3<u32>, nwg: vec3<u32>, t: u32, lanes: u32, rows: u32) -> RowGroup {
    let row = (wid.x + wid.y * nwg.x) * (64u / lanes) + t / lanes;
    return RowGroup(row, row < rows, t % lanes);
}
