//! Captured LLM calls to trainable chains (`tito_fast.assemble`).
//!
//! A session's calls are taken in order. Each call's prompt is matched
//! against the session's open chains by longest common prefix: a prompt
//! that starts with a chain's ids (less up to `max_trim` trailing ids of the
//! family's trim set) extends that chain with the prompt's new ids (loss 0)
//! and the completion (loss 1, with its logprobs). Any other call is an
//! event, classified against the chain it shares most ids with:
//!
//! - `rollback`: the prompt is a prefix of the chain (a retry from an
//!   earlier point);
//! - `seam_drift`: it departs within the last `realign_window` ids of the
//!   chain, inside the last call's completion (the seam where a completion
//!   meets the next prompt);
//! - `new_root`: it departs inside the chain's first message block (another
//!   system prompt: a sub-agent), or shares nothing;
//! - `rewrite`: it departs anywhere else (compaction, edited history).
//!
//! and handled by the policy of its cause: `fork` (a new chain of this
//! call's prompt and completion; the old chain ends, except for a new root,
//! which leaves it open), `realign` (seam drift only: the chain's ids from
//! the departure on are replaced by the prompt's, the sampled ids among them
//! are counted as masked) or `drop` (the completion is not emitted and is
//! counted as dropped).
//!
//! Every chain is checked before it is returned: each completion id with
//! loss 1 follows exactly its call's prompt and the completion ids before
//! it, and carries its call's logprob; each call's sampled ids are emitted
//! with loss 1, masked or dropped, and the three add up.

use rayon::prelude::*;

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
}

impl Calls<'_> {
    fn len(&self) -> usize {
        self.prompts.len()
    }
    fn prompt(&self, c: usize) -> &[u32] {
        self.prompts[c]
    }
    fn completion(&self, c: usize) -> (&[u32], &[f32]) {
        (self.completions[c], self.logprobs[c])
    }
}

/// One chain of a session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chain {
    pub ids: Vec<u32>,
    /// 1 on sampled completion ids, else 0.
    pub loss: Vec<u8>,
    /// The engine's logprob on sampled ids, NaN elsewhere.
    pub logprobs: Vec<f32>,
    /// Runs of ids by the call (session-local index) that added them:
    /// (first position, call).
    pub spans: Vec<(usize, u32)>,
    /// Where each call of the chain has its prompt end and completion end.
    calls: Vec<(u32, usize, usize)>,
    first_block_end: usize,
    /// False once a later call forked off it.
    pub open: bool,
}

impl Chain {
    fn push(&mut self, ids: &[u32], sampled: Option<&[f32]>, call: u32) {
        if ids.is_empty() {
            return;
        }
        if self.spans.last().map(|s| s.1) != Some(call) {
            self.spans.push((self.ids.len(), call));
        }
        self.ids.extend_from_slice(ids);
        match sampled {
            Some(lp) => {
                self.loss.resize(self.ids.len(), 1);
                self.logprobs.extend_from_slice(lp);
            }
            None => {
                self.loss.resize(self.ids.len(), 0);
                self.logprobs.resize(self.ids.len(), f32::NAN);
            }
        }
    }

    /// Drop the ids from `at` on; how many of them were sampled.
    fn truncate(&mut self, at: usize) -> usize {
        let masked = self.loss[at..].iter().filter(|&&l| l == 1).count();
        self.ids.truncate(at);
        self.loss.truncate(at);
        self.logprobs.truncate(at);
        while self.spans.last().is_some_and(|s| s.0 >= at) {
            self.spans.pop();
        }
        for c in &mut self.calls {
            c.1 = c.1.min(at);
            c.2 = c.2.min(at);
        }
        masked
    }

