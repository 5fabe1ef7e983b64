//! Kernels, their compilation (cached per module) and their launch.
//!
//! Kernels are plain `extern "C" __global__` functions named `<fn>_f32` (or `_u32`) in
//! `kernels/<stem>.cu`, the same stem as the op's `src/ops/<stem>.rs` and
//! `shaders/<stem>.wgsl`. A module is compiled on first use for the device's compute
//! capability (to CUBIN, see [`super::nvrtc`]), with `kernels/prelude.cuh` in front; a
//! compile failure returns an error holding the NVRTC log. Arguments are passed in the
//! order of the kernel's signature as [`Arg`]s: buffers as device pointers, then scalars.

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use crate::device::cuda::{driver_err, Context};
use crate::device::cuda::{nvrtc, CudaBuffer};
use crate::error::{Error, Result};

/// Threads per block of 1-D and warp-per-row kernels.
pub const BLOCK: u32 = 256;

/// A CUDA entry point: its file stem, its source (prelude included) and its name.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    /// File stem: `kernels/<stem>.cu`.
    pub stem: &'static str,
    /// CUDA source, prelude included.
    pub source: &'static str,
    /// Entry point name, e.g. `unary_f32`.
    pub entry: &'static str,
}

/// `cuda_kernel!("unary", "unary_f32")`: the [`Kernel`] for entry `unary_f32` of
/// `kernels/unary.cu`, with `kernels/prelude.cuh` prepended at build time.
#[macro_export]
macro_rules! cuda_kernel {
    ($stem:literal, $entry:literal) => {
        $crate::device::cuda::Kernel {
            stem: $stem,
            source: concat!(
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/prelude.cuh")),
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/kernels/",
                    $stem,
                    ".cu"
                ))
            ),
            entry: $entry,
        }
    };
}

/// One kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// A whole buffer, as a device pointer.
    Buf(&'a CudaBuffer),
    /// A buffer from its `n`-th 4-byte word on, as a device pointer.
    BufAt(&'a CudaBuffer, usize),
    /// A `u32` scalar.
    U32(u32),
    /// A `u64` scalar.
    U64(u64),
    /// An `f32` scalar.
    F32(f32),
}

impl Context {
    /// The compiled function of `k` (compiles its module on first use).
    pub fn function(&self, k: &Kernel) -> Result<CudaFunction> {
        let key = (k.stem, k.entry);
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(f.clone());
        }
        let module = {
            let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
            match modules.get(k.stem) {
                Some(m) => m.clone(),
                None => {
                    let (major, minor) = self.compute_capability;
                    let arch = (major * 10 + minor) as u32;
                    let cubin = nvrtc::compile(&format!("{}.cu", k.stem), k.source, arch).map_err(
                        |log| Error::Backend {
                            backend: "cuda",
                            msg: format!("kernels/{}.cu failed to compile: {log}", k.stem),
                        },
                    )?;
                    let image_bytes = cubin.len() as u64;
                    self.bind()?;
                    let m = self
                        .cuda
                        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
                        .map_err(|e| {
                            // Loading takes device memory for the code: without it, a
                            // split can still run once memory is freed.
                            if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                                self.out_of_memory(image_bytes)
                            } else {
                                driver_err(&format!("loading kernels/{}.cu", k.stem), e)
                            }
                        })?;
                    modules.insert(k.stem, m.clone());
                    m
                }
            }
        };
        let f = module
            .load_function(k.entry)
            .map_err(|e| driver_err(&format!("kernels/{}.cu: {}", k.stem, k.entry), e))?;
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, f.clone());
        Ok(f)
    }

    /// Launches `k` on `cfg` with `args` (in the kernel's parameter order). Returns once the
    /// launch is queued; a fault inside the kernel surfaces at the next synchronisation.
    /// Private to the backend: kernels are launched through their typed argument structs
    /// (`Context::launch_args*` in `args.rs`), never with a positional list.
    pub(super) fn launch(&self, k: &Kernel, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        let f = self.function(k)?;
        // Views first, so that the builder can borrow them for the launch.
        let views: Vec<_> = args
            .iter()
            .filter_map(|a| match a {
                Arg::BufAt(b, off) => Some(b.slice().slice(*off..)),
                _ => None,
            })
            .collect();
        let mut views = views.iter();
        let mut builder = self.stream.launch_builder(&f);
        for a in args {
            match a {
                Arg::Buf(b) => builder.arg(b.slice()),
                Arg::BufAt(..) => builder.arg(views.next().expect("one view per BufAt")),
                Arg::U32(v) => builder.arg(v),
                Arg::U64(v) => builder.arg(v),
                Arg::F32(v) => builder.arg(v),
            };
        }
        // SAFETY: every kernel of kernels/ takes exactly the arguments its op passes (the
        // parity tests run each entry point); buffers are sized by the op before launch and
        // the kernels bound every index by the sizes passed.
        unsafe { builder.launch(cfg) }
            .map_err(|e| driver_err(&format!("launch {}::{}", k.stem, k.entry), e))?;
        Ok(())
    }

    /// Launches `k` over `n` items, one thread each (grid-stride); nothing for `n = 0`.
    pub(super) fn launch_1d(&self, k: &Kernel, n: u64, args: &[Arg]) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.launch(k, self.grid_1d(n), args)
    }

    /// Launches `k` over `rows` rows, one warp each (grid-stride); nothing for `rows = 0`.
    pub(super) fn launch_rows(&self, k: &Kernel, rows: u64, args: &[Arg]) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        self.launch(k, self.grid_rows(rows), args)
    }

    /// Blocks a grid-stride launch needs at most: enough to fill every multiprocessor.
    fn max_blocks(&self) -> u64 {
        (self.sm_count as u64).max(1) * 16
    }

    /// A launch of [`BLOCK`] threads per block covering `n` threads, capped at
    /// `Context::max_blocks` (kernels loop with a grid stride).
    pub fn grid_1d(&self, n: u64) -> LaunchConfig {
        let blocks = n.div_ceil(BLOCK as u64).clamp(1, self.max_blocks()) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// A launch giving each of `rows` rows one warp, capped like [`Context::grid_1d`].
    pub fn grid_rows(&self, rows: u64) -> LaunchConfig {
        self.grid_1d(rows.saturating_mul(32))
    }

    /// A launch giving each of `rows` rows one block of `threads` threads (a multiple of
    /// 32), capped like [`Context::grid_1d`].
    pub fn grid_blocks(&self, rows: u64, threads: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (rows.clamp(1, self.max_blocks()) as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}
