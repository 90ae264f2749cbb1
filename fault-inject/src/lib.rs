//! Fault specifications for stress-testing Tandem.
//!
//! The engine never depends on this crate: it exposes seams, and injectors
//! built from these specs plug into them. This first part is the language
//! of faults, shared by the benchmark binaries and the tests:
//!
//! ```text
//! panic@OPERATOR:TUPLE_ID           the operator panics on that tuple
//! stall@OPERATOR:TUPLE_ID:MILLIS    the operator stops for MILLIS ms
//! cut@OPERATOR:TUPLE_ID             the operator's input channel breaks
//! ```
//!
//! A fault fires once, the first time that operator sees that tuple ID —
//! once per run of the injector, so a fault does not fire again when a
//! recovered job replays the record.
//!
//! [`FaultInjector`] turns specs into probes the engine consults before each
//! record of the named operators (see `tandem::runtime::probe`). The number
//! in a spec names a record as the *workload* counts them (the paper
//! pipeline: its input sequence number); a resolver given by the workload
//! maps it to the engine's [`TupleId`] (source partition, sequence).
//!
//! ```
//! use tandem_fault_inject::{FaultKind, FaultSpec};
//!
//! let f: FaultSpec = "stall@flatmap:5000000:20".parse().unwrap();
//! assert_eq!(f.operator, "flatmap");
//! assert_eq!(f.tuple_id, 5_000_000);
//! assert_eq!(f.kind, FaultKind::Stall { millis: 20 });
//! assert_eq!(f.to_string(), "stall@flatmap:5000000:20");
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::runtime::probe::{ProbeAction, ProbeFactory, RecordProbe};
use tandem::TupleId;

/// What happens when a fault fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The operator panics.
    Panic,
    /// The operator stops processing for `millis` milliseconds.
    Stall {
        /// How long.
        millis: u64,
    },
    /// The operator's input channel is cut.
    Cut,
}

/// One fault: what, where, and at which tuple.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FaultSpec {
    /// The operator's name in the job.
    pub operator: String,
    /// The tuple ID (per-partition sequence number) it fires on.
    pub tuple_id: u64,
    /// What happens.
    pub kind: FaultKind,
}

/// Why a fault spec did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseFaultError {
    /// No `@` between kind and target.
    #[error("`{0}`: expected KIND@OPERATOR:TUPLE_ID[:MILLIS]")]
    Shape(String),
    /// An unknown kind.
    #[error("`{spec}`: unknown fault kind `{kind}` (expected panic, stall or cut)")]
    Kind { spec: String, kind: String },
    /// An empty operator name.
    #[error("`{0}`: the operator name is empty")]
    Operator(String),
    /// A number that is not one.
    #[error("`{spec}`: `{value}` is not a valid {what}")]
    Number {
        spec: String,
        what: &'static str,
        value: String,
    },
    /// Extra or missing fields for the kind.
    #[error("`{spec}`: {kind} takes {expected}")]
    Arity {
        spec: String,
        kind: &'static str,
        expected: &'static str,
    },
}

impl FromStr for FaultSpec {
    type Err = ParseFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let spec = s.to_string();
        let (kind, target) = s
            .split_once('@')
            .ok_or_else(|| ParseFaultError::Shape(spec.clone()))?;
        let parts: Vec<&str> = target.split(':').collect();
        let operator = parts[0].trim();
        if operator.is_empty() {
            return Err(ParseFaultError::Operator(spec));
        }
        let number = |what: &'static str, v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| ParseFaultError::Number {
                    spec: spec.clone(),
                    what,
                    value: v.to_string(),
                })
        };
        let arity = |kind: &'static str, expected: &'static str| ParseFaultError::Arity {
            spec: spec.clone(),
            kind,
            expected,
        };
        let kind = match kind.trim() {
            "panic" | "cut" if parts.len() != 2 => {
                return Err(arity(
                    if kind.trim() == "panic" {
                        "panic"
                    } else {
                        "cut"
                    },
                    "OPERATOR:TUPLE_ID",
                ))
            }
            "panic" => FaultKind::Panic,
            "cut" => FaultKind::Cut,
            "stall" if parts.len() != 3 => return Err(arity("stall", "OPERATOR:TUPLE_ID:MILLIS")),
            "stall" => FaultKind::Stall {
                millis: number("duration in milliseconds", parts[2])?,
            },
            other => {
                return Err(ParseFaultError::Kind {
                    spec: spec.clone(),
                    kind: other.to_string(),
                })
            }
        };
        Ok(FaultSpec {
            operator: operator.to_string(),
            tuple_id: number("tuple id", parts[1])?,
            kind,
        })
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FaultKind::Panic => write!(f, "panic@{}:{}", self.operator, self.tuple_id),
            FaultKind::Cut => write!(f, "cut@{}:{}", self.operator, self.tuple_id),
            FaultKind::Stall { millis } => {
                write!(f, "stall@{}:{}:{millis}", self.operator, self.tuple_id)
            }
        }
    }
}

/// One armed fault.
#[derive(Debug)]
struct Armed {
    spec: FaultSpec,
    target: TupleId,
    fired: AtomicBool,
}

