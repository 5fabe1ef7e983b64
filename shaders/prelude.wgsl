// Appended to every shaders/<op>.wgsl before it is validated and compiled
// (src/device/wgpu_shader.rs), so the shader's own line numbers stay as they are in its
// file. Module-scope WGSL names are visible before their declaration, so a shader calls
// these helpers as if it declared them. Nothing here binds a resource: an entry point's
// bind-group layout only ever lists the shader's own bindings.
//
// What stays out of here, repeated in the shaders: a loop over a shader's own bindings
// (WGSL passes no storage buffer to a function without the unrestricted_pointer_parameters
// extension, outside WebGPU's defaults, and a helper here cannot name a shader's binding),
// and the f32/vec4<f32> twins of a kernel (WGSL has no generics).

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

// Row reductions of a workgroup: thread t passes its partial value and every thread gets
// the result. Called from uniform control flow by every thread of a 64-thread (wg_*64) or
// 256-thread (wg_sum256) workgroup; they hold barriers. The order of operations is fixed
// (for a given adapter), so results do not depend on scheduling.
var<workgroup> wg64: array<f32, 64>;
var<workgroup> wg256: array<f32, 256>;

// A tree in shared memory. No subgroup variant: on lavapipe (subgroups of 8) the subgroup
// scheme's second pass over 256 slots made sum_all no faster (docs/BENCHMARKS.md).
fn wg_sum256(t: u32, v: f32) -> f32 {
    wg256[t] = v;
    workgroupBarrier();
    for (var half = 128u; half > 0u; half >>= 1u) {
        if t < half {
            wg256[t] += wg256[t + half];
        }
        workgroupBarrier();
    }
    let r = wg256[0];
    workgroupBarrier();
    return r;
}

// wg_max64 and wg_sum64 come in two variants, one compiled per pipeline
// (src/device/wgpu_shader.rs keeps one section between the `// @variant` lines): shared
// memory alone, for every adapter, and subgroup operations, for adapters with wgpu's
// Features::SUBGROUP.

// @variant shared
// A tree over the workgroup in shared memory: log2(threads) + 2 barriers.
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

// @variant subgroup
// Each subgroup reduces its lanes; its lanes leave the result in their slots of shared
// memory; after one barrier every subgroup reduces all the slots again, lane l taking slots
// l, l + S, l + 2S, ... in order (S lanes per subgroup). The lane's index and S are counted
// by the subgroup itself, so nothing is assumed about which invocations form a subgroup or
// its size (any power of two up to the workgroup's). 2 barriers.
fn sg_lane() -> u32 {
    return subgroupExclusiveAdd(1u);
}

fn sg_size() -> u32 {
    return subgroupAdd(1u);
}

// The subgroup's max, a NaN winning: subgroupMax leaves NaN to the implementation, so the
// largest NaN bit pattern among the lanes replaces its result.
fn sg_nan_max(v: f32) -> f32 {
    let nan = subgroupMax(select(0u, bitcast<u32>(v), is_nan(v)));
    if nan != 0u {
        return bitcast<f32>(nan);
    }
    return subgroupMax(v);
}

fn wg_max64(t: u32, v: f32) -> f32 {
    // Every lane keeps the subgroup's max: copies do not change a max.
    wg64[t] = sg_nan_max(v);
    workgroupBarrier();
    let l = sg_lane();
    let n = sg_size();
    var m = wg64[min(l, 63u)];
    for (var i = l + n; i < 64u; i += n) {
        m = nan_max(m, wg64[i]);
    }
    let r = sg_nan_max(m);
    workgroupBarrier();
    return r;
}

fn wg_sum64(t: u32, v: f32) -> f32 {
    // One copy of each subgroup's sum, in its first lane's slot.
    let l = sg_lane();
    let n = sg_size();
    wg64[t] = select(0.0, subgroupAdd(v), l == 0u);
    workgroupBarrier();
    var acc = 0.0;
    for (var i = l; i < 64u; i += n) {
        acc += wg64[i];
    }
    let r = subgroupAdd(acc);
    workgroupBarrier();
    return r;
}

// @variant end

// Row groups of the 64-thread segment kernels: `lanes` threads (a power of two <= 64) own
// one output row, so a workgroup covers 64 / lanes consecutive rows of its dispatch; thread
// t is lane t % lanes of row slot t / lanes. The lanes of a row walk its edges together, in
// edge order, each over its own features: every lane loads the same edge id at the same
// step (one broadcast load on a GPU), and no barrier is needed.
//
// A segment kernel's entry point takes its ids as one `RowIds` and starts with
//     let rg = row_group(ids, p.lanes, p.rows, p.row0);
//     if !rg.live { return; }
// then walks the CSR row `rg.row` (its edges from the shader's own offsets), reading the
// rows of a tiled input that are `in_tile` at `row_start`, and writing its output row
// from `row_start(rg.row, ...)`, lane by lane.
struct RowIds {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
}

struct RowGroup {
    row: u32,   // the output row: the dispatch's first (row0) plus the group's own
    live: bool, // the group's row is one of the dispatch's `rows`
    lane: u32,
}

fn row_group(ids: RowIds, lanes: u32, rows: u32, row0: u32) -> RowGroup {
    let row = (ids.wid.x + ids.wid.y * ids.nwg.x) * (64u / lanes) + ids.t / lanes;
    return RowGroup(row0 + row, row < rows, ids.t % lanes);
}

// The first element of row `row` of `width` f32 values in a window whose first element is
// the f32 `base`, counted in elements of `vec` f32 values: 1 for f32 arrays, 4 for vec4
// arrays (whose rows and windows then start on a multiple of 4).
fn row_start(row: u32, width: u32, base: u32, vec: u32) -> u32 {
    return (row * width - base) / vec;
}

// Whether row `i` of a tiled input is in the tile t0 .. t1 bound to this dispatch.
fn in_tile(i: u32, t0: u32, t1: u32) -> bool {
    return i >= t0 && i < t1;
}
