//! The one reader (`crate::record`) and the one normaliser
//! (`crate::check::normalise`) for Python: every door of tito_fast (the
//! score job, its workers, Ray, `assemble`, the Python API, the renderer)
//! reads records and normalises messages through these functions.

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::check::normalise::{self, Arguments, NoneKeys, Normalise, ToolPolicy};
use crate::record::json::{self, Map, Value, MAX_DEPTH, MAX_INT_DIGITS};
use crate::record::schema::{self, Bad};

/// A record value as the Python object `json.loads` gives.
pub(crate) fn value_to_py(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
        Value::BigInt(s) => py.get_type::<PyInt>().call1((s.as_ref(),))?.unbind(),
        Value::Float(f) => PyFloat::new(py, *f).into_any().unbind(),
        Value::Str(s) => PyString::new(py, s).into_any().unbind(),
        Value::List(items) => {
            let out = PyList::empty(py);
            for item in items {
                out.append(value_to_py(py, item)?)?;
            }
            out.into_any().unbind()
        }
        Value::Ids(ids) => PyList::new(py, ids.iter())?.into_any().unbind(),
        Value::Map(m) => map_to_py(py, m)?.into_any().unbind(),
    })
}

fn map_to_py<'py>(py: Python<'py>, m: &Map) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in m.iter() {
        d.set_item(k, value_to_py(py, v)?)?;
    }
    Ok(d)
}

fn opt_to_py(py: Python<'_>, v: &Option<Value>) -> PyResult<Py<PyAny>> {
    match v {
        None => Ok(py.None()),
        Some(v) => value_to_py(py, v),
    }
}

fn maps_to_py(py: Python<'_>, maps: &[Map]) -> PyResult<Py<PyAny>> {
    let out = PyList::empty(py);
    for m in maps {
        out.append(map_to_py(py, m)?)?;
    }
    Ok(out.into_any().unbind())
}

fn values_to_py(py: Python<'_>, v: &Option<Vec<Value>>) -> PyResult<Py<PyAny>> {
    match v {
        None => Ok(py.None()),
        Some(items) => {
            let out = PyList::empty(py);
            for item in items {
                out.append(value_to_py(py, item)?)?;
            }
            Ok(out.into_any().unbind())
        }
    }
}

/// A Python object (what `json.loads` or a Parquet row gives; numpy arrays
/// and scalars through `tolist()`) as a record value, or what it holds that
/// a record cannot.
pub(crate) fn py_to_value(obj: &Bound<'_, PyAny>, depth: usize) -> Result<Value, String> {
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_str()
            .map(|s| Value::Str(s.to_string()))
            .map_err(|_| "a string that is not valid Unicode (a lone surrogate)".to_string());
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.cast::<PyInt>().is_ok() {
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(Value::Int(v));
        }
        let text = obj.str().map_err(|_| format!("an integer of more than {MAX_INT_DIGITS} digits"))?;
        let text = text.to_string();
        let digits = text.trim_start_matches('-').len();
        if digits > MAX_INT_DIGITS {
            return Err(format!("an integer of {digits} digits (more than {MAX_INT_DIGITS})"));
        }
        return Ok(Value::BigInt(text.into()));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        // a binary column: text (JSON text in the messages, tools and metadata columns)
        return match std::str::from_utf8(b.as_bytes()) {
            Ok(s) => Ok(Value::Str(s.to_string())),
            Err(e) => Err(format!("bytes that are not UTF-8 (at byte {})", e.valid_up_to())),
        };
    }
    if depth >= MAX_DEPTH {
        return Err(format!("values nested deeper than {MAX_DEPTH} levels"));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut m = Map::new();
        for (k, v) in d.iter() {
            let Ok(key) = k.cast::<PyString>() else {
                return Err(format!(
                    "a dict key that is not a string ({})",
                    k.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                ));
            };
            let key =
                key.to_str().map_err(|_| "a dict key that is not valid Unicode (a lone surrogate)".to_string())?;
            m.insert(key.to_string(), py_to_value(&v, depth + 1)?);
        }
        return Ok(Value::Map(m));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l.iter().map(|v| py_to_value(&v, depth + 1)).collect::<Result<Vec<_>, _>>().map(Value::List);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t.iter().map(|v| py_to_value(&v, depth + 1)).collect::<Result<Vec<_>, _>>().map(Value::List);
    }
    let name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    if name == "ndarray" || obj.hasattr("dtype").unwrap_or(false) {
        if let Ok(plain) = obj.call_method0("tolist") {
            if !plain.is(obj) {
                return py_to_value(&plain, depth);
            }
        }
    }
    Err(format!("a value of type {name}"))
}

