//! Windows on keyed streams: [`KeyedStream::window`] and what it gives.
//! The semantics are in [`crate::time::window`].

use super::out_kits;
use super::{add_node_with, BoxCollector, Data, KeyedStream, Stream};
use crate::error::BuildError;
use crate::operator::Output;
use crate::runtime::chain::{SideCodec, StateCodec, WindowOp, WindowSpec};
use crate::runtime::graph::{self, downcast, AnyBox, BuildCx, NodeKind};
use crate::state::{KeyedState, StateSnapshot};
use crate::time::window::{
    Aggregating, EarlyFiring, Evictor, KeyWindows, Processing, Trigger, WinOut, Window,
    WindowAggregate, WindowAssigner, WindowFn, WindowSide, WindowTrigger, Windows,
};
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// A keyed stream cut into windows ([`KeyedStream::window`]), ready to be
/// aggregated.
pub struct WindowedStream<K, T> {
    pub(super) keyed: KeyedStream<K, T>,
    pub(super) windows: Windows,
    pub(super) lateness: u64,
    /// A window over the whole stream ([`Stream::window_all`]): one
    /// instance.
    pub(super) all: bool,
    /// Firings before a window's end ([`WindowedStream::early_firing`]).
    pub(super) early: Option<EarlyFiring>,
    /// Each firing clears the window ([`WindowedStream::purging`]).
    pub(super) purging: bool,
    /// An evictor ([`WindowedStream::evict_keep_last`],
    /// [`WindowedStream::evictor`]).
    pub(super) evictor: Option<Evictor<T>>,
    /// A custom early-firing rule ([`WindowedStream::trigger`]).
    pub(super) trigger: Option<Arc<dyn WindowTrigger<T>>>,
    /// Further edges into the window operator (a windowed join's second
    /// input).
    pub(super) more: Vec<Stream<T>>,
}

/// What a window operator or an interval join gives: its results, and the
/// records that came too late (its *late side output*; its records are
/// also counted in the report, as the `emitted` of operator `NAME.late`;
/// its `records` are every output of the operator it splits).
pub struct WindowOutput<O, T> {
    results: Stream<O>,
    late: Stream<T>,
}

impl<O: Data, T: Data> WindowOutput<O, T> {
    /// The windows' results (operator `NAME.results`, chained after the
    /// window operator).
    pub fn results(&self) -> Stream<O> {
        self.results.clone()
    }

    /// The records too late for any window, in their own envelopes.
    pub fn late(&self) -> Stream<T> {
        self.late.clone()
    }
}

impl<K, T> KeyedStream<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Data,
{
    /// Cuts the keyed stream into `windows`: tumbling, sliding, session or
    /// count windows (see [`crate::time::window`]). The stream's sources
    /// need watermarks ([`Stream::watermarks`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tandem::time::{Watermarks, Windows};
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("clicks-per-second");
    /// // (user, event time in ns)
    /// let clicks = (0..1000u64).map(|n| ((n % 3) as u32, n * 10_000_000));
    /// let counts = job
    ///     .source("clicks", move |_| IterSource(clicks.clone()))
    ///     .watermarks(Watermarks::bounded(Duration::from_millis(100)))
    ///     .key_by(|user: &u32| *user)
    ///     .window(Windows::tumbling(Duration::from_secs(1)))
    ///     .process("per-second", |user: &u32, w, clicks: &[u32], out| {
    ///         out((*user, w.start, clicks.len() as u64))
    ///     });
    /// counts.results().for_each("print", |r| assert!(r.value.2 > 0));
    /// job.build()?.run(&RuntimeConfig::default().cores(1))?;
    /// # Ok::<(), tandem::JobError>(())
    /// ```
    pub fn window(&self, windows: Windows) -> WindowedStream<K, T> {
        if let Some(reason) = windows.invalid() {
            self.stream
                .job
                .borrow_mut()
                .errors
                .push(BuildError::Window {
                    name: "<window>".into(),
                    reason,
                });
        }
        WindowedStream {
            keyed: KeyedStream {
                stream: self.stream.clone(),
                key: Arc::clone(&self.key),
            },
            windows,
            lateness: 0,
            early: None,
            purging: false,
            evictor: None,
            trigger: None,
            all: false,
            more: Vec::new(),
        }
    }
}

