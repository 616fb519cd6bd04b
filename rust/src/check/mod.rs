//! The session check of one dump line, in Rust: read the record (the one
//! reader, [`crate::record`]), normalise its messages and tools
//! ([`normalise`], the one owner of those rules; Python's renderer calls it
//! too), render the chat template, encode the text and compare the ids with
//! the session's.
//!
//! It is the fast path of `tito-fast score`. A bad record is reported here
//! with the reader's reason (the Python path would read the same); a line
//! whose render or encoding this does not cover (a template the native
//! renderer cannot render as jinja2, an integer past 128 bits, a token id
//! outside the vocabulary) comes back as [`LineOutcome::Python`] and the
//! Python path scores it with jinja2 and the tokenizer.

pub mod normalise;

use minijinja::Value as T;

use crate::encoder::Encoder;
use crate::merge::trimmed_len;
use crate::record::json::{Map, Value};
use crate::record::schema;
use crate::template::{map, ChatTemplate};
use normalise::Normalise;
pub use normalise::ToolPolicy;

/// What the check needs besides the template and the encoder.
#[derive(Debug, Clone)]
pub struct CheckSetup {
    /// Template variables (special tokens, template kwargs).
    pub variables: Vec<(String, T)>,
    pub policy: ToolPolicy,
    /// Ids stripped from both tails before comparing.
    pub trim: Vec<u32>,
    pub vocab_size: u32,
    /// The scorer's family: a record naming another is a bad record.
    pub family: String,
}

