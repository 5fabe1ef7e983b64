//! Run-time compilation of `kernels/*.cu` with NVRTC, to CUBIN for one compute capability.
//!
//! CUBIN rather than PTX: the driver loads machine code for its own architecture whatever
//! NVRTC version made it, while PTX from an NVRTC newer than the driver is refused
//! (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`). Compiling needs only `libnvrtc`, no GPU, so the
//! kernel sources are checked wherever NVRTC is installed (`tests/kernels.rs`).

use std::ffi::{CStr, CString};

use cudarc::nvrtc::{result, sys};

/// The shared header every kernel file is compiled with (types, index helpers, warp
/// reductions), prepended by [`crate::cuda_kernel`].
pub const PRELUDE: &str = include_str!("../../../kernels/prelude.cuh");

/// True when `libnvrtc` can be loaded.
pub fn available() -> bool {
    // SAFETY: only tries to dlopen the library names cudarc would use.
    unsafe { sys::is_culib_present() }
}

/// NVRTC's version as (major, minor), if the library loads.
pub fn version() -> Option<(i32, i32)> {
    if !available() {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is present (checked above); the out-pointers are valid.
    let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    (r == sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

/// Compiles `source` (a whole translation unit, prelude included) for `sm_{arch}`, e.g.
/// `arch = 90`. Returns the CUBIN, or the compiler's log as the error.
pub fn compile(name: &str, source: &str, arch: u32) -> Result<Vec<u8>, String> {
    if !available() {
        return Err("no NVRTC library (libnvrtc.so.13 or .12) found".into());
    }
    let src = CString::new(source).map_err(|_| format!("{name}: source holds a NUL byte"))?;
    let cname = CString::new(name).map_err(|_| format!("{name}: name holds a NUL byte"))?;
    let prog = result::create_program(&src, Some(&cname)).map_err(|e| format!("{name}: {e}"))?;
    let options = [
        format!("--gpu-architecture=sm_{arch}"),
        "--std=c++17".to_string(),
        "--fmad=true".to_string(),
    ];
    // SAFETY: `prog` was created above and is destroyed once, below; `src` and `cname`
    // outlive it.
    let out = unsafe {
        let compiled = result::compile_program(prog, &options);
        let log = result::get_program_log(prog)
            .map(|l| CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
            .unwrap_or_default();
        let cubin = match compiled {
            Err(e) => Err(format!("{name} ({e}):\n{log}")),
            Ok(()) => cubin_of(prog).map_err(|e| format!("{name}: no CUBIN for sm_{arch}: {e}")),
        };
        let _ = result::destroy_program(prog);
        cubin
    };
    out
}

/// The CUBIN of a compiled program.
///
/// # Safety
/// `prog` must be a live, successfully compiled program.
unsafe fn cubin_of(prog: sys::nvrtcProgram) -> Result<Vec<u8>, String> {
    let mut size = 0usize;
    let r = sys::nvrtcGetCUBINSize(prog, &mut size);
    if r != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return Err(format!("{r:?}"));
    }
    let mut bytes = vec![0u8; size];
    let r = sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast());
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("{r:?}"));
    }
    Ok(bytes)
}
