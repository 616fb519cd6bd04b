//! The two record kinds and their rules, written once: a score dump's
//! session record and a capture file's call record. A JSONL line, a Parquet
//! row (its values handed over as [`Value`]s) or a Python dict all become
//! the same typed record here, or the same reason why not.

use super::json::{self, Map, Value};

/// The top-level fields read as id lists in one pass.
pub const DUMP_IDS: &[&str] = &["token_ids"];
pub const CALL_IDS: &[&str] = &["prompt_ids", "completion_ids"];

/// The largest id.
pub const MAX_ID: u64 = u32::MAX as u64;

/// Why a record cannot be used: a stable code (one of [`BAD_RECORD_CODES`]),
/// the reason in words, and its session id when it has a usable one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad {
    pub code: &'static str,
    pub reason: String,
    pub session_id: Option<String>,
}

/// Every code a bad record can carry, with its meaning: the catalogue
/// (`tito_fast.errors.BAD_RECORD_CODES` exports it).
pub const BAD_RECORD_CODES: &[(&str, &str)] = &[
    ("not_utf8", "the line is not UTF-8 (the first bad byte is named)"),
    ("invalid_json", "the line is not one JSON value (the parser's reason, member and column)"),
    ("too_deep", "JSON nested deeper than 256 levels"),
    ("int_too_long", "an integer of more than 4,300 digits"),
    ("lone_surrogate", "a string holding a lone UTF-16 surrogate (not valid Unicode)"),
    ("not_an_object", "the record is not a JSON object"),
    ("missing_field", "a required field is missing or null"),
    ("bad_field", "a field of the wrong type or shape (session_id, family, messages, tools, finish_reason, call_index)"),
    ("bad_ids", "an id list that is not a list of ints from 0 to 4294967295 (or an empty prompt or session)"),
    ("bad_logprobs", "completion_logprobs that are not one finite float32 number (or null) per completion id"),
    ("too_large", "a record over the size limit (MAX_RECORD_BYTES), read no further"),
    ("truncated", "the file ends early or is corrupt (a cut gzip stream); the records before it are kept"),
    ("repeated_call", "a call_index that repeats an earlier call of its session"),
    ("unscorable", "a record that reads well but cannot be scored (another family, an id outside the vocabulary, a template that refuses it)"),
    ("template_limit", "the chat template passed a limit of the renderer on this record (fuel, recursion, output size, range size; docs/templates.md)"),
    ("internal", "an unexpected error scoring the record (a bug: please report it)"),
];

impl Bad {
    fn new(code: &'static str, reason: impl Into<String>, session_id: Option<String>) -> Self {
        Bad { code, reason: reason.into(), session_id }
    }

    /// A bad record for a text that is not JSON.
    pub fn json(e: &json::JsonError, text: &[u8]) -> Self {
        Bad::new(e.code(), e.describe(text), None)
    }
}

type Res<T> = Result<T, String>;

/// One session of a score dump.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpRecord {
    /// None: the record has none (the caller numbers it).
    pub session_id: Option<String>,
    pub family: Option<String>,
    /// Each an object with a string `role`.
    pub messages: Vec<Map>,
    pub tools: Option<Vec<Value>>,
    pub token_ids: Vec<u32>,
    /// Non-finite floats written as the strings "NaN", "Infinity", "-Infinity".
    pub metadata: Option<Value>,
}

/// One captured LLM call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    pub session_id: String,
    pub call_index: Option<u64>,
    pub prompt_ids: Vec<u32>,
    pub completion_ids: Vec<u32>,
    /// One per completion id (NaN for a null).
    pub completion_logprobs: Option<Vec<f32>>,
    pub finish_reason: Option<String>,
    pub messages: Option<Vec<Map>>,
    pub tools: Option<Vec<Value>>,
    pub response: Option<Value>,
    pub metadata: Option<Value>,
}

