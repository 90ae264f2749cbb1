//! The paper's tables, computed from the runs (`report.rs` shows them
//! beside the paper's published figures).

use crate::plan::{self, Kind, Spec};
use crate::runs::{Done, PaperReport};
use serde::Serialize;
use std::collections::BTreeMap;

mod machine;
mod state;
mod verdict;

pub use machine::{mem_total_bytes, Machine};
pub use state::{state_sizes, StateSizes};
use verdict::{mean_ci, quantile};
pub use verdict::{median, spread, Judged, Verdict, PAPER_CHOICE};

#[derive(Serialize)]
pub struct Results {
    pub profile: String,
    pub machine: Machine,
    pub took_s: f64,
    /// The operator the latency, failure and resource runs back up.
    pub backed_up: String,
    /// Each bar of the summary: its figure per run, and the verdict.
    pub verdicts: Vec<Judged>,
    pub criticality: Criticality,
    pub latency: LatencyTable,
    pub failures: Failures,
    pub resources: Resources,
    pub state_sizes: StateSizes,
    pub runs: Vec<RunSummary>,
}

const MIB: f64 = (1u64 << 20) as f64;

// ---------------------------------------------------------------- table 5

#[derive(Serialize)]
pub struct Criticality {
    pub faults_per_operator: u64,
    pub checkpoint_interval_ms: u64,
    pub rows: Vec<CritRow>,
    /// Operators by mean recovery, longest first.
    pub ranking: Vec<String>,
    /// Whether the first operator of the ranking a standby can back up is
    /// clearly the most critical of those: its 95 % interval lies above
    /// every other's.
    pub clear: bool,
    /// The operator the other experiments back up: the clearly most
    /// critical one a standby can back up (the paper's rule), or — when
    /// none is clearly first — the one the paper's table 5 ranked first.
    pub backed_up: String,
    /// Why, in words.
    pub why: String,
}

#[derive(Serialize)]
pub struct CritRow {
    pub operator: String,
    pub faults_fired: u64,
    /// Recoveries of the injected faults (the figures below are over
    /// these alone).
    pub recoveries: usize,
    /// Recoveries no injected fault explains, counted apart.
    pub unprovoked: usize,
    /// Fault → back where it was (caught up), over the recoveries, ms;
    /// recoveries whose caught-up was not measured are left out (and
    /// counted in `missing_caught_up`).
    pub mean_ms: Option<f64>,
    /// The half-width of the mean's 95 % interval, ms.
    pub ci95_ms: Option<f64>,
    /// The largest, ms (with a handful of faults a p99 would be the
    /// largest anyway).
    pub max_ms: Option<f64>,
    pub missing_caught_up: usize,
    pub first_output_mean_ms: Option<f64>,
}

pub fn criticality(done: &[(Spec, Done)]) -> Criticality {
    let mut rows = Vec::new();
    let mut faults = 0;
    for (s, d) in done {
        let Kind::Criticality { operator } = &s.kind else {
            continue;
        };
        let injected: Vec<_> = d.report.recovery.iter().filter(|r| r.injected()).collect();
        let rec: Vec<f64> = injected
            .iter()
            .filter_map(|r| r.caught_up_us)
            .map(|us| us as f64 / 1e3)
            .collect();
        let first: Vec<f64> = injected
            .iter()
            .filter_map(|r| r.first_output_us)
            .map(|us| us as f64 / 1e3)
            .collect();
        faults = faults.max(d.report.faults_fired);
        let ci = mean_ci(&rec);
        rows.push(CritRow {
            operator: operator.clone(),
            faults_fired: d.report.faults_fired,
            recoveries: injected.len(),
            unprovoked: d.report.recovery.len() - injected.len(),
            mean_ms: ci.map(|c| c.0),
            ci95_ms: ci.map(|c| c.1),
            max_ms: quantile(rec.clone(), 1.0),
            missing_caught_up: injected.len() - rec.len(),
            first_output_mean_ms: mean_ci(&first).map(|c| c.0),
        });
    }
    let mut ranked: Vec<&CritRow> = rows.iter().collect();
    ranked.sort_by(|a, b| {
        b.mean_ms
            .unwrap_or(0.0)
            .total_cmp(&a.mean_ms.unwrap_or(0.0))
    });
    let ranking: Vec<String> = ranked.iter().map(|r| r.operator.clone()).collect();
    let (clear, backed_up, why) = choose(&ranked);
    Criticality {
        faults_per_operator: faults,
        checkpoint_interval_ms: 1000,
        rows,
        ranking,
        clear,
        backed_up,
        why,
    }
}

