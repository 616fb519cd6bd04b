//! An index over a session's chains: a radix tree of their ids, so a call is
//! matched against every chain of its session at the cost of its own
//! prompt (amortised), however many chains the session has.
//!
//! Each chain's ids are a path from the root; a node is a point where paths
//! part or a chain ends (a *tip*). A node's ids are never copied: they are
//! `seq(src)[..depth]` for a call `src` whose prompt and completion hold the
//! whole path (the calls' arrays are read where they are). Nodes through
//! which no chain passes any more are removed, and a node that neither ends
//! a chain nor parts paths is merged into its one child, so an agent loop
//! (one chain extended call after call) stays one edge, and a walk down the
//! tree visits only the points where the session's chains part.
//!
//! Each node also keeps the latest chain below it (by the stamp of the chain's
//! last change): the chain a call is matched against when it extends none
//! (the longest common prefix, ties to the latest).

use rustc_hash::FxHashMap;

use crate::prefix::common_prefix_len;

/// A sequence in two parts (a call's prompt and completion).
pub(crate) type Seq<'a> = (&'a [u32], &'a [u32]);

/// `s[from..to]`, in two parts.
pub(crate) fn sub<'a>(s: Seq<'a>, from: usize, to: usize) -> Seq<'a> {
    let a = s.0.len();
    if from >= a {
        (&s.1[from - a..to - a], &[])
    } else if to <= a {
        (&s.0[from..to], &[])
    } else {
        (&s.0[from..], &s.1[..to - a])
    }
}

/// Id `i` of a sequence in two parts.
pub(crate) fn at(s: Seq<'_>, i: usize) -> u32 {
    if i < s.0.len() {
        s.0[i]
    } else {
        s.1[i - s.0.len()]
    }
}

/// Ids in common at the start of two sequences in two parts.
pub(crate) fn lcp(x: Seq<'_>, y: Seq<'_>) -> usize {
    let (mut xa, mut xb, mut ya, mut yb) = (x.0, x.1, y.0, y.1);
    let mut n = 0;
    loop {
        if xa.is_empty() {
            if xb.is_empty() {
                return n;
            }
            (xa, xb) = (xb, &[]);
            continue;
        }
        if ya.is_empty() {
            if yb.is_empty() {
                return n;
            }
            (ya, yb) = (yb, &[]);
            continue;
        }
        let m = common_prefix_len(xa, ya);
        n += m;
        if m < xa.len().min(ya.len()) {
            return n;
        }
        (xa, ya) = (&xa[m..], &ya[m..]);
    }
}

const ROOT: u32 = 0;
const NONE: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Node {
    depth: usize,
    parent: u32,
    /// Its place in its parent's `kids`.
    slot: u32,
    /// A call whose prompt and completion start with this node's ids.
    src: u32,
    kids: Vec<u32>,
    /// Chains whose ids end here.
    tips: Vec<u32>,
    /// The latest chain below (or at) this node, and its stamp.
    top: (u64, u32),
}

/// A point of the tree: `depth` ids down, at node `node` or, when `into` is
/// set, inside the edge from `node` to its child `into`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pos {
    pub node: u32,
    pub depth: usize,
    pub into: Option<u32>,
}

impl Pos {
    pub const ROOT: Pos = Pos { node: ROOT, depth: 0, into: None };
}

/// The radix tree of one session's chains.
#[derive(Debug, Clone)]
pub(crate) struct Index {
    nodes: Vec<Node>,
    /// (node, the first id of a child's edge) -> the child.
    kids: FxHashMap<(u32, u32), u32>,
    free: Vec<u32>,
}

impl Index {
    pub fn new() -> Self {
        let root = Node { depth: 0, parent: NONE, slot: 0, src: 0, kids: Vec::new(), tips: Vec::new(), top: (0, NONE) };
        Index { nodes: vec![root], kids: FxHashMap::default(), free: Vec::new() }
    }