/// Python's `repr` of a scalar, a short form of anything else (for messages).
pub fn short_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Int(i) => i.to_string(),
        Value::BigInt(s) if s.len() <= 40 => s.to_string(),
        Value::BigInt(s) => format!("an integer of {} digits", s.trim_start_matches('-').len()),
        Value::Float(f) => crate::template::pyfmt::float_repr(*f),
        Value::Str(s) => {
            let mut out = String::new();
            let short: String = s.chars().take(40).collect();
            if crate::template::pyfmt::str_repr(&short, &mut out).is_err() {
                out = json::dumps(&Value::Str(short));
            }
            if s.chars().count() > 40 {
                out.push_str("...");
            }
            out
        }
        Value::List(_) | Value::Ids(_) => "a list".into(),
        Value::Map(_) => "a dict".into(),
    }
}

/// An id list: `name` must be a list of ints in [0, 2**32-1].
pub fn ids(v: Value, name: &str, empty_ok: bool) -> Res<Vec<u32>> {
    let out = match v {
        Value::Ids(ids) => ids,
        Value::List(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (k, item) in items.iter().enumerate() {
                match item {
                    Value::Int(i) if (0..=MAX_ID as i64).contains(i) => out.push(*i as u32),
                    Value::Int(_) | Value::BigInt(_) => {
                        return Err(format!("{name}[{k}] = {} is out of range", short_repr(item)))
                    }
                    other => return Err(format!("{name}[{k}] is not an int: {}", short_repr(other))),
                }
            }
            out
        }
        other => return Err(format!("{name:?} must be a list of ints, got {}", other.type_name()).replace('"', "'")),
    };
    if out.is_empty() && !empty_ok {
        return Err(format!("'{name}' is empty"));
    }
    Ok(out)
}

