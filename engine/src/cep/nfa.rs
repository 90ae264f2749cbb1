//! The matcher of one key: its partial matches alive, each waiting for one
//! stage of the [`Pattern`], fed the key's events in event-time order.
//!
//! Feeding event `e` (the key's `seq`-th) to a partial match waiting for
//! stage `s`, having taken `c` of its events:
//!
//! - a loop (`c > 0`) that `e` stops (`until`) ends there;
//! - if `e` satisfies `s`, a new partial match takes it: with `c + 1`
//!   events of `s` it waits for another of `s` while the quantifier leaves
//!   room, and, once `c + 1` reaches the least, for the next stage (and
//!   for the one after each optional stage, skipping it). It is complete
//!   when every later stage is optional;
//! - the old one keeps waiting if its contiguity lets it pass over `e`:
//!   never when strict (it dies), when relaxed only if it did not take
//!   `e`, always when non-deterministic.
//!
//! A partial match that passed a negative stage to wait for the next one
//! carries it as a guard: `not_next` kills it if the first event after
//! its last satisfies the negative stage; `not_followed_by` if any event
//! does before it takes the next stage's.
//!
//! Every event may also start a match at the first stage. A partial match
//! whose first event is `within` or more before the event (or watermark)
//! at hand times out. The matches completed by one event are emitted in
//! the order of their events' numbers (then stages); the pattern's
//! [`AfterMatchSkip`] then discards, after each one emitted, the partial
//! and complete matches it names. The tests hold this to a brute-force
//! matcher that checks every candidate sequence against the rules.

use super::{AfterMatchSkip, Contiguity, Negation, Partial, Pattern};
use std::sync::Arc;

/// One event a match took.
#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Taken<T> {
    /// The stage it went to (an index into the pattern's stages).
    pub stage: u16,
    /// The key's event number (from 0, in event-time order).
    pub seq: u64,
    /// Its event time.
    pub time: u64,
    /// The event.
    pub event: T,
}

/// A complete match, or a partial one that timed out: its events in
/// order, each with its stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match<T> {
    /// The pattern's stage names ([`Taken::stage`] indexes them).
    pub names: Arc<[String]>,
    /// In the order the key saw them.
    pub events: Vec<Taken<T>>,
}

impl<T> Match<T> {
    /// The events stage `name` took, in order (none for a name the
    /// pattern does not have).
    pub fn get<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a T> + 'a {
        let i = self
            .names
            .iter()
            .position(|n| n == name)
            .unwrap_or(usize::MAX);
        self.stage(i)
    }

    /// The first event stage `name` took.
    pub fn first(&self, name: &str) -> Option<&T> {
        self.get(name).next()
    }

    /// The events stage `stage` took, in order.
    pub fn stage(&self, stage: usize) -> impl Iterator<Item = &T> {
        self.events
            .iter()
            .filter(move |t| t.stage as usize == stage)
            .map(|t| &t.event)
    }

    /// Its first event's time.
    pub fn start_time(&self) -> u64 {
        self.events.first().map_or(0, |t| t.time)
    }
}

/// A partial match, waiting for one stage.
#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Branch<T> {
    /// The stage it waits for.
    stage: u16,
    /// The events of that stage it took already (0: it waits to enter it).
    count: u32,
    /// What it took so far (never empty).
    events: Vec<Taken<T>>,
    /// The negative stage it passed to get here, while it still binds:
    /// `not_next` until the first event after its last, `not_followed_by`
    /// until it takes one.
    guard: Option<u16>,
}

impl<T> Branch<T> {
    fn start_seq(&self) -> u64 {
        self.events[0].seq
    }
    fn start_time(&self) -> u64 {
        self.events[0].time
    }
}

/// What one event (or watermark) did.
#[derive(Debug)]
pub struct Step<T> {
    /// Matches completed, in the order they are emitted.
    pub matches: Vec<Match<T>>,
    /// Partial matches that timed out, in the order of their events.
    pub timed_out: Vec<Match<T>>,
}

/// The partial matches of one key (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Matcher<T> {
    branches: Vec<Branch<T>>,
    /// The number the key's next event gets.
    seq: u64,
}

impl<T> Default for Matcher<T> {
    fn default() -> Self {
        Matcher {
            branches: Vec::new(),
            seq: 0,
        }
    }
}

impl<T: Clone> Matcher<T> {
    /// No partial match alive.
    pub fn is_empty(&self) -> bool {
        self.branches.is_empty()
    }

    /// Partial matches alive.
    pub fn partial(&self) -> usize {
        self.branches.len()
    }

    /// The earliest time a partial match alive times out (its first
    /// event's time plus `within`), if the pattern has a `within`.
    pub fn next_timeout(&self, p: &Pattern<T>) -> Option<u64> {
        let w = p.within?;
        self.branches
            .iter()
            .map(|b| b.start_time().saturating_add(w))
            .min()
    }

