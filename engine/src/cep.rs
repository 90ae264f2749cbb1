//! Complex event processing: patterns over a keyed stream, in the style of
//! Flink CEP.
//!
//! A [`Pattern`] is a sequence of named stages, each with a condition on
//! one event, a quantifier (once, `times`, `one_or_more`, `optional`,
//! `until`) and a contiguity to the stage before it:
//!
//! - [`Pattern::next`]: strict — the stage's event is the key's very next
//!   event after the previous stage's;
//! - [`Pattern::followed_by`]: relaxed — events in between that do not
//!   satisfy the stage's condition are skipped; the first that does is
//!   taken (and no later one instead);
//! - [`Pattern::followed_by_any`]: non-deterministic relaxed — any later
//!   event that satisfies it, each a match of its own.
//!
//! A negative stage takes no event: [`Pattern::not_next`] (the next event
//! must not satisfy it) and [`Pattern::not_followed_by`] (no event before
//! the next stage's may).
//!
//! A looping stage (`times`, `one_or_more`) takes its events with relaxed
//! contiguity among themselves unless [`Pattern::consecutive`] (strict) or
//! [`Pattern::allow_combinations`] (non-deterministic) says otherwise.
//! [`Pattern::within`] bounds a match's span in event time (its last
//! event less than that after its first); a partial match that can no
//! longer complete in time is *timed out*.
//! [`Pattern::skip`] chooses what happens to the other partial matches
//! once one completes ([`AfterMatchSkip`]).
//!
//! ```
//! use tandem::cep::Pattern;
//! use std::time::Duration;
//!
//! #[derive(Clone)]
//! struct Trade { id: u64, volume: f64, name: String }
//!
//! // An event with id 42, then one with volume above 10, then one named
//! // "end", all within a minute.
//! let pattern = Pattern::<Trade>::begin("start")
//!     .when(|t| t.id == 42)
//!     .next("middle")
//!     .when(|t| t.volume > 10.0)
//!     .followed_by("end")
//!     .when(|t| t.name == "end")
//!     .within(Duration::from_secs(60));
//! assert_eq!(pattern.stage_names(), ["start", "middle", "end"]);
//! assert!(pattern.validate().is_ok());
//! ```
//!
//! The matching itself is [`nfa::Matcher`]: per key, the partial matches
//! alive (each waiting for one stage), fed the key's events in event-time
//! order. Its exact semantics, and a brute-force matcher that follows them
//! literally and the tests compare it with, are in `cep/tests.rs`.

pub mod nfa;
mod op;
#[cfg(test)]
mod tests;

pub use nfa::{Match, Taken};
pub use op::CepOutput;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A condition on one event, given what the partial match took so far.
pub(crate) type Cond<T> = Arc<dyn Fn(&T, &Partial<'_, T>) -> bool + Send + Sync>;

/// A condition on one event alone (`until`).
pub(crate) type Stop<T> = Arc<dyn Fn(&T) -> bool + Send + Sync>;

/// What a partial match took so far, for a condition that looks at it
/// ([`Pattern::when_with`]; Flink's `IterativeCondition`).
pub struct Partial<'a, T> {
    names: &'a [String],
    events: &'a [nfa::Taken<T>],
}

impl<'a, T> Partial<'a, T> {
    pub(crate) fn new(names: &'a [String], events: &'a [nfa::Taken<T>]) -> Self {
        Partial { names, events }
    }

    /// The events stage `name` took so far, in order.
    pub fn get(&self, name: &str) -> impl Iterator<Item = &'a T> + 'a {
        let i = self.names.iter().position(|n| n == name);
        let events = self.events;
        events
            .iter()
            .filter(move |t| Some(t.stage as usize) == i)
            .map(|t| &t.event)
    }

