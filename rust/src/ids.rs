//! Integer slices of any width → validated `u32` token ids.
//!
//! Token ids are unsigned 32-bit values. Inputs arrive as slices of whatever
//! integer type the caller had (numpy int32 is the common case); [`Raw`]
//! names the slice and [`Raw::normalize`] validates it and borrows it as
//! `&[u32]` without a copy whenever the bits already are the ids (`u32`, and
//! `i32` with no negative value), copying only for other widths.

use std::borrow::Cow;

use crate::error::{IdError, IdErrorKind};
use crate::prefix::{first_bad, Checked, Side, SIGN};

/// Elements validated per block before the (rare) exact scan.
const BLOCK: usize = 256;

/// A borrowed integer slice of some width, or ids already converted.
#[derive(Debug)]
pub enum Raw<'a> {
    U8(&'a [u8]),
    I8(&'a [i8]),
    U16(&'a [u16]),
    I16(&'a [i16]),
    U32(&'a [u32]),
    I32(&'a [i32]),
    U64(&'a [u64]),
    I64(&'a [i64]),
    /// Ids that were already validated and converted (e.g. from a Python list).
    Owned(Vec<u32>),
}

impl Raw<'_> {
    /// Number of elements.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Raw::U8(s) => s.len(),
            Raw::I8(s) => s.len(),
            Raw::U16(s) => s.len(),
            Raw::I16(s) => s.len(),
            Raw::U32(s) => s.len(),
            Raw::I32(s) => s.len(),
            Raw::U64(s) => s.len(),
            Raw::I64(s) => s.len(),
            Raw::Owned(v) => v.len(),
        }
    }

    /// True when there are no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements `range` (which must lie within the slice).
    #[must_use]
    pub fn slice(&self, range: std::ops::Range<usize>) -> Raw<'_> {
        match self {
            Raw::U8(s) => Raw::U8(&s[range]),
            Raw::I8(s) => Raw::I8(&s[range]),
            Raw::U16(s) => Raw::U16(&s[range]),
            Raw::I16(s) => Raw::I16(&s[range]),
            Raw::U32(s) => Raw::U32(&s[range]),
            Raw::I32(s) => Raw::I32(&s[range]),
            Raw::U64(s) => Raw::U64(&s[range]),
            Raw::I64(s) => Raw::I64(&s[range]),
            Raw::Owned(v) => Raw::U32(&v[range]),
        }
    }

    /// Ready the ids for a checking kernel: 32-bit inputs are viewed as they
    /// are (the kernel validates them in its own pass, see
    /// [`crate::prefix::Checked`]); other widths are validated and converted
    /// here.
    ///
    /// # Errors
    /// [`IdError`] for an invalid id of a converted width.
    pub fn prepare(&self) -> Result<Prepared<'_>, IdError> {
        match self {
            Raw::U32(s) => Ok(Prepared::View(Checked::valid(s))),
            Raw::Owned(v) => Ok(Prepared::View(Checked::valid(v))),
            Raw::I32(s) => Ok(Prepared::View(Checked {
                // SAFETY: same size and alignment, every bit pattern valid.
                ids: unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u32>(), s.len()) },
                mask: SIGN,
            })),
            _ => self.normalize().map(|c| Prepared::Owned(c.into_owned())),
        }
    }

    /// Validate every element and view the slice as token ids.
    ///
    /// `u32` and non-negative `i32` slices are borrowed as they are; other
    /// widths are converted into a new vector.
    ///
    /// # Errors
    /// [`IdError`] for the first element that is negative or above `u32::MAX`.
    pub fn normalize(&self) -> Result<Cow<'_, [u32]>, IdError> {
        match self {
            Raw::U32(s) => Ok(Cow::Borrowed(s)),
            Raw::Owned(v) => Ok(Cow::Borrowed(v.as_slice())),
            Raw::I32(s) => i32_as_ids(s).map(Cow::Borrowed),
            Raw::U8(s) => Ok(Cow::Owned(s.iter().map(|&x| u32::from(x)).collect())),
            Raw::U16(s) => Ok(Cow::Owned(s.iter().map(|&x| u32::from(x)).collect())),
            Raw::I8(s) => widen_signed(s).map(Cow::Owned),
            Raw::I16(s) => widen_signed(s).map(Cow::Owned),
            Raw::U64(s) => narrow_u64(s).map(Cow::Owned),
            Raw::I64(s) => narrow_i64(s).map(Cow::Owned),
        }
    }
}

