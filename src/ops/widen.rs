//! Widening of half-precision feature matrices: `out[i] = f32(x[i])` for `x` in f16 or
//! bf16 (exact: every half value is an f32 value).
//!
//! With `--feature-dtype f16|bf16` the host keeps the feature matrix in half precision,
//! gathers a micro-batch's rows in half precision and uploads them (half the bytes of
//! f32 over the bus); this op then widens them on the device, so every later op sees f32.
//! Features are inputs, never trained: the op records no backward.
//!
//! GPU buffers hold two half values per 32-bit word (little-endian). The kernels
//! (`shaders/widen.wgsl`, `kernels/widen.cu`) give one thread a word, that is two outputs.
//! WGSL widens f16 by moving its bits (not with `unpack2x16float`, which needs a
//! capability some downlevel adapters lack), so no adapter needs an optional feature; bf16
//! is the top half of an f32 and widens by a shift.

use rayon::prelude::*;

use crate::device::cpu::{self, CpuBuffer, CpuData};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::widen::WidenKernels;
use crate::error::{Error, Result};
use crate::float::PAR_MIN;
use crate::ops::gpu::GpuTensors;
use crate::tensor::{DType, Storage, Tensor};

/// `x` as f32, on its device: f16 and bf16 are widened, f32 is returned as is.
pub fn widen(x: &Tensor) -> Result<Tensor> {
    const OP: &str = "widen";
    let bf16 = match x.dtype() {
        DType::F32 => return Ok(x.clone()),
        DType::F16 => false,
        DType::BF16 => true,
        other => {
            return Err(Error::DType {
                op: OP,
                expected: "f16 or bf16",
                got: other.name(),
            })
        }
    };
    let n = x.numel();
    let storage = match &*x.storage() {
        Storage::Cpu(b) => Storage::Cpu(match &b.data {
            CpuData::F16(v) => widen_cpu(v, half::f16::to_f32)?,
            CpuData::BF16(v) => widen_cpu(v, half::bf16::to_f32)?,
            other => {
                return Err(Error::DType {
                    op: OP,
                    expected: "f16 or bf16",
                    got: other.dtype_name(),
                })
            }
        }),
        s => on_gpu!(s, |D, b| D::storage(D::context_of(b).widen(b, n, bf16)?)),
    };
    Ok(Tensor::from_storage(
        storage,
        x.shape().to_vec(),
        DType::F32,
        x.device(),
    ))
}

fn widen_cpu<H: Copy + Sync>(x: &[H], f: impl Fn(H) -> f32 + Sync) -> Result<CpuBuffer> {
    let alloc = cpu::reserve::<f32>(x.len())?;
    let out: Vec<f32> = if x.len() >= PAR_MIN {
        x.par_iter().map(|&h| f(h)).collect()
    } else {
        x.iter().map(|&h| f(h)).collect()
    };
    Ok(CpuBuffer::from_reserved(CpuData::F32(out), alloc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    #[test]
    fn widening_is_exact_and_keeps_the_shape() {
        let vals = [0.0f32, -1.5, 65504.0, 1e-4, -0.333, 3.0e38];
        let h: Vec<half::f16> = vals.iter().map(|&v| half::f16::from_f32(v)).collect();
        let t = Tensor::from_f16(h.clone(), &[2, 3], Device::Cpu).unwrap();
        let w = widen(&t).unwrap();
        assert_eq!(w.dtype(), DType::F32);
        assert_eq!(w.shape(), &[2, 3]);
        let want: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
        assert_eq!(w.to_vec_f32().unwrap(), want);
        let b: Vec<half::bf16> = vals.iter().map(|&v| half::bf16::from_f32(v)).collect();
        let t = Tensor::from_bf16(b.clone(), &[6], Device::Cpu).unwrap();
        let want: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
        assert_eq!(widen(&t).unwrap().to_vec_f32().unwrap(), want);
    }

    #[test]
    fn f32_passes_through_and_other_dtypes_are_errors() {
        let x = Tensor::from_f32(vec![1.0, 2.0], &[2], Device::Cpu).unwrap();
        assert!(widen(&x).unwrap().shares_storage(&x));
        let i = Tensor::from_u32(vec![1, 2], &[2], Device::Cpu).unwrap();
        assert!(matches!(widen(&i), Err(Error::DType { .. })));
        // Half tensors are storage only: arithmetic asks for f32.
        let h = Tensor::from_f16(vec![half::f16::ONE; 2], &[2], Device::Cpu).unwrap();
        assert!(matches!(crate::ops::relu(&h), Err(Error::DType { .. })));
    }
}
