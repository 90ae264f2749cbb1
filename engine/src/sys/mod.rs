//! Operating-system glue: CPU discovery and pinning, process resource usage,
//! threads' scheduler state, io_uring file writes, reading files another
//! process may change (regular files only, bounded reads).
//!
//! Everything here is a thin, fallible wrapper: callers get an error they can
//! report, never a panic, when the machine lacks what the engine asks for.

pub mod affinity;
pub mod file;
pub mod limits;
pub mod rusage;
pub mod thread;
pub mod uring;
