//! Running `paper` once per configuration, as a child process (each run its
//! own process: its peak RSS and CPU are its own, and a run that fails or
//! hangs is one run lost, not the campaign), and reading its JSON report;
//! the state-size runs likewise run the `restore` benchmark.

use anyhow::{bail, Context};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What `experiments` reads of a `paper` report (the rest is ignored).
#[derive(Clone, Debug, Deserialize)]
pub struct PaperReport {
    pub records_in: u64,
    pub records_out: u64,
    pub elapsed_s: f64,
    pub throughput_rps: f64,
    pub latency_ns: Latency,
    pub cpu_seconds: f64,
    pub peak_rss_bytes: u64,
    pub engine_memory_bytes: u64,
    pub cores: usize,
    /// CPU time the host took from the job's cores (steal), ms.
    #[serde(default)]
    pub host_steal_ms: Option<f64>,
    pub faults_fired: u64,
    pub recovery: Vec<Recovery>,
    pub restarts: u32,
    pub checkpoints_completed: u64,
    pub standby: Option<Standby>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Latency {
    pub p50: u64,
    pub p99: u64,
    pub mean: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Recovery {
    /// The input record an injected fault fired on (`None`: no injected
    /// fault explains this recovery — a stall the machine caused).
    pub tuple_id: Option<u64>,
    pub fault_at_ms: f64,
    pub detect_us: u64,
    pub first_output_us: Option<u64>,
    pub caught_up_us: Option<u64>,
    pub unprovoked: bool,
    /// Its cause as `paper` names it (`injected`, `stall`, …).
    #[serde(default)]
    pub reason: Option<String>,
    /// What the watcher saw, for a stall verdict.
    #[serde(default)]
    pub evidence: Option<String>,
}

impl Recovery {
    /// A recovery from one of the faults the run injected.
    pub fn injected(&self) -> bool {
        match &self.reason {
            Some(r) => r == "injected",
            None => self.tuple_id.is_some() && !self.unprovoked,
        }
    }

    /// What caused it, and what was seen, in words (for a recovery no
    /// injected fault explains).
    pub fn explained(&self) -> String {
        let reason = self.reason.as_deref().unwrap_or("?");
        let tag = if self.unprovoked { "unprovoked " } else { "" };
        match &self.evidence {
            Some(e) => format!("{tag}{reason} at {:.0} ms: {e}", self.fault_at_ms),
            None => format!("{tag}{reason} at {:.0} ms", self.fault_at_ms),
        }
    }

    /// Fault → the job back where it was (the paper's recovery time:
    /// reload and replay); `None` where it was not measured (never the
    /// first output in its place: the tables count those apart).
    pub fn recovery_us(&self) -> Option<u64> {
        self.caught_up_us
    }
}

/// What `experiments` reads of a `restore` report: medians over its runs,
/// and each run.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
pub struct RestoreReport {
    pub state_mb: u64,
    pub keys: u64,
    pub runs: usize,
    pub first_output_ms: f64,
    pub restore_ms: f64,
    pub detect_ms: f64,
    pub caught_up_ms: Option<f64>,
    /// What a restart-all's restore read (`None` under bqbs).
    pub state_bytes: Option<u64>,
    pub per_run: Vec<RestoreRun>,
}

/// One `restore` run.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
pub struct RestoreRun {
    pub first_output_ms: f64,
    pub restore_ms: f64,
    pub caught_up_ms: Option<f64>,
    pub replayed: u64,
    pub insert_s: f64,
    pub run_s: f64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Standby {
    pub takeovers: u64,
    pub queue_bytes_peak: u64,
}

/// One `paper` run: its flags beyond the common ones, and where its files go.
#[derive(Clone, Debug)]
pub struct Run {
    /// A file-name-safe name, unique in the campaign.
    pub name: String,
    pub flags: Vec<String>,
    /// Seconds it is expected to take (the progress bar's weight).
    pub estimate_s: f64,
    /// Write a timeline (`--timeline`); every run writes an interval log
    /// (`--hlog`).
    pub timeline: bool,
}

/// The files a run left: its report and, when asked, its logs.
#[derive(Clone, Debug)]
pub struct Done {
    pub report: PaperReport,
    pub hlog: Option<PathBuf>,
    pub timeline: Option<PathBuf>,
    pub wall_s: f64,
    /// The machine while the run ran: what else used its CPUs.
    pub host: Host,
}

/// What else ran on the machine during a run: the CPU time every other
/// process took (all CPUs' busy time from `/proc/stat`, less the run's
/// own), and the 1-minute load average at the start. A run beside other
/// work measures that work too: `unreliable` says so.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Host {
    pub load_at_start: f64,
    pub others_cpu_s: f64,
    pub steal_ms: Option<f64>,
    /// Why the run's figures may not be the engine's alone (`None`: the
    /// machine was otherwise idle).
    pub unreliable: Option<String>,
}

/// All CPUs' busy time so far, seconds (`/proc/stat`'s first line: every
/// field but idle and iowait), and the 1-minute load average.
fn machine_busy() -> (f64, f64) {
    let busy = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let line = s.lines().next()?.to_string();
            let v: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal …
            let total: u64 = v.iter().take(8).sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            let steal = v.get(7).copied().unwrap_or(0);
            Some(total.saturating_sub(idle).saturating_sub(steal))
        })
        .unwrap_or(0);
    // SAFETY: `sysconf` reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    (busy as f64 / hz, load)
}

