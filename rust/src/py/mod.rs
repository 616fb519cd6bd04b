//! PyO3 bindings: the `tito_fast._core` module table.
//!
//! Every function extracts its arguments while attached, runs the O(n) work
//! detached from the interpreter (other Python threads keep running), and
//! turns core errors into exceptions that subclass `ValueError`. Nothing here
//! panics on input: bad input is an exception naming the argument and the
//! position. The kernels are in `kernels`, the classes in their own files.

mod added;
mod assemble;
mod bounds;
mod buffer;
mod encoder;
mod errors;
mod input;
mod kernels;
mod record;
mod roles;
mod segment;
mod template;

pub(crate) use kernels::{extract_id_set, extract_seqs, run, threads_arg, DETACH_MIN};

use pyo3::prelude::*;

#[pymodule(gil_used = false)]
mod _core {
    #[pymodule_export]
    use super::added::AddedTokenSplitter;
    #[pymodule_export]
    use super::assemble::assemble_calls;
    #[pymodule_export]
    use super::bounds::block_messages;
    #[pymodule_export]
    use super::bounds::PyMessageBounds;
    #[pymodule_export]
    use super::buffer::TokenBuffer;
    #[pymodule_export]
    use super::encoder::BpeEncoder;
    #[pymodule_export]
    use super::kernels::check_prefix;
    #[pymodule_export]
    use super::kernels::common_prefix_len;
    #[pymodule_export]
    use super::kernels::common_prefix_len_batch;
    #[pymodule_export]
    use super::kernels::common_prefix_len_csr;
    #[pymodule_export]
    use super::kernels::merge_tokens;
    #[pymodule_export]
    use super::kernels::trim_trailing;
    #[pymodule_export]
    use super::record::bad_record_codes;
    #[pymodule_export]
    use super::record::canonical_tools;
    #[pymodule_export]
    use super::record::check_call_texts;
    #[pymodule_export]
    use super::record::json_loads;
    #[pymodule_export]
    use super::record::normalize_messages;
    #[pymodule_export]
    use super::record::read_call_lines;
    #[pymodule_export]
    use super::record::read_call_row;
    #[pymodule_export]
    use super::record::read_dump_lines;
    #[pymodule_export]
    use super::record::read_dump_row;
    #[pymodule_export]
    use super::roles::RoleMarkers;
    #[pymodule_export]
    use super::segment::PyAlignment;
    #[pymodule_export]
    use super::segment::Segmenter;
    #[pymodule_export]
    use super::template::CheckedSession;
    #[pymodule_export]
    use super::template::NativeTemplate;
    #[pymodule_export]
    use super::template::SessionChecker;

    use pyo3::prelude::*;

    /// Ask the C allocator (glibc's malloc) to keep freed memory for reuse:
    /// blocks up to `mmap_bytes` come from its heap, and up to `trim_bytes`
    /// of free heap are kept instead of being handed back to the system.
    /// The `tito-fast` command calls it for its own process: a differing
    /// session's render and ids live until its diagnosis, and memory handed
    /// back is faulted in again page by page for the next batch. Returns
    /// False when this is not a glibc build (nothing is changed) or glibc
    /// refused a value.
    ///
    /// Example:
    ///     >>> _core.keep_freed_memory(256 << 20, 32 << 20)  # doctest: +SKIP
    ///     True
    #[pyfunction]
    fn keep_freed_memory(trim_bytes: u32, mmap_bytes: u32) -> bool {
        super::keep_freed_memory(trim_bytes, mmap_bytes)
    }

    /// The threads a call asked for `threads` runs on (None: one per core):
    /// at least 1, at most the cores this process may use (its CPU
    /// affinity and cgroup quota) and 256. Raises ValueError for a count
    /// below 1, as every call taking `threads` does.
    ///
    /// Example:
    ///     >>> from tito_fast._core import pool_size
    ///     >>> pool_size(1)
    ///     1
    #[pyfunction]
    #[pyo3(signature = (threads = None))]
    fn pool_size(threads: Option<i64>) -> PyResult<usize> {
        let threads = super::threads_arg(threads)?;
        Ok(crate::batch::pool_size(threads.unwrap_or_else(crate::batch::cores)))
    }

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        m.add("TokenInputError", py.get_type::<super::errors::TokenInputError>())?;
        m.add("PrefixMismatchError", py.get_type::<super::errors::PrefixMismatchError>())?;
        m.add("TokenBufferError", py.get_type::<super::errors::TokenBufferError>())?;
        m.add("TemplateRenderError", py.get_type::<super::errors::TemplateRenderError>())?;
        m.add("TemplateLimitError", py.get_type::<super::errors::TemplateLimitError>())?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        // "release" or "debug": benchmarks refuse to time a debug build.
        m.add("build_profile", if cfg!(debug_assertions) { "debug" } else { "release" })?;
        m.add("DETACH_MIN", super::DETACH_MIN)?;
        // The role table's names, named once (in crate::roles).
        m.add("ROLES", pyo3::types::PyTuple::new(py, crate::roles::ROLES)?)?;
        m.add("ROLE_ALIASES", crate::roles::ALIASES.iter().copied().collect::<std::collections::HashMap<_, _>>())?;
        m.add("ROLE_PROBE_IDS", crate::roles::PROBE_IDS)?;
        // The user message of a history render (crate::bounds, the attribution's one owner).
        m.add("HISTORY_SENTINEL", crate::bounds::SENTINEL)?;
        // The record fields that hold token ids, named once (in crate::record::schema).
        let ids: Vec<&str> =
            crate::record::schema::DUMP_IDS.iter().chain(crate::record::schema::CALL_IDS).copied().collect();
        m.add("ID_FIELDS", pyo3::types::PyTuple::new(py, ids)?)?;
        // The comparator's verdict codes, named once (in crate::vocab::Verdict).
        for (verdict, name) in crate::vocab::Verdict::ALL {
            m.add(format!("VERDICT_{name}"), verdict as i8)?;
        }
        Ok(())
    }
}

/// See `_core.keep_freed_memory`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory(trim_bytes: u32, mmap_bytes: u32) -> bool {
    // glibc's <malloc.h>: mallopt's parameters
    const M_TRIM_THRESHOLD: std::ffi::c_int = -1;
    const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
    extern "C" {
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }
    let (Ok(trim), Ok(mmap)) = (std::ffi::c_int::try_from(trim_bytes), std::ffi::c_int::try_from(mmap_bytes)) else {
        return false;
    };
    // SAFETY: mallopt takes two ints and only changes the allocator's settings.
    unsafe { mallopt(M_TRIM_THRESHOLD, trim) == 1 && mallopt(M_MMAP_THRESHOLD, mmap) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory(_trim_bytes: u32, _mmap_bytes: u32) -> bool {
    false
}