/// The bad-record codes and their meanings (the catalogue,
/// `crate::record::schema::BAD_RECORD_CODES`).
#[pyfunction]
pub fn bad_record_codes() -> Vec<(&'static str, &'static str)> {
    schema::BAD_RECORD_CODES.to_vec()
}

fn bad_to_py(py: Python<'_>, bad: Bad) -> PyResult<Py<PyAny>> {
    Ok(("bad", bad.reason, bad.session_id, bad.code).into_pyobject(py)?.into_any().unbind())
}

fn dump_to_py(py: Python<'_>, r: Result<schema::DumpRecord, Bad>) -> PyResult<Py<PyAny>> {
    let r = match r {
        Ok(r) => r,
        Err(bad) => return bad_to_py(py, bad),
    };
    let items: [Py<PyAny>; 7] = [
        "ok".into_pyobject(py)?.into_any().unbind(),
        r.session_id.into_pyobject(py)?.into_any().unbind(),
        r.family.into_pyobject(py)?.into_any().unbind(),
        maps_to_py(py, &r.messages)?,
        PyArray1::from_vec(py, r.token_ids).into_any().unbind(),
        values_to_py(py, &r.tools)?,
        opt_to_py(py, &r.metadata)?,
    ];
    Ok(PyTuple::new(py, items)?.into_any().unbind())
}

fn call_to_py(py: Python<'_>, r: Result<schema::CallRecord, Bad>) -> PyResult<Py<PyAny>> {
    let r = match r {
        Ok(r) => r,
        Err(bad) => return bad_to_py(py, bad),
    };
    let items: [Py<PyAny>; 11] = [
        "ok".into_pyobject(py)?.into_any().unbind(),
        r.session_id.into_pyobject(py)?.into_any().unbind(),
        r.call_index.into_pyobject(py)?.into_any().unbind(),
        PyArray1::from_vec(py, r.prompt_ids).into_any().unbind(),
        PyArray1::from_vec(py, r.completion_ids).into_any().unbind(),
        match r.completion_logprobs {
            None => py.None(),
            Some(lp) => PyArray1::from_vec(py, lp).into_any().unbind(),
        },
        r.finish_reason.into_pyobject(py)?.into_any().unbind(),
        match &r.messages {
            None => py.None(),
            Some(m) => maps_to_py(py, m)?,
        },
        values_to_py(py, &r.tools)?,
        opt_to_py(py, &r.response)?,
        opt_to_py(py, &r.metadata)?,
    ];
    Ok(PyTuple::new(py, items)?.into_any().unbind())
}

fn lines_arg(lines: &Bound<'_, PyList>) -> PyResult<Vec<Vec<u8>>> {
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            line.cast::<PyBytes>()
                .map(|b| b.as_bytes().to_vec())
                .map_err(|_| PyValueError::new_err(format!("argument 'lines[{i}]': must be bytes")))
        })
        .collect()
}

/// Read score-dump JSONL lines (bytes) with the one reader. Per line:
/// `("ok", session_id | None, family | None, messages, token_ids (uint32
/// array), tools | None, metadata | None)` or `("bad", reason, session_id | None)`.
#[pyfunction]
pub fn read_dump_lines(py: Python<'_>, lines: &Bound<'_, PyList>) -> PyResult<Vec<Py<PyAny>>> {
    let raw = lines_arg(lines)?;
    let read: Vec<_> = py.detach(|| raw.iter().map(|l| schema::dump_line(l)).collect());
    read.into_iter().map(|r| dump_to_py(py, r)).collect()
}

/// Read capture-file JSONL lines (bytes). Per line: `("ok", session_id,
/// call_index | None, prompt_ids, completion_ids (uint32 arrays),
/// completion_logprobs (float32 array) | None, finish_reason | None,
/// messages | None, tools | None, response | None, metadata | None)` or
/// `("bad", reason, session_id | None)`.
#[pyfunction]
pub fn read_call_lines(py: Python<'_>, lines: &Bound<'_, PyList>) -> PyResult<Vec<Py<PyAny>>> {
    let raw = lines_arg(lines)?;
    let read: Vec<_> = py.detach(|| raw.iter().map(|l| schema::call_line(l)).collect());
    read.into_iter().map(|r| call_to_py(py, r)).collect()
}

