//! Byte-level BPE on one pre-tokenized piece.
//!
//! A piece starts as one symbol per byte. Merges apply lowest rank first; among
//! pairs of equal rank the leftmost first, one occurrence at a time, and a
//! merged symbol forms new pairs with its neighbours. Candidate pairs wait in a
//! heap keyed by (rank, position); an entry whose pair has changed since it was
//! queued is skipped when the pair now at its position no longer produces the
//! entry's token. This is the order the `tokenizers` library applies merges in,
//! so the ids are the same as its ids, including for vocabularies where two
//! merges produce the same token.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::FxHashMap;
use thiserror::Error;

/// A vocabulary and merges this encoder cannot use.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BpeError {
    /// A byte has no token of its own, so some byte strings cannot be encoded.
    #[error("byte 0x{0:02x} has no token in the vocabulary")]
    MissingByte(u8),
    /// A merge lists the same pair as an earlier one.
    #[error("merge {rank} repeats an earlier pair ({left}, {right})")]
    RepeatedMerge {
        /// Index of the repeated merge.
        rank: usize,
        /// Its left id.
        left: u32,
        /// Its right id.
        right: u32,
    },
}

/// Pieces whose ids are remembered (words repeat; merging is the costly part).
const CACHE_ENTRIES: usize = 1 << 16;
/// Longer pieces are merged every time (they rarely repeat).
const CACHE_PIECE_LEN: usize = 64;

/// Vocabulary and merges of a byte-level BPE model.
#[derive(Debug)]
pub struct Bpe {
    vocab: FxHashMap<Box<[u8]>, u32>,
    /// (left, right) -> (rank, merged id)
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    byte_ids: [u32; 256],
    ignore_merges: bool,
    /// Names this model's piece caches, which are per thread (a shared cache
    /// cost two atomic operations a piece, and its lock's cache line moved
    /// between cores on every piece).
    uid: u64,
    /// Bumped by `clear_cache`: a thread's cache of an older generation is cleared before use.
    generation: AtomicU64,
}

type PieceCache = FxHashMap<Box<[u8]>, Box<[u32]>>;

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// The piece caches of one thread: piece -> ids, cleared when full, for the
/// few models it used last.
struct LocalCache {
    uid: u64,
    generation: u64,
    map: PieceCache,
}

const LOCAL_MODELS: usize = 4;

thread_local! {
    static CACHES: RefCell<Vec<LocalCache>> = const { RefCell::new(Vec::new()) };
}

#[derive(Debug, Clone, Copy)]
struct Symbol {
    id: u32,
    prev: usize, // usize::MAX: none
    next: usize, // usize::MAX: none
    alive: bool,
}

const NONE: usize = usize::MAX;

impl Bpe {
    /// `vocab`: (token bytes, id); `merges`: (left id, right id, merged id) in
    /// rank order; `ignore_merges`: a piece that is a whole vocabulary entry
    /// is that entry.
    ///
    /// # Errors
    /// [`BpeError`] when a byte has no token of its own (the model cannot
    /// encode every byte string) or a pair is listed twice.
    pub fn new(vocab: Vec<(Vec<u8>, u32)>, merges: &[(u32, u32, u32)], ignore_merges: bool) -> Result<Self, BpeError> {
        let mut map: FxHashMap<Box<[u8]>, u32> = FxHashMap::default();
        map.reserve(vocab.len());
        for (bytes, id) in vocab {
            map.insert(bytes.into_boxed_slice(), id);
        }
        let mut byte_ids = [0u32; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = *map.get(&[b as u8][..]).ok_or(BpeError::MissingByte(b as u8))?;
        }
        let mut merge_map: FxHashMap<(u32, u32), (u32, u32)> = FxHashMap::default();
        merge_map.reserve(merges.len());
        for (rank, &(a, b, new)) in merges.iter().enumerate() {
            if merge_map.contains_key(&(a, b)) {
                return Err(BpeError::RepeatedMerge { rank, left: a, right: b });
            }
            merge_map.insert((a, b), (u32::try_from(rank).unwrap_or(u32::MAX), new));
        }
        let uid = NEXT_UID.fetch_add(1, Ordering::Relaxed);
        Ok(Bpe { vocab: map, merges: merge_map, byte_ids, ignore_merges, uid, generation: AtomicU64::new(0) })
    }

    /// Forget the remembered pieces, on every thread (the ids stay the same; for measuring).
    pub fn clear_cache(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Run `f` with this thread's piece cache of this model.
    fn with_cache<R>(&self, f: impl FnOnce(&mut PieceCache) -> R) -> R {
        CACHES.with_borrow_mut(|slots| {
            let generation = self.generation.load(Ordering::Relaxed);
            let at = match slots.iter().position(|c| c.uid == self.uid) {
                Some(at) => at,
                None => {
                    if slots.len() >= LOCAL_MODELS {
                        slots.remove(0);
                    }
                    slots.push(LocalCache { uid: self.uid, generation, map: PieceCache::default() });
                    slots.len() - 1
                }
            };
            let cache = &mut slots[at];
            if cache.generation != generation {
                cache.map.clear();
                cache.generation = generation;
            }
            f(&mut cache.map)
        })
    }

    /// Append the ids of each piece `text[a..b]` of `pieces` to `out`.
    pub fn encode_pieces(&self, text: &[u8], pieces: &[(usize, usize)], out: &mut Vec<u32>) {
        self.with_cache(|cache| {
            for &(a, b) in pieces {
                self.encode_cached(&text[a..b], out, cache);
            }
        });
    }

    /// Append the ids of `piece` to `out`.
    pub fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        self.with_cache(|cache| self.encode_cached(piece, out, cache));
    }

