// Row gather and its adjoint, the deterministic row scatter-add (src/ops/index_select.rs).
//
// gather_u32: 0 params, 1 idx (read), 2 x (read), 3 out (write). One invocation per output
//   value i = r * f + j: out[i] = x[idx[r] * f + j]. Values are copied as bits, so one entry
//   serves f32 and u32 tensors; consecutive invocations read consecutive features (coalesced).
//   Indices are checked on the host; one past `rows` would read 0 here, never out of bounds.
// scatter_add_f32: 0 params, 4 t_indptr, 5 t_pos, 6 src (read), 7 out_f (write). One
//   invocation per output value i = r * f + j over the transposed index (for each target
//   row r, the positions that hit it, increasing): out_f[i] = Σ src[pos * f + j] in that
//   order. No atomics, so the result is deterministic; rows nothing hits get 0.
// Linear index over the 2-D grid: i = gid.x + gid.y * nwg.x * 256.

struct Params {
    n: u32,     // output values: rows of the output * f
    f: u32,     // features per row
    rows: u32,  // gather: rows of x
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> idx: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
@group(0) @binding(4) var<storage, read> t_indptr: array<u32>;
@group(0) @binding(5) var<storage, read> t_pos: array<u32>;
@group(0) @binding(6) var<storage, read> src: array<f32>;
@group(0) @binding(7) var<storage, read_write> out_f: array<f32>;

fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn gather_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let r = i / p.f;
    let j = i - r * p.f;
    let row = idx[r];
    var v = 0u;
    if row < p.rows {
        v = x[row * p.f + j];
    }
    out[i] = v;
}

@compute @workgroup_size(256)
fn scatter_add_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p.n {
        return;
    }
    let r = i / p.f;
    let j = i - r * p.f;
    var acc = 0.0;
    let end = t_indptr[r + 1u];
    for (var k = t_indptr[r]; k < end; k++) {
        acc += src[t_pos[k] * p.f + j];
    }
    out_f[i] = acc;
}
