//! A live view of a running job in the browser ([`LiveView`]): one page,
//! embedded in the binary (no network, no CDN), that draws the job graph
//! with each operator's rate, the checkpoints, the standby groups with
//! their lag, every recovery as it happens and the latency over time —
//! polling `api/state` (JSON) twice a second.
//!
//! What the page shows holds across the job's life: before the job
//! attaches it says the job is being prepared (the same fields, empty);
//! a source's count never goes back (a restart replays records the view
//! counted already); each recovery stands at its fault's time, the whole
//! history kept here as the samples bring it (every recovery of an
//! injected fault, the others up to [`KEEP_OTHER_RECOVERIES`], the rest
//! counted); every operator of a backed-up chain is marked as such; once
//! the job ended, its elapsed time is the job's, not the page's.

use super::{http, Endpoint};
use crate::metrics::{LatencyHistogram, RecoveryCause, RecoveryRecord};
use crate::runtime::JobWatch;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The page.
const PAGE: &str = include_str!("view.html");

/// How often the view samples the job.
const STEP: Duration = Duration::from_millis(500);

/// Samples kept: ten minutes.
const KEEP: usize = 1200;

/// Recoveries of no injected fault the view lists (stall verdicts on a
/// busy host can come by the thousand); beyond, they are counted.
const KEEP_OTHER_RECOVERIES: usize = 1000;

/// A checkpoint completed, when the view saw it (seconds since the job
/// started).
#[derive(Clone, Debug, Serialize)]
struct Happened {
    t: f64,
    /// `checkpoint`.
    kind: String,
    what: String,
}

/// Per operator, per instance: (records, busy ns, backpressured ns).
type Counts = Vec<Vec<(u64, u64, u64)>>;

