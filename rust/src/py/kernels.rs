//! The sequence kernels as Python functions: common prefix (one pair, a
//! batch, CSR), the prefix check, trailing trim and the family merge, plus
//! the helpers the other bindings share (detaching, argument extraction).

use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyFrozenSet, PyList, PySet, PySlice};

use super::errors::{batch_error, id_error, input_error, prefix_error};
use super::input::{extract, push_checked, with_hint, Holder};
use crate::batch::{self, BatchError, Side};
use crate::error::IdError;
use crate::ids::{prepare_pair, Raw};
use crate::merge::{trimmed_len, Splice};
use crate::prefix;

/// Below this many ids a call stays attached: releasing and re-taking the
/// interpreter lock costs more than the work itself.
pub(crate) const DETACH_MIN: usize = 4096;

/// Run `f`, detached from the interpreter when the input is large.
pub(crate) fn run<T: Send>(py: Python<'_>, n: usize, f: impl FnOnce() -> T + Send) -> T {
    if n >= DETACH_MIN {
        py.detach(f)
    } else {
        f()
    }
}

pub(crate) fn threads_arg(threads: Option<i64>) -> PyResult<Option<usize>> {
    match threads {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX).min(crate::batch::MAX_THREADS))),
        Some(n) => Err(PyValueError::new_err(format!("threads must be >= 1 or None, got {n}"))),
    }
}

/// Map a kernel's (side, error) to the exception naming the argument.
fn side_error(py: Python<'_>, names: (&str, &str), (side, e): (Side, IdError)) -> PyErr {
    id_error(py, if side == Side::A { names.0 } else { names.1 }, &e)
}

/// Length of the longest common prefix of two token sequences.
#[pyfunction]
pub(crate) fn common_prefix_len(py: Python<'_>, a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<usize> {
    let (ha, hb) = (extract(a, "a")?, extract(b, "b")?);
    let (ra, rb) = (ha.raw(), hb.raw());
    run(py, ra.len() + rb.len(), || {
        // Two arrays of one width other than 32 bits (numpy's default 64-bit
        // integers, or narrow ones): checked in one read-only pass each and
        // compared as they are, never converted into copies.
        let wide = match (&ra, &rb) {
            (Raw::I64(x), Raw::I64(y)) => prefix::common_prefix_len_wide(x, y),
            (Raw::U64(x), Raw::U64(y)) => prefix::common_prefix_len_wide(x, y),
            (Raw::I16(x), Raw::I16(y)) => prefix::common_prefix_len_narrow(x, y, true),
            (Raw::U16(x), Raw::U16(y)) => prefix::common_prefix_len_narrow(x, y, false),
            (Raw::I8(x), Raw::I8(y)) => prefix::common_prefix_len_narrow(x, y, true),
            (Raw::U8(x), Raw::U8(y)) => prefix::common_prefix_len_narrow(x, y, false),
            _ => None,
        };
        if let Some(n) = wide {
            return Ok(n);
        }
        let (pa, pb) = prepare_pair(&ra, &rb)?;
        prefix::common_prefix_len_checked(pa.checked(), pb.checked())
    })
    .map_err(|e| side_error(py, ("a", "b"), e))
}

/// The TITO prefix check; raises `PrefixMismatchError` on failure.
#[pyfunction]
#[pyo3(signature = (stored, new, *, max_trim_tokens = 0))]
pub(crate) fn check_prefix(
    py: Python<'_>,
    stored: &Bound<'_, PyAny>,
    new: &Bound<'_, PyAny>,
    max_trim_tokens: i64,
) -> PyResult<()> {
    let Ok(max_trim) = usize::try_from(max_trim_tokens) else {
        return Err(PyValueError::new_err(format!("max_trim_tokens must be >= 0, got {max_trim_tokens}")));
    };
    let (hs, hn) = (extract(stored, "stored")?, extract(new, "new")?);
    let (rs, rn) = (hs.raw(), hn.raw());
    let r = run(py, rs.len() + rn.len(), || {
        let (ps, pn) = prepare_pair(&rs, &rn)?;
        prefix::check_prefix_checked(ps.checked(), pn.checked(), max_trim)
    });
    match r {
        Err(e) => Err(side_error(py, ("stored", "new"), e)),
        Ok(Err(m)) => Err(prefix_error(py, &m)),
        Ok(Ok(())) => Ok(()),
    }
}