/// Ids ready for a checking kernel (see [`Raw::prepare`]).
#[derive(Debug)]
pub enum Prepared<'a> {
    /// Borrowed; the mask says which bits the kernel must find clear.
    View(Checked<'a>),
    /// Converted and already valid.
    Owned(Vec<u32>),
}

impl Prepared<'_> {
    /// The ids with their check mask.
    #[must_use]
    pub fn checked(&self) -> Checked<'_> {
        match self {
            Prepared::View(c) => *c,
            Prepared::Owned(v) => Checked::valid(v),
        }
    }
}

/// Prepare two inputs; an invalid id of `a` is reported before one of `b`.
///
/// # Errors
/// The first invalid id found, with its side, when a conversion fails.
pub fn prepare_pair<'a>(a: &'a Raw<'a>, b: &'a Raw<'a>) -> Result<(Prepared<'a>, Prepared<'a>), (Side, IdError)> {
    let pa = a.prepare().map_err(|e| (Side::A, e))?;
    match b.prepare() {
        Ok(pb) => Ok((pa, pb)),
        Err(e) => {
            // `a` may hold an unchecked view with an earlier-reported error.
            let ca = pa.checked();
            match first_bad(ca.ids, ca.mask) {
                Some(p) => Err((Side::A, IdError { pos: p, kind: IdErrorKind::Negative(i64::from(ca.ids[p] as i32)) })),
                None => Err((Side::B, e)),
            }
        }
    }
}

/// View a non-negative `i32` slice as `u32` ids without copying.
///
/// # Errors
/// [`IdError`] at the first negative value.
pub fn i32_as_ids(s: &[i32]) -> Result<&[u32], IdError> {
    for (b, block) in s.chunks(BLOCK).enumerate() {
        // OR of all values has the sign bit set iff some value is negative;
        // this loop vectorises, the exact scan below runs only on failure.
        let any = block.iter().fold(0i32, |acc, &x| acc | x);
        if any < 0 {
            let (i, &v) =
                block.iter().enumerate().find(|&(_, &x)| x < 0).expect("a negative value exists in this block");
            return Err(IdError { pos: b * BLOCK + i, kind: IdErrorKind::Negative(i64::from(v)) });
        }
    }
    // SAFETY: i32 and u32 have the same size and alignment, every bit pattern
    // is a valid u32, and the result borrows `s` for the same lifetime.
    Ok(unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u32>(), s.len()) })
}

fn widen_signed<T: Copy + Into<i64>>(s: &[T]) -> Result<Vec<u32>, IdError> {
    let mut out = Vec::with_capacity(s.len());
    for (pos, &x) in s.iter().enumerate() {
        let v: i64 = x.into();
        if v < 0 {
            return Err(IdError { pos, kind: IdErrorKind::Negative(v) });
        }
        // A non-negative i8/i16 always fits in u32.
        out.push(v as u32);
    }
    Ok(out)
}

/// A 64-bit element as its bit pattern (negative values have bits above 31 set).
#[derive(Debug, Clone, Copy)]
pub struct Wide(pub u64);

impl From<i64> for Wide {
    fn from(x: i64) -> Self {
        Wide(x as u64)
    }
}

impl From<u64> for Wide {
    fn from(x: u64) -> Self {
        Wide(x)
    }
}

