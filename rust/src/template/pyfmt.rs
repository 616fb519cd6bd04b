//! Python's text forms of template values: `json.dumps` (what transformers'
//! `tojson` filter calls), `repr` of floats, strings, lists and dicts (what
//! `{{ value }}` prints for them), and `str`'s whitespace rules.
//!
//! Each function returns `Err` for a value whose Python form it cannot give
//! byte for byte; the renderer then fails and the caller renders with jinja2.
//! The `_within` forms take a byte cap (what the render's fuel still pays
//! for): a text that would pass it is an `Err` whose message starts with
//! [`LIMITED`] (the renderer reports a limit), before it is allocated.

use std::fmt::Write;

use minijinja::value::{ObjectRepr, ValueKind};
use minijinja::Value;

/// Why a value has no Python form here (the caller turns it into a render error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

type Res<T> = Result<T, Unsupported>;

fn unsupported<T>(what: impl Into<String>) -> Res<T> {
    Err(Unsupported(what.into()))
}

/// The messages of limit errors start with this (the renderer's
/// `RenderFailure::Limit`).
pub const LIMITED: &str = "template limit: ";

/// Containers nested deeper than this are not written here (Python may
/// write them, or fail with a RecursionError: jinja2 decides).
pub const MAX_NESTING: usize = 200;

/// Fails when `out` has passed `cap` bytes.
fn within(out: &str, cap: usize) -> Res<()> {
    if out.len() > cap {
        return Err(Unsupported(format!(
            "{LIMITED}a value's text of more than {cap} bytes (what the fuel left pays for)"
        )));
    }
    Ok(())
}

/// `str.isspace()` for one character: Rust's White_Space plus the four
/// ASCII separators (U+001C..U+001F) that Python counts as whitespace.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `repr(float)`: the shortest digits that read back, in fixed
/// notation for exponents -4..16 and scientific (`1e-05`, `1.5e+16`) outside.
pub fn float_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf".into() } else { "inf".into() };
    }
    // Rust's `{:e}` gives the shortest round-trip digits, as Python's repr does,
    // but for a value exactly halfway between two shortest candidates it takes
    // the upper one where Python takes the even one.
    let sci = format!("{:e}", v.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut digits: String = mant.chars().filter(|c| *c != '.').collect();
    half_even(v.abs(), exp, &mut digits);
    let sign = if v.is_sign_negative() { "-" } else { "" };
    let mut out = String::from(sign);
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

/// `digits` (the shortest that read back as `v`, scientific exponent `exp`)
/// with an odd last digit lowered by one when `v` lies exactly halfway
/// between the two, as Python's repr breaks the tie (to the even digit).
fn half_even(v: f64, exp: i32, digits: &mut String) {
    let n = digits.len();
    let last = digits.as_bytes()[n - 1];
    if n < 2 || (last - b'0') % 2 == 0 {
        return;
    }
    let mut lower = digits.clone();
    lower.pop();
    lower.push(char::from(last - 1));
    let reads_back = format!("{}.{}e{exp}", &lower[..1], &lower[1..]).parse::<f64>().ok() == Some(v);
    if !reads_back {
        return; // only the upper one reads back: no tie
    }
    // The exact decimal value of `v` (a double has at most 767 significant digits).
    let exact = format!("{:.800e}", v);
    let exact_digits: String = exact.split('e').next().unwrap_or("").chars().filter(|c| *c != '.').collect();
    let tail = &exact_digits[n.min(exact_digits.len())..];
    if exact_digits.starts_with(&lower) && tail.starts_with('5') && tail[1..].bytes().all(|b| b == b'0') {
        *digits = lower;
    }
}

/// Whether Python's `str.isprintable()` is surely true for `c` (a
/// conservative set: ASCII printables and letters, digits and common
/// symbols; anything else is reported unsupported rather than guessed).
fn surely_printable(c: char) -> bool {
    match c {
        ' '..='~' => true,
        '\u{0}'..='\u{a0}' => false,
        '\u{ad}' => false,
        _ if c.is_alphanumeric() => true,
        '\u{a1}'..='\u{bf}' | '\u{d7}' | '\u{f7}' | '\u{2010}'..='\u{2027}' | '\u{2030}'..='\u{205e}' => true,
        '\u{3001}'..='\u{303f}' | '\u{ff01}'..='\u{ff60}' => true,
        _ => false,
    }
}

/// Python's `repr(str)`.
pub fn str_repr(s: &str, out: &mut String) -> Res<()> {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if surely_printable(c) => out.push(c),
            c => return unsupported(format!("the Python repr of the character U+{:04X}", c as u32)),
        }
    }
    out.push(quote);
    Ok(())
}

