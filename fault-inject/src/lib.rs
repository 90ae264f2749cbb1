//! Fault injection for stress-testing Tandem: the language of faults, seeded
//! schedules, the injector that plugs them into a running job, and an
//! independent checker of a faulted run's output.
//!
//! The engine never depends on this crate: it exposes seams
//! (`tandem::runtime::probe` — before each record of an operator, at each
//! stage of a standby's takeover, in the snapshot store's I/O thread, before
//! a sink's commit) and the [`FaultInjector`] plugs into them.
//!
//! - [`spec`] — one fault, `KIND@TARGET:WHEN[:ARG]`: panics, stalls (for a
//!   while or forever), slow operators, cut inputs, missed heartbeats,
//!   faulty standbys, damaged buffer-queue entries, failing sink commits,
//!   snapshot I/O errors, crashes around a checkpoint's publication and
//!   damaged snapshots; at a record, a tuple ID, a time offset, every K
//!   records, in bursts or spread over the input.
//! - [`schedule`] — several faults, listed or drawn at random from a seed;
//!   a drawn schedule prints as the list that reproduces it.
//! - [`inject`] — the injector.
//! - [`check`] — lost, duplicated and changed lines of a faulted output
//!   against a clean one.
//!
//! ```
//! use tandem_fault_inject::{FaultKind, FaultSpec, When};
//!
//! let f: FaultSpec = "stall@flatmap:5000000:20".parse().unwrap();
//! assert_eq!(f.target, "flatmap");
//! assert_eq!(f.when, When::Record(5_000_000));
//! assert_eq!(f.kind, FaultKind::Stall { millis: Some(20) });
//! ```

pub mod check;
mod damage;
pub mod inject;
pub mod schedule;
pub mod spec;

pub use check::{Checker, Outcome};
pub use inject::{FaultInjector, FaultInjectorBuilder, Fired, FiredOn, InjectError};
pub use schedule::{ExpandError, Schedule, ScheduleSpec, Space};
pub use spec::{
    Damage, Death, Errno, FaultKind, FaultSpec, IoStep, ParseFaultError, StandbyPhase, When,
    CHECKPOINT,
};

impl std::str::FromStr for Schedule {
    type Err = ParseFaultError;

    /// A listed schedule (`SPEC,SPEC,…`); a random one needs a [`Space`]:
    /// parse a [`ScheduleSpec`] and expand it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<ScheduleSpec>()? {
            ScheduleSpec::List(faults) => Ok(Schedule { faults }),
            ScheduleSpec::Random { .. } => Err(ParseFaultError::Invalid {
                spec: s.to_string(),
                why: "a random schedule is expanded against the workload (ScheduleSpec::expand)"
                    .into(),
            }),
        }
    }
}

/// Installs a panic hook that says nothing of injected faults (a harness
/// that counts them itself) and leaves every other panic to the hook
/// installed before.
pub fn silence_injected_panics() {
    install(false)
}

/// Installs a panic hook that reports injected faults in one line and
/// keeps every other panic on one of the engine's worker threads (a bug in
/// the program's own operator code, which the engine recovers from like an
/// injected one) to one line too — `thread 'tandem-w0' panicked at
/// src/main.rs:12:9: MESSAGE` — unless `RUST_BACKTRACE` asks for a
/// backtrace (set, and not `0`). Panics on other threads (the program's
/// own) go to the hook installed before.
///
/// The default hook prints a backtrace when `RUST_BACKTRACE` is set;
/// symbolizing one takes tens of milliseconds on the failing worker, before
/// the engine can see the failure — which would be measured as recovery
/// time that the engine did not spend.
pub fn quiet_injected_panics() {
    install(true)
}

/// Whether `RUST_BACKTRACE` asks for backtraces.
fn backtraces_asked() -> bool {
    std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0")
}

fn install(report: bool) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied());
        let t = std::thread::current();
        let name = t.name().unwrap_or("?");
        match msg {
            Some(m) if m.starts_with("injected fault") => {
                if report {
                    eprintln!("thread '{name}': {m}");
                }
            }
            _ if report && name.starts_with("tandem-") && !backtraces_asked() => {
                let at = info
                    .location()
                    .map_or_else(String::new, |l| format!(" at {l}"));
                eprintln!(
                    "thread '{name}' panicked{at}: {}",
                    msg.unwrap_or("Box<dyn Any>")
                );
            }
            _ => previous(info),
        }
    }));
}
