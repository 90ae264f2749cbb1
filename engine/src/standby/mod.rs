//! BQBS active standby (the paper's buffer-queue backup strategy).
//!
//! An operator built after [`crate::Stream::standby`] runs, when the
//! runtime has a [`StandbyConfig`], as a *standby group* per instance: a
//! primary and a standby on another worker, fed through buffer queues by
//! its upstream, watched through a shared liveness cell, answering to its
//! consumers through fenced rings. `runtime/standby/group.rs` documents
//! the protocol: the data path, recovery points, takeover, end of stream,
//! why every wait ends, and the end-of-run check.
//!
//! - [`bq`] — the buffer queue: a file-backed memory-mapped ring between an
//!   operator's upstream and its primary and standby, indexed by position,
//!   holding tuple IDs and bytes, evicting FIFO only what every reader is
//!   done with and the newest recovery point covers, backpressuring
//!   otherwise.
//! - [`detlog`] — the determinant log: the order in which the primary took
//!   its input lanes, chunk by chunk, so that every replay takes them in
//!   the same order.
//! - [`epoch`] — the liveness cell primary and standby share: epoch,
//!   heartbeat, a futex; claiming the next epoch by compare-and-swap fences
//!   the old primary.
//! - [`exchange`] — the snapshot exchange: the primary publishes its
//!   state's archive into one of three mapped slots; a new primary or hot
//!   standby pins and maps the newest in place.
//! - [`decide`] — the pure decisions: a consumer's tracking of chunks
//!   (what to drop, whether a replay agrees), and the stall detector.
//! - [`codec`] — how the records of a standby operator's input become
//!   buffer-queue bytes where the queue holds them encoded
//!   ([`StandbyConfig::encoded_queues`]; by default the record itself sits
//!   in a typed slot beside its queue entry, and a chain right after a
//!   source replays the source instead of a queue:
//!   [`StandbyConfig::replay_sources`]).
//!
//! These are the protocol's parts, and import nothing above `sys`,
//! `record` and `checkpoint`'s file format. The runtime side — groups and
//! their recovery points, the upstream sender, the primary/standby port,
//! the consumers' fenced input, and the typed builders — is
//! `runtime/standby/` (engine-internal), whose `group.rs` documents the
//! protocol as a whole.

pub mod bq;
pub mod codec;
pub(crate) mod config;
pub mod decide;
pub mod detlog;
pub mod epoch;
pub mod exchange;
pub(crate) mod pipe;

pub use codec::{decode_bytes, decode_str, encode_bytes, Codec, CodecError};
pub use config::{Isolation, StandbyConfig, StandbyMode};
