//! The paper's tables, computed from the runs (`report.rs` shows them
//! beside the paper's published figures).

use crate::plan::{self, Kind, Spec};
use crate::runs::{Done, PaperReport};
use serde::Serialize;
use std::collections::BTreeMap;

mod machine;
mod state;

pub use machine::{mem_total_bytes, Machine};
pub use state::{state_sizes, StateSizes};

#[derive(Serialize)]
pub struct Results {
    pub profile: String,
    pub machine: Machine,
    pub took_s: f64,
    pub criticality: Criticality,
    pub latency: LatencyTable,
    pub failures: Failures,
    pub resources: Resources,
    pub state_sizes: StateSizes,
    pub runs: Vec<RunSummary>,
}

pub(super) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
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
    /// The operator the other experiments back up: the first of the
    /// ranking a standby can back up (the paper's rule).
    pub backed_up: String,
}

#[derive(Serialize)]
pub struct CritRow {
    pub operator: String,
    pub faults_fired: u64,
    pub recoveries: usize,
    /// Fault → back where it was, over the recoveries, ms.
    pub mean_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub first_output_mean_ms: Option<f64>,
}

pub fn criticality(done: &[(Spec, Done)]) -> Criticality {
    let mut rows = Vec::new();
    let mut faults = 0;
    for (s, d) in done {
        let Kind::Criticality { operator } = &s.kind else {
            continue;
        };
        let rec: Vec<f64> = d
            .report
            .recovery
            .iter()
            .filter(|r| r.injected())
            .filter_map(|r| r.recovery_us())
            .map(|us| us as f64 / 1e3)
            .collect();
        let first: Vec<f64> = d
            .report
            .recovery
            .iter()
            .filter_map(|r| r.first_output_us)
            .map(|us| us as f64 / 1e3)
            .collect();
        faults = faults.max(d.report.faults_fired);
        rows.push(CritRow {
            operator: operator.clone(),
            faults_fired: d.report.faults_fired,
            recoveries: rec.len(),
            mean_ms: (!rec.is_empty()).then(|| rec.iter().sum::<f64>() / rec.len() as f64),
            p99_ms: quantile(rec, 0.99),
            first_output_mean_ms: (!first.is_empty())
                .then(|| first.iter().sum::<f64>() / first.len() as f64),
        });
    }
    let mut ranked: Vec<&CritRow> = rows.iter().collect();
    ranked.sort_by(|a, b| {
        b.mean_ms
            .unwrap_or(0.0)
            .total_cmp(&a.mean_ms.unwrap_or(0.0))
    });
    let ranking: Vec<String> = ranked.iter().map(|r| r.operator.clone()).collect();
    let backed_up = ranking
        .iter()
        .find(|o| plan::STANDBY_CAPABLE.contains(&o.as_str()))
        .cloned()
        .unwrap_or_else(|| "flatmap".into());
    Criticality {
        faults_per_operator: faults,
        checkpoint_interval_ms: 1000,
        rows,
        ranking,
        backed_up,
    }
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
}

/// Recovery is flat across failures when the later ones take at most
/// twice as long as the earlier ones, or at most a millisecond longer
/// (below that a thread's scheduling decides, not the recovery).
pub fn flat(v: &Versus) -> bool {
    v.growth <= 2.0 || v.growth_ms <= 1.0
}

#[derive(Serialize)]
pub struct FailureRow {
    pub config: String,
    /// Median over the repetitions of the k-th failure's recovery, ms.
    pub per_failure_ms: Vec<Option<f64>>,
    pub cumulative_ms: Vec<Option<f64>>,
    pub detect_mean_ms: Option<f64>,
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
            versus.push(Versus {
                config: b.config.clone(),
                speedup_total: sa / sb.max(1e-9),
                speedup_min: pairs
                    .iter()
                    .map(|(a, b)| a / b.max(1e-9))
                    .fold(f64::INFINITY, f64::min),
                growth: mean(&v[v.len() - half..]) / mean(&v[..half]).max(1e-9),
                growth_ms: mean(&v[v.len() - half..]) - mean(&v[..half]),
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
        for d in ds {
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
        }
        let m = |f: &dyn Fn(&PaperReport) -> f64| median(ds.iter().map(|d| f(&d.report)).collect());
        rows.push(ResourceRow {
            config: key,
            cpu_normal_pct: mean(&outside),
            cpu_failure_pct: mean(&inside),
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
        }
    }
}

#[cfg(test)]
mod tests;
