//! Batch kernels over many sequence pairs, run on rayon.
//!
//! Input is either a list of pairs of [`Raw`] slices or CSR (flat values plus
//! offsets, the layout of Arrow list columns). Every pair is validated and
//! compared independently; the first error by position is reported.

use std::sync::{Arc, Mutex, OnceLock};

use rayon::prelude::*;
use thiserror::Error;

use crate::error::IdError;
use crate::ids::{prepare_pair, Raw};
use crate::prefix::common_prefix_len_checked;
pub use crate::prefix::Side;

/// An error in a batch, located by row and side.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    /// An invalid id in row `row` of side `side`.
    #[error("row {row}: {err}")]
    Id { side: Side, row: usize, err: IdError },
    /// CSR offsets that are not usable (position is in the offsets array).
    #[error("{msg}")]
    Offsets { side: Side, pos: Option<usize>, msg: String },
}

/// Thread pools by size, built once: building one per call would cost more
/// than comparing a small batch. At most [`MAX_POOLS`] are kept (the least
/// recently used one is dropped; its threads end once no call uses it).
///
/// The pools belong to the process that built them: a child made by
/// `fork()` (the score job's workers on Linux) inherits them without their
/// threads, so a child builds its own and never touches the inherited ones.
type Pools = Mutex<(u32, Vec<(PoolKey, Arc<rayon::ThreadPool>)>)>;

/// A pool's size, and whether it runs single renders ([`on_render_thread`]):
/// those get pools of their own, so that a render asked for by one thread
/// never waits behind a batch another thread runs.
type PoolKey = (usize, bool);

/// Pools kept alive at once.
pub const MAX_POOLS: usize = 4;
/// The most threads one pool gets, whatever a caller asks for.
pub const MAX_THREADS: usize = 256;

/// The cores this process may run on (1 when unknown), read once per
/// process: reading them means reading the cgroup's files (tens of µs), and
/// every pool lookup asks.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
}

/// The threads a pool asked for `threads` gets: at least 1, at most the
/// core count (and [`MAX_THREADS`]). More threads than cores would not
/// compare faster, and clamping keeps the threads of every kept pool
/// together within [`MAX_POOLS`] x cores, whatever sizes callers ask for.
pub fn pool_size(threads: usize) -> usize {
    threads.clamp(1, cores().clamp(1, MAX_THREADS))
}

fn pool(threads: usize, renders: bool) -> Result<Arc<rayon::ThreadPool>, rayon::ThreadPoolBuildError> {
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let threads = pool_size(threads);
    let key = (threads, renders);
    let pools = POOLS.get_or_init(|| Mutex::new((std::process::id(), Vec::new())));
    let mut guard = pools.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if guard.0 != std::process::id() {
        // A forked child: the inherited pools have no threads. Never drop
        // them here (that would signal threads that do not exist).
        std::mem::forget(std::mem::take(&mut guard.1));
        guard.0 = std::process::id();
    }
    let pools = &mut guard.1;
    if let Some(i) = pools.iter().position(|(k, _)| *k == key) {
        let entry = pools.remove(i);
        let p = Arc::clone(&entry.1);
        pools.push(entry); // most recently used last
        return Ok(p);
    }
    let p = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| if renders { format!("tito-fast-render-{i}") } else { format!("tito-fast-{i}") })
            .stack_size(crate::template::RENDER_STACK)
            .build()?,
    );
    if pools.len() >= MAX_POOLS {
        pools.remove(0);
    }
    pools.push((key, Arc::clone(&p)));
    Ok(p)
}

/// Run `f` with `threads` worker threads: `None` one per core, `Some(n)` a
/// pool of `n` threads, at most one per core ([`pool_size`]); pools are
/// kept for reuse (per process: see [`Pools`]).
pub fn with_threads<R: Send>(threads: Option<usize>, f: impl FnOnce() -> R + Send) -> R {
    match pool(threads.unwrap_or_else(cores), false) {
        Ok(p) => p.install(f),
        // A pool that cannot be built (no threads left): run here.
        Err(_) => f(),
    }
}

/// Run one render `f` of a session's diagnosis on a thread whose stack is
/// deep enough for most renders (`template::RENDER_STACK`), kept for those
/// renders: never behind a batch that runs on the other pools (the score
/// job diagnoses one session while the check of the next batch runs). One
/// thread: a render asked for while another runs waits for it, and no idle
/// worker spins; it is made on the first differing session (its stack is
/// reserved then, not by a run that has none).
pub fn on_render_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match pool(1, true) {
        Ok(p) => p.install(f),
        Err(_) => f(),
    }
}

/// Common prefix length of every pair `(a[i], b[i])`.
///
/// # Errors
/// [`BatchError::Id`] for the first row (lowest index, side A before B)
/// holding an invalid id.
pub fn common_prefix_len_pairs(a: &[Raw<'_>], b: &[Raw<'_>]) -> Result<Vec<i64>, BatchError> {
    debug_assert_eq!(a.len(), b.len());
    let results: Vec<Result<i64, BatchError>> = a
        .par_iter()
        .zip(b.par_iter())
        .enumerate()
        .with_min_len(16)
        .map(|(row, (x, y))| {
            let (px, py) = prepare_pair(x, y).map_err(|(side, err)| BatchError::Id { side, row, err })?;
            common_prefix_len_checked(px.checked(), py.checked())
                .map(|n| n as i64)
                .map_err(|(side, err)| BatchError::Id { side, row, err })
        })
        .collect();
    results.into_iter().collect()
}

