//! NVRTC compilation (cached per module) and launch configuration.
//!
//! Kernels are plain `extern "C" __global__` functions named `<fn>_f32` in
//! `kernels/<stem>.cu`; a module is compiled on first use for the device's compute
//! capability, and a compile failure returns the NVRTC log.

use cudarc::driver::{CudaFunction, LaunchConfig};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};

use crate::device::cuda::context::{driver_err, Context};
use crate::error::{Error, Result};

/// Threads per block of 1-D kernels.
pub const BLOCK: u32 = 256;

/// A CUDA entry point: its file stem, its source and its function name.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    pub stem: &'static str,
    pub source: &'static str,
    pub entry: &'static str,
}

impl Context {
    /// The compiled function of `k` (compiles its module on first use).
    pub fn function(&self, k: &Kernel) -> Result<CudaFunction> {
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(k.stem, k.entry))
        {
            return Ok(f.clone());
        }
        let module = {
            let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
            match modules.get(k.stem) {
                Some(m) => m.clone(),
                None => {
                    let (major, minor) = self.compute_capability;
                    let arch: &'static str =
                        Box::leak(format!("sm_{major}{minor}").into_boxed_str());
                    let opts = CompileOptions {
                        arch: Some(arch),
                        ..Default::default()
                    };
                    let ptx = compile_ptx_with_opts(k.source, opts).map_err(|e| match e {
                        CompileError::CompileError { log, .. } => Error::Backend {
                            backend: "cuda",
                            msg: format!(
                                "kernels/{}.cu failed to compile:\n{}",
                                k.stem,
                                log.to_string_lossy()
                            ),
                        },
                        other => Error::Backend {
                            backend: "cuda",
                            msg: format!("kernels/{}.cu: {other:?}", k.stem),
                        },
                    })?;
                    let m = self
                        .cuda
                        .load_module(ptx)
                        .map_err(|e| driver_err(k.stem, e))?;
                    modules.insert(k.stem, m.clone());
                    m
                }
            }
        };
        let f = module
            .load_function(k.entry)
            .map_err(|e| driver_err(k.entry, e))?;
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((k.stem, k.entry), f.clone());
        Ok(f)
    }

    /// A 1-D launch covering `n` threads; kernels loop with a grid stride, so the grid is
    /// capped well below the hardware limit.
    pub fn grid(&self, n: u64) -> LaunchConfig {
        let blocks = n.div_ceil(BLOCK as u64).clamp(1, 65_535 * 8) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}
