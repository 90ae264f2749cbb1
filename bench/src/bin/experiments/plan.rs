//! Which `paper` runs each experiment is made of, per profile.

use crate::runs::Run;

/// The sizes of a campaign.
#[derive(Clone, Debug)]
pub struct Profile {
    pub name: &'static str,
    /// Table 5: faults injected into each operator, over a run of this many
    /// records at this rate.
    pub crit_faults: u32,
    pub crit_records: u64,
    pub crit_rate: f64,
    /// Table 6: the paper's sizes, fed at this rate, repeated.
    pub sizes: Vec<u64>,
    pub latency_rate: f64,
    pub latency_reps: usize,
    /// Table 7: four failures into the backed-up operator over a run of
    /// this many records at this rate, repeated.
    pub failure_records: u64,
    pub failure_rate: f64,
    pub failure_reps: usize,
    /// Table 8: the failure runs again with idle workers parking at once,
    /// so that CPU time is work, not spinning; repeated.
    pub resource_reps: usize,
    /// The state-size axis: keyed state in MB, and runs of `restore` at
    /// that size per strategy (a run at 1 GB takes minutes).
    pub state: Vec<(u64, usize)>,
}

/// The failures of table 7.
pub const FAILURES: u32 = 4;

/// The operators faults go into for table 5 (the paper's Connect is `map`:
/// it connects the records with the like → level mapping).
pub const OPERATORS: [&str; 4] = ["flatmap", "filter", "map", "keyed"];

/// The operators `paper --standby` can back up.
pub const STANDBY_CAPABLE: [&str; 3] = ["flatmap", "filter", "keyed"];

/// The checkpoint interval of the paper's experiments.
pub const PAPER_INTERVAL_MS: u64 = 30_000;

impl Profile {
    pub fn named(name: &str) -> Profile {
        let quick = Profile {
            name: "quick",
            crit_faults: 10,
            crit_records: 300_000,
            crit_rate: 300_000.0,
            sizes: vec![100_000, 500_000, 1_000_000],
            latency_rate: 500_000.0,
            // At least 3 runs of everything a verdict rests on: a verdict
            // is judged on each run, and one the runs disagree on says so.
            latency_reps: 3,
            failure_records: 1_000_000,
            failure_rate: 250_000.0,
            failure_reps: 3,
            resource_reps: 3,
            state: vec![(10, 1), (100, 1)],
        };
        match name {
            "full" => Profile {
                name: "full",
                crit_faults: 50,
                crit_records: 2_000_000,
                crit_rate: 250_000.0,
                latency_reps: 5,
                // Long enough for the paper's 30 s interval to matter.
                failure_records: 4_000_000,
                failure_reps: 5,
                resource_reps: 5,
                state: vec![(10, 3), (100, 3), (1000, 1)],
                ..quick
            },
            _ => quick,
        }
    }
}

/// A strategy as the tables name it, and its `paper` flags.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Config {
    /// Row label, e.g. `bqbs-warm`.
    pub key: String,
    pub flags: Vec<String>,
}

fn config(key: &str, flags: &[&str]) -> Config {
    Config {
        key: key.to_string(),
        flags: flags.iter().map(|s| s.to_string()).collect(),
    }
}

fn bqbs(key: &str, target: &str, mode: &str, extra: &[&str]) -> Config {
    let mut c = config(
        key,
        &[
            "--strategy",
            "bqbs",
            "--standby",
            target,
            "--standby-mode",
            mode,
        ],
    );
    c.flags.extend(extra.iter().map(|s| s.to_string()));
    c
}

/// Table 6's strategies (all in the job's process: process isolation,
/// `paper --isolation process`, is not one of the paper's rows).
pub fn latency_configs(target: &str) -> Vec<Config> {
    vec![
        config("none", &["--strategy", "none"]),
        config(
            "restart-all",
            &[
                "--strategy",
                "restart-all",
                "--checkpoint-interval-ms",
                "1000",
            ],
        ),
        bqbs("bqbs-warm", target, "warm", &[]),
        bqbs("bqbs-hot", target, "hot", &[]),
        bqbs(
            "bqbs-warm+checkpoints",
            target,
            "warm",
            &["--checkpoint-interval-ms", "1000"],
        ),
    ]
}

