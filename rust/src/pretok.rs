//! The split of text into pieces done by the regex pre-tokenizers of
//! byte-level BPE tokenizers (GPT-4 style patterns), without a regex engine.
//!
//! Four splitters are covered, recognised by their exact pattern text on the
//! Python side (`tito_fast.encoder`):
//!
//! - Qwen2/3, Kimi K2, Nemotron:
//!   `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
//! - Llama 3, GLM: the same with `\p{N}{1,3}`.
//! - Qwen3.5: letters are `[\p{L}\p{M}]+` and the punctuation class also
//!   excludes `\p{M}`.
//! - DeepSeek V3/V3.1/V3.2/V4: three splits in sequence, each keeping matches
//!   and the gaps between them as pieces: `\p{N}{1,3}`, then
//!   `[一-龥぀-ゟ゠-ヿ]+`, then
//!   `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
//!   (characters no alternative matches, such as digits, form gap pieces).
//! - o200k (MiniMax M2.x, GPT-4o style), case-aware:
//!   `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
//!   (every character matches, so keeping only the matches, as MiniMax's
//!   split does, is the same tiling).
//!
//! The tokenizer runs these with a backtracking engine: at each position the
//! first alternative that matches wins, each with greedy quantifiers and
//! backtracking inside it. `Pattern::piece_end` decides the same match by
//! hand for each alternative (the comments say how each one backtracks). Every
//! character matches one alternative, so the pieces tile the text.
//!
//! Character classes come from regex-syntax's Unicode tables. The tokenizer's
//! engine has its own tables; `tests/test_encoder.py` checks the two agree on
//! every code point, through the tokenizer's own pre-tokenizer.

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};

const L: u8 = 1;
const N: u8 = 2;
const M: u8 = 4;
const WS: u8 = 8;
const P: u8 = 16;
const S: u8 = 32;
/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`: o200k's upper-case side.
const UP: u8 = 64;
/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`: o200k's lower-case side.
const LOW: u8 = 128;

/// One flag byte per code point: letter, number, mark, white space,
/// punctuation, symbol, and o200k's two case classes.
fn classes() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![0u8; 0x11_0000];
        let classes = [
            (r"\p{L}", L),
            (r"\p{N}", N),
            (r"\p{M}", M),
            (r"\s", WS),
            (r"\p{P}", P),
            (r"\p{S}", S),
            (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", UP),
            (r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", LOW),
        ];
        for (class, flag) in classes {
            let hir = regex_syntax::Parser::new().parse(class).expect("a valid Unicode class");
            let HirKind::Class(Class::Unicode(set)) = hir.kind() else {
                unreachable!("{class} parses to a Unicode class")
            };
            for r in set.ranges() {
                for slot in &mut table[r.start() as usize..=r.end() as usize] {
                    *slot |= flag;
                }
            }
        }
        table
    })
}

/// Which of the covered patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    /// Most digits in one number piece (`\p{N}` is 1, `\p{N}{1,3}` is 3).
    pub max_digits: usize,
    /// Marks count as letters and are not punctuation (Qwen3.5).
    pub marks_are_letters: bool,
}

/// The named patterns.
impl Pattern {
    /// Qwen2/3, Kimi K2, Nemotron: one digit per piece.
    pub const QWEN: Pattern = Pattern { max_digits: 1, marks_are_letters: false };
    /// Llama 3, GLM: up to three digits per piece.
    pub const LLAMA3: Pattern = Pattern { max_digits: 3, marks_are_letters: false };
    /// Qwen3.5: letters and marks together.
    pub const QWEN35: Pattern = Pattern { max_digits: 1, marks_are_letters: true };

    /// Split `text` into pieces; returns their byte ranges in order.
    pub fn split(&self, text: &str) -> Vec<(usize, usize)> {
        tile(text, |chars, flags, p| self.piece_end(chars, flags, p))
    }

    fn is_letter(&self, f: u8) -> bool {
        f & L != 0 || (self.marks_are_letters && f & M != 0)
    }

