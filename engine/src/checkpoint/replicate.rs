//! Copying checkpoints off the host before they count.
//!
//! A [`Replicator`] is called by the store's I/O thread once a checkpoint's
//! files are durable in the local directory and before its manifest is
//! published there. Only when it returns `Ok` is the checkpoint published
//! and its sinks' output committed; an error fails the checkpoint as a
//! failed write would. So a checkpoint a job's sinks commit is always one a
//! process on another host can restore — what lets a group of processes
//! hand a partition from one to another (the NATS connector's object
//! store is one such replicator).
//!
//! Replication runs on the I/O thread, never on a worker: a slow network
//! delays the checkpoint, not the data path.

use super::manifest::Manifest;
use std::path::Path;

/// Copies a checkpoint elsewhere before it is published.
pub trait Replicator: Send + Sync + 'static {
    /// Checkpoint `manifest.id`'s files are durable under `dir` (the
    /// manifest's file paths are relative to it); copy them and the
    /// manifest off the host, and make the copy the one a restore finds.
    /// Runs on the store's I/O thread; blocking is fine.
    fn replicate(&self, dir: &Path, manifest: &Manifest) -> Result<(), ReplicationError>;

    /// Whether a copy holds what an incremental checkpoint's restore
    /// reads besides its own files: the links of its chains
    /// ([`super::FileEntry::chain`]), written by earlier checkpoints. A
    /// replicator that copies only `manifest.files` says `false` (the
    /// default), and the job's checkpoints are then all whole.
    fn copies_chains(&self) -> bool {
        false
    }
}

/// Why a checkpoint could not be replicated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicationError {
    /// The copy failed; a later checkpoint may succeed (the configured
    /// tolerable failures apply).
    #[error("{0}")]
    Failed(String),
    /// Another process owns what this job checkpoints (its lease was taken
    /// over): this job must stop, and never commit output again.
    #[error("fenced: {0}")]
    Fenced(String),
}
