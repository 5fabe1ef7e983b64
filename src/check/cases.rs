//! The dense ops' cases: seeded inputs at the sizes and values kernels get wrong, built once
//! for `espalier check` (`ops.rs`, which compares them as records) and the parity tests
//! (`tests/parity_dense.rs`, which assert on them).

use super::zoo::{rand_away_f32, rand_f32, rand_idx};
use crate::device::Device;
use crate::error::Result;
use crate::ops;
use crate::tensor::{DType, Tensor};

/// An op of two tensors.
pub type Binary = fn(&Tensor, &Tensor) -> Result<Tensor>;
/// An op of one tensor.
pub type Unary = fn(&Tensor) -> Result<Tensor>;
/// An op of its input tensors.
pub type Op = Box<dyn Fn(&[Tensor]) -> Result<Tensor>>;

/// One case: its label, the op and the CPU tensors it runs on.
pub struct Case {
    /// What the case tries (shape, layout, edge).
    pub label: String,
    /// The op.
    pub op: Op,
    /// Its inputs.
    pub inputs: Vec<Tensor>,
}

impl Case {
    fn new(
        label: impl Into<String>,
        op: impl Fn(&[Tensor]) -> Result<Tensor> + 'static,
        inputs: Vec<Tensor>,
    ) -> Case {
        Case {
            label: label.into(),
            op: Box::new(op),
            inputs,
        }
    }
}

/// Lengths every elementwise op is tried at (`full`: one more).
pub fn sizes(full: bool) -> &'static [usize] {
    if full {
        &[1, 63, 257, 4097]
    } else {
        &[1, 257, 4097]
    }
}

/// The elementwise ops of two tensors.
pub fn binaries() -> [(&'static str, Binary); 4] {
    [
        ("add", ops::add),
        ("sub", ops::sub),
        ("mul", ops::mul),
        ("div", ops::div),
    ]
}

/// The operands of a binary op at about `n` values: `rows`x16 against each broadcast of
/// the second operand (same shape, a row, a column, a scalar), labelled.
pub fn broadcasts(n: usize) -> Result<Vec<(String, [Tensor; 2])>> {
    let rows = n.div_ceil(16);
    let a = rand_f32(&[rows, 16], n as u64)?;
    let cases = [
        ("same", rand_away_f32(&[rows, 16], 1)?),
        ("row", rand_away_f32(&[16], 2)?),
        ("col", rand_away_f32(&[rows, 1], 3)?),
        ("scalar", rand_away_f32(&[1], 4)?),
    ];
    Ok(cases
        .into_iter()
        .map(|(bc, b)| (format!("{rows}x16, {bc} broadcast"), [a.clone(), b]))
        .collect())
}

/// Two vectors of 65,536 workgroups of 256 values plus one: the grid must go 2-D.
pub fn past_one_grid_dimension() -> Result<[Tensor; 2]> {
    let n = 65_536 * 256 + 1;
    Ok([rand_f32(&[n], 5)?, rand_f32(&[n], 6)?])
}

/// The elementwise ops of one tensor.
pub fn unaries() -> [(&'static str, Unary); 10] {
    [
        ("neg", ops::neg),
        ("relu", ops::relu),
        ("leaky_relu", |x| ops::leaky_relu(x, 0.1)),
        ("elu", |x| ops::elu(x, 0.7)),
        ("sigmoid", ops::sigmoid),
        ("tanh", ops::tanh),
        ("exp", ops::exp),
        ("log", ops::log),
        ("add_scalar", |x| ops::add_scalar(x, 0.25)),
        ("mul_scalar", |x| ops::mul_scalar(x, -1.5)),
    ]
}

/// The input of unary op `name` at `n` values: in (0.5, 1.5] for `log`, else in ±[3, 9)
/// so that tanh and sigmoid reach their flat tails too.
pub fn unary_input(name: &str, n: usize) -> Result<Tensor> {
    if name == "log" {
        positive(&[n], n as u64)
    } else {
        ops::mul_scalar(&rand_away_f32(&[n], n as u64)?, 6.0)
    }
}

/// Edge values of elementwise ops: large finite, ±inf, ±0, and NaN when `nan`.
pub fn specials(nan: bool) -> Result<Tensor> {
    let mut v = vec![
        -100.0,
        -30.0,
        -1.0,
        -0.0,
        0.0,
        1.0,
        30.0,
        100.0,
        3e38,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    if nan {
        v.push(f32::NAN);
    }
    let n = v.len();
    Tensor::from_f32(v, &[n], Device::Cpu)
}

/// Every pair of NaN, ±inf, ±0, ±1 and 3e38 (whose sum and product overflow), as two
/// vectors of the same length.
pub fn special_pairs() -> Result<(Tensor, Tensor)> {
    let v = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        3e38,
    ];
    let a: Vec<f32> = v.iter().flat_map(|&x| v.iter().map(move |_| x)).collect();
    let b: Vec<f32> = v.iter().flat_map(|_| v.iter().copied()).collect();
    let n = a.len();
    Ok((
        Tensor::from_f32(a, &[n], Device::Cpu)?,
        Tensor::from_f32(b, &[n], Device::Cpu)?,
    ))
}

/// Values in (0.5, 1.5]: inputs of `log`, per-row weights.
pub fn positive(shape: &[usize], seed: u64) -> Result<Tensor> {
    let v = rand_away_f32(shape, seed)?.to_vec_f32()?;
    Tensor::from_f32(v.iter().map(|x| x.abs()).collect(), shape, Device::Cpu)
}

/// `matmul` at shapes m x k x n from one element to several tiles (`full`: more), each
/// with both operands plain and transposed.
pub fn matmul(full: bool) -> Result<Vec<Case>> {
    let mut shapes = vec![(1, 1, 1), (63, 257, 5), (257, 63, 129), (130, 1, 3)];
    if full {
        shapes.extend([(1, 63, 257), (64, 64, 64), (1000, 300, 47)]);
    }
    let mut out = Vec::new();
    for (i, &(m, k, n)) in shapes.iter().enumerate() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a_shape = if ta { [k, m] } else { [m, k] };
            let b_shape = if tb { [n, k] } else { [k, n] };
            let a = rand_f32(&a_shape, 10 + i as u64)?;
            let b = rand_f32(&b_shape, 20 + i as u64)?;
            out.push(Case::new(
                format!("{m}x{k}x{n} ta={ta} tb={tb}"),
                move |x| ops::matmul(&x[0], &x[1], ta, tb),
                vec![a, b],
            ));
        }
    }
    Ok(out)
}

