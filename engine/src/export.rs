//! Exporting what a running job publishes: its counters and gauges in the
//! Prometheus text format over HTTP ([`MetricsServer`]), and its latency
//! as an HdrHistogram interval log ([`IntervalLog`]).
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

use crate::metrics::LatencyHistogram;
use crate::runtime::JobWatch;
use crate::sys::output::{OutputFile, Staged};
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, IntervalLogWriterError};
use hdrhistogram::serialization::V2DeflateSerializer;
use prometheus::{Encoder, Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use std::io::{self, BufWriter, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// The latency quantiles exported as gauges.
const QUANTILES: [(f64, &str); 5] = [
    (0.5, "0.5"),
    (0.9, "0.9"),
    (0.99, "0.99"),
    (0.999, "0.999"),
    (1.0, "1"),
];

/// The job's metrics, registered once and brought up to date from the
/// watch at each scrape.
struct JobMetricsExport {
    registry: Registry,
    watch: JobWatch,
    records_in: IntCounterVec,
    records_out: IntCounterVec,
    dead_letters: IntCounter,
    latency: GaugeVec,
    latency_samples: IntCounter,
    cp_started: IntCounter,
    cp_completed: IntCounter,
    cp_failed: IntCounter,
    cp_late: IntCounter,
    cp_last: Gauge,
    restarts: IntCounter,
    takeovers: IntCounter,
    first_output: Gauge,
    groups: IntGauge,
    queue_bytes: IntGauge,
    queue_entries: IntGauge,
}

fn counter(r: &Registry, name: &str, help: &str) -> prometheus::Result<IntCounter> {
    let c = IntCounter::new(name, help)?;
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(r: &Registry, name: &str, help: &str) -> prometheus::Result<Gauge> {
    let g = Gauge::new(name, help)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> prometheus::Result<IntGauge> {
    let g = IntGauge::new(name, help)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

/// Raises a counter to `to` (a counter never goes down: a source's position
/// that moves back on a restart leaves it where it was).
fn raise(c: &IntCounter, to: u64) {
    c.inc_by(to.saturating_sub(c.get()));
}

impl JobMetricsExport {
    fn new(watch: JobWatch) -> prometheus::Result<Self> {
        let job = watch.job_name().to_string();
        let registry = Registry::new_custom(
            Some("tandem".into()),
            Some([("job_name".to_string(), job)].into_iter().collect()),
        )?;
        let r = &registry;
        let records_in = IntCounterVec::new(
            Opts::new(
                "records_in_total",
                "Records an operator received, over its instances and every attempt (a source: records it produced)",
            ),
            &["operator"],
        )?;
        r.register(Box::new(records_in.clone()))?;
        let records_out = IntCounterVec::new(
            Opts::new(
                "records_out_total",
                "Records an operator emitted downstream, over its instances and every attempt",
            ),
            &["operator"],
        )?;
        r.register(Box::new(records_out.clone()))?;
        let latency = GaugeVec::new(
            Opts::new(
                "latency_seconds",
                "End-to-end latency (source release to sink) since the job started, at a quantile",
            ),
            &["quantile"],
        )?;
        r.register(Box::new(latency.clone()))?;
        Ok(JobMetricsExport {
            dead_letters: counter(
                r,
                "dead_letters_total",
                "Records sent to the dead-letter file",
            )?,
            latency_samples: counter(
                r,
                "latency_samples_total",
                "Records whose latency was measured",
            )?,
            cp_started: counter(r, "checkpoints_started_total", "Checkpoints triggered")?,
            cp_completed: counter(r, "checkpoints_completed_total", "Checkpoints made durable")?,
            cp_failed: counter(
                r,
                "checkpoints_failed_total",
                "Checkpoints abandoned (timeout, declined, write error)",
            )?,
            cp_late: counter(
                r,
                "checkpoints_late_total",
                "Completed checkpoints that took longer than the interval",
            )?,
            cp_last: gauge(
                r,
                "checkpoint_last_duration_seconds",
                "The newest completed checkpoint's duration, trigger to durable manifest",
            )?,
            restarts: counter(
                r,
                "restarts_total",
                "Restarts of the whole job (restart-all)",
            )?,
            takeovers: counter(
                r,
                "takeovers_total",
                "Standbys that took over from their primary",
            )?,
            first_output: gauge(
                r,
                "recovery_last_first_output_seconds",
                "The newest recovery: fault to the first output of the recovered operator or job",
            )?,
            groups: int_gauge(
                r,
                "standby_groups",
                "Operator instances running with a standby",
            )?,
            queue_bytes: int_gauge(
                r,
                "standby_queue_bytes",
                "Bytes the buffer queues hold now, over every standby group",
            )?,
            queue_entries: int_gauge(
                r,
                "standby_queue_entries",
                "Inputs the buffer queues hold now: what the standbys would replay (their lag)",
            )?,
            records_in,
            records_out,
            latency,
            registry,
            watch,
        })
    }

    /// Brings every metric up to date and encodes them.
    fn scrape(&self) -> prometheus::Result<Vec<u8>> {
        let p = self.watch.progress();
        for o in &p.operators {
            raise(&self.records_in.with_label_values(&[&o.name]), o.records);
            raise(&self.records_out.with_label_values(&[&o.name]), o.emitted);
        }
        raise(&self.dead_letters, p.dead_letters);
        let h = self.watch.latency();
        raise(&self.latency_samples, h.len());
        for (q, label) in QUANTILES {
            let v = if q >= 1.0 { h.max() } else { h.quantile(q) };
            self.latency.with_label_values(&[label]).set(v as f64 / 1e9);
        }
        let s = self.watch.status();
        raise(&self.cp_started, s.checkpoints_started);
        raise(&self.cp_completed, s.checkpoints_completed);
        raise(&self.cp_failed, s.checkpoints_failed);
        raise(&self.cp_late, s.checkpoints_late);
        self.cp_last
            .set(s.checkpoint_last_duration_us.unwrap_or(0) as f64 / 1e6);
        raise(&self.restarts, u64::from(s.restarts));
        raise(&self.takeovers, s.takeovers);
        self.first_output
            .set(s.last_recovery_first_output_us.unwrap_or(0) as f64 / 1e6);
        self.groups.set(s.standby_groups as i64);
        self.queue_bytes.set(s.standby_queue_bytes as i64);
        self.queue_entries.set(s.standby_queue_entries as i64);
        let mut out = Vec::with_capacity(4096);
        prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        Ok(out)
    }
}

/// Serves a job's metrics at `http://ADDR/metrics` in the Prometheus text
/// format (version 0.0.4) until dropped. One thread answers the scrapes;
/// anything but `GET /metrics` (or `/`) is answered 404.
///
/// Exported, all prefixed `tandem_` and labelled with the job's name:
/// `records_in_total` and `records_out_total` per operator,
/// `dead_letters_total`, `latency_seconds` at quantiles 0.5 … 1 and
/// `latency_samples_total`, `checkpoints_{started,completed,failed,late}_total`
/// and `checkpoint_last_duration_seconds`, `restarts_total`,
/// `takeovers_total`, `recovery_last_first_output_seconds`,
/// `standby_groups`, `standby_queue_bytes` and `standby_queue_entries`.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port, see [`MetricsServer::addr`]).
    pub fn serve(addr: impl ToSocketAddrs, watch: JobWatch) -> io::Result<MetricsServer> {
        let export = JobMetricsExport::new(watch).map_err(io::Error::other)?;
        let server = tiny_http::Server::http(addr).map_err(io::Error::other)?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| io::Error::other("the metrics server is not on an IP address"))?;
        let server = Arc::new(server);
        let s = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("tandem-metrics".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    let path = req.url().split('?').next().unwrap_or("");
                    let ok = matches!(req.method(), tiny_http::Method::Get)
                        && (path == "/metrics" || path == "/");
                    // A client that went away is no concern of the job's.
                    let _ = if !ok {
                        req.respond(
                            tiny_http::Response::from_string("not found\n").with_status_code(404),
                        )
                    } else {
                        match export.scrape() {
                            Ok(body) => {
                                let ct = tiny_http::Header::from_bytes(
                                    &b"Content-Type"[..],
                                    prometheus::TEXT_FORMAT.as_bytes(),
                                )
                                .expect("a static header is valid");
                                req.respond(tiny_http::Response::from_data(body).with_header(ct))
                            }
                            Err(e) => req.respond(
                                tiny_http::Response::from_string(format!("{e}\n"))
                                    .with_status_code(500),
                            ),
                        }
                    };
                }
            })?;
        Ok(MetricsServer {
            server,
            addr,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes a job's latency as an HdrHistogram interval log (`.hlog`: the
/// format of HdrHistogram's `HistogramLogWriter`, V2 compressed
/// histograms, values in nanoseconds, `Interval_Max` in milliseconds),
/// one interval per `every` (a second, as is usual), from a thread of its
/// own; [`IntervalLog::finish`] writes the last, partial one and puts the
/// log in place (it is written beside its path and renamed there, by the
/// discipline of [`crate::sys::output`]: a device or FIFO is refused
/// before anything is written, never replaced). HdrHistogram's
/// own tools read it (`HistogramLogProcessor -i FILE -outputValueUnitRatio 1000000`
/// prints milliseconds).
pub struct IntervalLog {
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<io::Result<(u64, Staged)>>>,
    path: PathBuf,
    staging: PathBuf,
}

impl IntervalLog {
    /// Checks `path` as an output and starts logging beside it.
    pub fn start(path: &Path, watch: JobWatch, every: Duration) -> io::Result<IntervalLog> {
        let staged = OutputFile::check(path)?.stage()?;
        let staging = staged.staging_path().to_path_buf();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("tandem-hlog".into())
            .spawn(move || write_log(staged, &watch, every, &stopped))?;
        Ok(IntervalLog {
            stop,
            thread: Some(thread),
            path: path.to_path_buf(),
            staging,
        })
    }

    /// Where the log is written until [`IntervalLog::finish`] puts it in
    /// place (removed if the log is dropped unfinished).
    pub fn staging_path(&self) -> &Path {
        &self.staging
    }

    /// Writes the last interval (call it once the job has ended, so that
    /// every sink's last samples are in), puts the log in place and
    /// returns how many intervals it holds.
    pub fn finish(mut self) -> io::Result<u64> {
        let _ = self.stop.send(());
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => {
                let (n, staged) = r.map_err(|e| {
                    io::Error::new(e.kind(), format!("{}: {e}", self.path.display()))
                })?;
                staged.commit()?;
                Ok(n)
            }
            _ => Err(io::Error::other(format!(
                "the interval log writer of {} panicked",
                self.path.display()
            ))),
        }
    }
}

impl Drop for IntervalLog {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write_log(
    file: Staged,
    watch: &JobWatch,
    every: Duration,
    stopped: &mpsc::Receiver<()>,
) -> io::Result<(u64, Staged)> {
    let mut out = BufWriter::new(file);
    let mut ser = V2DeflateSerializer::new();
    let start = SystemTime::now();
    let t0 = Instant::now();
    let hist_err = |e| match e {
        IntervalLogWriterError::IoError(e) => e,
        IntervalLogWriterError::SerializeError(e) => {
            io::Error::other(format!("writing an interval: {e}"))
        }
    };
    writeln!(out, "#[Logged with Tandem {}]", env!("CARGO_PKG_VERSION"))?;
    writeln!(out, "#[Histogram log format version 1.3]")?;
    drop(
        IntervalLogWriterBuilder::new()
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut out, &mut ser)?,
    );
    writeln!(
        out,
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
    )?;
    let mut log = IntervalLogWriterBuilder::new()
        .with_max_value_divisor(1e6)
        .begin_log_with(&mut out, &mut ser)?;
    let (mut prev, mut prev_t) = (LatencyHistogram::new(), Duration::ZERO);
    let mut intervals = 0;
    loop {
        let last = !matches!(
            stopped.recv_timeout(every.saturating_sub(t0.elapsed() - prev_t)),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        // Whole milliseconds: the format prints seconds to three decimals,
        // so rounded starts and lengths still tile the run exactly.
        let now_t = Duration::from_millis(t0.elapsed().as_millis() as u64);
        let cum = watch.latency();
        let interval = cum.since(&prev);
        log.write_histogram(interval.inner(), prev_t, now_t - prev_t, None)
            .map_err(hist_err)?;
        intervals += 1;
        (prev, prev_t) = (cum, now_t);
        if last {
            break;
        }
    }
    drop(log);
    let staged = out.into_inner().map_err(|e| e.into_error())?;
    Ok((intervals, staged))
}
