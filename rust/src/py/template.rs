//! `NativeTemplate`: the native chat-template renderer (`crate::template`)
//! for Python, with batch rendering (and encoding) on rayon threads.

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::bounds::PyMessageBounds;
use super::encoder::BpeEncoder;
use super::errors::{TemplateLimitError, TemplateRenderError};
use super::record::{row_value, value_to_py};
use super::roles::{table_to_py, RoleMarkers};
use super::segment::{aligned_to_py, probe_ids_arg, Aligned, PyAlignment, Segmenter};
use super::threads_arg;
use crate::batch::{on_render_thread, with_threads};
use crate::check::{check_line, check_row, CheckSetup, Differing, LineOutcome, ToolPolicy};
use crate::record::json::{Map, Value as RecordValue};
use crate::roles::Table;
use crate::template::{map, ChatTemplate, RenderFailure};
use minijinja::Value;

/// Deeper template values than this are refused (a hostile record must not
/// exhaust the stack).
const MAX_DEPTH: usize = 200;

/// A chat template compiled once for the native renderer; safe to share
/// between threads. Raises `TemplateRenderError` when the template cannot be
/// compiled (then render with jinja2).
#[pyclass(frozen, module = "tito_fast._core")]
pub struct NativeTemplate {
    inner: ChatTemplate,
}

/// The Python error of a failed render: `TemplateLimitError` for a limit
/// (never rendered another way), else `TemplateRenderError`.
fn render_error(py: Python<'_>, f: &RenderFailure) -> PyErr {
    if let RenderFailure::Limit(m) = f {
        let err = TemplateLimitError::new_err(f.to_string());
        let _ = err.value(py).setattr("reason", m.clone());
        return err;
    }
    let err = TemplateRenderError::new_err(f.to_string());
    let v = err.value(py);
    let (raised, reason) = match f {
        RenderFailure::Raised(m) => (true, m.clone()),
        RenderFailure::Unsupported(m) | RenderFailure::Limit(m) => (false, m.clone()),
    };
    let _ = v.setattr("raised", raised);
    let _ = v.setattr("reason", reason);
    err
}

/// A Python value as a template value (dict order kept), or what is unsupported.
pub(crate) fn to_value(obj: &Bound<'_, PyAny>, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("values nested deeper than {MAX_DEPTH} levels"));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_str()
            .map(Value::from)
            .map_err(|_| "a string that is not valid UTF-8 (a lone surrogate)".to_string());
    }
    if obj.is_none() {
        return Ok(Value::from(()));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::from(b.is_true()));
    }
    if obj.cast::<PyInt>().is_ok() {
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(Value::from(v));
        }
        if let Ok(v) = obj.extract::<i128>() {
            return Ok(Value::from(v));
        }
        return Err("an integer beyond 128 bits".into());
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::from(f.value()));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut pairs = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            pairs.push((to_value(&k, depth + 1)?, to_value(&v, depth + 1)?));
        }
        return Ok(map(pairs));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        let mut items = Vec::with_capacity(l.len());
        for v in l.iter() {
            items.push(to_value(&v, depth + 1)?);
        }
        return Ok(Value::from(items));
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        let mut items = Vec::with_capacity(t.len());
        for v in t.iter() {
            items.push(to_value(&v, depth + 1)?);
        }
        return Ok(Value::from(items));
    }
    let name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    Err(format!("a value of type {name}"))
}

fn context(py: Python<'_>, obj: &Bound<'_, PyAny>, argument: &str) -> PyResult<Value> {
    if obj.cast::<PyDict>().is_err() {
        return Err(PyValueError::new_err(format!("argument '{argument}': must be a dict of template variables")));
    }
    to_value(obj, 0).map_err(|m| render_error(py, &RenderFailure::Unsupported(format!("{argument} holds {m}"))))
}

/// One render's result for the batch calls: the text or the failure.
type Rendered = Result<String, RenderFailure>;

#[pymethods]
impl NativeTemplate {
    /// utc_offset: seconds east of UTC that `strftime_now` formats in (the
    /// caller's local time zone, as Python's `datetime.now()`).
    #[new]
    #[pyo3(signature = (source, *, utc_offset = 0))]
    fn new(py: Python<'_>, source: &str, utc_offset: i64) -> PyResult<Self> {
        let inner = ChatTemplate::new(source, utc_offset).map_err(|f| render_error(py, &f))?;
        Ok(NativeTemplate { inner })
    }