/// The code of what `py_to_value` refused (as the JSON reader codes the same).
fn value_code(msg: &str) -> &'static str {
    if msg.contains("lone surrogate") {
        "lone_surrogate"
    } else if msg.contains("digits") {
        "int_too_long"
    } else if msg.contains("nested deeper") {
        "too_deep"
    } else if msg.contains("not UTF-8") {
        "not_utf8"
    } else {
        "bad_field"
    }
}

pub(crate) fn row_value(row: &Bound<'_, PyAny>) -> Result<Value, Bad> {
    let bad = |reason: String| Bad { code: value_code(&reason), reason, session_id: None };
    let Ok(d) = row.cast::<PyDict>() else {
        return py_to_value(row, 0).map_err(|m| bad(format!("the record holds {m}")));
    };
    let mut m = Map::new();
    for (k, v) in d.iter() {
        let key: String = k.extract().map_err(|_| bad("the record has a key that is not a string".into()))?;
        let ids = if schema::DUMP_IDS.iter().chain(schema::CALL_IDS).any(|k| *k == key) { id_value(&v) } else { None };
        let value = match ids {
            Some(ids) => ids,
            None => py_to_value(&v, 1).map_err(|m| bad(format!("'{key}' holds {m}")))?,
        };
        m.insert(key, value);
    }
    Ok(Value::Map(m))
}

/// Valid token ids (a numpy or Arrow array read in place, a list of ints) as
/// one value, without a Python int per id; None for anything else (then the
/// row is read value by value, and the reader says what is wrong with it).
fn id_value(obj: &Bound<'_, PyAny>) -> Option<Value> {
    if obj.is_none()
        || obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyDict>()
    {
        return None;
    }
    let h = super::input::extract(obj, "ids").ok()?;
    let r = h.raw();
    let ids = super::run(obj.py(), r.len(), || r.normalize().map(std::borrow::Cow::into_owned)).ok()?;
    Some(Value::Ids(ids))
}

/// A score dump's record from a row (a dict: a Parquet row, or a record
/// given in Python), as `read_dump_lines` gives it. `json_text`: messages,
/// tools and metadata may be JSON text (Parquet string columns).
#[pyfunction]
#[pyo3(signature = (row, *, json_text = false))]
pub fn read_dump_row(py: Python<'_>, row: &Bound<'_, PyAny>, json_text: bool) -> PyResult<Py<PyAny>> {
    let r = row_value(row).and_then(|v| schema::dump_record(v, json_text));
    dump_to_py(py, r)
}

/// A capture record from a row (a dict), as `read_call_lines` gives it.
#[pyfunction]
#[pyo3(signature = (row, *, json_text = false))]
pub fn read_call_row(py: Python<'_>, row: &Bound<'_, PyAny>, json_text: bool) -> PyResult<Py<PyAny>> {
    let r = row_value(row).and_then(|v| schema::call_record(v, json_text));
    call_to_py(py, r)
}

/// JSON text (str or bytes) read as every record is read (see
/// `crate::record::json`). Raises ValueError with the reason and column.
#[pyfunction]
pub fn json_loads(py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let bytes: Vec<u8> = if let Ok(s) = text.cast::<PyString>() {
        s.to_str().map_err(|_| PyValueError::new_err("not valid Unicode (a lone surrogate)"))?.as_bytes().to_vec()
    } else if let Ok(b) = text.cast::<PyBytes>() {
        b.as_bytes().to_vec()
    } else {
        return Err(PyValueError::new_err("argument 'text': must be str or bytes"));
    };
    let v = py.detach(|| json::parse(&bytes, &[])).map_err(|e| PyValueError::new_err(e.describe(&bytes)))?;
    value_to_py(py, &v)
}

fn arg_value(obj: &Bound<'_, PyAny>, argument: &str) -> PyResult<Value> {
    py_to_value(obj, 0).map_err(|m| PyValueError::new_err(format!("argument '{argument}': holds {m}")))
}

