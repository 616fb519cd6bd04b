//! Longest common prefix and the token-level TITO prefix check.
//!
//! The kernels validate while they compare: ids that came from signed 32-bit
//! input carry a mask ([`SIGN`]) whose bits must be clear, and that test is
//! folded into the same pass that compares, so a pair of int32 arrays is read
//! once. After a divergence, the rest of both inputs is still validated (bad
//! input is never silently accepted), with a cheaper check-only pass.
//!
//! The loops are written so that the compiler vectorises them; on x86-64 an
//! AVX2 build of the same code is chosen at run time when the CPU has it.

use crate::error::{IdError, IdErrorKind, PrefixMismatch};

/// Ids compared per step of the fast loop. 64 × 4 bytes = four cache lines:
/// wide enough for the XOR/OR reduction to vectorise, small enough that the
/// exact scan after a hit is cheap.
pub const CHUNK: usize = 64;

/// Mask for ids read from signed 32-bit input: the sign bit must be clear.
pub const SIGN: u32 = 0x8000_0000;

/// A slice of ids and the bits that must be clear in each (0: no check).
#[derive(Debug, Clone, Copy)]
pub struct Checked<'a> {
    pub ids: &'a [u32],
    pub mask: u32,
}

impl<'a> Checked<'a> {
    /// Ids that need no check.
    #[must_use]
    pub fn valid(ids: &'a [u32]) -> Self {
        Self { ids, mask: 0 }
    }
}

/// Which of two inputs an error belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// First chunk (as an element index) where `a` and `b` differ or a masked
/// bit is set; `a` and `b` have the same length.
#[inline(always)]
fn scan_impl(a: &[u32], b: &[u32], ma: u32, mb: u32) -> usize {
    let mut start = 0;
    for (ca, cb) in a.chunks_exact(CHUNK).zip(b.chunks_exact(CHUNK)) {
        let mut diff = 0u32;
        let mut bad = 0u32;
        for k in 0..CHUNK {
            diff |= ca[k] ^ cb[k];
            bad |= (ca[k] & ma) | (cb[k] & mb);
        }
        if (diff | bad) != 0 {
            break;
        }
        start += CHUNK;
    }
    start
}

/// Index of the first id with a masked bit set, if any.
#[inline(always)]
fn first_bad_impl(s: &[u32], mask: u32) -> Option<usize> {
    if mask == 0 {
        return None;
    }
    let mut start = 0;
    for c in s.chunks_exact(CHUNK) {
        let mut bad = 0u32;
        for &x in c {
            bad |= x & mask;
        }
        if bad != 0 {
            break;
        }
        start += CHUNK;
    }
    s[start..].iter().position(|&x| x & mask != 0).map(|i| start + i)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    #[target_feature(enable = "avx2")]
    pub(super) fn scan(a: &[u32], b: &[u32], ma: u32, mb: u32) -> usize {
        super::scan_impl(a, b, ma, mb)
    }
    #[target_feature(enable = "avx2")]
    pub(super) fn first_bad(s: &[u32], mask: u32) -> Option<usize> {
        super::first_bad_impl(s, mask)
    }
}

fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn scan(a: &[u32], b: &[u32], ma: u32, mb: u32) -> usize {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { avx2::scan(a, b, ma, mb) };
    }
    scan_impl(a, b, ma, mb)
}

/// Index of the first id in `s` with a bit of `mask` set.
#[must_use]
pub fn first_bad(s: &[u32], mask: u32) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { avx2::first_bad(s, mask) };
    }
    first_bad_impl(s, mask)
}

/// Length of the longest common prefix of `a` and `b`.
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
    let start = scan(a, b, 0, 0);
    start + a[start..].iter().zip(&b[start..]).take_while(|(x, y)| x == y).count()
}

