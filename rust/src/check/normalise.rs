//! Messages and tools as the inference engine hands them to a chat
//! template: the one owner of these rules. The native session check uses
//! them directly; `tito_fast.chat.render` calls them through
//! `_core.normalize_messages` and `_core.canonical_tools`.
//!
//! Messages: an assistant's `content: None` (or missing) becomes `""`;
//! tool-call `arguments` given as JSON text become objects (read by
//! [`crate::record::json`]) for Jinja templates, or objects become JSON text
//! for encoders that parse them; with [`NoneKeys::Drop`] (transformers 5)
//! None-valued keys go; with `alias` the reasoning (the first non-None of
//! `reasoning_content`, `thinking`, `reasoning`) is set under `thinking`
//! (first position) and `reasoning_content` (its own position, else last),
//! as transformers fills them.
//!
//! Tools: each becomes `{"type": "function", "function": {...}}` by a
//! policy (`sglang`: the function has exactly `description`, `name`,
//! `parameters`, `strict` and a non-null `defer_loading`, the tool a
//! `defer_loading` after `function`; `sglang-legacy`: without
//! `defer_loading`; `none`: as given, wrapped when bare).

use crate::record::json::{self, Map, Value};

/// The tool canonicalisation policies.
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

/// Tool-call arguments as objects (Jinja templates) or JSON text (DeepSeek's encoders).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arguments {
    Dict,
    Json,
}

/// None-valued message keys kept (jinja2 as given) or dropped (transformers 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoneKeys {
    Keep,
    Drop,
}

/// How messages are normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Normalise {
    pub arguments: Arguments,
    pub none_keys: NoneKeys,
    /// Fill `thinking` and `reasoning_content` from the first reasoning field.
    pub alias: bool,
}

impl Normalise {
    /// What the native renderer and transformers' `apply_chat_template` see.
    pub const TEMPLATE: Normalise = Normalise { arguments: Arguments::Dict, none_keys: NoneKeys::Drop, alias: true };
}

const REASONING: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// Message `i` normalised (taken by value: its texts are moved, not copied).
pub fn message(i: usize, m: Map, how: Normalise) -> Result<Map, String> {
    let assistant = m.get("role").and_then(Value::as_str) == Some("assistant");
    let has_content = m.contains_key("content");
    let reasoning =
        if how.alias { REASONING.iter().find_map(|k| m.get(k).filter(|v| !v.is_null())).cloned() } else { None };
    let own_thinking = if reasoning.is_some() { m.get("thinking").cloned() } else { None };
    let mut out = Map::new();
    for (k, v) in m.into_entries() {
        let value = match (k.as_str(), v) {
            ("content", Value::Null) if assistant => Value::Str(String::new()),
            (_, Value::Null) if how.none_keys == NoneKeys::Drop => continue,
            ("tool_calls", Value::List(calls)) if assistant => tool_calls(i, calls, how.arguments)?,
            (_, v) => v,
        };
        out.insert(k, value);
    }
    if assistant && !has_content {
        out.insert("content".into(), Value::Str(String::new()));
    }
    if how.alias {
        if let Some(r) = reasoning {
            let mut aliased = Map::new();
            // `{"thinking": r, **m, "reasoning_content": r}`: thinking first, with m's own value when it has one
            aliased.insert("thinking".into(), r.clone());
            for (k, v) in out.into_entries() {
                aliased.insert(k, v);
            }
            if let Some(t) = own_thinking {
                if !(t.is_null() && how.none_keys == NoneKeys::Drop) {
                    aliased.insert("thinking".into(), t);
                }
            }
            aliased.insert("reasoning_content".into(), r);
            out = aliased;
        }
    }
    Ok(out)
}

fn tool_calls(i: usize, calls: Vec<Value>, arguments: Arguments) -> Result<Value, String> {
    let mut out = Vec::with_capacity(calls.len());
    for (j, call) in calls.into_iter().enumerate() {
        let Value::Map(c) = call else {
            out.push(call);
            continue;
        };
        let mut call_out = Map::new();
        for (k, v) in c.iter() {
            let value = match (k.as_str(), v) {
                ("function", Value::Map(f)) if !f.is_empty() => {
                    let mut f_out = Map::new();
                    for (fk, fv) in f.iter() {
                        let val = match (fk.as_str(), fv, arguments) {
                            ("arguments", Value::Str(s), Arguments::Dict) => {
                                json::parse(s.as_bytes(), &[]).map_err(|e| {
                                    format!(
                                        "messages[{i}].tool_calls[{j}].function.arguments is not valid JSON: {}",
                                        e.describe(s.as_bytes()).trim_start_matches("invalid JSON: ")
                                    )
                                })?
                            }
                            ("arguments", Value::Map(_), Arguments::Json) => Value::Str(json::dumps(fv)),
                            _ => fv.clone(),
                        };
                        f_out.insert(fk.clone(), val);
                    }
                    Value::Map(f_out)
                }
                _ => v.clone(),
            };
            call_out.insert(k.clone(), value);
        }
        out.push(Value::Map(call_out));
    }
    Ok(Value::List(out))
}