/// The first rows of `a` times `b`, read in place (a SAGE layer's self term): the rows
/// kept, none, and all of them.
pub fn matmul_rows() -> Result<Vec<Case>> {
    let mut out = Vec::new();
    for (i, &(m, rows, k, n)) in [(257, 63, 65, 5), (63, 0, 4, 3), (5, 5, 1, 1)]
        .iter()
        .enumerate()
    {
        let a = rand_f32(&[m, k], 35 + i as u64)?;
        let b = rand_f32(&[k, n], 38 + i as u64)?;
        out.push(Case::new(
            format!("rows {rows} of {m}x{k} times {k}x{n}"),
            move |x| ops::matmul_rows(&x[0], rows, &x[1]),
            vec![a, b],
        ));
    }
    Ok(out)
}

/// A matmul of 65,536 tiles of 64 rows (m x 1 times 1 x 2): the row blocks fold into the
/// grid's z dimension.
pub fn matmul_tall() -> Result<[Tensor; 2]> {
    let m = 64 * 65_535 + 1;
    Ok([rand_f32(&[m, 1], 30)?, rand_f32(&[1, 2], 31)?])
}

/// The reductions over rows, columns and all values.
pub fn reductions() -> [(&'static str, Unary); 5] {
    [
        ("sum_dim 0", |x| ops::sum_dim(x, 0)),
        ("sum_dim 1", |x| ops::sum_dim(x, 1)),
        ("mean_dim 0", |x| ops::mean_dim(x, 0)),
        ("sum_all", ops::sum_all),
        ("mean_all", ops::mean_all),
    ]
}

/// The inputs of the reductions, labelled by shape: short and long rows, tall and wide
/// matrices (one pass and several), and empty extents (`full`: more).
pub fn reduction_inputs(full: bool) -> Result<Vec<(String, Tensor)>> {
    let mut shapes = vec![[1usize, 1], [63, 257], [4097, 3], [3, 4097], [0, 5], [5, 0]];
    if full {
        shapes.extend([[257, 63], [1, 70_000], [5000, 2]]);
    }
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| Ok((format!("{}x{}", s[0], s[1]), rand_f32(s, 40 + i as u64)?)))
        .collect()
}

