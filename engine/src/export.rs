//! Exporting what a running job publishes: its counters and gauges in the
//! Prometheus text format over HTTP ([`MetricsServer`]), a live view of it
//! in the browser ([`LiveView`]), and its latency as an HdrHistogram
//! interval log ([`IntervalLog`]).
//!
//! Both read a [`JobWatch`] from a thread of their own: the figures the
//! workers keep anyway (per-instance counters published at each flush, the
//! sinks' histograms merged every 10 ms, the supervisor's status), so a
//! scrape or a log line costs the data path nothing.
//!
//! ```no_run
//! # fn job() -> tandem::Job { unimplemented!() }
//! let handle = job().start(&tandem::RuntimeConfig::default())?;
//! let server = tandem::export::MetricsServer::serve("127.0.0.1:9464", handle.watch())?;
//! println!("metrics at http://{}/metrics", server.addr());
//! let report = handle.join()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod hlog;
mod http;
mod view;

pub use hlog::IntervalLog;
pub use view::LiveView;

use crate::metrics::LatencyHistogram;
use crate::runtime::JobWatch;
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType, Quantile,
    Summary,
};
use prometheus::Encoder;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Upper bounds of the latency histogram's buckets, in seconds: 1 µs to
/// 60 s, 1–2.5–5 per decade (HdrHistogram's own plots use such a log
/// axis).
const LATENCY_BOUNDS_S: [f64; 24] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The quantiles of the recent-latency summary.
const RECENT_QUANTILES: [f64; 5] = [0.5, 0.9, 0.99, 0.999, 1.0];

/// The window of the recent-latency summary.
const RECENT: Duration = Duration::from_secs(10);

/// How often the window's baseline is sampled.
const RECENT_STEP: Duration = Duration::from_secs(1);

/// What a scrape reads: the job once attached ([`MetricsServer::attach`]),
/// and the process.
struct Exporter {
    job: String,
    watch: Mutex<Option<JobWatch>>,
    /// Per source instance, the highest position seen (a position moves
    /// back when a restart restores the source; its counter does not).
    positions: Mutex<HashMap<(String, usize), u64>>,
    /// Copies of the cumulative latency histogram, one per
    /// [`RECENT_STEP`], the oldest first: the recent summary is the
    /// difference with the oldest within [`RECENT`].
    history: Mutex<VecDeque<(Instant, LatencyHistogram)>>,
}

/// A metric family of `kind` with its samples.
fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(kind);
    f.set_metric(metrics);
    f
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name(k.to_string());
            l.set_value(v.to_string());
            l
        })
        .collect()
}

fn counter(pairs: &[(&str, &str)], v: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(v);
    let mut m = Metric::from_label(labels(pairs));
    m.set_counter(c);
    m
}

fn gauge(pairs: &[(&str, &str)], v: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(v);
    let mut m = Metric::from_label(labels(pairs));
    m.set_gauge(g);
    m
}

/// The sum of `h`'s samples, in seconds (each at its bucket's middle, as
/// HdrHistogram's mean).
fn sum_s(h: &LatencyHistogram) -> f64 {
    h.mean() * h.len() as f64 / 1e9
}

impl Exporter {
    fn new(job: &str) -> Self {
        Exporter {
            job: job.to_string(),
            watch: Mutex::new(None),
            positions: Mutex::new(HashMap::new()),
            history: Mutex::new(VecDeque::new()),
        }
    }