/// Table 7's strategies.
pub fn failure_configs(target: &str) -> Vec<Config> {
    vec![
        config(
            "restart-all-1s",
            &[
                "--strategy",
                "restart-all",
                "--checkpoint-interval-ms",
                "1000",
            ],
        ),
        config(
            "restart-all-30s",
            &[
                "--strategy",
                "restart-all",
                "--checkpoint-interval-ms",
                &PAPER_INTERVAL_MS.to_string(),
            ],
        ),
        bqbs("bqbs-warm", target, "warm", &[]),
        // A warm standby that follows the recovery points' deltas: a
        // takeover restores nothing and replays only the records since
        // the newest point (50 ms apart).
        bqbs("bqbs-warm-follow", target, "warm", &["--standby-follow"]),
        bqbs("bqbs-hot", target, "hot", &[]),
    ]
}

/// Table 8's strategies: as table 7's (without the 30 s interval, whose
/// checkpoints cost nothing in so short a run), and none; idle workers
/// park at once (`--idle-spin-us 0 --idle-yield-us 0`): the default
/// policy spins an idle core for up to half a millisecond, which on a
/// machine at rest is all its idle time.
pub fn resource_configs(target: &str) -> Vec<Config> {
    let mut v = vec![config("none", &["--strategy", "none"])];
    v.extend(
        failure_configs(target)
            .into_iter()
            .filter(|c| c.key != "restart-all-30s"),
    );
    for c in &mut v {
        if c.key == "restart-all-1s" {
            c.key = "restart-all".into();
        }
        c.flags
            .extend(["--idle-spin-us", "0", "--idle-yield-us", "0"].map(String::from));
    }
    v
}

/// The state-size axis's strategies, as `restore` flags: restart-all
/// (incremental checkpoints every 2 s, lazily restored), a warm standby
/// that restores the newest recovery point, and one that follows the
/// points' deltas (a takeover restores nothing).
pub fn state_configs() -> Vec<Config> {
    vec![
        config(
            "restart-all",
            &[
                "--strategy",
                "restart-all",
                "--checkpoint-interval-ms",
                "2000",
            ],
        ),
        config("bqbs-warm", &["--strategy", "bqbs"]),
        config(
            "bqbs-warm-follow",
            &["--strategy", "bqbs", "--standby-follow"],
        ),
    ]
}

/// A state-size run: `restore` with `mb` of keyed state under `config`.
#[derive(Clone, Debug)]
pub struct StateSpec {
    pub mb: u64,
    pub config: Config,
    pub run: Run,
}

/// The state-size axis's runs: each size under each strategy, one panic in
/// the keyed operator once the state is built (`restore` checks every
/// output and reports fault → first output and caught up).
pub fn state_sizes(p: &Profile) -> Vec<StateSpec> {
    let mut out = Vec::new();
    for &(mb, runs) in &p.state {
        for c in state_configs() {
            let mut flags = vec![
                "--state-mb".to_string(),
                mb.to_string(),
                "--runs".into(),
                runs.to_string(),
            ];
            flags.extend(c.flags.iter().cloned());
            // Inserts at ~1 M keys/s at 1 GB (faster when smaller), the
            // points or checkpoints after them, and the replay.
            let keys_s = mb as f64 * 1e6 / 24.0 / 1e6;
            let per_run = 3.0 + keys_s * 3.0;
            out.push(StateSpec {
                mb,
                run: Run {
                    name: format!("state-{mb}mb-{}", c.key),
                    flags,
                    estimate_s: per_run * runs as f64,
                    timeline: false,
                },
                config: c,
            });
        }
    }
    out
}