    /// The first event stage `name` took.
    pub fn first(&self, name: &str) -> Option<&'a T> {
        self.get(name).next()
    }

    /// The last event the partial match took (`None` at its start).
    pub fn last(&self) -> Option<&'a T> {
        self.events.last().map(|t| &t.event)
    }

    /// How many events it took.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether it took none (the condition of a first stage's event).
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// How a stage's events follow the event before them ([`Pattern`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contiguity {
    /// The very next event of the key.
    Strict,
    /// The first later event that satisfies the stage (others skipped).
    Relaxed,
    /// Any later event that satisfies the stage, each a match of its own.
    Any,
}

/// A negative stage: what must not come ([`Pattern::not_next`],
/// [`Pattern::not_followed_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negation {
    /// The event right after the previous stage's must not satisfy it.
    NotNext,
    /// No event between the previous stage's and the next stage's may
    /// satisfy it.
    NotFollowedBy,
}

/// What happens to the other partial matches once a match is emitted
/// (Flink's `AfterMatchSkipStrategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AfterMatchSkip {
    /// Nothing: every match is emitted.
    #[default]
    NoSkip,
    /// Every partial match that started at or before the emitted match's
    /// last event is discarded: matches do not overlap.
    PastLastEvent,
    /// Every partial match that started with the emitted match's first
    /// event is discarded: one match per first event.
    ToNext,
}

/// One stage of a [`Pattern`].
pub(crate) struct Stage<T> {
    pub(crate) name: String,
    /// All must hold (`when`); `None`: any event.
    pub(crate) conds: Vec<Vec<Cond<T>>>,
    pub(crate) min: u32,
    /// `None`: unbounded.
    pub(crate) max: Option<u32>,
    /// Contiguity to the stage before (the first stage's is unused).
    pub(crate) entry: Contiguity,
    /// Contiguity among a looping stage's events.
    pub(crate) inner: Contiguity,
    /// A looping stage stops at an event that satisfies this.
    pub(crate) until: Option<Stop<T>>,
    /// A negative stage: it takes no event; its condition says what must
    /// not come.
    pub(crate) negative: Option<Negation>,
    /// Which builder calls were made (for validation).
    looped: bool,
    inner_set: bool,
}

impl<T> Clone for Stage<T> {
    fn clone(&self) -> Self {
        Stage {
            name: self.name.clone(),
            conds: self.conds.clone(),
            min: self.min,
            max: self.max,
            entry: self.entry,
            inner: self.inner,
            until: self.until.clone(),
            negative: self.negative,
            looped: self.looped,
            inner_set: self.inner_set,
        }
    }
}

impl<T> Stage<T> {
    fn new(name: &str, entry: Contiguity) -> Self {
        Stage {
            name: name.to_string(),
            conds: Vec::new(),
            min: 1,
            max: Some(1),
            entry,
            inner: Contiguity::Relaxed,
            until: None,
            negative: None,
            looped: false,
            inner_set: false,
        }
    }

    /// Whether `e` satisfies the stage's condition: every `when` of one
    /// of its `or` groups (no `when` at all: every event).
    #[inline]
    pub(crate) fn accepts(&self, e: &T, so_far: &Partial<'_, T>) -> bool {
        self.conds.is_empty() || self.conds.iter().any(|g| g.iter().all(|c| c(e, so_far)))
    }

    /// Whether `e` ends the stage's loop.
    #[inline]
    pub(crate) fn stops(&self, e: &T) -> bool {
        self.until.as_ref().is_some_and(|u| u(e))
    }

    /// Whether a count of `n` leaves room for more.
    #[inline]
    pub(crate) fn room(&self, n: u32) -> bool {
        self.max.is_none_or(|m| n < m)
    }
}

/// A pattern: named stages in order, each with a condition, a quantifier
/// and its contiguity to the one before (see the module docs).
pub struct Pattern<T> {
    pub(crate) stages: Vec<Stage<T>>,
    /// The stages' names, for the matches.
    pub(crate) names: Arc<[String]>,
    pub(crate) within: Option<u64>,
    pub(crate) skip: AfterMatchSkip,
}