/// What `str(value)` gives in Python, for the values a chat template prints.
pub fn py_str(v: &Value, out: &mut String) -> Res<()> {
    py_str_within(v, out, usize::MAX)
}

/// `py_str`, failing (a limit) once the text passes `cap` bytes.
pub fn py_str_within(v: &Value, out: &mut String, cap: usize) -> Res<()> {
    match v.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::String => {
            out.push_str(v.as_str().unwrap_or_default());
            Ok(())
        }
        _ => repr(v, out, cap, 0),
    }
}

/// Python's `repr` of a template value (strings quoted).
pub fn py_repr(v: &Value, out: &mut String) -> Res<()> {
    repr(v, out, usize::MAX, 0)
}

fn repr(v: &Value, out: &mut String, cap: usize, depth: usize) -> Res<()> {
    if depth > MAX_NESTING {
        return unsupported(format!("printing values nested deeper than {MAX_NESTING} levels"));
    }
    within(out, cap)?;
    match v.kind() {
        ValueKind::Undefined => unsupported("an undefined value inside a container"),
        ValueKind::None => {
            out.push_str("None");
            Ok(())
        }
        ValueKind::Bool => {
            out.push_str(if v.is_true() { "True" } else { "False" });
            Ok(())
        }
        ValueKind::Number => number(v, out, false),
        ValueKind::String => str_repr(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq => {
            out.push('[');
            for (i, item) in v.try_iter().map_err(|e| Unsupported(e.to_string()))?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr(&item, out, cap, depth + 1)?;
            }
            out.push(']');
            within(out, cap)
        }
        ValueKind::Map => {
            let obj = v.as_object().ok_or_else(|| Unsupported("a map that is not an object".into()))?;
            if obj.repr() != ObjectRepr::Map {
                return unsupported("printing a template object");
            }
            out.push('{');
            for (i, (k, val)) in obj.try_iter_pairs().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr(&k, out, cap, depth + 1)?;
                out.push_str(": ");
                repr(&val, out, cap, depth + 1)?;
            }
            out.push('}');
            within(out, cap)
        }
        other => unsupported(format!("the Python form of a {other} value")),
    }
}

fn number(v: &Value, out: &mut String, json: bool) -> Res<()> {
    if v.is_integer() {
        let _ = write!(out, "{v}");
        return Ok(());
    }
    let f = f64::try_from(v.clone()).map_err(|e| Unsupported(e.to_string()))?;
    if json {
        if f.is_nan() {
            out.push_str("NaN");
            return Ok(());
        }
        if f.is_infinite() {
            out.push_str(if f < 0.0 { "-Infinity" } else { "Infinity" });
            return Ok(());
        }
    }
    out.push_str(&float_repr(f));
    Ok(())
}

