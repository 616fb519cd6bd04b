//! `TokenBuffer`: the Python face of [`crate::buffer::TokenBuffer`].
//!
//! The class is frozen and keeps its state behind a mutex, so any number of
//! Python threads may share one buffer: calls are serialised, never refused.
//! The mutex is only ever taken while detached from the interpreter, and no
//! Python object is touched while it is held, so it cannot deadlock with the
//! interpreter lock.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PySlice, PyTuple};

use super::errors::{buffer_error, id_error, input_error};
use super::input::extract;
use crate::buffer::{TokenBuffer as Core, Undo};

/// Keeps a snapshot of the ids alive for numpy arrays that view it.
#[pyclass(frozen, module = "tito_fast._core")]
struct IdsView {
    data: Arc<Vec<u32>>,
}

/// An append-only sequence of token ids for one session, with checkpoints.
#[pyclass(frozen, module = "tito_fast._core", sequence)]
pub struct TokenBuffer {
    inner: Mutex<Core>,
}

fn lock(m: &Mutex<Core>) -> MutexGuard<'_, Core> {
    // Core operations do not panic midway, so a poisoned lock still guards
    // consistent state.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TokenBuffer {
    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut Core) -> R + Send) -> R {
        py.detach(|| f(&mut lock(&self.inner)))
    }

    /// The current ids, shared (see [`Core::snapshot`]).
    pub(crate) fn snapshot(&self, py: Python<'_>) -> Arc<Vec<u32>> {
        self.with(py, |b| b.snapshot())
    }

    /// Validated ids of a Python argument (validation runs detached).
    fn ids_arg(py: Python<'_>, obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<u32>> {
        let h = extract(obj, name)?;
        let r = h.raw();
        py.detach(|| r.normalize().map(std::borrow::Cow::into_owned)).map_err(|e| id_error(py, name, &e))
    }
}

/// Pickled state: ids as little-endian u32 bytes, checkpoints, and undo
/// records `(tag, pos, removed ids as bytes)`.
type State = (Vec<u8>, Vec<usize>, Vec<(usize, usize, Vec<u8>)>);

