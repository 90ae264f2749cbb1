//! What a benchmark run shows while it runs, shared by `paper` and
//! `nexmark`: `--metrics-addr` (a Prometheus endpoint, up before the input
//! is made and, with `--metrics-linger-s`, after the job ended), `--hlog`
//! (an HdrHistogram interval log, one interval a second) and `--timeline`
//! (throughput and p99 in 10 ms buckets, the faults marked: the data of a
//! recovery plot).

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tandem::export::{IntervalLog, LiveView, MetricsServer};
use tandem::{JobWatch, LatencyHistogram};

/// The flags, as each binary has them.
#[derive(Clone, Debug, Default)]
pub struct LiveFlags {
    pub hlog: Option<PathBuf>,
    pub timeline: Option<PathBuf>,
    /// The operator whose received records the timeline counts (the sink).
    pub timeline_operator: String,
}

/// One 10 ms bucket of a timeline.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Bucket {
    /// The bucket's end, ms since the job started.
    pub t_ms: f64,
    /// Records the counted operator received in the bucket, per second.
    pub rate: f64,
    /// p99 latency of the records that reached a sink in the bucket, µs
    /// (`None`: none did).
    pub p99_us: Option<f64>,
    /// The process's CPU time over the bucket, in cores (1.0: one core
    /// busy throughout).
    pub cpu_cores: f64,
    /// Bytes the standbys' buffer queues held at the bucket's end.
    pub queue_bytes: u64,
}

/// A run's timeline (`--timeline FILE`), faults marked.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Timeline {
    /// The bucket width, ms.
    pub bucket_ms: f64,
    pub buckets: Vec<Bucket>,
    /// Each recovery of an injected fault: the fault, ms since the job
    /// started, with the recovery's kind.
    pub faults: Vec<(f64, String)>,
    /// Each recovery no injected fault explains (a stall verdict, a child
    /// killed as stuck): when, and its kind and cause.
    #[serde(default)]
    pub unexplained: Vec<(f64, String)>,
}

/// `--metrics-addr`'s endpoint for job `job`, started before the input is
/// made (a busy port is an error before any work; a scraper finds it at
/// once); [`Live::start`] attaches the job to it.
pub fn serve_metrics(addr: Option<SocketAddr>, job: &str) -> anyhow::Result<Option<MetricsServer>> {
    let Some(a) = addr else { return Ok(None) };
    let s = MetricsServer::start(a, job)
        .with_context(|| format!("serving metrics on {a} (--metrics-addr)"))?;
    crate::errln!("metrics at http://{}/metrics", s.addr());
    Ok(Some(s))
}

/// `--ui-addr`'s live view for job `job`, started before the input is
/// made; [`Live::start`] attaches the job to it.
pub fn serve_view(addr: Option<SocketAddr>, job: &str) -> anyhow::Result<Option<LiveView>> {
    let Some(a) = addr else { return Ok(None) };
    let v = LiveView::start(a, job)
        .with_context(|| format!("serving the live view on {a} (--ui-addr)"))?;
    crate::errln!("live view at http://{}/", v.addr());
    Ok(Some(v))
}

/// The endpoints a run serves beside its job.
#[derive(Default)]
pub struct Served {
    pub metrics: Option<MetricsServer>,
    pub view: Option<LiveView>,
}

impl Served {
    /// `--metrics-addr` and `--ui-addr`, before the input is made.
    pub fn start(
        metrics: Option<SocketAddr>,
        ui: Option<SocketAddr>,
        job: &str,
    ) -> anyhow::Result<Served> {
        Ok(Served {
            metrics: serve_metrics(metrics, job)?,
            view: serve_view(ui, job)?,
        })
    }

    /// The job ended: the view says so.
    pub fn ended(&self) {
        if let Some(v) = &self.view {
            v.ended();
        }
    }
}

