//! The snapshot store's fault seam: a [`StorageProbe`] is consulted by the
//! store's I/O thread before each write and fsync, between writing a
//! checkpoint and publishing it, and after publishing it. The runtime hands
//! one out through `ProbeFactory::storage` (`crate::runtime::probe`, which
//! re-exports these); the `tandem-fault-inject` crate implements it.

use super::Manifest;
use std::path::Path;

/// What a [`StorageProbe`] asks of the snapshot store at a publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageAction {
    /// Go on.
    Continue,
    /// The process "crashes" here: the store stops this checkpoint where
    /// it is (what is on disk stays there), and the attempt fails as a
    /// process crash would fail it, with the sinks' output of that
    /// checkpoint not committed.
    Crash,
}

/// Consulted by the snapshot store's I/O thread (see `ProbeFactory::storage` in `crate::runtime::probe`).
///
/// Every method has a default that does nothing; errors returned stand for
/// what the device would have returned (EIO, ENOSPC …), so the engine's
/// handling of a failed write is the one exercised — nothing is written for
/// real past an injected error.
pub trait StorageProbe: Send + Sync + 'static {
    /// Before writing the snapshot file `path` of checkpoint `checkpoint`.
    fn write(&self, _checkpoint: u64, _path: &Path) -> Option<std::io::Error> {
        None
    }
    /// Before fsyncing the files of checkpoint `checkpoint` (`path` is the
    /// first of them).
    fn fsync(&self, _checkpoint: u64, _path: &Path) -> Option<std::io::Error> {
        None
    }
    /// Every file of `checkpoint` and its staged manifest are durable; the
    /// rename that publishes it comes next.
    fn before_publish(&self, _checkpoint: u64) -> StorageAction {
        StorageAction::Continue
    }
    /// `manifest` is published and durable (its files may be damaged here,
    /// as a disk would damage them).
    fn published(&self, _manifest: &Manifest) -> StorageAction {
        StorageAction::Continue
    }
}
