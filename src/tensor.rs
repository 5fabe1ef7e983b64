//! Tensors: a shape, a dtype, a device, shared storage and an autograd link.
//!
//! Tensors are contiguous and row-major. Values are f32 (f64 on the CPU, for gradient
//! checks); indices are u32. A tensor is immutable except for parameters, whose storage the
//! optimizers update in place. Cloning a tensor is cheap (it shares everything).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::autograd::{self, Node};
use crate::device::add;
use crate::device::cpu::{self, CpuBuffer, CpuData, CpuElem};
use crate::device::cuda::{self as cuda_dev, CudaBuffer};
use crate::device::wgpu::{self as wgpu_dev, WgpuBuffer};
use crate::device::Device;
use crate::error::{Error, Result};

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// CPU only: for gradient checks in double precision.
    F64,
    /// 32-bit unsigned index.
    U32,
    /// IEEE half precision: storage of feature matrices only (`--feature-dtype f16`),
    /// widened to f32 by the `widen` op. GPU buffers hold two values per word.
    F16,
    /// bfloat16: as [`DType::F16`], with f32's exponent range and 8 bits of mantissa.
    BF16,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F64 => 8,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Name as used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::U32 => "u32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// True for value types (f32, f64).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
}

/// A tensor's data on its device.
#[derive(Debug)]
pub enum Storage {
    /// On the CPU.
    Cpu(CpuBuffer),
    /// On a wgpu adapter.
    Wgpu(WgpuBuffer),
    /// On a CUDA device.
    Cuda(CudaBuffer),
}