/// The longest common prefix of `a` and `b`, read block by block: `scan`
/// says of two blocks whether an element of either is not an id and
/// whether they differ, `bad` whether an element of the longer one's tail is
/// not an id. None when an element is not an id.
fn lcp_by_blocks<T: Copy + PartialEq>(
    a: &[T],
    b: &[T],
    block: usize,
    scan: impl Fn(&[T], &[T]) -> (bool, bool),
    bad: impl Fn(&[T]) -> bool,
) -> Option<usize> {
    let n = a.len().min(b.len());
    let mut lcp = None;
    let mut at = 0;
    while at < n {
        let end = (at + block).min(n);
        let (x, y) = (&a[at..end], &b[at..end]);
        let (not_ids, differ) = scan(x, y);
        if not_ids {
            return None;
        }
        if lcp.is_none() && differ {
            lcp = Some(at + x.iter().zip(y).take_while(|(p, q)| p == q).count());
        }
        at = end;
    }
    if bad(&a[n..]) || bad(&b[n..]) {
        return None;
    }
    Some(lcp.unwrap_or(n))
}

/// Longest common prefix of two 64-bit id slices, every element of both
/// checked to be a token id in the same pass (each array read once, never
/// narrowed into a copy). None when an element is not an id (the caller
/// then finds and reports it).
pub fn common_prefix_len_wide<T: Copy + PartialEq + Into<crate::ids::Wide>>(a: &[T], b: &[T]) -> Option<usize> {
    // one fused pass over two blocks: any id out of range, any difference
    let scan = |x: &[T], y: &[T]| {
        let (hi, ne) = x.iter().zip(y).fold((0u64, 0u64), |(hi, ne), (&p, &q)| {
            let (p, q) = (p.into().0, q.into().0);
            (hi | ((p | q) >> 32), ne | (p ^ q))
        });
        (hi != 0, ne != 0)
    };
    lcp_by_blocks(a, b, 512, scan, |s| s.iter().fold(0u64, |acc, &x| acc | (x.into().0 >> 32)) != 0)
}

/// Longest common prefix of two 8- or 16-bit slices, compared in their own
/// width (one read of each, never widened into a copy); for a signed width
/// every element of both is checked to be non-negative in the same pass.
/// None when one is negative (the caller then finds and reports it).
pub fn common_prefix_len_narrow<T>(a: &[T], b: &[T], signed: bool) -> Option<usize>
where
    T: Copy + PartialEq + PartialOrd + Default + std::ops::BitOr<Output = T>,
{
    let zero = T::default();
    // the OR of signed values is negative exactly when one of them is (one vector OR per lane)
    let negative = |s: &[T]| signed && s.iter().fold(zero, |acc, &x| acc | x) < zero;
    lcp_by_blocks(a, b, 2048, |x, y| (negative(x) || negative(y), x != y), negative)
}

fn bad_id(side: Side, pos: usize, raw: u32) -> (Side, IdError) {
    // Masked ids come from signed input: the value is the two's complement.
    (side, IdError { pos, kind: IdErrorKind::Negative(i64::from(raw as i32)) })
}

/// Longest common prefix of `a` and `b`, validating every id of both.
///
/// # Errors
/// The first invalid id of `a`, else of `b`, with its side and position.
///
/// ```
/// use tito_fast::prefix::{common_prefix_len_checked, Checked, SIGN};
/// let a = [1, 2, 3];
/// let b = [1, 2, (-1i32) as u32];
/// assert_eq!(common_prefix_len_checked(Checked::valid(&a), Checked::valid(&b)), Ok(2));
/// assert!(common_prefix_len_checked(Checked::valid(&a), Checked { ids: &b, mask: SIGN }).is_err());
/// ```
pub fn common_prefix_len_checked(a: Checked<'_>, b: Checked<'_>) -> Result<usize, (Side, IdError)> {
    let n = a.ids.len().min(b.ids.len());
    let (x, y) = (&a.ids[..n], &b.ids[..n]);
    let start = scan(x, y, a.mask, b.mask);
    // Everything before `start` is equal and valid; validate the rest of
    // both inputs, then finish the comparison.
    if let Some(p) = first_bad(&a.ids[start..], a.mask) {
        return Err(bad_id(Side::A, start + p, a.ids[start + p]));
    }
    if let Some(p) = first_bad(&b.ids[start..], b.mask) {
        return Err(bad_id(Side::B, start + p, b.ids[start + p]));
    }
    Ok(start + x[start..].iter().zip(&y[start..]).take_while(|(p, q)| p == q).count())
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
    match check_prefix_checked(Checked::valid(stored), Checked::valid(new), max_trim_tokens) {
        Ok(r) => r,
        Err(_) => unreachable!("unmasked ids are always valid"),
    }
}

