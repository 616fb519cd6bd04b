//! JSON text read as tito_fast reads every record, whatever the door.
//!
//! One parser for score dumps, capture files, JSON text columns of Parquet
//! files and tool-call arguments. Where serde and Python's `json` module
//! differ it follows Python, and where Python's behaviour cannot be written
//! out again (lone surrogates) or ends a job (integers past 4,300 digits,
//! unbounded nesting) it is a bad record with its reason:
//!
//! - a repeated key: the last value wins, at the key's first position (as
//!   a Python dict built by `json.loads`);
//! - integers are exact at any size up to [`MAX_INT_DIGITS`] digits (never
//!   floats); more digits is an error, as in Python;
//! - a number with a fraction or an exponent is a float (`1e2` is 100.0,
//!   `1e400` is infinity, as `float()` gives); `-0` is the integer 0;
//! - `NaN`, `Infinity` and `-Infinity` are floats, as Python's `json` reads them;
//! - nesting deeper than [`MAX_DEPTH`] is an error;
//! - text must be UTF-8 (the first bad byte is named); a `\u` escape of a
//!   lone UTF-16 surrogate is an error; raw control characters in a string
//!   are an error (Python's strict mode);
//! - one UTF-8 byte-order mark before the value is skipped; anything but
//!   whitespace after the value is an error.

use rustc_hash::FxHashMap;

/// Nesting deeper than this (arrays and objects) is an error.
pub const MAX_DEPTH: usize = 256;
/// Python's `int()` refuses longer decimal literals (`sys.int_max_str_digits`).
pub const MAX_INT_DIGITS: usize = 4300;

/// A parsed JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer outside i64, as its decimal literal (sign included).
    BigInt(Box<str>),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    Map(Map),
    /// A list of plain ids below 2**32, read in one pass (only the fields a
    /// record reader asks for, at the top level).
    Ids(Vec<u32>),
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value as Python's `bool()` of it.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::BigInt(_) => true,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.is_empty(),
            Value::Ids(v) => !v.is_empty(),
        }
    }

    /// The Python type name of the value (for messages).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::List(_) | Value::Ids(_) => "list",
            Value::Map(_) => "dict",
        }
    }
}

/// An object's members in insertion order; a repeated key keeps its first
/// position and takes the last value (a Python dict).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Map {
    entries: Vec<(String, Value)>,
    /// Key -> position, built once an object is large enough to need it.
    index: Option<FxHashMap<String, usize>>,
}

const INDEX_FROM: usize = 16;