    /// `[^\s\p{L}\p{N}]` (and not `\p{M}` when marks are letters).
    fn is_punct(&self, f: u8) -> bool {
        f & (WS | L | N) == 0 && !(self.marks_are_letters && f & M != 0)
    }

    /// End (exclusive, in characters) of the piece starting at `p`.
    fn piece_end(&self, chars: &[(usize, char)], flags: &[u8], p: usize) -> usize {
        // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if let Some(end) = contraction_end(chars, p) {
            return end;
        }
        // 2. [^\r\n\p{L}\p{N}]?LETTERS+
        if let Some(end) = prefixed_run(chars, flags, p, L | N, |g| self.is_letter(g)) {
            return end;
        }
        // 3. \p{N} or \p{N}{1,3}.
        if flags[p] & N != 0 {
            return digits_end(flags, p, self.max_digits);
        }
        // 4. ' '?PUNCT+[\r\n]*
        if let Some(end) = spaced_run(chars, flags, p, |g| self.is_punct(g), |c| matches!(c, '\r' | '\n')) {
            return end;
        }
        if flags[p] & WS != 0 {
            return space_end(chars, flags, p);
        }
        // Unreachable for the covered patterns (every character is a letter, a
        // number, white space or punctuation); a lone piece keeps the tiling.
        p + 1
    }
}

/// The characters of `text` with their offsets, and their class flags.
fn decode(text: &str) -> (Vec<(usize, char)>, Vec<u8>) {
    let table = classes();
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let flags = chars.iter().map(|&(_, c)| table[c as usize]).collect();
    (chars, flags)
}

fn byte_at(chars: &[(usize, char)], text: &str, i: usize) -> usize {
    if i < chars.len() {
        chars[i].0
    } else {
        text.len()
    }
}

/// End of the run of characters from `from` whose flags satisfy `pred`.
fn run(flags: &[u8], from: usize, pred: impl Fn(u8) -> bool) -> usize {
    flags[from..].iter().position(|&f| !pred(f)).map_or(flags.len(), |k| from + k)
}

/// Pieces that tile `text`, each ending where `piece_end` says.
fn tile(text: &str, piece_end: impl Fn(&[(usize, char)], &[u8], usize) -> usize) -> Vec<(usize, usize)> {
    let (chars, flags) = decode(text);
    let mut out = Vec::with_capacity(chars.len() / 3 + 1);
    let mut p = 0;
    while p < chars.len() {
        let end = piece_end(&chars, &flags, p);
        out.push((byte_at(&chars, text, p), byte_at(&chars, text, end)));
        p = end;
    }
    out
}

/// `\p{N}{1,max}` at a number.
fn digits_end(flags: &[u8], p: usize, max: usize) -> usize {
    run(flags, p, |g| g & N != 0).min(p + max)
}

/// `[^\r\n EXCLUDED]?CLASS+` at `p`: the greedy prefix first (any character
/// but a line break or one with an `excluded` flag); without it the first
/// character must itself be in the class. Both end at the end of the run.
fn prefixed_run(
    chars: &[(usize, char)],
    flags: &[u8],
    p: usize,
    excluded: u8,
    class: impl Fn(u8) -> bool,
) -> Option<usize> {
    let prefix_ok = !matches!(chars[p].1, '\r' | '\n') && flags[p] & excluded == 0;
    if prefix_ok && p + 1 < flags.len() && class(flags[p + 1]) {
        return Some(run(flags, p + 1, class));
    }
    class(flags[p]).then(|| run(flags, p, class))
}

/// `' '?CLASS+TRAILING*` at `p`: the optional space only when the class
/// follows (a space is never in these classes).
fn spaced_run(
    chars: &[(usize, char)],
    flags: &[u8],
    p: usize,
    class: impl Fn(u8) -> bool,
    trailing: impl Fn(char) -> bool,
) -> Option<usize> {
    let from = if chars[p].1 == ' ' && p + 1 < flags.len() && class(flags[p + 1]) {
        p + 1
    } else if class(flags[p]) {
        p
    } else {
        return None;
    };
    let mut q = run(flags, from, class);
    while q < chars.len() && trailing(chars[q].1) {
        q += 1;
    }
    Some(q)
}

