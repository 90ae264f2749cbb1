//! Fault schedules: several faults in one run, written out or drawn at
//! random from a seed.
//!
//! ```text
//! SPEC,SPEC,…                       the faults listed (see `spec`)
//! random:SEED:COUNT[:KINDS[:TARGETS]]
//!                                   COUNT faults drawn from SEED; KINDS and
//!                                   TARGETS (`+`-separated, e.g.
//!                                   panic+stall:flatmap+keyed) narrow what
//!                                   the workload allows
//! ```
//!
//! A random schedule is drawn against a [`Space`] — the input's length,
//! the checkpoints to expect and the (kind, target) pairs the workload can
//! recover from — and [`ScheduleSpec::expand`] gives the faults it drew, which
//! print as a list: that line reproduces the run exactly, whatever later
//! versions of the generator draw.
//!
//! The distribution, per fault: a (kind, target) pair uniformly among
//! those allowed; an input record uniformly in the middle 90 % of the input
//! (a checkpoint id uniformly in `1..=checkpoints`); then, by kind — a
//! panic is a burst of 2–3 failures one time in eight; a stall lasts 1–40
//! ms (`stall-forever` pairs: forever); slow adds 20–200 µs to each of
//! 100–1000 records; mute lasts 5–60 ms; a faulty standby fails before or
//! during its takeover, a corruption flips or truncates, an I/O error is
//! EIO or ENOSPC on write or fsync, each with equal odds. A kind the space
//! marks [`Space::once`] is drawn at most once per schedule (a schedule
//! may then hold fewer faults than asked, when nothing else is allowed).
//!
//! ```
//! use tandem_fault_inject::{Schedule, ScheduleSpec, Space};
//!
//! let spec: ScheduleSpec = "random:7:3:panic+stall:flatmap".parse().unwrap();
//! let space = Space::new(100_000).allow("panic", "flatmap").allow("stall", "flatmap")
//!     .allow("panic", "keyed");
//! let s = spec.expand(&space).unwrap();
//! assert_eq!(s.faults.len(), 3);
//! assert!(s.faults.iter().all(|f| f.target == "flatmap"));
//! // The drawn schedule prints as a list that parses back to itself.
//! let again: ScheduleSpec = s.to_string().parse().unwrap();
//! assert_eq!(again.expand(&space).unwrap(), s);
//! ```

use crate::spec::{
    Damage, Errno, FaultKind, FaultSpec, IoStep, ParseFaultError, StandbyPhase, When,
};
use std::fmt;
use std::str::FromStr;

/// A schedule as written: a list of faults, or a random draw to expand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleSpec {
    /// These faults.
    List(Vec<FaultSpec>),
    /// `count` faults drawn from `seed`, of `kinds` on `targets` (empty:
    /// whatever the space allows).
    Random {
        /// The generator's seed.
        seed: u64,
        /// How many faults.
        count: u64,
        /// Kind names to draw from.
        kinds: Vec<String>,
        /// Targets to draw from.
        targets: Vec<String>,
    },
}

/// The faults of one run, concrete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// In the order they were written or drawn.
    pub faults: Vec<FaultSpec>,
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.faults.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ScheduleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleSpec::List(v) => Schedule { faults: v.clone() }.fmt(f),
            ScheduleSpec::Random {
                seed,
                count,
                kinds,
                targets,
            } => {
                write!(f, "random:{seed}:{count}")?;
                if !kinds.is_empty() || !targets.is_empty() {
                    write!(f, ":{}", kinds.join("+"))?;
                }
                if !targets.is_empty() {
                    write!(f, ":{}", targets.join("+"))?;
                }
                Ok(())
            }
        }
    }
}

/// Kind names a random schedule may draw (`stall-forever`: a stall that
/// never ends on its own).
pub const KINDS: [&str; 14] = [
    "panic",
    "stall",
    "stall-forever",
    "slow",
    "cut",
    "mute",
    "standby",
    "corrupt",
    "commit",
    "ioerror",
    "crash",
    "kill",
    "abort",
    "segv",
];