/// A session id: a string, or an int written in decimal.
fn session_id(v: &Value) -> Res<String> {
    match v {
        Value::Str(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        Value::BigInt(s) => Ok(s.to_string()),
        other => Err(format!("'session_id' must be a string or an int, got {}", other.type_name())),
    }
}

/// Why a JSON text column's value is not JSON (the code and the reason).
struct TextError(&'static str, String);

impl TextError {
    fn bad(self, session_id: &Option<String>) -> Bad {
        Bad::new(self.0, self.1, session_id.clone())
    }
}

/// `v`, or the value of its JSON text when `json_text` and `v` is a string
/// (a Parquet text column).
fn maybe_json(v: Value, json_text: bool, name: &str) -> Result<Value, TextError> {
    match v {
        // said as of the line's field (`in metadata.x`), the column counted in the field's text
        Value::Str(s) if json_text => json::parse(s.as_bytes(), &[]).map_err(|e| {
            let e = e.in_member(name);
            TextError(e.code(), e.describe(s.as_bytes()))
        }),
        v => Ok(v),
    }
}

fn messages(v: Value) -> Res<Vec<Map>> {
    let Value::List(items) = v else { return Err("'messages' must be a non-empty list".into()) };
    if items.is_empty() {
        return Err("'messages' must be a non-empty list".into());
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, m) in items.into_iter().enumerate() {
        match m {
            Value::Map(m) if matches!(m.get("role"), Some(Value::Str(_))) => out.push(m),
            _ => return Err(format!("messages[{i}] must be an object with a string 'role'")),
        }
    }
    Ok(out)
}

fn tools(v: Value) -> Res<Option<Vec<Value>>> {
    match v {
        Value::Null => Ok(None),
        Value::List(items) => Ok(Some(items)),
        other => Err(format!("'tools' must be a list or null, got {}", other.type_name())),
    }
}

/// Non-finite floats as the strings JSON writers use, so the value can be
/// written out as JSON (`NaN` is not JSON).
pub fn json_safe(v: Value) -> Value {
    match v {
        Value::Float(f) if f.is_nan() => Value::Str("NaN".into()),
        Value::Float(f) if f.is_infinite() => Value::Str(if f < 0.0 { "-Infinity" } else { "Infinity" }.into()),
        Value::List(items) => Value::List(items.into_iter().map(json_safe).collect()),
        Value::Map(m) => Value::Map(m.into_entries().into_iter().map(|(k, v)| (k, json_safe(v))).collect()),
        v => v,
    }
}

fn take(obj: &mut Map, key: &str) -> Value {
    obj.remove(key).unwrap_or(Value::Null)
}

fn not_object(v: &Value, what: &str) -> Bad {
    Bad::new("not_an_object", format!("{what} must be a JSON object, got {}", v.type_name()), None)
}

/// A score dump's record from its parsed value. `json_text`: messages,
/// tools and metadata may be JSON text (Parquet string columns).
pub fn dump_record(v: Value, json_text: bool) -> Result<DumpRecord, Bad> {
    let Value::Map(mut obj) = v else { return Err(not_object(&v, "a record")) };
    let sid = match take(&mut obj, "session_id") {
        Value::Null => None,
        v => Some(session_id(&v).map_err(|reason| Bad::new("bad_field", reason, None))?),
    };
    let bad = |code: &'static str, reason: String| Bad::new(code, reason, sid.clone());
    let family = match take(&mut obj, "family") {
        Value::Null => None,
        Value::Str(s) => Some(s),
        other => return Err(bad("bad_field", format!("'family' must be a string, got {}", other.type_name()))),
    };
    let raw_messages = take(&mut obj, "messages");
    let raw_ids = take(&mut obj, "token_ids");
    for (key, v) in [("messages", &raw_messages), ("token_ids", &raw_ids)] {
        if v.is_null() {
            return Err(bad("missing_field", format!("missing field '{key}'")));
        }
    }
    let messages = messages(maybe_json(raw_messages, json_text, "messages").map_err(|e| e.bad(&sid))?)
        .map_err(|r| bad("bad_field", r))?;
    let tools = tools(maybe_json(take(&mut obj, "tools"), json_text, "tools").map_err(|e| e.bad(&sid))?)
        .map_err(|r| bad("bad_field", r))?;
    let token_ids = ids(raw_ids, "token_ids", false).map_err(|r| bad("bad_ids", r))?;
    let metadata = match maybe_json(take(&mut obj, "metadata"), json_text, "metadata").map_err(|e| e.bad(&sid))? {
        Value::Null => None,
        m => Some(json_safe(m)),
    };
    Ok(DumpRecord { session_id: sid, family, messages, tools, token_ids, metadata })
}

/// A score dump's record from one JSONL line.
pub fn dump_line(line: &[u8]) -> Result<DumpRecord, Bad> {
    let v = json::parse(line, DUMP_IDS).map_err(|e| Bad::json(&e, line))?;
    dump_record(v, false)
}

fn logprobs(v: Value, n: usize) -> Res<Option<Vec<f32>>> {
    let items = match v {
        Value::Null => return Ok(None),
        Value::List(items) => items,
        Value::Ids(ids) => ids.into_iter().map(|i| Value::Int(i64::from(i))).collect(),
        other => return Err(format!("'completion_logprobs' must be a list of floats, got {}", other.type_name())),
    };
    if items.len() != n {
        return Err(format!("'completion_logprobs' has {} values for {n} completion ids", items.len()));
    }
    let mut out = Vec::with_capacity(n);
    for (k, item) in items.iter().enumerate() {
        let f = match item {
            Value::Null => f64::NAN,
            Value::Int(i) => *i as f64,
            Value::Float(f) if f.is_finite() => *f,
            Value::Float(_) => {
                return Err(format!("completion_logprobs[{k}] is {}, not a finite number", short_repr(item)))
            }
            other => return Err(format!("completion_logprobs[{k}] is not a number: {}", short_repr(other))),
        };
        if f.is_finite() && f.abs() > f64::from(f32::MAX) {
            return Err(format!("completion_logprobs[{k}] = {} is outside float32's range", short_repr(item)));
        }
        out.push(f as f32);
    }
    Ok(Some(out))
}

/// A capture file's record from its parsed value (`json_text`: messages,
/// tools may be JSON text).
pub fn call_record(v: Value, json_text: bool) -> Result<CallRecord, Bad> {
    let Value::Map(mut obj) = v else { return Err(not_object(&v, "a call")) };
    let sid = match take(&mut obj, "session_id") {
        Value::Null => return Err(Bad::new("missing_field", "missing field 'session_id'", None)),
        v => session_id(&v).map_err(|reason| Bad::new("bad_field", reason, None))?,
    };
    let some_sid = Some(sid.clone());
    let bad = |code: &'static str, reason: String| Bad::new(code, reason, Some(sid.clone()));
    let call_index = match take(&mut obj, "call_index") {
        Value::Null => None,
        Value::Int(i) if i >= 0 => Some(i as u64),
        other => {
            return Err(bad(
                "bad_field",
                format!("'call_index' must be a non-negative int below 2**63, got {}", short_repr(&other)),
            ))
        }
    };
    let raw_prompt = take(&mut obj, "prompt_ids");
    let raw_completion = take(&mut obj, "completion_ids");
    for (key, v) in [("prompt_ids", &raw_prompt), ("completion_ids", &raw_completion)] {
        if v.is_null() {
            return Err(bad("missing_field", format!("missing field '{key}'")));
        }
    }
    let prompt_ids = ids(raw_prompt, "prompt_ids", false).map_err(|r| bad("bad_ids", r))?;
    let completion_ids = ids(raw_completion, "completion_ids", true).map_err(|r| bad("bad_ids", r))?;
    let messages = match maybe_json(take(&mut obj, "messages"), json_text, "messages").map_err(|e| e.bad(&some_sid))? {
        Value::Null => None,
        Value::List(items) => {
            let mut out = Vec::with_capacity(items.len());
            for m in items {
                match m {
                    Value::Map(m) => out.push(m),
                    _ => return Err(bad("bad_field", "'messages' must be a list of objects".into())),
                }
            }
            Some(out)
        }
        _ => return Err(bad("bad_field", "'messages' must be a list of objects".into())),
    };
    let tools = tools(maybe_json(take(&mut obj, "tools"), json_text, "tools").map_err(|e| e.bad(&some_sid))?)
        .map_err(|r| bad("bad_field", r))?;
    let completion_logprobs =
        logprobs(take(&mut obj, "completion_logprobs"), completion_ids.len()).map_err(|r| bad("bad_logprobs", r))?;
    let finish_reason = match take(&mut obj, "finish_reason") {
        Value::Null => None,
        Value::Str(s) => Some(s),
        other => return Err(bad("bad_field", format!("'finish_reason' must be a string, got {}", other.type_name()))),
    };
    let response = match take(&mut obj, "response") {
        Value::Null => None,
        v => Some(json_safe(v)),
    };
    let metadata = match maybe_json(take(&mut obj, "metadata"), json_text, "metadata").map_err(|e| e.bad(&some_sid))? {
        Value::Null => None,
        m => Some(json_safe(m)),
    };
    Ok(CallRecord {
        session_id: sid,
        call_index,
        prompt_ids,
        completion_ids,
        completion_logprobs,
        finish_reason,
        messages,
        tools,
        response,
        metadata,
    })
}

/// A capture file's record from one JSONL line.
pub fn call_line(line: &[u8]) -> Result<CallRecord, Bad> {
    let v = json::parse(line, CALL_IDS).map_err(|e| Bad::json(&e, line))?;
    call_record(v, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason<T: std::fmt::Debug>(r: Result<T, Bad>) -> String {
        r.unwrap_err().reason
    }

    #[test]
    fn dump_records() {
        let r = dump_line(br#"{"session_id": 7, "messages": [{"role": "user", "content": "hi"}], "token_ids": [1, 2], "token_ids": [3], "metadata": {"x": NaN}}"#).unwrap();
        assert_eq!(r.session_id.as_deref(), Some("7"));
        assert_eq!(r.token_ids, [3]);
        assert_eq!(r.metadata.unwrap(), json::parse(br#"{"x": "NaN"}"#, &[]).unwrap());
        let first_wins_not = dump_line(br#"{"messages": [{"role": "user"}], "token_ids": [1], "token_ids": null}"#);
        assert_eq!(reason(first_wins_not), "missing field 'token_ids'");
        assert_eq!(reason(dump_line(br#"[1]"#)), "a record must be a JSON object, got list");
        assert_eq!(reason(dump_line(br#"{"messages": [], "token_ids": [1]}"#)), "'messages' must be a non-empty list");
        assert_eq!(
            reason(dump_line(br#"{"messages": [{"role": 1}], "token_ids": [1]}"#)),
            "messages[0] must be an object with a string 'role'"
        );
        assert_eq!(
            reason(dump_line(br#"{"messages": [{"role": "u"}], "token_ids": [1, true]}"#)),
            "token_ids[1] is not an int: True"
        );
        assert_eq!(
            reason(dump_line(br#"{"messages": [{"role": "u"}], "token_ids": [1, -1]}"#)),
            "token_ids[1] = -1 is out of range"
        );
        assert_eq!(reason(dump_line(br#"{"messages": [{"role": "u"}], "token_ids": []}"#)), "'token_ids' is empty");
        assert_eq!(
            reason(dump_line(br#"{"messages": [{"role": "u"}], "token_ids": "1"}"#)),
            "'token_ids' must be a list of ints, got str"
        );
        assert!(reason(dump_line(br#"{"messages": [{"role": "u"}], "token_ids": [1]} x"#))
            .starts_with("invalid JSON: extra data"));
        let pq = Value::Map(
            [
                ("messages".to_string(), Value::Str(r#"[{"role": "user", "content": "a"}]"#.into())),
                ("token_ids".to_string(), Value::List(vec![Value::Int(5)])),
            ]
            .into_iter()
            .collect(),
        );
        assert_eq!(dump_record(pq, true).unwrap().messages.len(), 1);
    }

    #[test]
    fn call_records() {
        let c = call_line(br#"{"session_id": "s", "call_index": 2, "prompt_ids": [1], "completion_ids": [], "completion_logprobs": []}"#).unwrap();
        assert_eq!((c.call_index, c.completion_ids.len()), (Some(2), 0));
        let base = r#""session_id": "s", "prompt_ids": [1], "completion_ids": [2]"#;
        let line = |extra: &str| format!("{{{base}, {extra}}}");
        assert!(reason(call_line(line(r#""call_index": 1180591620717411303424"#).as_bytes())).contains("below 2**63"));
        assert!(
            reason(call_line(line(r#""completion_logprobs": [-1e400]"#).as_bytes())).contains("not a finite number")
        );
        assert!(reason(call_line(line(r#""completion_logprobs": [-1e39]"#).as_bytes())).contains("float32"));
        assert!(reason(call_line(line(r#""completion_logprobs": ["1"]"#).as_bytes())).contains("not a number"));
        assert!(reason(call_line(line(r#""completion_logprobs": [true]"#).as_bytes())).contains("not a number"));
        let lp = call_line(line(r#""completion_logprobs": [null]"#).as_bytes()).unwrap().completion_logprobs.unwrap();
        assert!(lp[0].is_nan());
        assert_eq!(reason(call_line(br#"{"prompt_ids": [1]}"#)), "missing field 'session_id'");
        assert!(reason(call_line(line(r#""session_id": [1]"#).as_bytes()))
            .contains("'session_id' must be a string or an int"));
    }
}
