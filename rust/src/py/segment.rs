//! `Segmenter`: boundary-id segmentation and alignment for the comparator.

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::errors::id_error;
use super::input::extract;
use super::{extract_id_set, run};
use crate::merge::trimmed_len;
use crate::segment::{align, segment, Alignment, IdSet, Segment};

/// Segments a sequence at boundary ids and aligns two sequences' segments.
#[pyclass(frozen, module = "tito_fast._core")]
pub struct Segmenter {
    boundary: IdSet,
    ids: Vec<u32>,
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

#[pymethods]
impl Segmenter {
    #[new]
    fn new(boundary_ids: &Bound<'_, PyAny>) -> PyResult<Self> {
        let ids = extract_id_set(Some(boundary_ids), "boundary_ids")?;
        Ok(Self { boundary: IdSet::new(&ids), ids })
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

    /// Trim both sequences, segment and align them.
    ///
    /// Returns `(aligned, differing, (exp_starts, exp_special), (act_starts, act_special))`
    /// where `aligned` is "aligned", "count" or "pattern" and `differing` lists the
    /// aligned pairs whose ids differ (empty unless aligned).
    #[pyo3(signature = (expected, actual, trim_ids = None))]
    fn align<'py>(
        &self,
        py: Python<'py>,
        expected: &Bound<'py, PyAny>,
        actual: &Bound<'py, PyAny>,
        trim_ids: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let trim = extract_id_set(trim_ids, "trim_trailing_ids")?;
        let (he, ha) = (extract(expected, "expected_ids")?, extract(actual, "actual_ids")?);
        let (re, ra) = (he.raw(), ha.raw());
        let result = run(py, re.len() + ra.len(), || {
            let e = re.normalize().map_err(|err| ("expected_ids", err))?;
            let a = ra.normalize().map_err(|err| ("actual_ids", err))?;
            let (ne, na) = (trimmed_len(&e, &trim), trimmed_len(&a, &trim));
            Ok((align(&e[..ne], &a[..na], &self.boundary), ne, na))
        });
        let (alignment, ne, na) = result.map_err(|(arg, err)| id_error(py, arg, &err))?;
        let (kind, differing, e, a) = match alignment {
            Alignment::Structure { expected, actual, pattern_only } => {
                (if pattern_only { "pattern" } else { "count" }, Vec::new(), expected, actual)
            }
            Alignment::Aligned { expected, actual, differing } => ("aligned", differing, expected, actual),
        };
        let differing = PyArray1::from_vec(py, differing.into_iter().map(|i| i as i64).collect::<Vec<_>>());
        let eb = bounds(py, &e, ne);
        let ab = bounds(py, &a, na);
        PyTuple::new(
            py,
            [
                kind.into_pyobject(py)?.into_any(),
                differing.into_any(),
                PyTuple::new(py, [eb.0.into_any(), eb.1.into_any()])?.into_any(),
                PyTuple::new(py, [ab.0.into_any(), ab.1.into_any()])?.into_any(),
            ],
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let args = PyTuple::new(py, [slf.get().ids.clone().into_pyobject(py)?.into_any()])?;
        PyTuple::new(py, [slf.get_type().into_any(), args.into_any()])
    }
}