/// Messages as the engine hands them to a template (the one owner of the
/// rule: `crate::check::normalise`). `arguments`: "dict" or "json";
/// `none_keys`: "keep" or "drop"; `alias`: fill `thinking` and
/// `reasoning_content` from the first reasoning field. Raises ValueError
/// naming the message for tool-call arguments that are not JSON.
#[pyfunction]
#[pyo3(signature = (messages, *, arguments = "dict", none_keys = "keep", alias = false))]
pub fn normalize_messages(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    arguments: &str,
    none_keys: &str,
    alias: bool,
) -> PyResult<Py<PyAny>> {
    let arguments = match arguments {
        "dict" => Arguments::Dict,
        "json" => Arguments::Json,
        other => {
            return Err(PyValueError::new_err(format!("argument 'arguments': must be 'dict' or 'json', got {other:?}")))
        }
    };
    let none_keys = match none_keys {
        "keep" => NoneKeys::Keep,
        "drop" => NoneKeys::Drop,
        other => {
            return Err(PyValueError::new_err(format!("argument 'none_keys': must be 'keep' or 'drop', got {other:?}")))
        }
    };
    let Value::List(items) = arg_value(messages, "messages")? else {
        return Err(PyValueError::new_err("argument 'messages': must be a list of dicts"));
    };
    let mut maps = Vec::with_capacity(items.len());
    for (i, m) in items.into_iter().enumerate() {
        match m {
            Value::Map(m) => maps.push(m),
            other => {
                return Err(PyValueError::new_err(format!("messages[{i}] is a {}, not a dict", other.type_name())))
            }
        }
    }
    let out = normalise::messages(maps, Normalise { arguments, none_keys, alias }).map_err(PyValueError::new_err)?;
    maps_to_py(py, &out)
}

/// Tools in the engine's shape by `policy` ("sglang", "sglang-legacy",
/// "none"; see `crate::check::normalise`); None for no tools.
#[pyfunction]
#[pyo3(signature = (tools, policy = "sglang"))]
pub fn canonical_tools(py: Python<'_>, tools: &Bound<'_, PyAny>, policy: &str) -> PyResult<Py<PyAny>> {
    let policy = ToolPolicy::from_name(policy).ok_or_else(|| {
        PyValueError::new_err(format!("tool policy must be one of ('sglang', 'sglang-legacy', 'none'), got {policy:?}"))
    })?;
    if tools.is_none() {
        return Ok(py.None());
    }
    let Value::List(list) = arg_value(tools, "tools")? else {
        return Err(PyValueError::new_err("argument 'tools': must be a list of dicts"));
    };
    let out = normalise::tools(&list, policy).map_err(PyValueError::new_err)?;
    values_to_py(py, &out)
}

/// The capture rules for the `messages`, `tools` and `metadata` JSON text of many rows
/// (a Parquet capture's text columns, `None` for a null), checked without
/// building Python objects: per row the reason it is bad, or None.
#[pyfunction]
pub fn check_call_texts(
    py: Python<'_>,
    messages: &Bound<'_, PyList>,
    tools: &Bound<'_, PyList>,
    metadata: &Bound<'_, PyList>,
) -> PyResult<Vec<Option<String>>> {
    if messages.len() != tools.len() || messages.len() != metadata.len() {
        return Err(PyValueError::new_err("arguments 'messages', 'tools' and 'metadata' must have one entry per row"));
    }
    let mut rows = Vec::with_capacity(messages.len());
    for ((m, t), md) in messages.iter().zip(tools.iter()).zip(metadata.iter()) {
        let mut map = Map::new();
        map.insert("session_id".into(), Value::Str(String::new()));
        map.insert("prompt_ids".into(), Value::Ids(vec![0]));
        map.insert("completion_ids".into(), Value::Ids(Vec::new()));
        let mut bad = None;
        for (key, v) in [("messages", &m), ("tools", &t), ("metadata", &md)] {
            match py_to_value(v, 1) {
                Ok(v) => map.insert(key.into(), v),
                Err(e) => bad = Some(format!("'{key}' holds {e}")),
            }
        }
        rows.push((map, bad));
    }
    Ok(py.detach(|| {
        rows.into_iter()
            .map(|(map, bad)| bad.or_else(|| schema::call_record(Value::Map(map), true).err().map(|b| b.reason)))
            .collect()
    }))
}
