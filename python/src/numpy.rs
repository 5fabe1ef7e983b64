//! NumPy arrays in and out without a NumPy dependency at build time: arrays are read in place
//! through `__array_interface__` (its data pointer, shape and type), which works under the
//! stable ABI, and results are written into arrays made by `numpy.empty`.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use espalier::graph::array::Foreign;

/// A C-contiguous NumPy array, held, with its data's address and shape.
pub struct Held {
    _array: Py<PyAny>,
    addr: usize,
    bytes: usize,
    /// The shape.
    pub shape: Vec<usize>,
}

impl Foreign for Held {
    fn bytes(&self) -> &[u8] {
        if self.bytes == 0 {
            return &[];
        }
        // SAFETY: `array` is a C-contiguous NumPy array of `bytes` bytes at `addr` (its
        // `__array_interface__`), kept alive by the reference held here, and NumPy never
        // moves an array's data. The Python package documents that an array handed over
        // must not be written while espalier holds it, as a mapped file must not be.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.bytes) }
    }
}

impl Held {
    /// The values as `T` (the caller made the array of that dtype).
    pub fn values<T: bytemuck::Pod>(&self) -> &[T] {
        match self.bytes() {
            [] => &[],
            // `hold` asked NumPy for an aligned array of T.
            bytes => bytemuck::cast_slice(bytes),
        }
    }

    /// Shares the array as an [`espalier::graph::Array`] (no copy).
    pub fn into_array<T: bytemuck::Pod>(self) -> PyResult<espalier::graph::Array<T>> {
        espalier::graph::Array::foreign(Arc::new(self)).map_err(PyValueError::new_err)
    }
}

/// NumPy's dtype kind of `obj` once made an array: `b` bool, `i`/`u` integers, `f` floats...
pub fn kind(obj: &Bound<'_, PyAny>) -> PyResult<char> {
    let kind: String = obj.getattr("dtype")?.getattr("kind")?.extract()?;
    Ok(kind.chars().next().unwrap_or('?'))
}

/// `obj` (a NumPy array or anything with `__array__`, such as a CPU torch tensor) as a
/// NumPy array, without a copy.
pub fn asarray<'py>(
    py: Python<'py>,
    name: &str,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    py.import("numpy")?
        .call_method1("asarray", (obj,))
        .map_err(|e| {
            PyTypeError::new_err(format!(
                "{name}: not an array ({}: {})",
                obj.get_type()
                    .name()
                    .map_or("?".to_string(), |n| n.to_string()),
                e.value(py)
            ))
        })
}

/// `array` as an aligned, C-contiguous array of `dtype` (`"float32"`, `"int64"`...): the
/// same memory where it already is one, else a converted copy.
pub fn hold(py: Python<'_>, array: &Bound<'_, PyAny>, dtype: &str) -> PyResult<Held> {
    let np = py.import("numpy")?;
    let a = np.call_method1("require", (array, dtype, "CA"))?;
    let iface = a.getattr("__array_interface__")?;
    let data = iface.get_item("data")?.cast_into::<PyTuple>()?;
    let addr: usize = data.get_item(0)?.extract()?;
    let shape: Vec<usize> = iface.get_item("shape")?.extract()?;
    let nbytes: usize = a.getattr("nbytes")?.extract()?;
    Ok(Held {
        _array: a.unbind(),
        addr,
        bytes: nbytes,
        shape,
    })
}

/// A new NumPy array of `shape` and `dtype` holding `values` (one copy).
pub fn new_array<'py, T: bytemuck::Pod>(
    py: Python<'py>,
    values: &[T],
    shape: &[usize],
    dtype: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    let a = np.call_method1("empty", (shape.to_vec(), dtype))?;
    let held = hold(py, &a, dtype)?;
    let dst = held.addr as *mut u8;
    let src: &[u8] = bytemuck::cast_slice(values);
    if src.len() != held.bytes {
        return Err(PyValueError::new_err(format!(
            "internal: {} bytes for an array of {} bytes",
            src.len(),
            held.bytes
        )));
    }
    if !src.is_empty() {
        // SAFETY: `a` was just made by numpy.empty with this shape and dtype: C-contiguous,
        // `held.bytes` long, owned by us alone; `src` has exactly that many bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    }
    Ok(a)
}
