//! `assemble_calls`: captured calls of many sessions to chains, on rayon
//! threads with the GIL released (`crate::assemble`).

use std::borrow::Cow;

use numpy::{PyArray1, PyArrayDescrMethods, PyReadonlyArray1, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::errors::{id_error, input_error};
use super::input::{extract, Holder};
use super::threads_arg;
use crate::assemble::{assemble_many, flatten, Calls, Options, Policy};
use crate::batch::with_threads;

/// Offsets that cut `n_values` values into rows start at 0 and end at
/// `n_values` (checked in O(1): each row read is checked where it is read).
fn offset_ends(py: Python<'_>, name: &str, off: &[i64], n_values: usize) -> PyResult<()> {
    if off.first() != Some(&0) {
        return Err(input_error(py, name, Some(0), "must start at 0"));
    }
    if off.last().and_then(|&o| usize::try_from(o).ok()) != Some(n_values) {
        return Err(input_error(
            py,
            name,
            Some(off.len() - 1),
            &format!("must end at the number of values ({n_values})"),
        ));
    }
    Ok(())
}

/// Offsets checked whole: from 0 to `n_values`, never decreasing.
fn offsets(py: Python<'_>, name: &str, off: &[i64], n_values: usize) -> PyResult<Vec<usize>> {
    offset_ends(py, name, off, n_values)?;
    let mut out = Vec::with_capacity(off.len());
    for (i, &o) in off.iter().enumerate() {
        if i > 0 && o < off[i - 1] {
            return Err(input_error(py, name, Some(i), &format!("decreases ({} after {})", o, off[i - 1])));
        }
        out.push(usize::try_from(o).map_err(|_| input_error(py, name, Some(i), "is negative"))?);
    }
    Ok(out)
}

/// The `prompts` argument, held while the matching reads it in place.
///
/// Arrays are read through [`Holder`], not numpy's borrow registry: that
/// costs a hash-map entry per array, and its conflict check is quadratic in
/// the number of views of one array (prompts cut from one buffer).
enum PromptRows<'py> {
    /// One id sequence per call.
    PerCall(Vec<Holder<'py>>),
    /// A CSR batch in chunks (an Arrow list column): values and offsets each.
    Chunks(Vec<(Holder<'py>, PyReadonlyArray1<'py, i64>)>),
}

impl<'py> PromptRows<'py> {
    fn extract(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        if let Ok(list) = obj.cast::<PyList>() {
            let mut out = Vec::with_capacity(list.len());
            for (i, item) in list.iter().enumerate() {
                // The cheap name first; the position is only spelled out for an error.
                match extract(&item, "prompts") {
                    Ok(h) => out.push(h),
                    Err(_) => {
                        return Err(extract(&item, &format!("prompts[{i}]"))
                            .err()
                            .unwrap_or_else(|| input_error(py, "prompts", Some(i), "is not a sequence of token ids")))
                    }
                }
            }
            return Ok(PromptRows::PerCall(out));
        }
        let pair = obj.cast::<PyTuple>().ok().filter(|t| t.len() == 2).ok_or_else(|| {
            input_error(
                py,
                "prompts",
                None,
                "must be a list of uint32 arrays or a (uint32 values, int64 offsets) pair (of arrays or lists of chunks)",
            )
        })?;
        let (values, offs) = (pair.get_item(0)?, pair.get_item(1)?);
        let (values, offs): (Vec<Bound<'py, PyAny>>, Vec<Bound<'py, PyAny>>) =
            match (values.cast::<PyList>(), offs.cast::<PyList>()) {
                (Ok(v), Ok(o)) => (v.iter().collect(), o.iter().collect()),
                (Err(_), Err(_)) => (vec![values], vec![offs]),
                _ => {
                    return Err(input_error(
                        py,
                        "prompts",
                        None,
                        "values and offsets must both be lists of chunks, or neither",
                    ))
                }
            };
        if values.len() != offs.len() {
            return Err(input_error(
                py,
                "prompts",
                None,
                &format!("has {} chunks of values for {} of offsets", values.len(), offs.len()),
            ));
        }
        let mut chunks = Vec::with_capacity(values.len());
        for (v, o) in values.iter().zip(&offs) {
            let o: PyReadonlyArray1<'py, i64> =
                o.extract().map_err(|_| input_error(py, "prompts", None, "offsets must be int64 arrays"))?;
            chunks.push((extract(v, "prompts")?, o));
        }
        Ok(PromptRows::Chunks(chunks))
    }

    /// The arrays (per call, or per chunk), validated.
    fn sources(&self, py: Python<'_>) -> PyResult<Vec<Cow<'_, [u32]>>> {
        let holders: Vec<&Holder<'py>> = match self {
            PromptRows::PerCall(h) => h.iter().collect(),
            PromptRows::Chunks(c) => c.iter().map(|x| &x.0).collect(),
        };
        holders
            .iter()
            .enumerate()
            .map(|(i, h)| h.ids().map_err(|e| id_error(py, &format!("prompts[{i}]"), &e)))
            .collect()
    }

    /// Each call's prompt, from `sources`, read where asked.
    fn rows<'a>(&'a self, py: Python<'_>, sources: &'a [Cow<'a, [u32]>]) -> PyResult<Rows<'a, u32>> {
        match self {
            PromptRows::PerCall(_) => Ok(Rows::PerRow(sources.iter().map(AsRef::as_ref).collect())),
            PromptRows::Chunks(chunks) => {
                let mut parts = Vec::with_capacity(chunks.len());
                for ((_, offs), v) in chunks.iter().zip(sources) {
                    let o =
                        offs.as_slice().map_err(|_| input_error(py, "prompts", None, "offsets must be contiguous"))?;
                    offset_ends(py, "prompts", o, v.len())?;
                    parts.push((v.as_ref(), o));
                }
                Ok(Rows::csr(parts))
            }
        }
    }
}

/// Rows of values: one slice per row, or cut from CSR chunks (values and
/// int64 offsets each) where a row is asked for. A batch of sessions reads
/// its own rows only: building every row's slice for each batch of a large
/// capture would cost the whole capture per batch.
enum Rows<'a, T> {
    PerRow(Vec<&'a [T]>),
    /// The chunks, and the first row of each (one more entry: the number of rows).
    Csr(Vec<(&'a [T], &'a [i64])>, Vec<usize>),
}

impl<'a, T> Rows<'a, T> {
    fn csr(parts: Vec<(&'a [T], &'a [i64])>) -> Self {
        let mut starts = Vec::with_capacity(parts.len() + 1);
        let mut n = 0;
        for (_, o) in &parts {
            starts.push(n);
            n += o.len().saturating_sub(1);
        }
        starts.push(n);
        Rows::Csr(parts, starts)
    }

    fn len(&self) -> usize {
        match self {
            Rows::PerRow(v) => v.len(),
            Rows::Csr(_, starts) => starts.last().copied().unwrap_or(0),
        }
    }

    /// Row `r` (`r < len()`), or why its offsets do not cut a row from the values.
    fn get(&self, r: usize) -> Result<&'a [T], String> {
        match self {
            Rows::PerRow(v) => Ok(v[r]),
            Rows::Csr(parts, starts) => {
                let k = starts.partition_point(|&s| s <= r) - 1;
                let ((v, o), i) = (parts[k], r - starts[k]);
                match (usize::try_from(o[i]), usize::try_from(o[i + 1])) {
                    (Ok(a), Ok(b)) if a <= b && b <= v.len() => Ok(&v[a..b]),
                    _ => Err(format!(
                        "offsets of row {r} ({}..{}) do not lie within the {} values",
                        o[i],
                        o[i + 1],
                        v.len()
                    )),
                }
            }
        }
    }
}

/// A float32 array's values, read in place (as [`Holder`] reads ids: no
/// entry in numpy's borrow registry).
fn f32_values<'a>(py: Python<'_>, arr: &'a Bound<'_, PyUntypedArray>, i: usize) -> PyResult<&'a [f32]> {
    let dtype = arr.dtype();
    if arr.ndim() != 1 || dtype.kind() != b'f' || dtype.itemsize() != 4 {
        return Err(input_error(py, &format!("logprobs[{i}]"), None, "must be a 1-D float32 array or None"));
    }
    if arr.len() == 0 {
        return Ok(&[]);
    }
    if !arr.is_c_contiguous() || !arr.is_aligned() || dtype.is_native_byteorder() == Some(false) {
        return Err(input_error(
            py,
            &format!("logprobs[{i}]"),
            None,
            "must be contiguous, aligned and in native byte order",
        ));
    }
    // SAFETY: a non-empty, C-contiguous, aligned 1-D array of native float32
    // (checked above); it lives as long as `arr`.
    Ok(unsafe { std::slice::from_raw_parts((*arr.as_array_ptr()).fields.data.cast::<f32>(), arr.len()) })
}

