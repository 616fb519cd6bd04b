//! `BpeEncoder`: the exact byte-level BPE encoder (see `crate::encoder`).

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::errors::{id_error, input_error};
use super::input::extract;
use super::run;
use crate::bpe::{Bpe, BpeError};
use crate::encoder::Encoder;
use crate::pretok::Splitter;

/// Encodes text as a byte-level BPE tokenizer does (`add_special_tokens=False`).
/// Built by `tito_fast.encoder.FastEncoder` from a tokenizer's JSON, which
/// checks the tokenizer is one this covers; use that class.
#[pyclass(frozen, module = "tito_fast._core")]
pub struct BpeEncoder {
    inner: Encoder,
    pattern: Splitter,
}

fn ids_arg(py: Python<'_>, obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<u32>> {
    let h = extract(obj, name)?;
    let ids = h.raw().normalize().map_err(|e| id_error(py, name, &e))?.into_owned();
    Ok(ids)
}

impl BpeEncoder {
    /// The encoder itself, for the batch calls of other classes.
    pub(crate) fn core(&self) -> &Encoder {
        &self.inner
    }
}

#[pymethods]
impl BpeEncoder {
    /// token_blob + token_offsets: the bytes of each vocabulary entry
    /// (entry i is blob[offsets[i]:offsets[i+1]]), token_ids: their ids;
    /// merges: (left, right, merged) id triples, flat, in rank order;
    /// pattern: "qwen", "llama3", "qwen35", "deepseek" or "o200k"; raw_added / normalized_added:
    /// (content, id) of added tokens matched before / after normalization;
    /// nfc: the normalizer is NFC.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (token_blob, token_offsets, token_ids, merges, *, ignore_merges, pattern, raw_added, normalized_added, nfc))]
    fn new(
        py: Python<'_>,
        token_blob: Vec<u8>,
        token_offsets: &Bound<'_, PyAny>,
        token_ids: &Bound<'_, PyAny>,
        merges: &Bound<'_, PyAny>,
        ignore_merges: bool,
        pattern: &str,
        raw_added: Vec<(String, u32)>,
        normalized_added: Vec<(String, u32)>,
        nfc: bool,
    ) -> PyResult<Self> {
        let pat = Splitter::from_name(pattern).ok_or_else(|| {
            input_error(
                py,
                "pattern",
                None,
                &format!("unknown pattern {pattern:?}; known: qwen, llama3, qwen35, deepseek, o200k"),
            )
        })?;
        let offsets = ids_arg(py, token_offsets, "token_offsets")?;
        let ids = ids_arg(py, token_ids, "token_ids")?;
        if offsets.len() != ids.len() + 1 {
            let msg = format!(
                "has {} entries for {} token ids; it needs one entry more than the ids",
                offsets.len(),
                ids.len()
            );
            return Err(input_error(py, "token_offsets", None, &msg));
        }
        let mut vocab = Vec::with_capacity(ids.len());
        for (k, &id) in ids.iter().enumerate() {
            let (a, b) = (offsets[k] as usize, offsets[k + 1] as usize);
            if a > b || b > token_blob.len() {
                let msg = format!("entry {k} ({a}..{b}) is outside the blob of {} bytes", token_blob.len());
                return Err(input_error(py, "token_offsets", Some(k), &msg));
            }
            vocab.push((token_blob[a..b].to_vec(), id));
        }
        let flat = ids_arg(py, merges, "merges")?;
        if flat.len() % 3 != 0 {
            return Err(input_error(py, "merges", None, "must hold (left, right, merged) triples"));
        }
        let triples: Vec<(u32, u32, u32)> = flat.chunks_exact(3).map(|t| (t[0], t[1], t[2])).collect();
        let bpe = Bpe::new(vocab, &triples, ignore_merges).map_err(|e| match e {
            BpeError::MissingByte(_) => input_error(py, "token_ids", None, &e.to_string()),
            BpeError::RepeatedMerge { rank, .. } => input_error(py, "merges", Some(rank), &e.to_string()),
        })?;
        let inner = Encoder::new(bpe, pat, &raw_added, &normalized_added, nfc)
            .map_err(|m| input_error(py, "raw_added", None, &m))?;
        Ok(BpeEncoder { inner, pattern: pat })
    }

    /// The ids of `text`, or None when the normalizer might change part of it
    /// (then the tokenizer itself must encode it). Detached from the
    /// interpreter on long texts.
    fn encode<'py>(&self, py: Python<'py>, text: &str) -> PyResult<Option<Bound<'py, PyList>>> {
        match run(py, text.len(), || self.inner.encode(text)) {
            Ok(ids) => Ok(Some(PyList::new(py, ids)?)),
            Err(_) => Ok(None),
        }
    }

    /// Forget the BPE results remembered per piece (ids do not change; the
    /// next texts are encoded as by a new encoder).
    fn clear_cache(&self) {
        self.inner.clear_cache();
    }

    /// The pre-tokenizer's pieces of `text` (no added tokens, no normalization).
    fn pieces(&self, py: Python<'_>, text: &str) -> Vec<String> {
        let ranges = run(py, text.len(), || self.pattern.split(text));
        ranges.into_iter().map(|(a, b)| text[a..b].to_string()).collect()
    }
}
