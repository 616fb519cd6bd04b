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

use crate::segment::IdSet;

/// Bytes of every id, and which ids are added tokens (decoded on their own).
#[derive(Debug, Clone)]
pub struct ByteTable {
    offsets: Vec<u32>,
    blob: Vec<u8>,
    added: IdSet,
}

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
        Ok(Self { offsets, blob, added: IdSet::new(added) })
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
    fn bad_tables_are_rejected() {
        assert!(ByteTable::new(vec![], vec![], &[]).is_err());
        assert!(ByteTable::new(vec![0, 2, 1], vec![0, 0], &[]).is_err());
        assert!(ByteTable::new(vec![0, 1], vec![0, 0], &[]).is_err());
        assert!(ByteTable::new(vec![0], vec![], &[]).unwrap().is_empty());
    }
}
