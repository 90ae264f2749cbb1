//! The language of faults: `KIND@TARGET:WHEN[:ARG]`.
//!
//! ```text
//! KIND      TARGET      ARG                          what happens
//! panic     operator    —                            the operator panics on the record
//! stall     operator    MILLIS | forever             it stops that long (forever: until a
//!                                                    recovery gives up on it)
//! slow      operator    MICROS[xCOUNT]               it spends MICROS more on each of COUNT
//!                                                    records (default 1000) from there on
//! cut       operator    —                            its input channel breaks
//! mute      operator    MILLIS                       it runs on but publishes no heartbeat
//! standby   operator    before | during              it panics, and its standby fails too:
//!                                                    as it claims the epoch, or after, as it
//!                                                    is about to replay as the new primary
//! corrupt   operator    flip | truncate              its buffer-queue entry of the record is
//!                                                    damaged, then it panics (the takeover
//!                                                    would replay the damage)
//! kill      operator    —                            the process running the operator is
//!                                                    killed (SIGKILL: no unwinding, no
//!                                                    destructor, no flush)
//! abort     operator    —                            that process calls abort() (SIGABRT)
//! segv      operator    —                            that process dies of SIGSEGV, as of a
//!                                                    segfault in native code
//! commit    sink        —                            committing the sink's output of
//!                                                    checkpoint WHEN fails once (WHEN
//!                                                    `final`: the job's final commit,
//!                                                    at the end of its input)
//! ioerror   checkpoint  eio|enospc[-write|-fsync]    writing (default) or fsyncing the
//!                                                    snapshot files of checkpoint WHEN fails
//! crash     checkpoint  —                            the process "crashes" between writing
//!                                                    checkpoint WHEN and publishing it
//! corrupt   checkpoint  flip | truncate              checkpoint WHEN, once published, has a
//!                                                    file damaged, and the process "crashes"
//! ```
//!
//! `WHEN` names where the fault fires. For an operator, a record:
//!
//! ```text
//! N       input record N, as the workload numbers its input (the resolver
//!         given to the injector maps it to a tuple ID; without one, N is
//!         sequence N of source partition 0)
//! P/S     the record with tuple ID (source partition P, sequence S)
//! +DUR    the first record the operator sees DUR after the job started
//!         (250ms, 2s, 1500us)
//! %K      every K-th input record: K, 2K, 3K, … (a fault each)
//! N*B     a burst of B successive failures: at record N, then each next at
//!         the operator's first record after the previous fired (never the
//!         same record again)
//! ~C      C faults spread evenly over the input: records ⌊len·k/(C+1)⌋
//! ```
//!
//! For `checkpoint` faults and `commit`, `WHEN` is a checkpoint id: `N`,
//! `+DUR` (the first after DUR), `%K` (every K-th id), `N*B` (ids N to
//! N+B−1); `commit` also takes `final`, the commit of what the sink
//! wrote after its last barrier, when the job's input has ended.
//!
//! Every fault fires once per injector (a restarted job does not fire it
//! again on a replayed record). A spec prints back as it parses.
//!
//! ```
//! use tandem_fault_inject::{FaultKind, FaultSpec, When};
//!
//! let f: FaultSpec = "stall@flatmap:5000000:20".parse().unwrap();
//! assert_eq!(f.target, "flatmap");
//! assert_eq!(f.when, When::Record(5_000_000));
//! assert_eq!(f.kind, FaultKind::Stall { millis: Some(20) });
//! assert_eq!(f.to_string(), "stall@flatmap:5000000:20");
//! let b: FaultSpec = "panic@keyed:1000*3".parse().unwrap();
//! assert_eq!(b.when, When::Burst { first: 1000, count: 3 });
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The target naming the checkpoint machinery (snapshot faults).
pub const CHECKPOINT: &str = "checkpoint";

/// An I/O error a snapshot write or fsync returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Errno {
    /// `EIO`: the device failed.
    Eio,
    /// `ENOSPC`: the disk is full.
    Enospc,
}

impl Errno {
    /// The OS error number.
    pub fn raw(self) -> i32 {
        match self {
            Errno::Eio => libc_eio(),
            Errno::Enospc => libc_enospc(),
        }
    }
}

// Linux's numbers (the engine runs on Linux; see the README).
const fn libc_eio() -> i32 {
    5
}
const fn libc_enospc() -> i32 {
    28
}