/// The paper's rule with its significance: the first of the ranking a
/// standby can back up, when its 95 % interval lies wholly above every
/// other such operator's; otherwise the paper's own choice.
fn choose(ranked: &[&CritRow]) -> (bool, String, String) {
    let capable: Vec<&&CritRow> = ranked
        .iter()
        .filter(|r| plan::STANDBY_CAPABLE.contains(&r.operator.as_str()))
        .collect();
    let interval = |r: &CritRow| match (r.mean_ms, r.ci95_ms) {
        (Some(m), Some(h)) => (m - h, m + h),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    };
    if let Some((top, rest)) = capable.split_first() {
        let low = interval(top).0;
        if !rest.is_empty() && rest.iter().all(|r| low > interval(r).1) {
            return (
                true,
                top.operator.clone(),
                format!(
                    "{} is clearly the most critical operator a standby can back up: its 95 % interval lies above every other's",
                    top.operator
                ),
            );
        }
    }
    (
        false,
        PAPER_CHOICE.to_string(),
        format!(
            "No operator is clearly most critical (the 95 % intervals of the recovery means overlap: with restart-all every failure restarts the whole job, and the time since the last checkpoint decides more than the operator); backing up {PAPER_CHOICE}, the operator the paper's table 5 ranked first"
        ),
    )
}

// ---------------------------------------------------------------- table 6

#[derive(Serialize)]
pub struct LatencyTable {
    pub rate: f64,
    pub repetitions: usize,
    pub rows: Vec<LatencyRow>,
    /// Each standby configuration against none at the largest size.
    pub overheads: Vec<Overhead>,
}

#[derive(Serialize, Clone)]
pub struct LatencyRow {
    pub records: u64,
    pub config: String,
    /// Medians over the repetitions.
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The runs' smallest and largest mean, ms: the noise the medians
    /// are read against.
    pub mean_range_ms: [f64; 2],
    pub processing_s: f64,
    pub cpu_seconds: f64,
    pub cpu_pct: f64,
    pub engine_mib: f64,
    pub queue_peak_mib: f64,
    pub runs: usize,
}

#[derive(Serialize)]
pub struct Overhead {
    pub records: u64,
    pub config: String,
    /// (median config / median none − 1) × 100.
    pub mean_latency_pct: f64,
    pub p50_latency_pct: f64,
    pub p99_latency_pct: f64,
    /// median config − median none, µs.
    pub mean_latency_delta_us: f64,
    pub p50_latency_delta_us: f64,
    /// The mean latency's overhead per repetition (run i of each paired).
    pub mean_latency_pct_runs: Vec<f64>,
}