    fn watch(&self) -> Option<JobWatch> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Keeps a copy of the cumulative latency every [`RECENT_STEP`] (called
    /// by the server's sampler thread).
    fn sample(&self) {
        let Some(w) = self.watch() else { return };
        let h = w.latency();
        let now = Instant::now();
        let mut hist = self.history.lock().unwrap_or_else(|p| p.into_inner());
        hist.push_back((now, h));
        while hist
            .get(1)
            .is_some_and(|(t, _)| now.duration_since(*t) >= RECENT)
        {
            hist.pop_front();
        }
    }

    /// Every metric, as of now, in the text format.
    fn scrape(&self) -> prometheus::Result<Vec<u8>> {
        let mut fams = self.process_families();
        if let Some(w) = self.watch() {
            self.job_families(&w, &mut fams);
        }
        // A family without samples (no standby group, no recovery yet) is
        // left out: the format has no empty family.
        fams.retain(|f| !f.get_metric().is_empty());
        let mut out = Vec::with_capacity(8192);
        prometheus::TextEncoder::new().encode(&fams, &mut out)?;
        Ok(out)
    }

    /// The process: CPU, memory, start time, build.
    fn process_families(&self) -> Vec<MetricFamily> {
        let job = [("job_name", self.job.as_str())];
        let mut v =
            vec![
            family(
                "tandem_build_info",
                "Always 1: the engine's version",
                MetricType::GAUGE,
                vec![gauge(
                    &[
                        ("job_name", self.job.as_str()),
                        ("version", env!("CARGO_PKG_VERSION")),
                    ],
                    1.0,
                )],
            ),
            family(
                "tandem_job_attached",
                "1 once the job runs (its metrics follow), 0 before (its input may still be made)",
                MetricType::GAUGE,
                vec![gauge(&job, f64::from(u8::from(self.watch().is_some())))],
            ),
            family(
                "process_cpu_seconds_total",
                "User and system CPU time of the process, seconds",
                MetricType::COUNTER,
                vec![counter(&[], crate::sys::rusage::process_cpu_time().as_secs_f64())],
            ),
        ];
        if let Some(rss) = crate::sys::rusage::current_rss_bytes() {
            v.push(family(
                "process_resident_memory_bytes",
                "Resident memory of the process, bytes",
                MetricType::GAUGE,
                vec![gauge(&[], rss as f64)],
            ));
        }
        if let Some(t) = process_start_time_s() {
            v.push(family(
                "process_start_time_seconds",
                "When the process started, seconds since the Unix epoch",
                MetricType::GAUGE,
                vec![gauge(&[], t)],
            ));
        }
        v
    }

    /// The job's operators, latency, checkpoints, recoveries and standbys.
    fn job_families(&self, w: &JobWatch, fams: &mut Vec<MetricFamily>) {
        let job = self.job.as_str();
        let p = w.progress();
        let (mut received, mut emitted, mut produced) = (Vec::new(), Vec::new(), Vec::new());
        let (mut busy, mut pressed, mut marks, mut lags) = (vec![], vec![], vec![], vec![]);
        let (mut aligns, mut align_s, mut align_last) = (vec![], vec![], vec![]);
        // The newest watermark a source published: what the others lag.
        let newest = p.newest_source_watermark();
        {
            let mut pos = self.positions.lock().unwrap_or_else(|p| p.into_inner());
            for o in &p.operators {
                for (i, &(records, out)) in o.instances.iter().enumerate() {
                    let inst = i.to_string();
                    let l = [
                        ("job_name", job),
                        ("operator", o.name.as_str()),
                        ("instance", inst.as_str()),
                    ];
                    let t = o.time.get(i).copied().unwrap_or_default();
                    busy.push(counter(&l, t.busy_ns as f64 / 1e9));
                    pressed.push(counter(&l, t.backpressured_ns as f64 / 1e9));
                    match t.watermark {
                        Some(u64::MAX) => lags.push(gauge(&l, 0.0)),
                        Some(w) => {
                            marks.push(gauge(&l, w as f64 / 1e9));
                            if let Some(n) = newest {
                                lags.push(gauge(&l, n.saturating_sub(w) as f64 / 1e9));
                            }
                        }
                        None => {}
                    }
                    if !o.source {
                        aligns.push(counter(&l, t.alignments as f64));
                        align_s.push(counter(&l, t.alignment_ns as f64 / 1e9));
                        align_last.push(gauge(&l, t.alignment_last_ns as f64 / 1e9));
                    }
                    if o.source {
                        let high = pos.entry((o.name.clone(), i)).or_insert(0);
                        *high = (*high).max(records);
                        produced.push(counter(&l, *high as f64));
                    } else {
                        received.push(counter(&l, records as f64));
                        if !o.sink {
                            emitted.push(counter(&l, out as f64));
                        }
                    }
                }
            }
        }
        fams.push(family(
            "tandem_source_records_total",
            "Records a source instance produced, each once: a replay after a restart does not count again",
            MetricType::COUNTER,
            produced,
        ));
        fams.push(family(
            "tandem_records_in_total",
            "Records an operator instance received (a sink: wrote), over every attempt and incarnation: a record replayed after a recovery counts again",
            MetricType::COUNTER,
            received,
        ));
        fams.push(family(
            "tandem_records_out_total",
            "Records an operator instance emitted downstream, counted as tandem_records_in_total (sources and sinks have none)",
            MetricType::COUNTER,
            emitted,
        ));
        fams.push(family(
            "tandem_busy_seconds_total",
            "Seconds the task running an operator instance spent in polls that did work (shared by the operators chained in one task; a standby's own work not counted)",
            MetricType::COUNTER,
            busy,
        ));
        fams.push(family(
            "tandem_backpressured_seconds_total",
            "Seconds the task running an operator instance could not pass its output on, a ring downstream being full (shared by the operators chained in one task)",
            MetricType::COUNTER,
            pressed,
        ));
        fams.push(family(
            "tandem_watermark_seconds",
            "An operator instance's input watermark (a source's: its own), event time in seconds since the epoch of the job's event times; absent before the first and after its input ended",
            MetricType::GAUGE,
            marks,
        ));
        fams.push(family(
            "tandem_watermark_lag_seconds",
            "How far an operator instance's input watermark is behind the newest watermark of the job's sources, event-time seconds (0 once its input ended)",
            MetricType::GAUGE,
            lags,
        ));
        fams.push(family(
            "tandem_checkpoint_alignments_total",
            "Checkpoint barriers an operator instance's task aligned over its input lanes",
            MetricType::COUNTER,
            aligns,
        ));
        fams.push(family(
            "tandem_checkpoint_alignment_seconds_total",
            "Seconds those alignments took, each from the first lane's barrier to the last lane's",
            MetricType::COUNTER,
            align_s,
        ));
        fams.push(family(
            "tandem_checkpoint_alignment_last_seconds",
            "Seconds the newest of those alignments took",
            MetricType::GAUGE,
            align_last,
        ));
        let jl = [("job_name", job)];
        fams.push(family(
            "tandem_dead_letters_total",
            "Records sent to the dead-letter file",
            MetricType::COUNTER,
            vec![counter(&jl, p.dead_letters as f64)],
        ));
        self.latency_families(w, fams);
        let s = w.status();
        let c = |name: &str, help: &str, v: u64| {
            family(
                name,
                help,
                MetricType::COUNTER,
                vec![counter(&jl, v as f64)],
            )
        };
        let g = |name: &str, help: &str, v: f64| {
            family(name, help, MetricType::GAUGE, vec![gauge(&jl, v)])
        };
        fams.push(c(
            "tandem_checkpoints_started_total",
            "Checkpoints triggered at the sources",
            s.checkpoints_started,
        ));
        fams.push(c(
            "tandem_checkpoints_completed_total",
            "Checkpoints made durable",
            s.checkpoints_completed,
        ));
        fams.push(c(
            "tandem_checkpoints_failed_total",
            "Checkpoints abandoned (timeout, declined, write error)",
            s.checkpoints_failed,
        ));
        fams.push(c(
            "tandem_checkpoints_late_total",
            "Completed checkpoints that took longer than the interval",
            s.checkpoints_late,
        ));
        fams.push(c(
            "tandem_checkpoint_written_bytes_total",
            "Bytes the completed checkpoints wrote, payloads and key indexes",
            s.checkpoint_bytes,
        ));
        if let Some(d) = s.checkpoint_last_duration_us {
            fams.push(g(
                "tandem_checkpoint_last_duration_seconds",
                "The newest completed checkpoint's duration, trigger to durable manifest",
                d as f64 / 1e6,
            ));
        }
        if let Some(b) = s.checkpoint_last_bytes {
            fams.push(g(
                "tandem_checkpoint_last_bytes",
                "Bytes the newest completed checkpoint wrote",
                b as f64,
            ));
        }
        fams.push(c(
            "tandem_restarts_total",
            "Restarts of the whole job (restart-all)",
            u64::from(s.restarts),
        ));
        fams.push(c(
            "tandem_takeovers_total",
            "Standbys that took over from their primary",
            s.takeovers,
        ));
        let by_cause = s
            .recoveries
            .iter()
            .map(|r| {
                counter(
                    &[
                        ("job_name", job),
                        ("kind", r.kind),
                        ("cause", r.cause),
                        ("unprovoked", if r.unprovoked { "true" } else { "false" }),
                    ],
                    r.count as f64,
                )
            })
            .collect();
        fams.push(family(
            "tandem_recoveries_total",
            "Recoveries by kind (restart-all, takeover) and cause (injected, panic, process died, stuck-kill, stall, other); unprovoked: no injected fault explains it",
            MetricType::COUNTER,
            by_cause,
        ));
        if let Some(f) = s.last_recovery_first_output_us {
            fams.push(g(
                "tandem_recovery_last_first_output_seconds",
                "The newest recovery: fault to the first output of the recovered operator or job",
                f as f64 / 1e6,
            ));
        }
        fams.push(family(
            "tandem_standby_groups",
            "Operator instances running with a standby",
            MetricType::GAUGE,
            vec![gauge(&jl, s.standby_groups as f64)],
        ));
        let per_group = |f: &dyn Fn(&crate::GroupStatus) -> f64| -> Vec<Metric> {
            s.standby
                .iter()
                .map(|gs| {
                    let inst = gs.instance.to_string();
                    gauge(
                        &[
                            ("job_name", job),
                            ("operator", gs.operator.as_str()),
                            ("instance", inst.as_str()),
                        ],
                        f(gs),
                    )
                })
                .collect()
        };
        fams.push(family(
            "tandem_standby_queue_entries",
            "Inputs a standby group's buffer queues hold (a chain that replays its source holds none)",
            MetricType::GAUGE,
            per_group(&|gs| gs.queue_entries as f64),
        ));
        fams.push(family(
            "tandem_standby_queue_bytes",
            "Bytes a standby group's buffer queues hold",
            MetricType::GAUGE,
            per_group(&|gs| gs.queue_bytes as f64),
        ));
        fams.push(family(
            "tandem_standby_lag_records",
            "Inputs past a standby group's newest recovery point: what a takeover now would replay",
            MetricType::GAUGE,
            per_group(&|gs| gs.lag_records as f64),
        ));
        fams.push(family(
            "tandem_standby_lag_seconds",
            "Age of a standby group's newest recovery point (since the group started, before the first)",
            MetricType::GAUGE,
            per_group(&|gs| gs.point_age_us as f64 / 1e6),
        ));
    }

    /// End-to-end latency: a cumulative histogram, and a summary of the
    /// last [`RECENT`].
    fn latency_families(&self, w: &JobWatch, fams: &mut Vec<MetricFamily>) {
        let jl = labels(&[("job_name", self.job.as_str())]);
        let h = w.latency();
        let mut hist = Histogram::default();
        hist.set_bucket(
            LATENCY_BOUNDS_S
                .iter()
                .map(|&b| {
                    let mut k = Bucket::default();
                    k.set_upper_bound(b);
                    k.set_cumulative_count(if h.is_empty() {
                        0
                    } else {
                        h.inner().count_between(0, (b * 1e9) as u64)
                    });
                    k
                })
                .collect(),
        );
        hist.set_sample_count(h.len());
        hist.set_sample_sum(sum_s(&h));
        let mut m = Metric::from_label(jl.clone());
        m.set_histogram(hist);
        fams.push(family(
            "tandem_latency_seconds",
            "End-to-end latency of the records that reached a sink, source release to sink, since the job started",
            MetricType::HISTOGRAM,
            vec![m],
        ));
        let base = {
            let hist = self.history.lock().unwrap_or_else(|p| p.into_inner());
            hist.front().map(|(_, b)| b.clone())
        };
        let recent = base.map_or_else(|| h.clone(), |b| h.since(&b));
        let mut sum = Summary::default();
        sum.set_quantile(
            RECENT_QUANTILES
                .iter()
                .filter(|_| !recent.is_empty())
                .map(|&q| {
                    let mut x = Quantile::default();
                    x.set_quantile(q);
                    let v = if q >= 1.0 {
                        recent.max()
                    } else {
                        recent.quantile(q)
                    };
                    x.set_value(v as f64 / 1e9);
                    x
                })
                .collect(),
        );
        sum.set_sample_count(h.len());
        sum.set_sample_sum(sum_s(&h));
        let mut m = Metric::from_label(jl);
        m.set_summary(sum);
        fams.push(family(
            "tandem_latency_recent_seconds",
            "End-to-end latency: quantiles over the last 10 s (none while no record arrived in them); count and sum since the job started",
            MetricType::SUMMARY,
            vec![m],
        ));
    }
}

/// When this process started, seconds since the Unix epoch (from
/// `/proc/self/stat` and the boot time).
fn process_start_time_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let ticks: f64 = rest.split(' ').nth(19)?.parse().ok()?;
    let boot: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: `sysconf` reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| boot + ticks / hz as f64)
}

