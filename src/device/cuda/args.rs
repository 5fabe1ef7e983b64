//! Typed argument lists of CUDA kernels.
//!
//! A kernel of `kernels/<stem>.cu` takes its arguments by position. Every kernel has a
//! struct below (a test checks that none is missing), which names the kernel (stem and
//! entry point) and has one field per kernel parameter, with the parameter's name and
//! kind, in the order of the kernel's signature; [`CudaArgs::args`] turns it into the
//! [`Arg`] list the launch passes (launch code builds no positional list itself). A unit test parses every listed
//! kernel's signature out of its `.cu` source and checks it against the struct, name by
//! name and kind by kind (device pointer, `u32`, `float`), so an argument cannot be passed
//! in the wrong position or with the wrong type. This is the CUDA twin of
//! [`crate::device::wgpu::params`].

use cudarc::driver::LaunchConfig;

use crate::device::cuda::{Arg, Context, CudaBuffer, Kernel};
use crate::error::Result;

/// A device-pointer argument: a whole buffer, a buffer from its `n`-th 4-byte word on, or
/// null (an optional operand that is absent).
#[derive(Clone, Copy, Debug)]
pub enum Ptr<'a> {
    /// The buffer's first word.
    Whole(&'a CudaBuffer),
    /// The buffer from word `n` on.
    At(&'a CudaBuffer, usize),
    /// A null pointer.
    Null,
}

impl<'a> From<Option<&'a CudaBuffer>> for Ptr<'a> {
    fn from(b: Option<&'a CudaBuffer>) -> Ptr<'a> {
        b.map_or(Ptr::Null, Ptr::Whole)
    }
}

impl<'a> From<&'a CudaBuffer> for Ptr<'a> {
    fn from(b: &'a CudaBuffer) -> Ptr<'a> {
        Ptr::Whole(b)
    }
}

impl<'a> Ptr<'a> {
    fn arg(self) -> Arg<'a> {
        match self {
            Ptr::Whole(b) => Arg::Buf(b),
            Ptr::At(b, n) => Arg::BufAt(b, n),
            // A pointer parameter is 8 bytes: a zero u64 is the null pointer.
            Ptr::Null => Arg::U64(0),
        }
    }
}

/// The kind of a kernel parameter, as its C type says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A device pointer (`float*`, `const u32*`, ...).
    Ptr,
    /// `u32`.
    U32,
    /// `float`.
    F32,
}

/// The arguments of one kernel (see the module docs).
pub trait CudaArgs<'a> {
    /// The kernel they are for.
    const KERNEL: Kernel;
    /// The kernel's parameters: (name, kind), in order.
    const SIGNATURE: &'static [(&'static str, ArgKind)];
    /// The arguments in the kernel's order.
    fn args(&self) -> Vec<Arg<'a>>;
}

macro_rules! cuda_args {
    (@ty ptr) => { Ptr<'a> };
    (@ty u32) => { u32 };
    (@ty f32) => { f32 };
    (@kind ptr) => { ArgKind::Ptr };
    (@kind u32) => { ArgKind::U32 };
    (@kind f32) => { ArgKind::F32 };
    (@arg $v:expr, ptr) => { $v.arg() };
    (@arg $v:expr, u32) => { Arg::U32($v) };
    (@arg $v:expr, f32) => { Arg::F32($v) };
    ($($stem:literal :: $entry:literal => $name:ident { $($field:ident : $kind:ident),* $(,)? })*) => {
        $(
            #[doc = concat!("The arguments of `", $entry, "` in `kernels/", $stem, ".cu`.")]
            #[derive(Clone, Copy, Debug)]
            #[allow(missing_docs)]
            pub struct $name<'a> {
                $(pub $field: cuda_args!(@ty $kind),)*
            }
            impl<'a> CudaArgs<'a> for $name<'a> {
                const KERNEL: Kernel = crate::cuda_kernel!($stem, $entry);
                const SIGNATURE: &'static [(&'static str, ArgKind)] =
                    &[$((stringify!($field), cuda_args!(@kind $kind))),*];
                fn args(&self) -> Vec<Arg<'a>> {
                    vec![$(cuda_args!(@arg self.$field, $kind)),*]
                }
            }
        )*
        /// Every listed kernel: (stem, entry, signature).
        #[cfg(test)]
        pub(crate) const ALL: &[(&str, &str, &[(&str, ArgKind)])] =
            &[$(($stem, $entry, <$name as CudaArgs>::SIGNATURE)),*];
    };
}

