//! The CPU backend's storage: plain vectors whose bytes are counted by the CPU tracker.
//!
//! Values are f32; f64 exists on the CPU only, so that gradient checks run in double
//! precision through the very same kernels (generic over [`Float`]). Indices are u32.

use crate::device::{Allocation, Device, MemoryTracker};
use crate::error::{Error, Result};
use crate::float::Float;

static CPU_MEMORY: MemoryTracker = MemoryTracker::new(Device::Cpu);

/// The CPU's memory tracker.
pub fn memory() -> &'static MemoryTracker {
    &CPU_MEMORY
}

/// Typed CPU data.
#[derive(Debug)]
pub enum CpuData {
    /// f32 values.
    F32(Vec<f32>),
    /// f64 values (gradient checks).
    F64(Vec<f64>),
    /// u32 indices.
    U32(Vec<u32>),
    /// Half-precision storage of feature matrices (`--feature-dtype`); widened to f32 by
    /// [`crate::ops::widen`] before any arithmetic.
    F16(Vec<half::f16>),
    /// bfloat16 storage of feature matrices, widened like `F16`.
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
    /// The values.
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
    memory().alloc(bytes_of::<T>(len)?)
}

/// Bytes of `len` values of `T`; a count whose bytes do not fit in 64 bits is out of
/// memory, not an overflow.
fn bytes_of<T>(len: usize) -> Result<u64> {
    (len as u64)
        .checked_mul(std::mem::size_of::<T>() as u64)
        .ok_or_else(|| refused(u64::MAX))
}

/// The error for an allocation of `bytes` the system allocator refused.
fn refused(bytes: u64) -> Error {
    Error::OutOfMemory {
        device: Device::Cpu,
        requested: bytes,
        live: memory().live(),
        budget: crate::error::NO_BUDGET,
    }
}

/// An empty vector with room for `len` values of `T`, or [`Error::OutOfMemory`] when the
/// system cannot give that much (instead of aborting the process, as `Vec::with_capacity`
/// does). Every CPU buffer whose size comes from user input is allocated through here.
pub fn try_vec<T>(len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| refused(bytes_of::<T>(len).unwrap_or(u64::MAX)))?;
    Ok(v)
}

/// `len` copies of `value`, allocated as [`try_vec`].
pub fn try_filled<T: Clone>(len: usize, value: T) -> Result<Vec<T>> {
    let mut v = try_vec(len)?;
    v.resize(len, value);
    Ok(v)
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
pub trait CpuElem: Copy + Send + Sync + bytemuck::Pod + 'static {
    /// Wraps a vector as [`CpuData`].
    fn wrap(v: Vec<Self>) -> CpuData;
    /// The values, if `d` holds this type.
    fn slice(d: &CpuData) -> Option<&[Self]>;
    /// The values, mutable, if `d` holds this type.
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
    let mut v: Vec<T> = try_vec(len)?;
    if len >= crate::float::PAR_MIN {
        v.par_extend((0..len).into_par_iter().map(f));
    } else {
        v.extend((0..len).map(f));
    }
    Ok(CpuBuffer::from_reserved(T::wrap(v), alloc))
}
