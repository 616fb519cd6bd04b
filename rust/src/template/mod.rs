//! The native chat-template renderer: Jinja templates rendered in Rust (on
//! `minijinja`) to the same text as transformers' `apply_chat_template`.
//!
//! The environment is set up as transformers sets up jinja2: `trim_blocks`,
//! `lstrip_blocks`, no auto-escaping, loop controls, a `tojson` that is
//! Python's `json.dumps` (non-ASCII kept unless `ensure_ascii=True`, `indent`,
//! `separators`, `sort_keys`, no HTML escaping), `raise_exception`,
//! `strftime_now`, and `{% generation %}` blocks that render their body.
//! Values print as Python prints them (`None`, `True`, `['a', 1]`,
//! `{'k': 1.0}`); the `str` methods that depend on Python's idea of
//! whitespace (`strip`, `split`, `splitlines`, `isspace`, ...) follow it, and
//! the other Python methods come from `minijinja-contrib`'s `pycompat`.
//!
//! Whatever this cannot render as Python would (a value with no exact Python
//! form here, a method it does not have, a template it cannot parse) is an
//! error, never a different text: the caller then renders with jinja2.
//!
//! A `ChatTemplate` is compiled once and is `Send + Sync`: threads render
//! with it concurrently.
//!
//! Every render runs under limits (see [`Limits`] and docs/templates.md): a
//! fuel budget (minijinja's instruction and data budget) that grows with the
//! size of the context, a recursion limit, `range` of at most
//! [`MAX_RANGE`] items (jinja2's sandbox), and an output size limit; our own
//! filters and methods check what they would allocate against the fuel left
//! before they allocate it. A render that passes one fails with
//! [`RenderFailure::Limit`], never by exhausting memory, the stack or time.

pub mod clock;
pub mod pyfmt;

use std::sync::OnceLock;

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior, Value};

use pyfmt::{JsonOptions, Unsupported, LIMITED};

const NAME: &str = "chat_template";
/// Errors raised by the template itself (`raise_exception`) carry this prefix.
const RAISED: &str = "raise_exception: ";

/// The fuel every render gets at least: about a million instructions, or
/// 64 MiB of data created and processed (one fuel pays for 64 bytes).
pub const FUEL_FLOOR: u64 = 1 << 20;
/// Fuel per byte of the context (its strings, and 16 bytes per other value)
/// once that passes the floor: a template may process each byte of its
/// input 256 times over.
pub const FUEL_PER_BYTE: u64 = 4;
/// The output every render may write at least (64 MiB).
pub const OUTPUT_FLOOR: usize = 64 << 20;
/// Output bytes per byte of the context (on top of the floor).
pub const OUTPUT_PER_BYTE: usize = 16;
/// Nested calls (macros, loops, `if`s; a macro call counts more than one).
pub const RECURSION_LIMIT: usize = 500;
/// The most items a `range` may have (jinja2's sandbox allows as many).
pub const MAX_RANGE: usize = 100_000;
/// Stack bytes per fuel (a nesting level costs at least one fuel; dropping
/// it takes up to about 64 bytes of stack in a release build).
const STACK_PER_FUEL: usize = if cfg!(debug_assertions) { 512 } else { 96 };
/// The stack of the extension's worker threads: address space reserved, used
/// as far as needed. Deep enough to render a context of up to a quarter of a
/// MiB (the fuel floor) where it runs, without a stack of its own per render.
pub const RENDER_STACK: usize = (FUEL_FLOOR as usize) * STACK_PER_FUEL + (2 << 20);
/// Fuel tiers: a render gets the smallest `FUEL_FLOOR << k` that covers its
/// budget (one environment per tier, made when first needed).
const TIERS: usize = 40;

/// The limits of one render (they grow with the size of its context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The fuel budget (instructions, plus one per 64 bytes of data).
    pub fuel: u64,
    /// The most bytes the render may write.
    pub output: usize,
}

impl Limits {
    /// The limits for a context of `size` bytes ([`context_size`]).
    pub fn for_size(size: usize) -> Limits {
        let want = FUEL_FLOOR.max(FUEL_PER_BYTE.saturating_mul(size as u64));
        Limits {
            fuel: tier_fuel(tier_of(want)),
            output: OUTPUT_FLOOR.saturating_add(OUTPUT_PER_BYTE.saturating_mul(size)),
        }
    }
}

fn tier_of(fuel: u64) -> usize {
    let mut k = 0;
    while k + 1 < TIERS && tier_fuel(k) < fuel {
        k += 1;
    }
    k
}

