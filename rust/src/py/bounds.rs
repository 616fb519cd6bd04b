//! `MessageBounds` for Python (`compare.messages.MessageBounds`): the rule
//! of `crate::bounds` over renders that Python callables make, or that a
//! `CheckedSession` makes natively.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};

use pyo3::exceptions::{PyException, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString};

use super::template::CheckedSession;
use crate::bounds::{MessageBounds, Prefixes, Text};
use crate::check::sentinel_message;
use crate::template::RenderFailure;

/// Which message of a conversation each byte of its render belongs to, from
/// the renders of its message prefixes (`render_prefix(k)`: the render of the
/// first k messages, str or UTF-8 bytes; one that raises is a prefix the
/// template refuses). See `tito_fast.compare.messages`.
///
/// Example:
///     >>> from tito_fast._core import MessageBounds
///     >>> b = MessageBounds(lambda k: "ab"[:k], 2, b"ab")
///     >>> b.message_at(0), b.message_at(1)
///     (0, 1)
#[pyclass(frozen, module = "tito_fast._core", name = "MessageBounds")]
pub struct PyMessageBounds {
    n: usize,
    text: Text,
    bounds: Mutex<MessageBounds>,
    source: Source,
    /// A render callable called these bounds again (their own search is
    /// under way): that error is the callable's bug, never a refusal.
    reentered: AtomicBool,
}

/// Who renders the prefixes.
enum Source {
    /// Python callables (history: None without history renders).
    Python { prefix: Py<PyAny>, history: Option<Py<PyAny>> },
    /// The session the native check found differing; what it hands to
    /// jinja2 goes to the callables.
    Native { session: Py<CheckedSession>, prefix: Option<Py<PyAny>>, history: Option<Py<PyAny>> },
}

impl PyMessageBounds {
    pub(crate) fn native(
        bounds: MessageBounds,
        session: Py<CheckedSession>,
        prefix: Option<Py<PyAny>>,
        history: Option<Py<PyAny>>,
    ) -> Self {
        Self::with(bounds, Source::Native { session, prefix, history })
    }

    fn with(bounds: MessageBounds, source: Source) -> Self {
        let (n, text) = (bounds.len(), bounds.shared_text());
        Self { n, text, bounds: Mutex::new(bounds), source, reentered: AtomicBool::new(false) }
    }

    /// Run `f` on the bounds and their renders; a render callable that calls
    /// these bounds again (or another thread using them meanwhile) gets a
    /// RuntimeError, which the search then raises.
    fn search<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut MessageBounds, &mut Renders<'_, '_>) -> PyResult<T>,
    ) -> PyResult<T> {
        let mut guard = match self.bounds.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.reentered.store(true, Ordering::Relaxed);
                return Err(PyRuntimeError::new_err(
                    "MessageBounds is in use: a render callable may not call the bounds it renders for, \
                     nor may two threads share them",
                ));
            }
        };
        let mut r = Renders { py, source: &self.source, reentered: &self.reentered };
        f(&mut guard, &mut r)
    }
}

/// The renders of one call, with the interpreter attached.
struct Renders<'a, 'py> {
    py: Python<'py>,
    source: &'a Source,
    reentered: &'a AtomicBool,
}

impl Prefixes for Renders<'_, '_> {
    /// An exception that is not an `Exception` (KeyboardInterrupt, SystemExit).
    type Stop = PyErr;

    fn render(&mut self, k: usize, history: bool) -> PyResult<Option<Vec<u8>>> {
        let py = self.py;
        match self.source {
            Source::Python { prefix, history: h } => {
                call(py, if history { h.as_ref() } else { Some(prefix) }, k, self.reentered)
            }
            Source::Native { session, prefix, history: h } => {
                match session.get().render(py, k, history.then(sentinel_message)) {
                    Ok(text) => Ok(Some(text.into_bytes())),
                    // the template refuses the prefix (jinja2 raises the same), or passed a limit
                    Err(RenderFailure::Raised(_) | RenderFailure::Limit(_)) => Ok(None),
                    // jinja2 renders what the native renderer does not, as on the Python path
                    Err(RenderFailure::Unsupported(_)) => {
                        call(py, if history { h.as_ref() } else { prefix.as_ref() }, k, self.reentered)
                    }
                }
            }
        }
    }

    fn has_history(&self) -> bool {
        match self.source {
            Source::Python { history, .. } => history.is_some(),
            Source::Native { .. } => true,
        }
    }
}

/// `f(k)` as UTF-8 bytes; None without `f`, when it raises an `Exception`
/// (a template that refuses the prefix) or returns neither str nor bytes.
/// An exception that is not an `Exception`, or one after `f` called the
/// bounds again (`reentered`), is raised.
fn call(py: Python<'_>, f: Option<&Py<PyAny>>, k: usize, reentered: &AtomicBool) -> PyResult<Option<Vec<u8>>> {
    let Some(f) = f else { return Ok(None) };
    match f.call1(py, (k,)) {
        Ok(v) => {
            let v = v.bind(py);
            if let Ok(b) = v.cast::<PyBytes>() {
                Ok(Some(b.as_bytes().to_vec()))
            } else if let Ok(s) = v.cast::<PyString>() {
                Ok(s.to_str().ok().map(|s| s.as_bytes().to_vec()))
            } else {
                Ok(None)
            }
        }
        Err(e) if e.is_instance_of::<PyException>(py) && !reentered.swap(false, Ordering::Relaxed) => Ok(None),
        Err(e) => Err(e),
    }
}