impl FromStr for ScheduleSpec {
    type Err = ParseFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix("random:") {
            let bad = |what: &'static str, v: &str| ParseFaultError::Value {
                spec: s.to_string(),
                what,
                value: v.to_string(),
            };
            let parts: Vec<&str> = rest.split(':').collect();
            if parts.len() < 2 || parts.len() > 4 {
                return Err(ParseFaultError::Arity {
                    spec: s.to_string(),
                    kind: "random",
                    expected: "SEED:COUNT[:KINDS[:TARGETS]]",
                });
            }
            let seed = parts[0].parse().map_err(|_| bad("seed", parts[0]))?;
            let count = parts[1]
                .parse::<u64>()
                .ok()
                .filter(|c| *c <= crate::spec::MAX_FAULTS)
                .ok_or_else(|| bad("fault count (0 to 10000)", parts[1]))?;
            let list = |i: usize| -> Vec<String> {
                parts
                    .get(i)
                    .map(|v| {
                        v.split('+')
                            .filter(|x| !x.is_empty())
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let kinds = list(2);
            if let Some(k) = kinds.iter().find(|k| !KINDS.contains(&k.as_str())) {
                return Err(bad("fault kind (see the kinds a schedule may draw)", k));
            }
            return Ok(ScheduleSpec::Random {
                seed,
                count,
                kinds,
                targets: list(3),
            });
        }
        let faults = s
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<FaultSpec>, _>>()?;
        if faults.is_empty() {
            return Err(ParseFaultError::Shape(s.to_string()));
        }
        Ok(ScheduleSpec::List(faults))
    }
}

/// What a random schedule may draw from.
#[derive(Clone, Debug, Default)]
pub struct Space {
    /// Input records (positions are drawn among them).
    pub records: u64,
    /// Checkpoint ids to draw from (`1..=checkpoints`; 0: none).
    pub checkpoints: u64,
    /// (kind name, target) pairs the workload recovers from.
    pub pairs: Vec<(String, String)>,
    /// Kinds drawn at most once per schedule (two of them at once may be
    /// more than the workload recovers from).
    pub once: Vec<String>,
}

impl Space {
    /// A space over `records` input records, allowing nothing yet.
    pub fn new(records: u64) -> Self {
        Space {
            records,
            ..Default::default()
        }
    }

    /// Checkpoint ids `1..=n` may be drawn.
    pub fn checkpoints(mut self, n: u64) -> Self {
        self.checkpoints = n;
        self
    }

    /// Kind `kind` is drawn at most once per schedule.
    pub fn once(mut self, kind: &str) -> Self {
        self.once.push(kind.to_string());
        self
    }

    /// Allows faults of kind `kind` (a name of [`KINDS`]) on `target`.
    pub fn allow(mut self, kind: &str, target: &str) -> Self {
        self.pairs.push((kind.to_string(), target.to_string()));
        self
    }
}

/// Why a schedule cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// Nothing the space allows matches the kinds and targets asked for.
    #[error("random:{seed}:{count}: no fault the workload can recover from matches kinds [{kinds}] on targets [{targets}]")]
    Empty {
        /// The seed.
        seed: u64,
        /// The count.
        count: u64,
        /// Kinds asked for.
        kinds: String,
        /// Targets asked for.
        targets: String,
    },
}

impl ScheduleSpec {
    /// The concrete faults: a list as it is; a random draw against `space`.
    pub fn expand(&self, space: &Space) -> Result<Schedule, ExpandError> {
        let (seed, count, kinds, targets) = match self {
            ScheduleSpec::List(v) => return Ok(Schedule { faults: v.clone() }),
            ScheduleSpec::Random {
                seed,
                count,
                kinds,
                targets,
            } => (*seed, *count, kinds, targets),
        };
        let mut pairs: Vec<&(String, String)> = space
            .pairs
            .iter()
            .filter(|(k, t)| {
                (kinds.is_empty() || kinds.contains(k))
                    && (targets.is_empty() || targets.contains(t))
            })
            .filter(|(k, t)| !by_checkpoint(k, t) || space.checkpoints > 0)
            .collect();
        if pairs.is_empty() && count > 0 {
            return Err(ExpandError::Empty {
                seed,
                count,
                kinds: kinds.join(","),
                targets: targets.join(","),
            });
        }
        let mut rng = SplitMix64(seed);
        let mut faults = Vec::with_capacity(count as usize);
        for _ in 0..count {
            if pairs.is_empty() {
                break;
            }
            let (kind, target) = pairs[rng.below(pairs.len() as u64) as usize];
            faults.push(draw(&mut rng, kind, target, space));
            if space.once.contains(kind) {
                pairs.retain(|(k, _)| k != kind);
            }
        }
        Ok(Schedule { faults })
    }
}