/// Which snapshot I/O step fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoStep {
    /// Writing a snapshot file.
    Write,
    /// Fsyncing the checkpoint's files.
    Fsync,
}

/// How bytes are damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Damage {
    /// One byte of the payload has a bit flipped.
    Flip,
    /// The file (or entry) loses its second half.
    Truncate,
}

/// When a faulty standby fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StandbyPhase {
    /// As it claims the epoch (the standby's own failure).
    Before,
    /// After the claim, before it replays as the new primary.
    During,
}

/// How a process dies (the engine carries it out: [`tandem::runtime::probe::ProbeAction::Die`]).
pub use tandem::runtime::probe::Death;

/// What happens when a fault fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The operator panics.
    Panic,
    /// The operator stops for `millis` milliseconds (`None`: until a
    /// recovery gives up on it).
    Stall {
        /// How long.
        millis: Option<u64>,
    },
    /// The operator spends `micros` more on each of `records` records.
    Slow {
        /// Extra time per record.
        micros: u64,
        /// Records slowed.
        records: u64,
    },
    /// The operator's input channel is cut.
    Cut,
    /// The operator runs on without publishing heartbeats.
    Mute {
        /// How long.
        millis: u64,
    },
    /// The operator panics and its standby fails in `phase` of the takeover.
    Standby {
        /// When the standby fails.
        phase: StandbyPhase,
    },
    /// The operator's buffer-queue entry of the record is damaged, then it
    /// panics.
    CorruptQueue {
        /// How.
        damage: Damage,
    },
    /// The process running the operator dies, at once and outright.
    Process {
        /// How.
        death: Death,
    },
    /// Committing a sink's output of the checkpoint fails once.
    Commit,
    /// A snapshot write or fsync of the checkpoint fails.
    IoError {
        /// The error.
        errno: Errno,
        /// The step.
        step: IoStep,
    },
    /// A crash between writing the checkpoint and publishing it.
    Crash,
    /// The published checkpoint has a file damaged, then a crash.
    CorruptSnapshot {
        /// How.
        damage: Damage,
    },
}

impl FaultKind {
    /// The kind's name in the spec language.
    pub fn name(&self) -> &'static str {
        match self {
            FaultKind::Panic => "panic",
            FaultKind::Stall { .. } => "stall",
            FaultKind::Slow { .. } => "slow",
            FaultKind::Cut => "cut",
            FaultKind::Mute { .. } => "mute",
            FaultKind::Standby { .. } => "standby",
            FaultKind::CorruptQueue { .. } | FaultKind::CorruptSnapshot { .. } => "corrupt",
            FaultKind::Process { death: Death::Kill } => "kill",
            FaultKind::Process {
                death: Death::Abort,
            } => "abort",
            FaultKind::Process { death: Death::Segv } => "segv",
            FaultKind::Commit => "commit",
            FaultKind::IoError { .. } => "ioerror",
            FaultKind::Crash => "crash",
        }
    }

    /// Whether the fault targets the checkpoint machinery (its `WHEN` is a
    /// checkpoint id, its target `checkpoint`).
    pub fn on_checkpoint(&self) -> bool {
        matches!(
            self,
            FaultKind::IoError { .. } | FaultKind::Crash | FaultKind::CorruptSnapshot { .. }
        )
    }

    /// Whether `WHEN` is a checkpoint id (checkpoint faults and `commit`).
    pub fn by_checkpoint(&self) -> bool {
        self.on_checkpoint() || *self == FaultKind::Commit
    }

    /// Whether the fault ends the operator instance it fires in (a failure
    /// some recovery must answer), rather than slowing or muting it or
    /// failing a checkpoint.
    pub fn fails_operator(&self) -> bool {
        matches!(
            self,
            FaultKind::Panic
                | FaultKind::Cut
                | FaultKind::Standby { .. }
                | FaultKind::CorruptQueue { .. }
                | FaultKind::Stall { millis: None }
                | FaultKind::Process { .. }
        )
    }

    /// Whether the fault ends the whole process its operator runs in (not
    /// just the operator's thread): only a standby in another process
    /// survives it.
    pub fn ends_process(&self) -> bool {
        matches!(self, FaultKind::Process { .. })
    }

    /// Whether the fault needs its operator to have a standby.
    pub fn needs_standby(&self) -> bool {
        matches!(
            self,
            FaultKind::Standby { .. } | FaultKind::CorruptQueue { .. }
        )
    }
}

