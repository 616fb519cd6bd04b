//! Captured LLM calls to trainable chains (`tito_fast.assemble`).
//!
//! A session is a forest: each chain is a path of calls, and every chain
//! stays a candidate for every later call (nothing is closed by a later
//! branch). A session's calls are taken in order, each matched against all
//! of the session's chains through an index of their ids ([`index`]), at the
//! cost of its own prompt:
//!
//! - a prompt that starts with a chain's ids (less up to `max_trim` trailing
//!   ids of the family's trim set) extends that chain with the prompt's new
//!   ids (loss 0) and the completion (loss 1, with its logprobs); of several,
//!   the one it extends furthest, ties to the latest (the chain changed
//!   last). A chain whose last call ended on `finish_reason="length"` is not
//!   extended: a call that would extend it starts a new chain from it
//!   (event `length`), unless another chain goes further along the prompt
//!   (then the call is an event against that one, below).
//! - any other call is an event, classified against the chain it shares
//!   most ids with (ties to the latest):
//!   - `rollback`: the prompt is a prefix of the chain (a retry from an
//!     earlier point);
//!   - `seam_drift`: it departs within the last `realign_window` ids of the
//!     chain, inside the last call's completion (the seam where a
//!     completion meets the next prompt);
//!   - `new_root`: it departs inside the chain's first message block (the
//!     block opened by the first boundary id: another system prompt, a
//!     sub-agent), or shares nothing;
//!   - `rewrite`: it departs anywhere else (compaction, edited history).
//!
//!   When the calls carry their request messages, a call whose messages
//!   extend an earlier call's conversation (by Miles' message matchers: a
//!   harness that re-serialises tool arguments) is classified against that
//!   call's chain instead (the *hint*); the ids stay the ground truth.
//!
//!   and handled by the policy of its cause: `fork` (a new chain of this
//!   call's prompt and completion, branching off the chain it shares most
//!   with, its *parent*: that chain stays as it is), `realign` (seam drift
//!   only: the chain's ids from the departure on are replaced by the
//!   prompt's, the sampled ids among them are counted as masked) or `drop`
//!   (the completion is not emitted and is counted as dropped).
//!
//! One chain per leaf of the forest is returned, each complete, with its
//! parent and the number of leading ids it shares with it (all with loss 0
//! in the chain: a sampled id has loss 1 in one chain only), so a trainer can
//! pack a shared prefix once.
//!
//! A chain is held as the list of its calls (links), never as a copy of its
//! ids: a call that extends or realigns a chain takes over its ids up to
//! where its prompt departs, so a chain's ids are always its last call's
//! prompt and completion, read where they are. They are written once, into
//! the output (see [`flatten`]).
//!
//! Every chain is checked before it is returned, in two steps while the ids
//! are hot in cache: after a session's matching, every call whose sampled
//! ids remain in a chain has its prompt compared with the chain's ids before
//! them and its completion with the ids after; after the output is written,
//! its ids, loss mask and logprobs are compared with the chain. So each id
//! with loss 1 follows exactly its call's prompt and the completion ids
//! before it, and carries its call's logprob; each call's sampled ids are
//! emitted with loss 1, masked or dropped, and the three add up.

pub(crate) mod index;

use rayon::prelude::*;

use crate::prefix::common_prefix_len;

/// What to do with a call that does not extend a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Fork = 0,
    Realign = 1,
    Drop = 2,
}

/// What happened at a call (see the module doc); `Extend` is an event only
/// when the call extends a chain other than the one extended last, or
/// extends it after trimming trailing ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Extend = 0,
    SeamDrift = 1,
    Rollback = 2,
    Rewrite = 3,
    NewRoot = 4,
    /// The call extends a chain whose last call ended on `finish_reason="length"`.
    Length = 5,
    /// A leaf dropped by the `drop_retries` picker: a retry (a rollback fork)
    /// superseded it (the event is the dropped leaf's; `dropped` counts its
    /// sampled ids after the retry's branch point).
    Superseded = 6,
}

/// The options of one assembly.
#[derive(Debug, Clone)]
pub struct Options {
    /// Ids that may be trimmed from a chain's end when a prompt extends it.
    pub trim: Vec<u32>,
    /// At most this many trailing ids trimmed.
    pub max_trim: usize,
    /// Seam drift: a departure within this many ids of the chain's end.
    pub realign_window: usize,
    /// Policy per cause: seam drift, rollback, rewrite, new root.
    pub policy: [Policy; 4],
    /// Ids that open a message block (role markers); the chain's first block
    /// ends at the second of them. Empty: the first block is the first prompt.
    pub boundary: Vec<u32>,
    /// The leaf picker `drop_retries`: a retried leaf superseded by its retry
    /// is dropped (see [`drop_retries`]).
    pub drop_retries: bool,
}

/// One session's calls in order: each call's prompt, completion and
/// completion logprobs (NaN when the engine gave none), as slices read where
/// they are (agent prompts repeat their history: they are never copied into
/// one buffer, and any row order of the input is taken as given).
#[derive(Debug, Clone, Copy)]
pub struct Calls<'a> {
    pub prompts: &'a [&'a [u32]],
    pub completions: &'a [&'a [u32]],
    pub logprobs: &'a [&'a [f32]],
    /// Per call: its completion ended on `finish_reason="length"` (empty: none did).
    pub length: &'a [bool],
    /// Per call: the earlier call (session-local) whose conversation its
    /// request messages extend by the message matcher, -1 none (empty: no hints).
    pub hint: &'a [i64],
}

impl Calls<'_> {
    fn len(&self) -> usize {
        self.prompts.len()
    }
    fn prompt(&self, c: usize) -> &[u32] {
        self.prompts[c]
    }
    fn seq(&self, c: u32) -> index::Seq<'_> {
        (self.prompts[c as usize], self.completions[c as usize])
    }
    fn ended(&self, c: usize) -> bool {
        self.length.get(c).copied().unwrap_or(false)
    }
    fn hint(&self, c: usize) -> Option<usize> {
        self.hint.get(c).and_then(|&h| usize::try_from(h).ok()).filter(|&h| h < c)
    }
}

/// A call's ids in a chain: its prompt's ids from `from` (the ids before
/// are the chain's already), then its completion from `prompt_end` on, up to
/// `end` (less than the completion's end where a later call cut the chain).
/// A chain's links tile it: each starts where the one before ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub call: u32,
    pub from: usize,
    pub prompt_end: usize,
    pub end: usize,
}

/// One chain of a session: its calls in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chain {
    pub links: Vec<Link>,
    first_block_end: usize,
    /// False when its last call ended on `finish_reason="length"`: no call extends it.
    pub open: bool,
    /// The chain it branched off (None: a root).
    pub parent: Option<usize>,
}

impl Chain {
    fn new(call: u32, prompt: &[u32], completion: usize, boundary: &[u32], open: bool, parent: Option<usize>) -> Self {
        let end = prompt.len() + completion;
        Chain {
            links: vec![Link { call, from: 0, prompt_end: prompt.len(), end }],
            first_block_end: first_block_end(prompt, boundary),
            open,
            parent,
        }
    }