    /// Nodes in use (the root included).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Follow `s[..n]` down from `from` as far as the tree holds it; every
    /// node passed (reached whole) is pushed to `path`.
    pub fn walk<'a>(&self, seq: &impl Fn(u32) -> Seq<'a>, s: Seq<'_>, n: usize, from: Pos, path: &mut Vec<u32>) -> Pos {
        let (mut u, mut d, mut into) = (from.node, from.depth, from.into);
        loop {
            let v = match into {
                Some(v) => v,
                None => {
                    if d >= n {
                        return Pos { node: u, depth: d, into: None };
                    }
                    match self.kids.get(&(u, at(s, d))) {
                        Some(&v) => v,
                        None => return Pos { node: u, depth: d, into: None },
                    }
                }
            };
            let node = &self.nodes[v as usize];
            let m = lcp(sub(seq(node.src), d, node.depth), sub(s, d, n));
            if d + m == node.depth {
                path.push(v);
                (u, d, into) = (v, node.depth, None);
            } else {
                return Pos { node: u, depth: d + m, into: Some(v) };
            }
        }
    }

    /// The nodes where a chain may end at most `budget` ids below point `p`,
    /// those ids all in `trim`: chains ending there extend to `p` once their
    /// trailing trim ids are trimmed. Each is pushed to `out` with `p`'s depth
    /// (nodes without tips too: their tips are read by the caller).
    pub fn trim_reach<'a>(
        &self,
        seq: &impl Fn(u32) -> Seq<'a>,
        p: Pos,
        trim: &[u32],
        budget: usize,
        out: &mut Vec<(u32, usize)>,
    ) {
        let all_trim = |v: u32, from: usize| {
            let n = &self.nodes[v as usize];
            n.depth - from <= budget && (from..n.depth).all(|i| trim.contains(&at(seq(n.src), i)))
        };
        match p.into {
            Some(v) => {
                if all_trim(v, p.depth) {
                    out.push((v, p.depth));
                    let left = budget - (self.nodes[v as usize].depth - p.depth);
                    self.trim_below(seq, v, trim, left, p.depth, out);
                }
            }
            None => self.trim_below(seq, p.node, trim, budget, p.depth, out),
        }
    }

    /// `trim_reach` from node `u`: its kids whose edges are trim ids only,
    /// within `budget` (trimming starts at depth `from`).
    fn trim_below<'a>(
        &self,
        seq: &impl Fn(u32) -> Seq<'a>,
        u: u32,
        trim: &[u32],
        budget: usize,
        from: usize,
        out: &mut Vec<(u32, usize)>,
    ) {
        if budget == 0 {
            return;
        }
        let d = self.nodes[u as usize].depth;
        for (i, &t) in trim.iter().enumerate() {
            if trim[..i].contains(&t) {
                continue; // a trim id listed twice
            }
            let Some(&v) = self.kids.get(&(u, t)) else { continue };
            let n = &self.nodes[v as usize];
            let len = n.depth - d;
            if len <= budget && (d..n.depth).all(|j| trim.contains(&at(seq(n.src), j))) {
                out.push((v, from));
                self.trim_below(seq, v, trim, budget - len, from, out);
            }
        }
    }

    /// How many ids down `node` is.
    pub fn depth(&self, node: u32) -> usize {
        self.nodes[node as usize].depth
    }

    /// The chains ending at `node`.
    pub fn tips(&self, node: u32) -> &[u32] {
        &self.nodes[node as usize].tips
    }

    /// The latest chain through `p` (None: the tree is empty): the chain
    /// with the greatest stamp (`stamps`) whose tip (`tip_of`) is at or
    /// below `p`. The latest kept at a node is checked, and found again
    /// below the node when the chain has gone (that happens only after a
    /// chain's tip moved off a branch: see [`Index::remove_tip`]).
    pub fn latest(&mut self, p: Pos, stamps: &[u64], tip_of: &[u32]) -> Option<u32> {
        let v = p.into.unwrap_or(p.node);
        for _ in 0..2 {
            let (s, c) = self.nodes[v as usize].top;
            if c == NONE {
                return None;
            }
            if stamps[c as usize] == s && self.below(tip_of[c as usize], v) {
                return Some(c);
            }
            self.retop(v, stamps);
        }
        let c = self.nodes[v as usize].top.1;
        (c != NONE).then_some(c)
    }

    /// A node (`kids` and `tips` empty); a released node is reused with its
    /// vectors' room (no allocation per call once a session is warm).
    fn alloc(&mut self, depth: usize, parent: u32, src: u32, top: (u64, u32)) -> u32 {
        if let Some(i) = self.free.pop() {
            let n = &mut self.nodes[i as usize];
            (n.depth, n.parent, n.slot, n.src, n.top) = (depth, parent, 0, src, top);
            debug_assert!(n.kids.is_empty() && n.tips.is_empty());
            i
        } else {
            self.nodes.push(Node { depth, parent, slot: 0, src, kids: Vec::new(), tips: Vec::new(), top });
            u32::try_from(self.nodes.len() - 1).expect("fewer than 2**32 nodes a session")
        }
    }

    fn first_id<'a>(&self, seq: &impl Fn(u32) -> Seq<'a>, v: u32) -> u32 {
        let n = &self.nodes[v as usize];
        at(seq(n.src), self.nodes[n.parent as usize].depth)
    }

    fn add_kid<'a>(&mut self, seq: &impl Fn(u32) -> Seq<'a>, u: u32, v: u32) {
        let slot = self.nodes[u as usize].kids.len() as u32;
        self.nodes[u as usize].kids.push(v);
        self.nodes[v as usize].parent = u;
        self.nodes[v as usize].slot = slot;
        let key = (u, self.first_id(seq, v));
        self.kids.insert(key, v);
    }

    /// Put `w` where `v` is among its parent's kids (same first id).
    fn replace_kid(&mut self, v: u32, w: u32) {
        let (u, slot) = (self.nodes[v as usize].parent, self.nodes[v as usize].slot);
        self.nodes[u as usize].kids[slot as usize] = w;
        self.nodes[w as usize].parent = u;
        self.nodes[w as usize].slot = slot;
    }

    fn remove_kid<'a>(&mut self, seq: &impl Fn(u32) -> Seq<'a>, v: u32) {
        let key = (self.nodes[v as usize].parent, self.first_id(seq, v));
        self.kids.remove(&key);
        let (u, slot) = (self.nodes[v as usize].parent, self.nodes[v as usize].slot as usize);
        let kids = &mut self.nodes[u as usize].kids;
        kids.swap_remove(slot);
        if let Some(&moved) = kids.get(slot) {
            self.nodes[moved as usize].slot = slot as u32;
        }
    }

    /// The node at `p`, made where it is inside an edge, with a child for
    /// `s[p.depth..n]` (the ids of call `src`) when they go further: the
    /// node where `s[..n]` ends.
    pub fn insert<'a>(&mut self, seq: &impl Fn(u32) -> Seq<'a>, p: Pos, src: u32, s: Seq<'_>, n: usize) -> u32 {
        let base = match p.into {
            None => p.node,
            Some(v) => {
                let (vsrc, top) = (self.nodes[v as usize].src, self.nodes[v as usize].top);
                let w = self.alloc(p.depth, p.node, vsrc, top);
                self.replace_kid(v, w);
                self.kids.insert((p.node, at(seq(vsrc), self.nodes[p.node as usize].depth)), w);
                self.add_kid(seq, w, v);
                w
            }
        };
        if n == p.depth {
            return base;
        }
        let x = self.alloc(n, base, src, (0, NONE));
        debug_assert_eq!(at(seq(src), 0), at(s, 0));
        self.add_kid(seq, base, x);
        x
    }

    /// Chain `chain` (changed at `stamp`, the latest of all) now ends at `node`.
    pub fn add_tip(&mut self, node: u32, chain: u32, stamp: u64) {
        self.nodes[node as usize].tips.push(chain);
        let mut x = node;
        while x != NONE {
            self.nodes[x as usize].top = (stamp, chain);
            x = self.nodes[x as usize].parent;
        }
    }

    /// Chain `chain` no longer ends at `node`: nodes no chain passes through
    /// any more are removed, and one that parts nothing is merged into its
    /// child. (The latest chain kept above may now be gone from below: see
    /// [`Index::latest`].)
    pub fn remove_tip<'a>(&mut self, seq: &impl Fn(u32) -> Seq<'a>, node: u32, chain: u32) {
        let tips = &mut self.nodes[node as usize].tips;
        if let Some(i) = tips.iter().position(|&t| t == chain) {
            tips.swap_remove(i);
        }
        let mut x = node;
        while x != ROOT {
            let n = &self.nodes[x as usize];
            let parent = n.parent;
            if n.tips.is_empty() && n.kids.is_empty() {
                self.remove_kid(seq, x);
                self.release(x);
                x = parent;
            } else if n.tips.is_empty() && n.kids.len() == 1 {
                // Merged into its child, whose ids hold this node's (the same first id from the parent).
                let (k, depth) = (n.kids[0], n.depth);
                let inner = (x, at(seq(self.nodes[k as usize].src), depth));
                self.kids.remove(&inner);
                self.replace_kid(x, k);
                let key = (parent, self.first_id(seq, k));
                self.kids.insert(key, k);
                self.release(x);
                return;
            } else {
                return;
            }
        }
    }

    /// Whether `node` is `v` or below it.
    fn below(&self, mut node: u32, v: u32) -> bool {
        let d = self.nodes[v as usize].depth;
        while node != NONE && self.nodes[node as usize].depth > d {
            node = self.nodes[node as usize].parent;
        }
        node == v
    }

    /// Find again the latest chain below every node of `v`'s subtree.
    fn retop(&mut self, v: u32, stamps: &[u64]) {
        // Children after parents in `order`; then bottom-up.
        let mut order = vec![v];
        let mut i = 0;
        while i < order.len() {
            order.extend_from_slice(&self.nodes[order[i] as usize].kids);
            i += 1;
        }
        for &x in order.iter().rev() {
            let n = &self.nodes[x as usize];
            let mut top = (0u64, NONE);
            for &t in &n.tips {
                if top.1 == NONE || stamps[t as usize] > top.0 {
                    top = (stamps[t as usize], t);
                }
            }
            for &k in &n.kids {
                let kt = self.nodes[k as usize].top;
                if kt.1 != NONE && (top.1 == NONE || kt.0 > top.0) {
                    top = kt;
                }
            }
            self.nodes[x as usize].top = top;
        }
    }

    fn release(&mut self, x: u32) {
        let n = &mut self.nodes[x as usize];
        n.kids.clear();
        n.tips.clear();
        n.parent = NONE;
        self.free.push(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_part_helpers() {
        let s: Seq<'_> = (&[1, 2, 3], &[4, 5]);
        assert_eq!(sub(s, 1, 4), (&[2, 3][..], &[4][..]));
        assert_eq!(sub(s, 3, 5), (&[4, 5][..], &[][..]));
        assert_eq!(at(s, 4), 5);
        assert_eq!(lcp(s, (&[1, 2], &[3, 4, 6])), 4);
        assert_eq!(lcp(s, (&[1, 2, 3, 4, 5, 6], &[])), 5);
        assert_eq!(lcp((&[], &[]), s), 0);
    }

    #[test]
    fn chains_part_and_merge() {
        let calls: Vec<Vec<u32>> = vec![vec![1, 2, 3, 4], vec![1, 2, 7], vec![1, 2, 3, 4, 5, 6]];
        let seq = |c: u32| -> Seq<'_> { (&calls[c as usize][..], &[]) };
        let mut ix = Index::new();
        let mut stamps = vec![0u64; 2];
        let mut tip_of = vec![0u32; 2];
        let put = |ix: &mut Index, c: u32, chain: u32, stamp: u64, stamps: &mut [u64], tip_of: &mut [u32]| {
            let s = seq(c);
            let p = ix.walk(&seq, s, s.0.len(), Pos::ROOT, &mut Vec::new());
            let x = ix.insert(&seq, p, c, s, s.0.len());
            stamps[chain as usize] = stamp;
            tip_of[chain as usize] = x;
            ix.add_tip(x, chain, stamp);
            x
        };
        let a = put(&mut ix, 0, 0, 1, &mut stamps, &mut tip_of);
        let b = put(&mut ix, 1, 1, 2, &mut stamps, &mut tip_of);
        assert_eq!(ix.len(), 4); // root, [1, 2], [3, 4], [7]
        let p = ix.walk(&seq, (&[1, 2, 3, 9], &[]), 4, Pos::ROOT, &mut Vec::new());
        assert_eq!(p.depth, 3);
        assert_eq!(ix.latest(p, &stamps, &tip_of), Some(0));
        let p = ix.walk(&seq, (&[1, 2, 9], &[]), 3, Pos::ROOT, &mut Vec::new());
        assert_eq!((p.depth, ix.latest(p, &stamps, &tip_of)), (2, Some(1)));
        // chain 0 extended by call 2: its old tip goes, the path stays one edge from [1, 2]
        let c = put(&mut ix, 2, 0, 3, &mut stamps, &mut tip_of);
        ix.remove_tip(&seq, a, 0);
        assert_eq!(ix.len(), 4);
        assert_eq!(ix.tips(c), &[0]);
        let mut path = Vec::new();
        let p = ix.walk(&seq, (&[1, 2, 3, 4, 5, 6, 7], &[]), 7, Pos::ROOT, &mut path);
        assert_eq!((p.depth, p.node), (6, c));
        assert_eq!(path.len(), 2);
        // chain 1 gone: its branch is removed and [1, 2] merged away; the
        // latest kept at the root (chain 1) is found stale and found again
        stamps[1] = 4;
        ix.remove_tip(&seq, b, 1);
        assert_eq!(ix.len(), 2);
        let p = ix.walk(&seq, (&[1, 2, 7], &[]), 3, Pos::ROOT, &mut Vec::new());
        assert_eq!((p.depth, ix.latest(p, &stamps, &tip_of)), (2, Some(0)));
        assert_eq!(ix.latest(Pos::ROOT, &stamps, &tip_of), Some(0));
    }
}
