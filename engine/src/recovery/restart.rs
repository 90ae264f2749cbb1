//! Restart strategies: what to do after the job's `n`-th failure.
//!
//! A strategy is a value ([`RestartStrategy`]) and a pure decision,
//! [`RestartStrategy::decide`], over the failure history (the engine-clock
//! times of every failure so far, the newest last). The four strategies are
//! Flink's:
//!
//! | strategy | restarts while | delay before restart |
//! | --- | --- | --- |
//! | `none` | never | — |
//! | `fixed:A:D` | fewer than `A` restarts so far | `D` |
//! | `exp:I:M:F:J:R` | always | `I·Fᵏ` capped at `M`, ±`J` jitter; `k` resets after `R` without failure |
//! | `rate:N:W:D` | at most `N` failures in any window `W` | `D` |
//!
//! Jitter is derived from the attempt number, not a random source, so the
//! same history always gives the same decision.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How the job reacts to a failure.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RestartStrategy {
    /// Fail the job at the first failure.
    None,
    /// Restart up to `attempts` times, each after `delay`.
    FixedDelay {
        /// Restarts allowed in total.
        attempts: u32,
        /// Wait before each restart.
        delay: Duration,
    },
    /// Restart forever, waiting longer after each consecutive failure.
    ExponentialBackoff {
        /// Delay after the first failure.
        initial: Duration,
        /// Largest delay.
        max: Duration,
        /// Growth factor per consecutive failure (≥ 1).
        multiplier: f64,
        /// Relative jitter in `[0, 1)`: the delay varies by up to ± this share.
        jitter: f64,
        /// A quiet period after which the backoff starts over.
        reset_after: Duration,
    },
    /// Restart unless more than `max_failures` happened within `interval`.
    FailureRate {
        /// Failures tolerated per interval.
        max_failures: u32,
        /// The sliding window.
        interval: Duration,
        /// Wait before each restart.
        delay: Duration,
    },
}

/// What the supervisor does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Restart after waiting this long.
    Restart {
        /// The wait.
        after: Duration,
    },
    /// Give up: the job ends with this reason.
    GiveUp {
        /// Why.
        reason: String,
    },
}

impl RestartStrategy {
    /// Decides after a failure. `failures` holds the time of every failure so
    /// far (engine clock), oldest first, including the one just observed.
    pub fn decide(&self, failures: &[Duration]) -> Decision {
        let Some(&now) = failures.last() else {
            // No failure: nothing to restart from; treat as an immediate restart.
            return Decision::Restart {
                after: Duration::ZERO,
            };
        };
        let n = failures.len() as u64;
        match self {
            RestartStrategy::None => Decision::GiveUp {
                reason: "restart strategy is `none`".into(),
            },
            RestartStrategy::FixedDelay { attempts, delay } => {
                if n <= *attempts as u64 {
                    Decision::Restart { after: *delay }
                } else {
                    Decision::GiveUp {
                        reason: format!("{n} failures exceed the {attempts} restarts allowed"),
                    }
                }
            }
            RestartStrategy::ExponentialBackoff {
                initial,
                max,
                multiplier,
                jitter,
                reset_after,
            } => {
                // Consecutive failures: count back while gaps are shorter
                // than the reset period.
                let mut k = 0u32;
                for w in failures.windows(2).rev() {
                    if w[1].saturating_sub(w[0]) >= *reset_after {
                        break;
                    }
                    k += 1;
                }
                let base = initial.as_secs_f64() * multiplier.max(1.0).powi(k as i32);
                let capped = base.min(max.as_secs_f64());
                let j = jitter.clamp(0.0, 0.999) * unit_noise(n);
                let after =
                    Duration::from_secs_f64((capped * (1.0 + j)).min(max.as_secs_f64()).max(0.0));
                Decision::Restart { after }
            }
            RestartStrategy::FailureRate {
                max_failures,
                interval,
                delay,
            } => {
                let recent = failures
                    .iter()
                    .filter(|&&t| now.saturating_sub(t) < *interval)
                    .count() as u64;
                if recent <= *max_failures as u64 {
                    Decision::Restart { after: *delay }
                } else {
                    Decision::GiveUp {
                        reason: format!(
                            "{recent} failures within {} exceed the {max_failures} allowed",
                            fmt_duration(*interval)
                        ),
                    }
                }
            }
        }
    }
}

/// What restarts after a failure no standby covers (Flink's
/// `jobmanager.execution.failover-strategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failover {
    /// Every task of the job restarts from the last complete checkpoint
    /// (Flink's `full`).
    #[default]
    Full,
    /// Only the failed task's region restarts: the instances joined to it
    /// by forward edges, and through every all-to-all exchange on the way,
    /// both sides whole ([`crate::Job::regions`]). No record crosses from
    /// one region to another, so the region's own state and source
    /// positions of the last complete checkpoint are consistent alone, and
    /// the other regions run on, their output uninterrupted (Flink's
    /// `region`).
    Region,
}

