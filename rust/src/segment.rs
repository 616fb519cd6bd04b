//! Segmentation at boundary (special) ids and structural comparison.
//!
//! A sequence splits into segments: every boundary id is a one-id special
//! segment, and each maximal run of other ids is one content segment. Two
//! sequences can be compared segment by segment only when they have the
//! same number of segments and the same special/content pattern; then each
//! aligned pair either has identical ids (equal, whatever the tokenizer) or
//! needs a closer look (a different special id, or content whose ids differ).

/// A set of token ids with constant-time membership. Its memory is sized by
/// the ids present, never by how large they are: a bitset over the range
/// `min..=max` when that range is small, else the sorted ids (binary search).
#[derive(Debug, Clone)]
pub struct IdSet {
    /// The smallest member (`u32::MAX` when empty): ids below it are out
    /// without a table lookup. Boundary ids are usually the highest ids of a
    /// vocabulary, so most ids of a sequence take this shortcut.
    min: u32,
    bits: Vec<u64>,
    /// The members, sorted, when the bitset would be large for them.
    sparse: Vec<u32>,
}

/// The largest bitset `IdSet` builds: 2**22 bits (512 KiB) covers every
/// vocabulary's id range; a wider range of few ids is searched instead.
const MAX_BITS: u64 = 1 << 22;

impl Default for IdSet {
    fn default() -> Self {
        Self { min: u32::MAX, bits: Vec::new(), sparse: Vec::new() }
    }
}

impl IdSet {
    /// The set of `ids`.
    #[must_use]
    pub fn new(ids: &[u32]) -> Self {
        let (Some(&min), Some(&max)) = (ids.iter().min(), ids.iter().max()) else {
            return Self::default();
        };
        let span = u64::from(max - min) + 1;
        if span > MAX_BITS && span > 64 * ids.len() as u64 {
            let mut sparse = ids.to_vec();
            sparse.sort_unstable();
            sparse.dedup();
            return Self { min, bits: Vec::new(), sparse };
        }
        let mut bits = vec![0u64; span.div_ceil(64) as usize];
        for &id in ids {
            let off = id - min;
            bits[(off / 64) as usize] |= 1 << (off % 64);
        }
        Self { min, bits, sparse: Vec::new() }
    }

    /// Whether `id` is in the set.
    #[inline]
    #[must_use]
    pub fn contains(&self, id: u32) -> bool {
        if id < self.min {
            return false;
        }
        if !self.sparse.is_empty() {
            return self.sparse.binary_search(&id).is_ok();
        }
        let off = id - self.min;
        self.bits.get((off / 64) as usize).is_some_and(|w| w & (1 << (off % 64)) != 0)
    }

    /// Bytes the set holds (its table), for tests and memory accounting.
    #[must_use]
    pub fn table_bytes(&self) -> usize {
        self.bits.len() * 8 + self.sparse.len() * 4
    }
}

/// One segment: ids `start..end` of its sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub start: usize,
    pub end: usize,
    pub special: bool,
}

/// Split `ids` into segments at the ids of `boundary`.
///
/// ```
/// use tito_fast::segment::{segment, IdSet};
/// let segs = segment(&[9, 1, 2, 9, 3], &IdSet::new(&[9]));
/// let kinds: Vec<(usize, usize, bool)> = segs.iter().map(|s| (s.start, s.end, s.special)).collect();
/// assert_eq!(kinds, vec![(0, 1, true), (1, 3, false), (3, 4, true), (4, 5, false)]);
/// ```
#[must_use]
pub fn segment(ids: &[u32], boundary: &IdSet) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut run_start = 0;
    for (i, &id) in ids.iter().enumerate() {
        if boundary.contains(id) {
            if run_start < i {
                out.push(Segment { start: run_start, end: i, special: false });
            }
            out.push(Segment { start: i, end: i + 1, special: true });
            run_start = i + 1;
        }
    }
    if run_start < ids.len() {
        out.push(Segment { start: run_start, end: ids.len(), special: false });
    }
    out
}

/// The outcome of aligning two segment lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alignment {
    /// Counts differ, or the special/content pattern does.
    Structure { expected: Vec<Segment>, actual: Vec<Segment>, pattern_only: bool },
    /// Aligned; the indices of segment pairs whose ids differ.
    Aligned { expected: Vec<Segment>, actual: Vec<Segment>, differing: Vec<usize> },
}

/// Segment both sequences and find the aligned pairs whose ids differ.
#[must_use]
pub fn align(expected: &[u32], actual: &[u32], boundary: &IdSet) -> Alignment {
    let e = segment(expected, boundary);
    let a = segment(actual, boundary);
    if e.len() != a.len() {
        return Alignment::Structure { expected: e, actual: a, pattern_only: false };
    }
    if e.iter().zip(&a).any(|(x, y)| x.special != y.special) {
        return Alignment::Structure { expected: e, actual: a, pattern_only: true };
    }
    let differing = e
        .iter()
        .zip(&a)
        .enumerate()
        .filter(|(_, (x, y))| expected[x.start..x.end] != actual[y.start..y.end])
        .map(|(i, _)| i)
        .collect();
    Alignment::Aligned { expected: e, actual: a, differing }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_sets_are_sized_by_their_ids() {
        for ids in
            [vec![], vec![7], vec![151_643, 151_645, 151_700], vec![0, u32::MAX], vec![5, 4_000_000_000, 4_000_000_001]]
        {
            let set = IdSet::new(&ids);
            assert!(set.table_bytes() <= (1 << 19), "{ids:?}: {} bytes", set.table_bytes());
            for &id in &ids {
                assert!(set.contains(id), "{ids:?} lacks {id}");
            }
            for probe in [1u32, 6, 8, 151_644, 3_999_999_999, u32::MAX - 1] {
                assert_eq!(set.contains(probe), ids.contains(&probe), "{ids:?} {probe}");
            }
        }
    }

    #[test]
    fn idset() {
        let s = IdSet::new(&[0, 63, 64, 151_645]);
        for id in [0, 63, 64, 151_645] {
            assert!(s.contains(id));
        }
        for id in [1, 62, 65, 151_644, u32::MAX] {
            assert!(!s.contains(id));
        }
        let empty = IdSet::new(&[]);
        assert!(!empty.contains(0) && !empty.contains(u32::MAX));
        let high = IdSet::new(&[100, 7]);
        assert!(high.contains(7) && high.contains(100) && !high.contains(6) && !high.contains(8));
    }

    #[test]
    fn segments_cover_the_sequence() {
        let b = IdSet::new(&[9]);
        assert!(segment(&[], &b).is_empty());
        assert_eq!(segment(&[9, 9], &b).len(), 2);
        assert_eq!(segment(&[1, 2], &b), vec![Segment { start: 0, end: 2, special: false }]);
    }

    #[test]
    fn alignment_cases() {
        let b = IdSet::new(&[9, 8]);
        assert!(matches!(align(&[9, 1], &[9], &b), Alignment::Structure { pattern_only: false, .. }));
        assert!(matches!(align(&[9, 1], &[1, 9], &b), Alignment::Structure { pattern_only: true, .. }));
        match align(&[9, 1, 2, 8, 3], &[8, 1, 2, 8, 4, 4], &b) {
            Alignment::Aligned { differing, .. } => assert_eq!(differing, vec![0, 3]),
            other => panic!("{other:?}"),
        }
    }
}