    fn add_call(&mut self, call: u32, prompt: &[u32], completion: &[u32], lp: &[f32], from: usize) {
        self.push(&prompt[from..], None, call);
        let prompt_end = self.ids.len();
        self.push(completion, Some(lp), call);
        self.calls.push((call, prompt_end, self.ids.len()));
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

fn first_block_end(ids: &[u32], boundary: &[u32]) -> usize {
    if boundary.is_empty() {
        return ids.len();
    }
    ids.iter().enumerate().skip(1).find(|(_, id)| boundary.contains(id)).map_or(ids.len(), |(i, _)| i)
}

/// Assemble one session's calls.
pub fn assemble_session(calls: &Calls<'_>, opt: &Options) -> Assembled {
    let mut out = Assembled { call_chain: Vec::with_capacity(calls.len()), ..Assembled::default() };
    let mut last: Option<usize> = None; // the chain extended last
    for c in 0..calls.len() {
        let call = u32::try_from(c).expect("fewer than 2**32 calls a session");
        let prompt = calls.prompt(c);
        let (completion, lp) = calls.completion(c);
        // The best open chain: a whole-chain match (the longest), else the longest common prefix.
        let mut best: Option<(usize, usize)> = None; // (chain, common prefix)
        let mut extends: Option<(usize, usize)> = None;
        for (k, chain) in out.chains.iter().enumerate().filter(|(_, ch)| ch.open) {
            let l = crate::prefix::common_prefix_len(&chain.ids, prompt);
            let n = chain.ids.len();
            let trimmable = n - l <= opt.max_trim && chain.ids[l..].iter().all(|id| opt.trim.contains(id));
            if (l == n || (trimmable && l < prompt.len()))
                && extends.is_none_or(|(e, el)| el < l || (el == l && Some(k) == last && Some(e) != last))
            {
                extends = Some((k, l));
            }
            if best.is_none_or(|(b, bl)| bl < l || (bl == l && Some(k) == last && Some(b) != last)) {
                best = Some((k, l));
            }
        }
        if let Some((k, l)) = extends {
            let chain = &mut out.chains[k];
            let removed = chain.ids.len() - l;
            let masked = chain.truncate(l);
            chain.add_call(call, prompt, completion, lp, l);
            if removed > 0 || last != Some(k) {
                out.events.push(Event {
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
            out.call_chain.push(k as i64);
            last = Some(k);
            continue;
        }
        let Some((k, l)) = best else {
            // The session's first call (or every chain has ended): a new root, no event for the first.
            let mut chain =
                Chain { open: true, first_block_end: first_block_end(prompt, &opt.boundary), ..Chain::default() };
            chain.add_call(call, prompt, completion, lp, 0);
            if c > 0 {
                out.events.push(Event {
                    call,
                    kind: Kind::NewRoot,
                    policy: Policy::Fork,
                    chain: -1,
                    to_chain: out.chains.len() as i64,
                    position: 0,
                    removed: 0,
                    masked: 0,
                    dropped: 0,
                });
            }
            out.call_chain.push(out.chains.len() as i64);
            last = Some(out.chains.len());
            out.chains.push(chain);
            continue;
        };
        let chain = &out.chains[k];
        let n = chain.ids.len();
        let last_prompt_end = chain.calls.last().map_or(0, |c| c.1);
        let kind = if l == prompt.len() {
            Kind::Rollback
        } else if n - l <= opt.realign_window && l >= last_prompt_end {
            Kind::SeamDrift
        } else if l < chain.first_block_end {
            Kind::NewRoot
        } else {
            Kind::Rewrite
        };
        let policy = opt.policy[kind as usize - 1];
        let mut event =
            Event { call, kind, policy, chain: k as i64, to_chain: -1, position: l, removed: 0, masked: 0, dropped: 0 };
        match policy {
            Policy::Drop => {
                event.dropped = completion.len();
                out.call_chain.push(-1);
            }
            Policy::Realign => {
                let chain = &mut out.chains[k];
                event.removed = n - l;
                event.masked = chain.truncate(l);
                chain.add_call(call, prompt, completion, lp, l);
                event.to_chain = k as i64;
                out.call_chain.push(k as i64);
                last = Some(k);
            }
            Policy::Fork => {
                if kind != Kind::NewRoot {
                    out.chains[k].open = false;
                }
                let mut fresh =
                    Chain { open: true, first_block_end: first_block_end(prompt, &opt.boundary), ..Chain::default() };
                fresh.add_call(call, prompt, completion, lp, 0);
                event.to_chain = out.chains.len() as i64;
                out.call_chain.push(out.chains.len() as i64);
                last = Some(out.chains.len());
                out.chains.push(fresh);
            }
        }
        out.events.push(event);
    }
    out
}

/// A broken invariant (a bug: assembly never returns one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    pub call: u32,
    pub what: &'static str,
}

/// Check the invariant of the module doc on one assembled session.
///
/// # Errors
/// The first call whose ids break it.
pub fn check_session(calls: &Calls<'_>, a: &Assembled) -> Result<(), Broken> {
    let mut emitted = vec![0usize; calls.len()];
    for chain in &a.chains {
        let mut s = 0;
        while s < chain.spans.len() {
            let (start, call) = chain.spans[s];
            let end = chain.spans.get(s + 1).map_or(chain.ids.len(), |x| x.0);
            let c = call as usize;
            let broken = |what| Broken { call, what };
            let first = (start..end).find(|&i| chain.loss[i] == 1);
            if let Some(q) = first {
                let prompt = calls.prompt(c);
                let (completion, lp) = calls.completion(c);
                let m = end - q;
                if chain.loss[q..end].iter().any(|&l| l != 1) {
                    return Err(broken("ids after a sampled id are not all sampled"));
                }
                if q != prompt.len() || chain.ids[..q] != *prompt {
                    return Err(broken("sampled ids do not follow exactly their call's prompt"));
                }
                if m > completion.len() || chain.ids[q..end] != completion[..m] {
                    return Err(broken("sampled ids are not the call's completion"));
                }
                if chain.logprobs[q..end].iter().zip(&lp[..m]).any(|(a, b)| a.to_bits() != b.to_bits()) {
                    return Err(broken("a logprob is not the engine's"));
                }
                if emitted[c] > 0 {
                    return Err(broken("a call's sampled ids are emitted in two chains"));
                }
                emitted[c] = m;
            }
            if chain.loss[start..first.unwrap_or(end)].iter().any(|&l| l != 0) {
                return Err(broken("a prompt id has loss 1"));
            }
            s += 1;
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

/// Many sessions on the current rayon pool; `sessions[s]` is the range of
/// calls of session `s` in `calls`.
pub fn assemble_many(calls: &Calls<'_>, sessions: &[(usize, usize)], opt: &Options) -> Vec<Result<Assembled, Broken>> {
    sessions
        .par_iter()
        .map(|&(a, b)| {
            let sub = Calls {
                prompts: &calls.prompts[a..b],
                completions: &calls.completions[a..b],
                logprobs: &calls.logprobs[a..b],
            };
            let out = assemble_session(&sub, opt);
            check_session(&sub, &out).map(|()| out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u32 = 100; // a block marker

    fn run(calls: &[(&[u32], &[u32])], policy: [Policy; 4]) -> Assembled {
        let p: Vec<&[u32]> = calls.iter().map(|x| x.0).collect();
        let c: Vec<&[u32]> = calls.iter().map(|x| x.1).collect();
        let lps: Vec<Vec<f32>> =
            c.iter().enumerate().map(|(k, c)| c.iter().map(|&x| -(k as f32) - x as f32).collect()).collect();
        let lp: Vec<&[f32]> = lps.iter().map(Vec::as_slice).collect();
        let calls = Calls { prompts: &p, completions: &c, logprobs: &lp };
        let opt = Options { trim: vec![9], max_trim: 1, realign_window: 3, policy, boundary: vec![B] };
        let out = assemble_session(&calls, &opt);
        check_session(&calls, &out).unwrap();
        out
    }

    const DEFAULT: [Policy; 4] = [Policy::Realign, Policy::Fork, Policy::Fork, Policy::Fork];

    #[test]
    fn prompts_that_extend_make_one_chain() {
        let a = run(
            &[(&[B, 1, B, 2], &[3, 9]), (&[B, 1, B, 2, 3, 9, B, 4], &[5]), (&[B, 1, B, 2, 3, 9, B, 4, 5, 7], &[6])],
            DEFAULT,
        );
        assert_eq!(a.chains.len(), 1);
        assert!(a.events.is_empty());
        let ch = &a.chains[0];
        assert_eq!(ch.ids, [B, 1, B, 2, 3, 9, B, 4, 5, 7, 6]);
        assert_eq!(ch.loss, [0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1]);
        assert_eq!(ch.spans, [(0, 0), (6, 1), (9, 2)]);
        assert_eq!(a.call_chain, [0, 0, 0]);
    }

    #[test]
    fn a_trailing_trim_id_may_be_replaced() {
        let a = run(&[(&[B, 1], &[3, 9]), (&[B, 1, 3, 8], &[5])], DEFAULT);
        assert_eq!(a.chains[0].ids, [B, 1, 3, 8, 5]);
        assert_eq!(a.events.len(), 1);
        let e = a.events[0];
        assert_eq!((e.kind, e.position, e.removed, e.masked), (Kind::Extend, 3, 1, 1));
    }

    #[test]
    fn seam_drift_realigns_or_forks() {
        let calls: &[(&[u32], &[u32])] = &[(&[B, 1, B, 2], &[3, 4, 5]), (&[B, 1, B, 2, 3, 7, 5, B, 6], &[8])];
        let a = run(calls, DEFAULT);
        assert_eq!(a.chains.len(), 1);
        assert_eq!(a.chains[0].ids, [B, 1, B, 2, 3, 7, 5, B, 6, 8]);
        assert_eq!(a.chains[0].loss, [0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
        let e = a.events[0];
        assert_eq!((e.kind, e.policy, e.position, e.removed, e.masked), (Kind::SeamDrift, Policy::Realign, 5, 2, 2));
        let f = run(calls, [Policy::Fork; 4]);
        assert_eq!(f.chains.len(), 2);
        assert!(!f.chains[0].open && f.chains[1].open);
        let d = run(calls, [Policy::Drop; 4]);
        assert_eq!((d.chains.len(), d.events[0].dropped, d.call_chain.as_slice()), (1, 1, &[0, -1][..]));
    }

    #[test]
    fn retries_rewrites_and_sub_agents() {
        let a = run(
            &[
                (&[B, 1, B, 2], &[3, 4, 5, 6, 7]),
                (&[B, 1, B, 2], &[3, 4]),          // retry: rollback, fork
                (&[B, 1, B, 2, 3, 4, B, 5], &[6]), // extends the retry
                (&[B, 11, B, 12], &[13]),          // another system block: new root
                (&[B, 1, B, 20, B, 5], &[6]),      // compaction: rewrite
            ],
            DEFAULT,
        );
        let kinds: Vec<Kind> = a.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Kind::Rollback, Kind::NewRoot, Kind::Rewrite]);
        assert_eq!(a.call_chain, [0, 1, 1, 2, 3]);
        assert!(!a.chains[0].open && !a.chains[1].open && a.chains[2].open && a.chains[3].open);
        assert_eq!(a.chains[1].loss, [0, 0, 0, 0, 1, 1, 0, 0, 1]);
    }

    #[test]
    fn a_broken_chain_is_caught() {
        let (p, c, lp) = ([B, 1], [3], [0.5f32]);
        let prompts: [&[u32]; 1] = [&p];
        let completions: [&[u32]; 1] = [&c];
        let lps: [&[f32]; 1] = [&lp];
        let calls = Calls { prompts: &prompts, completions: &completions, logprobs: &lps };
        let mut a = assemble_session(
            &calls,
            &Options { trim: vec![], max_trim: 0, realign_window: 0, policy: [Policy::Fork; 4], boundary: vec![] },
        );
        assert!(check_session(&calls, &a).is_ok());
        a.chains[0].logprobs[2] = 0.25;
        assert!(check_session(&calls, &a).is_err());
        a.chains[0].logprobs[2] = 0.5;
        a.chains[0].ids[0] = 7;
        assert!(check_session(&calls, &a).is_err());
    }
}