/// `expand_dim` of a vector of `n` values to 7 rows and to 5 columns.
pub fn expand(n: usize) -> Result<Vec<Case>> {
    let v = rand_f32(&[n], 50)?;
    Ok(vec![
        Case::new(
            format!("{n} to rows"),
            |x| ops::expand_dim(&x[0], 0, 7),
            vec![v.clone()],
        ),
        Case::new(
            format!("{n} to columns"),
            |x| ops::expand_dim(&x[0], 1, 5),
            vec![v],
        ),
    ])
}

/// `log_softmax` of logits in ±8 at short, long and many rows (`full`: more).
pub fn log_softmax(full: bool) -> Result<Vec<Case>> {
    let mut shapes = vec![[1usize, 1], [63, 257], [4097, 5]];
    if full {
        shapes.extend([[257, 10], [2, 1000]]);
    }
    let mut out = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        let x = ops::mul_scalar(&rand_f32(s, 70 + i as u64)?, 8.0)?;
        out.push(Case::new(
            format!("{}x{}", s[0], s[1]),
            |x| ops::log_softmax(&x[0]),
            vec![x],
        ));
    }
    Ok(out)
}

/// Rows of logits at the edges of `log_softmax`: huge, a -inf, nothing but -inf, a NaN
/// and a +inf.
pub fn log_softmax_edges() -> Result<Tensor> {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    #[rustfmt::skip]
    let v = vec![
        1000., 1001., 999.,  // huge logits
        -inf, 0., 1.,        // a -inf logit
        -inf, -inf, -inf,    // nothing but -inf
        1., nan, 2.,         // NaN propagates
        inf, 0., 1.,         // +inf
    ];
    Tensor::from_f32(v, &[5, 3], Device::Cpu)
}

/// `cross_entropy` without and with per-row weights at n x k logits in ±5 (`full`: more).
pub fn cross_entropy(full: bool) -> Result<Vec<Case>> {
    let mut shapes = vec![(1, 1), (63, 257), (4097, 7)];
    if full {
        shapes.push((257, 10));
    }
    let mut out = Vec::new();
    for (i, &(n, k)) in shapes.iter().enumerate() {
        let x = ops::mul_scalar(&rand_f32(&[n, k], 80 + i as u64)?, 5.0)?;
        let y = rand_idx(n, k as u32, 90 + i as u64)?;
        let w = positive(&[n], 100 + i as u64)?;
        out.push(Case::new(
            format!("{n}x{k}"),
            |x| ops::cross_entropy(&x[0], &x[1], None),
            vec![x.clone(), y.clone()],
        ));
        out.push(Case::new(
            format!("{n}x{k} weighted"),
            |x| ops::cross_entropy(&x[0], &x[1], Some(&x[2])),
            vec![x, y, w],
        ));
    }
    Ok(out)
}

/// `cross_entropy` of logits near 1000, whose exponentials overflow unless shifted.
pub fn cross_entropy_huge_logits() -> Result<Case> {
    let x = Tensor::from_f32(vec![1000., 1000., 999., 0.], &[2, 2], Device::Cpu)?;
    let y = Tensor::from_u32(vec![0, 1], &[2], Device::Cpu)?;
    Ok(Case::new(
        "huge logits",
        |x| ops::cross_entropy(&x[0], &x[1], None),
        vec![x, y],
    ))
}

/// 300 rows of 4 classes whose labels are in range but for row 257 (label 4) and row 299
/// (label 1,000,000): the logits and the labels, on the CPU.
pub fn bad_labels() -> Result<(Tensor, Tensor)> {
    let x = rand_f32(&[300, 4], 110)?;
    let mut labels: Vec<u32> = (0..300).map(|i| i % 4).collect();
    labels[257] = 4;
    labels[299] = 1_000_000;
    Ok((x, Tensor::from_u32(labels, &[300], Device::Cpu)?))
}

/// Inputs of `argmax_rows`: many ties and two NaN in one row, one value, a wide matrix,
/// rows of nothing but -inf.
pub fn argmax_rows() -> Result<Vec<(&'static str, Tensor)>> {
    let mut v: Vec<f32> = rand_f32(&[4097, 10], 120)?
        .to_vec_f32()?
        .iter()
        .map(|x| (x * 3.0).round()) // few distinct values: many ties
        .collect();
    v[57] = f32::NAN;
    v[58] = f32::NAN;
    Ok(vec![
        ("ties, NaN", Tensor::from_f32(v, &[4097, 10], Device::Cpu)?),
        ("1x1", rand_f32(&[1, 1], 121)?),
        ("63x257", rand_f32(&[63, 257], 122)?),
        (
            "-inf rows",
            Tensor::from_f32(vec![f32::NEG_INFINITY; 6], &[2, 3], Device::Cpu)?,
        ),
    ])
}