pub fn latency(p: &plan::Profile, done: &[(Spec, Done)]) -> LatencyTable {
    let mut groups: BTreeMap<(u64, String), Vec<&PaperReport>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for (s, d) in done {
        if let Kind::Latency { size, config, .. } = &s.kind {
            groups
                .entry((*size, config.key.clone()))
                .or_default()
                .push(&d.report);
            if !order.contains(&config.key) {
                order.push(config.key.clone());
            }
        }
    }
    let mut rows = Vec::new();
    let sizes: Vec<u64> = {
        let mut v: Vec<u64> = groups.keys().map(|k| k.0).collect();
        v.dedup();
        v
    };
    for &size in &sizes {
        for key in &order {
            let Some(rs) = groups.get(&(size, key.clone())) else {
                continue;
            };
            let m = |f: &dyn Fn(&PaperReport) -> f64| {
                median(rs.iter().map(|r| f(r)).collect()).unwrap_or(f64::NAN)
            };
            rows.push(LatencyRow {
                records: size,
                config: key.clone(),
                mean_ms: m(&|r| r.latency_ns.mean as f64 / 1e6),
                p50_ms: m(&|r| r.latency_ns.p50 as f64 / 1e6),
                p99_ms: m(&|r| r.latency_ns.p99 as f64 / 1e6),
                mean_range_ms: rs.iter().fold([f64::MAX, 0.0], |[lo, hi], r| {
                    let x = r.latency_ns.mean as f64 / 1e6;
                    [lo.min(x), hi.max(x)]
                }),
                processing_s: m(&|r| r.elapsed_s),
                cpu_seconds: m(&|r| r.cpu_seconds),
                cpu_pct: m(&|r| 100.0 * r.cpu_seconds / (r.elapsed_s * r.cores as f64).max(1e-9)),
                engine_mib: m(&|r| r.engine_memory_bytes as f64 / MIB),
                queue_peak_mib: m(&|r| {
                    r.standby
                        .as_ref()
                        .map_or(0.0, |s| s.queue_bytes_peak as f64 / MIB)
                }),
                runs: rs.len(),
            });
        }
    }
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let base = rows
        .iter()
        .find(|r| r.records == largest && r.config == "none")
        .cloned();
    let overheads = match base {
        Some(b) => rows
            .iter()
            .filter(|r| r.records == largest && r.config.starts_with("bqbs"))
            .map(|r| Overhead {
                records: largest,
                config: r.config.clone(),
                mean_latency_pct: (r.mean_ms / b.mean_ms - 1.0) * 100.0,
                p50_latency_pct: (r.p50_ms / b.p50_ms - 1.0) * 100.0,
                p99_latency_pct: (r.p99_ms / b.p99_ms - 1.0) * 100.0,
                mean_latency_delta_us: (r.mean_ms - b.mean_ms) * 1e3,
                p50_latency_delta_us: (r.p50_ms - b.p50_ms) * 1e3,
                mean_latency_pct_runs: groups[&(largest, r.config.clone())]
                    .iter()
                    .zip(&groups[&(largest, "none".to_string())])
                    .map(|(c, n)| {
                        (c.latency_ns.mean as f64 / (n.latency_ns.mean as f64).max(1.0) - 1.0)
                            * 100.0
                    })
                    .collect(),
            })
            .collect(),
        None => Vec::new(),
    };
    LatencyTable {
        rate: p.latency_rate,
        repetitions: p.latency_reps,
        rows,
        overheads,
    }
}

// ---------------------------------------------------------------- table 7

#[derive(Serialize)]
pub struct Failures {
    pub failures: u32,
    pub rows: Vec<FailureRow>,
    /// Per BQBS mode, against restart-all with the paper's 30 s interval.
    pub versus_restart_all: Vec<Versus>,
}

#[derive(Serialize)]
pub struct Versus {
    pub config: String,
    /// restart-all (30 s) over this: the total over the four failures, and
    /// the smallest ratio of any one failure.
    pub speedup_total: f64,
    pub speedup_min: f64,
    /// Growth: mean recovery of the later half of the failures over the
    /// earlier half's (the paper's grew 31 s → 157 s: > 2), and the
    /// difference, ms.
    pub growth: f64,
    pub growth_ms: f64,
    /// The same figures per repetition (run i of each strategy paired).
    pub speedup_min_runs: Vec<f64>,
    pub growth_runs: Vec<f64>,
    pub growth_ms_runs: Vec<f64>,
}