#[pymethods]
impl PyMessageBounds {
    /// `n` messages whose render (all of them) is `text`, UTF-8.
    /// `openers`: the strings that open a rendered message block (the
    /// template's role markers) and `first_role` the first message's role:
    /// when the template refuses to render no message, or renders for no
    /// message what the first message replaces, what it renders before the
    /// first message's own block (a tools block) belongs to no message
    /// unless that message is a system message. `render_history(k)`: the
    /// render of `messages[:k]` followed by a user message whose content is
    /// `SENTINEL` (`history_messages` builds them), for prefixes whose
    /// render is not a prefix of the whole.
    #[new]
    #[pyo3(signature = (render_prefix, n, text, *, openers = None, first_role = None, render_history = None))]
    fn new(
        render_prefix: Py<PyAny>,
        n: usize,
        text: Vec<u8>,
        openers: Option<Vec<Vec<u8>>>,
        first_role: Option<&str>,
        render_history: Option<Py<PyAny>>,
    ) -> Self {
        Self::with(
            MessageBounds::new(n, Arc::new(text), openers.unwrap_or_default(), first_role),
            Source::Python { prefix: render_prefix, history: render_history },
        )
    }

    /// How many messages.
    #[getter]
    fn n(&self) -> usize {
        self.n
    }

    /// The render of all the messages (UTF-8).
    #[getter]
    fn text<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, (*self.text).as_ref())
    }

    /// The prefix lengths known so far, `[(k, bytes), ...]`, by k.
    fn known(&self, py: Python<'_>) -> PyResult<Vec<(usize, usize)>> {
        self.search(py, |b, _| Ok(b.known()))
    }

    /// Bytes of `text` that the render of `messages[:k]` covers: its length
    /// when it is a prefix of the whole render; else (the template renders
    /// the last turns otherwise, or refuses the prefix) the part of the
    /// history render (`render_history`) shared with the whole, up to the
    /// sentinel's block; else the part of the prefix render shared with the
    /// whole, or what the shorter prefix before it covers.
    fn prefix_len(&self, py: Python<'_>, k: &Bound<'_, PyInt>) -> PyResult<usize> {
        let k = k
            .extract::<usize>()
            .map_err(|_| PyValueError::new_err(format!("argument 'k': must be an int >= 0, got {k}")))?;
        self.search(py, |b, r| b.prefix_len(k, r))
    }

    /// The index of the message whose render holds byte `byte` of `text`
    /// (the last message for a byte past the end; -1 for a byte of what the
    /// template renders before any message, e.g. a tools block). `hint`: a
    /// guess of the answer (e.g. the rendered block's number), tried first:
    /// a right guess costs two prefix renders, a wrong one changes nothing
    /// but the order of the search.
    #[pyo3(signature = (byte, hint = None))]
    fn message_at(&self, py: Python<'_>, byte: &Bound<'_, PyInt>, hint: Option<&Bound<'_, PyInt>>) -> PyResult<i64> {
        if byte.lt(0)? {
            return Ok(-1); // before every message's render (no render says otherwise)
        }
        let byte = byte.extract::<usize>().unwrap_or(usize::MAX); // past the end: the last message
                                                                  // a guess past i64 is as good as i64's end
        let hint = match hint {
            None => None,
            Some(h) => Some(h.extract::<i64>().or_else(|_| h.gt(0).map(|up| if up { i64::MAX } else { i64::MIN }))?),
        };
        self.search(py, |b, r| b.message_at(byte, hint, r))
    }

    /// `message_at(byte)` from the prefix lengths known so far, without a
    /// render: None when they do not tell, or do not grow with the prefix
    /// (then `message_at` searches).
    fn known_message_at(&self, py: Python<'_>, byte: &Bound<'_, PyInt>) -> PyResult<Option<i64>> {
        if byte.lt(0)? {
            return Ok(Some(-1));
        }
        let byte = byte.extract::<usize>().unwrap_or(usize::MAX);
        self.search(py, |b, _| Ok(b.known_message_at(byte)))
    }

    fn __repr__(&self) -> String {
        format!("MessageBounds(n={}, text={} bytes)", self.n, (*self.text).as_ref().len())
    }
}

/// A guess of the message each rendered block starts with (`block_roles`:
/// each block's role, in order), for `MessageBounds.message_at`'s hint:
/// blocks one per message, or one per run of consecutive tool results
/// (templates that put them in one block), with a block of the template's
/// own first (a tools block) when there is one more; None when neither count
/// fits. A guess only orders the search: a wrong one costs renders, never
/// the answer.
///
/// Example:
///     >>> from tito_fast._core import block_messages
///     >>> block_messages(["system", "user", "assistant"], ["user", "assistant"])
///     [-1, 0, 1]
#[pyfunction]
pub(crate) fn block_messages(block_roles: Vec<String>, message_roles: Vec<String>) -> Option<Vec<i64>> {
    let roles: Vec<&str> = message_roles.iter().map(String::as_str).collect();
    crate::bounds::block_messages(block_roles.len(), Some(block_roles.first().map_or("", String::as_str)), &roles)
}