impl Failover {
    /// `full` or `region`.
    pub fn name(self) -> &'static str {
        match self {
            Failover::Full => "full",
            Failover::Region => "region",
        }
    }
}

impl FromStr for Failover {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "full" => Ok(Failover::Full),
            "region" => Ok(Failover::Region),
            _ => Err(format!(
                "invalid failover strategy `{s}` (expected full | region)"
            )),
        }
    }
}

/// Deterministic noise in `[-1, 1)` from the attempt number (SplitMix64).
fn unit_noise(attempt: u64) -> f64 {
    let mut z = attempt.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// Why a restart strategy did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid restart strategy `{spec}`: {why} (expected none | fixed:ATTEMPTS:DELAY | exp:INITIAL:MAX:MULTIPLIER:JITTER:RESET | rate:FAILURES:INTERVAL:DELAY)")]
pub struct ParseStrategyError {
    /// The text given.
    pub spec: String,
    /// What is wrong.
    pub why: String,
}

/// The longest duration [`parse_duration`] accepts: a year. Longer
/// delays, timeouts and intervals mean nothing to a running job, and
/// bounding them keeps every `Instant + Duration` the engine computes from
/// one far from overflowing.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses `250ms`, `2s`, `1.5s`, `3m`, `0` (milliseconds when no unit),
/// up to [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, scale) = if let Some(v) = s.strip_suffix("ms") {
        (v, 1e-3)
    } else if let Some(v) = s.strip_suffix("us") {
        (v, 1e-6)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('m') {
        (v, 60.0)
    } else {
        (s, 1e-3)
    };
    let v: f64 = num.trim().parse().ok()?;
    Duration::try_from_secs_f64(v * scale)
        .ok()
        .filter(|d| *d <= MAX_DURATION)
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_secs_f64() * 1e3)
    }
}

impl FromStr for RestartStrategy {
    type Err = ParseStrategyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| ParseStrategyError {
            spec: s.to_string(),
            why: why.to_string(),
        };
        let parts: Vec<&str> = s.trim().split(':').collect();
        let dur = |i: usize, what: &str| {
            parts.get(i).and_then(|p| parse_duration(p)).ok_or_else(|| {
                err(&format!(
                    "{what} must be a duration such as 250ms or 2s, at most a year"
                ))
            })
        };
        let int = |i: usize, what: &str| match parts.get(i).map(|p| p.trim().parse::<u64>()) {
            Some(Ok(v)) => u32::try_from(v)
                .map_err(|_| err(&format!("{what} {v} is above the maximum {}", u32::MAX))),
            _ => Err(err(&format!("{what} must be a non-negative integer"))),
        };
        let float = |i: usize, what: &str| {
            parts
                .get(i)
                .and_then(|p| p.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite())
                .ok_or_else(|| err(&format!("{what} must be a number")))
        };
        let arity = |n: usize| {
            if parts.len() == n {
                Ok(())
            } else {
                Err(err(&format!("{} takes {} fields", parts[0], n - 1)))
            }
        };
        match parts[0].trim() {
            "none" => {
                arity(1)?;
                Ok(RestartStrategy::None)
            }
            "fixed" => {
                arity(3)?;
                Ok(RestartStrategy::FixedDelay {
                    attempts: int(1, "ATTEMPTS")?,
                    delay: dur(2, "DELAY")?,
                })
            }
            "exp" => {
                arity(6)?;
                let multiplier = float(3, "MULTIPLIER")?;
                let jitter = float(4, "JITTER")?;
                if multiplier < 1.0 {
                    return Err(err("MULTIPLIER must be at least 1"));
                }
                if !(0.0..1.0).contains(&jitter) {
                    return Err(err("JITTER must be in [0, 1)"));
                }
                let (initial, max) = (dur(1, "INITIAL")?, dur(2, "MAX")?);
                if max < initial {
                    return Err(err("MAX must not be below INITIAL"));
                }
                Ok(RestartStrategy::ExponentialBackoff {
                    initial,
                    max,
                    multiplier,
                    jitter,
                    reset_after: dur(5, "RESET")?,
                })
            }
            "rate" => {
                arity(4)?;
                Ok(RestartStrategy::FailureRate {
                    max_failures: int(1, "FAILURES")?,
                    interval: dur(2, "INTERVAL")?,
                    delay: dur(3, "DELAY")?,
                })
            }
            other => Err(err(&format!("unknown strategy `{other}`"))),
        }
    }
}