/// What a run is for.
#[derive(Clone, Debug)]
pub enum Kind {
    Criticality {
        operator: String,
    },
    Latency {
        size: u64,
        config: Config,
    },
    Failures {
        config: Config,
    },
    /// With faults unless the strategy is `none`.
    Resources {
        config: Config,
    },
}

#[derive(Clone, Debug)]
pub struct Spec {
    pub kind: Kind,
    pub run: Run,
}

/// Seconds a run of `records` at `rate` takes beyond its input: the
/// input is generated first (~1 µs a record), and a process starts.
fn estimate(records: u64, rate: f64) -> f64 {
    records as f64 / rate + records as f64 * 1.2e-6 + 0.3
}

fn records_flags(records: u64, rate: f64) -> Vec<String> {
    vec![
        "--records".into(),
        records.to_string(),
        "--rate".into(),
        rate.to_string(),
    ]
}

pub fn criticality(p: &Profile) -> Vec<Spec> {
    OPERATORS
        .iter()
        .map(|op| {
            let mut flags = records_flags(p.crit_records, p.crit_rate);
            flags.extend(
                [
                    "--strategy",
                    "restart-all",
                    "--checkpoint-interval-ms",
                    "1000",
                    "--fault",
                ]
                .map(String::from),
            );
            flags.push(format!("panic@{op}:~{}", p.crit_faults));
            Spec {
                kind: Kind::Criticality {
                    operator: op.to_string(),
                },
                run: Run {
                    name: format!("criticality-{op}"),
                    flags,
                    // Each restart replays up to a second of input.
                    estimate_s: estimate(p.crit_records, p.crit_rate) + p.crit_faults as f64 * 0.15,
                    timeline: false,
                },
            }
        })
        .collect()
}

/// Tables 6 and 7's runs, backing up `target`. Repetitions are the outer
/// loop: a drift of the machine spreads over every configuration.
pub fn rest(p: &Profile, target: &str) -> Vec<Spec> {
    let mut out = Vec::new();
    for rep in 0..p.latency_reps.max(p.failure_reps).max(p.resource_reps) {
        if rep < p.latency_reps {
            for &size in &p.sizes {
                for c in latency_configs(target) {
                    let mut flags = records_flags(size, p.latency_rate);
                    flags.extend(c.flags.iter().cloned());
                    out.push(Spec {
                        run: Run {
                            name: format!("latency-{size}-{}-{rep}", c.key),
                            flags,
                            estimate_s: estimate(size, p.latency_rate),
                            timeline: false,
                        },
                        kind: Kind::Latency { size, config: c },
                    });
                }
            }
        }
        if rep < p.failure_reps {
            for c in failure_configs(target) {
                let mut flags = records_flags(p.failure_records, p.failure_rate);
                flags.extend(c.flags.iter().cloned());
                flags.push("--fault".into());
                flags.push(format!("panic@{target}:~{FAILURES}"));
                out.push(Spec {
                    run: Run {
                        name: format!("failures-{}-{rep}", c.key),
                        flags,
                        estimate_s: estimate(p.failure_records, p.failure_rate)
                            + if c.key.starts_with("restart") {
                                1.0
                            } else {
                                0.0
                            },
                        timeline: rep == 0,
                    },
                    kind: Kind::Failures { config: c },
                });
            }
        }
        if rep < p.resource_reps {
            for c in resource_configs(target) {
                let mut flags = records_flags(p.failure_records, p.failure_rate);
                flags.extend(c.flags.iter().cloned());
                if c.key != "none" {
                    flags.push("--fault".into());
                    flags.push(format!("panic@{target}:~{FAILURES}"));
                }
                out.push(Spec {
                    run: Run {
                        name: format!("resources-{}-{rep}", c.key),
                        flags,
                        estimate_s: estimate(p.failure_records, p.failure_rate),
                        timeline: true,
                    },
                    kind: Kind::Resources { config: c },
                });
            }
        }
    }
    out
}

/// The estimate of [`rest`]'s runs, before the target is known.
pub fn estimate_rest(p: &Profile) -> f64 {
    rest(p, "flatmap").iter().map(|s| s.run.estimate_s).sum()
}