/// The outcome of one line.
#[derive(Debug, Clone, PartialEq)]
pub enum LineOutcome {
    /// Score this line on the Python path (and why, for debugging).
    Python(&'static str),
    /// A record that cannot be scored: the reader's reason (and its session
    /// id when it has one; None: the record has none, or it is unusable).
    Bad { reason: String, session_id: Option<String> },
    /// The session's ids equal the fresh render's (after the trailing trim):
    /// no mismatches, nothing to diagnose.
    Clean { session_id: Option<String>, turns: usize, num_ids: usize, metadata: Option<String> },
    /// The ids differ: the render, its ids and the session's ids, for the
    /// Python diagnosis, with what it needs of the record.
    Differs { text: String, expected: Vec<u32>, actual: Vec<u32>, record: Option<Differing> },
}

type Step<T> = Result<T, &'static str>;

/// What the diagnosis of a differing session needs of its record besides
/// the ids, so the Python side need not read the line again.
#[derive(Debug, Clone, PartialEq)]
pub struct Differing {
    pub session_id: Option<String>,
    pub turns: usize,
    pub metadata: Option<String>,
    /// Each message's role.
    pub roles: Vec<String>,
    /// Where each message's own text was found in the render, in bytes
    /// (`tito_fast.compare.messages.find_messages`).
    pub found: Vec<Option<(usize, usize)>>,
}

/// The texts of a message its render holds verbatim, in the order they are
/// tried (`message_texts` in `tito_fast.compare.messages`).
fn probes(m: &Map) -> Vec<String> {
    let mut out = Vec::new();
    let content = match m.get("content") {
        Some(Value::List(parts)) => {
            let mut joined = String::new();
            for p in parts {
                if let Value::Map(p) = p {
                    match p.get("text") {
                        None => {}
                        Some(Value::Str(t)) => joined.push_str(t),
                        Some(other) => joined.push_str(&schema::short_repr(other)),
                    }
                }
            }
            Some(joined)
        }
        Some(Value::Str(c)) => Some(c.clone()),
        _ => None,
    };
    let reasoning = match m.get("reasoning_content") {
        Some(Value::Str(r)) => Some(r.clone()),
        _ => None,
    };
    for value in [content, reasoning].into_iter().flatten() {
        let stripped = crate::template::pyfmt::strip(&value, None, true, true);
        if !stripped.is_empty() {
            out.push(match stripped.char_indices().nth(200) {
                Some((cut, _)) => stripped[..cut].to_string(),
                None => stripped.to_string(),
            });
        }
    }
    if let Some(Value::List(calls)) = m.get("tool_calls") {
        for call in calls {
            let name = match call {
                Value::Map(c) => match c.get("function") {
                    Some(Value::Map(f)) => f.get("name"),
                    _ => None,
                },
                _ => None,
            };
            if let Some(Value::Str(n)) = name {
                if !n.is_empty() {
                    out.push(n.clone());
                    break;
                }
            }
        }
    }
    out
}

/// Each message's text in `text`, searched in order after the previous one found.
fn find_messages(msgs: &[Map], text: &str) -> Vec<Option<(usize, usize)>> {
    let mut cursor = 0;
    let mut out = Vec::with_capacity(msgs.len());
    for m in msgs {
        let mut hit = None;
        for probe in probes(m) {
            if let Some(at) = text[cursor..].find(probe.as_str()) {
                hit = Some((cursor + at, cursor + at + probe.len()));
                cursor += at + probe.len();
                break;
            }
        }
        out.push(hit);
    }
    out
}

/// A record value as the template value Python's objects would give.
pub fn to_template(v: &Value) -> Step<T> {
    Ok(match v {
        Value::Null => T::from(()),
        Value::Bool(b) => T::from(*b),
        Value::Int(i) => T::from(*i),
        Value::BigInt(s) => s.parse::<i128>().map(T::from).map_err(|_| "an integer beyond 128 bits")?,
        Value::Float(f) => T::from(*f),
        Value::Str(s) => T::from(s.as_str()),
        Value::List(items) => T::from(items.iter().map(to_template).collect::<Step<Vec<_>>>()?),
        Value::Ids(ids) => T::from(ids.iter().map(|&i| T::from(i)).collect::<Vec<_>>()),
        Value::Map(m) => map_template(m)?,
    })
}

fn map_template(m: &Map) -> Step<T> {
    Ok(map(m.iter().map(|(k, v)| Ok((k.as_str(), to_template(v)?))).collect::<Step<Vec<_>>>()?))
}

/// Check one JSONL line of a dump.
pub fn check_line(line: &[u8], template: &ChatTemplate, encoder: &Encoder, setup: &CheckSetup) -> LineOutcome {
    let rec = match schema::dump_line(line) {
        Ok(rec) => rec,
        Err(bad) => return LineOutcome::Bad { reason: bad.reason, session_id: bad.session_id },
    };
    if let Some(f) = &rec.family {
        if *f != setup.family {
            return LineOutcome::Bad {
                // the wording of `Scorer.check_record`, where a record the Python path reads is checked
                reason: format!(
                    "record is for family {}, the scorer for {}",
                    schema::short_repr(&Value::Str(f.clone())),
                    schema::short_repr(&Value::Str(setup.family.clone()))
                ),
                session_id: rec.session_id,
            };
        }
    }
    match check(rec, template, encoder, setup) {
        Ok(outcome) => outcome,
        Err(why) => LineOutcome::Python(why),
    }
}

fn check(rec: schema::DumpRecord, template: &ChatTemplate, encoder: &Encoder, setup: &CheckSetup) -> Step<LineOutcome> {
    let msgs = &rec.messages;
    let roles: Vec<String> =
        msgs.iter().map(|m| m.get("role").and_then(Value::as_str).unwrap_or_default().to_string()).collect();
    let turns = roles.iter().filter(|r| *r == "assistant").count();
    let normalised = normalise::messages(msgs, Normalise::TEMPLATE).map_err(|_| "a message the renderer refuses")?;
    let messages = normalised.iter().map(map_template).collect::<Step<Vec<_>>>()?;
    let tool_defs = match &rec.tools {
        None => T::from(()),
        Some(list) => match normalise::tools(list, setup.policy).map_err(|_| "tools the renderer refuses")? {
            None => T::from(()),
            Some(defs) => T::from(defs.iter().map(to_template).collect::<Step<Vec<_>>>()?),
        },
    };
    let ids = rec.token_ids;
    if ids.iter().any(|&id| id >= setup.vocab_size) {
        return Err("a token id outside the vocabulary");
    }
    let metadata = rec.metadata.as_ref().map(crate::record::json::dumps);

    let mut ctx: Vec<(&str, T)> = setup.variables.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    ctx.push(("messages", T::from(messages)));
    ctx.push(("tools", tool_defs));
    ctx.push(("documents", T::from(())));
    ctx.push(("add_generation_prompt", T::from(false)));
    let text = template.render(map(ctx)).map_err(|_| "the native render failed")?;
    let expected = encoder.encode(&text).map_err(|_| "the encoder does not cover the render")?;

    let (ne, na) = (trimmed_len(&expected, &setup.trim), trimmed_len(&ids, &setup.trim));
    if expected[..ne] == ids[..na] {
        Ok(LineOutcome::Clean { session_id: rec.session_id, turns, num_ids: ids.len(), metadata })
    } else {
        let found = find_messages(msgs, &text);
        let record = Some(Differing { session_id: rec.session_id, turns, metadata, roles, found });
        Ok(LineOutcome::Differs { text, expected, actual: ids, record })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::json;

    #[test]
    fn messages_found_as_python_finds_them() {
        let Value::List(msgs) = json::parse(
            r#"[{"role": "user", "content": "  héllo "}, {"role": "assistant", "content": "", "reasoning_content": "think",
                "tool_calls": [{"function": {"name": "f"}}]}, {"role": "tool", "content": [{"text": "o"}, {"type": "x"}, "s"]},
                {"role": "user", "content": "missing"}, {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": ""}}, {"function": {"name": "g"}}]}]"#.as_bytes(), &[]
        ).unwrap() else { panic!() };
        let msgs: Vec<Map> = msgs
            .into_iter()
            .map(|m| match m {
                Value::Map(m) => m,
                _ => panic!(),
            })
            .collect();
        let text = "<u>héllo</u><a>think f</a><t>o</t><a>g</a>";
        let found = find_messages(&msgs, text);
        let words: Vec<Option<&str>> = found.iter().map(|f| f.map(|(a, b)| &text[a..b])).collect();
        assert_eq!(words, [Some("héllo"), Some("think"), Some("o"), None, Some("g")]);
    }
}