/// Completions given per call: their ids, and their logprobs (None: none).
type PerCallCompletions<'py> = (Vec<Holder<'py>>, Vec<Option<Bound<'py, PyUntypedArray>>>);

fn policy_arg(py: Python<'_>, name: &str) -> PyResult<Policy> {
    match name {
        "fork" => Ok(Policy::Fork),
        "realign" => Ok(Policy::Realign),
        "drop" => Ok(Policy::Drop),
        _ => Err(input_error(py, "policy", None, &format!("must be 'fork', 'realign' or 'drop', got {name:?}"))),
    }
}

/// Assemble the calls of many sessions into chains (see `tito_fast.assemble`).
///
/// `prompts`: one id sequence per call, or one CSR batch `(values,
/// offsets)` whose values and offsets may be lists of chunks (an Arrow list
/// column's), read in place; completions as a CSR batch `completion` /
/// `completion_offsets` with `logprobs` aligned with `completion` (NaN where
/// the engine gave none), or, with `completion_offsets` None, one id
/// sequence per call and one float32 array (or None) per call; `order`: the call rows to
/// assemble in session and call order, each at most once (None: every row,
/// as given); `session_offsets` cuts the ordered calls into sessions. `policy`: the policies of seam
/// drift, rollback, rewrite and new root; `length`: per call row, whether its
/// completion ended on `finish_reason="length"` (None: none did); `hints`:
/// per call row, the row of the earlier call of its session whose
/// conversation its request messages extend (-1: none; the message
/// matchers'); `leaves`: "all" (one chain per leaf) or "drop_retries" (a
/// retried attempt that the retry superseded is dropped and counted). Offsets
/// are checked where a row is read (a batch reads its own rows: a row no
/// batch reads is not checked). Returns a dict of arrays (chains,
/// their ids, loss masks, logprobs, call spans, per-call chain and events).
#[pyfunction]
#[pyo3(signature = (prompts, completion, completion_offsets, logprobs, session_offsets, *, order = None, trim_ids, max_trim, realign_window, policy, boundary_ids, length = None, hints = None, leaves = "all", threads = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn assemble_calls<'py>(
    py: Python<'py>,
    prompts: &Bound<'py, PyAny>,
    completion: &Bound<'py, PyAny>,
    completion_offsets: Option<PyReadonlyArray1<'py, i64>>,
    logprobs: &Bound<'py, PyAny>,
    session_offsets: PyReadonlyArray1<'py, i64>,
    order: Option<PyReadonlyArray1<'py, i64>>,
    trim_ids: Vec<u32>,
    max_trim: usize,
    realign_window: usize,
    policy: (String, String, String, String),
    boundary_ids: Vec<u32>,
    length: Option<PyReadonlyArray1<'py, bool>>,
    hints: Option<PyReadonlyArray1<'py, i64>>,
    leaves: &str,
    threads: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let threads = threads_arg(threads)?;
    let so = session_offsets.as_slice().map_err(|_| input_error(py, "session_offsets", None, "must be contiguous"))?;
    // Completions and logprobs: CSR arrays, or one sequence per call (the logprobs: float32 arrays or None).
    let flat: Option<(PyReadonlyArray1<'py, u32>, PyReadonlyArray1<'py, f32>)> = match &completion_offsets {
        Some(_) => Some((
            completion.extract().map_err(|_| input_error(py, "completion", None, "must be a uint32 array"))?,
            logprobs.extract().map_err(|_| input_error(py, "logprobs", None, "must be a float32 array"))?,
        )),
        None => None,
    };
    let per_call: Option<PerCallCompletions<'py>> = if flat.is_none() {
        let ids = completion.cast::<PyList>().map_err(|_| {
            input_error(py, "completion", None, "must be a list of id sequences when completion_offsets is None")
        })?;
        let lps = logprobs.cast::<PyList>().map_err(|_| {
            input_error(py, "logprobs", None, "must be a list (float32 arrays or None) when completion_offsets is None")
        })?;
        if lps.len() != ids.len() {
            return Err(input_error(
                py,
                "logprobs",
                None,
                &format!("has {} entries for {} calls", lps.len(), ids.len()),
            ));
        }
        let mut holders = Vec::with_capacity(ids.len());
        for (i, item) in ids.iter().enumerate() {
            holders.push(extract(&item, "completion").or_else(|_| extract(&item, &format!("completion[{i}]")))?);
        }
        let mut arrays = Vec::with_capacity(lps.len());
        for (i, item) in lps.iter().enumerate() {
            arrays.push(if item.is_none() {
                None
            } else {
                Some(item.cast_into::<PyUntypedArray>().map_err(|_| {
                    input_error(py, &format!("logprobs[{i}]"), None, "must be a 1-D float32 array or None")
                })?)
            });
        }
        Some((holders, arrays))
    } else {
        None
    };
    let c_sources: Vec<Cow<'_, [u32]>> = match &per_call {
        Some((holders, _)) => holders
            .iter()
            .enumerate()
            .map(|(i, h)| h.ids().map_err(|e| id_error(py, &format!("completion[{i}]"), &e)))
            .collect::<PyResult<_>>()?,
        None => Vec::new(),
    };
    let nan = vec![f32::NAN; c_sources.iter().map(|c| c.len()).max().unwrap_or(0)]; // a call without logprobs
    let (c_rows, lp_rows): (Rows<'_, u32>, Rows<'_, f32>) = match (&flat, &completion_offsets, &per_call) {
        (Some((c, lp)), Some(co), _) => {
            let c = c.as_slice().map_err(|_| input_error(py, "completion", None, "must be a contiguous array"))?;
            let lp = lp.as_slice().map_err(|_| input_error(py, "logprobs", None, "must be a contiguous array"))?;
            if lp.len() != c.len() {
                return Err(input_error(
                    py,
                    "logprobs",
                    None,
                    &format!("has {} values for {} completion ids", lp.len(), c.len()),
                ));
            }
            let co = co.as_slice().map_err(|_| input_error(py, "completion_offsets", None, "must be contiguous"))?;
            offset_ends(py, "completion_offsets", co, c.len())?;
            (Rows::csr(vec![(c, co)]), Rows::csr(vec![(lp, co)]))
        }
        (None, None, Some((_, arrays))) => {
            let mut lps = Vec::with_capacity(arrays.len());
            for (i, (ids, a)) in c_sources.iter().zip(arrays).enumerate() {
                let v = match a {
                    Some(a) => f32_values(py, a, i)?,
                    None => &nan[..ids.len()],
                };
                if v.len() != ids.len() {
                    return Err(input_error(
                        py,
                        &format!("logprobs[{i}]"),
                        None,
                        &format!("has {} values for {} completion ids", v.len(), ids.len()),
                    ));
                }
                lps.push(v);
            }
            (Rows::PerRow(c_sources.iter().map(AsRef::as_ref).collect()), Rows::PerRow(lps))
        }
        _ => unreachable!("completions are flat exactly when completion_offsets is given"),
    };
    let rows = c_rows.len();
    // Prompts: one array per call, or a CSR batch (values, offsets), whose
    // values and offsets may be lists of chunks (an Arrow list column).
    let prompt_rows = PromptRows::extract(prompts)?;
    let sources = prompt_rows.sources(py)?;
    let p_rows = prompt_rows.rows(py, &sources)?;
    if p_rows.len() != rows {
        return Err(input_error(
            py,
            "completion",
            None,
            &format!("describes {rows} calls, but there are {} prompts", p_rows.len()),
        ));
    }
    // The rows of this batch, in order: each read once (never every row of the capture).
    let order: Vec<usize> = match &order {
        None => (0..rows).collect(),
        Some(o) => {
            let o = o.as_slice().map_err(|_| input_error(py, "order", None, "must be contiguous"))?;
            let mut seen = rustc_hash::FxHashSet::with_capacity_and_hasher(o.len(), Default::default());
            let mut out = Vec::with_capacity(o.len());
            for (i, &r) in o.iter().enumerate() {
                let r = usize::try_from(r).ok().filter(|&r| r < rows && seen.insert(r));
                let r = r.ok_or_else(|| input_error(py, "order", Some(i), "must list call rows, each at most once"))?;
                out.push(r);
            }
            out
        }
    };
    let mut p = Vec::with_capacity(order.len());
    let mut cs = Vec::with_capacity(order.len());
    let mut lps = Vec::with_capacity(order.len());
    for &r in &order {
        p.push(p_rows.get(r).map_err(|e| input_error(py, "prompts", Some(r), &e))?);
        cs.push(c_rows.get(r).map_err(|e| input_error(py, "completion_offsets", Some(r), &e))?);
        lps.push(lp_rows.get(r).map_err(|e| input_error(py, "completion_offsets", Some(r), &e))?);
    }
    let ended: Vec<bool> = match &length {
        None => Vec::new(),
        Some(l) => {
            let l = l.as_slice().map_err(|_| input_error(py, "length", None, "must be contiguous"))?;
            if l.len() != rows {
                return Err(input_error(py, "length", None, &format!("has {} values for {rows} calls", l.len())));
            }
            order.iter().map(|&r| l[r]).collect()
        }
    };
    let so = offsets(py, "session_offsets", so, order.len())?;
    let opt = Options {
        trim: trim_ids,
        max_trim,
        realign_window,
        policy: [
            policy_arg(py, &policy.0)?,
            policy_arg(py, &policy.1)?,
            policy_arg(py, &policy.2)?,
            policy_arg(py, &policy.3)?,
        ],
        boundary: boundary_ids,
        drop_retries: match leaves {
            "all" => false,
            "drop_retries" => true,
            _ => {
                return Err(input_error(
                    py,
                    "leaves",
                    None,
                    &format!("must be 'all' or 'drop_retries', got {leaves:?}"),
                ))
            }
        },
    };
    let sessions: Vec<(usize, usize)> = so.windows(2).map(|w| (w[0], w[1])).collect();
    // Hints name a call row; the matching takes them as the call's place in its session.
    let hint: Vec<i64> = match &hints {
        None => Vec::new(),
        Some(h) => {
            let h = h.as_slice().map_err(|_| input_error(py, "hints", None, "must be contiguous"))?;
            if h.len() != rows {
                return Err(input_error(py, "hints", None, &format!("has {} values for {rows} calls", h.len())));
            }
            // row -> (session, place), for this batch's rows only
            let mut place = rustc_hash::FxHashMap::with_capacity_and_hasher(order.len(), Default::default());
            for (s, w) in so.windows(2).enumerate() {
                for (i, &r) in order[w[0]..w[1]].iter().enumerate() {
                    place.insert(r, (s, i));
                }
            }
            let mut out = Vec::with_capacity(order.len());
            for (s, w) in so.windows(2).enumerate() {
                for &r in &order[w[0]..w[1]] {
                    let target = usize::try_from(h[r]).ok().and_then(|t| place.get(&t).copied());
                    out.push(match target {
                        Some((ts, ti)) if ts == s => ti as i64,
                        _ => -1,
                    });
                }
            }
            out
        }
    };
    let calls = Calls { prompts: &p, completions: &cs, logprobs: &lps, length: &ended, hint: &hint };
    let flat = py.detach(|| {
        with_threads(threads, || {
            let mut done = Vec::with_capacity(sessions.len());
            for (s, r) in assemble_many(&calls, &sessions, &opt).into_iter().enumerate() {
                done.push(r.map_err(|b| (s, b))?);
            }
            flatten(&calls, done, &sessions)
        })
    });
    let f = flat.map_err(|(s, b)| {
        PyRuntimeError::new_err(format!(
            "assembly broke its invariant in session {s}, call {}: {} (a bug in tito_fast; please report it)",
            b.call, b.what
        ))
    })?;
    let d = PyDict::new(py);
    d.set_item("ids", PyArray1::from_vec(py, f.ids))?;
    d.set_item("loss_mask", PyArray1::from_vec(py, f.loss))?;
    d.set_item("logprobs", PyArray1::from_vec(py, f.logprobs))?;
    d.set_item("chain_session", PyArray1::from_vec(py, f.chain_session))?;
    d.set_item("chain_offsets", PyArray1::from_vec(py, f.chain_offsets))?;
    d.set_item("chain_open", PyArray1::from_vec(py, f.chain_open))?;
    d.set_item("chain_last_call", PyArray1::from_vec(py, f.chain_last_call))?;
    d.set_item("chain_prompt_len", PyArray1::from_vec(py, f.chain_prompt_len))?;
    d.set_item("chain_parent", PyArray1::from_vec(py, f.chain_parent))?;
    d.set_item("chain_shared", PyArray1::from_vec(py, f.chain_shared))?;
    d.set_item("span_offsets", PyArray1::from_vec(py, f.span_offsets))?;
    d.set_item("span_start", PyArray1::from_vec(py, f.span_start))?;
    d.set_item("span_call", PyArray1::from_vec(py, f.span_call))?;
    d.set_item("call_chain", PyArray1::from_vec(py, f.call_chain))?;
    let names = ["call", "kind", "policy", "chain", "to_chain", "position", "removed", "masked", "dropped"];
    for (name, col) in names.iter().zip(f.events) {
        d.set_item(format!("event_{name}"), PyArray1::from_vec(py, col))?;
    }
    Ok(d)
}
