//! Python exceptions raised by the bindings. All subclass `ValueError`.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::batch::{BatchError, Side};
use crate::error::{BufferError, IdError, PrefixMismatch};

create_exception!(
    tito_fast,
    TokenInputError,
    PyValueError,
    "Token ids that cannot be used: not integers, out of [0, 2**32-1], or of a shape that is not a flat sequence.\n\nAttributes: `argument` (the parameter name, with a row for batches, e.g. `a_seqs[3]`) and `position` (index of the offending id, or None)."
);
create_exception!(
    tito_fast,
    PrefixMismatchError,
    PyValueError,
    "The stored ids are not a prefix of the new ids (the TITO invariant is broken).\n\nAttributes: `index`, `matched`, `checked_len`, `stored_len`, `new_len`, `max_trim_tokens`."
);
create_exception!(
    tito_fast,
    TokenBufferError,
    PyValueError,
    "A TokenBuffer operation that cannot apply (rolling back more checkpoints than exist, replacing more ids than are held, a corrupt pickled state)."
);

create_exception!(
    tito_fast,
    TemplateRenderError,
    PyValueError,
    "The native renderer could not render a chat template as jinja2 does.\n\nAttributes: `raised` (True when the template itself called `raise_exception`; jinja2 fails the same way) and `reason` (the template's message, or what the native renderer does not support: render with jinja2 then)."
);

create_exception!(
    tito_fast,
    TemplateLimitError,
    PyValueError,
    "A chat template passed a limit of the renderer (its fuel: an instruction and data budget that grows with the conversation; its recursion limit; its output size; a `range` of more than 100000 items), natively or on jinja2. Never rendered another way.\n\nAttribute: `reason` (which limit, and where)."
);

/// A `TokenInputError` naming the argument and, where known, the position.
pub(crate) fn input_error(py: Python<'_>, argument: &str, position: Option<usize>, msg: &str) -> PyErr {
    let err = TokenInputError::new_err(format!("argument '{argument}': {msg}"));
    let value = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail short of
    // memory exhaustion; the message carries the same facts regardless.
    let _ = value.setattr("argument", argument);
    let _ = value.setattr("position", position);
    err
}

pub(crate) fn id_error(py: Python<'_>, argument: &str, e: &IdError) -> PyErr {
    input_error(py, argument, Some(e.pos), &e.to_string())
}

pub(crate) fn prefix_error(py: Python<'_>, e: &PrefixMismatch) -> PyErr {
    let err = PrefixMismatchError::new_err(e.to_string());
    let value = err.value(py);
    for (name, v) in [
        ("index", e.index),
        ("matched", e.matched),
        ("checked_len", e.checked_len),
        ("stored_len", e.stored_len),
        ("new_len", e.new_len),
        ("max_trim_tokens", e.max_trim_tokens),
    ] {
        let _ = value.setattr(name, v);
    }
    err
}

pub(crate) fn buffer_error(e: &BufferError) -> PyErr {
    TokenBufferError::new_err(e.to_string())
}

pub(crate) fn batch_error(py: Python<'_>, names: (&str, &str), e: &BatchError) -> PyErr {
    let side_name = |side: Side| if side == Side::A { names.0 } else { names.1 };
    match e {
        BatchError::Id { side, row, err } => id_error(py, &format!("{}[{row}]", side_name(*side)), err),
        BatchError::Offsets { side, pos, msg } => input_error(py, side_name(*side), *pos, msg),
    }
}