    /// The text of the template rendered with `context` (a dict of its
    /// variables). Raises `TemplateRenderError`: `raised` is True when the
    /// template called `raise_exception`, else `reason` says what this
    /// renderer cannot do as jinja2 does; `TemplateLimitError` when the
    /// render passed a limit (fuel, recursion, output size, `range` size).
    fn render(&self, py: Python<'_>, context: &Bound<'_, PyAny>) -> PyResult<String> {
        let ctx = self::context(py, context, "context")?;
        // On a worker thread, whose stack is deep enough for most renders
        // (`template::RENDER_STACK`): no stack of its own to reserve per render.
        py.detach(|| with_threads(Some(1), || self.inner.render(ctx))).map_err(|f| render_error(py, &f))
    }

    /// Render every context on `threads` threads (None: all cores) with the
    /// interpreter released. Returns per context the text, or the
    /// `TemplateRenderError` (not raised) when it failed.
    #[pyo3(signature = (contexts, *, threads = None))]
    fn render_many(
        &self,
        py: Python<'_>,
        contexts: &Bound<'_, PyList>,
        threads: Option<i64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let values = self.values(contexts)?;
        let threads = threads_arg(threads)?;
        let out: Vec<Result<Rendered, String>> = py.detach(|| self.run_batch(values, threads, |_, text| text));
        out.into_iter()
            .map(|r| match r {
                Ok(Ok(text)) => Ok(PyString::new(py, &text).into_any().unbind()),
                Ok(Err(f)) => Ok(render_error(py, &f).into_value(py).into_any()),
                Err(m) => Ok(render_error(py, &RenderFailure::Unsupported(m)).into_value(py).into_any()),
            })
            .collect()
    }

    /// Render every context and encode the text with `encoder`, on `threads`
    /// threads with the interpreter released. Returns per context a uint32
    /// array of ids, or the `TemplateRenderError` (not raised) when it could
    /// not be rendered, or None when the encoder does not cover the text
    /// (then the tokenizer must encode it).
    #[pyo3(signature = (contexts, encoder, *, threads = None))]
    fn render_encode_many(
        &self,
        py: Python<'_>,
        contexts: &Bound<'_, PyList>,
        encoder: PyRef<'_, BpeEncoder>,
        threads: Option<i64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let values = self.values(contexts)?;
        let threads = threads_arg(threads)?;
        let enc = encoder.core();
        let out = py.detach(|| self.run_batch(values, threads, |_, text| text.map(|t| enc.encode(&t).ok())));
        out.into_iter()
            .map(|r| match r {
                Ok(Ok(Some(ids))) => Ok(PyArray1::from_vec(py, ids).into_any().unbind()),
                Ok(Ok(None)) => Ok(py.None()),
                Ok(Err(f)) => Ok(render_error(py, &f).into_value(py).into_any()),
                Err(m) => Ok(render_error(py, &RenderFailure::Unsupported(m)).into_value(py).into_any()),
            })
            .collect()
    }
}

impl NativeTemplate {
    fn values(&self, contexts: &Bound<'_, PyList>) -> PyResult<Vec<Result<Value, String>>> {
        let mut values = Vec::with_capacity(contexts.len());
        for (i, c) in contexts.iter().enumerate() {
            if c.cast::<PyDict>().is_err() {
                return Err(PyValueError::new_err(format!(
                    "argument 'contexts[{i}]': must be a dict of template variables"
                )));
            }
            values.push(to_value(&c, 0).map_err(|m| format!("contexts[{i}] holds {m}")));
        }
        Ok(values)
    }

    fn run_batch<T: Send>(
        &self,
        values: Vec<Result<Value, String>>,
        threads: Option<usize>,
        f: impl Fn(usize, Rendered) -> T + Sync + Send,
    ) -> Vec<Result<T, String>> {
        use rayon::prelude::*;
        with_threads(threads, || {
            values.into_par_iter().enumerate().map(|(i, v)| v.map(|ctx| f(i, self.inner.render(ctx)))).collect()
        })
    }
}

/// The session check of `tito-fast score` for dump lines, in Rust (see
/// `crate::check`): parse, render, encode and compare on rayon
/// threads with the interpreter released. Built by `Scorer`; use that class.
#[pyclass(frozen, module = "tito_fast._core")]
pub struct SessionChecker {
    template: Py<NativeTemplate>,
    encoder: Py<BpeEncoder>,
    setup: CheckSetup,
    /// What a differing session's diagnosis is begun with on the check's threads.
    diagnosis: Option<Diagnosis>,
}

/// The comparator's pieces the check aligns a differing session with, and
/// the role markers its render's table is read with (names from the byte
/// table alone).
struct Diagnosis {
    segmenter: Py<Segmenter>,
    roles: Py<RoleMarkers>,
    assistant_start: Option<Vec<u8>>,
    probe_ids: usize,
}