    /// Its leading ids with loss 0 (those before its first sampled id).
    #[must_use]
    pub fn unsampled_prefix(&self) -> usize {
        self.links.iter().find(|l| l.end > l.prompt_end).map_or(self.len(), |l| l.prompt_end)
    }

    /// Its number of ids.
    #[must_use]
    pub fn len(&self) -> usize {
        self.links.last().map_or(0, |l| l.end)
    }

    /// True when it has no ids.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its ids, in two parts: its last call's prompt and completion.
    #[must_use]
    pub fn parts<'a>(&self, calls: &Calls<'a>) -> (&'a [u32], &'a [u32]) {
        let c = self.links.last().map_or(0, |l| l.call as usize);
        (calls.prompts[c], calls.completions[c])
    }

    /// Cut the chain at `at`; how many sampled ids were cut.
    fn truncate(&mut self, at: usize) -> usize {
        let mut masked = 0;
        while let Some(l) = self.links.last_mut() {
            if l.end <= at {
                break;
            }
            masked += l.end - l.prompt_end.max(at).min(l.end);
            if l.from >= at {
                self.links.pop();
            } else {
                l.end = at;
                break;
            }
        }
        masked
    }

    /// Cut at `from` (where `prompt` departs) and take `call` from there on;
    /// how many sampled ids were cut.
    fn take_over(&mut self, call: u32, prompt: &[u32], completion: usize, from: usize) -> usize {
        let masked = self.truncate(from);
        self.links.push(Link { call, from, prompt_end: prompt.len(), end: prompt.len() + completion });
        masked
    }

    /// Write its ids, loss mask (`loss` must be zeros) and logprobs.
    fn write(&self, calls: &Calls<'_>, ids: &mut [u32], loss: &mut [u8], logprobs: &mut [f32]) {
        let (a, b) = self.parts(calls);
        ids[..a.len()].copy_from_slice(a);
        ids[a.len()..].copy_from_slice(b);
        logprobs.fill(f32::NAN);
        for l in &self.links {
            if l.end > l.prompt_end {
                loss[l.prompt_end..l.end].fill(1);
                logprobs[l.prompt_end..l.end].copy_from_slice(&calls.logprobs[l.call as usize][..l.end - l.prompt_end]);
            }
        }
    }

    /// Its runs of ids by call: (first position, call), skipping calls left with no ids.
    pub fn spans(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.links.iter().filter(|l| l.end > l.from).map(|l| (l.from, l.call))
    }
}

/// Ids in common between `chain` (in two parts) and `prompt`.
fn common_prefix(chain: (&[u32], &[u32]), prompt: &[u32]) -> usize {
    let (a, b) = chain;
    let l = common_prefix_len(a, prompt);
    if l < a.len() {
        l
    } else {
        l + common_prefix_len(b, &prompt[l..])
    }
}

/// Id `i` of a chain in two parts.
fn id_at(chain: (&[u32], &[u32]), i: usize) -> u32 {
    if i < chain.0.len() {
        chain.0[i]
    } else {
        chain.1[i - chain.0.len()]
    }
}

/// One event (see [`Kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The call (session-local index).
    pub call: u32,
    pub kind: Kind,
    /// The policy applied (`Fork` for an extension).
    pub policy: Policy,
    /// The chain the call was matched against (-1: none).
    pub chain: i64,
    /// The chain the call went to (-1: dropped).
    pub to_chain: i64,
    /// Where the prompt departs from the matched chain (ids in common).
    pub position: usize,
    /// Ids removed from the matched chain (trimmed or realigned).
    pub removed: usize,
    /// Sampled ids among them (masked).
    pub masked: usize,
    /// This call's own completion ids dropped.
    pub dropped: usize,
}

/// A session's chains and events, and per call: its chain (-1: dropped).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assembled {
    pub chains: Vec<Chain>,
    pub events: Vec<Event>,
    pub call_chain: Vec<i64>,
}

/// Where the first message block of `ids` ends: at the second boundary id
/// (the first one opens it, after whatever the template puts before its
/// first marker, such as a BOS id). No boundary ids: the whole sequence.
fn first_block_end(ids: &[u32], boundary: &[u32]) -> usize {
    if boundary.is_empty() {
        return ids.len();
    }
    let mut marks = ids.iter().enumerate().filter(|(_, id)| boundary.contains(id)).map(|(i, _)| i);
    match (marks.next(), marks.next()) {
        (Some(_), Some(second)) => second,
        _ => ids.len(),
    }
}

/// One session's matching state: its chains, the index of their ids, and
/// per chain its stamp (when it last changed) and the index node of its end.
/// (A chain that ends in up to `max_trim` trim ids is found from the points
/// a prompt passes, `Index::trim_reach`: its trimmed ends are not indexed.)
struct Forest<'c, 'a> {
    calls: &'c Calls<'a>,
    opt: &'c Options,
    out: Assembled,
    index: index::Index,
    stamps: Vec<u64>,
    tips: Vec<u32>,
    clock: u64,
    /// Room for the nodes a walk passes (reused call after call).
    scratch: Vec<u32>,
}

impl Forest<'_, '_> {
    /// Chain `k` now holds call `c`'s prompt and completion, whose ids depart
    /// from the index at `p` (or further down): index them there.
    fn place(&mut self, k: usize, c: u32, p: index::Pos, replaces: bool) {
        let calls = self.calls;
        let seq = |x: u32| calls.seq(x);
        let s = calls.seq(c);
        let n = s.0.len() + s.1.len();
        let q = self.index.walk(&seq, s, n, p, &mut self.scratch);
        self.scratch.clear();
        let node = self.index.insert(&seq, q, c, s, n);
        self.clock += 1;
        let k32 = u32::try_from(k).expect("fewer than 2**32 chains a session");
        let old_tip = if replaces {
            self.stamps[k] = self.clock;
            Some(std::mem::replace(&mut self.tips[k], node))
        } else {
            self.stamps.push(self.clock);
            self.tips.push(node);
            None
        };
        self.index.add_tip(node, k32, self.clock);
        if let Some(t) = old_tip {
            self.index.remove_tip(&seq, t, k32);
        }
    }

    /// A new chain of call `c` (branching off `parent`), indexed from `p`.
    fn fork(&mut self, c: u32, parent: Option<usize>, p: index::Pos) -> usize {
        let (prompt, completion) = self.calls.seq(c);
        let k = self.out.chains.len();
        let open = !self.calls.ended(c as usize);
        self.out.chains.push(Chain::new(c, prompt, completion.len(), &self.opt.boundary, open, parent));
        self.place(k, c, p, false);
        k
    }

    /// Chain `k` taken over by call `c` from id `from` on (an extension or a
    /// realignment); how many sampled ids were cut.
    fn take_over(&mut self, k: usize, c: u32, from: usize, p: index::Pos) -> usize {
        let (prompt, completion) = self.calls.seq(c);
        let masked = self.out.chains[k].take_over(c, prompt, completion.len(), from);
        self.out.chains[k].open = !self.calls.ended(c as usize);
        self.place(k, c, p, true);
        masked
    }