impl Map {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, key: &str) -> Option<usize> {
        match &self.index {
            Some(ix) => ix.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| k == key),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.position(key).map(|i| &self.entries[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Set `key` (last value wins, first position kept).
    pub fn insert(&mut self, key: String, value: Value) {
        if let Some(i) = self.position(&key) {
            self.entries[i].1 = value;
            return;
        }
        if let Some(ix) = &mut self.index {
            ix.insert(key.clone(), self.entries.len());
        } else if self.entries.len() + 1 >= INDEX_FROM {
            let mut ix: FxHashMap<String, usize> = FxHashMap::default();
            for (i, (k, _)) in self.entries.iter().enumerate() {
                ix.insert(k.clone(), i);
            }
            ix.insert(key.clone(), self.entries.len());
            self.index = Some(ix);
        }
        self.entries.push((key, value));
    }

    /// Remove `key` and return its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.position(key)?;
        let (_, v) = self.entries.remove(i);
        self.index = None;
        if self.entries.len() >= INDEX_FROM {
            self.index = Some(self.entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect());
        }
        Some(v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn into_entries(self) -> Vec<(String, Value)> {
        self.entries
    }
}

impl FromIterator<(String, Value)> for Map {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        let mut m = Map::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

/// Why a text is not a record's JSON, and where (a 0-based byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    pub what: String,
    pub at: usize,
    /// Where in the value, innermost first (`["content", "[1]", "messages"]`).
    pub path: Vec<String>,
}

impl JsonError {
    /// The message with its place as a 1-based column in characters, as
    /// Python's `json` names it.
    pub fn describe(&self, text: &[u8]) -> String {
        if self.what.starts_with("not UTF-8") {
            return format!("{} at byte {}", self.what, self.at);
        }
        let upto = &text[..self.at.min(text.len())];
        let col = String::from_utf8_lossy(upto).chars().count() + 1;
        match self.where_() {
            Some(w) => format!("invalid JSON: {} in {w} at column {col}", self.what),
            None => format!("invalid JSON: {} at column {col}", self.what),
        }
    }

    /// The bad-record code of this error (see `schema::BAD_RECORD_CODES`).
    pub fn code(&self) -> &'static str {
        if self.what.starts_with("not UTF-8") {
            "not_utf8"
        } else if self.what.starts_with("nested deeper") {
            "too_deep"
        } else if self.what.starts_with("an integer of") {
            "int_too_long"
        } else if self.what.contains("lone surrogate") {
            "lone_surrogate"
        } else {
            "invalid_json"
        }
    }

    /// The member the error is in (`messages[1].content`), when it is inside one.
    pub fn where_(&self) -> Option<String> {
        let mut out = String::new();
        for seg in self.path.iter().rev() {
            if !seg.starts_with('[') && !out.is_empty() {
                out.push('.');
            }
            out.push_str(seg);
        }
        (!out.is_empty()).then_some(out)
    }

    /// The error as inside member `name` (a record field whose JSON text it is).
    pub fn in_member(self, name: &str) -> Self {
        self.within(|| name.to_string())
    }

    fn within(mut self, seg: impl FnOnce() -> String) -> Self {
        if self.path.len() < 64 {
            self.path.push(seg());
        }
        self
    }
}

type Res<T> = Result<T, JsonError>;

fn err<T>(what: impl Into<String>, at: usize) -> Res<T> {
    Err(JsonError { what: what.into(), at, path: Vec::new() })
}

/// Parse one JSON value filling the whole of `text` (but whitespace and one
/// leading byte-order mark). `ids_keys`: top-level object members read as
/// [`Value::Ids`] when they are plain id lists.
pub fn parse(text: &[u8], ids_keys: &[&str]) -> Res<Value> {
    if let Err(e) = std::str::from_utf8(text) {
        let what = match e.error_len() {
            Some(_) => "not UTF-8: invalid start byte or continuation",
            None => "not UTF-8: unexpected end of data",
        };
        return err(what, e.valid_up_to());
    }
    let mut p = Parser { b: text, i: 0, ids_keys };
    if p.b.starts_with(b"\xef\xbb\xbf") {
        p.i = 3;
    }
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.b.len() {
        return err("extra data after the value", p.i);
    }
    Ok(v)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    ids_keys: &'a [&'a str],
}

impl Parser<'_> {
    #[inline]
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Res<Value> {
        match self.b.get(self.i) {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.word("true", Value::Bool(true)),
            Some(b'f') => self.word("false", Value::Bool(false)),
            Some(b'n') => self.word("null", Value::Null),
            Some(b'N') => self.word("NaN", Value::Float(f64::NAN)),
            Some(b'I') => self.word("Infinity", Value::Float(f64::INFINITY)),
            _ => err("expecting a value", self.i),
        }
    }

    fn word(&mut self, w: &str, v: Value) -> Res<Value> {
        if self.b[self.i..].starts_with(w.as_bytes()) {
            self.i += w.len();
            Ok(v)
        } else {
            err("expecting a value", self.i)
        }
    }