/// A JSON string literal as Python's `json.dumps` writes it (`ensure_ascii`:
/// every non-ASCII character as `\\uXXXX` escapes). The one writer of JSON
/// strings: `tojson` and the record reader's `dumps` use it.
pub fn json_str(s: &str, ensure_ascii: bool, out: &mut String) {
    use std::fmt::Write;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The arguments of Python's `json.dumps` that transformers' `tojson` passes on.
#[derive(Debug, Clone, Default)]
pub struct JsonOptions {
    pub ensure_ascii: bool,
    /// None: one line; Some(s): newline and `s` repeated per level.
    pub indent: Option<String>,
    /// (item separator, key separator); None: Python's defaults for `indent`.
    pub separators: Option<(String, String)>,
    pub sort_keys: bool,
}

/// `json.dumps(value, **options)` as Python writes it.
pub fn dumps(v: &Value, opts: &JsonOptions) -> Res<String> {
    dumps_within(v, opts, usize::MAX)
}

/// `dumps`, failing (a limit) once the text passes `cap` bytes.
pub fn dumps_within(v: &Value, opts: &JsonOptions, cap: usize) -> Res<String> {
    let (item_sep, key_sep) = match &opts.separators {
        Some((a, b)) => (a.clone(), b.clone()),
        None if opts.indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let mut out = String::new();
    let w = JsonWriter { opts, item_sep: &item_sep, key_sep: &key_sep, cap };
    w.value(v, 0, &mut out)?;
    within(&out, cap)?;
    Ok(out)
}

struct JsonWriter<'a> {
    opts: &'a JsonOptions,
    item_sep: &'a str,
    key_sep: &'a str,
    cap: usize,
}

impl JsonWriter<'_> {
    fn newline(&self, level: usize, out: &mut String) -> Res<()> {
        if let Some(ind) = &self.opts.indent {
            // the indent is checked before it is written: `level` copies of a
            // template's string could be large
            let adds = ind.len().saturating_mul(level).saturating_add(1);
            if out.len().saturating_add(adds) > self.cap {
                return Err(Unsupported(format!(
                    "{LIMITED}a value's text of more than {} bytes (what the fuel left pays for)",
                    self.cap
                )));
            }
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
        Ok(())
    }

    fn string(&self, s: &str, out: &mut String) {
        json_str(s, self.opts.ensure_ascii, out);
    }

    fn key(&self, k: &Value, out: &mut String) -> Res<()> {
        match k.kind() {
            ValueKind::String => self.string(k.as_str().unwrap_or_default(), out),
            ValueKind::Number => {
                let mut s = String::new();
                number(k, &mut s, true)?;
                // Python writes float keys by repr (`inf` stays `Infinity`).
                self.string(&s, out);
            }
            ValueKind::Bool => self.string(if k.is_true() { "true" } else { "false" }, out),
            ValueKind::None => self.string("null", out),
            other => return unsupported(format!("a JSON key of kind {other}")),
        }
        Ok(())
    }

    fn value(&self, v: &Value, level: usize, out: &mut String) -> Res<()> {
        if level > MAX_NESTING {
            return unsupported(format!("JSON of values nested deeper than {MAX_NESTING} levels"));
        }
        within(out, self.cap)?;
        match v.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => number(v, out, true)?,
            ValueKind::String => self.string(v.as_str().unwrap_or_default(), out),
            ValueKind::Seq => {
                let items: Vec<Value> = v.try_iter().map_err(|e| Unsupported(e.to_string()))?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(level + 1, out)?;
                    self.value(item, level + 1, out)?;
                }
                self.newline(level, out)?;
                out.push(']');
            }
            ValueKind::Map => {
                let obj = v.as_object().ok_or_else(|| Unsupported("a map that is not an object".into()))?;
                if obj.repr() != ObjectRepr::Map {
                    return unsupported("JSON of a template object");
                }
                let mut pairs: Vec<(Value, Value)> = obj.try_iter_pairs().into_iter().flatten().collect();
                if pairs.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                if self.opts.sort_keys {
                    if !pairs.iter().all(|(k, _)| k.kind() == ValueKind::String) {
                        return unsupported("sort_keys with keys that are not all strings");
                    }
                    pairs.sort_by(|a, b| a.0.as_str().cmp(&b.0.as_str()));
                }
                out.push('{');
                for (i, (k, val)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(level + 1, out)?;
                    self.key(k, out)?;
                    out.push_str(self.key_sep);
                    self.value(val, level + 1, out)?;
                }
                self.newline(level, out)?;
                out.push('}');
            }
            ValueKind::Undefined => return unsupported("JSON of an undefined value"),
            other => return unsupported(format!("JSON of a {other} value")),
        }
        Ok(())
    }
}

/// `s.strip(chars)`, `lstrip`, `rstrip` (`chars` None: Python whitespace).
pub fn strip<'a>(s: &'a str, chars: Option<&str>, left: bool, right: bool) -> &'a str {
    let in_set = |c: char| match chars {
        Some(set) => set.contains(c),
        None => is_py_space(c),
    };
    let mut t = s;
    if left {
        t = t.trim_start_matches(in_set);
    }
    if right {
        t = t.trim_end_matches(in_set);
    }
    t
}