fn tier_fuel(k: usize) -> u64 {
    FUEL_FLOOR.checked_shl(k as u32).unwrap_or(u64::MAX)
}

/// The size of a context as the limits count it: the bytes of its strings
/// plus 16 per other value (map keys included).
pub fn context_size(v: &Value) -> usize {
    fn walk(v: &Value, depth: usize, total: &mut usize) {
        match v.kind() {
            ValueKind::String => *total = total.saturating_add(v.as_str().map_or(0, str::len)),
            ValueKind::Seq | ValueKind::Map if depth < 300 => {
                *total = total.saturating_add(16);
                // the maps and lists the renderer builds, read in place (no
                // clone of each key and item, as the generic iteration makes)
                if let Some(m) = v.downcast_object_ref::<indexmap::IndexMap<Value, Value>>() {
                    for (k, item) in m {
                        walk(k, depth + 1, total);
                        walk(item, depth + 1, total);
                    }
                } else if let Some(items) = v.downcast_object_ref::<Vec<Value>>() {
                    for item in items {
                        walk(item, depth + 1, total);
                    }
                } else if let Some(obj) = v.as_object() {
                    if v.kind() == ValueKind::Map {
                        for (k, item) in obj.try_iter_pairs().into_iter().flatten() {
                            walk(&k, depth + 1, total);
                            walk(&item, depth + 1, total);
                        }
                    } else if let Ok(items) = v.try_iter() {
                        for item in items {
                            walk(&item, depth + 1, total);
                        }
                    }
                }
            }
            _ => *total = total.saturating_add(16),
        }
    }
    let mut total = 0;
    walk(v, 0, &mut total);
    total
}

/// An error of a limit (a [`RenderFailure::Limit`] once the render ends).
fn limit(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidOperation, format!("{LIMITED}{what}"))
}

/// The bytes a template's own filters and methods may still create: what
/// the fuel left pays for.
fn bytes_left(state: &State) -> usize {
    match state.fuel_levels() {
        Some((_, remaining)) => usize::try_from(remaining.saturating_mul(64)).unwrap_or(usize::MAX),
        None => usize::MAX,
    }
}

/// Why a render failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderFailure {
    /// The template called `raise_exception(message)`: jinja2 fails the same way.
    Raised(String),
    /// Something this renderer does not do as jinja2 does (or another error):
    /// render with jinja2 instead.
    Unsupported(String),
    /// The render passed one of its limits (fuel, recursion, output size,
    /// `range` size): the template is hostile or broken for this input, and
    /// jinja2 would pass its own limits too. Never rendered another way.
    Limit(String),
}

impl std::fmt::Display for RenderFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenderFailure::Raised(m) => write!(f, "the template raised: {m}"),
            RenderFailure::Unsupported(m) => f.write_str(m),
            RenderFailure::Limit(m) => write!(f, "the template passed a limit of the renderer: {m}"),
        }
    }
}

fn failure(e: &Error) -> RenderFailure {
    let detail = e.detail().unwrap_or_default();
    if let Some(msg) = detail.strip_prefix(RAISED) {
        return RenderFailure::Raised(msg.to_string());
    }
    let at = e.line().map(|l| format!(" (template line {l})")).unwrap_or_default();
    if let Some(msg) = detail.strip_prefix(LIMITED) {
        return RenderFailure::Limit(format!("{msg}{at}"));
    }
    if e.kind() == ErrorKind::OutOfFuel {
        return RenderFailure::Limit(format!("out of fuel{at}"));
    }
    if detail == "recursion limit exceeded" {
        return RenderFailure::Limit(format!("more than {RECURSION_LIMIT} levels of recursion{at}"));
    }
    // The first line of the error and its cause, without the debug dump.
    let mut msg = format!("{}", e.kind());
    if !detail.is_empty() {
        msg = format!("{msg}: {detail}");
    }
    if let Some(line) = e.line() {
        msg = format!("{msg} (template line {line})");
    }
    RenderFailure::Unsupported(msg)
}

fn unsupported(e: Unsupported) -> Error {
    if e.0.starts_with(LIMITED) {
        return Error::new(ErrorKind::InvalidOperation, e.0);
    }
    Error::new(ErrorKind::InvalidOperation, format!("no exact Python form: {}", e.0))
}

/// A template map (keys in insertion order, as a Python dict keeps them).
pub fn map<K: Into<Value>>(pairs: impl IntoIterator<Item = (K, Value)>) -> Value {
    Value::from(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect::<indexmap::IndexMap<Value, Value>>())
}