/// What the check's threads found of a differing session's diagnosis.
struct Begun<'a> {
    aligned: Aligned,
    /// The render's role table (None: a role name the byte table cannot tell).
    table: Option<Table<'a>>,
}

impl Diagnosis {
    fn begin(&self, o: &LineOutcome, trim: &[u32]) -> Option<Begun<'_>> {
        let LineOutcome::Differs(d) = o else { return None };
        let seg = self.segmenter.get();
        let aligned = seg.align_valid(&d.expected, &d.actual, trim, self.assistant_start.as_deref(), self.probe_ids);
        let ne = aligned.3;
        let table = seg.byte_table().and_then(|b| self.roles.get().table_by_bytes(&d.expected[..ne], b));
        Some(Begun { aligned, table })
    }
}

#[pymethods]
impl SessionChecker {
    /// variables: the template variables (special tokens, template kwargs);
    /// tool_policy: "sglang", "sglang-legacy" or "none"; trim_ids: ids
    /// stripped from both tails before comparing; family: the scorer's.
    /// openers: the strings that open a rendered message block (the role
    /// tracker's), for `CheckedSession.message_bounds`; with `segmenter`'s
    /// byte table, the first difference of a differing session is attributed
    /// on the check's threads (its message bounds find those prefix lengths
    /// known). With `roles` too (the role tracker's markers) the check also
    /// aligns a differing session (`segmenter.align` with `trim_ids`,
    /// `assistant_start` and `probe_ids`) and reads its render's role table
    /// on its threads (`CheckedSession.alignment`, `expected_table`).
    #[new]
    #[pyo3(signature = (
        template, encoder, *, variables, tool_policy, trim_ids, vocab_size, family, openers = None, segmenter = None,
        roles = None, assistant_start = None, probe_ids = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        template: Py<NativeTemplate>,
        encoder: Py<BpeEncoder>,
        variables: &Bound<'_, PyDict>,
        tool_policy: &str,
        trim_ids: Vec<u32>,
        vocab_size: u32,
        family: String,
        openers: Option<Vec<Vec<u8>>>,
        segmenter: Option<Bound<'_, Segmenter>>,
        roles: Option<Py<RoleMarkers>>,
        assistant_start: Option<Vec<u8>>,
        probe_ids: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let probe_ids = probe_ids_arg(probe_ids)?;
        if roles.is_some() && segmenter.is_none() {
            return Err(PyValueError::new_err("argument 'roles': the check aligns with a segmenter: give one"));
        }
        let policy = ToolPolicy::from_name(tool_policy).ok_or_else(|| {
            PyValueError::new_err(format!(
                "argument 'tool_policy': must be 'sglang', 'sglang-legacy' or 'none', got {tool_policy:?}"
            ))
        })?;
        let mut vars = Vec::with_capacity(variables.len());
        for (k, v) in variables.iter() {
            let key: String =
                k.extract().map_err(|_| PyValueError::new_err("argument 'variables': keys must be strings"))?;
            let value = to_value(&v, 0)
                .map_err(|m| render_error(py, &RenderFailure::Unsupported(format!("variables[{key:?}] holds {m}"))))?;
            vars.push((key, value));
        }
        let bytes = segmenter.as_ref().and_then(|s| s.get().shared_byte_table());
        let openers = openers.unwrap_or_default();
        let setup = CheckSetup { variables: vars, policy, trim: trim_ids, vocab_size, family, openers, bytes };
        let diagnosis = match (segmenter, roles) {
            (Some(segmenter), Some(roles)) => {
                Some(Diagnosis { segmenter: segmenter.unbind(), roles, assistant_start, probe_ids })
            }
            _ => None,
        };
        Ok(SessionChecker { template, encoder, setup, diagnosis })
    }

    /// Check every line (bytes of one JSONL record) on `threads` threads
    /// (None: all cores). Per line: None (score it on the Python path),
    /// `("bad", reason, session_id | None)` (the reader's verdict),
    /// `("clean", session_id | None, turns, num_ids, metadata_json | None)` or
    /// `("differs", text, expected_ids, session_ids, session)`: the render
    /// (UTF-8 bytes), its ids, the session's ids and a `CheckedSession` (what
    /// the diagnosis needs of the record; it renders the message prefixes).
    /// Every id of a session the check takes is below `vocab_size` (a record
    /// or render with one outside goes to the Python path).
    #[pyo3(signature = (lines, *, threads = None))]
    fn check_lines(slf: &Bound<'_, Self>, lines: &Bound<'_, PyList>, threads: Option<i64>) -> PyResult<Vec<Py<PyAny>>> {
        use rayon::prelude::*;
        let py = slf.py();
        let this = slf.get();
        // the lines themselves, read on the check's threads (no copy: bytes do not change)
        let mut raw: Vec<PyBackedBytes> = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            let b = line
                .cast_into::<PyBytes>()
                .map_err(|_| PyValueError::new_err(format!("argument 'lines[{i}]': must be bytes")))?;
            raw.push(PyBackedBytes::from(b));
        }
        let threads = threads_arg(threads)?;
        let (tmpl, enc, setup) = (&this.template.get().inner, this.encoder.get().core(), &this.setup);
        let outcomes: Vec<_> = py.detach(|| {
            with_threads(threads, || raw.par_iter().map(|l| this.begun(check_line(l, tmpl, enc, setup))).collect())
        });
        outcomes_to_py(slf, outcomes)
    }

    /// `check_lines` for rows (dicts of a Parquet dump's columns: messages,
    /// tools and metadata as JSON text, ids as arrays or lists), read by the
    /// one reader's row rules (`read_dump_row`).
    #[pyo3(signature = (rows, *, threads = None))]
    fn check_rows(slf: &Bound<'_, Self>, rows: &Bound<'_, PyList>, threads: Option<i64>) -> PyResult<Vec<Py<PyAny>>> {
        use rayon::prelude::*;
        let py = slf.py();
        let this = slf.get();
        let read: Vec<_> = rows.iter().map(|row| row_value(&row)).collect();
        let threads = threads_arg(threads)?;
        let (tmpl, enc, setup) = (&this.template.get().inner, this.encoder.get().core(), &this.setup);
        let outcomes: Vec<_> = py.detach(|| {
            with_threads(threads, || {
                read.into_par_iter()
                    .map(|row| match row {
                        Ok(v) => this.begun(check_row(v, tmpl, enc, setup)),
                        Err(bad) => {
                            (LineOutcome::Bad { code: bad.code, reason: bad.reason, session_id: bad.session_id }, None)
                        }
                    })
                    .collect()
            })
        });
        outcomes_to_py(slf, outcomes)
    }

    /// Why the check hands `line` to the Python path, or None when it takes it.
    fn explain(&self, line: &[u8]) -> Option<&'static str> {
        let setup = CheckSetup { bytes: None, ..self.setup.clone() }; // no attribution: only the verdict
        match check_line(line, &self.template.get().inner, self.encoder.get().core(), &setup) {
            LineOutcome::Python(why) => Some(why),
            _ => None,
        }
    }
}

