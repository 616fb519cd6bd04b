//! An append-only token buffer for one session, with checkpoints.
//!
//! The reference keeps a full copy of the ids at every checkpoint, so a
//! session of T turns costs O(T × tokens). Here the ids are stored once;
//! a checkpoint is just a length. The one edit that rewrites stored ids,
//! [`TokenBuffer::replace_last`] (the GLM-style boundary swap), records the
//! ids it removes so that a rollback restores every checkpoint exactly.
//!
//! Readers can hold a [`TokenBuffer::snapshot`]: a shared, immutable view of
//! the ids. A later mutation never changes what a snapshot sees: while one is
//! alive the buffer copies its ids before writing (copy on write).

use std::sync::Arc;

use crate::error::BufferError;

/// Ids removed by a `replace_last` that cut into checkpointed ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undo {
    /// Number of checkpoints that existed when the cut happened.
    pub tag: usize,
    /// Length of the buffer right after the cut.
    pub pos: usize,
    /// The ids that were removed, in order.
    pub removed: Vec<u32>,
}

/// Append-only id storage with checkpoints and exact rollback.
#[derive(Debug, Clone, Default)]
pub struct TokenBuffer {
    data: Arc<Vec<u32>>,
    checkpoints: Vec<usize>,
    undo: Vec<Undo>,
}

/// Capacity growth factor while appending: 5/4, so unused capacity stays
/// within a quarter of the ids (a doubling vector can waste half).
fn grow(v: &mut Vec<u32>, extra: usize) {
    let need = v.len() + extra;
    if need > v.capacity() {
        let target = need.max(v.capacity() + v.capacity() / 4).max(64);
        v.reserve_exact(target - v.len());
    }
}

impl TokenBuffer {
    /// An empty buffer.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A buffer holding `ids`, with no checkpoint.
    #[must_use]
    pub fn from_ids(ids: Vec<u32>) -> Self {
        Self { data: Arc::new(ids), ..Self::default() }
    }

    /// Rebuild a buffer from its parts (the inverse of [`Self::parts`]).
    ///
    /// # Errors
    /// [`BufferError::InvalidState`] when an undo record names a checkpoint
    /// that does not exist or the records are out of order.
    pub fn from_parts(ids: Vec<u32>, checkpoints: Vec<usize>, undo: Vec<Undo>) -> Result<Self, BufferError> {
        // Checkpoints may exceed the current length or decrease: a
        // `replace_last` below a checkpoint does that, and its undo record
        // brings the ids back. What must hold is what rollback relies on.
        if undo.iter().any(|u| u.tag == 0 || u.tag > checkpoints.len()) {
            return Err(BufferError::InvalidState("undo record names a missing checkpoint".into()));
        }
        if undo.windows(2).any(|w| w[0].tag > w[1].tag) {
            return Err(BufferError::InvalidState("undo records out of order".into()));
        }
        // Every rollback must find the ids it restores: replay the lengths a
        // rollback to each checkpoint would see (undo records newest first).
        let mut len = ids.len();
        let mut j = undo.len();
        for keep in (1..=checkpoints.len()).rev() {
            while j > 0 && undo[j - 1].tag >= keep {
                let u = &undo[j - 1];
                if u.pos > len {
                    return Err(BufferError::InvalidState(format!(
                        "undo record at {} is beyond the {len} ids it would restore",
                        u.pos
                    )));
                }
                len = u.pos + u.removed.len();
                j -= 1;
            }
            if checkpoints[keep - 1] > len {
                return Err(BufferError::InvalidState(format!(
                    "checkpoint {} is at {}, beyond the {len} ids a rollback to it would keep",
                    keep - 1,
                    checkpoints[keep - 1]
                )));
            }
        }
        Ok(Self { data: Arc::new(ids), checkpoints, undo })
    }

    /// The ids, checkpoints and undo records (for pickling).
    #[must_use]
    pub fn parts(&self) -> (&[u32], &[usize], &[Undo]) {
        (&self.data, &self.checkpoints, &self.undo)
    }