#[derive(Serialize)]
pub struct FailureRow {
    pub config: String,
    /// Median over the repetitions of the k-th failure's recovery, ms.
    pub per_failure_ms: Vec<Option<f64>>,
    pub cumulative_ms: Vec<Option<f64>>,
    pub detect_mean_ms: Option<f64>,
    /// Injected recoveries whose caught-up was not measured (left out of
    /// the figures above).
    pub missing_caught_up: usize,
    /// Recoveries no injected fault explains (the machine stalled a
    /// worker), over the repetitions.
    pub unprovoked: usize,
    /// Each of them: the run, its cause and the evidence.
    pub unexplained: Vec<String>,
    pub runs: usize,
}

pub fn failures(done: &[(Spec, Done)]) -> Failures {
    let mut groups: BTreeMap<String, Vec<&PaperReport>> = BTreeMap::new();
    let mut order = Vec::new();
    for (s, d) in done {
        if let Kind::Failures { config, .. } = &s.kind {
            groups
                .entry(config.key.clone())
                .or_default()
                .push(&d.report);
            if !order.contains(&config.key) {
                order.push(config.key.clone());
            }
        }
    }
    let k = plan::FAILURES as usize;
    let mut rows = Vec::new();
    let mut runs_of: BTreeMap<String, Vec<Vec<f64>>> = BTreeMap::new();
    for key in &order {
        let rs = &groups[key];
        let per_run: Vec<Vec<f64>> = rs
            .iter()
            .map(|r| {
                let mut v: Vec<_> = r.recovery.iter().filter(|x| x.injected()).collect();
                v.sort_by(|a, b| a.fault_at_ms.total_cmp(&b.fault_at_ms));
                v.iter()
                    .map(|x| x.recovery_us().map_or(f64::NAN, |us| us as f64 / 1e3))
                    .collect()
            })
            .collect();
        runs_of.insert(key.clone(), per_run.clone());
        let per_failure: Vec<Option<f64>> = (0..k)
            .map(|i| median(per_run.iter().filter_map(|v| v.get(i).copied()).collect()))
            .collect();
        let mut acc = 0.0;
        let cumulative = per_failure
            .iter()
            .map(|x| {
                x.map(|v| {
                    acc += v;
                    acc
                })
            })
            .collect();
        let detect: Vec<f64> = rs
            .iter()
            .flat_map(|r| {
                r.recovery
                    .iter()
                    .filter(|x| x.injected())
                    .map(|x| x.detect_us as f64 / 1e3)
            })
            .collect();
        rows.push(FailureRow {
            config: key.clone(),
            per_failure_ms: per_failure,
            cumulative_ms: cumulative,
            detect_mean_ms: (!detect.is_empty())
                .then(|| detect.iter().sum::<f64>() / detect.len() as f64),
            missing_caught_up: per_run.iter().flatten().filter(|x| x.is_nan()).count(),
            unprovoked: rs
                .iter()
                .map(|r| r.recovery.iter().filter(|x| !x.injected()).count())
                .sum(),
            unexplained: rs
                .iter()
                .enumerate()
                .flat_map(|(i, r)| {
                    r.recovery
                        .iter()
                        .filter(|x| !x.injected())
                        .map(move |x| format!("run {}: {}", i + 1, x.explained()))
                })
                .collect(),
            runs: rs.len(),
        });
    }
    let mut versus = Vec::new();
    if let Some(ra) = rows.iter().find(|r| r.config == "restart-all-30s") {
        for b in rows.iter().filter(|r| r.config.starts_with("bqbs")) {
            let pairs: Vec<(f64, f64)> = ra
                .per_failure_ms
                .iter()
                .zip(&b.per_failure_ms)
                .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
                .collect();
            let v: Vec<f64> = b.per_failure_ms.iter().flatten().copied().collect();
            if pairs.is_empty() || v.len() < 2 {
                continue;
            }
            let (sa, sb) = pairs
                .iter()
                .fold((0.0, 0.0), |(x, y), (a, b)| (x + a, y + b));
            let half = v.len() / 2;
            let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
            // Run i of restart-all against run i of this strategy.
            let (mut speedup_min_runs, mut growth_runs, mut growth_ms_runs) =
                (Vec::new(), Vec::new(), Vec::new());
            for (ra_i, b_i) in runs_of[&ra.config].iter().zip(&runs_of[&b.config]) {
                let m = ra_i
                    .iter()
                    .zip(b_i)
                    .filter(|(a, b)| a.is_finite() && b.is_finite())
                    .map(|(a, b)| a / b.max(1e-9))
                    .fold(f64::INFINITY, f64::min);
                if m.is_finite() {
                    speedup_min_runs.push(m);
                }
                let w: Vec<f64> = b_i.iter().copied().filter(|x| x.is_finite()).collect();
                if w.len() >= 2 {
                    let h = w.len() / 2;
                    let (early, late) = (mean(&w[..h]), mean(&w[w.len() - h..]));
                    growth_runs.push(late / early.max(1e-9));
                    growth_ms_runs.push(late - early);
                }
            }
            versus.push(Versus {
                config: b.config.clone(),
                speedup_total: sa / sb.max(1e-9),
                speedup_min: pairs
                    .iter()
                    .map(|(a, b)| a / b.max(1e-9))
                    .fold(f64::INFINITY, f64::min),
                growth: mean(&v[v.len() - half..]) / mean(&v[..half]).max(1e-9),
                growth_ms: mean(&v[v.len() - half..]) - mean(&v[..half]),
                speedup_min_runs,
                growth_runs,
                growth_ms_runs,
            });
        }
    }
    Failures {
        failures: plan::FAILURES,
        rows,
        versus_restart_all: versus,
    }
}