    /// Ids `prompt` has in common with chain `k`, knowing it passes the
    /// chain's point `d` ids down.
    fn common_from(&self, k: usize, d: usize, prompt: &[u32]) -> usize {
        let ids = self.out.chains[k].parts(self.calls);
        let n = ids.0.len() + ids.1.len();
        d + index::lcp(index::sub(ids, d, n), (&prompt[d.min(prompt.len())..], &[]))
    }
}

/// Assemble one session's calls (see the module doc).
pub fn assemble_session(calls: &Calls<'_>, opt: &Options) -> Assembled {
    let mut f = Forest {
        calls,
        opt,
        out: Assembled { call_chain: Vec::with_capacity(calls.len()), ..Assembled::default() },
        index: index::Index::new(),
        stamps: Vec::new(),
        tips: Vec::new(),
        clock: 0,
        scratch: Vec::new(),
    };
    let seq = |x: u32| calls.seq(x);
    let mut last: Option<usize> = None; // the chain extended last
    let mut path = Vec::new();
    let mut reach = Vec::new(); // (node, where trimming starts) below the path within the trim budget
    for c in 0..calls.len() {
        let call = u32::try_from(c).expect("fewer than 2**32 calls a session");
        let prompt = calls.prompt(c);
        let completion = calls.completions[c].len();
        // Where the prompt departs from every chain at once, and the chains it extends.
        path.clear();
        path.push(0);
        let p = f.index.walk(&seq, (prompt, &[]), prompt.len(), index::Pos::ROOT, &mut path);
        let lp = p.depth;
        // (chain, ids in common): the furthest, ties to the latest
        let mut extends: Option<(usize, usize)> = None;
        let mut consider = |k: u32, l: usize, stamps: &[u64]| {
            let k = k as usize;
            if extends.is_none_or(|(e, el)| el < l || (el == l && stamps[k] > stamps[e])) {
                extends = Some((k, l));
            }
        };
        for &node in &path {
            for &k in f.index.tips(node) {
                consider(k, f.out.chains[k as usize].len(), &f.stamps); // a chain ending here: the prompt extends it
            }
        }
        // Chains ending at most max_trim trim ids below a point the prompt
        // passes (a node of its path, or where it departs inside an edge):
        // the prompt extends them less those trailing ids.
        if opt.max_trim > 0 && !opt.trim.is_empty() {
            reach.clear();
            for &node in &path {
                let at = index::Pos { node, depth: f.index.depth(node), into: None };
                f.index.trim_reach(&seq, at, &opt.trim, opt.max_trim, &mut reach);
            }
            if p.into.is_some() {
                f.index.trim_reach(&seq, p, &opt.trim, opt.max_trim, &mut reach);
            }
            for &(v, from) in &reach {
                for &k in f.index.tips(v) {
                    let l = f.common_from(k as usize, from, prompt);
                    if l == f.out.chains[k as usize].len() || l < prompt.len() {
                        consider(k, l, &f.stamps);
                    }
                }
            }
        }
        if let Some((k, l)) = extends.filter(|&(k, _)| f.out.chains[k].open) {
            let removed = f.out.chains[k].len() - l;
            let masked = f.take_over(k, call, l, p);
            if removed > 0 || last != Some(k) {
                f.out.events.push(Event {
                    call,
                    kind: Kind::Extend,
                    policy: Policy::Fork,
                    chain: k as i64,
                    to_chain: k as i64,
                    position: l,
                    removed,
                    masked,
                    dropped: 0,
                });
            }
            f.out.call_chain.push(k as i64);
            last = Some(k);
            continue;
        }
        // A chain cut by length that the prompt extends, when no chain goes
        // further along the prompt: a `length` branch; else the chain it
        // shares most with.
        // The chain of the call whose conversation the request messages
        // extend (the message matcher's hint), when it has one.
        let hinted = calls.hint(c).and_then(|h| usize::try_from(f.out.call_chain[h]).ok());
        let best = match (extends, hinted) {
            (Some((k, l)), _) if l == lp => Some((k, l, Kind::Length)),
            (_, Some(k)) => Some((k, f.common_from(k, 0, prompt), Kind::Extend)),
            _ => f.index.latest(p, &f.stamps, &f.tips).map(|k| (k as usize, lp, Kind::Extend)),
        };
        let Some((k, l, kind)) = best else {
            // The session's first call: a root, no event.
            let k = f.fork(call, None, p);
            f.out.call_chain.push(k as i64);
            last = Some(k);
            continue;
        };
        let chain = &f.out.chains[k];
        let n = chain.len();
        let last_prompt_end = chain.links.last().map_or(0, |l| l.prompt_end);
        let kind = if kind == Kind::Length {
            Kind::Length
        } else if l == prompt.len() {
            Kind::Rollback
        } else if n - l <= opt.realign_window && l >= last_prompt_end {
            Kind::SeamDrift
        } else if l < chain.first_block_end {
            Kind::NewRoot
        } else {
            Kind::Rewrite
        };
        let policy = if kind == Kind::Length { Policy::Fork } else { opt.policy[kind as usize - 1] };
        let mut event =
            Event { call, kind, policy, chain: k as i64, to_chain: -1, position: l, removed: 0, masked: 0, dropped: 0 };
        match policy {
            Policy::Drop => {
                event.dropped = completion;
                f.out.call_chain.push(-1);
            }
            Policy::Realign => {
                event.removed = n - l;
                event.masked = f.take_over(k, call, l, p);
                event.to_chain = k as i64;
                f.out.call_chain.push(k as i64);
                last = Some(k);
            }
            Policy::Fork => {
                let parent = (kind != Kind::NewRoot).then_some(k);
                let j = f.fork(call, parent, p);
                event.to_chain = j as i64;
                f.out.call_chain.push(j as i64);
                last = Some(j);
            }
        }
        f.out.events.push(event);
    }
    if opt.drop_retries {
        drop_retries(calls, &mut f.out);
    }
    f.out
}