impl Host {
    /// The machine during a run that took `cpu_s` of CPU over `wall_s` on
    /// `cores` cores, from [`machine_busy`] before and after.
    fn of(
        before: (f64, f64),
        after: (f64, f64),
        cpu_s: f64,
        wall_s: f64,
        cores: usize,
        steal_ms: Option<f64>,
    ) -> Host {
        let others = (after.0 - before.0 - cpu_s).max(0.0);
        let share = others / (wall_s * cores.max(1) as f64).max(1e-9);
        let stolen = steal_ms.map_or(0.0, |s| s / 1e3 / cpu_s.max(1e-9));
        let mut why = Vec::new();
        if share > 0.25 {
            why.push(format!(
                "other processes took {:.1} s of CPU during the run ({:.0} % of its cores' time)",
                others,
                share * 100.0
            ));
        }
        if stolen > 0.05 {
            why.push(format!(
                "the host stole {:.0} % of the run's CPU time",
                stolen * 100.0
            ));
        }
        Host {
            load_at_start: before.1,
            others_cpu_s: others,
            steal_ms,
            unreliable: (!why.is_empty()).then(|| why.join("; ")),
        }
    }
}

/// Runs `paper` (the binary at `bin`) for each run, into `dir/runs/`.
pub struct Runner {
    pub bin: PathBuf,
    pub dir: PathBuf,
    pub common: Vec<String>,
    /// A run not finished in this long is stopped and counted as failed.
    pub timeout: Duration,
}

impl Runner {
    /// Runs one configuration; its report, or why there is none (the
    /// child's last lines of standard error).
    pub fn run(&self, r: &Run) -> anyhow::Result<Done> {
        let runs = self.dir.join("runs");
        tandem_bench::cleanup::create_dir_all(&runs)?;
        let report = runs.join(format!("{}.json", r.name));
        let hlog = runs.join(format!("{}.hlog", r.name));
        let timeline = r
            .timeline
            .then(|| runs.join(format!("{}.timeline.json", r.name)));
        let mut cmd = Command::new(&self.bin);
        cmd.args(&self.common)
            .args(&r.flags)
            .arg("--report")
            .arg(&report);
        cmd.arg("--hlog").arg(&hlog);
        if let Some(t) = &timeline {
            cmd.arg("--timeline").arg(t);
        }
        let before = machine_busy();
        let (report, wall_s): (PaperReport, f64) = self.child(cmd, r, &report)?;
        let host = Host::of(
            before,
            machine_busy(),
            report.cpu_seconds,
            wall_s,
            report.cores,
            report.host_steal_ms,
        );
        Ok(Done {
            report,
            hlog: Some(hlog),
            timeline,
            wall_s,
            host,
        })
    }

    /// Runs `restore` (the binary at `bin`) with run `r`'s flags; its report
    /// and the run's wall time.
    pub fn run_restore(&self, bin: &Path, r: &Run) -> anyhow::Result<(RestoreReport, f64)> {
        let runs = self.dir.join("runs");
        tandem_bench::cleanup::create_dir_all(&runs)?;
        let report = runs.join(format!("{}.json", r.name));
        let mut cmd = Command::new(bin);
        cmd.args(&r.flags).arg("--report").arg(&report);
        self.child(cmd, r, &report)
    }