/// Where a fault fires (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum When {
    /// Input record N (checkpoint N).
    Record(u64),
    /// Tuple ID (partition, sequence).
    Tuple {
        /// Source partition.
        partition: u32,
        /// Sequence within it.
        seq: u64,
    },
    /// The first record (checkpoint) after this long.
    After(Duration),
    /// Every K-th record (checkpoint id).
    Every(u64),
    /// B successive failures from N.
    Burst {
        /// The first record (checkpoint).
        first: u64,
        /// How many failures.
        count: u64,
    },
    /// C faults spread evenly over the input.
    Spread(u64),
    /// The job's final commit (`commit` only): the output a sink staged
    /// after its last checkpoint barrier, committed when the input ended.
    Final,
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            When::Record(n) => write!(f, "{n}"),
            When::Tuple { partition, seq } => write!(f, "{partition}/{seq}"),
            When::After(d) => write!(f, "+{}", fmt_duration(d)),
            When::Every(k) => write!(f, "%{k}"),
            When::Burst { first, count } => write!(f, "{first}*{count}"),
            When::Spread(c) => write!(f, "~{c}"),
            When::Final => f.write_str("final"),
        }
    }
}

/// A duration as the spec language writes it: the largest whole unit.
pub fn fmt_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{}us", ns / 1_000)
    }
}

/// The most faults one spec arms (`~C`, `N*B`, `%K` over the input): a
/// schedule is for testing recovery, not for arming every record.
pub const MAX_FAULTS: u64 = 10_000;

/// The longest a fault may hold an operator up (a stall, a mute, a slow
/// operator's delay over all its records): an hour; longer is `forever`.
pub const MAX_DELAY_MS: u64 = 3_600_000;

/// Parses `250ms`, `2s`, `1500us`, up to [`MAX_DELAY_MS`].
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = if let Some(v) = s.strip_suffix("ms") {
        (v, 1_000_000)
    } else if let Some(v) = s.strip_suffix("us") {
        (v, 1_000)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1_000_000_000)
    } else {
        return None;
    };
    let n: u64 = num.trim().parse().ok()?;
    Some(Duration::from_nanos(n.checked_mul(unit)?))
        .filter(|d| d.as_millis() <= MAX_DELAY_MS as u128)
}

/// One fault: what, where, and when.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FaultSpec {
    /// What happens.
    pub kind: FaultKind,
    /// The operator's name in the job (a sink's for `commit`), or
    /// [`CHECKPOINT`].
    pub target: String,
    /// When it fires.
    pub when: When,
}

/// Why a fault spec did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseFaultError {
    /// No `@` between kind and target, or no `:WHEN`.
    #[error("`{0}`: expected KIND@TARGET:WHEN[:ARG] (e.g. panic@flatmap:5000)")]
    Shape(String),
    /// An unknown kind.
    #[error("`{spec}`: unknown fault kind `{kind}` (expected panic, stall, slow, cut, mute, standby, corrupt, kill, abort, segv, commit, ioerror or crash)")]
    Kind {
        /// The spec.
        spec: String,
        /// The kind found.
        kind: String,
    },
    /// An empty target name.
    #[error("`{0}`: the operator name is empty")]
    Target(String),
    /// A part that does not parse.
    #[error("`{spec}`: `{value}` is not a valid {what}")]
    Value {
        /// The spec.
        spec: String,
        /// What the part should be.
        what: &'static str,
        /// The part.
        value: String,
    },
    /// Extra or missing fields for the kind.
    #[error("`{spec}`: {kind} takes {expected}")]
    Arity {
        /// The spec.
        spec: String,
        /// The kind.
        kind: &'static str,
        /// Its shape.
        expected: &'static str,
    },
    /// A kind used on the wrong target, or a `WHEN` it cannot take.
    #[error("`{spec}`: {why}")]
    Invalid {
        /// The spec.
        spec: String,
        /// Why.
        why: String,
    },
}