    /// The current ids.
    #[must_use]
    pub fn as_slice(&self) -> &[u32] {
        &self.data
    }

    /// Number of ids.
    #[must_use]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the buffer holds no id.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Lengths recorded by [`Self::checkpoint`], oldest first.
    #[must_use]
    pub fn checkpoints(&self) -> &[usize] {
        &self.checkpoints
    }

    /// Bytes this buffer owns: id capacity, checkpoints and undo records.
    #[must_use]
    pub fn nbytes(&self) -> usize {
        self.data.capacity() * 4
            + self.checkpoints.capacity() * std::mem::size_of::<usize>()
            + self.undo.capacity() * std::mem::size_of::<Undo>()
            + self.undo.iter().map(|u| u.removed.capacity() * 4).sum::<usize>()
    }

    /// A shared read-only view of the current ids. It stays valid and
    /// unchanged whatever happens to the buffer afterwards.
    #[must_use]
    pub fn snapshot(&self) -> Arc<Vec<u32>> {
        Arc::clone(&self.data)
    }

    /// Mutable ids; copies them first if a snapshot shares them.
    fn data_mut(&mut self) -> &mut Vec<u32> {
        if Arc::get_mut(&mut self.data).is_none() {
            let mut copy = Vec::with_capacity(self.data.len() + self.data.len() / 4);
            copy.extend_from_slice(&self.data);
            self.data = Arc::new(copy);
        }
        Arc::get_mut(&mut self.data).expect("the ids were just made unique")
    }

    /// Append ids.
    pub fn extend(&mut self, ids: &[u32]) {
        if ids.is_empty() {
            return;
        }
        let v = self.data_mut();
        grow(v, ids.len());
        v.extend_from_slice(ids);
    }

    /// Record the current length as a checkpoint and return it.
    pub fn checkpoint(&mut self) -> usize {
        let n = self.len();
        self.checkpoints.push(n);
        n
    }

    /// Drop the `n` newest checkpoints and restore the ids to the newest
    /// checkpoint that remains (empty when none remains). Ids added after
    /// that checkpoint are discarded; `rollback(0)` only discards ids added
    /// since the newest checkpoint. Returns the new length.
    ///
    /// # Errors
    /// [`BufferError::NotEnoughCheckpoints`] when `n` exceeds the number of
    /// checkpoints; the buffer is then unchanged.
    pub fn rollback(&mut self, n: usize) -> Result<usize, BufferError> {
        let available = self.checkpoints.len();
        if n > available {
            return Err(BufferError::NotEnoughCheckpoints { requested: n, available });
        }
        let keep = available - n;
        let target = if keep == 0 { 0 } else { self.checkpoints[keep - 1] };
        // Undo, newest first, every cut made since checkpoint `keep` existed.
        let first_undo = self.undo.partition_point(|u| u.tag < keep.max(1));
        let undo: Vec<Undo> = self.undo.drain(first_undo..).collect();
        let v = self.data_mut();
        for u in undo.iter().rev() {
            v.truncate(u.pos);
            v.extend_from_slice(&u.removed);
        }
        v.truncate(target);
        if keep == 0 {
            self.undo.clear();
        }
        self.checkpoints.truncate(keep);
        Ok(target)
    }

