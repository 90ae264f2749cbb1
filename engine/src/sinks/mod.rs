//! Ready-made sinks.
//!
//! - [`transactional`] — a two-phase-commit file sink: output becomes
//!   visible only when the checkpoint covering it is complete, so a job that
//!   restarts from its last checkpoint never leaves duplicates behind.

pub mod transactional;
