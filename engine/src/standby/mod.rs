//! BQBS active standby (the paper's buffer-queue backup strategy): the
//! pieces built so far.
//!
//! - [`bq`] — the buffer queue: a file-backed memory-mapped ring between an
//!   operator's dispatcher and its primary and standby, indexed by position,
//!   holding tuple IDs and bytes, evicting FIFO only what every reader is
//!   done with and a usable snapshot covers, backpressuring otherwise.
//! - [`epoch`] — the liveness cell primary and standby share: epoch,
//!   heartbeat, a futex the standby parks on; claiming the next epoch by
//!   compare-and-swap fences the old primary.
//! - [`exchange`] — warm mode's snapshot exchange: the primary publishes
//!   its state's archive into one of three mapped slots; the standby pins
//!   and maps the newest in place.
//! - [`decide`] — the pure decisions of takeover.
//!
//! Dual dispatch, the shared epoch, filtering and takeover in the runtime
//! come next (see the README).

pub mod bq;
pub mod decide;
pub mod epoch;
pub mod exchange;
