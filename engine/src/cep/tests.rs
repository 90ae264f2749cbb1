//! The matcher against Flink CEP's documented examples, and against a
//! brute-force matcher over generated patterns and event sequences.
//!
//! The brute force states the semantics directly. A match is a sequence
//! of events `i₁ < … < iₘ` of the key, each given a stage `s₁ ≤ … ≤ sₘ`,
//! with `s₁` the first stage, such that:
//! - each event satisfies its stage's condition;
//! - each stage takes between its least and most events (stages it takes
//!   none of are optional);
//! - a step `l → l+1` within one stage (a loop) follows that stage's inner
//!   contiguity, and no event in `(iₗ, iₗ₊₁]` satisfies its `until`; a step
//!   into a later stage follows that stage's contiguity (stages between
//!   are optional or negative and take nothing). Strict: `iₗ₊₁ = iₗ + 1`;
//!   relaxed: no event in `(iₗ, iₗ₊₁)` satisfies `sₗ₊₁`'s condition; any:
//!   nothing. A negative stage crossed: `not_next` — event `iₗ + 1` does
//!   not satisfy it; `not_followed_by` — no event in `(iₗ, iₗ₊₁)` does;
//! - with `within`, `time(iₘ) − time(i₁) < within`.
//!
//! The candidates are ordered by their last event, then their events,
//! then their stages; the skip strategy then emits them in that order:
//! no skip every one; past-last-event one only if it starts after the
//! last event of every one emitted before; to-next one only if no one
//! emitted before started with the same event.

use super::nfa::{Match, Matcher};
use super::{AfterMatchSkip, Contiguity, Negation, Pattern};
use proptest::prelude::*;
use std::time::Duration;

/// An event: a kind (what conditions look at) and its name in the docs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ev {
    kind: u8,
    name: &'static str,
}

/// A match as (event number, stage) pairs.
type Ids = Vec<(u64, u16)>;

/// The matches (and the timed-out partial matches' event numbers) of `p`
/// over `events`.
fn run(p: &Pattern<Ev>, events: &[(Ev, u64)]) -> (Vec<Ids>, Vec<Vec<u64>>) {
    p.validate().unwrap();
    let mut m = Matcher::default();
    let (mut matches, mut timed_out) = (Vec::new(), Vec::new());
    let ids = |x: &Match<Ev>| {
        x.events
            .iter()
            .map(|t| (t.seq, t.stage))
            .collect::<Vec<_>>()
    };
    for (e, t) in events {
        let s = m.step(p, e, *t);
        matches.extend(s.matches.iter().map(ids));
        timed_out.extend(
            s.timed_out
                .iter()
                .map(|x| x.events.iter().map(|t| t.seq).collect()),
        );
    }
    (matches, timed_out)
}