/// Extract a sequence of token sequences, each named `name[i]` in errors.
pub(crate) fn extract_seqs<'py>(seqs: &Bound<'py, PyAny>, name: &str) -> PyResult<Vec<Holder<'py>>> {
    let py = seqs.py();
    let iter = seqs.try_iter().map_err(|_| input_error(py, name, None, "expected a sequence of token sequences"))?;
    let mut out = with_hint(seqs.len().unwrap_or(0));
    for (i, item) in iter.enumerate() {
        push_checked(&mut out, extract(&item?, &format!("{name}[{i}]"))?)?;
    }
    Ok(out)
}

/// Common prefix length of each pair `(a_seqs[i], b_seqs[i])`, in parallel.
#[pyfunction]
#[pyo3(signature = (a_seqs, b_seqs, *, threads = None))]
pub(crate) fn common_prefix_len_batch<'py>(
    py: Python<'py>,
    a_seqs: &Bound<'py, PyAny>,
    b_seqs: &Bound<'py, PyAny>,
    threads: Option<i64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let threads = threads_arg(threads)?;
    let ha = extract_seqs(a_seqs, "a_seqs")?;
    let hb = extract_seqs(b_seqs, "b_seqs")?;
    if ha.len() != hb.len() {
        return Err(input_error(
            py,
            "b_seqs",
            None,
            &format!("holds {} sequences but a_seqs holds {}", hb.len(), ha.len()),
        ));
    }
    let ra: Vec<Raw<'_>> = ha.iter().map(Holder::raw).collect();
    let rb: Vec<Raw<'_>> = hb.iter().map(Holder::raw).collect();
    let total: usize = ra.iter().chain(&rb).map(Raw::len).sum();
    let out = run(py, total, || batch::with_threads(threads, || batch::common_prefix_len_pairs(&ra, &rb)))
        .map_err(|e| batch_error(py, ("a_seqs", "b_seqs"), &e))?;
    Ok(PyArray1::from_vec(py, out))
}

/// CSR offsets as `i64`: numpy integer arrays, lists or other iterables.
fn extract_offsets(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<i64>> {
    let py = obj.py();
    if let Ok(arr) = obj.cast::<PyUntypedArray>() {
        if arr.ndim() != 1 || !matches!(arr.dtype().kind(), b'i' | b'u') {
            return Err(input_error(py, name, None, "expected a 1-D integer array of offsets"));
        }
        let as64 = arr.call_method1("astype", ("int64",))?;
        let as64 = as64.cast::<PyArray1<i64>>().map_err(PyErr::from)?;
        return Ok(as64.try_readonly().map_err(|e| PyValueError::new_err(e.to_string()))?.as_array().to_vec());
    }
    let h = extract(obj, name)?;
    let r = h.raw();
    let ids = r.normalize().map_err(|e| {
        input_error(py, name, Some(e.pos), &format!("offset at position {} is not in [0, 2**32-1]", e.pos))
    })?;
    Ok(ids.iter().map(|&x| i64::from(x)).collect())
}

/// Common prefix length of each row of two CSR batches (flat values plus
/// `n_rows + 1` offsets, the layout of Arrow list columns), in parallel.
#[pyfunction]
#[pyo3(signature = (a_values, a_offsets, b_values, b_offsets, *, threads = None))]
pub(crate) fn common_prefix_len_csr<'py>(
    py: Python<'py>,
    a_values: &Bound<'py, PyAny>,
    a_offsets: &Bound<'py, PyAny>,
    b_values: &Bound<'py, PyAny>,
    b_offsets: &Bound<'py, PyAny>,
    threads: Option<i64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let threads = threads_arg(threads)?;
    let (hav, hbv) = (extract(a_values, "a_values")?, extract(b_values, "b_values")?);
    let ao = extract_offsets(a_offsets, "a_offsets")?;
    let bo = extract_offsets(b_offsets, "b_offsets")?;
    if ao.len() != bo.len() {
        return Err(input_error(
            py,
            "b_offsets",
            None,
            &format!(
                "describes {} rows but a_offsets describes {}",
                bo.len().saturating_sub(1),
                ao.len().saturating_sub(1)
            ),
        ));
    }
    let (rav, rbv) = (hav.raw(), hbv.raw());
    let out = run(py, rav.len() + rbv.len(), || -> Result<Vec<i64>, BatchError> {
        batch::check_offsets(Side::A, &ao, rav.len())?;
        batch::check_offsets(Side::B, &bo, rbv.len())?;
        batch::with_threads(threads, || batch::common_prefix_len_csr(&rav, &ao, &rbv, &bo))
    });
    match out {
        Ok(v) => Ok(PyArray1::from_vec(py, v)),
        Err(BatchError::Id { side, err, .. }) => {
            Err(id_error(py, if side == Side::A { "a_values" } else { "b_values" }, &err))
        }
        Err(e) => Err(batch_error(py, ("a_offsets", "b_offsets"), &e)),
    }
}