/// Injects faults into a running job through the engine's probe seam.
///
/// Install it with `RuntimeConfig::probes`. Keep the same injector across
/// restarts of a job so that each fault fires exactly once.
#[derive(Debug, Clone)]
pub struct FaultInjector {
    faults: Arc<Vec<Arc<Armed>>>,
}

impl FaultInjector {
    /// Arms `specs`; `resolve` maps a spec's record number to the tuple ID
    /// the engine assigns that record.
    pub fn new(specs: &[FaultSpec], resolve: impl Fn(u64) -> TupleId) -> Self {
        FaultInjector {
            faults: Arc::new(
                specs
                    .iter()
                    .map(|s| {
                        Arc::new(Armed {
                            target: resolve(s.tuple_id),
                            spec: s.clone(),
                            fired: AtomicBool::new(false),
                        })
                    })
                    .collect(),
            ),
        }
    }

    /// Each spec and whether it has fired.
    pub fn status(&self) -> Vec<(FaultSpec, bool)> {
        self.faults
            .iter()
            .map(|f| (f.spec.clone(), f.fired.load(Ordering::SeqCst)))
            .collect()
    }
}

/// Installs a panic hook that reports injected faults in one line and
/// leaves every other panic to the hook installed before.
///
/// The default hook prints a backtrace when `RUST_BACKTRACE` is set;
/// symbolizing one takes tens of milliseconds on the failing worker, before
/// the engine can see the failure — which would be measured as recovery
/// time that the engine did not spend.
pub fn quiet_injected_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied());
        match msg {
            Some(m) if m.starts_with("injected fault") => {
                let t = std::thread::current();
                eprintln!("thread '{}': {m}", t.name().unwrap_or("?"));
            }
            _ => previous(info),
        }
    }));
}

struct OperatorFaults(Vec<Arc<Armed>>);

impl RecordProbe for OperatorFaults {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        for f in &self.0 {
            if f.target == id && !f.fired.swap(true, Ordering::SeqCst) {
                return match f.spec.kind {
                    FaultKind::Panic => ProbeAction::Panic(format!("injected fault {}", f.spec)),
                    FaultKind::Stall { millis } => {
                        ProbeAction::Stall(Duration::from_millis(millis))
                    }
                    FaultKind::Cut => ProbeAction::CutInput,
                };
            }
        }
        ProbeAction::Continue
    }
}

impl ProbeFactory for FaultInjector {
    fn probe(&self, operator: &str, _instance: usize) -> Option<Box<dyn RecordProbe>> {
        let mine: Vec<Arc<Armed>> = self
            .faults
            .iter()
            .filter(|f| f.spec.operator == operator)
            .cloned()
            .collect();
        (!mine.is_empty()).then(|| Box::new(OperatorFaults(mine)) as Box<dyn RecordProbe>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_fires_once_on_its_tuple_and_only_in_its_operator() {
        let specs: Vec<FaultSpec> = ["panic@map:7", "stall@map:9:5", "cut@sink:3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let inj = FaultInjector::new(&specs, |n| TupleId::new(1, n));
        assert!(inj.probe("filter", 0).is_none());
        let mut map = inj.probe("map", 0).unwrap();
        let mut map_other_instance = inj.probe("map", 1).unwrap();
        assert_eq!(map.before(TupleId::new(0, 7)), ProbeAction::Continue);
        assert!(matches!(
            map.before(TupleId::new(1, 7)),
            ProbeAction::Panic(_)
        ));
        // Fired once, for every instance and every later probe (a restart).
        assert_eq!(
            map_other_instance.before(TupleId::new(1, 7)),
            ProbeAction::Continue
        );
        assert_eq!(
            inj.probe("map", 0).unwrap().before(TupleId::new(1, 7)),
            ProbeAction::Continue
        );
        assert_eq!(
            map.before(TupleId::new(1, 9)),
            ProbeAction::Stall(Duration::from_millis(5))
        );
        assert_eq!(
            inj.probe("sink", 2).unwrap().before(TupleId::new(1, 3)),
            ProbeAction::CutInput
        );
        let fired: Vec<bool> = inj.status().into_iter().map(|(_, f)| f).collect();
        assert_eq!(fired, vec![true, true, true]);
    }

    #[test]
    fn every_kind_round_trips_through_text() {
        for s in ["panic@flatmap:5000000", "stall@map:7:250", "cut@keyed:0"] {
            let f: FaultSpec = s.parse().unwrap();
            assert_eq!(f.to_string(), s);
        }
    }

    #[test]
    fn malformed_specs_are_errors_that_say_why() {
        let cases = [
            ("flatmap:5", "expected KIND@"),
            ("boom@flatmap:5", "unknown fault kind `boom`"),
            ("panic@:5", "operator name is empty"),
            ("panic@flatmap:x", "`x` is not a valid tuple id"),
            ("stall@flatmap:5", "stall takes OPERATOR:TUPLE_ID:MILLIS"),
            ("panic@flatmap:5:9", "panic takes OPERATOR:TUPLE_ID"),
            ("stall@flatmap:5:-1", "not a valid duration"),
        ];
        for (s, why) in cases {
            let e = s.parse::<FaultSpec>().unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