/// `s.split(sep, maxsplit)` and `s.rsplit(...)` with Python's rules (no
/// separator: runs of whitespace, no empty strings).
pub fn split(s: &str, sep: Option<&str>, maxsplit: i64, from_right: bool) -> Res<Vec<String>> {
    let limit = if maxsplit < 0 { usize::MAX } else { maxsplit as usize };
    match sep {
        Some("") => unsupported("split with an empty separator (a ValueError in Python)"),
        Some(sep) => {
            let parts: Vec<String> = if from_right {
                let mut v: Vec<String> = s.rsplitn(limit.saturating_add(1), sep).map(String::from).collect();
                v.reverse();
                v
            } else {
                s.splitn(limit.saturating_add(1), sep).map(String::from).collect()
            };
            Ok(parts)
        }
        None => {
            let chars: Vec<(usize, char)> = s.char_indices().collect();
            let mut words: Vec<(usize, usize)> = Vec::new();
            let mut start: Option<usize> = None;
            for &(i, c) in &chars {
                if is_py_space(c) {
                    if let Some(a) = start.take() {
                        words.push((a, i));
                    }
                } else if start.is_none() {
                    start = Some(i);
                }
            }
            if let Some(a) = start {
                words.push((a, s.len()));
            }
            if words.len() <= limit.saturating_add(1) || limit == usize::MAX {
                return Ok(words.iter().map(|&(a, b)| s[a..b].to_string()).collect());
            }
            if from_right {
                let keep = &words[words.len() - limit..];
                let head = strip(&s[..keep[0].0], None, false, true);
                let mut out = vec![head.to_string()];
                out.extend(keep.iter().map(|&(a, b)| s[a..b].to_string()));
                Ok(out)
            } else {
                let mut out: Vec<String> = words[..limit].iter().map(|&(a, b)| s[a..b].to_string()).collect();
                out.push(strip(&s[words[limit].0..], None, true, false).to_string());
                Ok(out)
            }
        }
    }
}

/// `s.splitlines(keepends)` with Python's line boundaries.
pub fn splitlines(s: &str, keepends: bool) -> Vec<String> {
    let is_break = |c: char| {
        matches!(
            c,
            '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        )
    };
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if is_break(c) {
            let mut end = i + c.len_utf8();
            if c == '\r' {
                if let Some(&(_, '\n')) = it.peek() {
                    it.next();
                    end += 1;
                }
            }
            out.push(s[start..if keepends { end } else { i }].to_string());
            start = end;
        }
    }
    if start < s.len() {
        out.push(s[start..].to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_python_writes_them() {
        for (v, s) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e16, "1.5e+16"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123.456, "123.456"),
            (562_949_953_421_312.2, "562949953421312.2"), // halfway between .2 and .3: Python takes the even digit
            (-562_949_953_421_312.2, "-562949953421312.2"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
        ] {
            assert_eq!(float_repr(v), s, "{v}");
        }
    }

    #[test]
    fn split_like_python() {
        assert_eq!(split("  a b  c ", None, -1, false).unwrap(), ["a", "b", "c"]);
        assert_eq!(split("  a b  c ", None, 1, false).unwrap(), ["a", "b  c "]);
        assert_eq!(split("  a b  c ", None, 1, true).unwrap(), ["  a b", "c"]);
        assert_eq!(split("a,b,,c", Some(","), -1, false).unwrap(), ["a", "b", "", "c"]);
        assert_eq!(split("a,b,,c", Some(","), 1, true).unwrap(), ["a,b,", "c"]);
        assert_eq!(split("", None, -1, false).unwrap(), Vec::<String>::new());
        assert_eq!(split("a\u{1c}b", None, -1, false).unwrap(), ["a", "b"]);
    }

    #[test]
    fn splitlines_like_python() {
        assert_eq!(splitlines("a\r\nb\rc\n", false), ["a", "b", "c"]);
        assert_eq!(splitlines("a\r\nb\n\n", true), ["a\r\n", "b\n", "\n"]);
    }

    #[test]
    fn json_like_python() {
        let v =
            super::super::map([("b", Value::from(vec![Value::from(1), Value::from(2.5)])), ("a", Value::from("é\"<"))]);
        let o = JsonOptions::default();
        assert_eq!(dumps(&v, &o).unwrap(), r#"{"b": [1, 2.5], "a": "é\"<"}"#);
        let o = JsonOptions { ensure_ascii: true, indent: Some("  ".into()), sort_keys: true, ..Default::default() };
        assert_eq!(dumps(&v, &o).unwrap(), "{\n  \"a\": \"\\u00e9\\\"<\",\n  \"b\": [\n    1,\n    2.5\n  ]\n}");
        let empty = Value::from(Vec::<Value>::new());
        assert_eq!(dumps(&empty, &o).unwrap(), "[]");
    }

    #[test]
    fn repr_like_python() {
        let mut s = String::new();
        py_repr(&super::super::map([("a", Value::from("it's")), ("b", Value::from(()))]), &mut s).unwrap();
        assert_eq!(s, r#"{'a': "it's", 'b': None}"#);
    }
}