/// Serves a job's metrics at `http://ADDR/metrics` in the Prometheus text
/// format (version 0.0.4) until dropped. One thread answers the scrapes
/// (`GET` and `HEAD`, at `/metrics` or `/`; another path is 404, another
/// method 405), another keeps the recent-latency window. No request can
/// hurt the job: heads are bounded, bodies never read, connections
/// bounded in number and time (see the `http` module).
///
/// It may start before the job ([`MetricsServer::start`], then
/// [`MetricsServer::attach`]): until then it serves the process's metrics
/// and `tandem_job_attached 0`. It serves the job's final figures for as
/// long as it is kept after the job ended.
///
/// Exported (`promtool check metrics` accepts them), labelled with the
/// job's name (`job_name`), per operator instance where it says so:
/// - `tandem_source_records_total{operator,instance}`,
///   `tandem_records_in_total{operator,instance}`,
///   `tandem_records_out_total{operator,instance}`,
///   `tandem_dead_letters_total`;
/// - per operator instance, its task's `tandem_busy_seconds_total` and
///   `tandem_backpressured_seconds_total`, its `tandem_watermark_seconds`
///   and `tandem_watermark_lag_seconds` (behind the sources' newest), and
///   `tandem_checkpoint_alignments_total`,
///   `tandem_checkpoint_alignment_seconds_total`,
///   `tandem_checkpoint_alignment_last_seconds`;
/// - `tandem_latency_seconds` (a histogram, 1 µs to 60 s) and
///   `tandem_latency_recent_seconds` (a summary: quantiles of the last 10 s);
/// - `tandem_checkpoints_{started,completed,failed,late}_total`,
///   `tandem_checkpoint_written_bytes_total`,
///   `tandem_checkpoint_last_duration_seconds`, `tandem_checkpoint_last_bytes`;
/// - `tandem_restarts_total`, `tandem_takeovers_total`,
///   `tandem_recoveries_total{kind,cause,unprovoked}`,
///   `tandem_recovery_last_first_output_seconds`;
/// - `tandem_standby_groups`, and per group (`operator`, `instance`)
///   `tandem_standby_queue_entries`, `tandem_standby_queue_bytes`,
///   `tandem_standby_lag_records`, `tandem_standby_lag_seconds`;
/// - `tandem_build_info{version}`, `tandem_job_attached`,
///   `process_cpu_seconds_total`, `process_resident_memory_bytes`,
///   `process_start_time_seconds`.
pub struct MetricsServer {
    endpoint: Endpoint,
    exporter: Arc<Exporter>,
}