/// The leaf picker `drop_retries`: a chain that a retry branched off (a
/// `rollback` fork) and that took no call after the retry is an abandoned
/// attempt. Its ids after the retry's branch point are dropped (an event
/// `superseded`, counted), the retry's chain takes over its ids before that
/// point (their sampled ids stay trained, now there), and the chain goes.
fn drop_retries(calls: &Calls<'_>, a: &mut Assembled) {
    let n = a.chains.len();
    // Where each chain went (itself, or the chain that took it over).
    let mut to: Vec<usize> = (0..n).collect();
    fn find(to: &mut [usize], mut k: usize) -> usize {
        while to[k] != k {
            to[k] = to[to[k]];
            k = to[k];
        }
        k
    }
    let mut gone = vec![false; n];
    let mut dropped_events = Vec::new();
    let mut lost = Vec::new();
    for e in &a.events {
        if e.kind != Kind::Rollback || e.policy != Policy::Fork || e.chain < 0 || e.to_chain < 0 {
            continue;
        }
        let j = e.to_chain as usize;
        let h = find(&mut to, e.chain as usize);
        if h == j || gone[j] {
            continue;
        }
        let first_of_j = a.chains[j].links.first().map_or(u32::MAX, |l| l.call);
        if a.chains[h].links.last().is_some_and(|l| l.call > first_of_j) {
            continue; // taken up again after the retry: not abandoned
        }
        let at = e.position.min(index::lcp(a.chains[h].parts(calls), a.chains[j].parts(calls)));
        let mut old = std::mem::take(&mut a.chains[h]);
        // Calls whose sampled ids all go: dropped.
        lost.extend(old.links.iter().filter(|l| l.end > l.prompt_end && l.prompt_end >= at).map(|l| l.call));
        let removed = old.len() - at;
        let cut = old.truncate(at);
        let last_call = old.links.last().map_or(e.call, |l| l.call);
        let ch = &mut a.chains[j];
        ch.links[0].from = at;
        old.links.retain(|l| l.end > l.from);
        old.links.append(&mut ch.links);
        ch.links = old.links;
        ch.first_block_end = old.first_block_end;
        ch.parent = old.parent;
        gone[h] = true;
        to[h] = j;
        dropped_events.push(Event {
            call: last_call,
            kind: Kind::Superseded,
            policy: Policy::Drop,
            chain: h as i64,
            to_chain: j as i64,
            position: at,
            removed,
            masked: 0,
            dropped: cut,
        });
    }
    if dropped_events.is_empty() {
        return;
    }
    // Renumber: the chains that stay keep their order.
    let mut new_index = vec![0i64; n];
    let mut next = 0;
    for k in 0..n {
        if !gone[k] {
            new_index[k] = next;
            next += 1;
        }
    }
    let mut map = |k: i64| if k < 0 { k } else { new_index[find(&mut to, k as usize)] };
    for e in a.events.iter_mut().chain(dropped_events.iter_mut()) {
        e.chain = map(e.chain);
        e.to_chain = map(e.to_chain);
    }
    // Calls whose sampled ids were all cut are dropped; the rest follow their chain.
    let mut holder = vec![-1i64; calls.len()];
    for (k, ch) in a.chains.iter().enumerate() {
        if gone[k] {
            continue;
        }
        for l in &ch.links {
            holder[l.call as usize] = new_index[k];
        }
    }
    for c in lost {
        holder[c as usize] = -1;
    }
    for (c, k) in a.call_chain.iter_mut().enumerate() {
        if *k >= 0 {
            *k = holder[c];
        }
    }
    for ch in &mut a.chains {
        ch.parent = ch.parent.map(|p| new_index[find(&mut to, p)] as usize);
    }
    let mut k = 0;
    a.chains.retain(|_| {
        k += 1;
        !gone[k - 1]
    });
    a.events.extend(dropped_events);
    a.events.sort_by_key(|e| e.call);
}

/// A broken invariant (a bug: assembly never returns one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    pub call: u32,
    pub what: &'static str,
}

/// The invariant of the module doc on one assembled session, on its chains'
/// links (the ids are the chains', read from the input): each call with
/// sampled ids left in a chain has exactly its prompt before them and its
/// completion's first ids as them, each call's sampled ids are in one chain
/// only, and delivered + masked + dropped = sampled.
///
/// # Errors
/// The first call that breaks it.
pub fn check_session(calls: &Calls<'_>, a: &Assembled) -> Result<(), Broken> {
    let mut emitted = vec![0usize; calls.len()];
    for chain in &a.chains {
        let parts = chain.parts(calls);
        let n = parts.0.len() + parts.1.len();
        let mut at = 0;
        for l in &chain.links {
            let broken = |what| Err(Broken { call: l.call, what });
            let c = l.call as usize;
            if l.from != at || l.end < l.from || l.end > l.prompt_end + calls.completions[c].len() {
                return broken("a chain's calls do not tile it");
            }
            at = l.end;
            if l.end <= l.prompt_end {
                continue;
            }
            let (prompt, completion) = (calls.prompt(c), calls.completions[c]);
            let m = l.end - l.prompt_end;
            if l.prompt_end != prompt.len() || common_prefix(parts, prompt) != prompt.len() {
                return broken("sampled ids do not follow exactly their call's prompt");
            }
            if (0..m).any(|i| id_at(parts, l.prompt_end + i) != completion[i]) {
                return broken("sampled ids are not the call's completion");
            }
            if emitted[c] > 0 {
                return broken("a call's sampled ids are emitted in two chains");
            }
            emitted[c] = m;
        }
        if at != n {
            return Err(Broken {
                call: chain.links.last().map_or(0, |l| l.call),
                what: "a chain's calls do not tile it",
            });
        }
    }
    let dropped: usize = a.events.iter().map(|e| e.dropped).sum();
    let masked_total: usize = a.events.iter().map(|e| e.masked).sum();
    let sampled: usize = calls.completions.iter().map(|c| c.len()).sum();
    let delivered: usize = emitted.iter().sum();
    if delivered + dropped + masked_total != sampled {
        return Err(Broken { call: 0, what: "sampled ids are not all emitted, masked or dropped" });
    }
    Ok(())
}

/// The written ids, loss mask and logprobs of `chain`, checked against its
/// links: its ids, loss 1 exactly on its calls' sampled ids, and there the
/// engine's logprobs (bit for bit).
///
/// # Errors
/// The first call whose ids break it.
fn check_written(calls: &Calls<'_>, chain: &Chain, ids: &[u32], loss: &[u8], logprobs: &[f32]) -> Result<(), Broken> {
    let (a, b) = chain.parts(calls);
    let top = chain.links.last().map_or(0, |l| l.call);
    if ids.len() != a.len() + b.len() || ids[..a.len()] != *a || ids[a.len()..] != *b {
        return Err(Broken { call: top, what: "a chain's ids are not its last call's prompt and completion" });
    }
    for l in &chain.links {
        let broken = |what| Err(Broken { call: l.call, what });
        let q = l.prompt_end.min(l.end);
        if loss[l.from..q].iter().any(|&x| x != 0) {
            return broken("a prompt id has loss 1");
        }
        if loss[q..l.end].iter().any(|&x| x != 1) {
            return broken("a sampled id has loss 0");
        }
        let lp = &calls.logprobs[l.call as usize];
        if logprobs[q..l.end].iter().zip(lp.iter()).any(|(x, y)| x.to_bits() != y.to_bits()) {
            return broken("a logprob is not the engine's");
        }
    }
    Ok(())
}

/// Many sessions on the current rayon pool; `sessions[s]` is the range of
/// calls of session `s` in `calls`.
pub fn assemble_many(calls: &Calls<'_>, sessions: &[(usize, usize)], opt: &Options) -> Vec<Result<Assembled, Broken>> {
    sessions
        .par_iter()
        .map(|&(a, b)| {
            let sub = session(calls, (a, b));
            let out = assemble_session(&sub, opt);
            check_session(&sub, &out).map(|()| out)
        })
        .collect()
}

/// The calls `a..b`.
fn session<'a>(calls: &Calls<'a>, (a, b): (usize, usize)) -> Calls<'a> {
    Calls {
        prompts: &calls.prompts[a..b],
        completions: &calls.completions[a..b],
        logprobs: &calls.logprobs[a..b],
        length: if calls.length.is_empty() { &[] } else { &calls.length[a..b] },
        hint: if calls.hint.is_empty() { &[] } else { &calls.hint[a..b] },
    }
}

