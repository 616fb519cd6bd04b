//! A per-id byte table: decides whether two id runs decode to the same text
//! without decoding them.
//!
//! For byte-level BPE tokenizers, decoding is: map each id to its bytes,
//! concatenate the bytes of each run between added tokens, and read each run
//! as UTF-8 (invalid bytes become U+FFFD). When every run of both sides is
//! valid UTF-8, the texts are equal exactly when the byte strings are; when a
//! run is not valid UTF-8 (a character split across a segment edge), the
//! table cannot decide and the caller decodes. The Python side only builds a
//! table for tokenizers whose `decode` it has checked against this rule.

use crate::segment::{IdSet, Segment};

/// Bytes of every id, and which ids are added tokens (decoded on their own).
#[derive(Debug, Clone)]
pub struct ByteTable {
    offsets: Vec<u32>,
    blob: Vec<u8>,
    added: IdSet,
    /// Each id's byte count ([`LONG`] for one of that many bytes or more):
    /// summed in the O(n) passes that place an id in its text.
    lens: Vec<u16>,
}

/// A byte count [`ByteTable`]'s `lens` does not hold (read from the offsets).
const LONG: u16 = u16::MAX;

impl ByteTable {
    /// `offsets` has one entry per id plus one; id i's bytes are
    /// `blob[offsets[i]..offsets[i+1]]`.
    ///
    /// # Errors
    /// A message when the offsets do not describe `blob`.
    pub fn new(offsets: Vec<u32>, blob: Vec<u8>, added: &[u32]) -> Result<Self, String> {
        if offsets.is_empty() || offsets[0] != 0 {
            return Err("offsets must start with 0".into());
        }
        if let Some(p) = offsets.windows(2).position(|w| w[1] < w[0]) {
            return Err(format!("offsets decrease at position {}", p + 1));
        }
        if *offsets.last().unwrap_or(&0) as usize != blob.len() {
            return Err(format!("last offset {} is not the blob length {}", offsets[offsets.len() - 1], blob.len()));
        }
        let lens = offsets.windows(2).map(|w| u16::try_from(w[1] - w[0]).unwrap_or(LONG)).collect();
        Ok(Self { offsets, blob, added: IdSet::new(added), lens })
    }

    /// Number of ids the table knows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// True for a table with no id.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of one id, or None outside the table.
    #[must_use]
    pub fn bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        (i < self.len()).then(|| &self.blob[self.offsets[i] as usize..self.offsets[i + 1] as usize])
    }

    /// How many bytes `ids` decode to, concatenated (where id `i` of a text's
    /// ids starts in it is `byte_len(&ids[..i])`); None when an id is
    /// outside the table.
    ///
    /// ```
    /// use tito_fast::vocab::ByteTable;
    /// let t = ByteTable::new(vec![0, 2, 5], b"Hello".to_vec(), &[]).unwrap();
    /// assert_eq!(t.byte_len(&[0, 1, 0]), Some(7));
    /// assert_eq!(t.byte_len(&[0, 2]), None);
    /// ```
    #[must_use]
    pub fn byte_len(&self, ids: &[u32]) -> Option<usize> {
        ids.iter().try_fold(0usize, |total, &id| Some(total + self.id_len(id)?))
    }

    /// How many bytes id `id` decodes to; None outside the table.
    #[inline]
    #[must_use]
    pub fn id_len(&self, id: u32) -> Option<usize> {
        let n = *self.lens.get(id as usize)?;
        if n == LONG {
            return self.bytes(id).map(<[u8]>::len);
        }
        Some(usize::from(n))
    }

    /// The concatenated bytes of `ids`, or None when an id is outside the
    /// table or a run between added tokens is not valid UTF-8.
    #[must_use]
    pub fn text_bytes(&self, ids: &[u32]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut run_start = 0;
        for &id in ids {
            let is_added = self.added.contains(id);
            if is_added {
                std::str::from_utf8(&out[run_start..]).ok()?;
            }
            out.extend_from_slice(self.bytes(id)?);
            if is_added {
                run_start = out.len();
            }
        }
        std::str::from_utf8(&out[run_start..]).ok()?;
        Some(out)
    }

    /// Whether `a` and `b` decode to the same text; None when undecidable.
    ///
    /// ```
    /// use tito_fast::vocab::ByteTable;
    /// // ids: 0 = "He", 1 = "llo", 2 = "Hello", 3 = "\xe4" (a split character)
    /// let t = ByteTable::new(vec![0, 2, 5, 10, 11], b"HelloHello\xe4".to_vec(), &[]).unwrap();
    /// assert_eq!(t.same_text(&[0, 1], &[2]), Some(true));
    /// assert_eq!(t.same_text(&[0], &[2]), Some(false));
    /// assert_eq!(t.same_text(&[3], &[2]), None);
    /// ```
    #[must_use]
    pub fn same_text(&self, a: &[u32], b: &[u32]) -> Option<bool> {
        Some(self.text_bytes(a)? == self.text_bytes(b)?)
    }
}