/// An HTTP endpoint of a job's: one thread answers its requests
/// ([`http::Server`]: bounded in memory, connections and time, whatever a
/// client sends), another samples the job every `step`; both end when it
/// is dropped.
struct Endpoint {
    server: http::Server,
    stop: Option<mpsc::Sender<()>>,
    ticking: Option<JoinHandle<()>>,
}

impl Endpoint {
    /// Listens on `addr`; `answer` takes each request on thread `name`,
    /// `tick` runs every `step` on another.
    fn start(
        addr: impl ToSocketAddrs,
        name: &str,
        answer: impl Fn(&http::Request<'_>) -> http::Response + Send + 'static,
        step: Duration,
        tick: impl Fn() + Send + 'static,
    ) -> io::Result<Endpoint> {
        let server = http::Server::start(addr, name, answer)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let ticking = std::thread::Builder::new()
            .name(format!("{name}-tick"))
            .spawn(move || {
                let mut next = Instant::now() + step;
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(next.saturating_duration_since(Instant::now()))
                {
                    tick();
                    next += step;
                }
            })?;
        Ok(Endpoint {
            server,
            stop: Some(stop),
            ticking: Some(ticking),
        })
    }

    fn addr(&self) -> SocketAddr {
        self.server.addr()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.ticking.take() {
            let _ = t.join();
        }
    }
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port, see [`MetricsServer::addr`])
    /// for the job `watch` watches.
    pub fn serve(addr: impl ToSocketAddrs, watch: JobWatch) -> io::Result<MetricsServer> {
        let s = MetricsServer::start(addr, watch.job_name())?;
        s.attach(watch);
        Ok(s)
    }

    /// Listens on `addr` before the job `job_name` exists (a program that
    /// prepares its input first): a scraper finds the endpoint at once.
    pub fn start(addr: impl ToSocketAddrs, job_name: &str) -> io::Result<MetricsServer> {
        let exporter = Arc::new(Exporter::new(job_name));
        let (x, y) = (Arc::clone(&exporter), Arc::clone(&exporter));
        let endpoint = Endpoint::start(
            addr,
            "tandem-metrics",
            move |req| {
                if req.path != "/metrics" && req.path != "/" {
                    return http::Response::not_found();
                }
                match x.scrape() {
                    Ok(body) => http::Response::ok(prometheus::TEXT_FORMAT, body),
                    Err(e) => http::Response::text(500, &e.to_string()),
                }
            },
            RECENT_STEP,
            move || y.sample(),
        )?;
        Ok(MetricsServer { endpoint, exporter })
    }

    /// Serves the job `watch` watches from now on.
    pub fn attach(&self, watch: JobWatch) {
        *self
            .exporter
            .watch
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(watch);
        self.exporter.sample();
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.endpoint.addr()
    }
}