/// A compiled chat template.
pub struct ChatTemplate {
    /// The environment of each fuel tier (`FUEL_FLOOR << k`), made from the
    /// first when a render first needs it.
    tiers: [OnceLock<Environment<'static>>; TIERS],
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChatTemplate")
    }
}

impl ChatTemplate {
    /// Compile `source`. `utc_offset` (seconds) is the local time zone
    /// `strftime_now` formats in, as Python's `datetime.now()` would.
    pub fn new(source: &str, utc_offset: i64) -> Result<Self, RenderFailure> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| failure(&e))?;
        env.set_syntax(syntax);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_formatter(format_value);
        env.set_unknown_method_callback(python_method);
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_fuel(Some(tier_fuel(0)));
        env.add_function("range", range);
        env.add_filter("tojson", tojson);
        env.add_filter("trim", trim);
        env.add_filter("string", string);
        env.add_filter("join", join_filter);
        // jinja2's tests where Python's types decide otherwise than minijinja's.
        env.add_test("iterable", |v: &Value| {
            !matches!(v.kind(), ValueKind::None | ValueKind::Bool | ValueKind::Number)
        });
        env.add_test("sequence", |v: &Value| {
            matches!(
                v.kind(),
                ValueKind::String | ValueKind::Seq | ValueKind::Map | ValueKind::Undefined | ValueKind::Bytes
            )
        });
        env.add_test("number", |v: &Value| matches!(v.kind(), ValueKind::Number | ValueKind::Bool));
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", move |fmt: &str| -> Result<String, Error> {
            clock::strftime(&clock::now_local(utc_offset), fmt)
                .map_err(|d| Error::new(ErrorKind::InvalidOperation, format!("no exact Python form: {d}")))
        });
        env.add_template_owned(NAME, rewrite_generation(source)).map_err(|e| failure(&e))?;
        let tiers: [OnceLock<Environment<'static>>; TIERS] = std::array::from_fn(|_| OnceLock::new());
        let _ = tiers[0].set(env);
        Ok(ChatTemplate { tiers })
    }

    /// Render with `context` (a map of the template's variables), under the
    /// limits for its size ([`Limits::for_size`]).
    pub fn render(&self, context: Value) -> Result<String, RenderFailure> {
        let limits = Limits::for_size(context_size(&context));
        self.render_limited(context, limits)
    }

    /// Render with `context` under `limits` (its fuel is rounded up to a tier).
    ///
    /// The render runs on a stack of its own, sized by its fuel: a template
    /// can nest a value one level per fuel (`{% set ns.l = [[ns.l]] %}` in a
    /// loop), and minijinja drops a nested value recursively, one call per
    /// level. The stack is reserved address space, used as far as needed.
    pub fn render_limited(&self, context: Value, limits: Limits) -> Result<String, RenderFailure> {
        let k = tier_of(limits.fuel);
        let stack = (tier_fuel(k) as usize).saturating_mul(STACK_PER_FUEL).saturating_add(1 << 20);
        if stacker::remaining_stack().is_some_and(|left| left >= stack) {
            return self.render_in_tier(context, limits, k); // this thread's stack is deep enough
        }
        // A stack of its own. Reserving it can fail (an address-space limit):
        // that is an error of this render, never a panic (the address space
        // is tried first; a panic of the render itself goes on unwinding).
        let no_stack = || {
            Err(RenderFailure::Limit(format!(
                "no memory for the render's stack ({} MiB of address space)",
                stack >> 20
            )))
        };
        if !address_space_for(stack) {
            return no_stack();
        }
        let started = std::cell::Cell::new(false);
        let run = std::panic::AssertUnwindSafe(|| {
            stacker::grow(stack, || {
                started.set(true);
                self.render_in_tier(context, limits, k)
            })
        });
        match std::panic::catch_unwind(run) {
            Ok(out) => out,
            Err(payload) if started.get() => std::panic::resume_unwind(payload),
            Err(_) => no_stack(),
        }
    }

    fn render_in_tier(&self, context: Value, limits: Limits, k: usize) -> Result<String, RenderFailure> {
        let env = self.tiers[k].get_or_init(|| {
            let mut env = self.tiers[0].get().cloned().unwrap_or_default();
            env.set_fuel(Some(tier_fuel(k)));
            env
        });
        let t = env.get_template(NAME).map_err(|e| failure(&e))?;
        // A chat template's output is about the size of its context's texts:
        // room for that up front (what the context's size says, within the limit).
        let hint =
            (limits.output.saturating_sub(OUTPUT_FLOOR) / OUTPUT_PER_BYTE).saturating_add(4096).min(limits.output);
        let mut out = BoundedOutput { text: Vec::new(), limit: limits.output, over: false };
        if out.text.try_reserve(hint).is_err() {
            return Err(RenderFailure::Limit(format!("no memory for an output of {hint} bytes")));
        }
        let result = t.render_captured_to(context, &mut out).map(drop);
        match result {
            Ok(()) => {
                debug_assert!(std::str::from_utf8(&out.text).is_ok());
                // SAFETY: minijinja writes its output to an `io::Write` only
                // through `fmt::Write::write_str` (`write_all(s.as_bytes())`
                // of whole `str`s), and `BoundedOutput::write` takes each
                // buffer whole or not at all: the bytes are a concatenation
                // of `str`s, valid UTF-8 (checking them again cost 4% of a
                // session check).
                Ok(unsafe { String::from_utf8_unchecked(out.text) })
            }
            Err(_) if out.over => {
                Err(RenderFailure::Limit(format!("the output passed {} bytes (the output limit)", limits.output)))
            }
            Err(e) => Err(match failure(&e) {
                RenderFailure::Limit(m) if m.starts_with("out of fuel") => RenderFailure::Limit(format!(
                    "{m}: the render used its budget of {} fuel (about one per instruction, plus one per 64 bytes of data)",
                    tier_fuel(k)
                )),
                f => f,
            }),
        }
    }
}

