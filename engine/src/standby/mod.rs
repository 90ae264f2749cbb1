//! BQBS active standby (the paper's buffer-queue backup strategy).
//!
//! An operator built after [`crate::Stream::standby`] runs, when the
//! runtime has a [`StandbyConfig`], as a *standby group* per instance: a
//! primary and a standby on another worker, fed through buffer queues by
//! its upstream, watched through a shared liveness cell, answering to its
//! consumers through fenced rings. `group.rs` documents the takeover protocol.
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
//! - [`codec`] — how the records of a standby operator's input become
//!   buffer-queue bytes.
//! - `group` and `port` (engine-internal) — the runtime side: groups,
//!   incarnations, the dual-dispatch sender and the consumers' fenced
//!   input.

pub mod bq;
pub mod codec;
pub mod decide;
pub mod epoch;
pub mod exchange;
pub(crate) mod group;
pub(crate) mod port;

pub use codec::{Codec, CodecError};
pub use group::{StandbyConfig, StandbyMode};