/// What the comparator reports for one aligned pair of segments whose ids
/// differ, as decided from ids and the byte table (`i8` codes for Python).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum Verdict {
    /// The table cannot tell (no table, an unknown id, a split character):
    /// the caller decodes.
    Unknown = -1,
    /// Same text from other ids: the reference does not report it.
    SameText = 1,
    /// A pair of different special ids.
    SpecialType = 2,
    /// Texts differ and both segments open an assistant message.
    AssistantText = 3,
    /// Texts differ, anywhere else.
    NonAssistantText = 4,
}

impl Verdict {
    /// Every verdict with its name (the bindings export them as `VERDICT_<name>`).
    pub const ALL: [(Verdict, &'static str); 5] = [
        (Verdict::Unknown, "UNKNOWN"),
        (Verdict::SameText, "SAME_TEXT"),
        (Verdict::SpecialType, "SPECIAL_TYPE"),
        (Verdict::AssistantText, "ASSISTANT_TEXT"),
        (Verdict::NonAssistantText, "NON_ASSISTANT_TEXT"),
    ];
}

/// The reference's assistant test for content segment `i` of `ids`, whose
/// text is `text`: the text of the special id before it followed by the
/// text of its first `probe` ids starts with `start`. None when the table
/// cannot tell (a probe that ends inside a character).
fn opens_assistant(
    t: &ByteTable,
    (ids, segs): (&[u32], &[Segment]),
    i: usize,
    text: &[u8],
    start: Option<&[u8]>,
    probe: usize,
) -> Option<bool> {
    let Some(start) = start else { return Some(false) };
    if i == 0 || !segs[i - 1].special {
        return Some(false);
    }
    let (p, s) = (segs[i - 1], segs[i]);
    let prev = t.text_bytes(&ids[p.start..p.end])?;
    let head_ids = &ids[s.start..s.start.saturating_add(probe).min(s.end)];
    // The head's text is a prefix of the segment's (the bytes concatenate);
    // decoded alone, it must still be valid UTF-8 to be judged here.
    let head_len: usize = head_ids.iter().map(|&id| t.bytes(id).map_or(0, <[u8]>::len)).sum();
    let head = &text[..head_len];
    if head_ids.iter().any(|&id| t.added.contains(id)) {
        t.text_bytes(head_ids)?;
    } else {
        std::str::from_utf8(head).ok()?;
    }
    let (from_prev, rest) = start.split_at(start.len().min(prev.len()));
    Some(prev.starts_with(from_prev) && head.starts_with(rest))
}

/// The `(expected, actual)` UTF-8 texts of a pair, when the table knows them.
pub type PairTexts = Option<(Vec<u8>, Vec<u8>)>;

/// The verdict for aligned pair `i` (whose ids differ) of `e` and `a`, with
/// the pair's `(expected, actual)` texts when the verdict reports text.
///
/// `assistant_start` is the UTF-8 of the comparator's `assistant_start_str`
/// (None labels every text difference non-assistant); `probe` is how many
/// ids of a segment the assistant test reads.
#[must_use]
pub fn verdict(
    table: Option<&ByteTable>,
    (e, es): (&[u32], &[Segment]),
    (a, as_): (&[u32], &[Segment]),
    i: usize,
    assistant_start: Option<&[u8]>,
    probe: usize,
) -> (Verdict, PairTexts) {
    let (x, y) = (es[i], as_[i]);
    let Some(t) = table else {
        return (if x.special { Verdict::SpecialType } else { Verdict::Unknown }, None);
    };
    let texts = t.text_bytes(&e[x.start..x.end]).zip(t.text_bytes(&a[y.start..y.end]));
    if x.special {
        return (Verdict::SpecialType, texts);
    }
    let Some((et, at)) = texts else { return (Verdict::Unknown, None) };
    if et == at {
        return (Verdict::SameText, None);
    }
    // `and` as the reference evaluates it: the actual side is only read
    // when the expected side opens an assistant message.
    let label = match opens_assistant(t, (e, es), i, &et, assistant_start, probe) {
        None => None,
        Some(false) => Some(Verdict::NonAssistantText),
        Some(true) => match opens_assistant(t, (a, as_), i, &at, assistant_start, probe) {
            None => None,
            Some(false) => Some(Verdict::NonAssistantText),
            Some(true) => Some(Verdict::AssistantText),
        },
    };
    match label {
        Some(v) => (v, Some((et, at))),
        None => (Verdict::Unknown, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_split_at_added_tokens() {
        // 0 = "\xe4\xbd" (first two bytes of 你), 1 = "\xa0" (its last), 2 = added "<t>"
        let t = ByteTable::new(vec![0, 2, 3, 6], b"\xe4\xbd\xa0<t>".to_vec(), &[2]).unwrap();
        assert_eq!(t.text_bytes(&[0, 1]).unwrap(), "你".as_bytes());
        // The added token splits the character: each run is decoded alone.
        assert!(t.text_bytes(&[0, 2, 1]).is_none());
        assert!(t.text_bytes(&[9]).is_none());
    }

    #[test]
    fn byte_counts_of_long_tokens_come_from_the_offsets() {
        // ids: 0 = "a", 1 = 65,534 bytes, 2 = 65,535 bytes (the sentinel's count), 3 = 70,000 bytes
        let lens = [1u32, 65_534, 65_535, 70_000];
        let mut offsets = vec![0u32];
        for l in lens {
            offsets.push(offsets.last().unwrap() + l);
        }
        let t = ByteTable::new(offsets, vec![b'a'; lens.iter().sum::<u32>() as usize], &[]).unwrap();
        for (id, &l) in lens.iter().enumerate() {
            assert_eq!(t.id_len(id as u32), Some(l as usize));
        }
        assert_eq!(t.byte_len(&[3, 2, 1, 0, 2]), Some(70_000 + 65_535 + 65_534 + 1 + 65_535));
        assert_eq!((t.byte_len(&[]), t.byte_len(&[0, 4]), t.id_len(u32::MAX)), (Some(0), None, None));
    }

    #[test]
    fn bad_tables_are_rejected() {
        assert!(ByteTable::new(vec![], vec![], &[]).is_err());
        assert!(ByteTable::new(vec![0, 2, 1], vec![0, 0], &[]).is_err());
        assert!(ByteTable::new(vec![0, 1], vec![0, 0], &[]).is_err());
        assert!(ByteTable::new(vec![0], vec![], &[]).unwrap().is_empty());
    }

    #[test]
    fn verdicts() {
        use crate::segment::segment;
        // 0 = "<s>" (added, boundary), 1 = "assistant", 2 = "\n", 3 = "hi", 4 = "ho", 5 = "h", 6 = "i",
        // 7 = "\xe4\xbd" and 8 = "\xa0" (the two halves of a three-byte character)
        let blob = b"<s>assistant\nhihohi\xe4\xbd\xa0".to_vec();
        let t = ByteTable::new(vec![0, 3, 12, 13, 15, 17, 18, 19, 21, 22], blob, &[0]).unwrap();
        let b = IdSet::new(&[0]);
        let v = |e: &[u32], a: &[u32], start: Option<&[u8]>, table: Option<&ByteTable>| {
            let (es, as_) = (segment(e, &b), segment(a, &b));
            verdict(table, (e, &es), (a, &as_), 1, start, 20).0
        };
        let start: Option<&[u8]> = Some(b"<s>assistant");
        assert_eq!(v(&[0, 1, 2, 3], &[0, 1, 2, 4], start, Some(&t)), Verdict::AssistantText);
        assert_eq!(v(&[0, 1, 2, 3], &[0, 1, 2, 4], None, Some(&t)), Verdict::NonAssistantText);
        assert_eq!(v(&[0, 3, 2, 1], &[0, 4, 2, 1], start, Some(&t)), Verdict::NonAssistantText);
        // Only the expected side opens an assistant message.
        assert_eq!(v(&[0, 1, 2, 3], &[0, 3, 2, 4], start, Some(&t)), Verdict::NonAssistantText);
        assert_eq!(v(&[0, 1, 3], &[0, 1, 5, 6], start, Some(&t)), Verdict::SameText);
        assert_eq!(v(&[0, 1, 3], &[0, 1, 7], start, Some(&t)), Verdict::Unknown);
        assert_eq!(v(&[0, 1, 3], &[0, 1, 4], start, None), Verdict::Unknown);
        // Whole segments are valid text, but a probe of two ids ends inside a character.
        let (e, a) = ([0u32, 1, 7, 8, 3], [0u32, 1, 7, 8, 4]);
        let (es, as_) = (segment(&e, &b), segment(&a, &b));
        assert_eq!(verdict(Some(&t), (&e, &es), (&a, &as_), 1, start, 2).0, Verdict::Unknown);
        assert_eq!(verdict(Some(&t), (&e, &es), (&a, &as_), 1, start, 3).0, Verdict::AssistantText);
        let (e, a) = ([0u32, 0, 1], [0u32, 0, 1]);
        let segs = segment(&e, &b);
        assert_eq!(verdict(Some(&t), (&e, &segs), (&a, &segs), 0, start, 20).0, Verdict::SpecialType);
    }
}