cuda_args! {
    "assign"::"fill_u32" => FillArgs { out: ptr, word: u32, n: u32 }
    "cross_entropy"::"ce_rows_f32" => CeRowsArgs {
        x: ptr, labels: ptr, lse: ptr, row_loss: ptr, r: u32, c: u32
    }
    "cross_entropy"::"ce_rows_block_f32" => CeRowsBlockArgs {
        x: ptr, labels: ptr, lse: ptr, row_loss: ptr, r: u32, c: u32
    }
    "cross_entropy"::"ce_mean_f32" => CeMeanArgs {
        labels: ptr, rows: ptr, w: ptr, loss: ptr, status: ptr, r: u32, c: u32, inv_n: f32
    }
    "cross_entropy"::"ce_backward_f32" => CeBackwardArgs {
        x: ptr, labels: ptr, lse: ptr, gl: ptr, w: ptr, gx: ptr, r: u32, c: u32, inv_n: f32
    }
    "cross_entropy"::"ce_weight_grad_f32" => CeWeightGradArgs {
        x: ptr, labels: ptr, lse: ptr, gl: ptr, gw: ptr, r: u32, c: u32, inv_n: f32
    }
    "segment_max"::"segment_max_f32" => SegmentMaxArgs {
        indptr: ptr, indices: ptr, x: ptr, out: ptr, arg: ptr, rows: u32, f: u32
    }
    "segment_max"::"segment_max_backward_f32" => SegmentMaxBackwardArgs {
        t_indptr: ptr, t_dst: ptr, t_edges: ptr, arg: ptr, g: ptr, grad_x: ptr, rows: u32, f: u32
    }
    "segment_weighted_sum"::"segment_weighted_sum_f32" => SegmentWeightedSumArgs {
        indptr: ptr, indices: ptr, x: ptr, a: ptr, out: ptr,
        rows: u32, cols: u32, heads: u32, per_head: u32
    }
    "segment_weighted_sum"::"segment_weighted_sum_backward_x_f32" => SegmentWeightedSumBackwardXArgs {
        t_indptr: ptr, t_dst: ptr, t_edges: ptr, a: ptr, g: ptr, dx: ptr,
        rows: u32, cols: u32, heads: u32, per_head: u32
    }
    "segment_weighted_sum"::"segment_weighted_sum_backward_a_f32" => SegmentWeightedSumBackwardAArgs {
        indptr: ptr, indices: ptr, x: ptr, g: ptr, da: ptr,
        rows: u32, cols: u32, heads: u32, per_head: u32
    }
    "segment_softmax"::"segment_softmax_f32" => SegmentSoftmaxArgs {
        indptr: ptr, x: ptr, y: ptr, num_dst: u32, heads: u32
    }
    "segment_softmax"::"segment_softmax_backward_f32" => SegmentSoftmaxBackwardArgs {
        indptr: ptr, y: ptr, g: ptr, dx: ptr, num_dst: u32, heads: u32
    }
    "lstm_aggregate"::"lstm_step_f32" => LstmStepArgs {
        xw: ptr, idx: ptr, hw: ptr, acts: ptr, cs: ptr, h_next: ptr, out: ptr, dst: ptr,
        m: u32, h: u32, k: u32, t: u32, offset: u32
    }
    "lstm_aggregate"::"lstm_step_backward_f32" => LstmStepBackwardArgs {
        acts: ptr, cs: ptr, grad: ptr, dst: ptr, dh: ptr, dc: ptr, dz: ptr, dxg: ptr,
        m: u32, h: u32, k: u32, t: u32, offset: u32
    }
    "index_select"::"gather_u32" => GatherArgs {
        idx: ptr, x: ptr, out: ptr, m: u32, f: u32, rows: u32
    }
    "index_select"::"scatter_add_f32" => ScatterAddArgs {
        t_indptr: ptr, t_pos: ptr, src: ptr, out: ptr, n: u32, f: u32
    }
    "matmul"::"matmul_f32" => MatmulArgs {
        a: ptr, b: ptr, c: ptr, m: u32, n: u32, k: u32, ta: u32, tb: u32
    }
    "segment_sum"::"segment_sum_f32" => SegmentSumArgs {
        indptr: ptr, indices: ptr, x: ptr, out: ptr, rows: u32, f: u32, mean: u32
    }
    "segment_sum"::"segment_sum_backward_f32" => SegmentSumBackwardArgs {
        indptr: ptr, t_indptr: ptr, t_dst: ptr, g: ptr, grad_x: ptr, rows: u32, f: u32, mean: u32
    }
    "reduce"::"sum_rows_f32" => SumRowsArgs {
        x: ptr, out: ptr, r: u32, c: u32, nb: u32, chunk: u32
    }
    "reduce"::"sum_rows_small_f32" => SumRowsSmallArgs { x: ptr, out: ptr, r: u32, c: u32 }
    "reduce"::"sum_cols_f32" => SumColsArgs { x: ptr, out: ptr, r: u32, c: u32, rows_per: u32 }
    "reduce"::"expand_f32" => ExpandArgs { v: ptr, out: ptr, c: u32, dim: u32, n: u32 }
    "sgd"::"sgd_f32" => SgdArgs { param: ptr, grad: ptr, lr: f32, wd: f32, n: u32 }
    "sgd"::"sgd_momentum_f32" => SgdMomentumArgs {
        param: ptr, grad: ptr, velocity: ptr, lr: f32, mu: f32, wd: f32, first: u32, n: u32
    }
    "adam"::"adam_f32" => AdamArgs {
        param: ptr, grad: ptr, m1: ptr, m2: ptr, lr: f32, b1: f32, b2: f32, eps: f32, wd: f32,
        bc1: f32, bc2: f32, shrink: f32, decoupled: u32, n: u32
    }
    "unary"::"unary_f32" => UnaryArgs { x: ptr, out: ptr, op: u32, a: f32, n: u32 }
    "unary"::"unary_backward_f32" => UnaryBackwardArgs {
        g: ptr, s: ptr, out: ptr, op: u32, a: f32, n: u32
    }
    "binary"::"binary_f32" => BinaryArgs {
        a: ptr, b: ptr, out: ptr, cols: u32, op: u32, bcast: u32, n: u32
    }
    "widen"::"widen_f16_f32" => WidenF16Args { x: ptr, out: ptr, n: u32 }
    "widen"::"widen_bf16_f32" => WidenBf16Args { x: ptr, out: ptr, n: u32 }
    "argmax"::"argmax_rows_f32" => ArgmaxRowsArgs { x: ptr, out: ptr, r: u32, c: u32 }
    "dropout"::"dropout_f32" => DropoutArgs {
        x: ptr, out: ptr, c: u32, key: u32, threshold: f32, scale: f32, n: u32
    }
    "dropout"::"dropout_ids_f32" => DropoutIdsArgs {
        x: ptr, out: ptr, ids: ptr, c: u32, key: u32, threshold: f32, scale: f32, n: u32
    }
    "log_softmax"::"log_softmax_f32" => LogSoftmaxArgs { x: ptr, out: ptr, r: u32, c: u32 }
    "log_softmax"::"log_softmax_block_f32" => LogSoftmaxBlockArgs {
        x: ptr, out: ptr, r: u32, c: u32
    }
    "log_softmax"::"log_softmax_backward_f32" => LogSoftmaxBackwardArgs {
        g: ptr, y: ptr, gx: ptr, r: u32, c: u32
    }
    "log_softmax"::"log_softmax_backward_block_f32" => LogSoftmaxBackwardBlockArgs {
        g: ptr, y: ptr, gx: ptr, r: u32, c: u32
    }
    "lstm_cell"::"lstm_cell_forward_f32" => LstmCellForwardArgs {
        gates: ptr, c_prev: ptr, out: ptr, acts: ptr, n: u32, h: u32
    }
    "lstm_cell"::"lstm_cell_backward_f32" => LstmCellBackwardArgs {
        acts: ptr, c_prev: ptr, grad: ptr, dgates: ptr, dc_prev: ptr, n: u32, h: u32
    }
    "slice"::"slice_cols_u32" => SliceColsArgs {
        src: ptr, dst: ptr, c: u32, start: u32, len: u32, n: u32
    }
    "slice"::"slice_pad_f32" => SlicePadArgs {
        g: ptr, out: ptr, c: u32, start: u32, len: u32, dim: u32, n: u32
    }
    "concat"::"concat_cols_u32" => ConcatColsArgs {
        src: ptr, dst: ptr, n: u32, width: u32, dst_cols: u32, col0: u32
    }
    "binary"::"add_assign_f32" => AddAssignArgs { src: ptr, dst: ptr, n: u32 }
    "lstm_aggregate"::"lstm_hprev_f32" => LstmHprevArgs {
        acts: ptr, cs: ptr, steps: ptr, hprev: ptr, rows: u32, h: u32
    }
}