impl FromStr for FaultSpec {
    type Err = ParseFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let spec = s.trim().to_string();
        let (kind, rest) = spec
            .split_once('@')
            .ok_or_else(|| ParseFaultError::Shape(spec.clone()))?;
        let kind = kind.trim();
        let parts: Vec<&str> = rest.split(':').map(str::trim).collect();
        let target = parts[0];
        if target.is_empty() {
            return Err(ParseFaultError::Target(spec.clone()));
        }
        if parts.len() < 2 || parts[1].is_empty() {
            return Err(ParseFaultError::Shape(spec.clone()));
        }
        let value = |what: &'static str, v: &str| ParseFaultError::Value {
            spec: spec.clone(),
            what,
            value: v.to_string(),
        };
        let int = |what: &'static str, v: &str| v.parse::<u64>().map_err(|_| value(what, v));
        // A delay of at most MAX_DELAY_MS milliseconds.
        let delay = |what: &'static str, v: &str| {
            int(what, v)?;
            v.parse::<u64>()
                .ok()
                .filter(|&ms| ms <= MAX_DELAY_MS)
                .ok_or_else(|| {
                    ParseFaultError::Invalid {
                        spec: spec.clone(),
                        why: format!(
                            "{v} ms: at most {MAX_DELAY_MS} (an hour; a stall that never ends is `forever`)"
                        ),
                    }
                })
        };
        let arity = |kind: &'static str, expected: &'static str| ParseFaultError::Arity {
            spec: spec.clone(),
            kind,
            expected,
        };
        let invalid = |why: String| ParseFaultError::Invalid {
            spec: spec.clone(),
            why,
        };
        let arg = parts.get(2).copied();
        let (name, shape, with_arg): (&'static str, &'static str, bool) = match kind {
            "panic" => ("panic", "OPERATOR:WHEN", false),
            "cut" => ("cut", "OPERATOR:WHEN", false),
            "kill" => ("kill", "OPERATOR:WHEN", false),
            "abort" => ("abort", "OPERATOR:WHEN", false),
            "segv" => ("segv", "OPERATOR:WHEN", false),
            "stall" => ("stall", "OPERATOR:WHEN:MILLIS|forever", true),
            "slow" => ("slow", "OPERATOR:WHEN:MICROS[xCOUNT]", true),
            "mute" => ("mute", "OPERATOR:WHEN:MILLIS", true),
            "standby" => ("standby", "OPERATOR:WHEN:before|during", true),
            "corrupt" => ("corrupt", "TARGET:WHEN:flip|truncate", true),
            "commit" => ("commit", "SINK:CHECKPOINT", false),
            "ioerror" => (
                "ioerror",
                "checkpoint:CHECKPOINT:eio|enospc[-write|-fsync]",
                true,
            ),
            "crash" => ("crash", "checkpoint:CHECKPOINT", false),
            other => {
                return Err(ParseFaultError::Kind {
                    spec: spec.clone(),
                    kind: other.to_string(),
                })
            }
        };
        if parts.len() != if with_arg { 3 } else { 2 } {
            return Err(arity(name, shape));
        }
        let damage = |v: &str| match v {
            "flip" => Ok(Damage::Flip),
            "truncate" => Ok(Damage::Truncate),
            _ => Err(value("damage (flip or truncate)", v)),
        };
        let kind = match name {
            "panic" => FaultKind::Panic,
            "cut" => FaultKind::Cut,
            "kill" => FaultKind::Process { death: Death::Kill },
            "abort" => FaultKind::Process {
                death: Death::Abort,
            },
            "segv" => FaultKind::Process { death: Death::Segv },
            "commit" => FaultKind::Commit,
            "crash" => FaultKind::Crash,
            "stall" => match arg.unwrap_or_default() {
                "forever" => FaultKind::Stall { millis: None },
                v => FaultKind::Stall {
                    millis: Some(delay("duration in milliseconds", v)?),
                },
            },
            "slow" => {
                let v = arg.unwrap_or_default();
                let (us, n) = match v.split_once('x') {
                    Some((us, n)) => (us, int("record count", n)?),
                    None => (v, 1000),
                };
                let micros = int("delay in microseconds", us)?;
                if micros.saturating_mul(n) > MAX_DELAY_MS * 1000 {
                    return Err(invalid(format!(
                        "{micros} µs on each of {n} records: at most {} s in all",
                        MAX_DELAY_MS / 1000
                    )));
                }
                FaultKind::Slow { micros, records: n }
            }
            "mute" => FaultKind::Mute {
                millis: delay("duration in milliseconds", arg.unwrap_or_default())?,
            },
            "standby" => FaultKind::Standby {
                phase: match arg.unwrap_or_default() {
                    "before" => StandbyPhase::Before,
                    "during" => StandbyPhase::During,
                    v => return Err(value("standby phase (before or during)", v)),
                },
            },
            "corrupt" if target == CHECKPOINT => FaultKind::CorruptSnapshot {
                damage: damage(arg.unwrap_or_default())?,
            },
            "corrupt" => FaultKind::CorruptQueue {
                damage: damage(arg.unwrap_or_default())?,
            },
            "ioerror" => {
                let v = arg.unwrap_or_default();
                let (e, step) = v.split_once('-').unwrap_or((v, "write"));
                FaultKind::IoError {
                    errno: match e {
                        "eio" => Errno::Eio,
                        "enospc" => Errno::Enospc,
                        _ => return Err(value("I/O error (eio or enospc)", v)),
                    },
                    step: match step {
                        "write" => IoStep::Write,
                        "fsync" => IoStep::Fsync,
                        _ => return Err(value("I/O step (write or fsync)", v)),
                    },
                }
            }
            _ => unreachable!("every name is matched above"),
        };
        if kind.on_checkpoint() != (target == CHECKPOINT) {
            return Err(invalid(if kind.on_checkpoint() {
                format!("{name} targets `{CHECKPOINT}`, not an operator")
            } else {
                format!("`{CHECKPOINT}` takes only ioerror, crash and corrupt faults")
            }));
        }
        let when = parse_when(parts[1]).map_err(|w| value(w, parts[1]))?;
        if kind.by_checkpoint() && matches!(when, When::Tuple { .. } | When::Spread(_)) {
            return Err(invalid(format!(
                "{name} fires at a checkpoint id: N, +DUR, %K or N*B{}",
                if kind == FaultKind::Commit {
                    ", or final"
                } else {
                    ""
                }
            )));
        }
        if when == When::Final && kind != FaultKind::Commit {
            return Err(invalid(format!(
                "only commit fires at `final` (the job's final commit), not {name}"
            )));
        }
        if let When::Burst { count: 0, .. } | When::Every(0) | When::Spread(0) = when {
            return Err(value("count (at least 1)", parts[1]));
        }
        Ok(FaultSpec {
            kind,
            target: target.to_string(),
            when,
        })
    }
}