impl<T: Data> Stream<T> {
    /// Cuts the whole stream (not keyed) into `windows`, as Flink's
    /// `windowAll`: every record goes to one instance of the window
    /// operator, whose functions see the key `()`. The stream's sources
    /// need watermarks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tandem::time::{Watermarks, Windows};
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("clicks-per-second");
    /// let clicks = (0..1000u64).map(|n| ((n % 3) as u32, n * 10_000_000));
    /// let totals = job
    ///     .source("clicks", move |_| IterSource(clicks.clone()))
    ///     .watermarks(Watermarks::bounded(Duration::from_millis(100)))
    ///     .window_all(Windows::tumbling(Duration::from_secs(1)))
    ///     .process("per-second", |_: &(), w, clicks: &[u32], out| {
    ///         out((w.start, clicks.len() as u64))
    ///     });
    /// totals.results().for_each("print", |r| assert_eq!(r.value.1, 100));
    /// job.build()?.run(&RuntimeConfig::default().cores(1))?;
    /// # Ok::<(), tandem::JobError>(())
    /// ```
    pub fn window_all(&self, windows: Windows) -> WindowedStream<(), T> {
        let mut w = self.key_by(|_: &T| ()).window(windows);
        w.all = true;
        w
    }
}

impl<K, T> WindowedStream<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Data,
    WindowSide<T>: StateSnapshot,
{
    /// The window operator gets an active standby, marked where it is
    /// built (see [`KeyedStream::standby`]); the same as marking the stream
    /// before its `key_by`.
    pub fn standby(mut self) -> Self
    where
        T: crate::standby::Codec + Sync,
    {
        self.keyed = self.keyed.standby();
        self
    }

    /// Records up to `lateness` behind the watermark past their window's
    /// end are still added to it, and the window fires again (default:
    /// none). Count windows have no lateness.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.lateness = u64::try_from(lateness.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Fires each time window before its end too ([`EarlyFiring`]: every
    /// `n` records, or every interval of event time after its start), as
    /// Flink's early-firing triggers; the window still fires at its end.
    /// Tumbling and sliding windows only (the build refuses it on session
    /// and count windows).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tandem::time::{window::EarlyFiring, Watermarks, Windows};
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("running-counts");
    /// // One key, a record every millisecond for a second.
    /// let recs = (0..1000u64).map(|n| (0u32, n * 1_000_000));
    /// let counts = job
    ///     .source("recs", move |_| IterSource(recs.clone()))
    ///     .watermarks(Watermarks::bounded(Duration::ZERO))
    ///     .key_by(|k: &u32| *k)
    ///     .window(Windows::tumbling(Duration::from_secs(1)))
    ///     .early_firing(EarlyFiring::Count(250))
    ///     .process("count", |_k: &u32, _w, recs: &[u32], out| out(recs.len() as u64));
    /// let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    /// let s = seen.clone();
    /// counts.results().for_each("out", move |r| s.lock().unwrap().push(r.value));
    /// job.build()?.run(&RuntimeConfig::default().cores(1))?;
    /// // Early at 250, 500, 750 and 1000 records, then at the end.
    /// assert_eq!(*seen.lock().unwrap(), [250, 500, 750, 1000, 1000]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn early_firing(mut self, early: EarlyFiring) -> Self {
        let bad = match early {
            EarlyFiring::Count(0) => Some("early firing every 0 records"),
            EarlyFiring::Every(d) if d.is_zero() => Some("early firing every 0 s of event time"),
            _ if self.windows.merging() || self.windows.trigger() != Trigger::EventTime => {
                Some("early firing applies to tumbling and sliding windows")
            }
            _ => None,
        };
        self.refuse(bad);
        self.early = Some(early);
        self
    }

    /// A custom early-firing rule (Flink's `Trigger::onElement`): asked
    /// each time a record joins a window whether it fires now, and whether
    /// it clears (see [`WindowTrigger`]). It depends on the records alone,
    /// so the firings are the same in every run. The window still fires
    /// when the watermark passes its end (saying nothing if a trigger
    /// purged it and no record came since). Tumbling and sliding windows.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tandem::time::{TriggerAction, Watermarks, Windows};
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("alarms");
    /// // Readings (sensor, value); a value over 90 fires its window at once.
    /// let counts = job
    ///     .source("readings", |_| IterSource((0..100u64).map(|i| ((i % 2, i), i * 1_000_000))))
    ///     .watermarks(Watermarks::bounded(Duration::ZERO))
    ///     .key_by(|r: &(u64, u64)| r.0)
    ///     .window(Windows::tumbling(Duration::from_secs(1)))
    ///     .trigger(|r: &(u64, u64), _t, _w, _since| {
    ///         if r.1 > 90 { TriggerAction::FireAndPurge } else { TriggerAction::Continue }
    ///     })
    ///     .process("count", |_k: &u64, _w, recs: &[(u64, u64)], out| out(recs.len() as u64));
    /// let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    /// let s = seen.clone();
    /// counts.results().for_each("out", move |r| s.lock().unwrap().push(r.value));
    /// job.build()?.run(&RuntimeConfig::default().cores(1))?;
    /// let mut seen = seen.lock().unwrap().clone();
    /// seen.sort();
    /// // Sensor 0: its 47 records up to 92, then 94, 96, 98 one each;
    /// // sensor 1: 46 up to 91, then 93 … 99 one each; nothing at the end.
    /// assert_eq!(seen, [1, 1, 1, 1, 1, 1, 1, 46, 47]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn trigger(mut self, trigger: impl WindowTrigger<T>) -> Self {
        let bad = (self.windows.merging() || self.windows.trigger() != Trigger::EventTime)
            .then_some("a custom trigger applies to tumbling and sliding windows");
        self.refuse(bad);
        self.trigger = Some(Arc::new(trigger));
        self
    }

    /// Each firing clears the window (Flink's `PurgingTrigger`): a result
    /// covers the records since the window last fired, and a window with
    /// none since fires no more. With [`early_firing`](Self::early_firing),
    /// the early results add up to the whole window's instead of
    /// repeating it. Tumbling and sliding windows only.
    pub fn purging(mut self) -> Self {
        let bad = (self.windows.merging() || self.windows.trigger() != Trigger::EventTime)
            .then_some("purging applies to tumbling and sliding windows");
        self.refuse(bad);
        self.purging = true;
        self
    }

    /// An evictor (Flink's `CountEvictor`): each window keeps only its
    /// last `n` records — in the order they are taken, event time then
    /// tuple ID — and its function sees those. Records beyond are dropped
    /// as they come, so a window's state stays at `n` records. For
    /// [`process`](Self::process) (an aggregate keeps no records to evict:
    /// refused at build).
    pub fn evict_keep_last(mut self, n: u64) -> Self {
        self.refuse((n == 0).then_some("an evictor keeping 0 records"));
        self.evictor = Some(Evictor::KeepLast(n));
        self
    }

    /// A custom evictor (Flink's `Evictor`, e.g. a `TimeEvictor` over a
    /// time the records carry): each time a record joins a window, `f`
    /// gets the window and its records — in the order they were taken,
    /// event time then tuple ID, the new one last — and removes what the
    /// window should no longer keep. The window's function sees what is
    /// left. For [`process`](Self::process) (refused on an aggregate).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tandem::time::{Watermarks, Windows};
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("recent");
    /// // (key, time in ms); each window keeps the records of its last 10 ms.
    /// let kept = job
    ///     .source("s", |_| IterSource((0..100u64).map(|i| ((0u8, i), i * 1_000_000))))
    ///     .watermarks(Watermarks::bounded(Duration::ZERO))
    ///     .key_by(|r: &(u8, u64)| r.0)
    ///     .window(Windows::tumbling(Duration::from_secs(1)))
    ///     .evictor(|_w, recs: &mut Vec<(u8, u64)>| {
    ///         let newest = recs.iter().map(|r| r.1).max().unwrap_or(0);
    ///         recs.retain(|r| r.1 + 10 > newest);
    ///     })
    ///     .process("kept", |_k: &u8, _w, recs: &[(u8, u64)], out| out(recs.len()));
    /// let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    /// let s = seen.clone();
    /// kept.results().for_each("out", move |r| s.lock().unwrap().push(r.value));
    /// job.build()?.run(&RuntimeConfig::default().cores(1))?;
    /// assert_eq!(*seen.lock().unwrap(), [10]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn evictor<F>(mut self, f: F) -> Self
    where
        F: Fn(Window, &mut Vec<T>) + Send + Sync + 'static,
    {
        self.evictor = Some(Evictor::With(Arc::new(f)));
        self
    }

    fn refuse(&self, reason: Option<&str>) {
        if let Some(reason) = reason {
            self.keyed
                .stream
                .job
                .borrow_mut()
                .errors
                .push(BuildError::Window {
                    name: "<window>".into(),
                    reason: reason.into(),
                });
        }
    }

    /// Incremental aggregation: one accumulator per key and window.
    pub fn aggregate<O, G>(&self, name: &str, agg: G) -> WindowOutput<O, T>
    where
        O: Data,
        G: WindowAggregate<K, T, O>,
        KeyedState<K, KeyWindows<G::Acc>>: StateSnapshot,
    {
        self.refuse(self.evictor.is_some().then_some(
            "an evictor needs a function over the window's records (process), not an aggregate",
        ));
        let agg = Arc::new(agg);
        self.build(name, move || Aggregating(Arc::clone(&agg)))
    }

    /// Reduces each window's records with `f`; the result is the reduced
    /// record.
    pub fn reduce<F>(&self, name: &str, f: F) -> WindowOutput<T, T>
    where
        F: Fn(&T, &T) -> T + Send + Sync + 'static,
        KeyedState<K, KeyWindows<Option<T>>>: StateSnapshot,
    {
        self.aggregate(name, Reducing(f))
    }

    /// A function over all of a window's records when it fires (taken in
    /// event-time order, then by tuple ID), emitting any number of results
    /// through `out`. Keeps every record of an open window.
    pub fn process<O, F>(&self, name: &str, f: F) -> WindowOutput<O, T>
    where
        O: Data,
        F: Fn(&K, Window, &[T], &mut dyn FnMut(O)) + Send + Sync + 'static,
        KeyedState<K, KeyWindows<Vec<T>>>: StateSnapshot,
    {
        let f = Arc::new(f);
        self.build(name, move || Processing(Arc::clone(&f)))
    }

    pub(super) fn build<O, F, M>(&self, name: &str, make: M) -> WindowOutput<O, T>
    where
        O: Data,
        F: WindowFn<K, T, O>,
        M: Fn() -> F + Send + Sync + 'static,
        KeyedState<K, KeyWindows<F::Acc>>: StateSnapshot,
    {
        let key = Arc::clone(&self.keyed.key);
        let (windows, lateness) = (self.windows, self.lateness);
        let (early, purging, evictor) = (self.early, self.purging, self.evictor.clone());
        let trigger = self.trigger.clone();
        let lateness = crate::time::window::WindowAssigner::lateness(&windows, lateness);
        let build: graph::UnaryBuild = Arc::new(move |cx: BuildCx, down: AnyBox| {
            let down = downcast::<BoxCollector<WinOut<O, T>>>(down, "window output");
            let op = WindowOp::new(
                make(),
                WindowSpec {
                    windows,
                    lateness,
                    early,
                    purging,
                    evictor: evictor.clone(),
                    trigger: trigger.clone(),
                },
                Arc::clone(&key),
                StateCodec::of(),
                SideCodec::of(),
                down,
                cx,
            );
            Box::new(Box::new(op) as BoxCollector<T>) as AnyBox
        });
        let stream = &self.keyed.stream;
        let mut inputs = vec![stream.input()];
        inputs.extend(self.more.iter().map(|s| s.input()));
        let node = add_node_with(
            &stream.job,
            name,
            NodeKind::Unary(build),
            Some(out_kits::<WinOut<O, T>>()),
            &inputs,
            stream.standby.clone(),
        );
        stream.job.borrow_mut().event_time.push(node);
        let mut out: Stream<WinOut<O, T>> = Stream::new(Rc::clone(&stream.job), node);
        if self.all {
            out = out.parallelism(1);
        }
        split_late(&out, name, self.all)
    }
}

