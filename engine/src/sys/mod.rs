//! Operating-system glue: CPU discovery and pinning, process resource usage,
//! threads' scheduler state, io_uring file writes, filesystem space, scratch
//! directories that outlive a killed run only until the next run's sweep,
//! reading files another process may change (regular files only, bounded
//! reads), writing files a user named (checked first, staged, renamed into
//! place), dropping large buffers off the data path, and child processes
//! that die with the engine and report how they ended, and instants as
//! people read them (UTC).
//!
//! Everything here is a thin, fallible wrapper: callers get an error they can
//! report, never a panic, when the machine lacks what the engine asks for.

pub mod affinity;
pub mod aligned;
pub mod clock;
pub mod file;
pub mod fs;
pub mod limits;
pub mod output;
pub mod process;
pub mod reap;
pub mod rusage;
pub mod scratch;
#[cfg(test)]
mod test_dir;
pub mod thread;
pub mod uring;
pub mod utc;