/// A set of ids: a set, frozenset, or any token sequence; None is empty.
pub(crate) fn extract_id_set(obj: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Vec<u32>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(Vec::new());
    };
    let py = obj.py();
    let holder = if obj.is_instance_of::<PySet>() || obj.is_instance_of::<PyFrozenSet>() {
        let list = PyList::new(py, obj.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
        extract(list.as_any(), name)?
    } else {
        extract(obj, name)?
    };
    let mut ids = holder.raw().normalize().map_err(|e| id_error(py, name, &e))?.into_owned();
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// `obj[:n]` for sliceable inputs (same kind out as in); a list otherwise.
fn slice_like<'py>(obj: &Bound<'py, PyAny>, n: usize, ids: &[u32]) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let end = isize::try_from(n).unwrap_or(isize::MAX);
    match obj.get_item(PySlice::new(py, 0, end, 1)) {
        Ok(s) => Ok(s),
        Err(_) => Ok(PyList::new(py, &ids[..n])?.into_any()),
    }
}

/// Strip every trailing id found in `trim_ids`; returns the same kind of
/// sequence as `ids` (a list for a list, a view for a numpy array).
#[pyfunction]
#[pyo3(signature = (ids, trim_ids))]
pub(crate) fn trim_trailing<'py>(
    py: Python<'py>,
    ids: &Bound<'py, PyAny>,
    trim_ids: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let trim = extract_id_set(Some(trim_ids), "trim_ids")?;
    let h = extract(ids, "ids")?;
    let r = h.raw();
    let norm = run(py, r.len(), || r.normalize()).map_err(|e| id_error(py, "ids", &e))?;
    let n = trimmed_len(&norm, &trim);
    slice_like(ids, n, &norm)
}

/// The `append_after=(X, Y)` argument: Y is one id or a sequence of ids.
fn extract_append_after(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(u32, Vec<u32>)>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let py = obj.py();
    let items: Vec<Bound<'_, PyAny>> = match obj.try_iter() {
        Ok(it) => it.collect::<PyResult<_>>()?,
        Err(_) => Vec::new(),
    };
    if items.len() != 2 {
        return Err(input_error(
            py,
            "append_after",
            None,
            "expected a pair (X, Y): append Y when the prefix ends with X",
        ));
    }
    let x = extract(PyList::new(py, [&items[0]])?.as_any(), "append_after")?;
    let x = x.raw().normalize().map_err(|e| id_error(py, "append_after", &e))?[0];
    let ys = if items[1].cast::<pyo3::types::PyInt>().is_ok() {
        PyList::new(py, [&items[1]])?.into_any()
    } else {
        items[1].clone()
    };
    let ys = extract(&ys, "append_after[1]")?;
    let ys = ys.raw().normalize().map_err(|e| id_error(py, "append_after[1]", &e))?.into_owned();
    Ok(Some((x, ys)))
}

