//! Probing and the per-device context.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};

use crate::device::cuda::driver_err;
use crate::device::cuda::staging::{PinnedChunk, Ring, MAX_CHUNKS};
use crate::device::summary::CudaDeviceSummary;
use crate::device::{BufferPool, Device, MemoryTracker};
use crate::error::{Error, Result};

fn unavailable(index: u32, reason: impl Into<String>) -> Error {
    Error::BackendUnavailable {
        backend: format!("cuda:{index}"),
        reason: reason.into(),
    }
}

/// Checks, without letting cudarc panic, that the driver, a device, NVRTC and cuBLAS are
/// there; returns the number of devices.
pub fn probe() -> std::result::Result<usize, String> {
    static PROBE: OnceLock<std::result::Result<usize, String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            // SAFETY: these only try to dlopen the library names cudarc would use.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err("no CUDA driver library (libcuda.so) found".into());
            }
            let n = CudaContext::device_count().map_err(|e| format!("CUDA driver: {e}"))?;
            if n <= 0 {
                return Err("the CUDA driver reports no device".into());
            }
            if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                return Err("no NVRTC library (libnvrtc.so.13 or .12) found".into());
            }
            if !unsafe { cudarc::cublas::sys::is_culib_present() } {
                return Err("no cuBLAS library (libcublas.so.13 or .12) found".into());
            }
            Ok(n as usize)
        })
        .clone()
}

/// Every CUDA device, or the reason there is none.
pub fn devices() -> std::result::Result<Vec<CudaDeviceSummary>, String> {
    let n = probe()?;
    (0..n)
        .map(|i| {
            let c = context(i as u32).map_err(|e| e.to_string())?;
            Ok(CudaDeviceSummary {
                index: i as u32,
                name: c.name.clone(),
                compute_capability: c.compute_capability,
                total_bytes: c.total_bytes,
                multiprocessors: c.sm_count,
                peak_bandwidth: c.peak_bandwidth,
                driver_cuda: driver_version(),
                nvrtc: super::nvrtc::version().unwrap_or((0, 0)),
                emulated: c.is_emulated(),
            })
        })
        .collect()
}

/// One device's context, stream, caches and memory accounting.
pub struct Context {
    /// The `N` of `cuda:N`.
    pub index: u32,
    /// The driver context.
    pub cuda: Arc<CudaContext>,
    /// The stream every launch and copy goes on.
    pub stream: Arc<CudaStream>,
    /// The device's name.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Total device memory in bytes.
    pub total_bytes: u64,
    /// Streaming multiprocessors: grid-stride launches size their grids by it.
    pub sm_count: u32,
    /// Theoretical memory bandwidth in bytes/s, the reference of the benches' GB/s.
    pub peak_bandwidth: f64,
    pub(crate) memory: &'static MemoryTracker,
    pub(crate) pool: crate::device::BufferPool<cudarc::driver::CudaSlice<u32>>,
    /// Blocking host waits so far (see [`crate::Device::host_waits`]).
    pub(crate) host_waits: std::sync::atomic::AtomicU64,
    pub(crate) modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    pub(crate) functions: Mutex<HashMap<(&'static str, &'static str), CudaFunction>>,
    /// The cuBLAS handle once made, or why it cannot be (an out-of-memory is not kept: a
    /// later call tries again).
    pub(crate) blas: Mutex<Option<std::result::Result<Arc<cudarc::cublas::CudaBlas>, String>>>,
    /// Run GEMMs with `kernels/matmul.cu` instead of cuBLAS (`ESPALIER_CUDA_GEMM=kernel`,
    /// or [`Context::force_gemm_kernel`]).
    pub(crate) gemm_kernel: std::sync::atomic::AtomicBool,
    /// Page-locked staging chunks for uploads, used in turn (see [`super::staging`]).
    pub(crate) staging: Mutex<Ring<PinnedChunk>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cuda:{} ({}, sm_{}{})",
            self.index, self.name, self.compute_capability.0, self.compute_capability.1
        )
    }
}

