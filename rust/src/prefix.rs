//! Longest common prefix and the token-level TITO prefix check.

use crate::error::PrefixMismatch;

/// Ids compared per step of the fast loop. 64 × 4 bytes = four cache lines:
/// wide enough for the XOR/OR reduction to vectorise, small enough that the
/// exact scan after a hit is cheap.
pub const CHUNK: usize = 64;

/// Length of the longest common prefix of `a` and `b`.
///
/// Compares a chunk at a time (XOR, then OR-reduce, which the compiler turns
/// into SIMD) and scans only the first chunk that differs.
///
/// ```
/// use tito_fast::prefix::common_prefix_len;
/// assert_eq!(common_prefix_len(&[1, 2, 3], &[1, 2, 4, 5]), 2);
/// assert_eq!(common_prefix_len(&[1, 2], &[1, 2, 3]), 2);
/// ```
#[must_use]
pub fn common_prefix_len(a: &[u32], b: &[u32]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut start = 0;
    for (ca, cb) in a.chunks_exact(CHUNK).zip(b.chunks_exact(CHUNK)) {
        let mut diff = 0u32;
        for k in 0..CHUNK {
            diff |= ca[k] ^ cb[k];
        }
        if diff != 0 {
            break;
        }
        start += CHUNK;
    }
    start + a[start..]
        .iter()
        .zip(&b[start..])
        .take_while(|(x, y)| x == y)
        .count()
}

/// The TITO prefix check: the stored ids, less up to `max_trim_tokens`
/// trailing ids, must be the start of `new`.
///
/// Same decision as the reference's `assert_pretokenized_prefix`: an empty
/// `stored`, or `max_trim_tokens >= stored.len()`, always passes.
///
/// # Errors
/// [`PrefixMismatch`] with the first mismatching index (or `new.len()` when
/// `new` ends inside the checked prefix) and the lengths involved.
///
/// ```
/// use tito_fast::prefix::check_prefix;
/// assert!(check_prefix(&[1, 2, 3], &[1, 2, 3, 4], 0).is_ok());
/// assert!(check_prefix(&[1, 2, 9], &[1, 2, 3, 4], 1).is_ok());
/// assert_eq!(check_prefix(&[1, 2, 9], &[1, 2, 3, 4], 0).unwrap_err().index, 2);
/// ```
pub fn check_prefix(stored: &[u32], new: &[u32], max_trim_tokens: usize) -> Result<(), PrefixMismatch> {
    let checked_len = stored.len().saturating_sub(max_trim_tokens);
    if checked_len == 0 {
        return Ok(());
    }
    let matched = common_prefix_len(&stored[..checked_len], new);
    if matched == checked_len {
        return Ok(());
    }
    Err(PrefixMismatch {
        index: matched,
        matched,
        checked_len,
        stored_len: stored.len(),
        new_len: new.len(),
        max_trim_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[u32], b: &[u32]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn empty_and_equal() {
        assert_eq!(common_prefix_len(&[], &[]), 0);
        assert_eq!(common_prefix_len(&[], &[1]), 0);
        let v: Vec<u32> = (0..1000).collect();
        assert_eq!(common_prefix_len(&v, &v), 1000);
    }

    #[test]
    fn every_position_around_chunk_boundaries() {
        let base: Vec<u32> = (0..(4 * CHUNK as u32 + 7)).collect();
        for pos in 0..base.len() {
            let mut other = base.clone();
            other[pos] ^= 1;
            assert_eq!(common_prefix_len(&base, &other), pos, "pos {pos}");
            assert_eq!(common_prefix_len(&other, &base), pos, "pos {pos}");
            assert_eq!(common_prefix_len(&base[..pos], &base), pos);
        }
    }

    #[test]
    fn check_prefix_cases() {
        assert!(check_prefix(&[], &[], 0).is_ok());
        assert!(check_prefix(&[], &[5], 3).is_ok());
        assert!(check_prefix(&[1, 2], &[], 2).is_ok());
        let e = check_prefix(&[1, 2, 3], &[1, 2], 0).unwrap_err();
        assert_eq!((e.index, e.matched, e.checked_len, e.stored_len, e.new_len), (2, 2, 3, 3, 2));
        let e = check_prefix(&[1, 2, 3, 4], &[1, 7, 3, 4, 5], 1).unwrap_err();
        assert_eq!((e.index, e.checked_len, e.max_trim_tokens), (1, 3, 1));
        assert_eq!(naive(&[1, 7], &[1, 2]), 1);
        assert!(e.to_string().contains("first mismatch at index 1, matched 1/3 prefix tokens"));
    }
}
