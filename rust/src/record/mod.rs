//! Records read from files, the one reader every door uses: score dumps
//! (one session a record) and capture files (one LLM call a record), from
//! JSONL lines or from Parquet rows, into one typed record or the reason it
//! is bad. The JSON text itself is read by [`json`] with Python's `json`
//! semantics (see there).

pub mod ids;
pub mod json;
pub mod schema;