/// Whether faults of `kind` on `target` fire at a checkpoint id.
fn by_checkpoint(kind: &str, target: &str) -> bool {
    matches!(kind, "commit" | "ioerror" | "crash")
        || (kind == "corrupt" && target == crate::spec::CHECKPOINT)
}

/// One fault of kind `kind` on `target`.
fn draw(rng: &mut SplitMix64, kind: &str, target: &str, space: &Space) -> FaultSpec {
    let margin = space.records / 20;
    let record = margin + rng.below(space.records.saturating_sub(2 * margin).max(1));
    let checkpoint = 1 + rng.below(space.checkpoints.max(1));
    let coin = |rng: &mut SplitMix64| rng.below(2) == 0;
    let (kind, when) = match kind {
        "panic" => {
            let when = if rng.below(8) == 0 {
                When::Burst {
                    first: record,
                    count: 2 + rng.below(2),
                }
            } else {
                When::Record(record)
            };
            (FaultKind::Panic, when)
        }
        "stall" => (
            FaultKind::Stall {
                millis: Some(1 + rng.below(40)),
            },
            When::Record(record),
        ),
        "stall-forever" => (FaultKind::Stall { millis: None }, When::Record(record)),
        "slow" => (
            FaultKind::Slow {
                micros: 20 + rng.below(181),
                records: 100 + rng.below(901),
            },
            When::Record(record),
        ),
        "cut" => (FaultKind::Cut, When::Record(record)),
        "mute" => (
            FaultKind::Mute {
                millis: 5 + rng.below(56),
            },
            When::Record(record),
        ),
        "standby" => (
            FaultKind::Standby {
                phase: if coin(rng) {
                    StandbyPhase::Before
                } else {
                    StandbyPhase::During
                },
            },
            When::Record(record),
        ),
        "corrupt" if target == crate::spec::CHECKPOINT => (
            FaultKind::CorruptSnapshot {
                damage: if coin(rng) {
                    Damage::Flip
                } else {
                    Damage::Truncate
                },
            },
            When::Record(checkpoint),
        ),
        "corrupt" => (
            FaultKind::CorruptQueue {
                damage: if coin(rng) {
                    Damage::Flip
                } else {
                    Damage::Truncate
                },
            },
            When::Record(record),
        ),
        "commit" => (FaultKind::Commit, When::Record(checkpoint)),
        "ioerror" => (
            FaultKind::IoError {
                errno: if coin(rng) { Errno::Eio } else { Errno::Enospc },
                step: if coin(rng) {
                    IoStep::Write
                } else {
                    IoStep::Fsync
                },
            },
            When::Record(checkpoint),
        ),
        "crash" => (FaultKind::Crash, When::Record(checkpoint)),
        "kill" => (
            FaultKind::Process {
                death: crate::spec::Death::Kill,
            },
            When::Record(record),
        ),
        "abort" => (
            FaultKind::Process {
                death: crate::spec::Death::Abort,
            },
            When::Record(record),
        ),
        "segv" => (
            FaultKind::Process {
                death: crate::spec::Death::Segv,
            },
            When::Record(record),
        ),
        other => unreachable!("kind `{other}` is not one of KINDS"),
    };
    FaultSpec {
        kind,
        target: target.to_string(),
        when,
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny, well-mixed generator whose
/// sequence is fixed by its seed on every platform.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0), by rejection (no modulo bias).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let v = self.next_u64();
            if v < zone {
                return v % n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> Space {
        let mut s = Space::new(100_000).checkpoints(10);
        for k in KINDS {
            for t in ["flatmap", "keyed"] {
                if !by_checkpoint(k, t) {
                    s = s.allow(k, t);
                }
            }
        }
        s.allow("commit", "sink")
            .allow("ioerror", "checkpoint")
            .allow("crash", "checkpoint")
            .allow("corrupt", "checkpoint")
    }

    #[test]
    fn a_random_schedule_is_a_function_of_its_seed_and_prints_as_itself() {
        let sp = space();
        for seed in 0..200 {
            let spec: ScheduleSpec = format!("random:{seed}:4").parse().unwrap();
            let a = spec.expand(&sp).unwrap();
            let b = spec.expand(&sp).unwrap();
            assert_eq!(a, b);
            assert_eq!(a.faults.len(), 4);
            let listed: ScheduleSpec = a.to_string().parse().unwrap();
            assert_eq!(listed.expand(&sp).unwrap(), a, "seed {seed}: {a}");
        }
    }

    #[test]
    fn random_draws_stay_inside_the_space() {
        let sp = space();
        let mut kinds = std::collections::HashSet::new();
        for seed in 0..500 {
            let s = ScheduleSpec::Random {
                seed,
                count: 3,
                kinds: vec![],
                targets: vec![],
            }
            .expand(&sp)
            .unwrap();
            for f in &s.faults {
                kinds.insert(f.kind.name());
                match f.when {
                    When::Record(n) | When::Burst { first: n, .. } if f.kind.by_checkpoint() => {
                        assert!((1..=10).contains(&n), "{f}")
                    }
                    When::Record(n) | When::Burst { first: n, .. } => {
                        assert!((5_000..95_000).contains(&n), "{f}")
                    }
                    _ => panic!("unexpected position in {f}"),
                }
                let back: FaultSpec = f.to_string().parse().unwrap();
                assert_eq!(&back, f);
            }
        }
        assert_eq!(kinds.len(), 13, "every kind is drawn: {kinds:?}");
    }

    #[test]
    fn kinds_and_targets_narrow_the_draw_and_an_empty_one_is_an_error() {
        let sp = space();
        let s: ScheduleSpec = "random:3:20:panic+cut:keyed".parse().unwrap();
        for f in s.expand(&sp).unwrap().faults {
            assert!(matches!(f.kind, FaultKind::Panic | FaultKind::Cut), "{f}");
            assert_eq!(f.target, "keyed");
        }
        let e: ScheduleSpec = "random:3:2:panic:nope".parse().unwrap();
        assert!(e.expand(&sp).unwrap_err().to_string().contains("no fault"));
        assert!("random:x:2".parse::<ScheduleSpec>().is_err());
        assert!("random:1:2:boom".parse::<ScheduleSpec>().is_err());
        assert!("".parse::<ScheduleSpec>().is_err());
    }

    #[test]
    fn a_kind_drawn_once_is_drawn_at_most_once() {
        let sp = Space::new(1000)
            .allow("stall-forever", "a")
            .allow("stall-forever", "b")
            .allow("panic", "a")
            .once("stall-forever");
        for seed in 0..100 {
            let s: ScheduleSpec = format!("random:{seed}:6").parse().unwrap();
            let s = s.expand(&sp).unwrap();
            let forever = s
                .faults
                .iter()
                .filter(|f| f.kind == FaultKind::Stall { millis: None })
                .count();
            assert!(forever <= 1, "{s}");
            assert_eq!(s.faults.len(), 6);
        }
    }

    #[test]
    fn split_mix_is_uniform_enough_for_small_ranges() {
        let mut r = SplitMix64(1);
        let mut c = [0u32; 7];
        for _ in 0..70_000 {
            c[r.below(7) as usize] += 1;
        }
        assert!(c.iter().all(|&n| (9_000..11_000).contains(&n)), "{c:?}");
    }
}
