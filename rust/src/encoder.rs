//! A whole-text encoder for byte-level BPE tokenizers: added tokens, the
//! pre-tokenizer split, then BPE on each piece, as `tokenizers` encodes with
//! `add_special_tokens=False`.
//!
//! Added tokens are found in two passes, as the tokenizer finds them: tokens
//! that are not normalized in the raw text, then normalized ones inside the
//! text between (leftmost-longest in each pass). The only normalizer covered
//! is NFC, and only where it changes nothing: a text piece that is not
//! quick-check NFC is reported as [`Uncovered`] and the caller encodes the text
//! with the tokenizer itself. Added tokens that strip whitespace or match
//! single words are not covered (the Python side does not build an encoder
//! for them).

use unicode_normalization::{is_nfc_quick, IsNormalized};

use crate::added::{AddedTokens, Part};
use crate::bpe::Bpe;
use crate::pretok::Splitter;

/// The text could not be encoded here: the caller uses the tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uncovered {
    /// Byte offset of the text piece the normalizer might change.
    pub at: usize,
}

/// See the module doc.
#[derive(Debug)]
pub struct Encoder {
    bpe: Bpe,
    pattern: Splitter,
    added: AddedTokens,
    nfc: bool,
}

impl Encoder {
    /// `raw_added` / `normalized_added`: (content, id) of the added tokens the
    /// tokenizer matches before / after normalizing; `nfc`: the normalizer is NFC.
    ///
    /// # Errors
    /// A message when an added token is empty.
    pub fn new(
        bpe: Bpe,
        pattern: Splitter,
        raw_added: &[(String, u32)],
        normalized_added: &[(String, u32)],
        nfc: bool,
    ) -> Result<Self, String> {
        Ok(Encoder { bpe, pattern, added: AddedTokens::new(raw_added, normalized_added)?, nfc })
    }

    /// Forget the BPE results remembered per piece.
    pub fn clear_cache(&self) {
        self.bpe.clear_cache();
    }

    /// The ids of `text`.
    ///
    /// # Errors
    /// [`Uncovered`] when normalization might change a piece of the text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, Uncovered> {
        let mut out = Vec::with_capacity(text.len() / 3 + 4);
        let mut pieces = Vec::new();
        self.added.split_raw(text, &mut |start, part| match part {
            Part::Token(id) => {
                out.push(id);
                Ok(())
            }
            Part::Text(seg) => {
                if self.nfc && !seg.is_ascii() && is_nfc_quick(seg.chars()) != IsNormalized::Yes {
                    return Err(Uncovered { at: start });
                }
                self.added.split_normalized(seg, start, &mut |_, inner| {
                    match inner {
                        Part::Token(id) => out.push(id),
                        Part::Text(t) => {
                            pieces.clear();
                            pieces.extend(self.pattern.split(t));
                            self.bpe.encode_pieces(t.as_bytes(), &pieces, &mut out);
                        }
                    }
                    Ok(())
                })
            }
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> Encoder {
        let mut vocab: Vec<(Vec<u8>, u32)> = (0..=255u8).map(|b| (vec![b], u32::from(b))).collect();
        vocab.push((b"he".to_vec(), 256));
        let bpe = Bpe::new(vocab, &[(u32::from(b'h'), u32::from(b'e'), 256)], false).unwrap();
        let raw = [("<|a|>".to_string(), 1000), ("<|a|>x".to_string(), 1001)];
        let norm = [("<t>".to_string(), 1002)];
        Encoder::new(bpe, Splitter::from_name("qwen").unwrap(), &raw, &norm, true).unwrap()
    }

    #[test]
    fn added_tokens_split_longest_first_in_two_passes() {
        let e = toy();
        let h = u32::from(b'h');
        assert_eq!(e.encode("he<|a|>xhe").unwrap(), [256, 1001, 256]);
        assert_eq!(e.encode("<|a|>he<t>h").unwrap(), [1000, 256, 1002, h]);
        assert_eq!(e.encode("").unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn text_nfc_might_change_is_uncovered() {
        let e = toy();
        assert!(e.encode("caf\u{e9}").is_ok());
        assert_eq!(e.encode("<|a|>cafe\u{301}"), Err(Uncovered { at: 5 }));
    }
}