/// The context of device `index`, created on first use.
pub fn context(index: u32) -> Result<Arc<Context>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<u32, Arc<Context>>>> = OnceLock::new();
    let count = probe().map_err(|r| unavailable(index, r))?;
    if index as usize >= count {
        return Err(unavailable(index, format!("only {count} CUDA device(s)")));
    }
    let map = CONTEXTS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = map.get(&index) {
        return Ok(c.clone());
    }
    let drv = |e: cudarc::driver::DriverError| unavailable(index, format!("CUDA driver: {e}"));
    let cuda = CudaContext::new(index as usize).map_err(drv)?;
    // SAFETY: the backend orders its work itself (one stream, and the staging chunks' own
    // events), so cudarc's two events per allocation, never recorded on one stream, are
    // only cost: they are turned off before any allocation exists.
    unsafe { cuda.disable_event_tracking() };
    // A non-blocking stream of its own, not the legacy default stream: no implicit
    // synchronisation with other work in the process (a library's, NCCL's).
    let stream = cuda.new_stream().map_err(drv)?;
    use cudarc::driver::sys::CUdevice_attribute as A;
    let attr = |a| cuda.attribute(a).map_err(drv);
    // kHz × bits: × 1000 Hz, × 2 (double data rate), / 8 bits per byte.
    let peak_bandwidth = attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)? as f64
        * 1e3
        * attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)? as f64
        * 2.0
        / 8.0;
    let memory: &'static MemoryTracker =
        Box::leak(Box::new(MemoryTracker::new(Device::Cuda(index))));
    let ctx = Arc::new(Context {
        index,
        name: cuda.name().map_err(drv)?,
        compute_capability: cuda.compute_capability().map_err(drv)?,
        total_bytes: cuda.total_mem().map_err(drv)? as u64,
        sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        peak_bandwidth,
        cuda,
        stream,
        memory,
        pool: BufferPool::new(memory),
        host_waits: 0.into(),
        modules: Mutex::new(HashMap::new()),
        functions: Mutex::new(HashMap::new()),
        blas: Mutex::new(None),
        staging: Mutex::new(Ring::new(MAX_CHUNKS)),
        gemm_kernel: std::env::var("ESPALIER_CUDA_GEMM")
            .is_ok_and(|v| v == "kernel")
            .into(),
    });
    if ctx.is_emulated() {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            eprintln!(
                "warning: cuda:{index} ({}) is espalier's emulated CUDA device: it runs the \
                 kernels on the CPU, for tests, and is far slower than a GPU (and than --device cpu)",
                ctx.name
            )
        });
    }
    map.insert(index, ctx.clone());
    Ok(ctx)
}

/// The CUDA version the driver supports, as (major, minor); (0, 0) if it cannot say.
pub fn driver_version() -> (i32, i32) {
    if probe().is_err() {
        return (0, 0);
    }
    let mut v = 0;
    // SAFETY: the driver library is present (probed); the out-pointer is valid.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        return (0, 0);
    }
    (v / 1000, (v % 1000) / 10)
}

/// Whether a cuBLAS call failed for want of device memory.
pub(crate) fn is_blas_alloc_failure(e: &cudarc::cublas::result::CublasError) -> bool {
    e.0 == cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED
}

/// See [`Context::alloc_err`]; apart so that the mapping is tested without a device.
pub(crate) fn alloc_error(
    memory: &MemoryTracker,
    total_bytes: u64,
    bytes: u64,
    code: cudarc::driver::sys::CUresult,
    e: &dyn std::fmt::Display,
) -> Error {
    if code == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        let s = memory.stats();
        Error::OutOfMemory {
            device: memory.device().to_string(),
            requested: bytes,
            live: s.live,
            budget: s.budget.map_or(total_bytes, |b| b.min(total_bytes)),
        }
    } else {
        driver_err(&format!("alloc of {bytes} bytes"), e)
    }
}