/// One input of `dropout`.
pub struct DropoutCase {
    /// Its index (part of the mask's key).
    pub index: u64,
    /// Rows and columns.
    pub shape: [usize; 2],
    /// The values.
    pub x: Tensor,
    /// A row id per row.
    pub ids: Tensor,
}

/// Inputs of `dropout`: one value, a wide and a tall matrix.
pub fn dropout_inputs() -> Result<Vec<DropoutCase>> {
    let mut out = Vec::new();
    for (i, s) in [[1usize, 1], [63, 257], [4097, 17]].iter().enumerate() {
        out.push(DropoutCase {
            index: i as u64,
            shape: *s,
            x: rand_f32(s, 130 + i as u64)?,
            ids: rand_idx(s[0], u32::MAX, 140 + i as u64)?,
        });
    }
    Ok(out)
}

/// `concat` of three matrices along rows (`dim 0`) and along columns (`dim 1`), of one
/// row or column and many.
pub fn concat() -> Result<Vec<Case>> {
    let rows = vec![
        rand_f32(&[1, 63], 150)?,
        rand_f32(&[63, 63], 151)?,
        rand_f32(&[257, 63], 152)?,
    ];
    let cols = vec![
        rand_f32(&[257, 1], 153)?,
        rand_f32(&[257, 63], 154)?,
        rand_f32(&[257, 5], 155)?,
    ];
    Ok(vec![
        Case::new("dim 0", |x| ops::concat(&[&x[0], &x[1], &x[2]], 0), rows),
        Case::new("dim 1", |x| ops::concat(&[&x[0], &x[1], &x[2]], 1), cols),
    ])
}

/// A 257x3 u32 matrix: integers move through `concat` and `slice` as words too.
pub fn u32_matrix() -> Result<Tensor> {
    ops::reshape(&rand_idx(257 * 3, 1000, 157)?, &[257, 3])
}

/// `slice` of a 257x63 matrix along each dim: (dim, start, len) ranges of many, up to the
/// end, and one.
pub fn slices(ranges: &[(usize, usize, usize)]) -> Result<Vec<Case>> {
    let x = rand_f32(&[257, 63], 156)?;
    Ok(ranges
        .iter()
        .map(|&(dim, start, len)| {
            Case::new(
                format!("dim {dim} {start}+{len}"),
                move |x| ops::slice(&x[0], dim, start, len),
                vec![x.clone()],
            )
        })
        .collect())
}

/// The slices `espalier check` tries: within, at the end, of each dim.
pub const SLICES: [(usize, usize, usize); 4] = [(0, 5, 100), (0, 256, 1), (1, 3, 60), (1, 62, 1)];

/// The optimizers [`optimize`] runs.
pub const OPTIMIZERS: [&str; 4] = ["sgd", "momentum", "adam", "adamw"];

/// `steps` optimizer updates (`kind`, one of [`OPTIMIZERS`]) from the same parameters and
/// gradients on `dev`: the parameters, then the optimizer's state.
pub fn optimize(dev: Device, n: usize, steps: usize, kind: &str) -> Result<Vec<f32>> {
    let p = rand_f32(&[n], 160)?.to_device(dev)?;
    let state = (0..2)
        .map(|_| Tensor::zeros(&[n], DType::F32, dev))
        .collect::<Result<Vec<_>>>()?;
    for t in 1..=steps {
        let g = rand_f32(&[n], 170 + t as u64)?.to_device(dev)?;
        match kind {
            "sgd" | "momentum" => {
                let momentum = if kind == "sgd" { 0.0 } else { 0.9 };
                let h = ops::SgdStep {
                    lr: 0.1,
                    momentum,
                    weight_decay: 0.01,
                    first: t == 1,
                };
                let vel = (momentum > 0.0).then_some(&state[0]);
                ops::sgd_update(&p, &g, vel, h)?;
            }
            _ => {
                let h = ops::AdamStep {
                    lr: 0.01,
                    beta1: 0.9,
                    beta2: 0.999,
                    eps: 1e-8,
                    weight_decay: 0.05,
                    decoupled: kind == "adamw",
                    step: t as u64,
                };
                ops::adam_update(&p, &g, &state[0], &state[1], h)?;
            }
        }
    }
    let mut out = p.to_vec_f32()?;
    for s in &state {
        out.extend(s.to_vec_f32()?);
    }
    Ok(out)
}