/// Keeps what `served` serves answering for `secs` after the job ended
/// (a final scrape or look: `--metrics-linger-s`), or until a signal.
pub fn linger(served: &Served, secs: u64) {
    if secs == 0 || (served.metrics.is_none() && served.view.is_none()) {
        return;
    }
    let mut at = Vec::new();
    if let Some(s) = &served.metrics {
        at.push(format!("http://{}/metrics", s.addr()));
    }
    if let Some(v) = &served.view {
        at.push(format!("http://{}/", v.addr()));
    }
    crate::errln!(
        "{} stay up for {secs} s (--metrics-linger-s)",
        at.join(" and ")
    );
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until && !crate::cli::interrupted() {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What runs beside a job; [`Live::finish`] once it has ended.
pub struct Live {
    hlog: Option<(IntervalLog, PathBuf)>,
    timeline: Option<(JoinHandle<Vec<Bucket>>, mpsc::Sender<()>, PathBuf)>,
}

impl Live {
    /// Starts what `flags` ask for beside the job `handle` runs, and
    /// attaches it to `server` ([`serve_metrics`]). Without any, nothing
    /// watches the job (its sinks then publish their latency only when
    /// they end).
    pub fn start(
        flags: &LiveFlags,
        handle: &tandem::JobHandle,
        served: Option<&Served>,
    ) -> anyhow::Result<Live> {
        let serving = served.is_some_and(|s| s.metrics.is_some() || s.view.is_some());
        if !serving && flags.hlog.is_none() && flags.timeline.is_none() {
            return Ok(Live {
                hlog: None,
                timeline: None,
            });
        }
        let watch = &handle.watch();
        if let Some(s) = served {
            if let Some(m) = &s.metrics {
                m.attach(watch.clone());
            }
            if let Some(v) = &s.view {
                v.attach(watch.clone());
            }
        }
        let hlog = match &flags.hlog {
            Some(p) => {
                let log = IntervalLog::start(p, watch.clone(), Duration::from_secs(1))
                    .map_err(|e| anyhow::anyhow!("--hlog {e}"))?;
                // Removed if the run is interrupted before it is in place.
                crate::cleanup::add(log.staging_path().to_path_buf());
                Some((log, p.clone()))
            }
            None => None,
        };
        let timeline = match &flags.timeline {
            Some(p) => {
                let (stop, stopped) = mpsc::channel();
                let w = watch.clone();
                let op = flags.timeline_operator.clone();
                let t = std::thread::Builder::new()
                    .name("timeline".into())
                    .spawn(move || sample(&w, &op, Duration::from_millis(10), &stopped))?;
                Some((t, stop, p.clone()))
            }
            None => None,
        };
        Ok(Live { hlog, timeline })
    }

    /// Ends what runs beside the job: the interval log's last interval, the
    /// timeline (with `report`'s faults) written.
    pub fn finish(mut self, report: Option<&tandem::JobReport>) -> anyhow::Result<()> {
        if crate::cli::interrupted() {
            // An interrupted run writes none of its files: the interval
            // log's staging goes with its leftovers, the timeline is not
            // made (its sampler ends with the job).
            if let Some((_, stop, _)) = self.timeline.take() {
                let _ = stop.send(());
            }
            return Ok(());
        }
        if let Some((log, path)) = self.hlog.take() {
            let staging = log.staging_path().to_path_buf();
            let n = log.finish();
            crate::cleanup::forget(&staging);
            let n = n.map_err(|e| anyhow::anyhow!("--hlog {e}"))?;
            crate::errln!("wrote {} ({n} intervals)", path.display());
        }
        if let Some((t, stop, path)) = self.timeline.take() {
            let _ = stop.send(());
            let buckets = t
                .join()
                .map_err(|_| anyhow::anyhow!("the timeline sampler panicked"))?;
            let (mut faults, mut unexplained) = (Vec::new(), Vec::new());
            for x in report.map_or(&[][..], |r| &r.recovery[..]) {
                let at = x.fault_at_us as f64 / 1e3;
                if x.reason == tandem::RecoveryCause::Injected {
                    faults.push((at, x.kind.name().to_string()));
                } else {
                    unexplained.push((at, format!("{}: {}", x.kind.name(), x.reason.name())));
                }
            }
            let tl = Timeline {
                bucket_ms: 10.0,
                buckets,
                faults,
                unexplained,
            };
            crate::report::write_json("--timeline", &path, &tl)?;
            crate::errln!(
                "wrote {} ({} buckets of 10 ms)",
                path.display(),
                tl.buckets.len()
            );
        }
        Ok(())
    }
}

/// Samples the job every `every` until told to stop (or it has ended).
fn sample(w: &JobWatch, op: &str, every: Duration, stop: &mpsc::Receiver<()>) -> Vec<Bucket> {
    // On the engine clock, as the faults are.
    let t0 = Instant::now() - w.elapsed();
    let count = || w.progress().operator(op).map_or(0, |o| o.records);
    // The next bucket's end after `t` (bucket ends are multiples of `every`).
    let after = |t: Duration| every * (t.as_nanos() / every.as_nanos() + 1) as u32;
    let (mut prev_n, mut prev_h) = (count(), LatencyHistogram::new());
    let mut prev_t = t0.elapsed().as_secs_f64();
    let cpu = || tandem::sys::rusage::process_cpu_time().as_secs_f64();
    let mut prev_cpu = cpu();
    let mut out = Vec::new();
    let mut next = after(t0.elapsed());
    loop {
        let wait = next.saturating_sub(t0.elapsed());
        let last = !matches!(
            stop.recv_timeout(wait),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        let t = t0.elapsed().as_secs_f64();
        let (n, h, c) = (count(), w.latency(), cpu());
        let d = h.since(&prev_h);
        let dt = (t - prev_t).max(1e-6);
        out.push(Bucket {
            t_ms: t * 1e3,
            rate: n.saturating_sub(prev_n) as f64 / dt,
            p99_us: (!d.is_empty()).then(|| d.quantile(0.99) as f64 / 1e3),
            cpu_cores: (c - prev_cpu).max(0.0) / dt,
            queue_bytes: w.status().standby_queue_bytes,
        });
        (prev_n, prev_h, prev_t, prev_cpu) = (n, h, t, c);
        // A sampler that was not scheduled for a while skips the buckets
        // it missed (the next one covers them).
        next = (next + every).max(after(t0.elapsed()));
        if last {
            return out;
        }
    }
}

/// Reads a timeline written by `--timeline`.
pub fn read_timeline(path: &Path) -> anyhow::Result<Timeline> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_slice(&text)?)
}
