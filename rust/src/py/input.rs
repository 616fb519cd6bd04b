//! Extracting token ids from Python objects.
//!
//! Accepted: a list or tuple of ints (numpy integer scalars too), a 1-D numpy
//! array of any integer dtype (borrowed without a copy when contiguous), any
//! 1-D C-contiguous buffer of integers (`array.array`, `memoryview`, ...),
//! objects with `__array__` (torch CPU tensors, pyarrow arrays), and other
//! iterables of ints such as `range`, and `TokenBuffer`s (a zero-copy snapshot). Rejected with `TokenInputError`: bools,
//! floats, None, strings, dicts and sets, arrays of more than one dimension,
//! and ids outside [0, 2**32-1].
//!
//! Extraction happens while attached to the interpreter and yields a
//! [`Holder`] that keeps the borrow alive; [`Holder::raw`] gives the slice
//! that the kernels validate and read after detaching.

use std::ffi::CStr;

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::IntoPyDict;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString, PyTuple,
};

use super::errors::input_error;
use crate::ids::Raw;

/// Integer width and signedness of a buffer's elements.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Width {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
}

/// Keeps the source of a token sequence alive while the kernels read it.
///
/// Arrays and buffers are read in place, without a copy. As with any
/// zero-copy reader, mutating an input array from another thread during a
/// call gives an unspecified (but memory-safe to Python) result.
pub(crate) enum Holder<'py> {
    /// A C-contiguous, aligned, native-order numpy array of integers.
    Array(Bound<'py, PyUntypedArray>, Width),
    Buffer(PyUntypedBuffer, Width),
    /// A `TokenBuffer` snapshot: shared, never written again.
    Shared(std::sync::Arc<Vec<u32>>),
    Owned(Vec<u32>),
}

impl Holder<'_> {
    /// The borrowed slice (not yet validated).
    pub(crate) fn raw(&self) -> Raw<'_> {
        match self {
            Holder::Array(a, w) => {
                // SAFETY: `from_numpy` only makes holders of non-empty,
                // C-contiguous, aligned 1-D arrays whose dtype has width `w`;
                // the array (and so its data) lives as long as the holder.
                unsafe { typed_slice((*a.as_array_ptr()).fields.data.cast(), a.len(), *w) }
            }
            Holder::Buffer(b, w) => {
                // SAFETY: `from_buffer` only makes holders of non-empty,
                // C-contiguous, aligned 1-D buffers of width `w`; the export
                // lasts as long as the `PyUntypedBuffer`.
                unsafe { typed_slice(b.buf_ptr().cast(), b.item_count(), *w) }
            }
            Holder::Shared(v) => Raw::U32(v),
            Holder::Owned(v) => Raw::U32(v),
        }
    }
}

impl Holder<'_> {
    /// The ids, validated: `u32` (and non-negative `i32`) arrays are
    /// borrowed as they are, other widths converted.
    ///
    /// # Errors
    /// The first element that is not an id.
    pub(crate) fn ids(&self) -> Result<std::borrow::Cow<'_, [u32]>, crate::error::IdError> {
        use std::borrow::Cow;
        match self.raw() {
            Raw::U32(s) => Ok(Cow::Borrowed(s)),
            Raw::I32(s) => crate::ids::i32_as_ids(s).map(Cow::Borrowed),
            other => other.normalize().map(|c| Cow::Owned(c.into_owned())),
        }
    }
}

/// # Safety
/// `p` must point to `n` initialised, aligned elements of width `w`, valid
/// for the returned lifetime.
unsafe fn typed_slice<'a>(p: *const u8, n: usize, w: Width) -> Raw<'a> {
    unsafe {
        match w {
            Width::U8 => Raw::U8(std::slice::from_raw_parts(p.cast(), n)),
            Width::I8 => Raw::I8(std::slice::from_raw_parts(p.cast(), n)),
            Width::U16 => Raw::U16(std::slice::from_raw_parts(p.cast(), n)),
            Width::I16 => Raw::I16(std::slice::from_raw_parts(p.cast(), n)),
            Width::U32 => Raw::U32(std::slice::from_raw_parts(p.cast(), n)),
            Width::I32 => Raw::I32(std::slice::from_raw_parts(p.cast(), n)),
            Width::U64 => Raw::U64(std::slice::from_raw_parts(p.cast(), n)),
            Width::I64 => Raw::I64(std::slice::from_raw_parts(p.cast(), n)),
        }
    }
}