/// Whether `bytes` of address space can be had now (allocated and freed at
/// once: an allocation this large is a fresh mapping, its pages never touched).
fn address_space_for(bytes: usize) -> bool {
    let Ok(layout) = std::alloc::Layout::from_size_align(bytes, 4096) else {
        return false;
    };
    // SAFETY: a layout of non-zero size (`bytes` is at least a MiB); the
    // block is freed with the same layout and never read or written.
    unsafe {
        let p = std::alloc::alloc(layout);
        if p.is_null() {
            return false;
        }
        std::alloc::dealloc(p, layout);
    }
    true
}

/// The render's output: refuses to grow past `limit`, and reports an
/// allocation failure as an error (never an abort).
struct BoundedOutput {
    text: Vec<u8>,
    limit: usize,
    over: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.text.len().saturating_add(buf.len()) > self.limit || self.text.try_reserve(buf.len()).is_err() {
            self.over = true;
            return Err(std::io::Error::other("the output limit"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `range(stop)`, `range(start, stop[, step])` as Python counts them; more
/// than [`MAX_RANGE`] items is a limit (as jinja2's sandbox refuses them).
fn range(lower: i64, upper: Option<i64>, step: Option<i64>) -> Result<Value, Error> {
    let (start, stop) = match upper {
        Some(u) => (lower, u),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    let len: i128 = match step {
        0 => return Err(Error::new(ErrorKind::InvalidOperation, "range() arg 3 must not be zero")),
        s if s > 0 => ((stop as i128 - start as i128) + (s as i128 - 1)).max(0) / s as i128,
        s => ((start as i128 - stop as i128) + (-(s as i128) - 1)).max(0) / -(s as i128),
    };
    if len > MAX_RANGE as i128 {
        return Err(limit(format!("range() of {len} items (at most {MAX_RANGE})")));
    }
    let (lower, upper, step) = (
        isize::try_from(lower).map_err(|_| limit("a range() bound past the machine's integers"))?,
        upper.map(isize::try_from).transpose().map_err(|_| limit("a range() bound past the machine's integers"))?,
        isize::try_from(step).map_err(|_| limit("a range() step past the machine's integers"))?,
    );
    minijinja::functions::range(lower, upper, Some(step))
}

/// `{% generation %}` / `{% endgeneration %}` (transformers' assistant-mask
/// tags) become `{% if true %}` / `{% endif %}`: the body renders unchanged
/// and the whitespace control of the tags is kept.
fn rewrite_generation(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at + 2..];
        let lead = tag.len() - tag.trim_start_matches(['-', '+']).len();
        let body = &tag[lead..];
        let spaces = body.len() - body.trim_start().len();
        let word = &body[spaces..];
        let (name, replacement) = if word.starts_with("endgeneration") {
            ("endgeneration", "endif")
        } else if word.starts_with("generation") {
            ("generation", "if true")
        } else {
            ("", "")
        };
        let after = &word[name.len()..];
        let closes = {
            let a = after.trim_start();
            let a = a.strip_prefix(['-', '+']).unwrap_or(a);
            a.starts_with("%}")
        };
        if !name.is_empty()
            && closes
            && after.starts_with(|c: char| c.is_whitespace() || c == '-' || c == '+' || c == '%')
        {
            out.push_str("{%");
            out.push_str(&tag[..lead + spaces]);
            out.push_str(replacement);
            rest = after;
        } else {
            out.push_str("{%");
            rest = tag;
        }
    }
    out.push_str(rest);
    out
}

/// `{{ value }}`: strings as they are, everything else as Python's `str()`.
fn format_value(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    let write_err = |_| Error::new(ErrorKind::WriteFailure, "the output failed");
    if let Some(s) = value.as_str() {
        return out.write_str(s).map_err(write_err);
    }
    let mut s = String::new();
    pyfmt::py_str_within(value, &mut s, bytes_left(state)).map_err(unsupported)?;
    out.write_str(&s).map_err(write_err)
}

fn string(state: &State, value: &Value) -> Result<Value, Error> {
    if value.kind() == ValueKind::String {
        return Ok(value.clone());
    }
    let mut s = String::new();
    pyfmt::py_str_within(value, &mut s, bytes_left(state)).map_err(unsupported)?;
    Ok(Value::from(s))
}

fn trim(state: &State, value: &Value, chars: Option<Value>) -> Result<Value, Error> {
    let s = string(state, value)?;
    let set = match &chars {
        Some(c) if c.is_none() => None,
        Some(c) => {
            Some(c.as_str().ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "trim(chars) needs a string"))?)
        }
        None => None,
    };
    Ok(Value::from(pyfmt::strip(s.as_str().unwrap_or_default(), set, true, true)))
}

fn raise_exception(state: &State, message: Value) -> Result<Value, Error> {
    let mut s = String::new();
    pyfmt::py_str_within(&message, &mut s, bytes_left(state)).map_err(unsupported)?;
    Err(Error::new(ErrorKind::InvalidOperation, format!("{RAISED}{s}")))
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(state: &State, value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.0.len() > NAMES.len() {
        return Err(Error::new(ErrorKind::TooManyArguments, "tojson takes at most 4 arguments"));
    }
    let mut given: [Option<Value>; 4] = Default::default();
    for (i, a) in args.0.iter().enumerate() {
        given[i] = Some(a.clone());
    }
    for (i, name) in NAMES.iter().enumerate() {
        if kwargs.has(name) {
            given[i] = Some(kwargs.get::<Value>(name)?);
        }
    }
    kwargs.assert_all_used()?;
    let bad = |what: &str| Error::new(ErrorKind::InvalidOperation, format!("no exact Python form: tojson {what}"));
    let mut opts = JsonOptions::default();
    if let Some(v) = &given[0] {
        opts.ensure_ascii = v.is_true();
    }
    if let Some(v) = &given[1] {
        opts.indent = match v.kind() {
            ValueKind::None | ValueKind::Undefined => None,
            ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
            ValueKind::Number if v.is_integer() => {
                let n = v.as_i64().ok_or_else(|| bad("indent"))?;
                Some(" ".repeat(n.clamp(0, 64) as usize))
            }
            _ => return Err(bad("indent")),
        };
    }
    if let Some(v) = &given[2] {
        if !v.is_none() && !v.is_undefined() {
            let parts: Vec<Value> = v.try_iter().map_err(|_| bad("separators"))?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                    opts.separators =
                        Some((a.as_str().unwrap_or_default().into(), b.as_str().unwrap_or_default().into()))
                }
                _ => return Err(bad("separators")),
            }
        }
    }
    if let Some(v) = &given[3] {
        opts.sort_keys = v.is_true();
    }
    pyfmt::dumps_within(value, &opts, bytes_left(state)).map(Value::from).map_err(unsupported)
}

