//! Messages and roles in an id sequence, from a chat format's message
//! markers: the one owner of the rule `tito_fast.compare.roles.RoleTracker`
//! applies (its Python class holds the format's markers and calls this).
//!
//! A marker either fixes the role (GLM `<|user|>`), or is followed by the
//! role's name up to a terminator (ChatML `<|im_start|>` ... `\n`), or opens
//! a message inside another block (Qwen's `<tool_response>` inside a user
//! block): a block holding nothing but its header before such a marker
//! becomes that message. Role names are read by decoding at most
//! [`PROBE_IDS`] ids after the marker, stripped and lower-cased as Python's
//! `str.strip().lower()` does, with the aliases of [`ALIASES`].

use std::collections::HashMap;

use crate::segment::IdSet;

/// The roles a table names; any other name reads as "unknown".
pub const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];
/// Other names of the roles.
pub const ALIASES: [(&str, &str); 5] =
    [("ai", "assistant"), ("model", "assistant"), ("observation", "tool"), ("ipython", "tool"), ("function", "tool")];
/// Ids decoded after a marker to read the role name.
pub const PROBE_IDS: usize = 8;
/// The role of a name that is none of [`ROLES`] (nor an alias).
pub const UNKNOWN: &str = "unknown";

/// What ends the role name after a named marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// A token id (Llama 3's `<|end_header_id|>`).
    Id(u32),
    /// A text (ChatML's "\n").
    Text(String),
}

/// A format's markers, by token id.
#[derive(Debug, Clone, Default)]
pub struct Markers {
    /// Marker id -> the role it fixes.
    fixed: HashMap<u32, String>,
    /// Marker id -> what ends the role name after it.
    named: HashMap<u32, Term>,
    /// Marker id -> the role of the message it opens inside a block.
    inner: HashMap<u32, String>,
    /// Every marker id (the O(n) pass reads this set, not the maps).
    all: IdSet,
}

/// Where each message starts in an id sequence, and its role (a name the
/// markers hold, or one of [`ROLES`] and [`UNKNOWN`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table<'a> {
    pub starts: Vec<usize>,
    pub roles: Vec<&'a str>,
}

/// A short id run (at most two ids) with what it is read after, as a cache key.
type Short = (u32, u32, u32, u8);

fn short(head: u32, ids: &[u32]) -> Option<Short> {
    match *ids {
        [] => Some((head, u32::MAX, u32::MAX, 0)),
        [a] => Some((head, a, u32::MAX, 1)),
        [a, b] => Some((head, a, b, 2)),
        _ => None,
    }
}

impl Markers {
    /// `fixed`: marker id -> the role it fixes; `named`: marker id -> what
    /// ends the role name after it; `inner`: marker id -> the role of the
    /// message it opens inside a block.
    #[must_use]
    pub fn new(fixed: HashMap<u32, String>, named: HashMap<u32, Term>, inner: HashMap<u32, String>) -> Self {
        let ids: Vec<u32> = fixed.keys().chain(named.keys()).chain(inner.keys()).copied().collect();
        Self { fixed, named, inner, all: IdSet::new(&ids) }
    }

    /// The markers that fix a role.
    #[must_use]
    pub fn fixed(&self) -> &HashMap<u32, String> {
        &self.fixed
    }

    /// The markers followed by a role name.
    #[must_use]
    pub fn named(&self) -> &HashMap<u32, Term> {
        &self.named
    }

    /// The markers of messages inside a block.
    #[must_use]
    pub fn inner(&self) -> &HashMap<u32, String> {
        &self.inner
    }

    /// The positions of every marker in `ids` (the O(n) pass).
    #[must_use]
    pub fn positions(&self, ids: &[u32]) -> Vec<usize> {
        ids.iter().enumerate().filter(|(_, &id)| self.all.contains(id)).map(|(p, _)| p).collect()
    }

