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

pub mod clock;
pub mod pyfmt;

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior, Value};

use pyfmt::{JsonOptions, Unsupported};

const NAME: &str = "chat_template";
/// Errors raised by the template itself (`raise_exception`) carry this prefix.
const RAISED: &str = "raise_exception: ";

/// Why a render failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderFailure {
    /// The template called `raise_exception(message)`: jinja2 fails the same way.
    Raised(String),
    /// Something this renderer does not do as jinja2 does (or another error):
    /// render with jinja2 instead.
    Unsupported(String),
}

impl std::fmt::Display for RenderFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenderFailure::Raised(m) => write!(f, "the template raised: {m}"),
            RenderFailure::Unsupported(m) => f.write_str(m),
        }
    }
}

fn failure(e: &Error) -> RenderFailure {
    let detail = e.detail().unwrap_or_default();
    if let Some(msg) = detail.strip_prefix(RAISED) {
        return RenderFailure::Raised(msg.to_string());
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
    Error::new(ErrorKind::InvalidOperation, format!("no exact Python form: {}", e.0))
}

/// A template map (keys in insertion order, as a Python dict keeps them).
pub fn map<K: Into<Value>>(pairs: impl IntoIterator<Item = (K, Value)>) -> Value {
    Value::from(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect::<indexmap::IndexMap<Value, Value>>())
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
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
        env.set_recursion_limit(500);
        env.add_filter("tojson", tojson);
        env.add_filter("trim", trim);
        env.add_filter("string", string);
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
        Ok(ChatTemplate { env })
    }

    /// Render with `context` (a map of the template's variables).
    pub fn render(&self, context: Value) -> Result<String, RenderFailure> {
        let t = self.env.get_template(NAME).map_err(|e| failure(&e))?;
        t.render(context).map_err(|e| failure(&e))
    }
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
fn format_value(out: &mut Output, _state: &mut State, value: &Value) -> Result<(), Error> {
    let write_err = |_| Error::new(ErrorKind::WriteFailure, "the output failed");
    if let Some(s) = value.as_str() {
        return out.write_str(s).map_err(write_err);
    }
    let mut s = String::new();
    pyfmt::py_str(value, &mut s).map_err(unsupported)?;
    out.write_str(&s).map_err(write_err)
}

fn string(value: &Value) -> Result<Value, Error> {
    if value.kind() == ValueKind::String {
        return Ok(value.clone());
    }
    let mut s = String::new();
    pyfmt::py_str(value, &mut s).map_err(unsupported)?;
    Ok(Value::from(s))
}

fn trim(value: &Value, chars: Option<Value>) -> Result<Value, Error> {
    let s = string(value)?;
    let set = match &chars {
        Some(c) if c.is_none() => None,
        Some(c) => {
            Some(c.as_str().ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "trim(chars) needs a string"))?)
        }
        None => None,
    };
    Ok(Value::from(pyfmt::strip(s.as_str().unwrap_or_default(), set, true, true)))
}

fn raise_exception(message: Value) -> Result<Value, Error> {
    let mut s = String::new();
    pyfmt::py_str(&message, &mut s).map_err(unsupported)?;
    Err(Error::new(ErrorKind::InvalidOperation, format!("{RAISED}{s}")))
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
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
    pyfmt::dumps(value, &opts).map(Value::from).map_err(unsupported)
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