/// Every session's chains, call runs, per-call chains and events in flat
/// arrays, chains numbered across sessions and calls by their position in
/// the whole input (the layout `assemble_calls` returns).
#[derive(Debug, Default, PartialEq)]
pub struct Flat {
    pub ids: Vec<u32>,
    pub loss: Vec<u8>,
    pub logprobs: Vec<f32>,
    pub chain_session: Vec<i64>,
    /// Where each chain's ids start in `ids` (one more entry: the end).
    pub chain_offsets: Vec<i64>,
    pub chain_open: Vec<bool>,
    /// Each chain's last call (its ids are that call's prompt and
    /// completion), and the length of that prompt.
    pub chain_last_call: Vec<i64>,
    pub chain_prompt_len: Vec<i64>,
    /// Each chain's parent (the chain it branched off, -1: a root) and the
    /// number of leading ids it shares with it (all with loss 0 in this chain).
    pub chain_parent: Vec<i64>,
    pub chain_shared: Vec<i64>,
    /// Where each chain's runs start in `span_start` / `span_call` (one more entry).
    pub span_offsets: Vec<i64>,
    /// A run's first position in its chain, and its call.
    pub span_start: Vec<i64>,
    pub span_call: Vec<i64>,
    /// Per call, its chain (-1: dropped).
    pub call_chain: Vec<i64>,
    /// Per event: call, kind, policy, chain, to_chain, position, removed, masked, dropped.
    pub events: [Vec<i64>; 9],
}

/// One session's share of the flat arrays.
struct Part<'a> {
    ids: &'a mut [u32],
    loss: &'a mut [u8],
    logprobs: &'a mut [f32],
    chain_session: &'a mut [i64],
    chain_end: &'a mut [i64],
    chain_open: &'a mut [bool],
    chain_last: &'a mut [(i64, i64)],
    chain_tree: &'a mut [(i64, i64)],
    span_end: &'a mut [i64],
    span_start: &'a mut [i64],
    span_call: &'a mut [i64],
    call_chain: &'a mut [i64],
    /// Where the session's ids, chains and runs start in the whole.
    base: (usize, usize, usize),
}

impl Part<'_> {
    /// Write session `session`'s chains (its calls: `calls`, the first at
    /// `first_call` of the whole input), checking each as it is written.
    fn fill(self, session: usize, first_call: usize, calls: &Calls<'_>, a: &Assembled) -> Result<(), Broken> {
        let (id_base, chain_base, span_base) = self.base;
        let (mut at, mut sp) = (0, 0);
        for (k, ch) in a.chains.iter().enumerate() {
            let n = ch.len();
            let (ids, loss, logprobs) =
                (&mut self.ids[at..at + n], &mut self.loss[at..at + n], &mut self.logprobs[at..at + n]);
            ch.write(calls, ids, loss, logprobs);
            check_written(calls, ch, ids, loss, logprobs)?;
            at += n;
            self.chain_session[k] = session as i64;
            self.chain_end[k] = (id_base + at) as i64;
            self.chain_open[k] = ch.open;
            let top = ch.links.last().map_or((0, 0), |l| ((first_call + l.call as usize) as i64, l.prompt_end as i64));
            self.chain_last[k] = top;
            self.chain_tree[k] = match ch.parent {
                Some(pk) => {
                    let shared = index::lcp(ch.parts(calls), a.chains[pk].parts(calls)).min(ch.unsampled_prefix());
                    ((chain_base + pk) as i64, shared as i64)
                }
                None => (-1, 0),
            };
            for (start, call) in ch.spans() {
                self.span_start[sp] = start as i64;
                self.span_call[sp] = (first_call + call as usize) as i64;
                sp += 1;
            }
            self.span_end[k] = (span_base + sp) as i64;
        }
        for (out, &k) in self.call_chain.iter_mut().zip(&a.call_chain) {
            *out = if k < 0 { -1 } else { chain_base as i64 + k };
        }
        Ok(())
    }
}

impl<'a> Part<'a> {
    /// This part's first `ids` ids, `chains` chains, `spans` runs and
    /// `calls` calls (at `base`), and the rest.
    fn split(
        self,
        (ids, chains, spans, calls): (usize, usize, usize, usize),
        base: (usize, usize, usize),
    ) -> (Self, Self) {
        let (ids_h, ids_t) = self.ids.split_at_mut(ids);
        let (loss_h, loss_t) = self.loss.split_at_mut(ids);
        let (lp_h, lp_t) = self.logprobs.split_at_mut(ids);
        let (cs_h, cs_t) = self.chain_session.split_at_mut(chains);
        let (ce_h, ce_t) = self.chain_end.split_at_mut(chains);
        let (co_h, co_t) = self.chain_open.split_at_mut(chains);
        let (cl_h, cl_t) = self.chain_last.split_at_mut(chains);
        let (ct_h, ct_t) = self.chain_tree.split_at_mut(chains);
        let (se_h, se_t) = self.span_end.split_at_mut(chains);
        let (ss_h, ss_t) = self.span_start.split_at_mut(spans);
        let (sc_h, sc_t) = self.span_call.split_at_mut(spans);
        let (cc_h, cc_t) = self.call_chain.split_at_mut(calls);
        let head = Part {
            ids: ids_h,
            loss: loss_h,
            logprobs: lp_h,
            chain_session: cs_h,
            chain_end: ce_h,
            chain_open: co_h,
            chain_last: cl_h,
            chain_tree: ct_h,
            span_end: se_h,
            span_start: ss_h,
            span_call: sc_h,
            call_chain: cc_h,
            base,
        };
        let tail = Part {
            ids: ids_t,
            loss: loss_t,
            logprobs: lp_t,
            chain_session: cs_t,
            chain_end: ce_t,
            chain_open: co_t,
            chain_last: cl_t,
            chain_tree: ct_t,
            span_end: se_t,
            span_start: ss_t,
            span_call: sc_t,
            call_chain: cc_t,
            base: self.base,
        };
        (head, tail)
    }
}

