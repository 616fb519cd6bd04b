//! Id lists read in one pass: the bulk of every record line.
//!
//! [`ids_at`] reads a JSON array of plain non-negative integers below 2**32
//! with eight digits at a time (SWAR), and refuses anything else (a float, a
//! sign, a leading zero, a bigger number): the general parser then reads the
//! list, and the record's rules say what is wrong with it.

type Step<T> = Result<T, &'static str>;

const BAD_IDS: &str = "token_ids that are not a list of ids below 2**32";

fn ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The ids of the JSON array starting at `b[i]`, and where it ends. Only
/// plain non-negative integers up to `u32::MAX` are taken.
pub fn ids_at(b: &[u8], mut i: usize) -> Step<(Vec<u32>, usize)> {
    let n = b.len();
    if b.get(i) != Some(&b'[') {
        return Err(BAD_IDS);
    }
    i = ws(b, i + 1);
    let mut out = Vec::with_capacity((n - i) / 7 + 1);
    if b.get(i) == Some(&b']') {
        return Ok((out, i + 1));
    }
    loop {
        let start = i;
        let (v, len) = match b.get(i..i + 8) {
            Some(chunk) => eight_digits(u64::from_le_bytes(chunk.try_into().expect("8 bytes"))),
            None => (0, 8),
        };
        let v = if len < 8 {
            i += len;
            v
        } else {
            // eight digits or more, or near the end: one digit at a time
            let mut v: u64 = 0;
            while i < n {
                let d = b[i].wrapping_sub(b'0');
                if d > 9 || i - start == 11 {
                    break;
                }
                v = v * 10 + u64::from(d);
                i += 1;
            }
            v
        };
        let len = i - start;
        if len == 0 || len > 10 || (len > 1 && b[start] == b'0') || v > u64::from(u32::MAX) {
            return Err(BAD_IDS);
        }
        out.push(v as u32);
        i = ws(b, i);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            Some(b']') => return Ok((out, i + 1)),
            _ => return Err(BAD_IDS),
        }
    }
}

/// The leading ASCII digits of 8 bytes (little-endian) as `(value, count)`,
/// SWAR: no branch per digit. A count of 8 means "maybe more": the caller
/// reads those one at a time.
#[inline]
fn eight_digits(chunk: u64) -> (u64, usize) {
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    let x = chunk.wrapping_sub(ZEROS);
    // a byte's high bit is set from the first byte that is not a digit on
    // (a borrow or carry only moves towards later bytes)
    let not_digit = (x | x.wrapping_add(0x7676_7676_7676_7676)) & 0x8080_8080_8080_8080;
    let len = (not_digit.trailing_zeros() / 8) as usize;
    if len == 0 || len == 8 {
        return (0, len);
    }
    let mut v = (x << (8 * (8 - len))) & 0x0F0F_0F0F_0F0F_0F0F; // the digits in the top bytes, leading zeros below
    v = (v.wrapping_mul(10 * 256 + 1) >> 8) & 0x00FF_00FF_00FF_00FF;
    v = (v.wrapping_mul(100 * 65536 + 1) >> 16) & 0x0000_FFFF_0000_FFFF;
    v = v.wrapping_mul(10000 * (1 << 32) + 1) >> 32;
    (v, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_as_json_reads_them() {
        fn ids(s: &str) -> Step<(Vec<u32>, &str)> {
            ids_at(s.as_bytes(), 0).map(|(v, end)| (v, &s[end..]))
        }
        assert_eq!(ids("[1, 2,3 ,\n 4294967295] x"), Ok((vec![1, 2, 3, u32::MAX], " x")));
        assert_eq!(ids("[ ]"), Ok((vec![], "")));
        assert_eq!(ids("[0]"), Ok((vec![0], "")));
        for v in [0u32, 7, 10, 99, 100, 12345, 999_999, 1_000_000, 9_999_999, 10_000_000, 123_456_789, u32::MAX] {
            for tail in ["]", ", 1]", " ]", "]         "] {
                assert_eq!(ids(&format!("[{v}{tail}")).unwrap().0[0], v, "{v}{tail}");
            }
        }
        for bad in [
            "[4294967296]",
            "[1.0]",
            "[-1]",
            "[1e3]",
            "[01]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[",
            "[1",
            "1",
            "[true]",
            "[\"1\"]",
            "[99999999999999999999]",
            "[12345678901]",
        ] {
            assert!(ids(bad).is_err(), "{bad}");
        }
    }
}