/// Element width of a struct-module format string such as `"<i"` or `"q"`,
/// or None for a non-integer or non-native-order format.
fn format_width(format: &CStr, item_size: usize) -> Option<Width> {
    let f = format.to_bytes();
    let (order, code) = match f {
        [c] => (b'@', *c),
        [o, c] => (*o, *c),
        _ => return None,
    };
    let native = match order {
        b'@' | b'=' => true,
        b'<' => cfg!(target_endian = "little"),
        b'>' | b'!' => cfg!(target_endian = "big"),
        _ => false,
    };
    if !native {
        return None;
    }
    let signed = match code {
        b'b' | b'h' | b'i' | b'l' | b'q' | b'n' => true,
        b'B' | b'H' | b'I' | b'L' | b'Q' | b'N' => false,
        _ => return None,
    };
    Some(match (item_size, signed) {
        (1, false) => Width::U8,
        (1, true) => Width::I8,
        (2, false) => Width::U16,
        (2, true) => Width::I16,
        (4, false) => Width::U32,
        (4, true) => Width::I32,
        (8, false) => Width::U64,
        (8, true) => Width::I64,
        _ => return None,
    })
}

/// Borrow a contiguous 1-D numpy array of an integer dtype; `Ok(None)` when
/// it needs a conversion first (non-contiguous, unaligned, foreign byte order).
fn from_numpy<'py>(arr: &Bound<'py, PyUntypedArray>, argument: &str) -> PyResult<Option<Holder<'py>>> {
    let py = arr.py();
    if arr.ndim() != 1 {
        return Err(input_error(
            py,
            argument,
            None,
            &format!("expected a 1-D sequence of token ids, got a {}-D array of shape {:?}", arr.ndim(), arr.shape()),
        ));
    }
    let dtype = arr.dtype();
    let width = match (dtype.kind(), dtype.itemsize()) {
        (b'u', 1) => Width::U8,
        (b'i', 1) => Width::I8,
        (b'u', 2) => Width::U16,
        (b'i', 2) => Width::I16,
        (b'u', 4) => Width::U32,
        (b'i', 4) => Width::I32,
        (b'u', 8) => Width::U64,
        (b'i', 8) => Width::I64,
        _ => {
            return Err(input_error(
                py,
                argument,
                None,
                &format!(
                    "expected an integer array, got dtype {}",
                    dtype.str().map(|s| s.to_string()).unwrap_or_default()
                ),
            ))
        }
    };
    if arr.len() == 0 {
        return Ok(Some(Holder::Owned(Vec::new())));
    }
    if !arr.is_c_contiguous() || !arr.is_aligned() || dtype.is_native_byteorder() == Some(false) {
        return Ok(None);
    }
    Ok(Some(Holder::Array(arr.clone(), width)))
}

/// Borrow a buffer-protocol object of integers, or `Ok(None)` when the
/// object exposes no buffer.
fn from_buffer<'py>(obj: &Bound<'py, PyAny>, argument: &str) -> PyResult<Option<Holder<'py>>> {
    let py = obj.py();
    let buf = match PyUntypedBuffer::get(obj) {
        Ok(buf) => buf,
        // No buffer protocol at all: the caller tries the other routes.
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) => return Ok(None),
        // A buffer that cannot be read now (a released memoryview, a
        // locked export) is an error, never an empty sequence.
        Err(e) => {
            return Err(input_error(py, argument, None, &format!("cannot read this buffer: {}", e.value(py))));
        }
    };
    let Some(width) = format_width(buf.format(), buf.item_size()) else {
        return Err(input_error(
            py,
            argument,
            None,
            &format!(
                "expected a buffer of native-order integers, got format {:?} with item size {}",
                buf.format().to_string_lossy(),
                buf.item_size()
            ),
        ));
    };
    if buf.dimensions() > 1 {
        return Err(input_error(
            py,
            argument,
            None,
            &format!("expected a 1-D sequence of token ids, got a {}-D buffer", buf.dimensions()),
        ));
    }
    if !buf.is_c_contiguous() {
        return Err(input_error(py, argument, None, "buffer is not contiguous; pass a contiguous copy"));
    }
    if buf.item_count() == 0 || buf.buf_ptr().is_null() {
        // An empty buffer may export a null or dangling pointer.
        return Ok(Some(Holder::Owned(Vec::new())));
    }
    if (buf.buf_ptr() as usize) % buf.item_size() != 0 {
        // Unaligned memory cannot be viewed as a typed slice: copy it.
        let bytes: Vec<u8> = {
            let mut v = vec![0u8; buf.len_bytes()];
            // SAFETY: the buffer is contiguous and exported for `len_bytes` bytes.
            unsafe { std::ptr::copy_nonoverlapping(buf.buf_ptr().cast::<u8>(), v.as_mut_ptr(), v.len()) };
            v
        };
        return Ok(Some(Holder::Owned(unaligned_ids(&bytes, width, argument, py)?)));
    }
    Ok(Some(Holder::Buffer(buf, width)))
}