impl Context {
    /// The memory tracker of this device.
    pub fn memory(&self) -> &'static MemoryTracker {
        self.memory
    }

    /// The cuBLAS handle on this device's stream, made on first use. cuBLAS takes device
    /// memory for its workspace: when it has none, the error is [`Error::OutOfMemory`] (so
    /// that a micro-batch splits), and a later call tries again.
    pub fn blas(&self) -> Result<Arc<cudarc::cublas::CudaBlas>> {
        let mut slot = self.blas.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(made) = &*slot {
            return made.clone().map_err(|m| Error::Backend {
                backend: "cuda",
                msg: m,
            });
        }
        self.bind()?;
        match cudarc::cublas::CudaBlas::new(self.stream.clone()) {
            Ok(b) => {
                let b = Arc::new(b);
                *slot = Some(Ok(b.clone()));
                Ok(b)
            }
            Err(e) if is_blas_alloc_failure(&e) => Err(self.out_of_memory(0)),
            Err(e) => {
                let m = format!("cuBLAS: {e:?}");
                *slot = Some(Err(m.clone()));
                Err(Error::Backend {
                    backend: "cuda",
                    msg: m,
                })
            }
        }
    }

    /// [`Error::OutOfMemory`] for a request of `bytes` the driver or a CUDA library refused.
    pub(crate) fn out_of_memory(&self, bytes: u64) -> Error {
        let s = self.memory.stats();
        Error::OutOfMemory {
            device: self.memory.device().to_string(),
            requested: bytes,
            live: s.live,
            budget: s
                .budget
                .map_or(self.total_bytes, |b| b.min(self.total_bytes)),
        }
    }

    /// Makes matmul use `kernels/matmul.cu` (true) or cuBLAS (false) on this device; the
    /// parity tests run both.
    pub fn force_gemm_kernel(&self, on: bool) {
        self.gemm_kernel
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// True when matmul runs `kernels/matmul.cu` rather than cuBLAS.
    pub fn gemm_kernel_forced(&self) -> bool {
        self.gemm_kernel.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits for all queued work (a host wait).
    pub fn sync(&self) -> Result<()> {
        self.count_host_wait();
        self.stream
            .synchronize()
            .map_err(|e| driver_err("synchronize", e))
    }

    /// Frees every pooled buffer no tensor holds; returns the bytes freed.
    pub fn trim_pool(&self) -> u64 {
        // The frees are driver calls: the calling thread may never have used the device.
        if self.bind().is_err() {
            return 0;
        }
        self.pool.trim()
    }

    /// Makes this device's context current on the calling thread, as every driver call that
    /// allocates, frees, copies or launches needs: a tensor may be made or dropped on any
    /// thread (a loader's, rayon's, a test harness's).
    pub(crate) fn bind(&self) -> Result<()> {
        self.cuda
            .bind_to_thread()
            .map_err(|e| driver_err("binding the context to the thread", e))
    }

    /// Gives the driver's stream-ordered pool back what it holds for freed buffers: a freed
    /// buffer stays reserved there until the host has seen its free complete (a
    /// synchronisation) and the pool is trimmed. Before retrying an allocation that ran out
    /// of memory. A host wait.
    pub(crate) fn release_freed_memory(&self) -> Result<()> {
        self.sync()?;
        // SAFETY: the device handle is the context's own; the pool is the device's default
        // pool, the one cuMemAllocAsync takes from.
        unsafe {
            let pool = cudarc::driver::result::device::get_default_mem_pool(self.cuda.cu_device())
                .map_err(|e| driver_err("default memory pool", e))?;
            cudarc::driver::result::mem_pool::trim_to(pool, 0)
                .map_err(|e| driver_err("trimming the memory pool", e))
        }
    }

    /// The device's UUID: the same device seen from two processes has the same one.
    pub fn uuid(&self) -> Result<[u8; 16]> {
        let u = self.cuda.uuid().map_err(|e| driver_err("device uuid", e))?;
        Ok(u.bytes.map(|b| b as u8))
    }

    /// Free and total device memory in bytes, as the driver reports them.
    pub fn mem_info(&self) -> Result<(u64, u64)> {
        let (free, total) = self
            .cuda
            .mem_get_info()
            .map_err(|e| driver_err("memory info", e))?;
        Ok((free as u64, total as u64))
    }

    /// Whether the driver is espalier's emulated CUDA device (`cuda-emu/`), which runs the
    /// kernels on the CPU.
    pub fn is_emulated(&self) -> bool {
        self.name.contains("espalier CUDA emulator")
    }

    /// Counts one blocking host wait (a synchronisation, a readback, a staging event).
    pub(crate) fn count_host_wait(&self) {
        self.host_waits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Blocking host waits on this device so far (see [`crate::Device::host_waits`]).
    pub fn host_waits(&self) -> u64 {
        self.host_waits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The error of a failed device allocation of `bytes`: the driver's out-of-memory is
    /// [`Error::OutOfMemory`] (with the device's total memory, or the budget if smaller,
    /// as its budget); anything else is a backend error.
    pub(crate) fn alloc_err(&self, bytes: u64, e: cudarc::driver::DriverError) -> Error {
        alloc_error(self.memory, self.total_bytes, bytes, e.0, &e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUresult;

    #[test]
    fn the_drivers_out_of_memory_is_a_typed_out_of_memory() {
        let mem: &'static MemoryTracker = Box::leak(Box::new(MemoryTracker::new(Device::Cuda(5))));
        let e = alloc_error(
            mem,
            1 << 30,
            4096,
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            &"oom",
        );
        match e {
            Error::OutOfMemory {
                device,
                requested,
                live,
                budget,
            } => {
                assert_eq!(device, Device::Cuda(5).to_string());
                assert_eq!((requested, live, budget), (4096, 0, 1 << 30));
            }
            other => panic!("expected OutOfMemory, got {other}"),
        }
        mem.set_budget(Some(1 << 20));
        let e = alloc_error(mem, 1 << 30, 64, CUresult::CUDA_ERROR_OUT_OF_MEMORY, &"oom");
        assert!(matches!(e, Error::OutOfMemory { budget, .. } if budget == 1 << 20));
        let e = alloc_error(mem, 1 << 30, 64, CUresult::CUDA_ERROR_INVALID_VALUE, &"bad");
        assert!(
            matches!(
                e,
                Error::Backend {
                    backend: "cuda",
                    ..
                }
            ),
            "{e}"
        );
    }
}