    /// Runs `cmd` for run `r` (its command line to `runs/<name>.cmd`, its
    /// output to `runs/<name>.log`), then reads the JSON report it wrote
    /// at `report`.
    fn child<R: serde::de::DeserializeOwned>(
        &self,
        mut cmd: Command,
        r: &Run,
        report: &Path,
    ) -> anyhow::Result<(R, f64)> {
        let log = self.dir.join("runs").join(format!("{}.log", r.name));
        std::fs::write(
            self.dir.join("runs").join(format!("{}.cmd", r.name)),
            format!("{}\n", command_line(&cmd)),
        )?;
        let bin = cmd.get_program().to_owned();
        let stderr = std::fs::File::create(&log)?;
        cmd.stdin(Stdio::null())
            .stdout(stderr.try_clone()?)
            .stderr(stderr);
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", Path::new(&bin).display()))?;
        // A signal that ends this process the hard way waits for the run
        // to clean up first (`wait_child` registers it).
        let status = self.wait(&mut child, r, &log)?;
        if !status.success() {
            bail!("run {} failed ({status}): {}", r.name, tail(&log));
        }
        let text =
            std::fs::read(report).with_context(|| format!("reading {}", report.display()))?;
        let parsed: R = serde_json::from_slice(&text)
            .with_context(|| format!("parsing {}", report.display()))?;
        Ok((parsed, started.elapsed().as_secs_f64()))
    }

    /// Waits for run `r`'s process: its exit status, or an error once it
    /// has been stopped (a signal to this process, passed on to it, or
    /// past the timeout: `SIGTERM`, so that `paper` stops its job and
    /// removes its scratch files).
    fn wait(
        &self,
        child: &mut std::process::Child,
        r: &Run,
        log: &Path,
    ) -> anyhow::Result<std::process::ExitStatus> {
        match tandem_bench::cli::wait_child(child, Some(self.timeout))? {
            tandem_bench::cli::Waited::Exited(s) => Ok(s),
            tandem_bench::cli::Waited::TimedOut => bail!(
                "run {} took longer than {:?} and was stopped: {}",
                r.name,
                self.timeout,
                tail(log)
            ),
        }
    }
}

/// The last lines a run printed (its log is removed with a campaign that
/// fails, when `--out` was made for it).
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
}

/// The binary `name` beside this one (cargo builds a package's binaries
/// into one directory), or `explicit` (given with the flag `flag`).
pub fn sibling_binary(name: &str, flag: &str, explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_file() {
            bail!("{flag} {}: no such file", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let me = std::env::current_exe().context("finding this binary")?;
    let beside = me.with_file_name(name);
    if beside.is_file() {
        return Ok(beside);
    }
    bail!(
        "`{name}` is not beside {} — build them all: `cargo build --release -p tandem-bench` (or name it with {flag})",
        me.display()
    )
}

/// The merged latency histogram of an interval log.
pub fn read_hlog(path: &Path) -> anyhow::Result<hdrhistogram::Histogram<u64>> {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut all = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3)?;
    let mut de = Deserializer::new();
    for e in IntervalLogIterator::new(&text) {
        let e = e.map_err(|e| {
            let hdrhistogram::serialization::interval_log::LogIteratorError::ParseError { offset } =
                e;
            anyhow::anyhow!("{}: not an interval log (at byte {offset})", path.display())
        })?;
        if let LogEntry::Interval(i) = e {
            let bytes = STANDARD
                .decode(i.encoded_histogram())
                .with_context(|| format!("{}: an interval is not base64", path.display()))?;
            let h: hdrhistogram::Histogram<u64> = de
                .deserialize(&mut std::io::Cursor::new(bytes))
                .map_err(|e| {
                    anyhow::anyhow!("{}: an interval does not decode: {e}", path.display())
                })?;
            all.add(&h)?;
        }
    }
    Ok(all)
}

/// `cmd` as a shell would take it: each word quoted where it needs to be.
fn command_line(cmd: &Command) -> String {
    let quote = |w: &std::ffi::OsStr| {
        let w = w.to_string_lossy();
        let plain = !w.is_empty()
            && !w.starts_with('~')
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:=@~,+%".contains(c));
        if plain {
            w.into_owned()
        } else {
            format!("'{}'", w.replace('\'', "'\\''"))
        }
    };
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(quote)
        .collect::<Vec<_>>()
        .join(" ")
}
