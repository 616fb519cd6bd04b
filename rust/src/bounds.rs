//! Which message of a conversation each byte of its render belongs to: the
//! one owner of the attribution rule (`compare.messages.MessageBounds` is
//! this type; the score job and the chains call it).
//!
//! For a template that renders append-only, the render of `messages[:k]` is
//! a prefix of the render of `messages[:k+1]`, so message k holds the bytes
//! between the two renders' lengths. [`MessageBounds`] asks a [`Prefixes`]
//! for the renders it needs (a search per byte, each prefix rendered once).
//! Where a prefix render is not a prefix of the whole, or the template
//! refuses it, the prefix is rendered as history (followed by a user message
//! holding [`SENTINEL`]) and ends where that render departs from the whole,
//! or where the sentinel's block opens if that comes first. Where the render
//! of no message is not a prefix of the whole (a default system prompt that
//! the first message replaces), what comes before the first message's own
//! block is outside the messages.

use std::collections::HashMap;
use std::sync::Arc;

/// A render's text, shared without a copy (a `String` or `Vec<u8>` in an `Arc`).
pub type Text = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// The content of the user message a history render puts after a prefix.
pub const SENTINEL: &str = "TITO_FAST_HISTORY_SENTINEL";

/// The renders of a conversation's message prefixes.
pub trait Prefixes {
    /// Why a search stopped before its answer (the renderer could not say).
    type Stop;

    /// The render of the first `k` messages (`history`: followed by a user
    /// message holding [`SENTINEL`]); `Ok(None)` when the template refuses it.
    ///
    /// # Errors
    /// `Self::Stop` when the search must stop.
    fn render(&mut self, k: usize, history: bool) -> Result<Option<Vec<u8>>, Self::Stop>;

    /// Whether history renders are available.
    fn has_history(&self) -> bool;
}

/// Where each of `n` messages starts in `text`, the render of all of them
/// (see the module doc). Prefix lengths are remembered once known.
#[derive(Clone)]
pub struct MessageBounds {
    n: usize,
    text: Text,
    openers: Vec<Vec<u8>>,
    /// The template's own preamble belongs to the first message (it is a
    /// system message, or its role is unknown).
    first_owns_preamble: bool,
    lens: HashMap<usize, usize>,
}

impl std::fmt::Debug for MessageBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageBounds")
            .field("n", &self.n)
            .field("text_bytes", &self.text().len())
            .field("openers", &self.openers)
            .field("lens", &self.lens)
            .finish_non_exhaustive()
    }
}

impl MessageBounds {
    /// `openers`: the strings that open a rendered message block (the
    /// template's role markers); `first_role`: the first message's role.
    #[must_use]
    pub fn new(n: usize, text: Text, openers: Vec<Vec<u8>>, first_role: Option<&str>) -> Self {
        let mut lens = HashMap::new();
        lens.insert(n, (*text).as_ref().len());
        let openers = openers.into_iter().filter(|o| !o.is_empty()).collect();
        Self { n, text, openers, first_owns_preamble: matches!(first_role, None | Some("system")), lens }
    }

    /// How many messages.
    #[must_use]
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether there are no messages.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The render of all the messages.
    #[must_use]
    pub fn text(&self) -> &[u8] {
        (*self.text).as_ref()
    }

    /// The render of all the messages, shared.
    #[must_use]
    pub fn shared_text(&self) -> Text {
        Arc::clone(&self.text)
    }

    /// The prefix lengths known so far, `(k, bytes)`.
    #[must_use]
    pub fn known(&self) -> Vec<(usize, usize)> {
        let mut out: Vec<_> = self.lens.iter().map(|(&k, &v)| (k, v)).collect();
        out.sort_unstable();
        out
    }

    /// Remember prefix lengths found earlier (by [`MessageBounds::known`] of
    /// bounds over the same render, messages and openers).
    pub fn remember(&mut self, known: &[(usize, usize)]) {
        self.lens.extend(known.iter().copied());
    }