// ---------------------------------------------------------------- table 8

#[derive(Serialize)]
pub struct Resources {
    pub rows: Vec<ResourceRow>,
    /// The window around each fault taken as "during a failure", ms.
    pub window_ms: [f64; 2],
}

#[derive(Serialize)]
pub struct ResourceRow {
    pub config: String,
    /// CPU, % of the cores the job ran on, from the 10 ms timeline buckets
    /// of the resource runs (idle workers park): between the faults (the
    /// whole run for `none`), and in the windows around them. Means over
    /// the runs.
    pub cpu_normal_pct: Option<f64>,
    pub cpu_failure_pct: Option<f64>,
    /// The same, per run (the runs in repetition order).
    pub cpu_normal_pct_runs: Vec<f64>,
    pub cpu_failure_pct_runs: Vec<f64>,
    /// The whole runs' CPU time, seconds (median).
    pub cpu_seconds: Option<f64>,
    pub rss_mib: Option<f64>,
    pub engine_mib: Option<f64>,
    pub queue_peak_mib: Option<f64>,
    /// Peak RSS over the machine's memory, % (the paper's δ).
    pub memory_pct: Option<f64>,
    pub runs: usize,
}

/// A fault's window: from just before it to half a second after.
const WINDOW: [f64; 2] = [-50.0, 500.0];

