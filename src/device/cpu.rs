//! The CPU backend's storage: plain vectors whose bytes are counted by the CPU tracker.
//!
//! Values are f32; f64 exists on the CPU only, so that gradient checks run in double
//! precision through the very same kernels (generic over [`Float`]). Indices are u32.

use crate::device::{Allocation, Device, MemoryTracker};
use crate::error::Result;
use crate::float::Float;

static CPU_MEMORY: MemoryTracker = MemoryTracker::new(Device::Cpu);

/// The CPU's memory tracker.
pub fn memory() -> &'static MemoryTracker {
    &CPU_MEMORY
}

/// Typed CPU data.
#[derive(Debug)]
pub enum CpuData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    U32(Vec<u32>),
    /// Half-precision storage of feature matrices (`--feature-dtype`); widened to f32 by
    /// [`crate::ops::widen`] before any arithmetic.
    F16(Vec<half::f16>),
    BF16(Vec<half::bf16>),
}

impl CpuData {
    /// The dtype's name, for errors.
    pub fn dtype_name(&self) -> &'static str {
        match self {
            CpuData::F32(_) => "f32",
            CpuData::F64(_) => "f64",
            CpuData::U32(_) => "u32",
            CpuData::F16(_) => "f16",
            CpuData::BF16(_) => "bf16",
        }
    }
}

/// A counted CPU allocation.
#[derive(Debug)]
pub struct CpuBuffer {
    pub data: CpuData,
    _alloc: Allocation,
}

impl CpuBuffer {
    /// Counts `data` against the CPU tracker (fails past the budget).
    pub fn new(data: CpuData) -> Result<Self> {
        let bytes = match &data {
            CpuData::F32(v) => std::mem::size_of_val(v.as_slice()),
            CpuData::F64(v) => std::mem::size_of_val(v.as_slice()),
            CpuData::U32(v) => std::mem::size_of_val(v.as_slice()),
            CpuData::F16(v) => std::mem::size_of_val(v.as_slice()),
            CpuData::BF16(v) => std::mem::size_of_val(v.as_slice()),
        } as u64;
        let _alloc = memory().alloc(bytes)?;
        Ok(CpuBuffer { data, _alloc })
    }
}

/// Reserves the bytes of `len` values of `T` before computing them, so that a kernel
/// over budget fails before doing work. Fill the vector, then wrap it with [`CpuBuffer::from_reserved`].
pub fn reserve<T: Copy>(len: usize) -> Result<Allocation> {
    memory().alloc((len * std::mem::size_of::<T>()) as u64)
}

impl CpuBuffer {
    /// Wraps data whose bytes were reserved with [`reserve`].
    pub fn from_reserved(data: CpuData, alloc: Allocation) -> Self {
        CpuBuffer {
            data,
            _alloc: alloc,
        }
    }
}

/// Conversion between typed vectors and [`CpuData`] for generic CPU kernels.
pub trait CpuElem: Copy + Send + Sync + 'static {
    fn wrap(v: Vec<Self>) -> CpuData;
    fn slice(d: &CpuData) -> Option<&[Self]>;
    fn slice_mut(d: &mut CpuData) -> Option<&mut [Self]>;
}

macro_rules! cpu_elem {
    ($t:ty, $v:ident) => {
        impl CpuElem for $t {
            fn wrap(v: Vec<Self>) -> CpuData {
                CpuData::$v(v)
            }
            fn slice(d: &CpuData) -> Option<&[Self]> {
                match d {
                    CpuData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(d: &mut CpuData) -> Option<&mut [Self]> {
                match d {
                    CpuData::$v(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
cpu_elem!(f32, F32);
cpu_elem!(f64, F64);
cpu_elem!(u32, U32);
cpu_elem!(half::f16, F16);
cpu_elem!(half::bf16, BF16);

/// Allocates and fills a counted buffer of `len` floats with `f(i)` in parallel.
pub fn from_fn<T: Float + CpuElem>(len: usize, f: impl Fn(usize) -> T + Sync) -> Result<CpuBuffer> {
    use rayon::prelude::*;
    let alloc = reserve::<T>(len)?;
    let f = &f;
    let v: Vec<T> = if len >= crate::float::PAR_MIN {
        (0..len).into_par_iter().map(f).collect()
    } else {
        (0..len).map(f).collect()
    };
    Ok(CpuBuffer::from_reserved(T::wrap(v), alloc))
}