    /// The table of `ids`, whose markers sit at `positions` ([`Markers::positions`]);
    /// `decode(ids)` gives the text of a few ids (the tokenizer's decode).
    ///
    /// # Errors
    /// The first error `decode` returns.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use tito_fast::roles::{Markers, Term};
    /// let m = Markers::new(HashMap::new(), HashMap::from([(1, Term::Text("\n".into()))]), HashMap::new());
    /// let ids = [1, 10, 11, 5, 1, 12, 11];
    /// let names = |ids: &[u32]| -> Result<String, ()> {
    ///     Ok(ids.iter().map(|&i| match i { 10 => "user", 11 => "\n", 12 => "assistant", _ => "x" }).collect())
    /// };
    /// let t = m.table(&ids, &m.positions(&ids), names).unwrap();
    /// assert_eq!((t.starts, t.roles), (vec![0, 4], vec!["user", "assistant"]));
    /// ```
    pub fn table<E>(
        &self,
        ids: &[u32],
        positions: &[usize],
        mut decode: impl FnMut(&[u32]) -> Result<String, E>,
    ) -> Result<Table<'_>, E> {
        let n = ids.len();
        let mut t = Table::default();
        // what short runs read as (role names repeat): a role by its marker and
        // name ids, whether a header is only a header by its block's role and ids
        let mut names: HashMap<Short, &'static str> = HashMap::new();
        let mut headers: HashMap<(&str, Short), bool> = HashMap::new();
        let mut last_inner = false; // whether the last block started was opened by an inner marker
        for &p in positions {
            let marker = ids[p];
            let probe = &ids[p + 1..(p + 1 + PROBE_IDS).min(n)];
            if let Some(role) = self.inner.get(&marker) {
                if let (Some(&start), false) = (t.starts.last(), last_inner) {
                    let header = &ids[start + 1..p];
                    let last_role: &str = t.roles.last().copied().unwrap_or(UNKNOWN);
                    let key = short(0, header).map(|k| (last_role, k));
                    let only = match key.and_then(|k| headers.get(&k)) {
                        Some(&only) => only,
                        None => {
                            let only = holds_only_header(&decode(header)?, last_role);
                            if let Some(k) = key {
                                headers.insert(k, only);
                            }
                            only
                        }
                    };
                    if only {
                        *t.roles.last_mut().expect("a block was started") = role.as_str();
                        continue; // the block holds nothing but this message
                    }
                }
                t.starts.push(p);
                t.roles.push(role.as_str());
                last_inner = true;
                continue;
            }
            t.starts.push(p);
            last_inner = false;
            if let Some(role) = self.fixed.get(&marker) {
                t.roles.push(role.as_str());
                continue;
            }
            let role = match &self.named[&marker] {
                Term::Id(term) => {
                    let name = probe.iter().position(|i| i == term).map_or(probe, |k| &probe[..k]);
                    let key = short(marker, name);
                    match key.and_then(|k| names.get(&k)) {
                        Some(&role) => role,
                        None => {
                            let role = normalise_role(&decode(name)?);
                            if let Some(k) = key {
                                names.insert(k, role);
                            }
                            role
                        }
                    }
                }
                Term::Text(term) => named_role(marker, probe, term, &mut decode, &mut names)?,
            };
            t.roles.push(role);
        }
        Ok(t)
    }
}

/// The role a marker names before the text `term`, read from `probe` (the
/// ids after it): the text of its shortest prefix that holds `term`, up to
/// `term` (all of it when none does). `known`: the roles of shortest
/// prefixes of at most two ids already read (a prefix holds `term` or not
/// by its own ids, so a cached one is the shortest for every probe it starts).
fn named_role<E>(
    marker: u32,
    probe: &[u32],
    term: &str,
    decode: &mut impl FnMut(&[u32]) -> Result<String, E>,
    known: &mut HashMap<Short, &'static str>,
) -> Result<&'static str, E> {
    for k in 1..=probe.len().min(2) {
        if let Some(&role) = short(marker, &probe[..k]).and_then(|key| known.get(&key)) {
            return Ok(role);
        }
    }
    for k in 1..=probe.len() {
        let text = decode(&probe[..k])?;
        if let Some(at) = text.find(term) {
            let role = normalise_role(&text[..at]);
            if let Some(key) = short(marker, &probe[..k]) {
                known.insert(key, role);
            }
            return Ok(role);
        }
    }
    Ok(normalise_role(&decode(probe)?))
}

