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

use crate::bounds::{block_messages, opener_starts, MessageBounds, Prefixes, SENTINEL};
use crate::encoder::Encoder;
use crate::merge::trimmed_len;
use crate::record::json::{Map, Value};
use crate::record::schema;
use crate::template::{map, ChatTemplate, RenderFailure};
use crate::vocab::ByteTable;
use normalise::Normalise;
pub use normalise::ToolPolicy;
use std::sync::Arc;

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
    /// The strings that open a rendered message block (the role markers'
    /// text), for a differing session's message bounds ([`crate::bounds`]).
    pub openers: Vec<Vec<u8>>,
    /// Each id's bytes: with them, the check finds the message of a differing
    /// session's first difference on its own thread (None: it does not).
    pub bytes: Option<std::sync::Arc<ByteTable>>,
}

/// The outcome of one line.
#[derive(Debug, Clone)]
pub enum LineOutcome {
    /// Score this line on the Python path (and why, for debugging).
    Python(&'static str),
    /// A record that cannot be scored: the reader's reason (and its session
    /// id when it has one; None: the record has none, or it is unusable).
    Bad { code: &'static str, reason: String, session_id: Option<String> },
    /// The session's ids equal the fresh render's (after the trailing trim):
    /// no mismatches, nothing to diagnose.
    Clean { session_id: Option<String>, turns: usize, num_ids: usize, metadata: Option<String> },
    /// The ids differ: what the diagnosis needs, read once.
    Differs(Box<Differing>),
}

/// A session whose ids differ from its render: what the diagnosis needs of
/// its record (read once, never converted whole), the render and its ids, and
/// the normalised messages and tools as the template saw them, so the
/// diagnosis renders the prefixes it needs ([`Differing::render_prefix`]).
#[derive(Debug, Clone)]
pub struct Differing {
    /// None: the record has none (the caller numbers it).
    pub session_id: Option<String>,
    /// Each message's role.
    pub roles: Vec<String>,
    /// Assistant messages.
    pub turns: usize,
    pub metadata: Option<Value>,
    /// The render (shared with the message bounds).
    pub text: Arc<String>,
    pub expected: Vec<u32>,
    /// The session's ids.
    pub actual: Vec<u32>,
    /// Prefix lengths the check found ([`MessageBounds::known`]): the
    /// message of the first difference, attributed on the check's thread.
    pub known: Vec<(usize, usize)>,
    /// Where the render's ids and the session's first differ: the index of
    /// the render's id and where it starts in the render; None when the ids
    /// do not decode to the render byte for byte (or no byte table).
    pub first: Option<(usize, usize)>,
    messages: Vec<T>,
    tools: T,
}

impl Differing {
    /// The render of the record's first `k` messages (all of them past the
    /// end), followed by `then` (a message normalised as the record's are):
    /// what the check renders, for the message boundaries of the diagnosis.
    pub fn render_prefix(
        &self,
        k: usize,
        then: Option<Map>,
        template: &ChatTemplate,
        setup: &CheckSetup,
    ) -> Result<String, RenderFailure> {
        let mut messages = self.messages[..k.min(self.messages.len())].to_vec();
        if let Some(m) = then {
            let m = normalise::message(messages.len(), m, Normalise::TEMPLATE).map_err(RenderFailure::Unsupported)?;
            messages.push(map_template(&m).map_err(|why| RenderFailure::Unsupported(why.to_string()))?);
        }
        render(template, setup, messages, self.tools.clone())
    }

    /// The message boundaries of this session's render ([`MessageBounds`]),
    /// with the prefix lengths already found.
    #[must_use]
    pub fn bounds(&self, openers: &[Vec<u8>]) -> MessageBounds {
        let mut b = MessageBounds::new(
            self.roles.len(),
            Arc::clone(&self.text) as crate::bounds::Text,
            openers.to_vec(),
            self.roles.first().map(String::as_str),
        );
        b.remember(&self.known);
        b
    }

    /// Find the message of the first difference with native renders only
    /// (a render this renderer hands to jinja2 stops the search: what it
    /// found is kept, as the diagnosis would find it), so the diagnosis
    /// finds those prefix lengths known.
    fn attribute_first(&mut self, template: &ChatTemplate, setup: &CheckSetup, ne: usize, na: usize) {
        let Some(table) = &setup.bytes else { return };
        let at = crate::prefix::common_prefix_len(&self.expected[..ne], &self.actual[..na]);
        let at = at.min(self.expected.len().saturating_sub(1));
        let (Some(byte), Some(rest)) = (table.byte_len(&self.expected[..at]), table.byte_len(&self.expected[at..]))
        else {
            return;
        };
        if byte + rest != self.text.len() || self.expected.is_empty() {
            return; // the ids do not decode to the render byte for byte: no boundaries by bytes
        }
        self.first = Some((at, byte));
        let starts = opener_starts(self.text.as_bytes(), &setup.openers);
        let block = starts.partition_point(|&s| s <= byte) as i64 - 1;
        let roles: Vec<&str> = self.roles.iter().map(String::as_str).collect();
        let hint = block_messages(starts.len(), None, &roles)
            .and_then(|g| usize::try_from(block).ok().and_then(|b| g.get(b).copied()))
            .or(Some(block));
        let mut bounds = self.bounds(&setup.openers);
        let mut native = Native { session: self, template, setup };
        let _ = bounds.message_at(byte, hint, &mut native);
        self.known = bounds.known();
    }
}

/// A differing session's prefix renders, native only: a render this renderer
/// hands to jinja2 (`RenderFailure::Unsupported`) stops the search.
struct Native<'a> {
    session: &'a Differing,
    template: &'a ChatTemplate,
    setup: &'a CheckSetup,
}

impl Prefixes for Native<'_> {
    type Stop = ();