/// Ids as a numpy array of `dtype` (one of int32/int64/uint32/uint64).
fn ids_to_numpy<'py>(
    py: Python<'py>,
    ids: Vec<u32>,
    like: &Bound<'py, PyUntypedArray>,
    origin: impl Fn(usize) -> (&'static str, usize),
) -> PyResult<Bound<'py, PyAny>> {
    let dtype = like.dtype();
    let is = |t: Bound<'py, numpy::PyArrayDescr>| dtype.is_equiv_to(&t);
    if is(numpy::dtype::<i32>(py)) {
        if let Some(pos) = ids.iter().position(|&x| x > i32::MAX as u32) {
            let (arg, at) = origin(pos);
            return Err(input_error(
                py,
                arg,
                Some(at),
                &format!("token id {} at position {at} does not fit the prefix's int32 dtype", ids[pos]),
            ));
        }
        let v: Vec<i32> = ids.into_iter().map(|x| x as i32).collect();
        return Ok(PyArray1::from_vec(py, v).into_any());
    }
    if is(numpy::dtype::<i64>(py)) {
        return Ok(PyArray1::from_vec(py, ids.into_iter().map(i64::from).collect()).into_any());
    }
    if is(numpy::dtype::<u64>(py)) {
        return Ok(PyArray1::from_vec(py, ids.into_iter().map(u64::from).collect()).into_any());
    }
    Ok(PyArray1::from_vec(py, ids).into_any())
}

/// `prefix` with a family's seam rule applied, followed by `incremental`.
#[pyfunction]
#[pyo3(signature = (prefix, incremental, *, append_after = None, drop_last_if_in = None))]
pub(crate) fn merge_tokens<'py>(
    py: Python<'py>,
    prefix: &Bound<'py, PyAny>,
    incremental: &Bound<'py, PyAny>,
    append_after: Option<&Bound<'py, PyAny>>,
    drop_last_if_in: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let splice = Splice {
        append_after: extract_append_after(append_after)?,
        drop_last_if_in: extract_id_set(drop_last_if_in, "drop_last_if_in")?,
    };
    let (hp, hi) = (extract(prefix, "prefix")?, extract(incremental, "incremental")?);
    let (rp, ri) = (hp.raw(), hi.raw());
    let (merged, keep, extra) = run(py, rp.len() + ri.len(), || {
        let p = rp.normalize().map_err(|e| (Side::A, e))?;
        let i = ri.normalize().map_err(|e| (Side::B, e))?;
        let (keep, extra) = splice.seam(&p);
        Ok((splice.merge(&p, &i), keep, extra.len()))
    })
    .map_err(|e| side_error(py, ("prefix", "incremental"), e))?;
    if let Ok(list) = prefix.cast::<PyList>() {
        // Reuse the caller's int objects: a C-level slice of the prefix plus
        // the seam and incremental ids, instead of boxing every id anew.
        let out = list.get_slice(0, keep);
        let tail = &merged[keep..];
        match incremental.cast::<PyList>() {
            Ok(inc) if tail.len() == extra + inc.len() => {
                for &id in &tail[..extra] {
                    out.append(id)?;
                }
                return out.add(inc);
            }
            _ => {
                for &id in tail {
                    out.append(id)?;
                }
                return Ok(out.into_any());
            }
        }
    }
    if let Ok(arr) = prefix.cast::<PyUntypedArray>() {
        return ids_to_numpy(py, merged, arr, |pos| {
            if pos < keep + extra {
                ("append_after", pos - keep)
            } else {
                ("incremental", pos - keep - extra)
            }
        });
    }
    Ok(PyList::new(py, merged)?.into_any())
}
