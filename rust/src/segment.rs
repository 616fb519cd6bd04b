//! Segmentation at boundary (special) ids and structural comparison.
//!
//! A sequence splits into segments: every boundary id is a one-id special
//! segment, and each maximal run of other ids is one content segment. Two
//! sequences can be compared segment by segment only when they have the
//! same number of segments and the same special/content pattern; then each
//! aligned pair either has identical ids (equal, whatever the tokenizer) or
//! needs a closer look (a different special id, or content whose ids differ).

/// A set of token ids as a bitset: constant-time membership for any id.
#[derive(Debug, Clone)]
pub struct IdSet {
    bits: Vec<u64>,
    /// The smallest member (`u32::MAX` when empty): ids below it are out
    /// without a table lookup. Boundary ids are usually the highest ids of a
    /// vocabulary, so most ids of a sequence take this shortcut.
    min: u32,
}

impl Default for IdSet {
    fn default() -> Self {
        Self { bits: Vec::new(), min: u32::MAX }
    }
}

impl IdSet {
    /// The set of `ids`.
    #[must_use]
    pub fn new(ids: &[u32]) -> Self {
        let mut s = Self::default();
        for &id in ids {
            s.insert(id);
        }
        s
    }

    /// Add one id.
    pub fn insert(&mut self, id: u32) {
        self.min = self.min.min(id);
        let w = (id / 64) as usize;
        if w >= self.bits.len() {
            self.bits.resize(w + 1, 0);
        }
        self.bits[w] |= 1 << (id % 64);
    }

    /// Whether `id` is in the set.
    #[inline]
    #[must_use]
    pub fn contains(&self, id: u32) -> bool {
        id >= self.min && self.bits.get((id / 64) as usize).is_some_and(|w| w & (1 << (id % 64)) != 0)
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