/// The most bytes `str.format(format, ...)` may write beyond its arguments:
/// the sum of the numbers in its replacement fields' specs (widths and
/// precisions), or None when a spec nests a field (a width given as an
/// argument), which this does not bound.
fn format_widths(format: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut rest = format;
    while let Some(at) = rest.find('{') {
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('{') {
            rest = after; // `{{`: a literal brace
            continue;
        }
        let end = rest.find('}')?;
        let field = &rest[..end];
        if field.contains('{') {
            return None;
        }
        if let Some((_, spec)) = field.split_once(':') {
            for digits in spec.split(|c: char| !c.is_ascii_digit()).filter(|d| !d.is_empty()) {
                total = total.saturating_add(digits.parse::<u64>().unwrap_or(u64::MAX));
            }
        }
        total = total.saturating_add(64);
        rest = &rest[end + 1..];
    }
    Some(total)
}

/// jinja2's `join` filter: `d.join(str(x) for x in items)` (`attribute`: of
/// each item, a dotted path), its size checked against the fuel left as it
/// grows (minijinja's own does not bound the output of an empty joiner).
fn join_filter(state: &State, items: &Value, d: Option<&str>, attribute: Option<&str>) -> Result<Value, Error> {
    let sep = d.unwrap_or("");
    let cap = bytes_left(state);
    let mut out = String::new();
    for (i, item) in items.try_iter()?.enumerate() {
        state.consume_fuel(1)?;
        let item = match attribute {
            None => item,
            Some(path) => {
                let mut v = item;
                for part in path.split('.') {
                    v = match part.parse::<i64>() {
                        Ok(n) => v.get_item(&Value::from(n)),
                        Err(_) => v.get_attr(part),
                    }
                    .ok()
                    .filter(|x| !x.is_undefined())
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::InvalidOperation,
                            "no exact Python form: join(attribute=) of a missing attribute",
                        )
                    })?;
                }
                v
            }
        };
        if i > 0 {
            out.push_str(sep);
        }
        pyfmt::py_str_within(&item, &mut out, cap).map_err(unsupported)?;
        if out.len() > cap {
            return Err(limit(format!("a joined string of more than {cap} bytes (what the fuel left pays for)")));
        }
    }
    Ok(Value::from(out))
}