/// The check's outcomes as Python values (see `SessionChecker.check_lines`).
fn outcomes_to_py(
    slf: &Bound<'_, SessionChecker>,
    outcomes: Vec<(LineOutcome, Option<Begun<'_>>)>,
) -> PyResult<Vec<Py<PyAny>>> {
    let py = slf.py();
    outcomes
        .into_iter()
        .map(|(o, begun)| -> PyResult<Py<PyAny>> {
            Ok(match o {
                LineOutcome::Python(_) => py.None(),
                LineOutcome::Bad { code, reason, session_id } => {
                    ("bad", reason, session_id, code).into_pyobject(py)?.into_any().unbind()
                }
                LineOutcome::Clean { session_id, turns, num_ids, metadata } => {
                    ("clean", session_id, turns, num_ids, metadata).into_pyobject(py)?.into_any().unbind()
                }
                LineOutcome::Differs(mut d) => {
                    let text = PyBytes::new(py, d.text.as_bytes()); // kept: the message bounds share it
                    let expected = PyArray1::from_vec(py, std::mem::take(&mut d.expected));
                    let actual = PyArray1::from_vec(py, std::mem::take(&mut d.actual));
                    let (alignment, table) = match begun {
                        Some(b) => (
                            Some(aligned_to_py(py, b.aligned)?.unbind()),
                            b.table.map(|t| table_to_py(py, t)).transpose()?.map(Bound::unbind),
                        ),
                        None => (None, None),
                    };
                    let session =
                        CheckedSession { checker: slf.clone().unbind(), session: *d, alignment, expected_table: table };
                    ("differs", text, expected, actual, session).into_pyobject(py)?.into_any().unbind()
                }
            })
        })
        .collect()
}

/// A session the check found differing from its render: what the diagnosis
/// needs of its record (session id, roles, turns, metadata: the record is
/// never converted whole), and the renders of its message prefixes as the
/// check rendered the whole (the same normalised messages, tools and
/// variables), for the message boundaries of the diagnosis
/// (`compare.messages.MessageBounds`). Made by `SessionChecker.check_lines`
/// and `check_rows`.
#[pyclass(frozen, module = "tito_fast._core")]
pub struct CheckedSession {
    checker: Py<SessionChecker>,
    session: Differing,
    alignment: Option<Py<PyAlignment>>,
    expected_table: Option<Py<PyTuple>>,
}

#[pymethods]
impl CheckedSession {
    /// The record's `session_id` (None: it has none).
    #[getter]
    fn session_id(&self) -> Option<&str> {
        self.session.session_id.as_deref()
    }

    /// Each message's role.
    #[getter]
    fn roles(&self) -> Vec<&str> {
        self.session.roles.iter().map(String::as_str).collect()
    }

    /// The alignment of the render's ids with the session's, as the
    /// scorer's comparator aligns them (`Segmenter.align`), made on the
    /// check's threads (None: the checker was built without `roles`).
    #[getter]
    fn alignment(&self, py: Python<'_>) -> Option<Py<PyAlignment>> {
        self.alignment.as_ref().map(|a| a.clone_ref(py))
    }

    /// `(starts, roles)` of the render's ids (trimmed as the alignment trims
    /// them), as `RoleMarkers.table` reads them, made on the check's threads
    /// (None: not made, or a role name the byte table cannot tell).
    #[getter]
    fn expected_table(&self, py: Python<'_>) -> Option<Py<PyTuple>> {
        self.expected_table.as_ref().map(|t| t.clone_ref(py))
    }

    /// How many assistant messages.
    #[getter]
    fn turns(&self) -> usize {
        self.session.turns
    }

    /// `(i, byte)`: the render's id i is the first that differs from the
    /// session's (the last id when one side is a prefix of the other,
    /// trimmed ids aside), and starts at `byte` of the render; None when the
    /// render's ids do not decode to it byte for byte, or the checker has no
    /// segmenter with a byte table (a tokenizer that is not byte-exact), so
    /// no byte says where an id is.
    #[getter]
    fn first_difference(&self) -> Option<(usize, usize)> {
        self.session.first
    }

    /// The record's `metadata` as `json.loads` gives it (None: it has none).
    #[getter]
    fn metadata(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.session.metadata {
            None => Ok(py.None()),
            Some(v) => value_to_py(py, v),
        }
    }

    /// The render (UTF-8 bytes) of the first `k` messages, followed by a
    /// user message whose content is `then_user` when given. Raises
    /// `TemplateRenderError` / `TemplateLimitError` as `NativeTemplate.render`.
    #[pyo3(signature = (k, *, then_user = None))]
    fn render_prefix<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        then_user: Option<String>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let then = then_user.map(|content| {
            let mut m = Map::new();
            m.insert("role".into(), RecordValue::Str("user".into()));
            m.insert("content".into(), RecordValue::Str(content));
            m
        });
        self.render(py, k, then).map(|text| PyBytes::new(py, text.as_bytes())).map_err(|f| render_error(py, &f))
    }

    /// Which message each byte of the render belongs to: a
    /// `compare.messages.MessageBounds` whose prefixes this session renders
    /// (detached, on the render thread), with what the check found already
    /// known; a prefix the native renderer hands to jinja2 is rendered by
    /// `render_prefix(k)` (history: `render_history(k)`), Python callables.
    #[pyo3(signature = (*, render_prefix = None, render_history = None))]
    fn message_bounds(
        slf: &Bound<'_, Self>,
        render_prefix: Option<Py<PyAny>>,
        render_history: Option<Py<PyAny>>,
    ) -> PyMessageBounds {
        let this = slf.get();
        let bounds = this.session.bounds(&this.checker.get().setup.openers);
        PyMessageBounds::native(bounds, slf.clone().unbind(), render_prefix, render_history)
    }
}

impl SessionChecker {
    /// An outcome with the diagnosis begun on this thread (a differing session's).
    fn begun(&self, o: LineOutcome) -> (LineOutcome, Option<Begun<'_>>) {
        let begun = self.diagnosis.as_ref().and_then(|d| d.begin(&o, &self.setup.trim));
        (o, begun)
    }
}

impl CheckedSession {
    /// The render of the first `k` messages, then `then` (on the render
    /// thread, as `NativeTemplate.render`: `template::RENDER_STACK`).
    pub(crate) fn render(&self, py: Python<'_>, k: usize, then: Option<Map>) -> Result<String, RenderFailure> {
        let checker = self.checker.get();
        let (tmpl, setup) = (&checker.template.get().inner, &checker.setup);
        py.detach(|| on_render_thread(|| self.session.render_prefix(k, then, tmpl, setup)))
    }
}