    /// Bytes of the text that the render of `messages[:k]` covers: its length
    /// when it is a prefix of the whole render; else the part of the history
    /// render shared with the whole, up to the sentinel's block; else the part
    /// of the prefix render shared with the whole, or what the shorter prefix
    /// before it covers.
    ///
    /// # Errors
    /// When the renderer stops.
    pub fn prefix_len<P: Prefixes>(&mut self, k: usize, r: &mut P) -> Result<usize, P::Stop> {
        // prefixes that say nothing cover what the shorter one before them
        // covers: walked down (never recursed) to one that says
        let mut falls_back = Vec::new();
        let mut k = k;
        let got = loop {
            if let Some(&got) = self.lens.get(&k) {
                break got;
            }
            match self.own_len(k, r)? {
                Some(got) => {
                    self.lens.insert(k, got);
                    break got;
                }
                None => {
                    falls_back.push(k);
                    k -= 1; // k > 0: no message always says (`own_len`)
                }
            }
        };
        for k in falls_back {
            self.lens.insert(k, got);
        }
        Ok(got)
    }

    /// What the renders of `messages[:k]` themselves say it covers (None: they
    /// say nothing, so it covers what `messages[:k-1]` covers; never for 0).
    fn own_len<P: Prefixes>(&mut self, k: usize, r: &mut P) -> Result<Option<usize>, P::Stop> {
        let part = r.render(k, false)?;
        let shared = part.as_ref().map(|p| shared_bytes(p, self.text()));
        if let (Some(p), Some(s)) = (&part, shared) {
            if s == p.len() {
                return Ok(Some(s));
            }
        }
        if k == 0 {
            return self.preamble(r).map(Some);
        }
        Ok(match self.history_len(k, r)? {
            Some(h) => Some(h.max(shared.unwrap_or(0))),
            None => shared,
        })
    }

    /// Where `messages[:k]`, rendered as history, end in the text: where that
    /// render departs from it, or where the sentinel's block opens if that
    /// comes first; None without a history render.
    fn history_len<P: Prefixes>(&self, k: usize, r: &mut P) -> Result<Option<usize>, P::Stop> {
        if !r.has_history() {
            return Ok(None);
        }
        let Some(part) = r.render(k, true)? else { return Ok(None) };
        let Some(at) = rfind(&part, SENTINEL.as_bytes()) else { return Ok(None) };
        let block = self.openers.iter().filter_map(|o| rfind(&part[..at], o)).max();
        Ok(Some(shared_bytes(&part, self.text()).min(block.unwrap_or(at))))
    }

    /// Where the first message's own block starts, when no render of zero
    /// messages says (the template refuses it, or renders a default the first
    /// message replaces).
    fn preamble<P: Prefixes>(&mut self, r: &mut P) -> Result<usize, P::Stop> {
        if self.openers.is_empty() || self.first_owns_preamble || self.n == 0 {
            return Ok(0);
        }
        // where the first message ends; should it come down to what no message
        // covers (every render of it refused), that is the text's start
        self.lens.insert(0, 0);
        let end = self.prefix_len(1, r);
        self.lens.remove(&0);
        let end = end?.min(self.text().len());
        let head = &self.text()[..end];
        Ok(self.openers.iter().filter_map(|o| rfind(head, o)).max().unwrap_or(0))
    }

    /// [`MessageBounds::message_at`] from the prefix lengths known so far
    /// (no render): None when they do not tell, or do not grow with the
    /// prefix (then the search's order could decide, and the search does).
    #[must_use]
    pub fn known_message_at(&self, byte: usize) -> Option<i64> {
        let mut known: Vec<(usize, usize)> =
            self.lens.iter().filter(|&(&k, _)| k <= self.n).map(|(&k, &v)| (k, v)).collect();
        known.sort_unstable();
        if known.windows(2).any(|w| w[1].1 < w[0].1) {
            return None;
        }
        if known.last().is_some_and(|&(k, end)| k == self.n && byte >= end) {
            return Some(self.n as i64 - 1);
        }
        // the smallest k with prefix_len(k) > byte is k when k-1 covers no more than byte
        let (at, &(k, _)) = known.iter().enumerate().find(|&(_, &(_, len))| len > byte)?;
        match k {
            0 => Some(-1),
            _ => (at > 0 && known[at - 1].0 == k - 1).then_some(k as i64 - 1),
        }
    }