impl fmt::Display for RestartStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |d: &Duration| format!("{}ms", d.as_secs_f64() * 1e3);
        match self {
            RestartStrategy::None => write!(f, "none"),
            RestartStrategy::FixedDelay { attempts, delay } => {
                write!(f, "fixed:{attempts}:{}", d(delay))
            }
            RestartStrategy::ExponentialBackoff {
                initial,
                max,
                multiplier,
                jitter,
                reset_after,
            } => write!(
                f,
                "exp:{}:{}:{multiplier}:{jitter}:{}",
                d(initial),
                d(max),
                d(reset_after)
            ),
            RestartStrategy::FailureRate {
                max_failures,
                interval,
                delay,
            } => write!(f, "rate:{max_failures}:{}:{}", d(interval), d(delay)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn none_gives_up_at_the_first_failure() {
        assert!(matches!(
            RestartStrategy::None.decide(&[ms(5)]),
            Decision::GiveUp { .. }
        ));
    }

    #[test]
    fn fixed_delay_restarts_exactly_attempts_times() {
        let s = RestartStrategy::FixedDelay {
            attempts: 2,
            delay: ms(10),
        };
        assert_eq!(s.decide(&[ms(1)]), Decision::Restart { after: ms(10) });
        assert_eq!(
            s.decide(&[ms(1), ms(2)]),
            Decision::Restart { after: ms(10) }
        );
        assert!(matches!(
            s.decide(&[ms(1), ms(2), ms(3)]),
            Decision::GiveUp { .. }
        ));
    }

    #[test]
    fn exponential_backoff_grows_caps_and_resets_after_quiet() {
        let s = RestartStrategy::ExponentialBackoff {
            initial: ms(100),
            max: ms(1000),
            multiplier: 2.0,
            jitter: 0.0,
            reset_after: ms(5000),
        };
        let d = |h: &[Duration]| match s.decide(h) {
            Decision::Restart { after } => after,
            g => panic!("{g:?}"),
        };
        assert_eq!(d(&[ms(0)]), ms(100));
        assert_eq!(d(&[ms(0), ms(10)]), ms(200));
        assert_eq!(d(&[ms(0), ms(10), ms(20)]), ms(400));
        assert_eq!(
            d(&[ms(0), ms(10), ms(20), ms(30), ms(40), ms(50)]),
            ms(1000)
        );
        // A quiet period longer than `reset_after` starts over.
        assert_eq!(d(&[ms(0), ms(10), ms(20), ms(9000)]), ms(100));
    }

    #[test]
    fn backoff_jitter_stays_within_its_share_and_is_deterministic() {
        let s = RestartStrategy::ExponentialBackoff {
            initial: ms(1000),
            max: ms(60_000),
            multiplier: 1.0,
            jitter: 0.2,
            reset_after: ms(1),
        };
        let mut seen = std::collections::BTreeSet::new();
        for n in 1..50u64 {
            let h: Vec<Duration> = (0..n).map(|i| ms(i * 10)).collect();
            let Decision::Restart { after } = s.decide(&h) else {
                panic!()
            };
            assert!(after >= ms(800) && after <= ms(1200), "{after:?}");
            assert_eq!(s.decide(&h), Decision::Restart { after });
            seen.insert(after);
        }
        assert!(seen.len() > 10, "jitter varies with the attempt");
    }

    #[test]
    fn failure_rate_counts_only_the_sliding_window() {
        let s = RestartStrategy::FailureRate {
            max_failures: 2,
            interval: ms(1000),
            delay: ms(5),
        };
        assert_eq!(
            s.decide(&[ms(0), ms(500)]),
            Decision::Restart { after: ms(5) }
        );
        assert!(matches!(
            s.decide(&[ms(0), ms(500), ms(900)]),
            Decision::GiveUp { .. }
        ));
        // The first failure has left the window.
        assert_eq!(
            s.decide(&[ms(0), ms(1500), ms(1900)]),
            Decision::Restart { after: ms(5) }
        );
    }

    #[test]
    fn strategies_parse_from_and_print_to_the_cli_syntax() {
        for (text, want) in [
            ("none", RestartStrategy::None),
            (
                "fixed:3:0ms",
                RestartStrategy::FixedDelay {
                    attempts: 3,
                    delay: ms(0),
                },
            ),
            (
                "exp:100ms:10s:2:0.1:60s",
                RestartStrategy::ExponentialBackoff {
                    initial: ms(100),
                    max: ms(10_000),
                    multiplier: 2.0,
                    jitter: 0.1,
                    reset_after: ms(60_000),
                },
            ),
            (
                "rate:3:1m:250ms",
                RestartStrategy::FailureRate {
                    max_failures: 3,
                    interval: ms(60_000),
                    delay: ms(250),
                },
            ),
        ] {
            let got: RestartStrategy = text.parse().unwrap();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string().parse::<RestartStrategy>().unwrap(), want);
        }
    }

    #[test]
    fn malformed_strategies_are_errors_that_say_why() {
        for (text, why) in [
            ("fixed:3", "takes 2 fields"),
            ("fixed:x:1s", "ATTEMPTS"),
            ("fixed:3:soon", "DELAY"),
            ("exp:1s:100ms:2:0:1s", "MAX must not be below"),
            ("exp:1s:2s:0.5:0:1s", "MULTIPLIER"),
            ("exp:1s:2s:2:1.5:1s", "JITTER"),
            ("retry:3", "unknown strategy"),
        ] {
            let e = text.parse::<RestartStrategy>().unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