impl<T> Clone for Pattern<T> {
    fn clone(&self) -> Self {
        Pattern {
            stages: self.stages.clone(),
            names: Arc::clone(&self.names),
            within: self.within,
            skip: self.skip,
        }
    }
}

impl<T> fmt::Debug for Pattern<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_list();
        for s in &self.stages {
            l.entry(&format_args!(
                "{} {:?} [{}, {}] {:?}{}",
                s.name,
                s.entry,
                s.min,
                s.max.map_or("∞".to_string(), |m| m.to_string()),
                s.inner,
                if s.until.is_some() { " until" } else { "" }
            ));
        }
        l.finish()
    }
}

/// Why a [`Pattern`] cannot be matched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pattern stage `{stage}`: {why}")]
pub struct PatternError {
    /// The stage at fault.
    pub stage: String,
    /// What is wrong with it.
    pub why: String,
}

impl<T> Pattern<T> {
    /// A pattern whose first stage is `name` (it matches any event until
    /// [`Pattern::when`] says otherwise).
    pub fn begin(name: &str) -> Self {
        Pattern {
            stages: vec![Stage::new(name, Contiguity::Relaxed)],
            names: Arc::from([name.to_string()]),
            within: None,
            skip: AfterMatchSkip::NoSkip,
        }
    }

    fn last(&mut self) -> &mut Stage<T> {
        self.stages.last_mut().expect("a pattern has a stage")
    }

    /// The last stage's event must satisfy `f` too (Flink's `where`;
    /// several `when`s must all hold).
    pub fn when(self, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        self.when_with(move |e, _| f(e))
    }

