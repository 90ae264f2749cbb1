//! Queues: the only way data crosses cores in Tandem.
//!
//! Tandem runs one thread per core, and an operator's state never leaves its
//! core. Everything that does move between cores (records, watermarks,
//! checkpoint barriers, control messages) travels through a queue from this
//! module; no other shared mutable state exists on the data path.
//!
//! * [`spsc`]: a bounded, lock-free single-producer single-consumer ring.
//!   Each directed edge between two cores gets its own ring, so every ring
//!   has exactly one writer and one reader and needs neither locks nor
//!   read-modify-write atomics. The producer and consumer handles are `Send`
//!   (each is moved to its core once) but not `Clone`. Items must be `Send`.
//!   Storage is pluggable: [`spsc::Heap`] (any `T: Send`) or
//!   [`spsc::Mapped`] (plain-old-data items in a memory mapping, shareable
//!   with another process or backed by a file).
//!
//! Queues are bounded on purpose: a full ring is the back-pressure signal,
//! and the producer decides whether to retry, yield, or stage more work.

#![warn(
    missing_docs,
    missing_debug_implementations,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc,
    unsafe_op_in_unsafe_fn
)]

pub mod spsc;
mod storage;