fn parse_when(w: &str) -> Result<When, &'static str> {
    const WHAT: &str = "position (N, P/S, +DUR, %K, N*B, ~C or final)";
    if w == "final" {
        return Ok(When::Final);
    }
    let int = |v: &str| v.trim().parse::<u64>().map_err(|_| WHAT);
    // Zero is refused with the other zero counts, by the caller.
    let count = |v: &str| match int(v)? {
        c if c > MAX_FAULTS => Err("count (at least 1, at most 10000)"),
        c => Ok(c),
    };
    if let Some(d) = w.strip_prefix('+') {
        return parse_duration(d)
            .map(When::After)
            .ok_or("duration (e.g. +250ms, +2s, +500us; at most an hour)");
    }
    if let Some(k) = w.strip_prefix('%') {
        return Ok(When::Every(int(k)?));
    }
    if let Some(c) = w.strip_prefix('~') {
        return Ok(When::Spread(count(c)?));
    }
    if let Some((n, b)) = w.split_once('*') {
        return Ok(When::Burst {
            first: int(n)?,
            count: count(b)?,
        });
    }
    if let Some((p, s)) = w.split_once('/') {
        return Ok(When::Tuple {
            partition: p.trim().parse().map_err(|_| WHAT)?,
            seq: int(s)?,
        });
    }
    Ok(When::Record(int(w)?))
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}:{}", self.kind.name(), self.target, self.when)?;
        let damage = |d: Damage| match d {
            Damage::Flip => "flip",
            Damage::Truncate => "truncate",
        };
        match self.kind {
            FaultKind::Panic
            | FaultKind::Cut
            | FaultKind::Process { .. }
            | FaultKind::Commit
            | FaultKind::Crash => Ok(()),
            FaultKind::Stall { millis: None } => f.write_str(":forever"),
            FaultKind::Stall { millis: Some(ms) } => write!(f, ":{ms}"),
            FaultKind::Slow { micros, records } => write!(f, ":{micros}x{records}"),
            FaultKind::Mute { millis } => write!(f, ":{millis}"),
            FaultKind::Standby { phase } => f.write_str(match phase {
                StandbyPhase::Before => ":before",
                StandbyPhase::During => ":during",
            }),
            FaultKind::CorruptQueue { damage: d } | FaultKind::CorruptSnapshot { damage: d } => {
                write!(f, ":{}", damage(d))
            }
            FaultKind::IoError { errno, step } => write!(
                f,
                ":{}-{}",
                match errno {
                    Errno::Eio => "eio",
                    Errno::Enospc => "enospc",
                },
                match step {
                    IoStep::Write => "write",
                    IoStep::Fsync => "fsync",
                }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_and_position_round_trips_through_text() {
        for s in [
            "panic@flatmap:5000000",
            "panic@flatmap:1/250",
            "panic@keyed:+250ms",
            "panic@keyed:+2s",
            "panic@keyed:+1500us",
            "panic@map:%1000",
            "panic@map:1000*3",
            "panic@map:~50",
            "stall@map:7:250",
            "stall@map:7:forever",
            "slow@map:7:100x500",
            "cut@keyed:0",
            "kill@flatmap:10",
            "abort@keyed:~3",
            "segv@filter:1/5",
            "mute@filter:10:30",
            "standby@flatmap:10:before",
            "standby@flatmap:10:during",
            "corrupt@keyed:10:flip",
            "corrupt@keyed:10:truncate",
            "corrupt@checkpoint:3:flip",
            "commit@sink:2",
            "commit@sink:%3",
            "ioerror@checkpoint:4:eio-write",
            "ioerror@checkpoint:4:enospc-fsync",
            "crash@checkpoint:2*2",
        ] {
            let f: FaultSpec = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(f.to_string(), s);
        }
        // Defaults print explicitly.
        let f: FaultSpec = "slow@map:7:100".parse().unwrap();
        assert_eq!(f.to_string(), "slow@map:7:100x1000");
        let f: FaultSpec = "ioerror@checkpoint:4:eio".parse().unwrap();
        assert_eq!(f.to_string(), "ioerror@checkpoint:4:eio-write");
    }

    #[test]
    fn malformed_specs_are_errors_that_say_why() {
        let cases = [
            ("flatmap:5", "expected KIND@TARGET:WHEN"),
            ("panic@flatmap", "expected KIND@TARGET:WHEN"),
            ("boom@flatmap:5", "unknown fault kind `boom`"),
            ("panic@:5", "operator name is empty"),
            ("panic@flatmap:x", "`x` is not a valid position"),
            (
                "stall@flatmap:5",
                "stall takes OPERATOR:WHEN:MILLIS|forever",
            ),
            ("panic@flatmap:5:9", "panic takes OPERATOR:WHEN"),
            ("kill@flatmap:5:9", "kill takes OPERATOR:WHEN"),
            ("stall@flatmap:5:-1", "not a valid duration"),
            ("panic@flatmap:+5", "not a valid duration"),
            ("panic@flatmap:5*0", "count (at least 1)"),
            ("panic@flatmap:%0", "count (at least 1)"),
            ("panic@flatmap:5*10001", "at most 10000"),
            ("panic@flatmap:~18446744073709551615", "at most 10000"),
            ("stall@flatmap:5:3600001", "at most 3600000"),
            ("mute@flatmap:5:18446744073709551615", "at most 3600000"),
            ("slow@flatmap:5:3600000001x1", "in all"),
            ("slow@flatmap:5:2x18446744073709551615", "in all"),
            ("panic@flatmap:+3601s", "at most an hour"),
            ("standby@flatmap:5:after", "standby phase"),
            ("corrupt@keyed:5:melt", "damage"),
            ("ioerror@flatmap:5:eio", "targets `checkpoint`"),
            (
                "panic@checkpoint:5",
                "takes only ioerror, crash and corrupt",
            ),
            ("crash@checkpoint:0/5", "fires at a checkpoint id"),
            ("commit@sink:~3", "fires at a checkpoint id"),
            ("ioerror@checkpoint:1:eperm", "I/O error"),
        ];
        for (s, why) in cases {
            let e = s.parse::<FaultSpec>().unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