    fn object(&mut self, depth: usize) -> Res<Value> {
        if depth > MAX_DEPTH {
            return err(format!("nested deeper than {MAX_DEPTH} levels"), self.i);
        }
        self.i += 1;
        let mut m = Map::new();
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Value::Map(m));
        }
        loop {
            if self.b.get(self.i) != Some(&b'"') {
                return err("expecting a property name enclosed in double quotes", self.i);
            }
            let key = self.string()?;
            self.ws();
            if self.b.get(self.i) != Some(&b':') {
                return err("expecting ':' delimiter", self.i);
            }
            self.i += 1;
            self.ws();
            let v = if depth == 1 && self.ids_keys.contains(&key.as_str()) && self.b.get(self.i) == Some(&b'[') {
                match super::ids::ids_at(self.b, self.i) {
                    Ok((ids, end)) => {
                        self.i = end;
                        Value::Ids(ids)
                    }
                    Err(_) => self.value(depth).map_err(|e| e.within(|| key.clone()))?, // read as any value: the record's check says what is wrong
                }
            } else {
                self.value(depth).map_err(|e| e.within(|| key.clone()))?
            };
            m.insert(key, v);
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Map(m));
                }
                _ => return err("expecting ',' delimiter", self.i),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Res<Value> {
        if depth > MAX_DEPTH {
            return err(format!("nested deeper than {MAX_DEPTH} levels"), self.i);
        }
        self.i += 1;
        let mut out = Vec::new();
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Value::List(out));
        }
        loop {
            let k = out.len();
            out.push(self.value(depth).map_err(|e| e.within(|| format!("[{k}]")))?);
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::List(out));
                }
                _ => return err("expecting ',' delimiter", self.i),
            }
        }
    }

    fn number(&mut self) -> Res<Value> {
        let start = self.i;
        let b = self.b;
        if b[self.i] == b'-' {
            self.i += 1;
            if b[self.i..].starts_with(b"Infinity") {
                self.i += 8;
                return Ok(Value::Float(f64::NEG_INFINITY));
            }
        }
        let int_start = self.i;
        match b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while self.i < b.len() && b[self.i].is_ascii_digit() {
                    self.i += 1;
                }
            }
            _ => return err("expecting a value", start),
        }
        let int_end = self.i;
        let mut float = false;
        if b.get(self.i) == Some(&b'.') && b.get(self.i + 1).is_some_and(u8::is_ascii_digit) {
            float = true;
            self.i += 1;
            while self.i < b.len() && b[self.i].is_ascii_digit() {
                self.i += 1;
            }
        }
        if matches!(b.get(self.i), Some(b'e' | b'E')) {
            let mut j = self.i + 1;
            if matches!(b.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            if b.get(j).is_some_and(u8::is_ascii_digit) {
                float = true;
                self.i = j;
                while self.i < b.len() && b[self.i].is_ascii_digit() {
                    self.i += 1;
                }
            }
        }
        // SAFETY of the slice: ASCII only
        let lit = std::str::from_utf8(&b[start..self.i]).expect("ASCII");
        if float {
            return Ok(Value::Float(lit.parse::<f64>().unwrap_or(f64::NAN)));
        }
        if let Ok(v) = lit.parse::<i64>() {
            return Ok(Value::Int(v));
        }
        let digits = int_end - int_start;
        if digits > MAX_INT_DIGITS {
            return err(format!("an integer of {digits} digits (more than {MAX_INT_DIGITS})"), start);
        }
        Ok(Value::BigInt(lit.into()))
    }

    fn hex4(&self, at: usize) -> Res<u32> {
        let h =
            self.b.get(at..at + 4).ok_or(JsonError { what: "invalid \\uXXXX escape".into(), at, path: Vec::new() })?;
        let s = std::str::from_utf8(h).map_err(|_| JsonError {
            what: "invalid \\uXXXX escape".into(),
            at,
            path: Vec::new(),
        })?;
        if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return err("invalid \\uXXXX escape", at);
        }
        Ok(u32::from_str_radix(s, 16).expect("hex"))
    }

    /// The string opening at `b[i]` (a quote); `i` moves past its closing quote.
    fn string(&mut self) -> Res<String> {
        let b = self.b;
        let open = self.i;
        self.i += 1;
        let mut out: Option<String> = None; // only built when an escape is met
        let mut run = self.i;
        loop {
            // the next quote, backslash or control character
            let Some(k) = special_at(&b[self.i..]) else { return err("unterminated string starting", open) };
            self.i += k;
            let c = b[self.i];
            if c == b'"' {
                let piece = utf8(&b[run..self.i]);
                self.i += 1;
                return Ok(match out {
                    Some(mut s) => {
                        s.push_str(piece);
                        s
                    }
                    None => piece.to_string(),
                });
            }
            if c < 0x20 {
                return err("invalid control character in a string", self.i);
            }
            // an escape
            let s = out.get_or_insert_with(String::new);
            s.push_str(utf8(&b[run..self.i]));
            let at = self.i;
            match b.get(self.i + 1) {
                Some(b'"') => s.push('"'),
                Some(b'\\') => s.push('\\'),
                Some(b'/') => s.push('/'),
                Some(b'b') => s.push('\u{8}'),
                Some(b'f') => s.push('\u{c}'),
                Some(b'n') => s.push('\n'),
                Some(b'r') => s.push('\r'),
                Some(b't') => s.push('\t'),
                Some(b'u') => {
                    let hi = self.hex4(self.i + 2)?;
                    let mut code = hi;
                    if (0xD800..0xDC00).contains(&hi) {
                        let lo = if b.get(self.i + 6..self.i + 8) == Some(b"\\u") {
                            self.hex4(self.i + 8).ok()
                        } else {
                            None
                        };
                        match lo {
                            Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                                code = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                                self.i += 6;
                            }
                            _ => return err("text that is not valid Unicode (a lone surrogate)", at),
                        }
                    } else if (0xDC00..0xE000).contains(&hi) {
                        return err("text that is not valid Unicode (a lone surrogate)", at);
                    }
                    s.push(char::from_u32(code).expect("a scalar value"));
                    self.i += 4;
                }
                _ => return err("invalid \\escape", at),
            }
            self.i += 2;
            run = self.i;
        }
    }
}