fn to_bytes(ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(py: Python<'_>, b: &[u8], what: &str) -> PyResult<Vec<u32>> {
    if b.len() % 4 != 0 {
        return Err(input_error(py, what, None, "pickled ids are not a whole number of uint32"));
    }
    Ok(b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

#[pymethods]
impl TokenBuffer {
    #[new]
    #[pyo3(signature = (ids = None))]
    fn new(py: Python<'_>, ids: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let ids = match ids {
            Some(obj) if !obj.is_none() => Self::ids_arg(py, obj, "ids")?,
            _ => Vec::new(),
        };
        Ok(Self { inner: Mutex::new(Core::from_ids(ids)) })
    }

    /// Append token ids.
    fn extend(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = Self::ids_arg(py, ids, "ids")?;
        self.with(py, |b| b.extend(&ids));
        Ok(())
    }

    /// Record the current length as a checkpoint; returns that length.
    fn checkpoint(&self, py: Python<'_>) -> usize {
        self.with(py, Core::checkpoint)
    }

    /// Drop the newest checkpoints and restore the ids of the newest one left.
    #[pyo3(signature = (n_checkpoints = 1))]
    fn rollback(&self, py: Python<'_>, n_checkpoints: i64) -> PyResult<usize> {
        let Ok(n) = usize::try_from(n_checkpoints) else {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "n_checkpoints must be >= 0, got {n_checkpoints}"
            )));
        };
        self.with(py, |b| b.rollback(n)).map_err(|e| buffer_error(&e))
    }

    /// Remove the last `n` ids and append `ids` in their place.
    fn replace_last(&self, py: Python<'_>, n: i64, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let Ok(n) = usize::try_from(n) else {
            return Err(pyo3::exceptions::PyValueError::new_err(format!("n must be >= 0, got {n}")));
        };
        let ids = Self::ids_arg(py, ids, "ids")?;
        self.with(py, |b| b.replace_last(n, &ids)).map_err(|e| buffer_error(&e))
    }

    /// Lengths recorded by `checkpoint()`, oldest first.
    #[getter]
    fn checkpoints(&self, py: Python<'_>) -> Vec<usize> {
        self.with(py, |b| b.checkpoints().to_vec())
    }

    /// Bytes owned by the buffer (id capacity, checkpoints, undo records).
    #[getter]
    fn nbytes(&self, py: Python<'_>) -> usize {
        self.with(py, |b| b.nbytes())
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.with(py, |b| b.len())
    }

    fn __getitem__<'py>(&self, py: Python<'py>, index: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let snap = self.with(py, |b| b.snapshot());
        if let Ok(slice) = index.cast::<PySlice>() {
            let len = isize::try_from(snap.len()).unwrap_or(isize::MAX);
            let ind = slice.indices(len)?;
            let mut out = Vec::with_capacity(ind.slicelength);
            let mut i = ind.start;
            for _ in 0..ind.slicelength {
                // `indices` keeps every visited position inside [0, len).
                out.push(snap[i as usize]);
                i += ind.step;
            }
            return Ok(PyList::new(py, out)?.into_any());
        }
        let i: isize = index.extract()?;
        let n = snap.len() as isize;
        let j = if i < 0 { i + n } else { i };
        if !(0..n).contains(&j) {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "TokenBuffer index {i} out of range for length {n}"
            )));
        }
        Ok(snap[j as usize].into_pyobject(py)?.into_any())
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyIterator>> {
        self.to_list(py)?.try_iter()
    }

    /// The ids as a new list of ints.
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let snap = self.with(py, |b| b.snapshot());
        PyList::new(py, snap.iter())
    }

    /// The ids as a read-only numpy uint32 array, without copying them.
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let snap = self.with(py, |b| b.snapshot());
        let view_owner = Bound::new(py, IdsView { data: snap })?;
        let data = Arc::clone(&view_owner.get().data);
        let view = ArrayView1::from(data.as_slice());
        // SAFETY: `view` points into the `Arc<Vec<u32>>` owned by
        // `view_owner`, which becomes the array's base object. The buffer
        // never writes to a vector that a snapshot shares (it copies first),
        // so the memory stays valid and unchanged for the array's lifetime.
        let arr = unsafe { PyArray1::borrow_from_array(&view, view_owner.into_any()) };
        arr.call_method("setflags", (), Some(&[("write", false)].into_py_dict(py)?))?;
        Ok(arr)
    }

    /// numpy's conversion hook: `np.asarray(buf)` is the zero-copy view.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arr = self.to_numpy(py)?.into_any();
        match (dtype.filter(|d| !d.is_none()), copy) {
            (Some(d), Some(false)) if !arr.getattr("dtype")?.eq(d)? => Err(pyo3::exceptions::PyValueError::new_err(
                "TokenBuffer holds uint32 ids; another dtype needs a copy (copy=False was given)",
            )),
            (Some(d), _) => arr.call_method1("astype", (d,)),
            (None, Some(true)) => arr.call_method0("copy"),
            (None, _) => Ok(arr),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let (len, cps) = self.with(py, |b| (b.len(), b.checkpoints().len()));
        format!("TokenBuffer(len={len}, checkpoints={cps})")
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let Ok(other) = other.cast::<TokenBuffer>() else {
            return Ok(py.NotImplemented());
        };
        let mine = self.with(py, |b| (b.snapshot(), b.checkpoints().to_vec()));
        let theirs = other.get().with(py, |b| (b.snapshot(), b.checkpoints().to_vec()));
        Ok((mine.0 == theirs.0 && mine.1 == theirs.1).into_pyobject(py)?.to_owned().into_any().unbind())
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let (ids, cps, undo) = slf.get().with(py, |b| {
            let (ids, cps, undo) = b.parts();
            (to_bytes(ids), cps.to_vec(), undo.to_vec())
        });
        let undo: Vec<(usize, usize, Bound<'py, PyBytes>)> =
            undo.iter().map(|u| (u.tag, u.pos, PyBytes::new(py, &to_bytes(&u.removed)))).collect();
        let state = (PyBytes::new(py, &ids), cps, undo);
        PyTuple::new(
            py,
            [slf.get_type().into_any(), PyTuple::empty(py).into_any(), state.into_pyobject(py)?.into_any()],
        )
    }

    fn __setstate__(&self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let (ids, cps, undo): State = state.extract()?;
        let ids = from_bytes(py, &ids, "state")?;
        let undo = undo
            .into_iter()
            .map(|(tag, pos, removed)| Ok(Undo { tag, pos, removed: from_bytes(py, &removed, "state")? }))
            .collect::<PyResult<Vec<_>>>()?;
        let core = Core::from_parts(ids, cps, undo).map_err(|e| buffer_error(&e))?;
        self.with(py, |b| *b = core);
        Ok(())
    }
}

use pyo3::types::IntoPyDict;