    /// The last stage's event must satisfy `f`, which also sees what the
    /// partial match took so far (Flink's `IterativeCondition`): e.g. a
    /// price above the one the stage `start` took. Evaluated for each
    /// partial match the event could extend.
    pub fn when_with(
        mut self,
        f: impl Fn(&T, &Partial<'_, T>) -> bool + Send + Sync + 'static,
    ) -> Self {
        let s = self.last();
        let f: Cond<T> = Arc::new(f);
        match s.conds.last_mut() {
            Some(g) => g.push(f),
            None => s.conds.push(vec![f]),
        }
        self
    }

    /// …or `f` instead (Flink's `or`): the last stage takes an event
    /// that satisfies the `when`s before, or this.
    pub fn or(mut self, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        let f: Cond<T> = Arc::new(move |e, _| f(e));
        self.last().conds.push(vec![f]);
        self
    }

    fn then(mut self, name: &str, c: Contiguity) -> Self {
        self.stages.push(Stage::new(name, c));
        self.names = self.stages.iter().map(|s| s.name.clone()).collect();
        self
    }

    /// A stage whose event is the very next one of the key.
    pub fn next(self, name: &str) -> Self {
        self.then(name, Contiguity::Strict)
    }

    /// A stage whose event is the first later one that satisfies it.
    pub fn followed_by(self, name: &str) -> Self {
        self.then(name, Contiguity::Relaxed)
    }

    /// A stage whose event is any later one that satisfies it.
    pub fn followed_by_any(self, name: &str) -> Self {
        self.then(name, Contiguity::Any)
    }

    /// A negative stage: the event right after the previous stage's must
    /// not satisfy it (its condition, given with [`Pattern::when`]). It
    /// takes no event, cannot end the pattern, and takes no quantifier.
    pub fn not_next(self, name: &str) -> Self {
        let mut p = self.then(name, Contiguity::Strict);
        p.last().negative = Some(Negation::NotNext);
        p
    }

    /// A negative stage: no event between the previous stage's and the
    /// next stage's may satisfy it. It takes no event, cannot end the
    /// pattern, and takes no quantifier.
    pub fn not_followed_by(self, name: &str) -> Self {
        let mut p = self.then(name, Contiguity::Relaxed);
        p.last().negative = Some(Negation::NotFollowedBy);
        p
    }

    /// The last stage takes exactly `n` events (`n ≥ 1`).
    pub fn times(self, n: u32) -> Self {
        self.times_range(n, n)
    }

    /// The last stage takes `min` to `max` events.
    pub fn times_range(mut self, min: u32, max: u32) -> Self {
        let s = self.last();
        s.min = min;
        s.max = Some(max);
        s.looped = true;
        self
    }

    /// The last stage takes one event or more.
    pub fn one_or_more(self) -> Self {
        self.times_or_more(1)
    }

    /// The last stage takes `n` events or more.
    pub fn times_or_more(mut self, n: u32) -> Self {
        let s = self.last();
        s.min = n;
        s.max = None;
        s.looped = true;
        self
    }

    /// The last stage may take no event at all.
    pub fn optional(mut self) -> Self {
        self.last().min = 0;
        self
    }

    /// The last (looping) stage stops taking events at one that satisfies
    /// `f`; that event is not taken.
    pub fn until(mut self, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        self.last().until = Some(Arc::new(f));
        self
    }

    /// The last (looping) stage's events follow each other strictly.
    pub fn consecutive(mut self) -> Self {
        let s = self.last();
        s.inner = Contiguity::Strict;
        s.inner_set = true;
        self
    }

    /// The last (looping) stage takes any later event that satisfies it,
    /// each choice a match of its own.
    pub fn allow_combinations(mut self) -> Self {
        let s = self.last();
        s.inner = Contiguity::Any;
        s.inner_set = true;
        self
    }

    /// A match spans less than `d` of event time, its first event to its
    /// last; a partial match older than that times out.
    pub fn within(mut self, d: Duration) -> Self {
        self.within = Some(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
        self
    }

    /// What happens to the other partial matches once one is emitted.
    pub fn skip(mut self, s: AfterMatchSkip) -> Self {
        self.skip = s;
        self
    }

    /// The stages' names, in order.
    pub fn stage_names(&self) -> Vec<&str> {
        self.stages.iter().map(|s| s.name.as_str()).collect()
    }

    /// Whether the pattern can be matched: names unique and non-empty; the
    /// first stage not optional; `until`, `consecutive` and
    /// `allow_combinations` only on looping stages; quantities sane.
    pub fn validate(&self) -> Result<(), PatternError> {
        let bad = |s: &Stage<T>, why: &str| {
            Err(PatternError {
                stage: s.name.clone(),
                why: why.to_string(),
            })
        };
        if self.stages.len() > u16::MAX as usize {
            return bad(&self.stages[0], "more than 65535 stages");
        }
        for (i, s) in self.stages.iter().enumerate() {
            if s.name.is_empty() {
                return bad(s, "an empty name");
            }
            if self.stages[..i].iter().any(|o| o.name == s.name) {
                return bad(s, "a name used twice");
            }
            if s.max == Some(0) || s.max.is_some_and(|m| m < s.min.max(1)) {
                return bad(s, "a quantity whose most is below its least (or 0)");
            }
            if (s.until.is_some() || s.inner_set) && !s.looped {
                return bad(
                    s,
                    "until, consecutive and allow_combinations need a looping stage (times, one_or_more)",
                );
            }
            if i == 0 && s.min == 0 {
                return bad(s, "the first stage cannot be optional");
            }
            if s.negative.is_some() {
                if s.looped || s.min != 1 {
                    return bad(
                        s,
                        "a negative stage takes no quantifier and is not optional",
                    );
                }
                if i + 1 == self.stages.len() {
                    return bad(s, "a pattern cannot end with not_next or not_followed_by");
                }
                let before = &self.stages[i - 1];
                if before.min == 0 || before.negative.is_some() {
                    return bad(
                        s,
                        "a negative stage cannot follow an optional or negative one",
                    );
                }
                if self.stages[i + 1].min == 0 {
                    return bad(s, "a negative stage cannot precede an optional one");
                }
            }
        }
        Ok(())
    }
}