/// A piece of the text between two ASCII bytes of it.
#[inline]
fn utf8(piece: &[u8]) -> &str {
    // SAFETY: `parse` checked the whole text is UTF-8, and every piece it
    // cuts starts and ends at an ASCII byte (a quote, a backslash, an escape's
    // end), which never splits a multi-byte character.
    unsafe { std::str::from_utf8_unchecked(piece) }
}

/// Where the first `"`, `\\` or control character (below 0x20) of `b` is,
/// eight bytes at a time.
#[inline]
fn special_at(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while i + 8 <= b.len() {
        let w = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH; // exact at the lowest flagged byte
        let found = zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGH);
        if found != 0 {
            return Some(i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    b[i..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|k| i + k)
}

/// `value` as JSON text in Python's `json.dumps(value, ensure_ascii=False)`
/// form (", " and ": " separators); non-finite floats as `NaN`/`Infinity`.
pub fn dumps(v: &Value) -> String {
    let mut out = String::new();
    write_json(v, &mut out);
    out
}

fn write_json(v: &Value, out: &mut String) {
    use std::fmt::Write;
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::BigInt(s) => out.push_str(s),
        Value::Float(f) if f.is_nan() => out.push_str("NaN"),
        Value::Float(f) if f.is_infinite() => out.push_str(if *f < 0.0 { "-Infinity" } else { "Infinity" }),
        Value::Float(f) => out.push_str(&crate::template::pyfmt::float_repr(*f)),
        Value::Str(s) => write_str(s, out),
        Value::List(items) => {
            out.push('[');
            for (k, item) in items.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Value::Ids(ids) => {
            out.push('[');
            for (k, id) in ids.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{id}");
            }
            out.push(']');
        }
        Value::Map(m) => {
            out.push('{');
            for (k, (key, item)) in m.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                write_str(key, out);
                out.push_str(": ");
                write_json(item, out);
            }
            out.push('}');
        }
    }
}

