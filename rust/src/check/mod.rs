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
use crate::template::{map, ChatTemplate, Limits, RenderFailure};
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
    Bad { code: &'static str, reason: String, session_id: Option<String> },
    /// The session's ids equal the fresh render's (after the trailing trim):
    /// no mismatches, nothing to diagnose.
    Clean { session_id: Option<String>, turns: usize, num_ids: usize, metadata: Option<String> },
    /// The ids differ: the render, its ids and the session's ids, for the
    /// diagnosis (which reads the record again, with the same reader).
    Differs { text: String, expected: Vec<u32>, actual: Vec<u32> },
}

type Step<T> = Result<T, &'static str>;

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
        Err(bad) => return LineOutcome::Bad { code: bad.code, reason: bad.reason, session_id: bad.session_id },
    };
    if rec.family.as_ref().is_some_and(|f| *f != setup.family) {
        // another family: a bad record in the words of `Scorer.check_record`, its one owner
        return LineOutcome::Python("a family that is not the scorer's");
    }
    let session_id = rec.session_id.clone();
    match check(rec, line.len(), template, encoder, setup) {
        Ok(outcome) => outcome,
        Err(Failed::Python(why)) => LineOutcome::Python(why),
        Err(Failed::Limit(m)) => LineOutcome::Bad {
            code: "template_limit",
            reason: format!("the chat template passed a limit of the renderer on this record: {m}"),
            session_id,
        },
    }
}

/// Why the check does not take a line: the Python path scores it, or the
/// render passed a limit (a bad record: never rendered another way).
enum Failed {
    Python(&'static str),
    Limit(String),
}

impl From<&'static str> for Failed {
    fn from(why: &'static str) -> Self {
        Failed::Python(why)
    }
}

/// `size`: the line's bytes, at least its texts' (the renderer's limits grow with it).
fn check(
    rec: schema::DumpRecord,
    size: usize,
    template: &ChatTemplate,
    encoder: &Encoder,
    setup: &CheckSetup,
) -> Result<LineOutcome, Failed> {
    let turns = rec.messages.iter().filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant")).count();
    let normalised =
        normalise::messages(rec.messages, Normalise::TEMPLATE).map_err(|_| "a message the renderer refuses")?;
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
        return Err("a token id outside the vocabulary".into());
    }
    let metadata = rec.metadata.as_ref().map(crate::record::json::dumps);

    let mut ctx: Vec<(&str, T)> = setup.variables.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    ctx.push(("messages", T::from(messages)));
    ctx.push(("tools", tool_defs));
    ctx.push(("documents", T::from(())));
    ctx.push(("add_generation_prompt", T::from(false)));
    let text = template.render_limited(map(ctx), Limits::for_size(size)).map_err(|f| match f {
        RenderFailure::Limit(m) => Failed::Limit(m),
        _ => Failed::Python("the native render failed"),
    })?;
    let expected = encoder.encode(&text).map_err(|_| "the encoder does not cover the render")?;

    let (ne, na) = (trimmed_len(&expected, &setup.trim), trimmed_len(&ids, &setup.trim));
    if expected[..ne] == ids[..na] {
        Ok(LineOutcome::Clean { session_id: rec.session_id, turns, num_ids: ids.len(), metadata })
    } else {
        Ok(LineOutcome::Differs { text, expected, actual: ids })
    }
}