impl Storage {
    /// The backend holding the data: `cpu`, `wgpu` or `cuda`.
    pub fn backend(&self) -> &'static str {
        match self {
            Storage::Cpu(_) => "cpu",
            Storage::Wgpu(_) => "wgpu",
            Storage::Cuda(_) => "cuda",
        }
    }

    /// The CPU data, or an error naming `op` when the storage lives on a GPU.
    pub fn cpu(&self, op: &'static str) -> Result<&CpuData> {
        match self {
            Storage::Cpu(b) => Ok(&b.data),
            _ => Err(self.elsewhere(op, "CPU")),
        }
    }

    /// The wgpu buffer, or an error naming `op` when the storage lives elsewhere.
    pub fn wgpu(&self, op: &'static str) -> Result<&crate::device::wgpu::WgpuBuffer> {
        match self {
            Storage::Wgpu(b) => Ok(b),
            _ => Err(self.elsewhere(op, "wgpu")),
        }
    }

    /// The CUDA buffer, or an error naming `op` when the storage lives elsewhere.
    pub fn cuda(&self, op: &'static str) -> Result<&crate::device::cuda::CudaBuffer> {
        match self {
            Storage::Cuda(b) => Ok(b),
            _ => Err(self.elsewhere(op, "CUDA")),
        }
    }

    /// `self += src` over `n` values, in place, on the device both live on (the device
    /// layer's `add`); `Ok(false)` when they live on different backends.
    pub(crate) fn add_assign(&mut self, src: &Storage, n: usize) -> Result<bool> {
        match (self, src) {
            (Storage::Cpu(d), Storage::Cpu(s)) => add::cpu_add_assign(&mut d.data, &s.data)?,
            (Storage::Wgpu(d), Storage::Wgpu(s)) => {
                add::gpu_add_assign::<wgpu_dev::Context>(d, s, n)?
            }
            (Storage::Cuda(d), Storage::Cuda(s)) => {
                add::gpu_add_assign::<cuda_dev::Context>(d, s, n)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `self + other` over `n` values as new storage on the device both live on; `None`
    /// when they live on different backends.
    pub(crate) fn add(&self, other: &Storage, n: usize) -> Result<Option<Storage>> {
        Ok(Some(match (self, other) {
            (Storage::Cpu(x), Storage::Cpu(y)) => Storage::Cpu(add::cpu_add(&x.data, &y.data)?),
            (Storage::Wgpu(x), Storage::Wgpu(y)) => {
                Storage::Wgpu(add::gpu_add::<wgpu_dev::Context>(x, y, n)?)
            }
            (Storage::Cuda(x), Storage::Cuda(y)) => {
                Storage::Cuda(add::gpu_add::<cuda_dev::Context>(x, y, n)?)
            }
            _ => return Ok(None),
        }))
    }

    fn elsewhere(&self, op: &'static str, expected: &str) -> Error {
        Error::Backend {
            backend: self.backend(),
            msg: format!(
                "{op}: expected {expected} storage, found {}",
                self.backend()
            ),
        }
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A unique id per tensor (not per storage).
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

struct Inner {
    id: u64,
    shape: Vec<usize>,
    dtype: DType,
    device: Device,
    storage: Arc<RwLock<Storage>>,
    grad_fn: Option<Arc<Node>>,
    requires_grad: bool,
    grad: Mutex<Option<Tensor>>,
}

/// The 32-bit word a GPU fill writes for `value` of `dtype` (f64 has none).
fn gpu_word(value: f64, dtype: DType) -> Result<u32> {
    match dtype {
        DType::F32 => Ok((value as f32).to_bits()),
        DType::U32 => Ok(value as u32),
        other => Err(Error::DType {
            op: "full",
            expected: "f32",
            got: other.name(),
        }),
    }
}

/// A contiguous row-major tensor.
#[derive(Clone)]
pub struct Tensor(Arc<Inner>);

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor(id={}, shape={:?}, {}, {}{})",
            self.0.id,
            self.0.shape,
            self.0.dtype.name(),
            self.0.device,
            if self.0.requires_grad {
                ", requires_grad"
            } else {
                ""
            }
        )
    }
}

fn numel_of(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// A type of tensor values: the dtype it stores as.
pub trait Element: CpuElem {
    /// The dtype of these values.
    const DTYPE: DType;
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    };
}
element!(f32, F32);
element!(f64, F64);
element!(u32, U32);
element!(half::f16, F16);
element!(half::bf16, BF16);

/// The values of a CPU buffer as bytes.
fn cpu_bytes(data: &CpuData) -> &[u8] {
    match data {
        CpuData::F32(v) => bytemuck::cast_slice(v),
        CpuData::F64(v) => bytemuck::cast_slice(v),
        CpuData::U32(v) => bytemuck::cast_slice(v),
        CpuData::F16(v) => bytemuck::cast_slice(v),
        CpuData::BF16(v) => bytemuck::cast_slice(v),
    }
}

/// Values of `shape`, or an error when the count overflows (a shape built from user input).
fn checked_numel(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid(format!(
                "a tensor of shape {shape:?} has more values than this machine can address"
            ))
        })
}

impl Tensor {
    fn from_parts(
        storage: Arc<RwLock<Storage>>,
        shape: Vec<usize>,
        dtype: DType,
        device: Device,
        grad_fn: Option<Arc<Node>>,
        requires_grad: bool,
    ) -> Tensor {
        Tensor(Arc::new(Inner {
            id: next_id(),
            shape,
            dtype,
            device,
            storage,
            grad_fn,
            requires_grad,
            grad: Mutex::new(None),
        }))
    }

    /// Wraps freshly computed storage as a tensor with no autograd history.
    pub fn from_storage(
        storage: Storage,
        shape: Vec<usize>,
        dtype: DType,
        device: Device,
    ) -> Tensor {
        Self::from_parts(
            Arc::new(RwLock::new(storage)),
            shape,
            dtype,
            device,
            None,
            false,
        )
    }

    fn from_cpu_vec<T: CpuElem>(data: Vec<T>, shape: &[usize], dtype: DType) -> Result<Tensor> {
        if data.len() != checked_numel(shape)? {
            return Err(Error::shape(
                "tensor",
                format!("{} values do not fill shape {:?}", data.len(), shape),
            ));
        }
        let buf = CpuBuffer::new(T::wrap(data))?;
        Ok(Self::from_storage(
            Storage::Cpu(buf),
            shape.to_vec(),
            dtype,
            Device::Cpu,
        ))
    }

