//! `AddedTokenSplitter`: the tokenizer's added-token split of a text (see `crate::added`).

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::errors::input_error;
use super::run;
use crate::added::{AddedTokens, Part};

/// Splits a text at a tokenizer's added tokens, in its two passes
/// (`raw_added` / `normalized_added`: (content, id) of the tokens matched
/// before / after normalization). Built by `tito_fast.tokenizer.added`.
#[pyclass(frozen, module = "tito_fast._core")]
pub struct AddedTokenSplitter {
    inner: AddedTokens,
}

#[pymethods]
impl AddedTokenSplitter {
    #[new]
    #[pyo3(signature = (raw_added, normalized_added))]
    fn new(py: Python<'_>, raw_added: Vec<(String, u32)>, normalized_added: Vec<(String, u32)>) -> PyResult<Self> {
        let inner =
            AddedTokens::new(&raw_added, &normalized_added).map_err(|m| input_error(py, "raw_added", None, &m))?;
        Ok(Self { inner })
    }

    /// `(parts, checked)`: the texts (str) and added-token ids (int) of `text` in
    /// order, and the first-pass texts in which normalized tokens were found
    /// (the tokenizer finds those after normalizing).
    fn split<'py>(&self, py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyTuple>> {
        let (parts, checked) = run(py, text.len(), || self.inner.split_both(text));
        let out = PyList::empty(py);
        for p in parts {
            match p {
                Part::Token(id) => out.append(id)?,
                Part::Text(t) => out.append(t)?,
            }
        }
        PyTuple::new(py, [out.into_any(), PyList::new(py, checked)?.into_any()])
    }
}