    /// Remove the last `n` ids and append `ids` in their place (a boundary
    /// swap). Ids removed from below the newest checkpoint are recorded so
    /// that a later rollback restores them.
    ///
    /// # Errors
    /// [`BufferError::ReplaceTooLong`] when `n` exceeds the length; the buffer
    /// is then unchanged.
    pub fn replace_last(&mut self, n: usize, ids: &[u32]) -> Result<(), BufferError> {
        let len = self.len();
        if n > len {
            return Err(BufferError::ReplaceTooLong { requested: n, len });
        }
        let pos = len - n;
        let tag = self.checkpoints.len();
        // Only a cut below some checkpoint changes ids that a rollback must
        // bring back; a cut above all of them touches uncommitted ids only.
        if self.checkpoints.iter().any(|&c| c > pos) {
            self.undo.push(Undo { tag, pos, removed: self.data[pos..].to_vec() });
        }
        let v = self.data_mut();
        v.truncate(pos);
        grow(v, ids.len());
        v.extend_from_slice(ids);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_states_are_refused() {
        assert!(TokenBuffer::from_parts(vec![1], vec![100], vec![]).is_err());
        let undo = vec![Undo { tag: 1, pos: 5, removed: vec![1] }];
        assert!(TokenBuffer::from_parts(vec![1, 2], vec![2], undo).is_err());
        let mut b = TokenBuffer::from_ids(vec![1, 2, 9]);
        b.checkpoint();
        b.replace_last(1, &[3, 4]).unwrap();
        b.checkpoint();
        let (ids, cps, undo) = b.parts();
        let again = TokenBuffer::from_parts(ids.to_vec(), cps.to_vec(), undo.to_vec()).unwrap();
        assert_eq!(again.parts().0, b.parts().0);
    }

    #[test]
    fn rollback_restores_checkpoints() {
        let mut b = TokenBuffer::new();
        b.extend(&[1, 2, 3]);
        assert_eq!(b.checkpoint(), 3);
        b.extend(&[4, 5]);
        assert_eq!(b.checkpoint(), 5);
        b.extend(&[6]);
        assert_eq!(b.rollback(0).unwrap(), 5);
        assert_eq!(b.as_slice(), &[1, 2, 3, 4, 5]);
        assert_eq!(b.rollback(1).unwrap(), 3);
        assert_eq!(b.as_slice(), &[1, 2, 3]);
        assert_eq!(b.checkpoints(), &[3]);
        assert!(b.rollback(2).is_err());
        assert_eq!(b.rollback(1).unwrap(), 0);
        assert!(b.is_empty());
    }

    #[test]
    fn replace_last_is_undone_by_rollback() {
        let mut b = TokenBuffer::from_ids(vec![1, 2, 9]);
        b.checkpoint(); // [1, 2, 9]
        b.replace_last(1, &[3, 4]).unwrap(); // GLM-style swap of the last id
        b.checkpoint(); // [1, 2, 3, 4]
        b.replace_last(2, &[5]).unwrap();
        b.extend(&[6]);
        b.checkpoint(); // [1, 2, 5, 6]
        assert_eq!(b.as_slice(), &[1, 2, 5, 6]);
        b.rollback(1).unwrap();
        assert_eq!(b.as_slice(), &[1, 2, 3, 4]);
        b.rollback(1).unwrap();
        assert_eq!(b.as_slice(), &[1, 2, 9]);
    }

    #[test]
    fn snapshot_is_isolated_from_later_writes() {
        let mut b = TokenBuffer::from_ids(vec![1, 2, 3]);
        let snap = b.snapshot();
        b.extend(&[4]);
        b.replace_last(3, &[]).unwrap();
        assert_eq!(snap.as_slice(), &[1, 2, 3]);
        assert_eq!(b.as_slice(), &[1]);
    }

    #[test]
    fn growth_stays_within_a_quarter() {
        let mut b = TokenBuffer::new();
        for _ in 0..300 {
            b.extend(&[7; 300]);
            b.checkpoint();
        }
        assert_eq!(b.len(), 90_000);
        assert!(b.nbytes() as f64 <= 1.3 * 90_000.0 * 4.0, "{}", b.nbytes());
    }

    #[test]
    fn from_parts_validates() {
        let bad = Undo { tag: 3, pos: 0, removed: vec![] };
        assert!(TokenBuffer::from_parts(vec![1], vec![1], vec![bad]).is_err());
        let b = TokenBuffer::from_parts(vec![1, 2], vec![1, 2], vec![]).unwrap();
        assert_eq!(b.checkpoints(), &[1, 2]);
    }
}
