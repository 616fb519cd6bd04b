//! `RoleMarkers`: a chat format's message markers and the role table of an
//! id sequence (see `crate::roles`, the one owner of the rule).

use std::collections::HashMap;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use super::errors::id_error;
use super::input::extract;
use super::run;
use super::segment::Segmenter;
use crate::roles::{Markers, Table, Term, PROBE_IDS};
use crate::vocab::ByteTable;

/// A format's markers by token id: `fixed` (id -> role), `named` (id -> the
/// terminator of the role name after it: a token id or a text) and `inner`
/// (id -> the role of a message opened inside a block). Built by
/// `tito_fast.compare.roles.RoleTracker`.
#[pyclass(frozen, module = "tito_fast._core")]
pub struct RoleMarkers {
    markers: Markers,
}

/// A terminator as Python gives it: a token id or a text.
#[derive(FromPyObject)]
enum TermArg {
    Id(u32),
    Text(String),
}

impl RoleMarkers {
    /// The role table of valid `ids` with role names read from the byte table
    /// alone (the native check's, on its threads); None when the table cannot
    /// tell a name (then `table` asks the tokenizer's decode).
    pub(crate) fn table_by_bytes(&self, ids: &[u32], bytes: &ByteTable) -> Option<Table<'_>> {
        let positions = self.markers.positions(ids);
        let text = |run: &[u32]| bytes.text_bytes(run).and_then(|b| String::from_utf8(b).ok()).ok_or(());
        self.markers.table(ids, &positions, text).ok()
    }
}

/// `(starts, roles)` as `RoleMarkers.table` gives them.
pub(crate) fn table_to_py<'py>(py: Python<'py>, Table { starts, roles }: Table<'_>) -> PyResult<Bound<'py, PyTuple>> {
    let starts = PyArray1::from_vec(py, starts.into_iter().map(|s| s as i64).collect());
    // a few names, each made once
    let mut made: HashMap<&str, Bound<'py, PyString>> = HashMap::new();
    let names = PyList::empty(py);
    for role in roles {
        names.append(&*made.entry(role).or_insert_with(|| PyString::new(py, role)))?;
    }
    PyTuple::new(py, [starts.into_any(), names.into_any()])
}

#[pymethods]
impl RoleMarkers {
    #[new]
    #[pyo3(signature = (fixed, named, inner))]
    fn new(fixed: HashMap<u32, String>, named: HashMap<u32, TermArg>, inner: HashMap<u32, String>) -> Self {
        let term = |t| match t {
            TermArg::Id(i) => Term::Id(i),
            TermArg::Text(s) => Term::Text(s),
        };
        let named = named.into_iter().map(|(id, t)| (id, term(t))).collect();
        Self { markers: Markers::new(fixed, named, inner) }
    }

    /// `(starts, roles)`: where each message of `ids` starts (int64) and its
    /// role. Role names are decoded from `segmenter`'s byte table, or else by
    /// `decode(list_of_ids) -> str` (the tokenizer's decode).
    #[pyo3(signature = (ids, decode, segmenter = None))]
    fn table<'py>(
        &self,
        py: Python<'py>,
        ids: &Bound<'py, PyAny>,
        decode: &Bound<'py, PyAny>,
        segmenter: Option<PyRef<'py, Segmenter>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let h = extract(ids, "ids")?;
        let r = h.raw();
        let (ids, positions) = run(py, r.len(), || {
            r.normalize().map(|ids| {
                let at = self.markers.positions(&ids);
                (ids, at)
            })
        })
        .map_err(|e| id_error(py, "ids", &e))?;
        let bytes = segmenter.as_ref().and_then(|s| s.byte_table());
        // what `decode` gave for short runs the byte table could not tell (role names repeat)
        let mut decoded: HashMap<Vec<u32>, String> = HashMap::new();
        let text = |run: &[u32]| -> PyResult<String> {
            if let Some(s) = bytes.and_then(|t| t.text_bytes(run)).and_then(|b| String::from_utf8(b).ok()) {
                return Ok(s);
            }
            let short = run.len() <= PROBE_IDS + 1;
            if let Some(s) = decoded.get(run).filter(|_| short) {
                return Ok(s.clone());
            }
            let s: String = decode.call1((run.to_vec(),))?.extract()?;
            if short {
                decoded.insert(run.to_vec(), s.clone());
            }
            Ok(s)
        };
        table_to_py(py, self.markers.table(&ids, &positions, text)?)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let m = &slf.get().markers;
        let named = PyDict::new(py);
        for (id, term) in m.named() {
            match term {
                Term::Id(t) => named.set_item(id, t)?,
                Term::Text(t) => named.set_item(id, t)?,
            }
        }
        let args = PyTuple::new(
            py,
            [
                m.fixed().clone().into_pyobject(py)?.into_any(),
                named.into_any(),
                m.inner().clone().into_pyobject(py)?.into_any(),
            ],
        )?;
        PyTuple::new(py, [slf.get_type().into_any(), args.into_any()])
    }
}