    /// The index of the message whose render holds byte `byte` of the text
    /// (the last message for a byte past the end; -1 for a byte of what the
    /// template renders before any message, e.g. a tools block). `hint`: a
    /// guess of the answer, tried first: a right guess costs two prefix
    /// renders, a wrong one changes nothing but the order of the search.
    ///
    /// # Errors
    /// When the renderer stops.
    pub fn message_at<P: Prefixes>(&mut self, byte: usize, hint: Option<i64>, r: &mut P) -> Result<i64, P::Stop> {
        let n = self.n as i64;
        if let Some(k) = self.known_message_at(byte) {
            return Ok(k);
        }
        // the smallest k with prefix_len(k) > byte: message k-1
        if byte >= self.prefix_len(self.n, r)? {
            return Ok(n - 1);
        }
        let (mut lo, mut hi) = (0i64, n);
        let mut guesses: Vec<i64> = hint
            .map(|h| vec![h.saturating_add(1), h, h.saturating_add(2), h.saturating_add(3), h.saturating_sub(1)])
            .unwrap_or_default();
        let mut step = 2i64;
        while lo < hi {
            let mid = if let Some(i) = guesses.iter().position(|&g| lo <= g && g < hi) {
                guesses.remove(i)
            } else if let Some(h) = hint.filter(|&h| hi - lo > 2 * step && (lo > h.saturating_add(1) || hi <= h)) {
                // the answer is near the hint: gallop away from it
                let mid = if lo > h.saturating_add(1) { lo + step } else { hi - step };
                step *= 2;
                mid
            } else {
                (lo + hi) / 2
            };
            if self.prefix_len(mid as usize, r)? > byte {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo - 1)
    }
}

/// A guess of the message each rendered block starts with (`block_roles`:
/// each block's role, in order; None: unknown), for [`MessageBounds::message_at`]'s
/// hint: blocks one per message, or one per run of consecutive tool results
/// (templates that put them in one block), with a block of the template's own
/// first (a tools block) when there is one more; None when neither count fits.
#[must_use]
pub fn block_messages(blocks: usize, first_block_role: Option<&str>, message_roles: &[&str]) -> Option<Vec<i64>> {
    for grouped in [false, true] {
        let starts: Vec<i64> = (0..message_roles.len())
            .filter(|&i| !(grouped && message_roles[i] == "tool" && i > 0 && message_roles[i - 1] == "tool"))
            .map(|i| i as i64)
            .collect();
        if blocks == starts.len() {
            return Some(starts);
        }
        if blocks == starts.len() + 1 && first_block_role.is_none_or(|r| r == "system") {
            return Some(std::iter::once(-1).chain(starts).collect());
        }
    }
    None
}

/// Bytes `a` shares with the start of `b`.
#[must_use]
pub fn shared_bytes(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 64 <= n && a[i..i + 64] == b[i..i + 64] {
        i += 64;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Where `needle` last occurs in `hay`, whole.
fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    memchr::memmem::rfind(hay, needle)
}

/// Where the openers occur in `text`, in order (each block's start).
#[must_use]
pub fn opener_starts(text: &[u8], openers: &[Vec<u8>]) -> Vec<usize> {
    let mut out: Vec<usize> =
        openers.iter().filter(|o| !o.is_empty()).flat_map(|o| memchr::memmem::find_iter(text, o)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders `<s>` then `<role>content</>` per message; history adds the sentinel's block.
    struct Toy(Vec<(&'static str, &'static str)>, usize);

    impl Prefixes for Toy {
        type Stop = ();
        fn render(&mut self, k: usize, history: bool) -> Result<Option<Vec<u8>>, ()> {
            self.1 += 1;
            let mut s = String::from("<s>");
            for (role, content) in &self.0[..k.min(self.0.len())] {
                s += &format!("<{role}>{content}</>");
            }
            if history {
                s += &format!("<user>{SENTINEL}</>");
            }
            Ok(Some(s.into_bytes()))
        }
        fn has_history(&self) -> bool {
            true
        }
    }

    #[test]
    fn bytes_find_their_message() {
        let mut r = Toy(vec![("user", "hi"), ("assistant", "yo")], 0);
        let text: Text = Arc::new(b"<s><user>hi</><assistant>yo</>".to_vec());
        let mut b = MessageBounds::new(2, text, vec![b"<user>".to_vec(), b"<assistant>".to_vec()], Some("user"));
        let got: Vec<i64> = [0, 3, 13, 16, 40].iter().map(|&i| b.message_at(i, None, &mut r).unwrap()).collect();
        assert_eq!(got, vec![-1, 0, 0, 1, 1]);
        let renders = r.1;
        assert_eq!(b.message_at(16, Some(1), &mut r), Ok(1)); // remembered: no render
        assert_eq!(r.1, renders);
        assert_eq!([0, 3, 13, 16, 40].map(|i| b.known_message_at(i)), [Some(-1), Some(0), Some(0), Some(1), Some(1)]);
        let fresh = MessageBounds::new(2, b.shared_text(), vec![], Some("user"));
        assert_eq!((fresh.known_message_at(3), fresh.known_message_at(30)), (None, Some(1))); // only the whole is known
                                                                                              // lengths that shrink somewhere, or a prefix past the end: no answer without the search
        let mut odd = MessageBounds::new(3, Arc::new(vec![b'x'; 20]), vec![], None);
        odd.remember(&[(0, 0), (1, 10), (2, 5)]);
        assert_eq!(odd.known_message_at(7), None);
        let mut past = MessageBounds::new(2, Arc::new(vec![b'x'; 20]), vec![], None);
        past.remember(&[(1, 5), (3, 30)]);
        assert_eq!((past.known_message_at(25), past.known_message_at(7)), (Some(1), Some(1)));
        for hint in [i64::MIN, -7, 9, i64::MAX] {
            assert_eq!(b.message_at(13, Some(hint), &mut r), Ok(0)); // any guess, the same answer
        }
    }

    #[test]
    fn a_right_hint_costs_two_renders() {
        let msgs: Vec<(&str, &str)> =
            (0..64).map(|i| if i % 2 == 0 { ("user", "question") } else { ("assistant", "answer") }).collect();
        let mut r = Toy(msgs.clone(), 0);
        let text: Text = Arc::new(r.render(64, false).unwrap().unwrap());
        let at = r.render(40, false).unwrap().unwrap().len() + 2; // inside message 40
        r.1 = 0;
        let mut b = MessageBounds::new(64, text, vec![], None);
        assert_eq!(b.message_at(at, Some(40), &mut r), Ok(40));
        assert_eq!(r.1, 2);
    }

    /// Refuses every prefix (history too) but the whole.
    struct Refuses(usize);

    impl Prefixes for Refuses {
        type Stop = ();
        fn render(&mut self, k: usize, _history: bool) -> Result<Option<Vec<u8>>, ()> {
            Ok((k == self.0).then(|| b"<u>a<u>b".to_vec()))
        }
        fn has_history(&self) -> bool {
            true
        }
    }

    #[test]
    fn refused_prefixes_end_without_recursion() {
        // the preamble asks where the first message ends; every render of it is refused
        let mut b = MessageBounds::new(2, Arc::new(b"<u>a<u>b".to_vec()), vec![b"<u>".to_vec()], Some("user"));
        assert_eq!(b.prefix_len(0, &mut Refuses(2)), Ok(0));
        assert_eq!(b.prefix_len(1, &mut Refuses(2)), Ok(0));
        // a long chain of refusals is walked, not recursed
        let mut b = MessageBounds::new(2_000_000, Arc::new(b"ab".to_vec()), vec![], None);
        assert_eq!(b.prefix_len(1_000_000, &mut Refuses(usize::MAX)), Ok(0));
    }

    #[test]
    fn guesses_of_blocks() {
        assert_eq!(block_messages(3, Some("system"), &["user", "tool", "tool"]), Some(vec![0, 1, 2]));
        assert_eq!(block_messages(2, Some("user"), &["user", "tool", "tool"]), Some(vec![0, 1]));
        assert_eq!(block_messages(3, Some("system"), &["user", "tool", "tool"][..2]), Some(vec![-1, 0, 1]));
        assert_eq!(block_messages(3, Some("user"), &["user", "tool"]), None);
        assert_eq!(block_messages(5, None, &["user"]), None);
    }

    #[test]
    fn shared_and_found() {
        let a = vec![7u8; 300];
        let mut b = a.clone();
        b[130] = 1;
        assert_eq!(shared_bytes(&a, &b), 130);
        assert_eq!(shared_bytes(&a, &a[..10]), 10);
        assert_eq!(rfind(b"abcabc", b"bc"), Some(4));
        assert_eq!(opener_starts(b"<a>x<b>y<a>", &[b"<a>".to_vec(), b"<b>".to_vec()]), vec![0, 4, 8]);
    }
}