/// Check CSR offsets against the values length; returns them as `usize`.
///
/// # Errors
/// [`BatchError::Offsets`] for a negative, decreasing or out-of-range offset.
pub fn check_offsets(side: Side, offsets: &[i64], n_values: usize) -> Result<(), BatchError> {
    if offsets.is_empty() {
        return Err(BatchError::Offsets {
            side,
            pos: None,
            msg: "offsets must hold at least one entry (n_rows + 1 entries)".into(),
        });
    }
    for (pos, w) in offsets.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(BatchError::Offsets {
                side,
                pos: Some(pos + 1),
                msg: format!("offsets decrease at position {}: {} after {}", pos + 1, w[1], w[0]),
            });
        }
    }
    if offsets[0] < 0 {
        return Err(BatchError::Offsets {
            side,
            pos: Some(0),
            msg: format!("offset at position 0 is negative ({})", offsets[0]),
        });
    }
    let last = offsets[offsets.len() - 1];
    if last as u64 > n_values as u64 {
        return Err(BatchError::Offsets {
            side,
            pos: Some(offsets.len() - 1),
            msg: format!("offset at position {} is {last}, past the {n_values} values", offsets.len() - 1),
        });
    }
    Ok(())
}

/// Common prefix length of every row of two CSR batches, which must have the
/// same number of rows. Offsets must already have passed [`check_offsets`].
/// Only the ids inside rows are read and validated.
///
/// # Errors
/// [`BatchError::Id`] for the first row holding an invalid id (side A before
/// side B within a row); its position is an index into the values.
pub fn common_prefix_len_csr(a: &Raw<'_>, a_off: &[i64], b: &Raw<'_>, b_off: &[i64]) -> Result<Vec<i64>, BatchError> {
    let rows = a_off.len().saturating_sub(1);
    let span = |off: &[i64]| off[0] as usize..off[off.len() - 1] as usize;
    let (a_base, b_base) = (a_off[0] as usize, b_off[0] as usize);
    // Prepare only the span the rows cover (a conversion validates it all).
    let (a_span, b_span) = (a.slice(span(a_off)), b.slice(span(b_off)));
    let (pa, pb) = prepare_pair(&a_span, &b_span).map_err(|(side, mut err)| {
        err.pos += if side == Side::A { a_base } else { b_base };
        BatchError::Id { side, row: usize::MAX, err }
    })?;
    let (ca, cb) = (pa.checked(), pb.checked());
    let results: Vec<Result<i64, BatchError>> = (0..rows)
        .into_par_iter()
        .with_min_len(16)
        .map(|r| {
            let (a0, a1) = (a_off[r] as usize - a_base, a_off[r + 1] as usize - a_base);
            let (b0, b1) = (b_off[r] as usize - b_base, b_off[r + 1] as usize - b_base);
            let x = crate::prefix::Checked { ids: &ca.ids[a0..a1], mask: ca.mask };
            let y = crate::prefix::Checked { ids: &cb.ids[b0..b1], mask: cb.mask };
            common_prefix_len_checked(x, y).map(|n| n as i64).map_err(|(side, mut err)| {
                err.pos += if side == Side::A { a_off[r] as usize } else { b_off[r] as usize };
                BatchError::Id { side, row: r, err }
            })
        })
        .collect();
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_and_first_error() {
        let a = [Raw::Owned(vec![1, 2, 3]), Raw::I32(&[1, -1]), Raw::I64(&[-5])];
        let b = [Raw::Owned(vec![1, 2]), Raw::Owned(vec![1]), Raw::Owned(vec![])];
        let e = common_prefix_len_pairs(&a, &b).unwrap_err();
        assert!(matches!(e, BatchError::Id { side: Side::A, row: 1, .. }));
        let ok = common_prefix_len_pairs(&a[..1], &b[..1]).unwrap();
        assert_eq!(ok, vec![2]);
    }

    #[test]
    fn pools_are_at_most_one_thread_per_core() {
        let n = cores();
        assert_eq!(pool_size(0), 1);
        assert_eq!(pool_size(1), 1);
        assert_eq!(pool_size(n + 1), n.min(MAX_THREADS));
        assert_eq!(pool_size(usize::MAX), n.min(MAX_THREADS));
    }

    #[test]
    fn csr_rows_and_offsets() {
        let a = Raw::U32(&[1, 2, 3, 4, 5, 6]);
        let b = Raw::I32(&[1, 2, 9, 4, 5]);
        let ao = [0i64, 3, 6];
        let bo = [0i64, 2, 5];
        check_offsets(Side::A, &ao, a.len()).unwrap();
        check_offsets(Side::B, &bo, b.len()).unwrap();
        assert_eq!(common_prefix_len_csr(&a, &ao, &b, &bo).unwrap(), vec![2, 0]);
        // Ids outside every row are not read; a bad id inside one is found.
        let c = Raw::I32(&[-1, 1, 2, -7]);
        assert_eq!(common_prefix_len_csr(&c, &[1, 3], &c, &[1, 3]).unwrap(), vec![2]);
        let e = common_prefix_len_csr(&c, &[1, 2, 4], &c, &[0, 1, 3]).unwrap_err();
        assert!(matches!(e, BatchError::Id { side: Side::B, row: 0, err } if err.pos == 0));
        let wide = Raw::I64(&[5, -1, 5]);
        let e = common_prefix_len_csr(&wide, &[2, 3], &wide, &[0, 3]).unwrap_err();
        assert!(matches!(e, BatchError::Id { side: Side::B, err, .. } if err.pos == 1));
        assert!(check_offsets(Side::A, &[0, 3, 2], 6).is_err());
        assert!(check_offsets(Side::A, &[0, 7], 6).is_err());
        assert!(check_offsets(Side::A, &[-1, 0], 6).is_err());
        assert!(check_offsets(Side::A, &[], 6).is_err());
        assert_eq!(with_threads(Some(2), || common_prefix_len_csr(&a, &ao, &b, &bo)).unwrap(), vec![2, 0]);
    }
}
