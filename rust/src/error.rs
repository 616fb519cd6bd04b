//! Error types of the core. The Python bindings map each to an exception
//! class that subclasses `ValueError`.

use thiserror::Error;

/// What is wrong with one token id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdErrorKind {
    /// A negative value (signed inputs only).
    Negative(i64),
    /// A value above `u32::MAX`.
    TooLarge(u64),
}

/// An invalid token id at a position of an input sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{}", self.describe())]
pub struct IdError {
    /// Index of the offending id in its sequence.
    pub pos: usize,
    /// What is wrong with it.
    pub kind: IdErrorKind,
}

impl IdError {
    fn describe(&self) -> String {
        match self.kind {
            IdErrorKind::Negative(v) => {
                format!("token id at position {} is negative ({v}); ids must be in [0, 2**32-1]", self.pos)
            }
            IdErrorKind::TooLarge(v) => {
                format!("token id at position {} is too large ({v}); ids must be in [0, 2**32-1]", self.pos)
            }
        }
    }
}

/// The stored ids are not a prefix of the new ids (TITO violated).
///
/// Carries the facts of the reference's `assert_pretokenized_prefix` message:
/// the first mismatching index, how many prefix tokens matched, how many were
/// checked, and both lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error(
    "pretokenized prefix mismatch: stored {stored_len} tokens (checking first \
     {checked_len}, allowing {max_trim_tokens} trailing) are not a prefix of the \
     new {new_len} tokens, first mismatch at index {index}, matched \
     {matched}/{checked_len} prefix tokens"
)]
pub struct PrefixMismatch {
    /// First index where the ids differ, or `new_len` when the new ids end
    /// inside the checked prefix.
    pub index: usize,
    /// Number of leading ids that matched (equals `index`).
    pub matched: usize,
    /// How many stored ids were checked (`stored_len - max_trim_tokens`).
    pub checked_len: usize,
    /// Length of the stored ids.
    pub stored_len: usize,
    /// Length of the new ids.
    pub new_len: usize,
    /// Trailing stored ids that were allowed to differ.
    pub max_trim_tokens: usize,
}

/// Misuse of a [`crate::buffer::TokenBuffer`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BufferError {
    /// `rollback(n)` with more checkpoints than exist.
    #[error("cannot roll back {requested} checkpoint(s): the buffer has {available}")]
    NotEnoughCheckpoints { requested: usize, available: usize },
    /// `replace_last(n, ..)` with `n` above the length.
    #[error("cannot replace the last {requested} id(s): the buffer holds {len}")]
    ReplaceTooLong { requested: usize, len: usize },
    /// Inconsistent state handed to `from_parts` (e.g. a corrupt pickle).
    #[error("invalid TokenBuffer state: {0}")]
    InvalidState(String),
}