fn unaligned_ids(bytes: &[u8], width: Width, argument: &str, py: Python<'_>) -> PyResult<Vec<u32>> {
    macro_rules! decode {
        ($t:ty, $variant:ident) => {{
            let vals: Vec<$t> = bytes
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| <$t>::from_ne_bytes(c.try_into().expect("chunk has the element size")))
                .collect();
            Raw::$variant(&vals).normalize().map(|c| c.into_owned())
        }};
    }
    let r = match width {
        Width::U8 => decode!(u8, U8),
        Width::I8 => decode!(i8, I8),
        Width::U16 => decode!(u16, U16),
        Width::I16 => decode!(i16, I16),
        Width::U32 => decode!(u32, U32),
        Width::I32 => decode!(i32, I32),
        Width::U64 => decode!(u64, U64),
        Width::I64 => decode!(i64, I64),
    };
    r.map_err(|e| super::errors::id_error(py, argument, &e))
}

/// One Python object as a token id.
fn item_id(item: &Bound<'_, PyAny>, argument: &str, pos: usize) -> PyResult<u32> {
    let py = item.py();
    let bad = |what: &str| input_error(py, argument, Some(pos), what);
    if item.is_instance_of::<PyBool>() {
        return Err(bad(&format!("token id at position {pos} is a bool, not an int")));
    }
    if item.is_instance_of::<PyFloat>() {
        return Err(bad(&format!("token id at position {pos} is a float ({item}), not an int")));
    }
    match item.extract::<i64>() {
        Ok(v) if (0..=i64::from(u32::MAX)).contains(&v) => Ok(v as u32),
        Ok(v) if v < 0 => {
            Err(bad(&format!("token id at position {pos} is negative ({v}); ids must be in [0, 2**32-1]")))
        }
        Ok(v) => Err(bad(&format!("token id at position {pos} is too large ({v}); ids must be in [0, 2**32-1]"))),
        Err(_) if item.is_instance_of::<PyInt>() => {
            Err(bad(&format!("token id at position {pos} is out of range ({item}); ids must be in [0, 2**32-1]")))
        }
        Err(_) => Err(bad(&format!(
            "token id at position {pos} is a {}, not an int",
            item.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
        ))),
    }
}

/// The most ids reserved up front from a length an object reports: a
/// `__len__` is not trusted (it may claim 10**15 items and yield three).
pub(crate) const MAX_PREALLOC: usize = 1 << 20;

/// `Vec::with_capacity(hint)` for a length an object reports, capped (see [`MAX_PREALLOC`]).
pub(crate) fn with_hint<T>(hint: usize) -> Vec<T> {
    Vec::with_capacity(hint.min(MAX_PREALLOC))
}

/// Push onto a vector grown from an untrusted length: running out of
/// memory is a `MemoryError`, not an abort of the process.
pub(crate) fn push_checked<T>(out: &mut Vec<T>, item: T) -> PyResult<()> {
    if out.len() == out.capacity() && out.try_reserve(out.capacity().max(16)).is_err() {
        return Err(pyo3::exceptions::PyMemoryError::new_err(format!(
            "out of memory after {} items of a token sequence",
            out.len()
        )));
    }
    out.push(item);
    Ok(())
}

fn walk<'py>(
    items: impl Iterator<Item = PyResult<Bound<'py, PyAny>>>,
    hint: usize,
    argument: &str,
) -> PyResult<Vec<u32>> {
    let mut out = with_hint(hint);
    for (pos, item) in items.enumerate() {
        push_checked(&mut out, item_id(&item?, argument, pos)?)?;
    }
    Ok(out)
}