/// Python's `str.isspace` for one character (Rust's White_Space, plus the
/// information separators U+001C..U+001F, which Python strips too).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `text.strip().lower()` as Python computes it.
fn stripped_lower(text: &str) -> std::borrow::Cow<'_, str> {
    let text = text.trim_matches(py_space);
    if text.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) {
        std::borrow::Cow::Owned(text.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The role a name says (aliases resolved), or "unknown".
#[must_use]
pub fn normalise_role(text: &str) -> &'static str {
    let name = stripped_lower(text);
    let name = ALIASES.iter().find(|(alias, _)| *alias == name).map_or(&*name, |(_, role)| role);
    ROLES.iter().find(|r| **r == name).copied().unwrap_or(UNKNOWN)
}

/// Whether `text` (a block's text after its marker) is nothing but the
/// header of a block of `role`: empty, the role's name or an alias of it.
#[must_use]
pub fn holds_only_header(text: &str, role: &str) -> bool {
    // lower-casing shortens a text at most threefold (the Kelvin sign's three
    // bytes become "k"): a longer text is none of the names
    let longest = ALIASES.iter().map(|(alias, _)| alias.len()).chain([role.len()]).max().unwrap_or(0);
    if text.trim_matches(py_space).len() > 3 * longest {
        return false;
    }
    let header = stripped_lower(text);
    header.is_empty() || header == role || ALIASES.iter().any(|(alias, r)| *r == role && *alias == header)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ids: 1 = <|im_start|>, 2 = <tool_response>, 3 = "\n", 10.. = words
    fn chatml() -> Markers {
        Markers::new(HashMap::new(), HashMap::from([(1, Term::Text("\n".into()))]), HashMap::from([(2, "tool".into())]))
    }

    fn words(ids: &[u32]) -> Result<String, ()> {
        Ok(ids
            .iter()
            .map(|&i| match i {
                3 => "\n",
                10 => "user",
                11 => " Model ",
                12 => "system",
                13 => "\u{1c}tool",
                2 => "<tool_response>",
                _ => "word ",
            })
            .collect())
    }

    #[test]
    fn names_aliases_and_inner_messages() {
        let m = chatml();
        // user block holding only a tool response, then an assistant (alias "model"), then a user
        // block with text before its tool response
        let ids = [1, 10, 3, 2, 99, 1, 11, 3, 99, 1, 10, 3, 99, 2, 99];
        let t = m.table(&ids, &m.positions(&ids), words).unwrap();
        assert_eq!(t.starts, vec![0, 5, 9, 13]);
        assert_eq!(t.roles, vec!["tool", "assistant", "user", "tool"]);
    }

    #[test]
    fn python_whitespace_and_unknown_names() {
        assert_eq!(normalise_role("\u{1c}tool\u{1f}"), "tool");
        assert_eq!(normalise_role("  SYSTEM\n"), "system");
        assert_eq!(normalise_role("developer"), UNKNOWN);
        assert_eq!(normalise_role(""), UNKNOWN);
        assert!(holds_only_header(" user\n", "user"));
        assert!(holds_only_header("", "unknown"));
        assert!(holds_only_header("Observation", "tool"));
        assert!(!holds_only_header("user hi", "user"));
        assert!(holds_only_header("\u{212a}\u{212a}", "kk")); // the Kelvin sign lower-cases to "k"
        assert!(!holds_only_header(&"x".repeat(40), "user"));
    }

    #[test]
    fn term_ids_and_the_end_of_the_sequence() {
        let m = Markers::new(HashMap::from([(4, "system".into())]), HashMap::from([(1, Term::Id(3))]), HashMap::new());
        let ids = [4, 99, 1, 12, 3, 99, 1, 10];
        let t = m.table(&ids, &m.positions(&ids), words).unwrap();
        assert_eq!(t.starts, vec![0, 2, 6]);
        assert_eq!(t.roles, vec!["system", "system", "user"]);
        let m = chatml();
        let t = m.table(&[1], &[0], words).unwrap();
        assert_eq!(t.roles, vec![UNKNOWN]);
    }

    #[test]
    fn decode_errors_pass_through() {
        let m = chatml();
        let ids = [1, 10, 3];
        assert_eq!(m.table(&ids, &[0], |_: &[u32]| Err::<String, _>("no")), Err("no"));
    }
}