/// What the sampler keeps between samples.
#[derive(Default)]
struct History {
    t: VecDeque<f64>,
    p99_us: VecDeque<Option<f64>>,
    /// Per operator, per instance: records/s over the last step.
    rates: Vec<Vec<f64>>,
    /// Per operator, per instance: the share of the last step its task
    /// was busy, and backpressured.
    busy: Vec<Vec<f64>>,
    pressed: Vec<Vec<f64>>,
    /// The previous sample: its time, counts and latency.
    prev: Option<(f64, Counts, LatencyHistogram)>,
    events: Vec<Happened>,
    /// Every recovery seen so far, by (kind, operator, instance, fault
    /// time), as its newest sample had it (its figures fill in).
    recoveries: std::collections::BTreeMap<(u64, &'static str, String, usize), RecoveryRecord>,
    /// Recoveries of no injected fault dropped past the bound.
    dropped: u64,
    /// Per source operator and instance, the highest count seen.
    produced: HashMap<(usize, usize), u64>,
    checkpoints: u64,
}

impl History {
    /// Takes the recoveries a status lists into the history.
    fn recoveries_from(&mut self, listed: &[RecoveryRecord]) {
        for r in listed {
            let key = (r.fault_at_us, r.kind.name(), r.operator.clone(), r.instance);
            self.recoveries.insert(key, r.clone());
        }
        let others = self
            .recoveries
            .values()
            .filter(|r| r.reason != RecoveryCause::Injected)
            .count();
        if others > KEEP_OTHER_RECOVERIES {
            // The oldest others go: their counts stay in the status.
            let mut excess = others - KEEP_OTHER_RECOVERIES;
            self.dropped += excess as u64;
            self.recoveries.retain(|_, r| {
                if excess > 0 && r.reason != RecoveryCause::Injected {
                    excess -= 1;
                    false
                } else {
                    true
                }
            });
        }
    }
}

struct Inner {
    job: String,
    watch: Mutex<Option<JobWatch>>,
    ended: AtomicBool,
    history: Mutex<History>,
}

impl Inner {
    fn watch(&self) -> Option<JobWatch> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// One step: rates, the latency of the step, and what happened.
    fn sample(&self) {
        let Some(w) = self.watch() else { return };
        let s = w.status();
        let t = match s.ended_after_us {
            // The job's end is its last sample's time: the history stops
            // there, however long the page stays up.
            Some(us) => us as f64 / 1e6,
            None => w.elapsed().as_secs_f64(),
        };
        if s.ended_after_us.is_some()
            && self
                .history
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .t
                .back()
                .is_some_and(|&last| last >= t)
        {
            return;
        }
        let counts: Counts = w
            .progress()
            .operators
            .iter()
            .map(|o| {
                o.instances
                    .iter()
                    .zip(&o.time)
                    .map(|(i, t)| (i.0, t.busy_ns, t.backpressured_ns))
                    .collect()
            })
            .collect();
        let lat = w.latency();
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t0, c0, l0)) = &h.prev {
            let dt = (t - t0).max(1e-6);
            let per = |f: &dyn Fn(&(u64, u64, u64)) -> u64, scale: f64| -> Vec<Vec<f64>> {
                counts
                    .iter()
                    .zip(c0)
                    .map(|(now, before)| {
                        now.iter()
                            .zip(before)
                            .map(|(a, b)| f(a).saturating_sub(f(b)) as f64 / dt / scale)
                            .collect()
                    })
                    .collect()
            };
            let rates = per(&|c| c.0, 1.0);
            let busy = per(&|c| c.1, 1e9);
            let pressed = per(&|c| c.2, 1e9);
            let d = lat.since(l0);
            h.rates = rates;
            h.busy = busy;
            h.pressed = pressed;
            h.t.push_back(t);
            h.p99_us
                .push_back((!d.is_empty()).then(|| d.quantile(0.99) as f64 / 1e3));
            if h.t.len() > KEEP {
                h.t.pop_front();
                h.p99_us.pop_front();
            }
        }
        h.recoveries_from(&s.recent_recoveries);
        if s.checkpoints_completed > h.checkpoints {
            let what = format!(
                "checkpoint {} completed{}",
                s.checkpoints_completed,
                s.checkpoint_last_duration_us
                    .map_or(String::new(), |d| format!(" in {:.1} ms", d as f64 / 1e3))
            );
            h.checkpoints = s.checkpoints_completed;
            h.events.push(Happened {
                t,
                kind: "checkpoint".into(),
                what,
            });
        }
        let keep_from = h.events.len().saturating_sub(KEEP);
        h.events.drain(..keep_from);
        h.prev = Some((t, counts, lat));
    }

    /// `api/state`: the same fields in every phase (`preparing`: the job
    /// has not attached yet; `running`; `ended`).
    fn state(&self) -> serde_json::Value {
        let Some(w) = self.watch() else {
            return serde_json::json!({
                "job": self.job, "phase": "preparing", "attached": false, "ended": false,
                "elapsed_s": 0.0, "operators": [], "edges": [],
                "checkpoints": {"started": 0, "completed": 0, "failed": 0},
                "checkpoint_history": [], "standby": [], "recoveries": [],
                "recovery_history": [], "recoveries_not_listed": 0, "takeovers": 0,
                "restarts": 0, "history": {"t": [], "p99_us": []}, "events": [],
                "p99_recent_us": null,
            });
        };
        let shape = w.shape();
        let progress = w.progress();
        let s = w.status();
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        h.recoveries_from(&s.recent_recoveries);
        let newest = progress.newest_source_watermark();
        let mut alignment_last_us: Option<u64> = None;
        // Every operator of a backed-up chain, not only its head.
        let backed: std::collections::HashSet<&str> = s
            .standby
            .iter()
            .flat_map(|g| g.chain.iter().map(String::as_str))
            .collect();
        let mut produced = std::mem::take(&mut h.produced);
        let operators: Vec<serde_json::Value> = shape
            .operators
            .iter()
            .zip(&progress.operators)
            .enumerate()
            .map(|(i, (o, p))| {
                let inst: Vec<f64> = h.rates.get(i).cloned().unwrap_or_default();
                let most = |v: Option<&Vec<f64>>| {
                    v.map_or(0.0, |v| v.iter().fold(0.0f64, |m, x| m.max(x.min(1.0))))
                };
                // The instance furthest behind the sources' newest watermark
                // (seconds of event time; 0 once its input ended).
                let lag = newest.and_then(|n| {
                    p.time
                        .iter()
                        .filter_map(|t| t.watermark)
                        .map(|w| {
                            if w == u64::MAX {
                                0.0
                            } else {
                                n.saturating_sub(w) as f64 / 1e9
                            }
                        })
                        .reduce(f64::max)
                });
                if !p.source {
                    for t in p.time.iter().filter(|t| t.alignments > 0) {
                        let us = t.alignment_last_ns / 1000;
                        alignment_last_us = Some(alignment_last_us.map_or(us, |m| m.max(us)));
                    }
                }
                // A source's count never goes back: a restart restores its
                // position, and the records it reads again were counted.
                let records = if p.source {
                    p.instances
                        .iter()
                        .enumerate()
                        .map(|(k, &(n, _))| {
                            let high = produced.entry((i, k)).or_insert(0);
                            *high = (*high).max(n);
                            *high
                        })
                        .sum()
                } else {
                    p.records
                };
                serde_json::json!({
                    "name": o.name, "parallelism": o.parallelism, "source": o.source,
                    "sink": o.sink, "standby": o.standby || backed.contains(o.name.as_str()),
                    "standby_marked": o.standby, "records": records,
                    "rate": inst.iter().sum::<f64>(), "instances": inst,
                    "busy": most(h.busy.get(i)), "backpressured": most(h.pressed.get(i)),
                    "watermark_lag_s": lag,
                })
            })
            .collect();
        h.produced = produced;
        let ended = self.ended.load(Ordering::Acquire);
        // The job's own length once it ended; the clock runs on for the
        // page, not for the job.
        let elapsed_s = match s.ended_after_us {
            Some(us) => us as f64 / 1e6,
            None => w.elapsed().as_secs_f64(),
        };
        let listed = h.recoveries.len() as u64;
        let counted: u64 = s.recoveries.iter().map(|r| r.count).sum();
        serde_json::json!({
            "job": self.job,
            "phase": if ended { "ended" } else { "running" },
            "attached": true,
            "ended": ended,
            "elapsed_s": elapsed_s,
            "operators": operators,
            "edges": shape.edges,
            "checkpoints": {
                "started": s.checkpoints_started, "completed": s.checkpoints_completed,
                "failed": s.checkpoints_failed, "last_duration_us": s.checkpoint_last_duration_us,
                "last_bytes": s.checkpoint_last_bytes, "written_bytes": s.checkpoint_bytes,
                "alignment_last_us": alignment_last_us,
            },
            "standby": s.standby.iter().map(|g| serde_json::json!({
                "operator": g.operator, "instance": g.instance, "chain": g.chain,
                "queue_entries": g.queue_entries, "queue_bytes": g.queue_bytes,
                "lag_records": g.lag_records, "lag_us": g.point_age_us,
            })).collect::<Vec<_>>(),
            "recoveries": s.recoveries.iter().map(|r| serde_json::json!({
                "kind": r.kind, "cause": r.cause, "unprovoked": r.unprovoked, "count": r.count,
            })).collect::<Vec<_>>(),
            "checkpoint_history": s.recent_checkpoints.iter().map(|c| serde_json::json!({
                "id": c.id, "bytes": c.bytes, "delta": c.delta, "duration_us": c.duration_us,
            })).collect::<Vec<_>>(),
            "recovery_history": h.recoveries.values().map(|r| serde_json::json!({
                "t": r.fault_at_us as f64 / 1e6, "kind": r.kind.name(), "operator": r.operator,
                "instance": r.instance, "cause": r.reason.name(), "unprovoked": r.unprovoked,
                "injected": r.reason == RecoveryCause::Injected,
                "detect_us": r.detect_us, "first_output_us": r.first_output_us,
                "caught_up_us": r.caught_up_us, "replayed": r.replayed_tuples,
            })).collect::<Vec<_>>(),
            // Counted in `recoveries` but not in the history: past its
            // bound, or too many between two samples.
            "recoveries_not_listed": counted.saturating_sub(listed).max(h.dropped),
            "takeovers": s.takeovers,
            "restarts": s.restarts,
            "history": {"t": h.t, "p99_us": h.p99_us},
            "p99_recent_us": h.p99_us.back().copied().flatten(),
            "events": h.events,
        })
    }
}