fn write_str(s: &str, out: &mut String) {
    crate::template::pyfmt::json_str(s, false, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Res<Value> {
        parse(s.as_bytes(), &[])
    }

    #[test]
    fn python_json_semantics() {
        // last duplicate wins at the first position
        let Value::Map(m) = p(r#"{"a": 1, "b": 2, "a": 3}"#).unwrap() else { panic!() };
        assert_eq!(
            m.iter().map(|(k, v)| (k.as_str(), v.clone())).collect::<Vec<_>>(),
            [("a", Value::Int(3)), ("b", Value::Int(2))]
        );
        assert_eq!(
            p("123456789012345678901234567890").unwrap(),
            Value::BigInt("123456789012345678901234567890".into())
        );
        assert_eq!(p("-0").unwrap(), Value::Int(0));
        assert_eq!(p("1e2").unwrap(), Value::Float(100.0));
        assert_eq!(p("-1e400").unwrap(), Value::Float(f64::NEG_INFINITY));
        assert!(matches!(p("NaN").unwrap(), Value::Float(f) if f.is_nan()));
        assert_eq!(p("-Infinity").unwrap(), Value::Float(f64::NEG_INFINITY));
        assert_eq!(p("\u{feff} {} ").unwrap(), Value::Map(Map::new()));
        assert_eq!(p(r#""\ud83d\ude00 \u00e9\/""#).unwrap(), Value::Str("😀 é/".into()));
        assert_eq!(p("[1,\t2]\r\n").unwrap(), Value::List(vec![Value::Int(1), Value::Int(2)]));
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(p(&deep).is_ok());
        let deeper = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(p(&deeper).unwrap_err().what.contains("nested deeper"));
        assert!(p(&"9".repeat(MAX_INT_DIGITS)).is_ok());
        assert!(p(&"9".repeat(MAX_INT_DIGITS + 1)).unwrap_err().what.contains("digits"));
        for bad in [
            "01",
            "1.",
            ".5",
            "[1,]",
            "{\"a\":1,}",
            "{} x",
            "\"\\ud800\"",
            "\"\\udc00x\"",
            "\"a\u{1}\"",
            "[",
            "tru",
            "\"\\x\"",
            "+1",
            "{'a': 1}",
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
        assert!(parse(b"{\"a\": \"\xff\"}", &[]).unwrap_err().what.starts_with("not UTF-8"));
    }

    #[test]
    fn ids_fast_path_and_fallback() {
        let Value::Map(m) = parse(br#"{"token_ids": [1, 2], "x": [1, 2]}"#, &["token_ids"]).unwrap() else { panic!() };
        assert_eq!(m.get("token_ids"), Some(&Value::Ids(vec![1, 2])));
        assert_eq!(m.get("x"), Some(&Value::List(vec![Value::Int(1), Value::Int(2)])));
        let Value::Map(m) = parse(br#"{"token_ids": [1, 2.5], "token_ids": [3]}"#, &["token_ids"]).unwrap() else {
            panic!()
        };
        assert_eq!(m.get("token_ids"), Some(&Value::Ids(vec![3])));
        let Value::Map(m) = parse(br#"{"token_ids": [1, -2]}"#, &["token_ids"]).unwrap() else { panic!() };
        assert_eq!(m.get("token_ids"), Some(&Value::List(vec![Value::Int(1), Value::Int(-2)])));
        let Value::Map(m) = parse(br#"{"token_ids": [1], "token_ids": null}"#, &["token_ids"]).unwrap() else {
            panic!()
        };
        assert_eq!(m.get("token_ids"), Some(&Value::Null));
    }

    #[test]
    fn special_bytes_found_as_one_at_a_time() {
        let slow = |b: &[u8]| b.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
        let mut seed = 7u64;
        for len in 0..40 {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        [b'a', b'"', b'\\', 0x1f, 0x20, 0x7f, 0x80, 0xff, 0x5b, 0x21, 0x01, 0x00]
                            [(seed >> 33) as usize % 12]
                    })
                    .collect();
                assert_eq!(special_at(&bytes), slow(&bytes), "{bytes:?}");
            }
        }
    }

    #[test]
    fn dumps_as_python() {
        let v = p(r#"{"a": [1, 2.5, null, true, "x\"y\n"], "b": {}, "c": 1e400, "d": 123456789012345678901234567890}"#)
            .unwrap();
        assert_eq!(
            dumps(&v),
            r#"{"a": [1, 2.5, null, true, "x\"y\n"], "b": {}, "c": Infinity, "d": 123456789012345678901234567890}"#
        );
        let mut big = Map::new();
        for k in 0..40 {
            big.insert(format!("k{}", k % 20), Value::Int(k));
        }
        assert_eq!(big.len(), 20);
        assert_eq!(big.get("k3"), Some(&Value::Int(23)));
    }
}
