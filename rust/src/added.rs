//! Added tokens found in a text as `tokenizers` finds them before encoding:
//! two passes, the tokens that are not normalized in the raw text, then the
//! normalized ones inside the text between, leftmost-longest in each. The
//! encoder (`crate::encoder`) and the score job's split of rendered chat text
//! (`tito_fast.tokenizer.added` through the bindings) both use this.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

/// Added tokens matched in one pass.
#[derive(Debug, Clone)]
struct Pass {
    matcher: AhoCorasick,
    ids: Vec<u32>,
}

impl Pass {
    fn new(tokens: &[(String, u32)]) -> Result<Option<Self>, String> {
        if tokens.is_empty() {
            return Ok(None);
        }
        if let Some((t, id)) = tokens.iter().find(|(t, _)| t.is_empty()) {
            return Err(format!("added token {id} is empty ({t:?})"));
        }
        let matcher = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(tokens.iter().map(|(t, _)| t.as_str()))
            .map_err(|e| format!("cannot build the added-token matcher: {e}"))?;
        Ok(Some(Pass { matcher, ids: tokens.iter().map(|&(_, id)| id).collect() }))
    }
}

/// A piece of text between added tokens, or an added token's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    /// An added token.
    Token(u32),
    /// Non-empty text between added tokens.
    Text(&'a str),
}

/// The added tokens of a tokenizer, in its two passes (see the module doc).
#[derive(Debug, Clone)]
pub struct AddedTokens {
    raw: Option<Pass>,
    normalized: Option<Pass>,
}

impl AddedTokens {
    /// `raw` / `normalized`: (content, id) of the tokens matched before / after normalizing.
    ///
    /// # Errors
    /// A message when an added token is empty.
    pub fn new(raw: &[(String, u32)], normalized: &[(String, u32)]) -> Result<Self, String> {
        Ok(AddedTokens { raw: Pass::new(raw)?, normalized: Pass::new(normalized)? })
    }

    /// The first pass: call `f` on the tokens that are not normalized and the
    /// texts between them, in order (`f` gets each part's byte offset in `text`).
    ///
    /// # Errors
    /// The first error `f` returns.
    pub fn split_raw<'a, E>(
        &self,
        text: &'a str,
        f: &mut dyn FnMut(usize, Part<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        split(self.raw.as_ref(), text, 0, f)
    }

    /// The second pass over one text of the first: the normalized tokens and the texts between
    /// (`base` is `text`'s offset, added to the offsets `f` gets).
    ///
    /// # Errors
    /// The first error `f` returns.
    pub fn split_normalized<'a, E>(
        &self,
        text: &'a str,
        base: usize,
        f: &mut dyn FnMut(usize, Part<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        split(self.normalized.as_ref(), text, base, f)
    }

    /// Both passes: the parts in order, and the first-pass texts in which the
    /// second pass found tokens (the tokenizer matches those in the normalized
    /// text, so a caller that does not normalize must check the text is unchanged by it).
    #[must_use]
    pub fn split_both<'a>(&self, text: &'a str) -> (Vec<Part<'a>>, Vec<&'a str>) {
        let mut parts = Vec::new();
        let mut checked = Vec::new();
        let _ = self.split_raw::<()>(text, &mut |_, part| {
            match part {
                Part::Token(_) => parts.push(part),
                Part::Text(t) => {
                    let before = parts.len();
                    let _ = self.split_normalized::<()>(t, 0, &mut |_, inner| {
                        parts.push(inner);
                        Ok(())
                    });
                    if parts[before..].iter().any(|p| matches!(p, Part::Token(_))) {
                        checked.push(t);
                    }
                }
            }
            Ok(())
        });
        (parts, checked)
    }
}

fn split<'a, E>(
    pass: Option<&Pass>,
    text: &'a str,
    base: usize,
    f: &mut dyn FnMut(usize, Part<'a>) -> Result<(), E>,
) -> Result<(), E> {
    let Some(pass) = pass else {
        return if text.is_empty() { Ok(()) } else { f(base, Part::Text(text)) };
    };
    let mut last = 0;
    for m in pass.matcher.find_iter(text) {
        if m.start() > last {
            f(base + last, Part::Text(&text[last..m.start()]))?;
        }
        f(base + m.start(), Part::Token(pass.ids[m.pattern().as_usize()]))?;
        last = m.end();
    }
    if last < text.len() {
        f(base + last, Part::Text(&text[last..]))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> AddedTokens {
        let raw = [("<|a|>".to_string(), 1000), ("<|a|>x".to_string(), 1001)];
        let norm = [("<t>".to_string(), 1002)];
        AddedTokens::new(&raw, &norm).unwrap()
    }

    #[test]
    fn longest_first_in_two_passes() {
        let (parts, checked) = toy().split_both("he<|a|>xhe<t>h<|a|>");
        assert_eq!(
            parts,
            [
                Part::Text("he"),
                Part::Token(1001),
                Part::Text("he"),
                Part::Token(1002),
                Part::Text("h"),
                Part::Token(1000)
            ]
        );
        assert_eq!(checked, ["he<t>h"]);
        let (parts, checked) = toy().split_both("");
        assert!(parts.is_empty() && checked.is_empty());
    }

    #[test]
    fn empty_tokens_are_refused() {
        assert!(AddedTokens::new(&[(String::new(), 1)], &[]).is_err());
    }
}
