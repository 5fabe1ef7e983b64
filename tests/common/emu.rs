//! The emulated CUDA device (`cuda-emu/`, run through `scripts/cuda-emu`): its counters and
//! controls, read through the loaded driver library's own entry points. On a real driver,
//! or without CUDA, [`emulator`] is `None` and the tests that need it skip.

use std::ffi::c_void;

/// `EspalierCudaEmuStats` of `cuda-emu/src/runtime.h`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub launches: u64,
    pub blocks: u64,
    pub host_waits: u64,
    pub implicit_waits: u64,
    pub spin_waits: u64,
    pub pinned_uploads: u64,
    pub pageable_uploads: u64,
    pub pinned_upload_bytes: u64,
    pub pageable_upload_bytes: u64,
    pub readbacks: u64,
    pub legacy_stream_ops: u64,
    pub events_created: u64,
    pub events_live: u64,
    pub device_bytes_live: u64,
    pub device_bytes_reserved: u64,
    pub device_bytes_peak: u64,
    pub out_of_memory: u64,
    pub gemms: u64,
}

impl Stats {
    /// The counts of `self` since `before` (the byte levels as they are now).
    pub fn since(&self, before: &Stats) -> Stats {
        Stats {
            launches: self.launches - before.launches,
            blocks: self.blocks - before.blocks,
            host_waits: self.host_waits - before.host_waits,
            implicit_waits: self.implicit_waits - before.implicit_waits,
            spin_waits: self.spin_waits - before.spin_waits,
            pinned_uploads: self.pinned_uploads - before.pinned_uploads,
            pageable_uploads: self.pageable_uploads - before.pageable_uploads,
            pinned_upload_bytes: self.pinned_upload_bytes - before.pinned_upload_bytes,
            pageable_upload_bytes: self.pageable_upload_bytes - before.pageable_upload_bytes,
            readbacks: self.readbacks - before.readbacks,
            legacy_stream_ops: self.legacy_stream_ops - before.legacy_stream_ops,
            events_created: self.events_created - before.events_created,
            out_of_memory: self.out_of_memory - before.out_of_memory,
            gemms: self.gemms - before.gemms,
            ..*self
        }
    }
}

/// The emulator's entry points.
pub struct Emulator {
    stats: unsafe extern "C" fn(*mut Stats, usize) -> usize,
    delay: unsafe extern "C" fn(u32) -> u32,
}

impl Emulator {
    /// The counters now.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        // SAFETY: the emulator writes at most `size` bytes of its counters into `s`.
        unsafe { (self.stats)(&mut s, std::mem::size_of::<Stats>()) };
        s
    }

    /// Makes every stream wait `us` microseconds before each queued item until the guard
    /// drops: a slow device, against which host work that races queued work loses.
    pub fn slow_device(&self, us: u32) -> SlowDevice<'_> {
        // SAFETY: a plain setter of the emulator.
        let previous = unsafe { (self.delay)(us) };
        SlowDevice {
            emu: self,
            previous,
        }
    }
}

/// Restores the device's speed when dropped (see [`Emulator::slow_device`]).
pub struct SlowDevice<'a> {
    emu: &'a Emulator,
    previous: u32,
}

impl Drop for SlowDevice<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `slow_device`.
        unsafe { (self.emu.delay)(self.previous) };
    }
}

/// The emulator, when `cuda:0` runs on it (the context is made first, which loads the
/// driver library); `None` elsewhere (a real driver, or no CUDA device: the caller says
/// what it skips).
pub fn emulator() -> Option<Emulator> {
    if !super::backend_selected("cuda") {
        return None;
    }
    let ctx = espalier::device::cuda::context(0).ok()?;
    if !ctx.is_emulated() {
        return None;
    }
    // SAFETY: dlopen without loading (the library is loaded: the context exists) and dlsym
    // of two functions with the signatures declared above (cuda-emu/src/driver.cpp).
    unsafe {
        let lib = libc::dlopen(c"libcuda.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if lib.is_null() {
            panic!("the emulated CUDA device is in use but libcuda.so is not loaded by that name");
        }
        let sym = |name: &std::ffi::CStr| -> *mut c_void {
            let p = libc::dlsym(lib, name.as_ptr());
            assert!(!p.is_null(), "the CUDA emulator has no {name:?}");
            p
        };
        Some(Emulator {
            stats: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut Stats, usize) -> usize,
            >(sym(c"espalier_cuda_emu_stats")),
            delay: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(u32) -> u32>(sym(
                c"espalier_cuda_emu_set_op_delay_us",
            )),
        })
    }
}
