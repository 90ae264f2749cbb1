//! The runtime side of BQBS: standby groups at run time, the upstream
//! sender into their buffer queues (and the typed slots beside them), the primary and standby ports, the
//! consumers' fenced input, and the typed builders (`kit.rs`), above
//! everything they build; what those share — the queue entry format, a
//! type's codec functions — is `entry.rs`, below them all. The protocol's parts —
//! the buffer queue, the determinant log, the liveness cell, the snapshot
//! exchange and the pure decisions — are [`crate::standby`]'s, below the
//! runtime; `group.rs` documents the protocol as a whole.

pub(crate) mod build;
pub(crate) mod entry;
pub(crate) mod fenced;
pub(crate) mod group;
pub(crate) mod incarnation;
pub(crate) mod kit;
pub(crate) mod remote;
pub(crate) mod role;
pub(crate) mod run;
pub(crate) mod sender;
pub(crate) mod slots;