fn narrow_u64(s: &[u64]) -> Result<Vec<u32>, IdError> {
    let mut out = Vec::with_capacity(s.len());
    for (b, block) in s.chunks(BLOCK).enumerate() {
        let high = block.iter().fold(0u64, |acc, &x| acc | (x >> 32));
        if high != 0 {
            let (i, &v) = block
                .iter()
                .enumerate()
                .find(|&(_, &x)| x > u64::from(u32::MAX))
                .expect("a value above u32::MAX exists in this block");
            return Err(IdError { pos: b * BLOCK + i, kind: IdErrorKind::TooLarge(v) });
        }
        out.extend(block.iter().map(|&x| x as u32));
    }
    Ok(out)
}

fn narrow_i64(s: &[i64]) -> Result<Vec<u32>, IdError> {
    let mut out = Vec::with_capacity(s.len());
    for (b, block) in s.chunks(BLOCK).enumerate() {
        // Any value outside [0, 2^32) has a bit set above bit 31.
        let high = block.iter().fold(0u64, |acc, &x| acc | ((x as u64) >> 32));
        if high != 0 {
            let (i, &v) = block
                .iter()
                .enumerate()
                .find(|&(_, &x)| !(0..=i64::from(u32::MAX)).contains(&x))
                .expect("an out-of-range value exists in this block");
            let kind = if v < 0 { IdErrorKind::Negative(v) } else { IdErrorKind::TooLarge(v as u64) };
            return Err(IdError { pos: b * BLOCK + i, kind });
        }
        out.extend(block.iter().map(|&x| x as u32));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrows_u32_and_valid_i32() {
        let a = [1u32, 2, 3];
        assert!(matches!(Raw::U32(&a).normalize().unwrap(), Cow::Borrowed(_)));
        let b = [1i32, 2, i32::MAX];
        let raw = Raw::I32(&b);
        let n = raw.normalize().unwrap();
        assert!(matches!(n, Cow::Borrowed(_)));
        assert_eq!(&*n, &[1, 2, i32::MAX as u32]);
    }

    #[test]
    fn negative_i32_is_reported_at_its_position() {
        for pos in [0usize, 1, 255, 256, 257, 1000, 1023] {
            let mut v = vec![7i32; 1024];
            v[pos] = -3;
            let e = Raw::I32(&v).normalize().unwrap_err();
            assert_eq!(e, IdError { pos, kind: IdErrorKind::Negative(-3) });
        }
    }

    #[test]
    fn i64_range_is_checked_both_ways() {
        let ok = [0i64, 1, i64::from(u32::MAX)];
        assert_eq!(&*Raw::I64(&ok).normalize().unwrap(), &[0, 1, u32::MAX]);
        let big = [0i64, 1 << 32];
        assert_eq!(Raw::I64(&big).normalize().unwrap_err(), IdError { pos: 1, kind: IdErrorKind::TooLarge(1 << 32) });
        let neg = [5i64, 6, -1];
        assert_eq!(Raw::I64(&neg).normalize().unwrap_err(), IdError { pos: 2, kind: IdErrorKind::Negative(-1) });
        let umax = [3u64, u64::MAX];
        assert_eq!(Raw::U64(&umax).normalize().unwrap_err(), IdError { pos: 1, kind: IdErrorKind::TooLarge(u64::MAX) });
    }

    #[test]
    fn small_widths() {
        assert_eq!(&*Raw::U8(&[0, 255]).normalize().unwrap(), &[0, 255]);
        assert_eq!(&*Raw::U16(&[65535]).normalize().unwrap(), &[65535]);
        assert_eq!(&*Raw::I16(&[3, 4]).normalize().unwrap(), &[3, 4]);
        assert_eq!(Raw::I8(&[3, -4]).normalize().unwrap_err(), IdError { pos: 1, kind: IdErrorKind::Negative(-4) });
        assert!(Raw::I8(&[]).normalize().unwrap().is_empty());
    }
}