pub fn resources(done: &[(Spec, Done)]) -> Resources {
    let mem = mem_total_bytes().max(1) as f64;
    let mut order: Vec<String> = Vec::new();
    let mut groups: BTreeMap<String, Vec<&Done>> = BTreeMap::new();
    for (s, d) in done {
        if let Kind::Resources { config } = &s.kind {
            groups.entry(config.key.clone()).or_default().push(d);
            if !order.contains(&config.key) {
                order.push(config.key.clone());
            }
        }
    }
    let mean = |v: &Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let mut rows = Vec::new();
    for key in order {
        let ds = &groups[&key];
        let (mut inside, mut outside) = (Vec::new(), Vec::new());
        let (mut normal_runs, mut failure_runs) = (Vec::new(), Vec::new());
        for d in ds {
            let (i0, o0) = (inside.len(), outside.len());
            let Some(tl) = d
                .timeline
                .as_ref()
                .and_then(|p| tandem_bench::live::read_timeline(p).ok())
            else {
                continue;
            };
            let cores = d.report.cores.max(1) as f64;
            let active: Vec<_> = tl.buckets.iter().filter(|b| b.rate > 0.0).collect();
            let (Some(first), Some(last)) = (active.first(), active.last()) else {
                continue;
            };
            for b in &tl.buckets {
                if b.t_ms < first.t_ms || b.t_ms > last.t_ms {
                    continue;
                }
                let near = tl
                    .faults
                    .iter()
                    .any(|(at, _)| b.t_ms >= at + WINDOW[0] && b.t_ms <= at + WINDOW[1]);
                let pct = 100.0 * b.cpu_cores / cores;
                if near {
                    inside.push(pct);
                } else {
                    outside.push(pct);
                }
            }
            if let Some(x) = mean(&outside[o0..].to_vec()) {
                normal_runs.push(x);
            }
            if let Some(x) = mean(&inside[i0..].to_vec()) {
                failure_runs.push(x);
            }
        }
        let m = |f: &dyn Fn(&PaperReport) -> f64| median(ds.iter().map(|d| f(&d.report)).collect());
        rows.push(ResourceRow {
            config: key,
            cpu_normal_pct: mean(&outside),
            cpu_failure_pct: mean(&inside),
            cpu_normal_pct_runs: normal_runs,
            cpu_failure_pct_runs: failure_runs,
            cpu_seconds: m(&|r| r.cpu_seconds),
            rss_mib: m(&|r| r.peak_rss_bytes as f64 / MIB),
            engine_mib: m(&|r| r.engine_memory_bytes as f64 / MIB),
            queue_peak_mib: m(&|r| {
                r.standby
                    .as_ref()
                    .map_or(0.0, |s| s.queue_bytes_peak as f64 / MIB)
            }),
            memory_pct: m(&|r| 100.0 * r.peak_rss_bytes as f64 / mem),
            runs: ds.len(),
        });
    }
    Resources {
        rows,
        window_ms: WINDOW,
    }
}

// ---------------------------------------------------------------- runs

#[derive(Serialize)]
pub struct RunSummary {
    pub name: String,
    pub flags: Vec<String>,
    pub wall_s: f64,
    pub records_in: u64,
    pub records_out: u64,
    pub throughput_rps: f64,
    pub mean_latency_ms: f64,
    pub p99_latency_ms: f64,
    pub cpu_seconds: f64,
    pub peak_rss_mib: f64,
    pub faults_fired: u64,
    pub restarts: u32,
    pub takeovers: u64,
    pub checkpoints_completed: u64,
    pub recovery_ms: Vec<Option<f64>>,
    /// What else ran on the machine meanwhile.
    pub host: crate::runs::Host,
}

impl RunSummary {
    pub fn of(s: &Spec, d: &Done) -> RunSummary {
        let r = &d.report;
        RunSummary {
            name: s.run.name.clone(),
            flags: s.run.flags.clone(),
            wall_s: d.wall_s,
            records_in: r.records_in,
            records_out: r.records_out,
            throughput_rps: r.throughput_rps,
            mean_latency_ms: r.latency_ns.mean as f64 / 1e6,
            p99_latency_ms: r.latency_ns.p99 as f64 / 1e6,
            cpu_seconds: r.cpu_seconds,
            peak_rss_mib: r.peak_rss_bytes as f64 / MIB,
            faults_fired: r.faults_fired,
            restarts: r.restarts,
            takeovers: r.standby.as_ref().map_or(0, |s| s.takeovers),
            checkpoints_completed: r.checkpoints_completed,
            recovery_ms: r
                .recovery
                .iter()
                .map(|x| x.recovery_us().map(|us| us as f64 / 1e3))
                .collect(),
            host: d.host.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