/// A list of ints, read with the C API: exact ints take a fast path with no
/// reference counting; anything else goes through [`item_id`].
fn walk_list(list: &Bound<'_, PyList>, argument: &str) -> PyResult<Vec<u32>> {
    let py = list.py();
    let mut n = list.len();
    let mut out = Vec::with_capacity(n);
    let mut pos = 0usize;
    while pos < n {
        // SAFETY: attached to the interpreter and `pos < n`, the length read
        // after the last time Python code could run; the borrowed reference
        // stays valid until Python code runs, and the fast path runs none
        // (PyLong_AsLongAndOverflow on an exact int cannot call back).
        let fast = unsafe {
            let item = ffi::PyList_GetItem(list.as_ptr(), pos as ffi::Py_ssize_t);
            if item.is_null() {
                return Err(PyErr::fetch(py));
            }
            if ffi::Py_TYPE(item) == std::ptr::addr_of_mut!(ffi::PyLong_Type) {
                let mut overflow = 0;
                #[allow(clippy::useless_conversion)] // c_long is i32 on some targets
                let v = i64::from(ffi::PyLong_AsLongAndOverflow(item, &mut overflow));
                (overflow == 0 && (0..=i64::from(u32::MAX)).contains(&v)).then_some(v as u32)
            } else {
                None
            }
        };
        match fast {
            Some(id) => out.push(id),
            None => {
                // The slow path may run Python code (`__index__`), which may
                // change the list: read its length again afterwards.
                out.push(item_id(&list.get_item(pos)?, argument, pos)?);
                n = list.len();
            }
        }
        pos += 1;
    }
    Ok(out)
}

/// Extract a token sequence from `obj`; `argument` names it in errors.
pub(crate) fn extract<'py>(obj: &Bound<'py, PyAny>, argument: &str) -> PyResult<Holder<'py>> {
    let py = obj.py();
    if let Ok(list) = obj.cast::<PyList>() {
        return walk_list(list, argument).map(Holder::Owned);
    }
    if let Ok(buf) = obj.cast::<super::buffer::TokenBuffer>() {
        return Ok(Holder::Shared(buf.get().snapshot(py)));
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        return walk(tuple.iter().map(Ok), tuple.len(), argument).map(Holder::Owned);
    }
    if let Ok(arr) = obj.cast::<PyUntypedArray>() {
        if let Some(h) = from_numpy(arr, argument)? {
            return Ok(h);
        }
        // Non-contiguous, unaligned or foreign byte order: one fresh,
        // aligned, contiguous copy in native order.
        let np = py.import("numpy")?;
        let native = arr.dtype().call_method1("newbyteorder", ("=",))?;
        let kwargs = [("dtype", native.into_any()), ("order", pyo3::types::PyString::new(py, "C").into_any())]
            .into_py_dict(py)?;
        let copy = np.call_method("array", (obj,), Some(&kwargs))?;
        let copy = copy.cast_into::<PyUntypedArray>().map_err(PyErr::from)?;
        return from_numpy(&copy, argument)?
            .ok_or_else(|| input_error(py, argument, None, "array could not be made contiguous"));
    }
    if obj.is_instance_of::<PyString>() {
        return Err(input_error(
            py,
            argument,
            None,
            "expected token ids, got a str (encode it with the tokenizer first)",
        ));
    }
    if obj.is_none() {
        return Err(input_error(py, argument, None, "expected token ids, got None"));
    }
    if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyByteArray>() || !obj.hasattr("__array__")? {
        if let Some(h) = from_buffer(obj, argument)? {
            return Ok(h);
        }
    }
    if obj.hasattr("__array__")? {
        // torch tensors, pyarrow arrays, ...: view through numpy.
        let arr = py.import("numpy")?.call_method1("asarray", (obj,))?;
        if let Ok(arr) = arr.cast::<PyUntypedArray>() {
            let arr = arr.clone();
            return match from_numpy(&arr, argument)? {
                Some(h) => Ok(h),
                None => extract(&arr.call_method0("copy")?, argument),
            };
        }
    }
    if obj.is_instance_of::<PyDict>() || obj.is_instance_of::<PySet>() || obj.is_instance_of::<PyFrozenSet>() {
        return Err(input_error(
            py,
            argument,
            None,
            &format!("expected an ordered sequence of token ids, got a {}", obj.get_type().name()?),
        ));
    }
    match obj.try_iter() {
        Ok(iter) => walk(iter, obj.len().unwrap_or(0), argument).map(Holder::Owned),
        Err(_) => Err(input_error(
            py,
            argument,
            None,
            &format!("expected a sequence of token ids, got a {}", obj.get_type().name()?),
        )),
    }
}