    fn render(&mut self, k: usize, history: bool) -> Result<Option<Vec<u8>>, ()> {
        match self.session.render_prefix(k, history.then(sentinel_message), self.template, self.setup) {
            Ok(text) => Ok(Some(text.into_bytes())),
            // the template refuses the prefix (jinja2 raises the same), or passed a limit
            Err(RenderFailure::Raised(_) | RenderFailure::Limit(_)) => Ok(None),
            Err(RenderFailure::Unsupported(_)) => Err(()),
        }
    }

    fn has_history(&self) -> bool {
        true
    }
}

/// The user message a history render puts after a prefix ([`SENTINEL`]).
#[must_use]
pub fn sentinel_message() -> Map {
    let mut m = Map::new();
    m.insert("role".into(), Value::Str("user".into()));
    m.insert("content".into(), Value::Str(SENTINEL.into()));
    m
}

/// The render of `messages` and `tools` (template values of the normalised
/// ones) with the setup's variables and no generation prompt: the one
/// context the check and the diagnosis's prefix renders build, under the
/// limits for its size, as every render of the Python path is
/// ([`ChatTemplate::render`]: the ids of a record do not raise them).
fn render(template: &ChatTemplate, setup: &CheckSetup, messages: Vec<T>, tools: T) -> Result<String, RenderFailure> {
    let mut ctx: Vec<(&str, T)> = setup.variables.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    ctx.push(("messages", T::from(messages)));
    ctx.push(("tools", tools));
    ctx.push(("documents", T::from(())));
    ctx.push(("add_generation_prompt", T::from(false)));
    template.render(map(ctx))
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
    check_read(schema::dump_line(line), template, encoder, setup)
}

/// Check one row of a dump (a Parquet row's values, its texts JSON text).
pub fn check_row(row: Value, template: &ChatTemplate, encoder: &Encoder, setup: &CheckSetup) -> LineOutcome {
    check_read(schema::dump_record(row, true), template, encoder, setup)
}

/// Check a record as the one reader read it (or its verdict on a bad one).
fn check_read(
    read: Result<schema::DumpRecord, schema::Bad>,
    template: &ChatTemplate,
    encoder: &Encoder,
    setup: &CheckSetup,
) -> LineOutcome {
    let rec = match read {
        Ok(rec) => rec,
        Err(bad) => return LineOutcome::Bad { code: bad.code, reason: bad.reason, session_id: bad.session_id },
    };
    if rec.family.as_ref().is_some_and(|f| *f != setup.family) {
        // another family: a bad record in the words of `Scorer.check_record`, its one owner
        return LineOutcome::Python("a family that is not the scorer's");
    }
    let session_id = rec.session_id.clone();
    match check(rec, template, encoder, setup) {
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

fn check(
    rec: schema::DumpRecord,
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
    if rec.token_ids.iter().any(|&id| id >= setup.vocab_size) {
        return Err("a token id outside the vocabulary".into());
    }
    let text = render(template, setup, messages.clone(), tool_defs.clone()).map_err(|f| match f {
        RenderFailure::Limit(m) => Failed::Limit(m),
        _ => Failed::Python("the native render failed"),
    })?;
    let expected = encoder.encode(&text).map_err(|_| "the encoder does not cover the render")?;

    let actual = rec.token_ids;
    let (ne, na) = (trimmed_len(&expected, &setup.trim), trimmed_len(&actual, &setup.trim));
    if expected[..ne] == actual[..na] {
        let metadata = rec.metadata.as_ref().map(crate::record::json::dumps);
        return Ok(LineOutcome::Clean { session_id: rec.session_id, turns, num_ids: actual.len(), metadata });
    }
    if expected.iter().any(|&id| id >= setup.vocab_size) {
        // (the record's ids are inside it: a clean session's render ids are too)
        return Err("the render encodes to an id outside the vocabulary".into());
    }
    // a record's messages each have a string role (`schema::dump_record`); normalising keeps it
    let roles = normalised.iter().map(|m| m.get("role").and_then(Value::as_str).unwrap_or("").to_string()).collect();
    let mut d = Differing {
        session_id: rec.session_id,
        roles,
        turns,
        metadata: rec.metadata,
        text: Arc::new(text),
        expected,
        actual,
        known: Vec::new(),
        first: None,
        messages,
        tools: tool_defs,
    };
    d.attribute_first(template, setup, ne, na);
    Ok(LineOutcome::Differs(Box::new(d)))
}