    /// An f32 tensor from values, on `device`.
    pub fn from_f32(data: Vec<f32>, shape: &[usize], device: Device) -> Result<Tensor> {
        Self::from_cpu_vec(data, shape, DType::F32)?.to_device(device)
    }

    /// An f64 tensor on the CPU (gradient checks).
    pub fn from_f64(data: Vec<f64>, shape: &[usize]) -> Result<Tensor> {
        Self::from_cpu_vec(data, shape, DType::F64)
    }

    /// An f16 tensor (feature storage) on `device`.
    pub fn from_f16(data: Vec<half::f16>, shape: &[usize], device: Device) -> Result<Tensor> {
        Self::from_cpu_vec(data, shape, DType::F16)?.to_device(device)
    }

    /// A bf16 tensor (feature storage) on `device`.
    pub fn from_bf16(data: Vec<half::bf16>, shape: &[usize], device: Device) -> Result<Tensor> {
        Self::from_cpu_vec(data, shape, DType::BF16)?.to_device(device)
    }

    /// A u32 index tensor on `device`.
    pub fn from_u32(data: Vec<u32>, shape: &[usize], device: Device) -> Result<Tensor> {
        Self::from_cpu_vec(data, shape, DType::U32)?.to_device(device)
    }

    /// A tensor of `values` on `device`, uploaded straight from the slice on a GPU (no host
    /// copy first, as a large matrix put on the device once wants); copied on the CPU.
    pub fn upload<T: Element>(values: &[T], shape: &[usize], device: Device) -> Result<Tensor> {
        if values.len() != checked_numel(shape)? {
            return Err(Error::shape(
                "tensor",
                format!("{} values do not fill shape {:?}", values.len(), shape),
            ));
        }
        if T::DTYPE == DType::F64 && device != Device::Cpu {
            return Err(Error::invalid("f64 tensors live on the CPU only"));
        }
        let bytes: &[u8] = bytemuck::cast_slice(values);
        let storage = match device {
            Device::Cpu => return Self::from_cpu_vec(values.to_vec(), shape, T::DTYPE),
            Device::Wgpu(i) => {
                Storage::Wgpu(WgpuBuffer::from_bytes(&wgpu_dev::context(i)?, bytes)?)
            }
            Device::Cuda(i) => {
                Storage::Cuda(CudaBuffer::from_bytes(&cuda_dev::context(i)?, bytes)?)
            }
        };
        Ok(Self::from_storage(
            storage,
            shape.to_vec(),
            T::DTYPE,
            device,
        ))
    }