/// Serves a page at `http://ADDR/` that shows a running job live, and its
/// data at `http://ADDR/api/state`, until dropped. Like
/// [`super::MetricsServer`] it may start before the job
/// ([`LiveView::start`], then [`LiveView::attach`]) and stay after it
/// ([`LiveView::ended`] marks the job over; the page keeps its last
/// figures).
///
/// ```no_run
/// use tandem::{IterSource, JobBuilder, RuntimeConfig};
///
/// let job = JobBuilder::new("count");
/// job.source("numbers", |_| IterSource((0..1_000_000u64).map(|n| (n, n))))
///     .rate_limit(100_000.0)
///     .map("double", |n: u64| n * 2)
///     .for_each("drop", |_| {});
/// let handle = job.build()?.start(&RuntimeConfig::default())?;
/// let view = tandem::export::LiveView::serve("127.0.0.1:8080", handle.watch())?;
/// println!("watch it at http://{}/", view.addr());
/// handle.join()?;
/// view.ended();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LiveView {
    endpoint: Endpoint,
    inner: Arc<Inner>,
}

impl LiveView {
    /// Listens on `addr` (port 0: any free port) for the job `watch`
    /// watches.
    pub fn serve(addr: impl ToSocketAddrs, watch: JobWatch) -> io::Result<LiveView> {
        let v = LiveView::start(addr, watch.job_name())?;
        v.attach(watch);
        Ok(v)
    }

    /// Listens on `addr` before the job `job_name` exists.
    pub fn start(addr: impl ToSocketAddrs, job_name: &str) -> io::Result<LiveView> {
        let inner = Arc::new(Inner {
            job: job_name.to_string(),
            watch: Mutex::new(None),
            ended: AtomicBool::new(false),
            history: Mutex::new(History::default()),
        });
        let (x, y) = (Arc::clone(&inner), Arc::clone(&inner));
        let endpoint = Endpoint::start(
            addr,
            "tandem-view",
            move |req| match req.path {
                "/" | "/index.html" => http::Response::ok("text/html; charset=utf-8", PAGE),
                "/api/state" => http::Response::ok("application/json", x.state().to_string()),
                _ => http::Response::not_found(),
            },
            STEP,
            move || y.sample(),
        )?;
        Ok(LiveView { endpoint, inner })
    }

    /// Shows the job `watch` watches from now on.
    pub fn attach(&self, watch: JobWatch) {
        *self.inner.watch.lock().unwrap_or_else(|p| p.into_inner()) = Some(watch);
        self.inner.sample();
    }

    /// The job is over: the page says so and keeps its last figures.
    pub fn ended(&self) {
        self.inner.sample();
        self.inner.ended.store(true, Ordering::Release);
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.endpoint.addr()
    }
}
