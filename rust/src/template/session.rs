//! The session check of one dump line, in Rust: parse the JSON record,
//! validate it, normalise its messages and tools as the Python renderer does
//! (`tito_fast.chat.render`, `tito_fast.chat.tools`), render the chat
//! template, encode the text and compare the ids with the session's.
//!
//! It is the fast path of `tito-fast score`: a line it cannot take on
//! exactly as the Python path would (anything unusual in the record, a
//! render or an encoding it does not cover) comes back as
//! [`LineOutcome::Python`], and the Python path scores that line as before.
//! So the results are the Python path's by construction, and the two agree
//! on every line this module accepts (tested on every example and fixture
//! dump).

use minijinja::Value;
use serde_json::Value as Json;

use super::{map, ChatTemplate};
use crate::encoder::Encoder;
use crate::merge::trimmed_len;

/// The tool canonicalisation policies of `tito_fast.chat.tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolPolicy {
    Sglang,
    SglangLegacy,
    None,
}

impl ToolPolicy {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "sglang" => Some(ToolPolicy::Sglang),
            "sglang-legacy" => Some(ToolPolicy::SglangLegacy),
            "none" => Some(ToolPolicy::None),
            _ => None,
        }
    }
}

/// What the check needs besides the template and the encoder.
#[derive(Debug, Clone)]
pub struct CheckSetup {
    /// Template variables (special tokens, template kwargs).
    pub variables: Vec<(String, Value)>,
    pub policy: ToolPolicy,
    /// Ids stripped from both tails before comparing.
    pub trim: Vec<u32>,
    pub vocab_size: u32,
    /// The scorer's family: a record naming another goes to Python (a bad record there).
    pub family: String,
}