impl Context {
    /// Launches the kernel of `args` on `cfg`.
    pub fn launch_args<'a, A: CudaArgs<'a>>(&self, args: &A, cfg: LaunchConfig) -> Result<()> {
        self.launch(&A::KERNEL, cfg, &args.args())
    }

    /// Launches the kernel of `args` over `n` items, a thread each; nothing for `n = 0`.
    pub fn launch_args_1d<'a, A: CudaArgs<'a>>(&self, args: &A, n: u64) -> Result<()> {
        self.launch_1d(&A::KERNEL, n, &args.args())
    }

    /// Launches the kernel of `args` over `rows` rows, a warp each; nothing for `rows = 0`.
    pub fn launch_args_rows<'a, A: CudaArgs<'a>>(&self, args: &A, rows: u64) -> Result<()> {
        self.launch_rows(&A::KERNEL, rows, &args.args())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parameters (name, kind) of `entry` as `kernels/<stem>.cu` declares it.
    fn cu_signature(stem: &str, entry: &str) -> Vec<(String, ArgKind)> {
        let path = format!("{}/kernels/{stem}.cu", env!("CARGO_MANIFEST_DIR"));
        let source = std::fs::read_to_string(&path).unwrap();
        let head = format!("__global__ void {entry}(");
        let start = source
            .find(&head)
            .unwrap_or_else(|| panic!("{path}: no kernel {entry}"))
            + head.len();
        let end = start + source[start..].find(')').unwrap();
        source[start..end]
            .split(',')
            .map(|param| {
                let param = param.split_whitespace().collect::<Vec<_>>().join(" ");
                let (ty, name) = param.rsplit_once(' ').unwrap();
                let (ty, name) = (
                    format!("{ty}{}", "*".repeat(name.matches('*').count())),
                    name,
                );
                let kind = match ty.trim_start_matches("const ") {
                    t if t.ends_with('*') => ArgKind::Ptr,
                    "u32" => ArgKind::U32,
                    "float" => ArgKind::F32,
                    other => panic!("{path}: {entry}: parameter type `{other}` is not handled"),
                };
                (name.trim_start_matches('*').to_string(), kind)
            })
            .collect()
    }

    #[test]
    fn every_args_struct_matches_its_kernel_signature_name_by_name() {
        for (stem, entry, signature) in ALL {
            let want = cu_signature(stem, entry);
            let got: Vec<(String, ArgKind)> =
                signature.iter().map(|(n, k)| (n.to_string(), *k)).collect();
            assert_eq!(
                got, want,
                "kernels/{stem}.cu: {entry}'s parameters and its Rust args struct differ"
            );
        }
    }

    #[test]
    fn every_kernel_of_kernels_has_an_args_struct() {
        let dir = format!("{}/kernels", env!("CARGO_MANIFEST_DIR"));
        let mut kernels = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "cu") {
                let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
                let source = std::fs::read_to_string(&path).unwrap();
                for part in source.split("__global__ void ").skip(1) {
                    let entry = part.split('(').next().unwrap().trim().to_string();
                    kernels.push((stem.clone(), entry));
                }
            }
        }
        // 48 before the weighted cross-entropy kernels merged into their unweighted twins.
        assert!(kernels.len() >= 46, "found only {} kernels", kernels.len());
        for (stem, entry) in &kernels {
            assert!(
                ALL.iter().any(|(s, e, _)| s == stem && e == entry),
                "kernels/{stem}.cu: {entry} has no args struct in src/device/cuda/args.rs"
            );
        }
    }

    #[test]
    fn the_signature_parser_reads_pointers_scalars_and_names() {
        assert_eq!(
            cu_signature("assign", "fill_u32"),
            vec![
                ("out".to_string(), ArgKind::Ptr),
                ("word".to_string(), ArgKind::U32),
                ("n".to_string(), ArgKind::U32),
            ]
        );
        let ce = cu_signature("cross_entropy", "ce_mean_f32");
        assert_eq!(ce[0], ("labels".to_string(), ArgKind::Ptr));
        assert_eq!(ce[2], ("w".to_string(), ArgKind::Ptr));
        assert_eq!(ce[7], ("inv_n".to_string(), ArgKind::F32));
    }
}
