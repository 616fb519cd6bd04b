//! `Segmenter`: boundary-id segmentation and alignment for the comparator.

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::errors::{id_error, input_error};
use super::input::extract;
use super::{extract_id_set, run};
use crate::error::IdError;
use crate::ids::Raw;
use crate::merge::trimmed_len;
use crate::prefix::Side;
use crate::segment::{align, segment, Alignment, IdSet, Segment};
use crate::vocab::{verdict, ByteTable, PairTexts};
use std::sync::Arc;

/// Segments a sequence at boundary ids and aligns two sequences' segments;
/// with a byte table it also decides most content comparisons without
/// decoding.
#[pyclass(frozen, module = "tito_fast._core")]
pub struct Segmenter {
    boundary: IdSet,
    ids: Vec<u32>,
    table: Option<Table>,
}

/// A byte table and the parts it was built from (kept for pickling).
struct Table {
    /// Shared with the native check that attributes on it (`SessionChecker`).
    table: Arc<ByteTable>,
    offsets: Vec<u32>,
    blob: Vec<u8>,
    added: Vec<u32>,
}

fn bounds<'py>(
    py: Python<'py>,
    segs: &[Segment],
    len: usize,
) -> (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<bool>>) {
    let mut starts: Vec<i64> = segs.iter().map(|s| s.start as i64).collect();
    starts.push(len as i64);
    let special: Vec<bool> = segs.iter().map(|s| s.special).collect();
    (PyArray1::from_vec(py, starts), PyArray1::from_vec(py, special))
}

/// One pair's alignment, its verdicts, the texts of the pairs to report and
/// the trimmed lengths.
pub(crate) type Aligned = (Alignment, Vec<i8>, Vec<PairTexts>, usize, usize);

/// How the assistant test reads a segment (see `Segmenter.align`).
#[derive(Clone, Copy)]
struct Probe<'a> {
    start: Option<&'a [u8]>,
    ids: usize,
}

impl Segmenter {
    /// The byte table, when one was given.
    pub(crate) fn byte_table(&self) -> Option<&ByteTable> {
        self.table.as_ref().map(|t| &*t.table)
    }

    /// The byte table itself, shared (not copied), when one was given.
    pub(crate) fn shared_byte_table(&self) -> Option<Arc<ByteTable>> {
        self.table.as_ref().map(|t| Arc::clone(&t.table))
    }

    /// Trim, segment and align two id sequences; give each differing pair
    /// its verdict (from the byte table when there is one).
    fn align_ids(&self, e: &[u32], a: &[u32], trim: &[u32], probe: Probe<'_>) -> Aligned {
        let (ne, na) = (trimmed_len(e, trim), trimmed_len(a, trim));
        let (e, a) = (&e[..ne], &a[..na]);
        let alignment = align(e, a, &self.boundary);
        let table = self.byte_table();
        let (verdicts, texts) = match &alignment {
            Alignment::Aligned { expected: es, actual: as_, differing } => differing
                .iter()
                .map(|&i| {
                    let (v, texts) = verdict(table, (e, es), (a, as_), i, probe.start, probe.ids);
                    (v as i8, texts)
                })
                .unzip(),
            Alignment::Structure { .. } => (Vec::new(), Vec::new()),
        };
        (alignment, verdicts, texts, ne, na)
    }

    /// `Segmenter.align` of two valid sequences (the native check's, on its
    /// threads): trimmed by `trim`, with the assistant test's `assistant_start`
    /// and `probe_ids`.
    pub(crate) fn align_valid(
        &self,
        e: &[u32],
        a: &[u32],
        trim: &[u32],
        assistant_start: Option<&[u8]>,
        probe_ids: usize,
    ) -> Aligned {
        self.align_ids(e, a, trim, Probe { start: assistant_start, ids: probe_ids })
    }

    /// Validate both raw sequences and align them; an error names the side
    /// (A: expected, B: actual) whose ids are invalid.
    fn align_raw(&self, x: &Raw<'_>, y: &Raw<'_>, trim: &[u32], probe: Probe<'_>) -> Result<Aligned, (Side, IdError)> {
        let e = x.normalize().map_err(|err| (Side::A, err))?;
        let a = y.normalize().map_err(|err| (Side::B, err))?;
        Ok(self.align_ids(&e, &a, trim, probe))
    }
}