/// An operator's results and late records, split from its one output
/// into two streams: `NAME.results` and `NAME.late`, chained after it (one
/// instance each when `single`).
pub(super) fn split_late<O: Data, T: Data>(
    out: &Stream<WinOut<O, T>>,
    name: &str,
    single: bool,
) -> WindowOutput<O, T> {
    let results = out.flat_map(
        &format!("{name}.results"),
        |w: WinOut<O, T>, o: &mut Output<'_, O>| {
            if let WinOut::Result(v) = w {
                o.emit(v)
            }
        },
    );
    let results = if single {
        results.parallelism(1)
    } else {
        results
    };
    let late = out.flat_map(
        &format!("{name}.late"),
        |w: WinOut<O, T>, o: &mut Output<'_, T>| {
            if let WinOut::Late(v) = w {
                o.emit(v)
            }
        },
    );
    let late = if single { late.parallelism(1) } else { late };
    WindowOutput { results, late }
}

/// `reduce` as a window aggregate.
struct Reducing<F>(F);

impl<K, T, F> WindowAggregate<K, T, T> for Reducing<F>
where
    T: Clone + 'static,
    F: Fn(&T, &T) -> T + Send + Sync + 'static,
{
    type Acc = Option<T>;
    fn add(&self, acc: &mut Option<T>, value: &T) {
        *acc = Some(match acc.take() {
            Some(a) => (self.0)(&a, value),
            None => value.clone(),
        });
    }
    fn merge(&self, acc: &mut Option<T>, other: Option<T>) {
        if let Some(b) = other {
            <Self as WindowAggregate<K, T, T>>::add(self, acc, &b);
        }
    }
    fn result(&self, _key: &K, _window: Window, acc: &Option<T>) -> T {
        acc.clone()
            .expect("a window fires only with at least one record")
    }
}