/// The names of each match's events, in order.
fn names(p: &Pattern<Ev>, events: &[Ev]) -> Vec<String> {
    let timed: Vec<(Ev, u64)> = events.iter().cloned().map(|e| (e, 0)).collect();
    run(p, &timed)
        .0
        .iter()
        .map(|m| {
            m.iter()
                .map(|&(i, _)| events[i as usize].name)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn ev(spec: &str) -> Vec<Ev> {
    spec.split_whitespace()
        .map(|n| {
            let name: &'static str = Box::leak(n.to_string().into_boxed_str());
            Ev {
                kind: n.as_bytes()[0],
                name,
            }
        })
        .collect()
}

fn is(k: u8) -> impl Fn(&Ev) -> bool + Send + Sync + 'static {
    move |e: &Ev| e.kind == k
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Flink's docs, "Contiguity within looping patterns": C D A1 A2 A3 D A4 B
/// against `C followedBy A+ followedBy B`.
#[test]
fn looping_contiguity_matches_flinks_documented_example() {
    let input = ev("C D A1 A2 A3 D A4 B");
    let base = || {
        Pattern::begin("start")
            .when(is(b'C'))
            .followed_by("middle")
            .when(is(b'A'))
            .one_or_more()
    };
    let end = |p: Pattern<Ev>| p.followed_by("end").when(is(b'B'));
    assert_eq!(
        sorted(names(&end(base().consecutive()), &input)),
        ["C A1 A2 A3 B", "C A1 A2 B", "C A1 B"]
    );
    assert_eq!(
        sorted(names(&end(base()), &input)),
        ["C A1 A2 A3 A4 B", "C A1 A2 A3 B", "C A1 A2 B", "C A1 B"]
    );
    assert_eq!(
        sorted(names(&end(base().allow_combinations()), &input)),
        [
            "C A1 A2 A3 A4 B",
            "C A1 A2 A3 B",
            "C A1 A2 A4 B",
            "C A1 A2 B",
            "C A1 A3 A4 B",
            "C A1 A3 B",
            "C A1 A4 B",
            "C A1 B"
        ]
    );
}

/// Flink's docs, "Contiguity": `a followed by b` on "a c b1 b2".
#[test]
fn strict_relaxed_and_any_contiguity_between_stages() {
    let input = ev("a c b1 b2");
    let p = |c: Contiguity| {
        let p = Pattern::begin("a").when(is(b'a'));
        match c {
            Contiguity::Strict => p.next("b"),
            Contiguity::Relaxed => p.followed_by("b"),
            Contiguity::Any => p.followed_by_any("b"),
        }
        .when(is(b'b'))
    };
    assert!(names(&p(Contiguity::Strict), &input).is_empty());
    assert_eq!(names(&p(Contiguity::Relaxed), &input), ["a b1"]);
    assert_eq!(names(&p(Contiguity::Any), &input), ["a b1", "a b2"]);
}

/// The seed's pattern: id 42, then volume above 10, then `end`.
#[test]
fn the_seeds_pattern_alerts_once_per_sequence() {
    #[derive(Clone)]
    struct Trade {
        id: u64,
        volume: f64,
        name: &'static str,
    }
    let p = Pattern::<Trade>::begin("start")
        .when(|t| t.id == 42)
        .next("middle")
        .when(|t| t.volume > 10.0)
        .followed_by("end")
        .when(|t| t.name == "end");
    let t = |id, volume, name| Trade { id, volume, name };
    let input = [
        t(42, 1.0, "x"),
        t(1, 11.0, "x"),
        t(2, 0.5, "y"),
        t(3, 0.5, "end"),
        t(42, 1.0, "x"),
        t(4, 9.0, "x"), // not above 10: strict `next` fails
        t(5, 20.0, "end"),
    ];
    let mut m = Matcher::default();
    let mut got = Vec::new();
    for (i, e) in input.iter().enumerate() {
        for x in m.step(&p, e, i as u64).matches {
            got.push(x.events.iter().map(|t| t.seq).collect::<Vec<_>>());
        }
    }
    assert_eq!(got, [vec![0, 1, 3]]);
}

#[test]
fn quantifiers_times_optional_and_until() {
    let input = ev("a b1 b2 x b3 c");
    let p = || {
        Pattern::begin("a")
            .when(is(b'a'))
            .followed_by("b")
            .when(is(b'b'))
            .times(2)
    };
    let c = |p: Pattern<Ev>| p.followed_by("c").when(is(b'c'));
    // Relaxed within the loop: its second event is the first b after b1.
    assert_eq!(names(&c(p()), &input), ["a b1 b2 c"]);
    // Any: every later b.
    assert_eq!(
        sorted(names(&c(p().allow_combinations()), &input)),
        ["a b1 b2 c", "a b1 b3 c"]
    );
    // An optional middle: with and without it.
    let p = Pattern::begin("a")
        .when(is(b'a'))
        .followed_by("b")
        .when(is(b'b'))
        .optional()
        .followed_by("c")
        .when(is(b'c'));
    assert_eq!(sorted(names(&p, &ev("a b1 c"))), ["a b1 c", "a c"]);
    // `until`: the loop stops at x; b3 cannot join b1 b2.
    let p = Pattern::begin("a")
        .when(is(b'a'))
        .followed_by("b")
        .when(is(b'b'))
        .one_or_more()
        .until(is(b'x'))
        .followed_by("c")
        .when(is(b'c'));
    assert_eq!(
        sorted(names(&p, &input)),
        ["a b1 b2 c", "a b1 c"].map(String::from).to_vec()
    );
}

/// Flink's `IterativeCondition`: a rising run of prices after a start.
#[test]
fn an_iterative_condition_sees_what_the_partial_match_took() {
    #[derive(Clone)]
    struct Tick(u32);
    let p = Pattern::<Tick>::begin("start")
        .followed_by("rise")
        .when_with(|t, so_far| so_far.last().is_some_and(|l| t.0 > l.0))
        .times(2)
        .consecutive();
    let input = [Tick(5), Tick(6), Tick(4), Tick(7), Tick(8)];
    let mut m = Matcher::default();
    let mut got = Vec::new();
    for (i, e) in input.iter().enumerate() {
        for x in m.step(&p, e, i as u64).matches {
            got.push(x.events.iter().map(|t| t.event.0).collect::<Vec<_>>());
        }
    }
    // 5 6 then 4 breaks the rise; 6 7 8 (relaxed start → rise: 6 skips
    // 4, which is not above it) and 4 7 8 rise, in the order of their
    // first events.
    assert_eq!(got, [vec![6, 7, 8], vec![4, 7, 8]]);
}

#[test]
fn negative_stages_forbid_what_they_name() {
    let nfb = Pattern::begin("a")
        .when(is(b'a'))
        .not_followed_by("x")
        .when(is(b'x'))
        .followed_by("b")
        .when(is(b'b'));
    assert!(names(&nfb, &ev("a1 x b1")).is_empty());
    assert_eq!(names(&nfb, &ev("a1 c b1 x")), ["a1 b1"]);
    // A second a after the x starts a match of its own.
    assert_eq!(names(&nfb, &ev("a1 x a2 b1")), ["a2 b1"]);
    let nn = Pattern::begin("a")
        .when(is(b'a'))
        .not_next("x")
        .when(is(b'x'))
        .followed_by("b")
        .when(is(b'b'));
    assert!(names(&nn, &ev("a1 x b1")).is_empty());
    assert_eq!(names(&nn, &ev("a1 c x b1")), ["a1 b1"]);
}

#[test]
fn skip_strategies_discard_what_they_name() {
    let input = ev("a1 a2 b1 b2");
    let p = |s| {
        Pattern::begin("a")
            .when(is(b'a'))
            .followed_by_any("b")
            .when(is(b'b'))
            .skip(s)
    };
    assert_eq!(
        names(&p(AfterMatchSkip::NoSkip), &input),
        ["a1 b1", "a2 b1", "a1 b2", "a2 b2"]
    );
    assert_eq!(names(&p(AfterMatchSkip::PastLastEvent), &input), ["a1 b1"]);
    assert_eq!(
        names(&p(AfterMatchSkip::ToNext), &input),
        ["a1 b1", "a2 b1"]
    );
}

#[test]
fn within_times_out_the_partial_matches_that_cannot_complete() {
    let p = Pattern::begin("a")
        .when(is(b'a'))
        .followed_by("b")
        .when(is(b'b'))
        .within(Duration::from_nanos(10));
    let e = ev("a1 a2 b1");
    let (matches, timed_out) = run(
        &p,
        &[(e[0].clone(), 0), (e[1].clone(), 5), (e[2].clone(), 12)],
    );
    // a1 (at 0) is 12 before b1: timed out; a2 (at 5) is 7 before: a match.
    assert_eq!(matches, [vec![(1, 0), (2, 1)]]);
    assert_eq!(timed_out, [vec![0]]);
    let mut m = Matcher::default();
    m.step(&p, &e[0], 0);
    assert_eq!(m.next_timeout(&p), Some(10));
    assert!(m.advance(&p, 9).is_empty());
    assert_eq!(
        m.advance(&p, 10).len(),
        1,
        "timed out once, though waiting as one branch"
    );
    assert!(m.is_empty());
}

#[test]
fn patterns_that_cannot_be_matched_are_refused_by_name() {
    let bad = [
        Pattern::<Ev>::begin("a").followed_by("a"),
        Pattern::begin("a").optional(),
        Pattern::begin("a").followed_by("b").until(is(b'x')),
        Pattern::begin("a").followed_by("b").consecutive(),
        Pattern::begin("a").followed_by("b").times_range(3, 2),
        Pattern::begin(""),
        Pattern::begin("a").not_followed_by("x"),
        Pattern::begin("a")
            .not_next("x")
            .one_or_more()
            .followed_by("b"),
        Pattern::begin("a")
            .followed_by("o")
            .optional()
            .not_next("x")
            .followed_by("b"),
        Pattern::begin("a")
            .not_next("x")
            .followed_by("b")
            .optional(),
        Pattern::begin("a")
            .not_next("x")
            .not_followed_by("y")
            .followed_by("b"),
    ];
    for p in bad {
        assert!(p.validate().is_err(), "{p:?}");
    }
}

// ------------------------------------------------------ the brute force

/// A generated stage: which kinds it takes, its quantity, contiguities,
/// and the kind that stops its loop.
#[derive(Clone, Debug)]
struct StageSpec {
    /// A negative stage (then no quantity, contiguity or loop).
    neg: Option<Negation>,
    kinds: Vec<u8>,
    /// An iterative condition too: the event's kind at least the kind of
    /// the match's first event (`when_with`).
    above_first: bool,
    min: u32,
    max: Option<u32>,
    entry: Contiguity,
    inner: Option<Contiguity>,
    until: Option<u8>,
}

#[derive(Clone, Debug)]
struct Spec {
    stages: Vec<StageSpec>,
    within: Option<u64>,
    skip: AfterMatchSkip,
}

fn contiguity() -> impl Strategy<Value = Contiguity> {
    prop_oneof![
        Just(Contiguity::Strict),
        Just(Contiguity::Relaxed),
        Just(Contiguity::Any)
    ]
}

fn stage(first: bool) -> impl Strategy<Value = StageSpec> {
    (
        prop::collection::vec(0u8..4, 1..4),
        prop_oneof![
            Just((1, Some(1))),
            Just((0, Some(1))),
            (1u32..3).prop_map(|n| (n, Some(n))),
            (1u32..3, 0u32..2).prop_map(|(a, b)| (a, Some(a + b))),
            (0u32..3).prop_map(|n| (n, None)),
        ],
        contiguity(),
        prop::option::of(contiguity()),
        prop::option::of(0u8..4),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            move |(kinds, (min, max), entry, inner, until, above_first)| {
                let looped = max != Some(1);
                let min = if first { min.max(1) } else { min };
                StageSpec {
                    neg: None,
                    kinds,
                    above_first,
                    min,
                    max,
                    entry,
                    inner: inner.filter(|_| looped),
                    until: until.filter(|_| looped),
                }
            },
        )
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        stage(true),
        prop::collection::vec(stage(false), 0..4),
        prop::option::of(1u64..8),
        prop_oneof![
            Just(AfterMatchSkip::NoSkip),
            Just(AfterMatchSkip::PastLastEvent),
            Just(AfterMatchSkip::ToNext)
        ],
        prop::collection::vec(
            prop::option::of(prop_oneof![
                Just(Negation::NotNext),
                Just(Negation::NotFollowedBy)
            ]),
            3,
        ),
    )
        .prop_map(|(first, rest, within, skip, negs)| {
            let mut stages = vec![first];
            stages.extend(rest);
            // Stages turned negative where that is allowed: not first or
            // last, after a required positive one, before a required one.
            for i in 1..stages.len().saturating_sub(1) {
                let Some(n) = negs[i - 1] else { continue };
                if stages[i - 1].neg.is_some() || stages[i - 1].min == 0 {
                    continue;
                }
                let s = &mut stages[i];
                *s = StageSpec {
                    neg: Some(n),
                    above_first: false,
                    min: 1,
                    max: Some(1),
                    inner: None,
                    until: None,
                    ..s.clone()
                };
                stages[i + 1].min = stages[i + 1].min.max(1);
            }
            Spec {
                stages,
                within,
                skip,
            }
        })
}

fn kinds_cond(kinds: Vec<u8>) -> impl Fn(&Ev) -> bool + Send + Sync + 'static {
    move |e: &Ev| kinds.contains(&e.kind)
}

fn pattern(s: &Spec) -> Pattern<Ev> {
    let mut p: Option<Pattern<Ev>> = None;
    for (i, st) in s.stages.iter().enumerate() {
        let name = format!("s{i}");
        let mut q = match (p.take(), st.neg) {
            (None, _) => Pattern::begin(&name),
            (Some(p), Some(Negation::NotNext)) => p.not_next(&name),
            (Some(p), Some(Negation::NotFollowedBy)) => p.not_followed_by(&name),
            (Some(p), None) => match st.entry {
                Contiguity::Strict => p.next(&name),
                Contiguity::Relaxed => p.followed_by(&name),
                Contiguity::Any => p.followed_by_any(&name),
            },
        }
        .when(kinds_cond(st.kinds.clone()));
        if st.above_first {
            q = q.when_with(|e: &Ev, so_far| so_far.first("s0").is_none_or(|f| e.kind >= f.kind));
        }
        if st.neg.is_some() {
            p = Some(q);
            continue;
        }
        q = match st.max {
            Some(1) => q,
            Some(m) => q.times_range(st.min.max(1), m),
            None => q.times_or_more(st.min.max(1)),
        };
        if st.min == 0 {
            q = q.optional();
        }
        q = match st.inner {
            Some(Contiguity::Strict) => q.consecutive(),
            Some(Contiguity::Any) => q.allow_combinations(),
            _ => q,
        };
        if let Some(u) = st.until {
            q = q.until(is(u));
        }
        p = Some(q);
    }
    let mut p = p.unwrap().skip(s.skip);
    if let Some(w) = s.within {
        p = p.within(Duration::from_nanos(w));
    }
    p
}

/// Every match of `s` over `events`, emitted as the docs above say.
fn brute(s: &Spec, events: &[(u8, u64)]) -> Vec<Ids> {
    let n = events.len();
    // Whether event `i` satisfies stage `st` after the picks `m`.
    let accepts = |st: usize, i: usize, m: &[(usize, usize)]| {
        let x = &s.stages[st];
        x.kinds.contains(&events[i].0)
            && (!x.above_first || m.first().is_none_or(|&(f, _)| events[i].0 >= events[f].0))
    };
    let stops = |st: usize, i: usize| s.stages[st].until == Some(events[i].0);
    let inner = |st: usize| s.stages[st].inner.unwrap_or(Contiguity::Relaxed);
    let negative = |st: usize| s.stages[st].neg.is_some();
    let mut found: Vec<Vec<(usize, usize)>> = Vec::new();
    // Depth first over (event, stage) sequences.
    let mut stack: Vec<Vec<(usize, usize)>> = (0..n)
        .filter(|&i| accepts(0, i, &[]))
        .map(|i| vec![(i, 0)])
        .collect();
    while let Some(m) = stack.pop() {
        let &(il, sl) = m.last().unwrap();
        let count = |st: usize| m.iter().filter(|x| x.1 == st).count() as u32;
        let room = |st: usize, c: u32| s.stages[st].max.is_none_or(|x| c < x);
        let full = |st: usize| negative(st) || count(st) >= s.stages[st].min;
        if (0..=sl).all(full)
            && s.stages[sl + 1..]
                .iter()
                .all(|x| x.min == 0 && x.neg.is_none())
        {
            found.push(m.clone());
        }
        for i in il + 1..n {
            if s.within
                .is_some_and(|w| events[i].1 - events[m[0].0].1 >= w)
            {
                break;
            }
            for st in sl..s.stages.len() {
                if negative(st) || (st == sl && !room(st, count(st))) {
                    continue;
                }
                if st > sl
                    && !(full(sl) && (sl + 1..st).all(|k| negative(k) || s.stages[k].min == 0))
                {
                    continue;
                }
                // The negative stages this step crosses.
                let forbids = |k: usize, z: usize| s.stages[k].kinds.contains(&events[z].0);
                let crossed_ok = (sl + 1..st).all(|k| match s.stages[k].neg {
                    None => true,
                    Some(Negation::NotNext) => !(il + 1 < n && forbids(k, il + 1)),
                    Some(Negation::NotFollowedBy) => !(il + 1..i).any(|z| forbids(k, z)),
                });
                if !crossed_ok {
                    continue;
                }
                if !accepts(st, i, &m) {
                    continue;
                }
                if st == sl && (il + 1..=i).any(|z| stops(st, z)) {
                    continue;
                }
                let c = if st == sl {
                    inner(st)
                } else {
                    s.stages[st].entry
                };
                let ok = match c {
                    Contiguity::Strict => i == il + 1,
                    Contiguity::Relaxed => !(il + 1..i).any(|z| accepts(st, z, &m)),
                    Contiguity::Any => true,
                };
                if ok {
                    let mut m2 = m.clone();
                    m2.push((i, st));
                    stack.push(m2);
                }
            }
        }
    }
    let key = |m: &Vec<(usize, usize)>| {
        (
            m.last().unwrap().0,
            m.iter().map(|x| x.0).collect::<Vec<_>>(),
            m.iter().map(|x| x.1).collect::<Vec<_>>(),
        )
    };
    found.sort_by_key(key);
    let mut out = Vec::new();
    let mut ends: Vec<usize> = Vec::new();
    let mut starts: Vec<usize> = Vec::new();
    for m in found {
        let (start, end) = (m[0].0, m.last().unwrap().0);
        let emit = match s.skip {
            AfterMatchSkip::NoSkip => true,
            AfterMatchSkip::PastLastEvent => ends.iter().all(|&e| start > e),
            AfterMatchSkip::ToNext => !starts.contains(&start),
        };
        if emit {
            ends.push(end);
            starts.push(start);
            out.push(m.iter().map(|&(i, st)| (i as u64, st as u16)).collect());
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_matcher_emits_what_the_brute_force_finds(
        s in spec(),
        input in prop::collection::vec((0u8..4, 0u64..3), 2..14),
    ) {
        // Event times from the gaps: never decreasing.
        let mut t = 0;
        let events: Vec<(u8, u64)> = input.iter().map(|&(k, gap)| { t += gap; (k, t) }).collect();
        let p = pattern(&s);
        let fed: Vec<(Ev, u64)> = events.iter().map(|&(kind, t)| (Ev { kind, name: "" }, t)).collect();
        let (got, _) = run(&p, &fed);
        let want = brute(&s, &events);
        prop_assert_eq!(got, want, "{:?}", p);
    }
}

/// The generated cases exercise the matcher: most find matches, many
/// several, and every skip strategy and contiguity is drawn.
#[test]
fn the_generated_cases_are_not_trivial() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut with, mut several, mut total, mut negated) = (0, 0, 0, 0);
    let cases = 2000;
    for _ in 0..cases {
        let s = spec().new_tree(&mut runner).unwrap().current();
        let input = prop::collection::vec((0u8..4, 0u64..3), 2..14)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let mut t = 0;
        let events: Vec<(u8, u64)> = input
            .iter()
            .map(|&(k, gap)| {
                t += gap;
                (k, t)
            })
            .collect();
        let n = brute(&s, &events).len();
        total += n;
        with += usize::from(n > 0);
        several += usize::from(n > 2);
        negated += usize::from(n > 0 && s.stages.iter().any(|x| x.neg.is_some()));
    }
    assert!(with > cases * 2 / 5, "{with} of {cases} cases match");
    assert!(
        several > cases / 7,
        "{several} of {cases} cases match thrice"
    );
    assert!(total > cases, "{total} matches");
    assert!(
        negated > cases / 20,
        "{negated} cases with a negative stage match"
    );
}