/// `sep.join(items)` as Python joins strings (anything but strings: a
/// TypeError there, so jinja2 decides); its size is checked against the fuel
/// left before it is built, and every item costs fuel.
fn join(state: &State, sep: &str, items: &Value) -> Result<Value, Error> {
    let cap = bytes_left(state);
    let mut parts: Vec<Value> = Vec::new();
    let mut total: usize = 0;
    for (i, item) in items.try_iter()?.enumerate() {
        state.consume_fuel(1)?;
        let s = item.as_str().ok_or_else(|| {
            Error::new(ErrorKind::InvalidOperation, "no exact Python form: str.join() of an item that is not a string")
        })?;
        total = total.saturating_add(s.len()).saturating_add(if i > 0 { sep.len() } else { 0 });
        if total > cap {
            return Err(limit(format!("a joined string of more than {cap} bytes (what the fuel left pays for)")));
        }
        parts.push(item);
    }
    let mut out = String::new();
    out.try_reserve(total).map_err(|_| limit(format!("a joined string of {total} bytes (no memory for it)")))?;
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        out.push_str(p.as_str().unwrap_or_default());
    }
    state.consume_fuel((total / 64) as u64)?;
    Ok(Value::from(out))
}

/// Python `str` methods whose results depend on Python's whitespace rules;
/// everything else goes to `minijinja-contrib`'s `pycompat`.
fn python_method(state: &mut State, value: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        let opt_str = |i: usize| -> Result<Option<&str>, Error> {
            match args.get(i) {
                None => Ok(None),
                Some(v) if v.is_none() => Ok(None),
                Some(v) => v.as_str().map(Some).ok_or_else(|| {
                    Error::new(ErrorKind::InvalidOperation, format!("{method}() needs a string argument"))
                }),
            }
        };
        let opt_int = |i: usize| -> Result<i64, Error> {
            match args.get(i) {
                None => Ok(-1),
                Some(v) => v
                    .as_i64()
                    .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, format!("{method}() needs an integer"))),
            }
        };
        let strings = |v: Vec<String>| Value::from(v.into_iter().map(Value::from).collect::<Vec<_>>());
        match method {
            "strip" | "lstrip" | "rstrip" if args.len() <= 1 => {
                let (l, r) = (method != "rstrip", method != "lstrip");
                return Ok(Value::from(pyfmt::strip(s, opt_str(0)?, l, r)));
            }
            "split" | "rsplit" if args.len() <= 2 => {
                let parts = pyfmt::split(s, opt_str(0)?, opt_int(1)?, method == "rsplit").map_err(unsupported)?;
                return Ok(strings(parts));
            }
            "splitlines" if args.len() <= 1 => {
                let keep = args.first().is_some_and(|v| v.is_true());
                return Ok(strings(pyfmt::splitlines(s, keep)));
            }
            "isspace" if args.is_empty() => {
                return Ok(Value::from(!s.is_empty() && s.chars().all(pyfmt::is_py_space)));
            }
            "join" if args.len() == 1 => return join(state, s, &args[0]),
            "format" => {
                // widths and precisions are paid for before the text is made
                let cap = bytes_left(state) as u64;
                match format_widths(s) {
                    Some(n) if n < cap => state.consume_fuel(n / 64)?,
                    Some(n) => {
                        return Err(limit(format!(
                            "str.format() asking for {n} bytes of padding (more than the fuel left pays for)"
                        )))
                    }
                    None => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            "no exact Python form: str.format() with a nested replacement field",
                        ))
                    }
                }
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, ctx: Value) -> Result<String, RenderFailure> {
        ChatTemplate::new(src, 0)?.render(ctx)
    }

    #[test]
    fn python_forms() {
        let ctx = map([
            ("n", Value::from(())),
            ("b", Value::from(true)),
            ("l", Value::from(vec![Value::from("a"), Value::from(1.0)])),
            ("s", Value::from("  x y \u{1c}")),
        ]);
        assert_eq!(
            render("{{ n }} {{ b }} {{ l }} {{ l|string }}", ctx.clone()).unwrap(),
            "None True ['a', 1.0] ['a', 1.0]"
        );
        assert_eq!(render("[{{ s.strip() }}]{{ s.split()|length }}", ctx.clone()).unwrap(), "[x y]2");
        assert_eq!(
            render("{{ l|tojson }}|{{ {'k': '<é>'}|tojson(ensure_ascii=True) }}", ctx).unwrap(),
            "[\"a\", 1.0]|{\"k\": \"<\\u00e9>\"}"
        );
    }

    #[test]
    fn python_type_tests() {
        let ctx = map([("n", Value::from(())), ("l", Value::from(vec![1]))]);
        let src =
            "{{ n is iterable }} {{ l is iterable }} {{ u is iterable }} {{ true is number }} {{ u is sequence }}";
        assert_eq!(render(src, ctx).unwrap(), "False True True True True");
    }

    #[test]
    fn whitespace_control_and_blocks() {
        let src = "{% for x in xs %}\n  {%- generation %}\n{{ x }}{% endgeneration %}\n{% if loop.last %}!{% break %}{% endif %}\n{% endfor %}";
        let ctx = map([("xs", Value::from(vec![1, 2]))]);
        assert_eq!(render(src, ctx).unwrap(), "12!");
    }

    #[test]
    fn raise_and_unsupported() {
        match render("{{ raise_exception('no system') }}", Value::from(())) {
            Err(RenderFailure::Raised(m)) => assert_eq!(m, "no system"),
            other => panic!("{other:?}"),
        }
        let ctx = map([("l", Value::from(vec![1]))]);
        assert!(matches!(render("{{ l.append(2) }}", ctx), Err(RenderFailure::Unsupported(_))));
        assert!(matches!(ChatTemplate::new("{% if %}", 0), Err(RenderFailure::Unsupported(_))));
    }

    #[test]
    fn generation_rewrite_leaves_other_tags() {
        assert_eq!(rewrite_generation("{%- generation -%}a{%+ endgeneration %}"), "{%- if true -%}a{%+ endif %}");
        assert_eq!(
            rewrite_generation("{% generations %}{% set generation = 1 %}"),
            "{% generations %}{% set generation = 1 %}"
        );
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    fn render(src: &str) -> Result<String, RenderFailure> {
        let src = src.to_string();
        // the stack of the threads that render (rayon's pools, Python's)
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || {
                ChatTemplate::new(&src, 0)?.render(map([("messages", Value::from(vec![Value::from("hi")]))]))
            })
            .unwrap()
            .join()
            .unwrap()
    }

    fn is_limit(src: &str) -> String {
        match render(src) {
            Err(RenderFailure::Limit(m)) => m,
            other => panic!("{src}: {other:?}"),
        }
    }

    /// Each hostile template ends quickly in a Limit, whatever it would build.
    #[test]
    fn hostile_templates_hit_a_limit() {
        for (src, says) in [
            // string doubling: `~` checks its result against the fuel before it allocates
            ("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", "out of fuel"),
            ("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}", "out of fuel"),
            // nested loops: the instruction budget
            ("{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}", "out of fuel"),
            ("{{ 'a' * 10**9 }}", "out of fuel"),
            ("{{ '{:1000000000}'.format('x') }}", "str.format()"),
            ("{{ '{:.1000000000000}'.format(1.5) }}", "str.format()"),
            ("{{ '%1000000000s'|format('x') }}", "out of fuel"),
            ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion"),
            ("{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}", "recursion"),
            ("{{ range(10**9)|length }}", "range() of 1000000000 items"),
            ("{% for i in range(5, 100006) %}{% endfor %}", "range() of 100001 items"),
            // deep nesting: bounded by the fuel, dropped on a stack sized by it
            ("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% for j in range(100) %}{% set ns.l = [[[ns.l]]] %}{% endfor %}{% endfor %}x", "out of fuel"),
            ("{{ ([messages[0] * 10000] * 100000000)|join }}", "joined string"),
            ("{{ ''.join([messages[0] * 10000] * 100000000) }}", "joined string"),
            ("{{ ([messages[0] * 10000] * 100000000)|list|tojson }}", "out of fuel"),
            // printing a list that holds one large string many times
            ("{% set ns = namespace(l=[messages[0] * 1000000]) %}{% for i in range(12) %}{% set ns.l = (ns.l + ns.l)|list %}{% endfor %}{{ ns.l }}", "bytes"),
            ("{% set ns = namespace(l=[messages[0] * 1000000]) %}{% for i in range(12) %}{% set ns.l = (ns.l + ns.l)|list %}{% endfor %}{{ ns.l|string }}", "bytes"),
            ("{% set ns = namespace(l=[messages[0] * 1000000]) %}{% for i in range(12) %}{% set ns.l = (ns.l + ns.l)|list %}{% endfor %}{{ ns.l|tojson }}", "bytes"),
            // a tree of 2**60 leaves, all shared: its JSON is checked as it grows
            ("{% set ns = namespace(l=messages) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l|tojson(indent=64) }}", "bytes"),
            ("{% set ns = namespace(l=messages) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}", "bytes"),
        ] {
            let m = is_limit(src);
            assert!(m.contains(says), "{src}: {m}");
        }
    }

    #[test]
    fn limits_grow_with_the_context() {
        let small = Limits::for_size(100);
        assert_eq!(small, Limits { fuel: FUEL_FLOOR, output: OUTPUT_FLOOR + 1600 });
        let big = Limits::for_size(10 << 20);
        assert!(big.fuel >= FUEL_PER_BYTE * (10 << 20) && big.fuel < 2 * FUEL_PER_BYTE * (10 << 20));
        assert_eq!(tier_fuel(tier_of(big.fuel)), big.fuel);
        let ctx = map([("messages", Value::from(vec![map([("content", Value::from("abcd"))])]))]);
        assert_eq!(context_size(&ctx), 16 + 8 + 16 + 16 + 7 + 4);
        // maps and lists of other types are counted as the renderer's own are
        let other = Value::from(std::collections::BTreeMap::from([(
            "messages",
            Value::from(std::collections::VecDeque::from([Value::from(std::collections::BTreeMap::from([(
                "content",
                Value::from("abcd"),
            )]))])),
        )]));
        assert_eq!(context_size(&other), context_size(&ctx));
    }

    #[test]
    fn the_output_limit() {
        let t = ChatTemplate::new("{% for i in range(1000) %}{{ s }}{% endfor %}", 0).unwrap();
        let ctx = map([("s", Value::from("x".repeat(1000)))]);
        let small = Limits { fuel: FUEL_FLOOR, output: 10_000 };
        match t.render_limited(ctx.clone(), small) {
            Err(RenderFailure::Limit(m)) => assert!(m.contains("output passed 10000 bytes"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.render(ctx).unwrap().len(), 1_000_000);
    }

    #[test]
    fn ordinary_templates_are_unaffected() {
        let ctx = map([("messages", Value::from(vec![Value::from("a b"), Value::from("c")]))]);
        let t = ChatTemplate::new(
            "{% for m in messages %}{{ m.split()|join(',') }}{{ ' '.join(m.split()) }}{{ '{:>4}|{:.2f}'.format(m, 1.5) }}{% endfor %}{{ range(3)|list }}{{ range(10, 0, -3)|list }}",
            0,
        )
        .unwrap();
        assert_eq!(t.render(ctx).unwrap(), "a,ba b a b|1.50cc   c|1.50[0, 1, 2][10, 7, 4, 1]");
        // Python's join refuses items that are not strings: jinja2 decides
        let ctx = map([("l", Value::from(vec![1, 2]))]);
        assert!(matches!(
            ChatTemplate::new("{{ ','.join(l) }}", 0).unwrap().render(ctx.clone()),
            Err(RenderFailure::Unsupported(_))
        ));
        assert_eq!(ChatTemplate::new("{{ l|join(', ') }}", 0).unwrap().render(ctx).unwrap(), "1, 2");
    }
}