/// Write assembled sessions (`sessions[s]`: the range of session `s`'s
/// calls in `calls`) into flat arrays: each chain's ids are written once,
/// from the input, and checked there (see [`check_written`]). Runs on the
/// current rayon pool, each session into its own share of the arrays.
///
/// # Errors
/// A session (by position) and the call whose written ids break the invariant.
pub fn flatten(
    calls: &Calls<'_>,
    mut done: Vec<Assembled>,
    sessions: &[(usize, usize)],
) -> Result<Flat, (usize, Broken)> {
    // Each session's ids, chains, runs and calls, and where its share starts.
    let sizes: Vec<(usize, usize, usize, usize)> = done
        .iter()
        .map(|a| {
            let ids = a.chains.iter().map(Chain::len).sum();
            let spans = a.chains.iter().map(|c| c.spans().count()).sum();
            (ids, a.chains.len(), spans, a.call_chain.len())
        })
        .collect();
    let (mut n_ids, mut n_chains, mut n_spans, mut n_calls) = (0, 0, 0, 0);
    let mut bases = Vec::with_capacity(done.len());
    for &(ids, chains, spans, calls) in &sizes {
        bases.push((n_ids, n_chains, n_spans));
        n_ids += ids;
        n_chains += chains;
        n_spans += spans;
        n_calls += calls;
    }
    let mut events: [Vec<i64>; 9] = Default::default();
    for (a, (&(first, _), &(_, chain_base, _))) in done.iter_mut().zip(sessions.iter().zip(&bases)) {
        let global = |k: i64| if k < 0 { -1 } else { chain_base as i64 + k };
        for e in std::mem::take(&mut a.events) {
            let row = [
                (first + e.call as usize) as i64,
                e.kind as i64,
                e.policy as i64,
                global(e.chain),
                global(e.to_chain),
                e.position as i64,
                e.removed as i64,
                e.masked as i64,
                e.dropped as i64,
            ];
            for (col, v) in events.iter_mut().zip(row) {
                col.push(v);
            }
        }
    }
    let mut f = Flat {
        ids: vec![0; n_ids],
        loss: vec![0; n_ids],
        logprobs: vec![0.0; n_ids],
        chain_session: vec![0; n_chains],
        chain_offsets: vec![0; n_chains + 1],
        chain_open: vec![false; n_chains],
        chain_last_call: Vec::new(),
        chain_prompt_len: Vec::new(),
        chain_parent: Vec::new(),
        chain_shared: Vec::new(),
        span_offsets: vec![0; n_chains + 1],
        span_start: vec![0; n_spans],
        span_call: vec![0; n_spans],
        call_chain: vec![0; n_calls],
        events,
    };
    let mut last = vec![(0i64, 0i64); n_chains];
    let mut tree = vec![(-1i64, 0i64); n_chains];
    let mut rest = Part {
        ids: &mut f.ids,
        loss: &mut f.loss,
        logprobs: &mut f.logprobs,
        chain_session: &mut f.chain_session,
        chain_end: &mut f.chain_offsets[1..],
        chain_open: &mut f.chain_open,
        chain_last: &mut last,
        chain_tree: &mut tree,
        span_end: &mut f.span_offsets[1..],
        span_start: &mut f.span_start,
        span_call: &mut f.span_call,
        call_chain: &mut f.call_chain,
        base: (0, 0, 0),
    };
    let mut parts = Vec::with_capacity(done.len());
    for (&size, &base) in sizes.iter().zip(&bases) {
        let (head, tail) = rest.split(size, base);
        parts.push(head);
        rest = tail;
    }
    parts.into_par_iter().zip(&done).enumerate().try_for_each(|(s, (part, a))| {
        part.fill(s, sessions[s].0, &session(calls, sessions[s]), a).map_err(|b| (s, b))
    })?;
    done.into_par_iter().for_each(drop); // many small vectors: freed on every thread
    (f.chain_last_call, f.chain_prompt_len) = last.into_iter().unzip();
    (f.chain_parent, f.chain_shared) = tree.into_iter().unzip();
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u32 = 100; // a block marker

    /// The options of a test: the trim ids and their count, the realign window, the policies and the markers.
    fn options(trim: &[u32], max_trim: usize, realign_window: usize, policy: [Policy; 4], boundary: &[u32]) -> Options {
        Options {
            trim: trim.to_vec(),
            max_trim,
            realign_window,
            policy,
            boundary: boundary.to_vec(),
            drop_retries: false,
        }
    }

    /// A chain as written: ids, loss, logprobs, runs.
    #[derive(Debug)]
    struct Out {
        ids: Vec<u32>,
        loss: Vec<u8>,
        spans: Vec<(usize, u32)>,
        open: bool,
        parent: i64,
        shared: i64,
    }

    struct Run {
        a: Assembled,
        chains: Vec<Out>,
        events: Vec<Event>,
    }

    fn logprobs_of(c: &[&[u32]]) -> Vec<Vec<f32>> {
        c.iter().enumerate().map(|(k, c)| c.iter().map(|&x| -(k as f32) - x as f32).collect()).collect()
    }

    fn run(calls: &[(&[u32], &[u32])], policy: [Policy; 4]) -> Run {
        let p: Vec<&[u32]> = calls.iter().map(|x| x.0).collect();
        let c: Vec<&[u32]> = calls.iter().map(|x| x.1).collect();
        let lps = logprobs_of(&c);
        let lp: Vec<&[f32]> = lps.iter().map(Vec::as_slice).collect();
        let calls = Calls { prompts: &p, completions: &c, logprobs: &lp, length: &[], hint: &[] };
        let opt = options(&[9], 1, 3, policy, &[B]);
        let a = assemble_session(&calls, &opt);
        check_session(&calls, &a).unwrap();
        let f = flatten(&calls, vec![a.clone()], &[(0, calls.len())]).unwrap();
        let chains = (0..a.chains.len())
            .map(|k| {
                let (x, y) = (f.chain_offsets[k] as usize, f.chain_offsets[k + 1] as usize);
                let (sx, sy) = (f.span_offsets[k] as usize, f.span_offsets[k + 1] as usize);
                for i in x..y {
                    // NaN exactly off the sampled ids
                    assert_eq!(f.loss[i] == 1, !f.logprobs[i].is_nan());
                }
                Out {
                    ids: f.ids[x..y].to_vec(),
                    loss: f.loss[x..y].to_vec(),
                    spans: (sx..sy).map(|j| (f.span_start[j] as usize, f.span_call[j] as u32)).collect(),
                    open: f.chain_open[k],
                    parent: f.chain_parent[k],
                    shared: f.chain_shared[k],
                }
            })
            .collect();
        let events = a.events.clone();
        Run { a, chains, events }
    }

    const DEFAULT: [Policy; 4] = [Policy::Realign, Policy::Fork, Policy::Fork, Policy::Fork];

    #[test]
    fn prompts_that_extend_make_one_chain() {
        let r = run(
            &[(&[B, 1, B, 2], &[3, 9]), (&[B, 1, B, 2, 3, 9, B, 4], &[5]), (&[B, 1, B, 2, 3, 9, B, 4, 5, 7], &[6])],
            DEFAULT,
        );
        assert_eq!(r.chains.len(), 1);
        assert!(r.events.is_empty());
        let ch = &r.chains[0];
        assert_eq!(ch.ids, [B, 1, B, 2, 3, 9, B, 4, 5, 7, 6]);
        assert_eq!(ch.loss, [0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1]);
        assert_eq!(ch.spans, [(0, 0), (6, 1), (9, 2)]);
        assert_eq!(r.a.call_chain, [0, 0, 0]);
    }

    #[test]
    fn a_trailing_trim_id_may_be_replaced() {
        let r = run(&[(&[B, 1], &[3, 9]), (&[B, 1, 3, 8], &[5])], DEFAULT);
        assert_eq!(r.chains[0].ids, [B, 1, 3, 8, 5]);
        assert_eq!(r.chains[0].loss, [0, 0, 1, 0, 1]);
        assert_eq!(r.events.len(), 1);
        let e = r.events[0];
        assert_eq!((e.kind, e.position, e.removed, e.masked), (Kind::Extend, 3, 1, 1));
    }

    #[test]
    fn a_trim_into_a_prompt_drops_a_call_left_with_no_ids() {
        // call 1 has no completion: call 2 trims its prompt's last id, and call 1 keeps [B, 1, 3]'s tail
        let r = run(&[(&[B, 1], &[3]), (&[B, 1, 3, 9], &[]), (&[B, 1, 3, 7], &[5])], DEFAULT);
        assert_eq!(r.chains[0].ids, [B, 1, 3, 7, 5]);
        assert_eq!(r.chains[0].spans, [(0, 0), (3, 2)]); // call 1's only id was cut
        assert_eq!(r.chains[0].loss, [0, 0, 1, 0, 1]);
        assert_eq!((r.events[0].removed, r.events[0].masked), (1, 0));
    }

    #[test]
    fn seam_drift_realigns_or_forks() {
        let calls: &[(&[u32], &[u32])] = &[(&[B, 1, B, 2], &[3, 4, 5]), (&[B, 1, B, 2, 3, 7, 5, B, 6], &[8])];
        let r = run(calls, DEFAULT);
        assert_eq!(r.chains.len(), 1);
        assert_eq!(r.chains[0].ids, [B, 1, B, 2, 3, 7, 5, B, 6, 8]);
        assert_eq!(r.chains[0].loss, [0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
        let e = r.events[0];
        assert_eq!((e.kind, e.policy, e.position, e.removed, e.masked), (Kind::SeamDrift, Policy::Realign, 5, 2, 2));
        let f = run(calls, [Policy::Fork; 4]);
        assert_eq!(f.chains.len(), 2);
        assert!(f.chains[0].open && f.chains[1].open); // nothing is closed by a branch
        assert_eq!((f.chains[1].parent, f.chains[1].shared), (0, 5));
        let d = run(calls, [Policy::Drop; 4]);
        assert_eq!((d.chains.len(), d.events[0].dropped, d.a.call_chain.as_slice()), (1, 1, &[0, -1][..]));
    }

    #[test]
    fn retries_rewrites_and_sub_agents() {
        let r = run(
            &[
                (&[B, 1, B, 2], &[3, 4, 5, 6, 7]),
                (&[B, 1, B, 2], &[3, 4]),          // retry: rollback, fork
                (&[B, 1, B, 2, 3, 4, B, 5], &[6]), // extends the retry
                (&[B, 11, B, 12], &[13]),          // another system block: new root
                (&[B, 1, B, 20, B, 5], &[6]),      // compaction: rewrite
            ],
            DEFAULT,
        );
        let kinds: Vec<Kind> = r.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Kind::Rollback, Kind::NewRoot, Kind::Rewrite]);
        assert_eq!(r.a.call_chain, [0, 1, 1, 2, 3]);
        assert!(r.chains.iter().all(|c| c.open));
        assert_eq!(r.chains[1].loss, [0, 0, 0, 0, 1, 1, 0, 0, 1]);
        // parents: the retry branches off chain 0 sharing its prompt, the
        // rewrite off chain 1 (the latest of the two it shares 3 ids with)
        let tree: Vec<(i64, i64)> = r.chains.iter().map(|c| (c.parent, c.shared)).collect();
        assert_eq!(tree, [(-1, 0), (0, 4), (-1, 0), (1, 3)]);
    }

    #[test]
    fn the_main_agent_resumes_its_own_chain_after_a_sub_agent() {
        // A BOS id before the first marker: the first block is still the system block.
        let r = run(
            &[
                (&[1, B, 2, B, 3, B], &[4, 9]),               // main agent
                (&[1, B, 5, B, 6, B], &[7, 9]),               // sub-agent: its own system prompt
                (&[1, B, 5, B, 6, B, 7, 9, B, 8, B], &[7]),   // the sub-agent again
                (&[1, B, 2, B, 3, B, 4, 9, B, 10, B], &[11]), // the main agent resumes
            ],
            DEFAULT,
        );
        assert_eq!(r.a.call_chain, [0, 1, 1, 0]);
        let kinds: Vec<(Kind, u32)> = r.events.iter().map(|e| (e.kind, e.call)).collect();
        assert_eq!(kinds, [(Kind::NewRoot, 1), (Kind::Extend, 3)]);
        assert_eq!(r.chains[0].loss, [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1]);
        assert_eq!((r.chains[1].parent, r.chains[1].shared), (-1, 0));
    }

    #[test]
    fn drop_retries_keeps_the_retry_and_its_history() {
        let p: [&[u32]; 4] =
            [&[B, 1, B], &[B, 1, B, 2, 3, B, 4, B], &[B, 1, B, 2, 3, B, 4, B], &[B, 1, B, 2, 3, B, 4, B, 6, B, 7, B]];
        let c: [&[u32]; 4] = [&[2, 3], &[5, 9], &[6], &[8]];
        let lps = logprobs_of(&c);
        let lp: Vec<&[f32]> = lps.iter().map(Vec::as_slice).collect();
        let calls = Calls { prompts: &p, completions: &c, logprobs: &lp, length: &[], hint: &[] };
        let mut opt = options(&[], 0, 0, DEFAULT, &[B]);
        let all = assemble_session(&calls, &opt);
        assert_eq!((all.chains.len(), all.call_chain.as_slice()), (2, &[0, 0, 1, 1][..]));
        opt.drop_retries = true;
        let a = assemble_session(&calls, &opt);
        check_session(&calls, &a).unwrap();
        // call 1's attempt is dropped (2 ids); calls 0, 2 and 3 make one chain
        assert_eq!(a.call_chain, [0, -1, 0, 0]);
        assert_eq!(a.chains.len(), 1);
        let kinds: Vec<(u32, Kind, usize)> = a.events.iter().map(|e| (e.call, e.kind, e.dropped)).collect();
        assert_eq!(kinds, [(1, Kind::Superseded, 2), (2, Kind::Rollback, 0)]);
        let f = flatten(&calls, vec![a], &[(0, 4)]).unwrap();
        assert_eq!(f.loss, [0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!((f.chain_parent, f.chain_shared), (vec![-1], vec![0]));
    }

    #[test]
    fn a_chain_cut_by_length_is_not_extended() {
        let p: [&[u32]; 3] = [&[B, 1, B], &[B, 1, B, 2, 3, B, 4], &[B, 1, B, 2, 3, B, 4, 5, B, 6]];
        let c: [&[u32]; 3] = [&[2, 3], &[5], &[7]];
        let lps = logprobs_of(&c);
        let lp: Vec<&[f32]> = lps.iter().map(Vec::as_slice).collect();
        let length = [false, true, false];
        let calls = Calls { prompts: &p, completions: &c, logprobs: &lp, length: &length, hint: &[] };
        let opt = options(&[], 0, 3, DEFAULT, &[B]);
        let a = assemble_session(&calls, &opt);
        check_session(&calls, &a).unwrap();
        assert_eq!(a.call_chain, [0, 0, 1]);
        assert_eq!(a.events.len(), 1);
        assert_eq!((a.events[0].kind, a.events[0].chain, a.events[0].position), (Kind::Length, 0, 8));
        assert!(!a.chains[0].open && a.chains[1].open);
        let f = flatten(&calls, vec![a], &[(0, 3)]).unwrap();
        assert_eq!((f.chain_parent, f.chain_shared), (vec![-1, 0], vec![0, 8]));
    }

    #[test]
    fn many_calls_and_many_roots_stay_linear() {
        // 2,000 calls of one agent loop, then 20,000 sub-agents each called twice:
        // the index keeps the walks short (checked: the result, not the time).
        let mut prompts: Vec<Vec<u32>> = Vec::new();
        let mut completions: Vec<Vec<u32>> = Vec::new();
        let mut history = vec![B, 1, B, 2, B];
        for i in 0..2_000u32 {
            prompts.push(history.clone());
            completions.push(vec![10 + i % 50]);
            history.extend([10 + i % 50, B, 3, B]);
        }
        for i in 0..20_000u32 {
            let p = vec![B, 5, 1000 + i, B, 6, B];
            prompts.push(p.clone());
            completions.push(vec![7]);
            prompts.push([p, vec![7, B, 8, B]].concat());
            completions.push(vec![9]);
        }
        let p: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
        let c: Vec<&[u32]> = completions.iter().map(Vec::as_slice).collect();
        let lps = logprobs_of(&c);
        let lp: Vec<&[f32]> = lps.iter().map(Vec::as_slice).collect();
        let calls = Calls { prompts: &p, completions: &c, logprobs: &lp, length: &[], hint: &[] };
        let opt = options(&[9], 1, 3, DEFAULT, &[B]);
        let a = assemble_session(&calls, &opt);
        check_session(&calls, &a).unwrap();
        assert_eq!(a.chains.len(), 20_001);
        assert_eq!(a.call_chain[1_999], 0);
        assert!(a.events.iter().all(|e| e.kind == Kind::NewRoot));
        assert_eq!(a.events.len(), 20_000);
    }

    #[test]
    fn a_broken_chain_is_caught() {
        let (p, c, lp) = ([B, 1], [3, 4], [0.5f32, 0.25]);
        let (p2, c2) = ([B, 1, 3, 4, B], [6]);
        let prompts: [&[u32]; 2] = [&p, &p2];
        let completions: [&[u32]; 2] = [&c, &c2];
        let lps: [&[f32]; 2] = [&lp, &[0.5]];
        let calls = Calls { prompts: &prompts, completions: &completions, logprobs: &lps, length: &[], hint: &[] };
        let opt = options(&[], 0, 0, [Policy::Fork; 4], &[]);
        let good = assemble_session(&calls, &opt);
        assert!(check_session(&calls, &good).is_ok());
        assert!(flatten(&calls, vec![good.clone()], &[(0, 2)]).is_ok());
        let broken = |edit: &dyn Fn(&mut Assembled)| {
            let mut a = good.clone();
            edit(&mut a);
            check_session(&calls, &a).err()
        };
        // a link cut short, a gap between links, a call emitted twice, a count that does not add up
        assert!(broken(&|a| a.chains[0].links[1].end -= 1).is_some());
        assert!(broken(&|a| a.chains[0].links[1].from += 1).is_some());
        assert!(
            broken(&|a| a.chains.push(Chain { links: vec![a.chains[0].links[0]], ..a.chains[0].clone() })).is_some()
        );
        assert!(broken(&|a| a.events.push(Event {
            masked: 1,
            ..a.events.first().copied().unwrap_or(Event {
                call: 0,
                kind: Kind::Extend,
                policy: Policy::Fork,
                chain: 0,
                to_chain: 0,
                position: 0,
                removed: 0,
                masked: 0,
                dropped: 0
            })
        }))
        .is_some());
        // a prompt that is not the chain's ids before its completion
        let other: [&[u32]; 2] = [&[B, 2], &p2];
        let wrong = Calls { prompts: &other, ..calls };
        assert!(check_session(&wrong, &good).is_err());
        // written ids checked against the chain: a logprob that is not the engine's
        let (mut ids, mut loss, mut lps) = (vec![0; 6], vec![0; 6], vec![0.0; 6]);
        good.chains[0].write(&calls, &mut ids, &mut loss, &mut lps);
        assert!(check_written(&calls, &good.chains[0], &ids, &loss, &lps).is_ok());
        lps[2] = 0.75;
        assert!(check_written(&calls, &good.chains[0], &ids, &loss, &lps).is_err());
        lps[2] = 0.5;
        loss[0] = 1;
        assert!(check_written(&calls, &good.chains[0], &ids, &loss, &lps).is_err());
        loss[0] = 0;
        ids[0] = 7;
        assert!(check_written(&calls, &good.chains[0], &ids, &loss, &lps).is_err());
    }

    #[test]
    fn flatten_numbers_chains_and_calls_across_sessions() {
        let p: [&[u32]; 4] = [&[B, 1], &[B, 2], &[B, 5], &[B, 5, 6, 8]];
        let c: [&[u32]; 4] = [&[3], &[4], &[6, 9], &[7]];
        let lps = logprobs_of(&c);
        let lp: Vec<&[f32]> = lps.iter().map(Vec::as_slice).collect();
        let calls = Calls { prompts: &p, completions: &c, logprobs: &lp, length: &[], hint: &[] };
        let sessions = [(0, 2), (2, 4)];
        let opt = options(&[9], 1, 3, [Policy::Fork; 4], &[B]);
        // session 0: a new root (2 chains); session 1: one chain, its trim id replaced
        let done: Vec<Assembled> = assemble_many(&calls, &sessions, &opt).into_iter().map(Result::unwrap).collect();
        let f = flatten(&calls, done, &sessions).unwrap();
        assert_eq!(f.ids, [B, 1, 3, B, 2, 4, B, 5, 6, 8, 7]);
        assert_eq!(f.loss, [0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 1]);
        assert_eq!(f.logprobs[2].to_bits(), lps[0][0].to_bits());
        assert_eq!(
            (f.chain_session, f.chain_offsets, f.chain_open),
            (vec![0, 0, 1], vec![0, 3, 6, 11], vec![true, true, true])
        );
        assert_eq!((f.span_offsets, f.span_start, f.span_call), (vec![0, 1, 2, 4], vec![0, 0, 0, 3], vec![0, 1, 2, 3]));
        assert_eq!(f.call_chain, [0, 1, 2, 2]);
        assert_eq!((f.chain_last_call, f.chain_prompt_len), (vec![0, 1, 3], vec![2, 2, 4]));
        // events: session 0's new root (call 1, to chain 1), session 1's trimmed extension (call 3, chain 2)
        assert_eq!(f.events[0], [1, 3]);
        assert_eq!(f.events[1], [Kind::NewRoot as i64, Kind::Extend as i64]);
        assert_eq!((&f.events[3], &f.events[4]), (&vec![0, 2], &vec![1, 2]));
        let empty = Calls { prompts: &[], completions: &[], logprobs: &[], length: &[], hint: &[] };
        assert_eq!(
            flatten(&empty, vec![], &[]),
            Ok(Flat { chain_offsets: vec![0], span_offsets: vec![0], ..Flat::default() })
        );
    }
}