    /// Event time reached `time` (a watermark, or the next event's time):
    /// the partial matches that can no longer complete — their first event
    /// `within` or more before it — time out, each once.
    pub fn advance(&mut self, p: &Pattern<T>, time: u64) -> Vec<Match<T>> {
        let Some(w) = p.within else {
            return Vec::new();
        };
        if !self
            .branches
            .iter()
            .any(|b| time.saturating_sub(b.start_time()) >= w)
        {
            return Vec::new();
        }
        let (out, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.branches)
            .into_iter()
            .partition(|b| time.saturating_sub(b.start_time()) >= w);
        self.branches = keep;
        // A partial match waits for several stages at once as several
        // branches with the same events: one timeout each.
        let mut v: Vec<Vec<Taken<T>>> = out.into_iter().map(|b| b.events).collect();
        v.sort_by_key(|a| order(a));
        v.dedup_by(|a, b| order(a) == order(b));
        v.into_iter()
            .map(|events| Match {
                names: Arc::clone(&p.names),
                events,
            })
            .collect()
    }

    /// Feeds the key's next event, at `time` (not before the previous
    /// one's).
    pub fn step(&mut self, p: &Pattern<T>, event: &T, time: u64) -> Step<T> {
        let timed_out = self.advance(p, time);
        let seq = self.seq;
        self.seq += 1;
        let mut next = Vec::with_capacity(self.branches.len() + 2);
        let mut done = Vec::new();
        let taken = |stage: u16| Taken {
            stage,
            seq,
            time,
            event: event.clone(),
        };
        if p.stages[0].accepts(event, &Partial::new(&p.names, &[])) {
            spawn(p, 0, 1, vec![taken(0)], &mut next, &mut done);
        }
        for mut b in std::mem::take(&mut self.branches) {
            let st = &p.stages[b.stage as usize];
            let looping = b.count > 0;
            if looping && st.stops(event) {
                continue;
            }
            let so_far = Partial::new(&p.names, &b.events);
            let guard = b.guard.map(|g| &p.stages[g as usize]);
            let forbidden = guard.is_some_and(|g| g.accepts(event, &so_far));
            if forbidden && guard.is_some_and(|g| g.negative == Some(Negation::NotNext)) {
                continue;
            }
            let takes = st.accepts(event, &so_far);
            if takes {
                let mut events = b.events.clone();
                events.push(taken(b.stage));
                spawn(p, b.stage, b.count + 1, events, &mut next, &mut done);
            }
            let mut keep = match if looping { st.inner } else { st.entry } {
                Contiguity::Strict => false,
                Contiguity::Relaxed => !takes,
                Contiguity::Any => true,
            };
            match guard.and_then(|g| g.negative.map(|n| (n, g))) {
                // The next event was not the one `not_next` forbids.
                Some((Negation::NotNext, _)) => b.guard = None,
                // An event `not_followed_by` forbids came before the next
                // stage's.
                Some((Negation::NotFollowedBy, _)) if forbidden => keep = false,
                _ => {}
            }
            if keep {
                next.push(b);
            }
        }
        done.sort_by_key(|a| order(a));
        let mut matches = Vec::new();
        let mut starts: Vec<u64> = Vec::new();
        for events in done {
            let start = events[0].seq;
            let emit = match p.skip {
                AfterMatchSkip::NoSkip => true,
                // Every match here ends at `seq`: once one is emitted,
                // nothing that started at or before it may follow.
                AfterMatchSkip::PastLastEvent => starts.is_empty(),
                AfterMatchSkip::ToNext => !starts.contains(&start),
            };
            if emit {
                starts.push(start);
                matches.push(Match {
                    names: Arc::clone(&p.names),
                    events,
                });
            }
        }
        match p.skip {
            AfterMatchSkip::NoSkip => {}
            AfterMatchSkip::PastLastEvent if !starts.is_empty() => {
                next.retain(|b| b.start_seq() > seq);
            }
            AfterMatchSkip::PastLastEvent => {}
            AfterMatchSkip::ToNext => next.retain(|b| !starts.contains(&b.start_seq())),
        }
        self.branches = next;
        Step { matches, timed_out }
    }
}

/// The order matches are emitted in: their events' numbers, then stages.
fn order<T>(events: &[Taken<T>]) -> (Vec<u64>, Vec<u16>) {
    (
        events.iter().map(|t| t.seq).collect(),
        events.iter().map(|t| t.stage).collect(),
    )
}

/// A partial match that just took its `count`-th event of stage `stage`:
/// complete if every later stage is optional; waiting for more of the
/// stage while it has room; waiting for the next stage (and past each
/// optional one) once it has its least.
fn spawn<T: Clone>(
    p: &Pattern<T>,
    stage: u16,
    count: u32,
    events: Vec<Taken<T>>,
    next: &mut Vec<Branch<T>>,
    done: &mut Vec<Vec<Taken<T>>>,
) {
    let j = stage as usize;
    let st = &p.stages[j];
    let enough = count >= st.min;
    if enough && p.stages[j + 1..].iter().all(|s| s.min == 0) {
        done.push(events.clone());
    }
    if enough {
        let mut guard = None;
        for (k, s) in p.stages.iter().enumerate().skip(j + 1) {
            if s.negative.is_some() {
                guard = Some(k as u16);
                continue;
            }
            next.push(Branch {
                stage: k as u16,
                count: 0,
                events: events.clone(),
                guard,
            });
            if s.min > 0 {
                break;
            }
        }
    }
    if st.room(count) {
        next.push(Branch {
            stage,
            count,
            events,
            guard: None,
        });
    }
}
