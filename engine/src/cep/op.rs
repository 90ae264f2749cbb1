//! CEP on a keyed stream: the matcher as a keyed process function in
//! event time ([`crate::time::TimedProcess`]), so the engine's event-time
//! core gives it each key's events in event-time order (ties by tuple
//! ID: the same order on every run, after any restart or takeover), keeps
//! its partial matches in keyed state (checkpointed, restored, followed by
//! a standby) and fires its timeouts at the watermark.

use super::nfa::{Match, Matcher};
use super::Pattern;
use crate::job::{Data, KeyedStream, Stream};
use crate::operator::Output;
use crate::record::Record;
use crate::state::{KeyedState, StateSnapshot};
use crate::time::process::{Timed, TimedProcess, TimerContext};
use crate::time::window::WindowSide;
use std::hash::Hash;
use std::sync::Arc;

/// What the matcher emits, split into the three streams of a
/// [`CepOutput`].
#[derive(Clone, Debug)]
pub enum CepOut<T> {
    /// A complete match.
    Match(Match<T>),
    /// A partial match that timed out.
    TimedOut(Match<T>),
    /// An event that came after the watermark had passed it.
    Late(T),
}

/// What [`KeyedStream::cep`] gives: the matches, the partial matches that
/// timed out (Flink's timed-out side output), and the events that came
/// too late (the late side output). Each is counted in the report as an
/// operator of its own: `NAME.matches`, `NAME.timed-out`, `NAME.late`.
pub struct CepOutput<T> {
    matches: Stream<Match<T>>,
    timed_out: Stream<Match<T>>,
    late: Stream<T>,
}

impl<T: Data> CepOutput<T> {
    /// Every complete match, emitted at its last event.
    pub fn matches(&self) -> Stream<Match<T>> {
        self.matches.clone()
    }

    /// Every partial match that could no longer complete within the
    /// pattern's `within`, emitted when the watermark passed its deadline
    /// (or an event after it came).
    pub fn timed_out(&self) -> Stream<Match<T>> {
        self.timed_out.clone()
    }

    /// The events that came after the watermark had passed them: not
    /// matched (their place in the key's order is gone).
    pub fn late(&self) -> Stream<T> {
        self.late.clone()
    }
}

/// The matcher of one operator instance.
struct Cep<T> {
    pattern: Arc<Pattern<T>>,
}

impl<T: Clone> Cep<T> {
    /// The key's timer: at its oldest partial match's deadline.
    fn rearm(&self, m: &Matcher<T>, cx: &mut TimerContext<'_>) {
        let next = m.next_timeout(&self.pattern);
        for &t in cx.timers().to_vec().iter() {
            if Some(t) != next {
                cx.delete(t);
            }
        }
        if let Some(t) = next {
            cx.register(t);
        }
    }
}

impl<K, T: Clone + 'static> TimedProcess<K, T, CepOut<T>> for Cep<T> {
    type State = Matcher<T>;

    fn process(
        &mut self,
        _key: &K,
        m: &mut Matcher<T>,
        rec: Record<T>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, CepOut<T>>,
    ) {
        if rec.event_time < cx.now() {
            out.emit(CepOut::Late(rec.value));
            return;
        }
        let step = m.step(&self.pattern, &rec.value, rec.event_time);
        for t in step.timed_out {
            out.emit(CepOut::TimedOut(t));
        }
        for x in step.matches {
            out.emit(CepOut::Match(x));
        }
        self.rearm(m, cx);
    }

    fn on_timer(
        &mut self,
        _key: &K,
        m: &mut Matcher<T>,
        at: u64,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, CepOut<T>>,
    ) {
        for t in m.advance(&self.pattern, at) {
            out.emit(CepOut::TimedOut(t));
        }
        self.rearm(m, cx);
    }

    fn is_empty(&self, m: &Matcher<T>) -> bool {
        m.is_empty()
    }
}

impl<K, T> KeyedStream<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Data,
{
    /// Complex event processing (Flink CEP): matches `pattern` on each
    /// key's events in event-time order, as operator `name`. The stream's
    /// sources need watermarks. A pattern that cannot be matched
    /// ([`Pattern::validate`]) is refused when the job is built.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tandem::cep::Pattern;
    /// use tandem::time::Watermarks;
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// // Per sensor: a reading above 50, then (not necessarily next) one
    /// // above 80, within 10 ms of event time.
    /// let job = JobBuilder::new("alerts");
    /// let readings = (0..1_000u64).map(|i| ((i % 4, (i * 37) % 100), i * 1_000));
    /// let pattern = Pattern::begin("warm")
    ///     .when(|r: &(u64, u64)| r.1 > 50)
    ///     .followed_by("hot")
    ///     .when(|r: &(u64, u64)| r.1 > 80)
    ///     .within(Duration::from_millis(10));
    /// let found = job
    ///     .source("readings", move |_| IterSource(readings.clone()))
    ///     .watermarks(Watermarks::bounded(Duration::ZERO))
    ///     .key_by(|r: &(u64, u64)| r.0)
    ///     .cep("cep", pattern);
    /// found.matches().for_each("alert", |m| {
    ///     assert!(m.value.first("hot").unwrap().1 > 80);
    /// });
    /// let report = job.build().unwrap().run(&RuntimeConfig::default().cores(1)).unwrap();
    /// assert!(report.operator("cep.matches").unwrap().records > 0);
    /// ```
    pub fn cep(&self, name: &str, pattern: Pattern<T>) -> CepOutput<T>
    where
        Matcher<T>: Default + Clone,
        KeyedState<K, Timed<Matcher<T>>>: StateSnapshot,
        WindowSide<T>: StateSnapshot,
    {
        if let Err(e) = pattern.validate() {
            self.refuse(crate::error::BuildError::Pattern {
                name: name.to_string(),
                reason: e.to_string(),
            });
        }
        let pattern = Arc::new(pattern);
        let out: Stream<CepOut<T>> = self.process_timed(name, move |_| Cep {
            pattern: Arc::clone(&pattern),
        });
        let matches = out.flat_map(
            &format!("{name}.matches"),
            |o: CepOut<T>, x: &mut Output<'_, Match<T>>| {
                if let CepOut::Match(m) = o {
                    x.emit(m)
                }
            },
        );
        let timed_out = out.flat_map(
            &format!("{name}.timed-out"),
            |o: CepOut<T>, x: &mut Output<'_, Match<T>>| {
                if let CepOut::TimedOut(m) = o {
                    x.emit(m)
                }
            },
        );
        let late = out.flat_map(
            &format!("{name}.late"),
            |o: CepOut<T>, x: &mut Output<'_, T>| {
                if let CepOut::Late(e) = o {
                    x.emit(e)
                }
            },
        );
        CepOutput {
            matches,
            timed_out,
            late,
        }
    }
}