/// The last three alternatives of every covered pattern, at a white-space
/// character: `\s*[\r\n]+|\s+(?!\S)|\s+`.
fn space_end(chars: &[(usize, char)], flags: &[u8], p: usize) -> usize {
    let n = chars.len();
    let q = run(flags, p, |g| g & WS != 0);
    // \s*[\r\n]+: \s* gives back characters until [\r\n]+ can start, at the
    // last line break of the run; that break ends the piece (what follows it
    // in the run is not a line break).
    if let Some(j) = (p..q).rev().find(|&j| matches!(chars[j].1, '\r' | '\n')) {
        return j + 1;
    }
    // \s+(?!\S): the whole run at the end of the text, else all but its last
    // character (which then precedes white space).
    if q == n {
        return q;
    }
    if q - p >= 2 {
        return q - 1;
    }
    // \s+
    q
}

/// A pre-tokenizer split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Splitter {
    /// One GPT-4 style pattern.
    Gpt4(Pattern),
    /// DeepSeek's three splits in sequence.
    DeepSeek,
    /// The case-aware o200k pattern.
    O200k,
}

impl Splitter {
    /// The splitter of a name ("qwen", "llama3", "qwen35", "deepseek", "o200k"), or None.
    pub fn from_name(name: &str) -> Option<Splitter> {
        match name {
            "qwen" => Some(Splitter::Gpt4(Pattern::QWEN)),
            "llama3" => Some(Splitter::Gpt4(Pattern::LLAMA3)),
            "qwen35" => Some(Splitter::Gpt4(Pattern::QWEN35)),
            "deepseek" => Some(Splitter::DeepSeek),
            "o200k" => Some(Splitter::O200k),
            _ => None,
        }
    }

    /// Split `text` into pieces; returns their byte ranges in order.
    pub fn split(&self, text: &str) -> Vec<(usize, usize)> {
        match self {
            Splitter::Gpt4(p) => p.split(text),
            Splitter::DeepSeek => deepseek_split(text),
            Splitter::O200k => tile(text, o200k_piece_end),
        }
    }
}

/// CJK ideographs U+4E00-U+9FA5, hiragana, katakana: DeepSeek's second split.
fn is_kana_or_han(c: char) -> bool {
    matches!(c, '\u{4E00}'..='\u{9FA5}' | '\u{3040}'..='\u{309F}' | '\u{30A0}'..='\u{30FF}')
}

/// Append to `out` the pieces of `chars[a..b]` under an "isolated" split
/// whose match at a position is given by `at` (its end, or None): matches and
/// the gaps between them are pieces.
fn isolate(a: usize, b: usize, out: &mut Vec<(usize, usize)>, mut at: impl FnMut(usize) -> Option<usize>) {
    let mut gap = a;
    let mut p = a;
    while p < b {
        match at(p) {
            Some(end) if end > p => {
                if gap < p {
                    out.push((gap, p));
                }
                out.push((p, end));
                p = end;
                gap = end;
            }
            _ => p += 1,
        }
    }
    if gap < b {
        out.push((gap, b));
    }
}

fn deepseek_split(text: &str) -> Vec<(usize, usize)> {
    let (chars, flags) = decode(text);
    let n = chars.len();
    // 1. \p{N}{1,3}
    let mut first = Vec::new();
    isolate(0, n, &mut first, |p| (flags[p] & N != 0).then(|| digits_end(&flags, p, 3)));
    // 2. [一-龥぀-ゟ゠-ヿ]+
    let mut second = Vec::with_capacity(first.len());
    for &(a, b) in &first {
        isolate(a, b, &mut second, |p| {
            is_kana_or_han(chars[p].1).then(|| (p..b).find(|&q| !is_kana_or_han(chars[q].1)).unwrap_or(b))
        });
    }
    // 3. the GPT-4 style alternatives, inside each piece
    let mut third = Vec::with_capacity(second.len() * 2);
    for &(a, b) in &second {
        let (pc, pf) = (&chars[..b], &flags[..b]);
        isolate(a, b, &mut third, |p| deepseek_piece_end(pc, pf, p));
    }
    third.into_iter().map(|(a, b)| (byte_at(&chars, text, a), byte_at(&chars, text, b))).collect()
}