/// The outcome of one line.
#[derive(Debug, Clone, PartialEq)]
pub enum LineOutcome {
    /// Score this line on the Python path (and why, for debugging).
    Python(&'static str),
    /// The session's ids equal the fresh render's (after the trailing trim):
    /// no mismatches, nothing to diagnose.
    Clean { session_id: String, turns: usize, num_ids: usize, metadata: Option<String> },
    /// The ids differ: the render, its ids and the session's ids, for the
    /// Python diagnosis, with what it needs of the record.
    Differs { text: String, expected: Vec<u32>, actual: Vec<u32>, record: Option<Differing> },
}

type Step<T> = Result<T, &'static str>;

/// What the diagnosis of a differing session needs of its record besides
/// the ids, so the Python side need not parse the line again. None in
/// [`LineOutcome::Differs`] when a message's texts are not plain strings
/// (then Python reads the record).
#[derive(Debug, Clone, PartialEq)]
pub struct Differing {
    pub session_id: String,
    pub turns: usize,
    pub metadata: Option<String>,
    /// Each message's role.
    pub roles: Vec<String>,
    /// Where each message's own text was found in the render, in bytes, as
    /// `tito_fast.score.scorer` looks it up (`_probes`): its stripped
    /// content (the first 200 chars), else its stripped reasoning, else its
    /// first tool call's name, each searched after the previous message's.
    pub found: Vec<Option<(usize, usize)>>,
}

/// The texts of a message its render holds verbatim, in the order they are
/// tried (`_probes` in `tito_fast.score.scorer`); None when Python would
/// turn a non-string into text for one (then Python looks them up).
fn probes(m: &serde_json::Map<String, Json>) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let content = match m.get("content") {
        Some(Json::Array(parts)) => {
            let mut joined = String::new();
            for p in parts {
                if let Json::Object(p) = p {
                    match p.get("text") {
                        None => {}
                        Some(Json::String(t)) => joined.push_str(t),
                        Some(_) => return None,
                    }
                }
            }
            Some(joined)
        }
        Some(Json::String(c)) => Some(c.clone()),
        _ => None,
    };
    let reasoning = match m.get("reasoning_content") {
        Some(Json::String(r)) => Some(r.clone()),
        _ => None,
    };
    for value in [content, reasoning].into_iter().flatten() {
        let stripped = super::pyfmt::strip(&value, None, true, true);
        if !stripped.is_empty() {
            out.push(match stripped.char_indices().nth(200) {
                Some((cut, _)) => stripped[..cut].to_string(),
                None => stripped.to_string(),
            });
        }
    }
    match m.get("tool_calls") {
        None | Some(Json::Null) => {}
        Some(Json::Array(calls)) => {
            for call in calls {
                let name = match call {
                    Json::Object(c) => match c.get("function") {
                        Some(Json::Object(f)) => f.get("name"),
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(Json::String(n)) = name {
                    if !n.is_empty() {
                        out.push(n.clone());
                        break;
                    }
                }
            }
        }
        Some(v) if !truthy(v) => {}
        Some(_) => return None, // Python would iterate a dict's keys or a string's chars
    }
    Some(out)
}

/// Each message's text in `text`, searched in order after the previous one found.
fn find_messages(msgs: &[Json], text: &str) -> Option<Vec<Option<(usize, usize)>>> {
    let mut cursor = 0;
    let mut out = Vec::with_capacity(msgs.len());
    for m in msgs {
        let Json::Object(m) = m else { return None };
        let mut hit = None;
        for probe in probes(m)? {
            if let Some(at) = text[cursor..].find(probe.as_str()) {
                hit = Some((cursor + at, cursor + at + probe.len()));
                cursor += at + probe.len();
                break;
            }
        }
        out.push(hit);
    }
    Some(out)
}

/// A JSON value as the template value Python's `json.loads` would give.
fn to_value(v: &Json) -> Step<Value> {
    Ok(match v {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => number(n)?,
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(items) => Value::from(items.iter().map(to_value).collect::<Step<Vec<_>>>()?),
        Json::Object(obj) => map(obj.iter().map(|(k, v)| Ok((k.as_str(), to_value(v)?))).collect::<Step<Vec<_>>>()?),
    })
}

fn number(n: &serde_json::Number) -> Step<Value> {
    let lit = n.as_str();
    if lit.contains(['.', 'e', 'E']) {
        return lit.parse::<f64>().map(Value::from).map_err(|_| "a float literal");
    }
    if let Ok(v) = lit.parse::<i64>() {
        return Ok(Value::from(v));
    }
    lit.parse::<i128>().map(Value::from).map_err(|_| "an integer beyond 128 bits")
}

/// A truthy JSON value, as Python's `bool()` of the parsed value.
fn truthy(v: &Json) -> bool {
    match v {
        Json::Null => false,
        Json::Bool(b) => *b,
        Json::Number(n) => {
            let lit = n.as_str();
            lit.parse::<f64>().map(|f| f != 0.0).unwrap_or(true)
        }
        Json::String(s) => !s.is_empty(),
        Json::Array(a) => !a.is_empty(),
        Json::Object(o) => !o.is_empty(),
    }
}

/// One message as the Python renderer hands it to the template:
/// `normalize_messages` (assistant `content: None` -> "", tool-call arguments
/// parsed), `_drop_none`, `_alias_reasoning`.
fn message(m: &serde_json::Map<String, Json>) -> Step<Value> {
    let assistant = m.get("role").and_then(Json::as_str) == Some("assistant");
    let mut pairs: Vec<(String, Value)> = Vec::with_capacity(m.len() + 2);
    for (k, v) in m {
        let value = match (k.as_str(), v) {
            ("content", Json::Null) if assistant => Value::from(""),
            (_, Json::Null) => continue, // None-valued keys are dropped
            ("tool_calls", Json::Array(calls)) if assistant => tool_calls(calls)?,
            _ => to_value(v)?,
        };
        pairs.push((k.clone(), value));
    }
    if assistant && !m.contains_key("content") {
        pairs.push(("content".into(), Value::from("")));
    }
    // Reasoning under every name: the first non-None of these.
    let reasoning = ["reasoning_content", "thinking", "reasoning"]
        .iter()
        .find_map(|k| m.get(*k).filter(|v| !v.is_null()))
        .map(to_value)
        .transpose()?;
    if let Some(r) = reasoning {
        if !pairs.iter().any(|(k, _)| k == "thinking") {
            pairs.insert(0, ("thinking".into(), r.clone()));
        }
        match pairs.iter_mut().find(|(k, _)| k == "reasoning_content") {
            Some(slot) => slot.1 = r,
            None => pairs.push(("reasoning_content".into(), r)),
        }
    }
    Ok(map(pairs))
}

fn tool_calls(calls: &[Json]) -> Step<Value> {
    let mut out = Vec::with_capacity(calls.len());
    for call in calls {
        let Json::Object(c) = call else {
            out.push(to_value(call)?);
            continue;
        };
        let mut pairs = Vec::with_capacity(c.len());
        for (k, v) in c {
            let value = match (k.as_str(), v) {
                ("function", Json::Object(f)) if !f.is_empty() => {
                    let mut fp = Vec::with_capacity(f.len());
                    for (fk, fv) in f {
                        let val = match (fk.as_str(), fv) {
                            ("arguments", Json::String(s)) => {
                                let parsed: Json =
                                    serde_json::from_str(s).map_err(|_| "tool-call arguments that are not JSON")?;
                                to_value(&parsed)?
                            }
                            _ => to_value(fv)?,
                        };
                        fp.push((fk.as_str(), val));
                    }
                    map(fp)
                }
                ("function", f) if truthy(f) => return Err("a tool call whose function is not an object"),
                _ => to_value(v)?,
            };
            pairs.push((k.as_str(), value));
        }
        out.push(map(pairs));
    }
    Ok(Value::from(out))
}

/// `canonical_tools(tools, policy)`.
fn tools(list: &[Json], policy: ToolPolicy) -> Step<Value> {
    if list.is_empty() {
        return Ok(Value::from(()));
    }
    let mut out = Vec::with_capacity(list.len());
    for tool in list {
        let Json::Object(t) = tool else { return Err("a tool that is not an object") };
        let (wrapped_type, func, tool_defer) = match t.get("function") {
            Some(f) => (t.get("type"), f, t.get("defer_loading")),
            None => (None, tool, None),
        };
        if policy == ToolPolicy::None {
            if t.contains_key("function") {
                out.push(to_value(tool)?);
            } else {
                out.push(map([("type", Value::from("function")), ("function", to_value(tool)?)]));
            }
            continue;
        }
        let Json::Object(f) = func else { return Err("a tool function that is not an object") };
        let Some(Json::String(name)) = f.get("name") else { return Err("a tool function without a string name") };
        let get = |k: &str| f.get(k).map(to_value).transpose().map(|v| v.unwrap_or(Value::from(())));
        let mut canon = vec![
            ("description", get("description")?),
            ("name", Value::from(name.as_str())),
            ("parameters", get("parameters")?),
            ("strict", Value::from(f.get("strict").is_some_and(truthy))),
        ];
        let ty = wrapped_type.map(to_value).transpose()?.unwrap_or(Value::from("function"));
        let mut entry_defer = None;
        if policy == ToolPolicy::Sglang {
            let defer = match f.get("defer_loading") {
                Some(d) => Some(d),
                None => tool_defer,
            };
            if let Some(d) = defer.filter(|d| !d.is_null()) {
                canon.push(("defer_loading", to_value(d)?));
            }
            entry_defer = Some(tool_defer.map(to_value).transpose()?.unwrap_or(Value::from(())));
        }
        let mut entry = vec![("type", ty), ("function", map(canon))];
        if let Some(d) = entry_defer {
            entry.push(("defer_loading", d));
        }
        out.push(map(entry));
    }
    Ok(Value::from(out))
}

/// Check one JSONL line of a dump.
pub fn check_line(line: &[u8], template: &ChatTemplate, encoder: &Encoder, setup: &CheckSetup) -> LineOutcome {
    match check(line, template, encoder, setup) {
        Ok(outcome) => outcome,
        Err(why) => LineOutcome::Python(why),
    }
}

fn check(line: &[u8], template: &ChatTemplate, encoder: &Encoder, setup: &CheckSetup) -> Step<LineOutcome> {
    let rec = super::line::scan(line)?;
    let Some(Json::String(session_id)) = &rec.session_id else { return Err("no string session_id") };
    match &rec.family {
        None | Some(Json::Null) => {}
        Some(Json::String(f)) if *f == setup.family => {}
        _ => return Err("a family field that is not the scorer's"),
    }
    let Some(Json::Array(msgs)) = &rec.messages else { return Err("messages is not a list") };
    if msgs.is_empty() {
        return Err("no messages");
    }
    let mut turns = 0;
    let mut messages = Vec::with_capacity(msgs.len());
    let mut roles = Vec::with_capacity(msgs.len());
    for m in msgs {
        let Json::Object(m) = m else { return Err("a message that is not an object") };
        match m.get("role") {
            Some(Json::String(r)) => {
                turns += usize::from(r == "assistant");
                roles.push(r);
            }
            _ => return Err("a message without a string role"),
        }
        messages.push(message(m)?);
    }
    let tool_defs = match &rec.tools {
        None | Some(Json::Null) => Value::from(()),
        Some(Json::Array(list)) => tools(list, setup.policy)?,
        Some(_) => return Err("tools is not a list"),
    };
    let ids = rec.token_ids.ok_or("no token_ids")?;
    if ids.is_empty() {
        return Err("token_ids is empty");
    }
    if ids.iter().any(|&id| id >= setup.vocab_size) {
        return Err("a token id outside the vocabulary");
    }
    let metadata = match &rec.metadata {
        None | Some(Json::Null) => None,
        Some(m) => Some(serde_json::to_string(m).map_err(|_| "metadata")?),
    };

    let mut ctx: Vec<(&str, Value)> = setup.variables.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    ctx.push(("messages", Value::from(messages)));
    ctx.push(("tools", tool_defs));
    ctx.push(("documents", Value::from(())));
    ctx.push(("add_generation_prompt", Value::from(false)));
    let text = template.render(map(ctx)).map_err(|_| "the native render failed")?;
    let expected = encoder.encode(&text).map_err(|_| "the encoder does not cover the render")?;

    let (ne, na) = (trimmed_len(&expected, &setup.trim), trimmed_len(&ids, &setup.trim));
    if expected[..ne] == ids[..na] {
        Ok(LineOutcome::Clean { session_id: session_id.clone(), turns, num_ids: ids.len(), metadata })
    } else {
        let record = find_messages(msgs, &text).map(|found| Differing {
            session_id: session_id.clone(),
            turns,
            metadata,
            roles: roles.into_iter().cloned().collect(),
            found,
        });
        Ok(LineOutcome::Differs { text, expected, actual: ids, record })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(json: &str) -> String {
        let Json::Object(m) = serde_json::from_str(json).unwrap() else { panic!() };
        let t = ChatTemplate::new("{{ m|tojson }}", 0).unwrap();
        t.render(map([("m", message(&m).unwrap())])).unwrap()
    }

    #[test]
    fn messages_normalised_as_python_does() {
        assert_eq!(
            msg(r#"{"role": "assistant", "content": null, "name": null, "reasoning_content": "r"}"#),
            r#"{"thinking": "r", "role": "assistant", "content": "", "reasoning_content": "r"}"#
        );
        assert_eq!(
            msg(
                r#"{"role": "assistant", "reasoning": "r", "tool_calls": [{"function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2.0}"}}]}"#
            ),
            r#"{"thinking": "r", "role": "assistant", "reasoning": "r", "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": 2.0}}}], "content": "", "reasoning_content": "r"}"#
        );
        assert_eq!(
            msg(r#"{"role": "user", "content": null, "x": 123456789012345678901234}"#),
            r#"{"role": "user", "x": 123456789012345678901234}"#
        );
    }

    #[test]
    fn messages_found_as_python_finds_them() {
        let Json::Array(msgs) = serde_json::from_str(
            r#"[{"role": "user", "content": "  héllo "}, {"role": "assistant", "content": "", "reasoning_content": "think",
                "tool_calls": [{"function": {"name": "f"}}]}, {"role": "tool", "content": [{"text": "o"}, {"type": "x"}, "s"]},
                {"role": "user", "content": "missing"}, {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": ""}}, {"function": {"name": "g"}}]}]"#,
        ).unwrap() else { panic!() };
        let text = "<u>héllo</u><a>think f</a><t>o</t><a>g</a>";
        let found = find_messages(&msgs, text).unwrap();
        let words: Vec<Option<&str>> = found.iter().map(|f| f.map(|(a, b)| &text[a..b])).collect();
        assert_eq!(words, [Some("héllo"), Some("think"), Some("o"), None, Some("g")]);
        let Json::Array(odd) = serde_json::from_str(r#"[{"role": "user", "content": [{"text": 1}]}]"#).unwrap() else {
            panic!()
        };
        assert_eq!(find_messages(&odd, text), None);
        let long = format!(r#"[{{"role": "user", "content": "{}"}}]"#, "é".repeat(300));
        let Json::Array(long) = serde_json::from_str(&long).unwrap() else { panic!() };
        let page = "é".repeat(300);
        assert_eq!(find_messages(&long, &page).unwrap(), [Some((0, 400))]);
    }

    #[test]
    fn tools_canonical_as_python_does() {
        let Json::Array(list) = serde_json::from_str(r#"[{"name": "f", "defer_loading": true}, {"type": "function", "function": {"name": "g", "strict": 1, "parameters": {}}}]"#).unwrap() else { panic!() };
        let t = ChatTemplate::new("{{ t|tojson }}", 0).unwrap();
        let out = t.render(map([("t", tools(&list, ToolPolicy::Sglang).unwrap())])).unwrap();
        assert_eq!(
            out,
            r#"[{"type": "function", "function": {"description": null, "name": "f", "parameters": null, "strict": false, "defer_loading": true}, "defer_loading": null}, {"type": "function", "function": {"description": null, "name": "g", "parameters": {}, "strict": true}, "defer_loading": null}]"#
        );
    }
}
