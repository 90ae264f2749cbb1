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
//! A fault fires once, the first time that operator sees that tuple ID.
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

#[cfg(test)]
mod tests {
    use super::*;

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
