//! tito_fast core: token-sequence kernels for TITO (token-in-token-out) checks.
//!
//! Everything in this crate outside `py` works on plain `&[u32]` slices and
//! knows nothing about Python, so `cargo test` exercises it without
//! libpython. The `python` feature adds the PyO3 bindings in `py/`.
//!
//! Layout:
//! - [`ids`]: turning integer slices of any width into validated `u32` ids.
//! - [`prefix`]: first divergence, prefix check with trailing trim.
//! - [`merge`]: the family splice rules (append after, drop last) and trims.
//! - [`buffer`]: an append-only session buffer with checkpoints.
//! - [`batch`]: batch and CSR versions run on rayon.
//! - [`segment`], [`vocab`]: segmentation at boundary ids, alignment of two
//!   segment lists, and the per-id byte table that decides most comparisons.
//! - [`added`], [`pretok`], [`bpe`], [`encoder`]: an exact encoder for
//!   byte-level BPE tokenizers with GPT-4 style pre-tokenizer patterns, and
//!   the added-token split it shares with the score job.
//! - [`roles`]: messages and their roles in an id sequence, from a chat
//!   format's message markers.
//! - [`bounds`]: which message each byte of a render belongs to, from the
//!   renders of the conversation's message prefixes.
//! - [`template`]: the native chat-template renderer (Jinja on minijinja,
//!   rendering as transformers' jinja2 setup does).

pub mod added;
pub mod assemble;
pub mod batch;
pub mod bounds;
pub mod bpe;
pub mod buffer;
pub mod check;
pub mod encoder;
pub mod error;
pub mod ids;
pub mod merge;
pub mod prefix;
pub mod pretok;
pub mod record;
pub mod roles;
pub mod segment;
pub mod template;
pub mod vocab;

#[cfg(feature = "python")]
mod py;

pub use error::{BufferError, IdError, IdErrorKind, PrefixMismatch};