/// [`check_prefix`] that also validates every id of both inputs.
///
/// # Errors
/// Outer: the first invalid id (stored before new). Inner: the mismatch.
pub fn check_prefix_checked(
    stored: Checked<'_>,
    new: Checked<'_>,
    max_trim_tokens: usize,
) -> Result<Result<(), PrefixMismatch>, (Side, IdError)> {
    let checked_len = stored.ids.len().saturating_sub(max_trim_tokens);
    let head = Checked { ids: &stored.ids[..checked_len], mask: stored.mask };
    let matched = common_prefix_len_checked(head, new)?;
    if let Some(p) = first_bad(&stored.ids[checked_len..], stored.mask) {
        return Err(bad_id(Side::A, checked_len + p, stored.ids[checked_len + p]));
    }
    if checked_len == 0 || matched == checked_len {
        return Ok(Ok(()));
    }
    Ok(Err(PrefixMismatch {
        index: matched,
        matched,
        checked_len,
        stored_len: stored.ids.len(),
        new_len: new.ids.len(),
        max_trim_tokens,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(scan_impl(&base, &other, 0, 0), pos / CHUNK * CHUNK);
        }
    }

    #[test]
    fn checked_finds_bad_ids_everywhere() {
        let base: Vec<u32> = (0..(3 * CHUNK as u32 + 5)).collect();
        for div in [0, 10, CHUNK, base.len()] {
            for bad in 0..base.len() {
                let mut a = base.clone();
                let mut b = base.clone();
                if div < b.len() {
                    b[div] += 1000;
                }
                a[bad] |= SIGN;
                let r = common_prefix_len_checked(Checked { ids: &a, mask: SIGN }, Checked { ids: &b, mask: SIGN });
                assert_eq!(r.unwrap_err().1.pos, bad);
                a[bad] &= !SIGN;
                b[bad] |= SIGN;
                let r = common_prefix_len_checked(Checked { ids: &a, mask: SIGN }, Checked { ids: &b, mask: SIGN });
                assert_eq!(r.unwrap_err(), bad_id(Side::B, bad, b[bad]));
                // Unmasked, the same bit is a valid id.
                let r = common_prefix_len_checked(Checked::valid(&a), Checked::valid(&b));
                assert_eq!(r.unwrap(), common_prefix_len(&a, &b));
            }
        }
    }

    #[test]
    fn a_is_reported_before_b() {
        let a = [1, 2, 3, SIGN | 4];
        let b = [SIGN | 1, 2];
        let r = common_prefix_len_checked(Checked { ids: &a, mask: SIGN }, Checked { ids: &b, mask: SIGN });
        assert_eq!(r.unwrap_err().0, Side::A);
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
        assert!(e.to_string().contains("first mismatch at index 1, matched 1/3 prefix tokens"));
        // The trimmed tail is validated too.
        let r = check_prefix_checked(Checked { ids: &[1, SIGN], mask: SIGN }, Checked::valid(&[1]), 1);
        assert_eq!(r.unwrap_err().1.pos, 1);
    }
}

#[cfg(test)]
mod wide_tests {
    use super::*;

    #[test]
    fn wide_prefix_checks_every_id_of_both() {
        let a: Vec<i64> = (0..2000).collect();
        let mut b = a.clone();
        assert_eq!(common_prefix_len_wide(&a, &b), Some(2000));
        b[1500] = 7;
        assert_eq!(common_prefix_len_wide(&a, &b), Some(1500));
        assert_eq!(common_prefix_len_wide(&a, &b[..10]), Some(10));
        b[1999] = -1; // after the difference, still checked
        assert_eq!(common_prefix_len_wide(&a, &b), None);
        let mut c = a.clone();
        c.push(1 << 32); // past the shorter one's end
        assert_eq!(common_prefix_len_wide(&a[..5], &c), None);
        let u: Vec<u64> = vec![1, 2, u64::from(u32::MAX)];
        assert_eq!(common_prefix_len_wide(&u, &u), Some(3));
    }
}