/// How two id sequences' segments line up (`Segmenter.align`).
///
/// `kind` is "aligned" (same segment structure), "count" (segment counts
/// differ) or "pattern" (same count, other special/content pattern);
/// `differing` lists the aligned pairs whose ids differ (empty unless
/// aligned) and `verdicts` gives each of them a code (`VERDICT_*` of this
/// module); `expected_starts` / `actual_starts` (segment i is
/// `ids[starts[i]:starts[i+1]]`, after trimming) and `expected_special` /
/// `actual_special` describe both sides; `texts` gives each differing
/// pair's `(expected, actual)` UTF-8 texts when it is reported and the byte
/// table knows them, else None.
#[pyclass(frozen, module = "tito_fast._core", name = "Alignment")]
pub struct PyAlignment {
    #[pyo3(get)]
    kind: &'static str,
    #[pyo3(get)]
    differing: Py<PyArray1<i64>>,
    #[pyo3(get)]
    verdicts: Py<PyArray1<i8>>,
    #[pyo3(get)]
    expected_starts: Py<PyArray1<i64>>,
    #[pyo3(get)]
    expected_special: Py<PyArray1<bool>>,
    #[pyo3(get)]
    actual_starts: Py<PyArray1<i64>>,
    #[pyo3(get)]
    actual_special: Py<PyArray1<bool>>,
    #[pyo3(get)]
    texts: Py<PyList>,
}

#[pymethods]
impl PyAlignment {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Alignment(kind={:?}, differing={}, segments={}/{})",
            self.kind,
            self.differing.bind(py).len()?,
            self.expected_special.bind(py).len()?,
            self.actual_special.bind(py).len()?
        ))
    }
}

/// The Python form of an alignment.
pub(crate) fn aligned_to_py(
    py: Python<'_>,
    (alignment, verdicts, texts_in, ne, na): Aligned,
) -> PyResult<Bound<'_, PyAlignment>> {
    let (kind, differing, e, a) = match alignment {
        Alignment::Structure { expected, actual, pattern_only } => {
            (if pattern_only { "pattern" } else { "count" }, Vec::new(), expected, actual)
        }
        Alignment::Aligned { expected, actual, differing } => ("aligned", differing, expected, actual),
    };
    let differing = PyArray1::from_vec(py, differing.into_iter().map(|i| i as i64).collect::<Vec<_>>());
    let texts = PyList::empty(py);
    for t in &texts_in {
        match t {
            Some((x, y)) => texts.append(PyTuple::new(py, [PyBytes::new(py, x), PyBytes::new(py, y)])?)?,
            None => texts.append(py.None())?,
        }
    }
    let (es, esp) = bounds(py, &e, ne);
    let (as_, asp) = bounds(py, &a, na);
    Bound::new(
        py,
        PyAlignment {
            kind,
            differing: differing.unbind(),
            verdicts: PyArray1::from_vec(py, verdicts).unbind(),
            expected_starts: es.unbind(),
            expected_special: esp.unbind(),
            actual_starts: as_.unbind(),
            actual_special: asp.unbind(),
            texts: texts.unbind(),
        },
    )
}

#[pymethods]
impl Segmenter {
    #[new]
    #[pyo3(signature = (boundary_ids, byte_offsets = None, byte_blob = None, added_ids = None))]
    fn new(
        boundary_ids: &Bound<'_, PyAny>,
        byte_offsets: Option<&Bound<'_, PyAny>>,
        byte_blob: Option<Vec<u8>>,
        added_ids: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let py = boundary_ids.py();
        let ids = extract_id_set(Some(boundary_ids), "boundary_ids")?;
        let table = match (byte_offsets, byte_blob) {
            (Some(off), Some(blob)) => {
                let h = extract(off, "byte_offsets")?;
                let offsets = h.raw().normalize().map_err(|e| id_error(py, "byte_offsets", &e))?.into_owned();
                let added = extract_id_set(added_ids, "added_ids")?;
                let t = ByteTable::new(offsets.clone(), blob.clone(), &added)
                    .map_err(|m| input_error(py, "byte_offsets", None, &m))?;
                Some(Table { table: Arc::new(t), offsets, blob, added })
            }
            (None, None) => None,
            _ => return Err(input_error(py, "byte_blob", None, "byte_offsets and byte_blob go together")),
        };
        Ok(Self { boundary: IdSet::new(&ids), ids, table })
    }

