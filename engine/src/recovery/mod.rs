//! Recovery decisions, as pure functions of what was observed.
//!
//! Nothing here does I/O, reads a clock or spawns a thread: every function
//! takes the failure history, sizes and times it needs as arguments and
//! returns a decision, so each branch is unit-tested and the runtime's
//! supervisor (which does the I/O) stays thin.
//!
//! - [`restart`] — whether and when to restart after a failure: fixed delay,
//!   exponential backoff, failure rate, or never (Flink's strategies).
//! - [`interval`] — an adaptive checkpoint interval from the observed failure
//!   rate and the cost of a checkpoint.
//! - [`resume`] — which restore point of a directory a job resumes from.
//! - [`compose`] — standbys beside checkpoints: which recovery a failure
//!   gets (takeover or restart-all), and whether a checkpoint may complete
//!   across a takeover.

pub mod compose;
pub mod interval;
pub mod restart;
pub mod resume;
