//! NCCL's C interface, loaded at run time: the six functions espalier calls.
//!
//! Loaded by name from the library path, `libnccl.so.2` first: Debian's and Ubuntu's
//! `libnccl2` and the PyTorch wheels ship that name alone, which cudarc 0.19's NCCL
//! bindings never try (they probe `libnccl.so`, `.so.1` and `.so.9` to `.so.13`), so with
//! them the gradients silently went through the host wherever NCCL came from a package.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use libloading::Library;

/// The names tried, in order.
pub const NAMES: [&str; 3] = ["libnccl.so.2", "libnccl.so", "libnccl.so.1"];

/// `ncclUniqueId`: the 128 bytes rank 0 makes and every rank joins with.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    /// The id's bytes.
    pub internal: [c_char; 128],
}

/// `ncclComm_t`.
pub type Comm = *mut c_void;

/// `ncclFloat32` of `ncclDataType_t`.
pub const FLOAT32: c_int = 7;
/// `ncclSum` of `ncclRedOp_t`.
pub const SUM: c_int = 0;

type GetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> c_int;
type CommInitRank = unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    Comm,
    *mut c_void,
) -> c_int;
type NoArgs = unsafe extern "C" fn() -> c_int;
type CommDestroy = unsafe extern "C" fn(Comm) -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

/// The loaded library and its entry points.
pub struct Nccl {
    /// `ncclGetUniqueId`.
    pub get_unique_id: GetUniqueId,
    /// `ncclCommInitRank`.
    pub comm_init_rank: CommInitRank,
    /// `ncclAllReduce`.
    pub all_reduce: AllReduce,
    /// `ncclGroupStart`.
    pub group_start: NoArgs,
    /// `ncclGroupEnd`.
    pub group_end: NoArgs,
    /// `ncclCommDestroy`.
    pub comm_destroy: CommDestroy,
    get_error_string: GetErrorString,
    /// Which name loaded.
    pub name: &'static str,
    _lib: Library,
}

impl Nccl {
    /// NCCL's message for a result code.
    pub fn error(&self, code: c_int) -> String {
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
        let s = unsafe { (self.get_error_string)(code) };
        if s.is_null() {
            return format!("NCCL error {code}");
        }
        // SAFETY: as above.
        format!(
            "{} ({code})",
            unsafe { CStr::from_ptr(s) }.to_string_lossy()
        )
    }
}

/// NCCL, loaded once; or why it cannot be (no library, or one without the entry points).
pub fn nccl() -> Result<&'static Nccl, String> {
    static LIB: OnceLock<Result<Nccl, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Nccl, String> {
    let mut tried = Vec::new();
    for name in NAMES {
        // SAFETY: loading NCCL runs its initialisers, which only set up the library.
        let lib = match unsafe { Library::new(name) } {
            Ok(l) => l,
            Err(e) => {
                tried.push(format!("{name}: {e}"));
                continue;
            }
        };
        // SAFETY: the symbols are NCCL's documented C functions with the signatures above.
        return unsafe {
            Ok(Nccl {
                get_unique_id: *lib.get(b"ncclGetUniqueId\0").map_err(|e| e.to_string())?,
                comm_init_rank: *lib.get(b"ncclCommInitRank\0").map_err(|e| e.to_string())?,
                all_reduce: *lib.get(b"ncclAllReduce\0").map_err(|e| e.to_string())?,
                group_start: *lib.get(b"ncclGroupStart\0").map_err(|e| e.to_string())?,
                group_end: *lib.get(b"ncclGroupEnd\0").map_err(|e| e.to_string())?,
                comm_destroy: *lib.get(b"ncclCommDestroy\0").map_err(|e| e.to_string())?,
                get_error_string: *lib
                    .get(b"ncclGetErrorString\0")
                    .map_err(|e| e.to_string())?,
                name,
                _lib: lib,
            })
        };
    }
    Err(format!("no NCCL library found ({})", tried.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_packages_ship_is_tried_first() {
        assert_eq!(NAMES[0], "libnccl.so.2");
    }

    #[test]
    fn a_missing_library_names_every_name_tried() {
        // Where NCCL is installed this loads it instead; either way no panic.
        match nccl() {
            Ok(n) => assert!(NAMES.contains(&n.name)),
            Err(e) => {
                for name in NAMES {
                    assert!(e.contains(name), "{e}");
                }
            }
        }
    }
}