    /// A tensor filled with `value` (cast to the dtype).
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        let n = checked_numel(shape)?;
        match device {
            Device::Cpu => {
                let bytes = n.checked_mul(dtype.size()).ok_or_else(|| {
                    Error::invalid(format!("a tensor of shape {shape:?} is too large"))
                })?;
                let alloc = cpu::reserve::<u8>(bytes)?;
                let data = match dtype {
                    DType::F32 => CpuData::F32(cpu::try_filled(n, value as f32)?),
                    DType::F64 => CpuData::F64(cpu::try_filled(n, value)?),
                    DType::U32 => CpuData::U32(cpu::try_filled(n, value as u32)?),
                    DType::F16 => CpuData::F16(cpu::try_filled(n, half::f16::from_f64(value))?),
                    DType::BF16 => CpuData::BF16(cpu::try_filled(n, half::bf16::from_f64(value))?),
                };
                let buf = CpuBuffer::from_reserved(data, alloc);
                Ok(Self::from_storage(
                    Storage::Cpu(buf),
                    shape.to_vec(),
                    dtype,
                    device,
                ))
            }
            Device::Wgpu(i) => {
                let buf = WgpuBuffer::filled(&wgpu_dev::context(i)?, n, gpu_word(value, dtype)?)?;
                Ok(Self::from_storage(
                    Storage::Wgpu(buf),
                    shape.to_vec(),
                    dtype,
                    device,
                ))
            }
            Device::Cuda(i) => {
                let ctx = cuda_dev::context(i)?;
                let buf = CudaBuffer::filled(&ctx, n, gpu_word(value, dtype)?)?;
                Ok(Self::from_storage(
                    Storage::Cuda(buf),
                    shape.to_vec(),
                    dtype,
                    device,
                ))
            }
        }
    }

    /// Zeros.
    pub fn zeros(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Self::full(shape, 0.0, dtype, device)
    }

    /// Zeros shaped, typed and placed like `self`.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Self::zeros(self.shape(), self.dtype(), self.device())
    }

    /// Copies the tensor to `device` (no copy if it is already there). Not recorded by
    /// autograd. f64 tensors stay on the CPU.
    pub fn to_device(self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self);
        }
        // Indices uploaded from the host keep their host copy, so that ops needing them
        // there (range checks, transposes) do not read them back. One copy of the values,
        // shared by the device buffer's host side.
        if let Some(values) = self.cpu_u32() {
            let values = Arc::new(values);
            let storage = match device {
                Device::Wgpu(i) => Some(Storage::Wgpu(WgpuBuffer::from_u32(
                    &wgpu_dev::context(i)?,
                    values,
                )?)),
                Device::Cuda(i) => Some(Storage::Cuda(CudaBuffer::from_u32(
                    &cuda_dev::context(i)?,
                    values,
                )?)),
                Device::Cpu => None,
            };
            if let Some(storage) = storage {
                return Ok(Self::from_storage(
                    storage,
                    self.shape().to_vec(),
                    self.dtype(),
                    device,
                ));
            }
        }
        if !matches!(device, Device::Cpu) {
            // From the CPU: the device copies straight from the buffer's values.
            if let Storage::Cpu(b) = &*self.storage() {
                self.expect_gpu_dtype()?;
                let bytes = cpu_bytes(&b.data);
                let storage = match device {
                    Device::Wgpu(i) => {
                        Storage::Wgpu(WgpuBuffer::from_bytes(&wgpu_dev::context(i)?, bytes)?)
                    }
                    Device::Cuda(i) => {
                        Storage::Cuda(CudaBuffer::from_bytes(&cuda_dev::context(i)?, bytes)?)
                    }
                    Device::Cpu => unreachable!("checked above"),
                };
                return Ok(Self::from_storage(
                    storage,
                    self.shape().to_vec(),
                    self.dtype(),
                    device,
                ));
            }
        }
        let host = self.host_bytes()?;
        let storage = match device {
            Device::Cpu => {
                let data = match self.dtype() {
                    DType::F32 => CpuData::F32(bytemuck::pod_collect_to_vec(&host)),
                    DType::U32 => CpuData::U32(bytemuck::pod_collect_to_vec(&host)),
                    DType::F64 => CpuData::F64(bytemuck::pod_collect_to_vec(&host)),
                    DType::F16 => CpuData::F16(bytemuck::pod_collect_to_vec(&host)),
                    DType::BF16 => CpuData::BF16(bytemuck::pod_collect_to_vec(&host)),
                };
                Storage::Cpu(CpuBuffer::new(data)?)
            }
            Device::Wgpu(i) => {
                self.expect_gpu_dtype()?;
                Storage::Wgpu(WgpuBuffer::from_bytes(&wgpu_dev::context(i)?, &host)?)
            }
            Device::Cuda(i) => {
                self.expect_gpu_dtype()?;
                Storage::Cuda(CudaBuffer::from_bytes(&cuda_dev::context(i)?, &host)?)
            }
        };
        Ok(Self::from_storage(
            storage,
            self.shape().to_vec(),
            self.dtype(),
            device,
        ))
    }

    /// A copy of the values of a u32 tensor on the CPU (what an index upload keeps on the
    /// host); `None` for any other tensor.
    fn cpu_u32(&self) -> Option<Vec<u32>> {
        match &*self.storage() {
            Storage::Cpu(CpuBuffer {
                data: CpuData::U32(v),
                ..
            }) => Some(v.to_vec()),
            _ => None,
        }
    }

    /// f64 tensors stay on the CPU: GPU kernels hold f32 values.
    fn expect_gpu_dtype(&self) -> Result<()> {
        if self.dtype() == DType::F64 {
            return Err(self.dtype_error("to_device", "f32"));
        }
        Ok(())
    }

    /// The raw little-endian bytes of the values, on the host (reads a GPU buffer back).
    pub fn host_bytes(&self) -> Result<Vec<u8>> {
        match &*self.storage() {
            Storage::Cpu(b) => Ok(cpu_bytes(&b.data).to_vec()),
            Storage::Wgpu(b) => b.read(),
            Storage::Cuda(b) => b.read(),
        }
    }

    /// Unique id of this tensor.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel_of(&self.0.shape)
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.0.device
    }

    /// Bytes of the data.
    pub fn bytes(&self) -> usize {
        self.numel() * self.0.dtype.size()
    }

    /// Read access to the storage (kernels).
    pub fn storage(&self) -> RwLockReadGuard<'_, Storage> {
        self.0.storage.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access to the storage (in-place optimizer updates). Forgets a GPU buffer's
    /// host copy of its values, which the write may change.
    pub fn storage_mut(&self) -> RwLockWriteGuard<'_, Storage> {
        let mut s = self.0.storage.write().unwrap_or_else(|e| e.into_inner());
        match &mut *s {
            Storage::Cpu(_) => {}
            Storage::Wgpu(b) => b.forget_host(),
            Storage::Cuda(b) => b.forget_host(),
        }
        s
    }

    /// True when no other tensor shares this tensor's storage.
    pub fn storage_is_unique(&self) -> bool {
        Arc::strong_count(&self.0.storage) == 1
    }

    /// True when both tensors read the same storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    /// A tensor sharing this one's storage under another shape (no copy). Use
    /// the `reshape` op to keep the autograd link.
    pub fn view(&self, shape: &[usize]) -> Result<Tensor> {
        if numel_of(shape) != self.numel() {
            return Err(Error::shape(
                "reshape",
                format!(
                    "cannot view {:?} ({} values) as {:?}",
                    self.shape(),
                    self.numel(),
                    shape
                ),
            ));
        }
        Ok(Self::from_parts(
            self.0.storage.clone(),
            shape.to_vec(),
            self.0.dtype,
            self.0.device,
            None,
            false,
        ))
    }

    /// The same data without autograd history.
    pub fn detach(&self) -> Tensor {
        Self::from_parts(
            self.0.storage.clone(),
            self.0.shape.clone(),
            self.0.dtype,
            self.0.device,
            None,
            false,
        )
    }

    /// A leaf sharing this data that gradients flow to: a parameter or a checked input.
    pub fn requires_grad_leaf(&self) -> Tensor {
        Self::from_parts(
            self.0.storage.clone(),
            self.0.shape.clone(),
            self.0.dtype,
            self.0.device,
            None,
            true,
        )
    }

    pub(crate) fn with_grad_fn(self, node: Arc<Node>) -> Tensor {
        let inner = Arc::try_unwrap(self.0).unwrap_or_else(|a| Inner {
            id: next_id(),
            shape: a.shape.clone(),
            dtype: a.dtype,
            device: a.device,
            storage: a.storage.clone(),
            grad_fn: None,
            requires_grad: false,
            grad: Mutex::new(None),
        });
        Tensor(Arc::new(Inner {
            grad_fn: Some(node),
            requires_grad: true,
            ..inner
        }))
    }

    /// True if gradients flow through this tensor.
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad
    }

    /// True for a tensor that requires grad and was not produced by an op.
    pub fn is_leaf(&self) -> bool {
        self.0.grad_fn.is_none()
    }

    pub(crate) fn grad_fn(&self) -> Option<&Arc<Node>> {
        self.0.grad_fn.as_ref()
    }

    /// The accumulated gradient of a leaf.
    pub fn grad(&self) -> Option<Tensor> {
        self.0
            .grad
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the accumulated gradient.
    pub fn set_grad(&self, grad: Option<Tensor>) {
        *self.0.grad.lock().unwrap_or_else(|e| e.into_inner()) = grad;
    }

    /// Drops the accumulated gradient.
    pub fn zero_grad(&self) {
        self.set_grad(None);
    }

    /// Replaces the accumulated gradient by `f` of it, holding the gradient's lock while `f`
    /// runs, so that concurrent accumulations into one leaf are not lost (see
    /// `autograd::accumulate`, which decides how to add). On an error the gradient is gone.
    pub(crate) fn update_grad(
        &self,
        f: impl FnOnce(Option<Tensor>) -> Result<Tensor>,
    ) -> Result<()> {
        let mut slot = self.0.grad.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(f(slot.take())?);
        Ok(())
    }

    /// True when nothing but this handle holds the tensor (no clone, no graph node).
    pub(crate) fn is_sole_handle(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }

    /// Reverse-mode backward from this scalar; gradients accumulate in the leaves.
    pub fn backward(&self) -> Result<()> {
        autograd::backward(self)
    }

    /// Backward from this tensor with `grad` (same shape) as its incoming gradient; see
    /// [`autograd::backward_with`].
    pub fn backward_with(&self, grad: &Tensor) -> Result<()> {
        autograd::backward_with(self, grad)
    }

    /// The values as f32 (f64 values are narrowed, f16 and bf16 widened).
    pub fn to_vec_f32(&self) -> Result<Vec<f32>> {
        let host = self.host_bytes()?;
        match self.dtype() {
            DType::F32 => Ok(bytemuck::pod_collect_to_vec(&host)),
            DType::F64 => Ok(self.to_vec_f64()?.into_iter().map(|x| x as f32).collect()),
            DType::F16 => Ok(bytemuck::pod_collect_to_vec::<u8, half::f16>(&host)
                .into_iter()
                .map(f32::from)
                .collect()),
            DType::BF16 => Ok(bytemuck::pod_collect_to_vec::<u8, half::bf16>(&host)
                .into_iter()
                .map(f32::from)
                .collect()),
            DType::U32 => Err(self.dtype_error("to_vec_f32", "f32")),
        }
    }

    /// The values as f64 (f32 values are widened).
    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        match self.dtype() {
            DType::F64 => Ok(bytemuck::pod_collect_to_vec(&self.host_bytes()?)),
            DType::F32 | DType::F16 | DType::BF16 => {
                Ok(self.to_vec_f32()?.into_iter().map(f64::from).collect())
            }
            DType::U32 => Err(self.dtype_error("to_vec_f64", "f64")),
        }
    }

    /// The indices of a u32 tensor.
    pub fn to_vec_u32(&self) -> Result<Vec<u32>> {
        match self.dtype() {
            DType::U32 => Ok(bytemuck::pod_collect_to_vec(&self.host_bytes()?)),
            _ => Err(self.dtype_error("to_vec_u32", "u32")),
        }
    }

    /// The single value of a one-element tensor.
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "item",
                format!("tensor of shape {:?} is not a scalar", self.shape()),
            ));
        }
        Ok(self.to_vec_f64()?[0])
    }

    /// A dtype error for `op` expecting `expected`.
    pub fn dtype_error(&self, op: &'static str, expected: &'static str) -> Error {
        Error::DType {
            op,
            expected,
            got: self.dtype().name(),
        }
    }

    /// Errors unless `self` and `other` are on the same device.
    pub fn same_device(&self, other: &Tensor, op: &'static str) -> Result<()> {
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        Ok(())
    }

    /// Errors unless the dtype is a float type.
    pub fn expect_float(&self, op: &'static str) -> Result<()> {
        if !self.dtype().is_float() {
            return Err(self.dtype_error(op, "f32"));
        }
        Ok(())
    }
}
