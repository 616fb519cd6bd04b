//! Randomised tests of the core kernels against plain definitions.
//!
//! A small xorshift generator keeps the tests dependency-free and
//! reproducible; set `TITO_FAST_SEED` to explore other seeds.

use tito_fast::batch::{common_prefix_len_csr, common_prefix_len_pairs, with_threads};
use tito_fast::buffer::TokenBuffer;
use tito_fast::ids::Raw;
use tito_fast::merge::{trimmed_len, Splice};
use tito_fast::prefix::{check_prefix, common_prefix_len, CHUNK};

struct Rng(u64);

impl Rng {
    fn new(salt: u64) -> Self {
        let seed = std::env::var("TITO_FAST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
        Rng((seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Between 0 and `max - 1` random ids.
    fn ids_upto(&mut self, max: usize, vocab: u32) -> Vec<u32> {
        let n = self.below(max);
        self.ids(n, vocab)
    }
    fn ids(&mut self, n: usize, vocab: u32) -> Vec<u32> {
        (0..n).map(|_| (self.next() % u64::from(vocab)) as u32).collect()
    }
}

fn naive_lcp(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[test]
fn lcp_random_divergence_positions() {
    let mut rng = Rng::new(1);
    for _ in 0..2000 {
        let n = rng.below(5 * CHUNK);
        let a = rng.ids(n, 8);
        let mut b = a.clone();
        match rng.below(4) {
            0 => {}
            1 => b.truncate(rng.below(n + 1)),
            2 => b.extend(rng.ids_upto(10, 8)),
            _ => {
                if n > 0 {
                    let p = rng.below(n);
                    b[p] = b[p].wrapping_add(1 + rng.below(5) as u32);
                }
            }
        }
        assert_eq!(common_prefix_len(&a, &b), naive_lcp(&a, &b));
        assert_eq!(common_prefix_len(&b, &a), naive_lcp(&a, &b));
    }
}

#[test]
fn lcp_large_and_high_ids() {
    let a: Vec<u32> = (0..1_000_003u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let mut b = a.clone();
    assert_eq!(common_prefix_len(&a, &b), a.len());
    for pos in [0, 63, 64, 65, 999_999, 1_000_002] {
        b[pos] ^= 0x8000_0000;
        assert_eq!(common_prefix_len(&a, &b), pos);
        b[pos] ^= 0x8000_0000;
    }
}

fn naive_check(stored: &[u32], new: &[u32], trim: usize) -> Option<usize> {
    // The reference's decision, written as directly as possible.
    if stored.is_empty() {
        return None;
    }
    let check = stored.len() as i64 - trim as i64;
    if check <= 0 {
        return None;
    }
    let check = check as usize;
    let head: Vec<u32> = new.iter().take(check).copied().collect();
    if head == stored[..check] {
        return None;
    }
    let first = (0..check.min(new.len())).find(|&i| new[i] != stored[i]);
    Some(first.unwrap_or(check.min(new.len())))
}

#[test]
fn check_prefix_matches_the_reference_decision() {
    let mut rng = Rng::new(2);
    for _ in 0..3000 {
        let stored = rng.ids_upto(40, 3);
        let mut new = stored.clone();
        if rng.below(2) == 0 {
            new.truncate(rng.below(stored.len() + 1));
        }
        if rng.below(2) == 0 && !new.is_empty() {
            let p = rng.below(new.len());
            new[p] = rng.ids(1, 3)[0];
        }
        new.extend(rng.ids_upto(5, 3));
        let trim = rng.below(4);
        let got = check_prefix(&stored, &new, trim).err().map(|e| e.index);
        assert_eq!(got, naive_check(&stored, &new, trim), "{stored:?} {new:?} {trim}");
        if let Err(e) = check_prefix(&stored, &new, trim) {
            assert_eq!(e.matched, e.index);
            assert_eq!(e.checked_len, stored.len() - trim);
            assert_eq!((e.stored_len, e.new_len), (stored.len(), new.len()));
        }
    }
}

#[test]
fn merge_and_trim_random() {
    let mut rng = Rng::new(3);
    for _ in 0..2000 {
        let prefix = rng.ids_upto(6, 4);
        let inc = rng.ids_upto(4, 4);
        let s = Splice { append_after: Some((1, vec![9])), drop_last_if_in: vec![2] };
        let mut want = prefix.clone();
        if want.last() == Some(&2) {
            want.pop();
        }
        if want.last() == Some(&1) {
            want.push(9);
        }
        want.extend(&inc);
        assert_eq!(s.merge(&prefix, &inc), want);
        let mut t = prefix.clone();
        while t.last().is_some_and(|x| [0, 3].contains(x)) {
            t.pop();
        }
        assert_eq!(trimmed_len(&prefix, &[0, 3]), t.len());
    }
}

/// The reference's model: a full copy of the ids per checkpoint.
#[test]
fn buffer_matches_a_list_of_full_copies() {
    let mut rng = Rng::new(4);
    for _ in 0..300 {
        let mut buf = TokenBuffer::new();
        let mut cur: Vec<u32> = Vec::new();
        let mut copies: Vec<Vec<u32>> = Vec::new();
        let mut snaps: Vec<(std::sync::Arc<Vec<u32>>, Vec<u32>)> = Vec::new();
        for _ in 0..60 {
            match rng.below(7) {
                0 | 1 => {
                    let ids = rng.ids_upto(5, 50);
                    buf.extend(&ids);
                    cur.extend(&ids);
                }
                2 => {
                    assert_eq!(buf.checkpoint(), cur.len());
                    copies.push(cur.clone());
                }
                3 => {
                    let n = rng.below(copies.len() + 2);
                    let r = buf.rollback(n);
                    if n > copies.len() {
                        assert!(r.is_err());
                    } else {
                        copies.truncate(copies.len() - n);
                        cur = copies.last().cloned().unwrap_or_default();
                        assert_eq!(r.unwrap(), cur.len());
                    }
                }
                4 => {
                    let n = rng.below(cur.len() + 2);
                    let ids = rng.ids_upto(3, 50);
                    let r = buf.replace_last(n, &ids);
                    if n > cur.len() {
                        assert!(r.is_err());
                    } else {
                        cur.truncate(cur.len() - n);
                        cur.extend(&ids);
                    }
                }
                5 => snaps.push((buf.snapshot(), cur.clone())),
                _ => {
                    let (ids, cps, undo) = buf.parts();
                    buf = TokenBuffer::from_parts(ids.to_vec(), cps.to_vec(), undo.to_vec()).unwrap();
                }
            }
            assert_eq!(buf.as_slice(), cur.as_slice());
            let lens: Vec<usize> = copies.iter().map(Vec::len).collect();
            assert_eq!(buf.checkpoints(), lens.as_slice());
        }
        for (snap, want) in &snaps {
            assert_eq!(snap.as_slice(), want.as_slice());
        }
    }
}

#[test]
fn batch_kernels_agree_with_the_single_kernel() {
    let mut rng = Rng::new(5);
    let rows = 500;
    let (mut av, mut bv, mut ao, mut bo, mut want) = (vec![], vec![], vec![0i64], vec![0i64], vec![]);
    let (mut ar, mut br) = (vec![], vec![]);
    for _ in 0..rows {
        let a = rng.ids_upto(300, 3);
        let mut b = a.clone();
        b.truncate(rng.below(a.len() + 1));
        b.extend(rng.ids_upto(3, 3));
        want.push(naive_lcp(&a, &b) as i64);
        av.extend(&a);
        bv.extend(&b);
        ao.push(av.len() as i64);
        bo.push(bv.len() as i64);
        ar.push(Raw::Owned(a));
        br.push(Raw::Owned(b));
    }
    for threads in [None, Some(1), Some(2), Some(3)] {
        assert_eq!(
            with_threads(threads, || common_prefix_len_csr(&Raw::U32(&av), &ao, &Raw::U32(&bv), &bo)).unwrap(),
            want
        );
        assert_eq!(with_threads(threads, || common_prefix_len_pairs(&ar, &br)).unwrap(), want);
    }
}