    /// Whether a byte table was given.
    #[getter]
    fn has_byte_table(&self) -> bool {
        self.table.is_some()
    }

    /// The UTF-8 text bytes of `ids` from the byte table, or None when the
    /// table cannot tell (no table, an unknown id, a split character).
    fn text_bytes<'py>(&self, py: Python<'py>, ids: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let h = extract(ids, "ids")?;
        let r = h.raw();
        let ids = r.normalize().map_err(|e| id_error(py, "ids", &e))?;
        Ok(self.table.as_ref().and_then(|t| t.table.text_bytes(&ids)).map(|b| PyBytes::new(py, &b)))
    }

    /// Where each of `ids` starts in their decoded bytes, and where the last
    /// ends (int64, one more entry than `ids`), from the byte table; None
    /// without a table or for an id outside it.
    fn id_offsets<'py>(&self, py: Python<'py>, ids: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyArray1<i64>>>> {
        let Some(table) = self.byte_table() else { return Ok(None) };
        let h = extract(ids, "ids")?;
        let r = h.raw();
        let out = run(py, r.len(), || {
            r.normalize().map(|ids| {
                let mut out = Vec::with_capacity(ids.len() + 1);
                let mut at = 0i64;
                out.push(0);
                for &id in ids.iter() {
                    at += table.id_len(id)? as i64;
                    out.push(at);
                }
                Some(out)
            })
        })
        .map_err(|e| id_error(py, "ids", &e))?;
        Ok(out.map(|v| PyArray1::from_vec(py, v)))
    }

    /// How many bytes `ids` decode to, from the byte table (what `id_offsets`
    /// ends with, without the offsets); None without a table or for an id
    /// outside it.
    fn byte_len(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        let Some(table) = self.byte_table() else { return Ok(None) };
        let h = extract(ids, "ids")?;
        let r = h.raw();
        run(py, r.len(), || r.normalize().map(|ids| table.byte_len(&ids))).map_err(|e| id_error(py, "ids", &e))
    }

    /// The boundary ids, sorted.
    #[getter]
    fn boundary_ids(&self) -> Vec<u32> {
        self.ids.clone()
    }

    /// `(starts, special)`: segment i is `ids[starts[i]:starts[i+1]]`.
    fn segment<'py>(&self, py: Python<'py>, ids: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
        let h = extract(ids, "ids")?;
        let r = h.raw();
        let (segs, len) = run(py, r.len(), || r.normalize().map(|ids| (segment(&ids, &self.boundary), ids.len())))
            .map_err(|e| id_error(py, "ids", &e))?;
        let (starts, special) = bounds(py, &segs, len);
        PyTuple::new(py, [starts.into_any(), special.into_any()])
    }

    /// Trim both sequences, segment and align them (an `Alignment`).
    ///
    /// Each differing pair gets a verdict: same text, special ids differ,
    /// assistant text differs, other text differs, or unknown (no byte
    /// table, an unknown id, a split character). The assistant test reads the
    /// special before a content segment and its first `probe_ids` ids, and
    /// asks whether their text starts with `assistant_start` (UTF-8).
    #[pyo3(
        signature = (expected, actual, trim_ids = None, *, assistant_start = None, probe_ids = None),
        text_signature = "($self, expected, actual, trim_ids=None, *, assistant_start=None, probe_ids=20)"
    )]
    fn align<'py>(
        &self,
        py: Python<'py>,
        expected: &Bound<'py, PyAny>,
        actual: &Bound<'py, PyAny>,
        trim_ids: Option<&Bound<'py, PyAny>>,
        assistant_start: Option<&[u8]>,
        probe_ids: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAlignment>> {
        let probe = Probe { start: assistant_start, ids: probe_ids_arg(probe_ids)? };
        let trim = extract_id_set(trim_ids, "trim_trailing_ids")?;
        let (he, ha) = (extract(expected, "expected_ids")?, extract(actual, "actual_ids")?);
        let (re, ra) = (he.raw(), ha.raw());
        let result = run(py, re.len() + ra.len(), || self.align_raw(&re, &ra, &trim, probe));
        let aligned = result
            .map_err(|(side, err)| id_error(py, if side == Side::A { "expected_ids" } else { "actual_ids" }, &err))?;
        aligned_to_py(py, aligned)
    }

    /// `align` over many pairs, in parallel; returns a list of `align` results.
    #[pyo3(signature = (
        expected_seqs, actual_seqs, trim_ids = None, *, assistant_start = None, probe_ids = None, threads = None
    ), text_signature = "($self, expected_seqs, actual_seqs, trim_ids=None, *, assistant_start=None, probe_ids=20, threads=None)")]
    #[allow(clippy::too_many_arguments)]
    fn align_batch<'py>(
        &self,
        py: Python<'py>,
        expected_seqs: &Bound<'py, PyAny>,
        actual_seqs: &Bound<'py, PyAny>,
        trim_ids: Option<&Bound<'py, PyAny>>,
        assistant_start: Option<&[u8]>,
        probe_ids: Option<&Bound<'py, PyAny>>,
        threads: Option<i64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let probe = Probe { start: assistant_start, ids: probe_ids_arg(probe_ids)? };
        let threads = super::threads_arg(threads)?;
        let trim = extract_id_set(trim_ids, "trim_trailing_ids")?;
        let he = super::extract_seqs(expected_seqs, "expected_seqs")?;
        let ha = super::extract_seqs(actual_seqs, "actual_seqs")?;
        if he.len() != ha.len() {
            return Err(input_error(
                py,
                "actual_seqs",
                None,
                &format!("holds {} sequences but expected_seqs holds {}", ha.len(), he.len()),
            ));
        }
        let re: Vec<_> = he.iter().map(|h| h.raw()).collect();
        let ra: Vec<_> = ha.iter().map(|h| h.raw()).collect();
        let total = re.iter().chain(&ra).map(crate::ids::Raw::len).sum();
        let results = run(py, total, || {
            crate::batch::with_threads(threads, || {
                use rayon::prelude::*;
                re.par_iter().zip(ra.par_iter()).map(|(x, y)| self.align_raw(x, y, &trim, probe)).collect::<Vec<_>>()
            })
        });
        let out = PyList::empty(py);
        for (row, r) in results.into_iter().enumerate() {
            let aligned = r.map_err(|(side, err)| {
                let seqs = if side == Side::A { "expected_seqs" } else { "actual_seqs" };
                id_error(py, &format!("{seqs}[{row}]"), &err)
            })?;
            out.append(aligned_to_py(py, aligned)?)?;
        }
        Ok(out)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let me = slf.get();
        let none = || py.None().into_bound(py);
        let (off, blob, added) = match &me.table {
            Some(Table { offsets: off, blob, added, .. }) => (
                off.clone().into_pyobject(py)?.into_any(),
                PyBytes::new(py, blob).into_any(),
                added.clone().into_pyobject(py)?.into_any(),
            ),
            None => (none(), none(), none()),
        };
        let args = PyTuple::new(py, [me.ids.clone().into_pyobject(py)?.into_any(), off, blob, added])?;
        PyTuple::new(py, [slf.get_type().into_any(), args.into_any()])
    }
}

const PROBE_IDS_DEFAULT: usize = 20;

/// `probe_ids` as a count: a non-negative int (a bigger count than any
/// sequence holds means the whole segment); anything else is a ValueError
/// naming the argument.
pub(crate) fn probe_ids_arg(value: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    let Some(value) = value else {
        return Ok(PROBE_IDS_DEFAULT);
    };
    if value.is_instance_of::<pyo3::types::PyBool>() || !value.is_instance_of::<pyo3::types::PyInt>() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "probe_ids must be a non-negative int, got {}",
            value.get_type().name()?
        )));
    }
    if value.lt(0)? {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("probe_ids must be >= 0, got {value}")));
    }
    Ok(value.extract::<usize>().unwrap_or(usize::MAX))
}