    #[inline]
    fn encode_cached(&self, piece: &[u8], out: &mut Vec<u32>, cache: &mut PieceCache) {
        if piece.is_empty() {
            return;
        }
        if piece.len() == 1 {
            out.push(self.byte_ids[piece[0] as usize]);
            return;
        }
        if self.ignore_merges {
            if let Some(&id) = self.vocab.get(piece) {
                out.push(id);
                return;
            }
        }
        if piece.len() > CACHE_PIECE_LEN {
            self.merge(piece, out);
            return;
        }
        if let Some(ids) = cache.get(piece) {
            out.extend_from_slice(ids);
            return;
        }
        let start = out.len();
        self.merge(piece, out);
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(piece.into(), out[start..].into());
    }

    /// Apply the merges to `piece` (two bytes or more) and append its ids.
    fn merge(&self, piece: &[u8], out: &mut Vec<u32>) {
        let n = piece.len();
        let mut syms: Vec<Symbol> = piece
            .iter()
            .enumerate()
            .map(|(i, &b)| Symbol {
                id: self.byte_ids[b as usize],
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
                alive: true,
            })
            .collect();
        let mut heap: BinaryHeap<Reverse<(u32, usize, u32)>> = BinaryHeap::with_capacity(n);
        for i in 0..n - 1 {
            if let Some(&(rank, new)) = self.merges.get(&(syms[i].id, syms[i + 1].id)) {
                heap.push(Reverse((rank, i, new)));
            }
        }
        while let Some(Reverse((_, pos, new))) = heap.pop() {
            let left = syms[pos];
            if !left.alive || left.next == NONE {
                continue;
            }
            let right_pos = left.next;
            let right = syms[right_pos];
            match self.merges.get(&(left.id, right.id)) {
                Some(&(_, id)) if id == new => {}
                _ => continue, // stale: the pair at `pos` changed since it was queued
            }
            syms[pos].id = new;
            syms[pos].next = right.next;
            syms[right_pos].alive = false;
            if right.next != NONE {
                syms[right.next].prev = pos;
            }
            if left.prev != NONE {
                let p = left.prev;
                if let Some(&(rank, m)) = self.merges.get(&(syms[p].id, new)) {
                    heap.push(Reverse((rank, p, m)));
                }
            }
            if right.next != NONE {
                if let Some(&(rank, m)) = self.merges.get(&(new, syms[right.next].id)) {
                    heap.push(Reverse((rank, pos, m)));
                }
            }
        }
        let mut i = 0;
        while i != NONE {
            out.push(syms[i].id);
            i = syms[i].next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy model: every byte, plus merges "ab", "bc", "abc" (via "ab"+"c"), "aa".
    fn toy(ignore_merges: bool) -> Bpe {
        let mut vocab: Vec<(Vec<u8>, u32)> = (0..=255u8).map(|b| (vec![b], u32::from(b))).collect();
        for (k, t) in ["ab", "bc", "abc", "aa", "xyz"].iter().enumerate() {
            vocab.push((t.as_bytes().to_vec(), 256 + k as u32));
        }
        let (a, b, c) = (u32::from(b'a'), u32::from(b'b'), u32::from(b'c'));
        let merges = [(b, c, 257), (a, b, 256), (256, c, 258), (a, a, 259)];
        Bpe::new(vocab, &merges, ignore_merges).unwrap()
    }

    fn enc(m: &Bpe, s: &str) -> Vec<u32> {
        let mut out = Vec::new();
        m.encode_piece(s.as_bytes(), &mut out);
        out
    }

    #[test]
    fn lowest_rank_first_then_leftmost() {
        let m = toy(false);
        // "bc" has the lowest rank, so "abc" becomes a + bc (no merge a+bc).
        assert_eq!(enc(&m, "abc"), [u32::from(b'a'), 257]);
        assert_eq!(enc(&m, "abab"), [256, 256]);
        assert_eq!(enc(&m, "aaa"), [259, u32::from(b'a')]);
        assert_eq!(enc(&m, "ababc"), [256, u32::from(b'a'), 257]);
        assert_eq!(enc(&m, "z"), [u32::from(b'z')]);
        // A whole-vocabulary piece without merges stays bytes unless merges are ignored.
        assert_eq!(enc(&m, "xyz"), [u32::from(b'x'), u32::from(b'y'), u32::from(b'z')]);
        assert_eq!(enc(&toy(true), "xyz"), [260]);
    }

    #[test]
    fn cached_pieces_give_the_same_ids() {
        let m = toy(false);
        let long = "ab".repeat(CACHE_PIECE_LEN); // past the cached length
        for s in ["abc", "ababc", "aaa", long.as_str()] {
            let first = enc(&m, s);
            assert_eq!(enc(&m, s), first, "{s}");
        }
        assert_eq!(enc(&m, &long), vec![256; CACHE_PIECE_LEN]);
        assert_eq!(m.with_cache(|c| c.len()), 3);
        m.clear_cache();
        assert_eq!(m.with_cache(|c| c.len()), 0);
        assert_eq!(enc(&m, "abc"), [u32::from(b'a'), 257]);
    }

    #[test]
    fn a_missing_byte_is_an_error() {
        let vocab = vec![(b"a".to_vec(), 0)];
        assert_eq!(Bpe::new(vocab, &[], false).unwrap_err(), BpeError::MissingByte(0));
        let bytes: Vec<(Vec<u8>, u32)> = (0..=255u8).map(|b| (vec![b], u32::from(b))).collect();
        let err = Bpe::new(bytes, &[(1, 2, 3), (1, 2, 4)], false).unwrap_err();
        assert_eq!(err, BpeError::RepeatedMerge { rank: 1, left: 1, right: 2 });
    }
}