/// The third split's match at `p` (the slices end where the piece ends), or None.
fn deepseek_piece_end(chars: &[(usize, char)], flags: &[u8], p: usize) -> Option<usize> {
    let n = chars.len();
    // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
    if chars[p].1.is_ascii_punctuation() && p + 1 < n && chars[p + 1].1.is_ascii_alphabetic() {
        let mut q = p + 1;
        while q < n && chars[q].1.is_ascii_alphabetic() {
            q += 1;
        }
        return Some(q);
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
    if let Some(end) = prefixed_run(chars, flags, p, L | P | S, |g| g & (L | M) != 0) {
        return Some(end);
    }
    // ' '?[\p{P}\p{S}]+[\r\n]*
    if let Some(end) = spaced_run(chars, flags, p, |g| g & (P | S) != 0, |c| matches!(c, '\r' | '\n')) {
        return Some(end);
    }
    if flags[p] & WS != 0 {
        return Some(space_end(chars, flags, p));
    }
    None // a gap character: a digit, a control or format character, ...
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `p`: its end, or None.
fn contraction_end(chars: &[(usize, char)], p: usize) -> Option<usize> {
    let at = |i: usize| chars.get(i).map(|&(_, c)| fold(c));
    if at(p) != Some('\'') {
        return None;
    }
    match at(p + 1) {
        Some('s' | 't' | 'm' | 'd') => Some(p + 2),
        Some('r' | 'v') if at(p + 2) == Some('e') => Some(p + 3),
        Some('l') if at(p + 2) == Some('l') => Some(p + 3),
        _ => None,
    }
}

/// `UP*LOW+` from `q`: greedy `UP*`, then `LOW+`; when no LOW follows the UP
/// run, `UP*` gives back characters until one it gave back is LOW (LOW+ then
/// takes just that one, as what follows it in the run is not LOW).
fn up_star_low_plus(flags: &[u8], q: usize) -> Option<usize> {
    let r = run(flags, q, |g| g & UP != 0);
    if r < flags.len() && flags[r] & LOW != 0 {
        return Some(run(flags, r, |g| g & LOW != 0));
    }
    (q..r).rev().find(|&k| flags[k] & LOW != 0).map(|k| k + 1)
}

/// End of the o200k piece starting at `p` (every character starts one).
fn o200k_piece_end(chars: &[(usize, char)], flags: &[u8], p: usize) -> usize {
    let n = chars.len();
    let with_contraction = |end: usize| contraction_end(chars, end).unwrap_or(end);
    let prefix_ok = !matches!(chars[p].1, '\r' | '\n') && flags[p] & (L | N) == 0;
    // 1. PREFIX? UP* LOW+ CONTRACTION?: with the prefix first, then without.
    if prefix_ok && p + 1 < n {
        if let Some(end) = up_star_low_plus(flags, p + 1) {
            return with_contraction(end);
        }
    }
    if let Some(end) = up_star_low_plus(flags, p) {
        return with_contraction(end);
    }
    // 2. PREFIX? UP+ LOW* CONTRACTION?: cannot fail once UP+ has matched.
    if let Some(r) = prefixed_run(chars, flags, p, L | N, |g| g & UP != 0) {
        return with_contraction(run(flags, r, |g| g & LOW != 0));
    }
    // 3. \p{N}{1,3}
    if flags[p] & N != 0 {
        return digits_end(flags, p, 3);
    }
    // 4. ' '?[^\s\p{L}\p{N}]+[\r\n/]*
    if let Some(end) = spaced_run(chars, flags, p, |g| g & (WS | L | N) == 0, |c| matches!(c, '\r' | '\n' | '/')) {
        return end;
    }
    if flags[p] & WS != 0 {
        return space_end(chars, flags, p);
    }
    p + 1 // unreachable: every character is a letter, a number, white space or punctuation
}

/// Simple case folding for the contraction letters: the engine matches them
/// case-insensitively, and U+017F (long s) folds to `s`.
fn fold(c: char) -> char {
    match c {
        'A'..='Z' => c.to_ascii_lowercase(),
        '\u{17F}' => 's',
        _ => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces<'a>(p: &Pattern, t: &'a str) -> Vec<&'a str> {
        p.split(t).into_iter().map(|(a, b)| &t[a..b]).collect()
    }

    #[test]
    fn gpt4_style_pieces() {
        let q = Pattern::QWEN;
        assert_eq!(pieces(&q, "Hello world"), ["Hello", " world"]);
        assert_eq!(pieces(&q, "don't I'M"), ["don", "'t", " I", "'M"]);
        assert_eq!(pieces(&q, "x 12345"), ["x", " ", "1", "2", "3", "4", "5"]);
        assert_eq!(pieces(&Pattern::LLAMA3, "x 12345"), ["x", " ", "123", "45"]);
        assert_eq!(pieces(&q, "\n\n  foo"), ["\n\n", " ", " foo"]);
        assert_eq!(pieces(&q, "a  \n b"), ["a", "  \n", " b"]);
        assert_eq!(pieces(&q, "end   "), ["end", "   "]);
        assert_eq!(pieces(&q, "{\"a\": 1}\n"), ["{\"", "a", "\":", " ", "1", "}\n"]);
        assert_eq!(pieces(&q, " {x"), [" {", "x"]);
        assert_eq!(pieces(&q, "\tword"), ["\tword"]);
        assert_eq!(pieces(&q, "你好🙂é"), ["你好", "🙂é"]);
        assert_eq!(pieces(&q, "d 'll ''s"), ["d", " '", "ll", " ''", "s"]);
        assert_eq!(pieces(&q, ""), Vec::<&str>::new());
    }

    #[test]
    fn marks_are_letters_in_qwen35() {
        let t = "e\u{301}x \u{301}";
        assert_eq!(pieces(&Pattern::QWEN, t), ["e", "\u{301}x", " \u{301}"]);
        assert_eq!(pieces(&Pattern::QWEN35, t), ["e\u{301}x", " \u{301}"]);
    }

    #[test]
    fn o200k_splits_at_case_changes() {
        let o = Splitter::O200k;
        let pieces = |t: &'static str| -> Vec<&'static str> { o.split(t).into_iter().map(|(a, b)| &t[a..b]).collect() };
        assert_eq!(pieces("HelloWorld JSONParser"), ["Hello", "World", " JSONParser"]);
        assert_eq!(pieces("ABC don't WE'LL"), ["ABC", " don't", " WE'LL"]);
        assert_eq!(pieces("x 12345 a/b//\n"), ["x", " ", "123", "45", " a", "/b", "//\n"]);
    }

    #[test]
    fn deepseek_splits_in_sequence() {
        let d = Splitter::DeepSeek;
        let pieces = |t: &'static str| -> Vec<&'static str> { d.split(t).into_iter().map(|(a, b)| &t[a..b]).collect() };
        assert_eq!(pieces("abc12345 你好x"), ["abc", "123", "45", " ", "你好", "x"]);
        assert_eq!(pieces("(Hello) 'sé"), ["(Hello", ")", " '", "sé"]);
        assert_eq!(pieces("a\u{0}\u{1}b"), ["a", "\u{0}", "\u{1}b"]);
        assert_eq!(pieces("x  \n\n y"), ["x", "  \n\n", " y"]);
    }

    #[test]
    fn pieces_tile_the_text() {
        let t = "a\r\n\r\n b\u{3000}c\u{a0}\u{a0}d 'll ''s \u{17F}";
        let splitters = [Pattern::QWEN, Pattern::LLAMA3, Pattern::QWEN35].map(Splitter::Gpt4);
        for p in splitters.into_iter().chain([Splitter::DeepSeek, Splitter::O200k]) {
            let r = p.split(t);
            assert_eq!(r.first().map(|x| x.0), Some(0));
            assert_eq!(r.last().map(|x| x.1), Some(t.len()));
            assert!(r.windows(2).all(|w| w[0].1 == w[1].0 && w[0].0 < w[0].1));
        }
    }
}