/// Every message normalised.
pub fn messages(msgs: Vec<Map>, how: Normalise) -> Result<Vec<Map>, String> {
    msgs.into_iter().enumerate().map(|(i, m)| message(i, m, how)).collect()
}

/// The tools in the engine's shape (None for no tools).
pub fn tools(list: &[Value], policy: ToolPolicy) -> Result<Option<Vec<Value>>, String> {
    if list.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let Value::Map(t) = tool else { return Err(format!("tools[{i}] is a {}, not a dict", tool.type_name())) };
        let wrapped = t.contains_key("function");
        if policy == ToolPolicy::None {
            if wrapped {
                out.push(tool.clone());
            } else {
                out.push(Value::Map(
                    [("type".to_string(), Value::Str("function".into())), ("function".to_string(), tool.clone())]
                        .into_iter()
                        .collect(),
                ));
            }
            continue;
        }
        let (ty, func, tool_defer) = if wrapped {
            (t.get("type").cloned(), t.get("function").expect("present"), t.get("defer_loading"))
        } else {
            (None, tool, None)
        };
        let Value::Map(f) = func else { return Err(format!("tools[{i}].function needs a string 'name'")) };
        let Some(Value::Str(name)) = f.get("name") else {
            return Err(format!("tools[{i}].function needs a string 'name'"));
        };
        let get = |k: &str| f.get(k).cloned().unwrap_or(Value::Null);
        let mut canon = Map::new();
        canon.insert("description".into(), get("description"));
        canon.insert("name".into(), Value::Str(name.clone()));
        canon.insert("parameters".into(), get("parameters"));
        canon.insert("strict".into(), Value::Bool(f.get("strict").is_some_and(Value::truthy)));
        let mut entry = Map::new();
        entry.insert("type".into(), ty.unwrap_or(Value::Str("function".into())));
        if policy == ToolPolicy::Sglang {
            let defer = f.get("defer_loading").or(tool_defer).filter(|d| !d.is_null());
            if let Some(d) = defer {
                canon.insert("defer_loading".into(), d.clone());
            }
            entry.insert("function".into(), Value::Map(canon));
            entry.insert("defer_loading".into(), tool_defer.cloned().unwrap_or(Value::Null));
        } else {
            entry.insert("function".into(), Value::Map(canon));
        }
        out.push(Value::Map(entry));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str, how: Normalise) -> String {
        let Value::Map(m) = json::parse(text.as_bytes(), &[]).unwrap() else { panic!() };
        json::dumps(&Value::Map(message(0, m, how).unwrap()))
    }

    #[test]
    fn messages_normalised() {
        let t = Normalise::TEMPLATE;
        assert_eq!(
            msg(r#"{"role": "assistant", "content": null, "name": null, "reasoning_content": "r"}"#, t),
            r#"{"thinking": "r", "role": "assistant", "content": "", "reasoning_content": "r"}"#
        );
        assert_eq!(
            msg(
                r#"{"role": "assistant", "reasoning": "r", "tool_calls": [{"function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2.0}"}}]}"#,
                t
            ),
            r#"{"thinking": "r", "role": "assistant", "reasoning": "r", "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": 2.0}}}], "content": "", "reasoning_content": "r"}"#
        );
        // a message's own thinking keeps its value, at the first position
        assert_eq!(
            msg(r#"{"role": "assistant", "content": "c", "thinking": "t", "reasoning_content": "r"}"#, t),
            r#"{"thinking": "t", "role": "assistant", "content": "c", "reasoning_content": "r"}"#
        );
        assert_eq!(
            msg(r#"{"role": "user", "content": null, "x": 123456789012345678901234}"#, t),
            r#"{"role": "user", "x": 123456789012345678901234}"#
        );
        let keep = Normalise { arguments: Arguments::Json, none_keys: NoneKeys::Keep, alias: false };
        assert_eq!(
            msg(
                r#"{"role": "assistant", "content": null, "name": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}"#,
                keep
            ),
            r#"{"role": "assistant", "content": "", "name": null, "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1}"}}]}"#
        );
        let Value::Map(bad) = json::parse(
            br#"{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}"#,
            &[],
        )
        .unwrap() else {
            panic!()
        };
        assert!(message(3, bad, t)
            .unwrap_err()
            .starts_with("messages[3].tool_calls[0].function.arguments is not valid JSON"));
    }

    #[test]
    fn tools_canonical() {
        let Value::List(list) = json::parse(
            br#"[{"name": "f", "defer_loading": true}, {"type": "function", "function": {"name": "g", "strict": 1, "parameters": {}}}]"#,
            &[],
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            json::dumps(&Value::List(tools(&list, ToolPolicy::Sglang).unwrap().unwrap())),
            r#"[{"type": "function", "function": {"description": null, "name": "f", "parameters": null, "strict": false, "defer_loading": true}, "defer_loading": null}, {"type": "function", "function": {"description": null, "name": "g", "parameters": {}, "strict": true}, "defer_loading": null}]"#
        );
        assert_eq!(tools(&[Value::Int(1)], ToolPolicy::Sglang).unwrap_err(), "tools[0] is a int, not a dict");
        assert_eq!(tools(&[], ToolPolicy::Sglang).unwrap(), None);
    }
}
