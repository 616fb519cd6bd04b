//! A dump line's top-level object, read without parsing its id list twice.
//!
//! serde reads every number of `token_ids` even to skip it, and the ids are
//! most of a line. [`scan`] walks the top-level object itself: each field
//! the check needs is handed to serde as its own byte range (so it is
//! validated exactly as before), `token_ids` is read by [`ids_at`] in one
//! pass, and any other field is validated by serde and dropped. Anything it
//! is not sure Python's `json` would read the same way (an escaped or
//! repeated key, a float or signed id, a byte-order mark) is an error, and
//! the line goes to the Python path.

use serde::de::IgnoredAny;
use serde_json::Value as Json;

type Step<T> = Result<T, &'static str>;

const NOT_JSON: &str = "not a record line the native check reads as Python does";
const BAD_IDS: &str = "token_ids that are not a list of ids below 2**32";

/// The fields of a record the check reads, parsed.
#[derive(Debug, Default)]
pub struct Fields {
    pub session_id: Option<Json>,
    pub family: Option<Json>,
    pub messages: Option<Json>,
    pub tools: Option<Json>,
    pub token_ids: Option<Vec<u32>>,
    pub metadata: Option<Json>,
}

fn ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Where the JSON string opening at `b[i]` (a quote) ends, past its closing quote.
fn string_end(b: &[u8], mut i: usize) -> Step<usize> {
    i += 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', &b[i..]).ok_or(NOT_JSON)?;
        if b[i] == b'"' {
            return Ok(i + 1);
        }
        i += 2; // an escape: its next byte is never the closing quote
        if i > b.len() {
            return Err(NOT_JSON);
        }
    }
}

/// Where the JSON value starting at `b[i]` ends (its extent only: serde
/// validates it afterwards).
fn value_end(b: &[u8], mut i: usize) -> Step<usize> {
    match b.get(i) {
        Some(b'"') => string_end(b, i),
        Some(b'[' | b'{') => {
            let mut depth = 0usize;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            Err(NOT_JSON)
        }
        Some(_) => {
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                i += 1;
            }
            Ok(i)
        }
        None => Err(NOT_JSON),
    }
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

fn json(slice: &[u8]) -> Step<Json> {
    serde_json::from_slice(slice).map_err(|_| NOT_JSON)
}

fn set<T>(slot: &mut Option<T>, value: T) -> Step<()> {
    if slot.is_some() {
        return Err("a repeated field"); // Python keeps the last, serde refused: the Python path decides
    }
    *slot = Some(value);
    Ok(())
}

/// The fields of the record on one JSONL line.
pub fn scan(b: &[u8]) -> Step<Fields> {
    let mut f = Fields::default();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return Err(NOT_JSON);
    }
    i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            if b.get(i) != Some(&b'"') {
                return Err(NOT_JSON);
            }
            let key_end = string_end(b, i)?;
            let key = &b[i + 1..key_end - 1];
            if key.iter().any(|&c| c == b'\\' || c < 0x20) || std::str::from_utf8(key).is_err() {
                return Err(NOT_JSON);
            }
            i = ws(b, key_end);
            if b.get(i) != Some(&b':') {
                return Err(NOT_JSON);
            }
            let start = ws(b, i + 1);
            if key == b"token_ids" {
                // null is a missing field, as for the others
                if b[start..].starts_with(b"null") {
                    i = start + 4;
                } else {
                    let (ids, end) = ids_at(b, start)?;
                    set(&mut f.token_ids, ids)?;
                    i = end;
                }
            } else {
                let end = value_end(b, start)?;
                let value = &b[start..end];
                match key {
                    b"session_id" => set(&mut f.session_id, json(value)?)?,
                    b"family" => set(&mut f.family, json(value)?)?,
                    b"messages" => set(&mut f.messages, json(value)?)?,
                    b"tools" => set(&mut f.tools, json(value)?)?,
                    b"metadata" => set(&mut f.metadata, json(value)?)?,
                    _ => {
                        // serde skips strings without checking their UTF-8; Python refuses the line
                        std::str::from_utf8(value).map_err(|_| NOT_JSON)?;
                        serde_json::from_slice::<IgnoredAny>(value).map_err(|_| NOT_JSON)?;
                    }
                }
                i = end;
            }
            i = ws(b, i);
            match b.get(i) {
                Some(b',') => i = ws(b, i + 1),
                Some(b'}') => {
                    i += 1;
                    break;
                }
                _ => return Err(NOT_JSON),
            }
        }
    }
    if ws(b, i) != b.len() {
        return Err(NOT_JSON);
    }
    Ok(f)
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

    #[test]
    fn fields_read_as_serde_reads_the_object() {
        let line = br#" {"x": [1, {"y": "]}\"["}], "session_id": "s\"1", "token_ids": [5, 6], "messages": [{"role": "user", "content": "[{"}], "metadata": null}
"#;
        let f = scan(line).unwrap();
        assert_eq!(f.session_id, Some(Json::String("s\"1".into())));
        assert_eq!(f.token_ids, Some(vec![5, 6]));
        assert_eq!(f.messages.unwrap()[0]["content"], "[{");
        assert_eq!(f.metadata, Some(Json::Null));
        assert!(scan(br#"{"token_ids": null}"#).unwrap().token_ids.is_none());
        assert!(scan(b"{}").is_ok());
        for bad in [
            &br#"{"a": 1,}"#[..],
            br#"{"a" 1}"#,
            br#"{"a": [1,,2]}"#,
            br#"{"a": 1} x"#,
            br#"{"token\u005fids": [1]}"#,
            br#"{"session_id": "a", "session_id": "b"}"#,
            br#"{"a": "unterminated}"#,
            br#"{"a": [1}"#,
            br#"[1]"#,
            b"{\"a\": \"\xff\"}",
            b"{\"\xff\": 1}",
            br#"{"a": NaN}"#,
            b"\xef\xbb\xbf{}",
        ] {
            assert!(scan(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
