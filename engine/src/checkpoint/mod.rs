//! Durable snapshots: the storage half of checkpoint restart-all.
//!
//! This module owns the on-disk form of operator state — snapshot files,
//! manifests, savepoints, retention — and the thread that writes them.
//! Barriers, alignment and recovery orchestration live elsewhere and use it
//! through [`SnapshotStore`].
//!
//! ## What a caller does
//!
//! An operator instance serializes its state into a [`SnapshotBytes`]
//! (rkyv, straight into a 4096-aligned buffer: e.g.
//! [`KeyedState::to_snapshot_bytes`](crate::state::KeyedState::to_snapshot_bytes)),
//! wraps it in an [`OperatorSnapshot`] with the tuple positions it covers,
//! and hands the set to [`SnapshotStore::submit`], which returns at once: the
//! bytes move to the store's I/O thread, which owns the io_uring
//! ([`crate::sys::uring`]). The data path goes on processing; the returned
//! [`Pending`] reports when the checkpoint is durable. Serialization itself
//! runs on the caller's core (it reads the live state).
//!
//! ## Directory layout
//!
//! ```text
//! DIR/
//!   manifest-<id>.json          published checkpoint <id>
//!   manifest-<id>.json.tmp      a manifest being written (never read)
//!   chk-<id>/<operator>-<instance>.snap
//!   sp-<id>/manifest.json       published savepoint <id> (self-contained:
//!   sp-<id>/<operator>-<instance>.snap     the directory can be moved)
//! ```
//!
//! ## Snapshot file layout
//!
//! All integers little-endian. The header is hand-encoded so that every
//! future version can identify and check a file before interpreting it.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "TNDMSNAP"
//!      8     4  format version (2; 1 is still read)
//!     12     4  header length H = 80 + n + 12·m (bytes covered by the header checksum)
//!     16     8  header checksum: XXH3-64 of bytes [0, H) with this field zeroed
//!     24     8  payload length L (unpadded)
//!     32     8  body checksum: XXH3-64 of the block table
//!     40     8  checkpoint id
//!     48     8  created at, ms since the Unix epoch
//!     56     4  operator instance
//!     60     2  n = operator name length
//!     62     2  m = number of positions
//!     64     8  key index length X (0: none)
//!     72     4  log2 of the checked block size (16: 64 KiB)
//!     76     4  zero
//!     80     n  operator name, UTF-8
//!   80+n  12·m  positions: (source partition u32, next sequence u64) each
//!      H     …  zeros up to 4096
//!   4096     L  rkyv payload, zeros up to a multiple of 4096
//!      I     X  key index (a whole keyed archive's, `state::index`), zeros up to a multiple of 4096
//!      T   8·B  block table: XXH3-64 of each 64 KiB block of the body [4096, T), zeros up to a multiple of 4096
//! ```
//!
//! Version 1 files have a 64-byte fixed header (no index length, no block
//! size), the payload checksum is XXH3-64 of the payload, and the file
//! ends after the padded payload.
//!
//! The header block and the padding make every transfer 4096-aligned, as
//! `O_DIRECT` requires, and put the payload on a page boundary when the file
//! is mapped, which satisfies every alignment the archive needs.
//!
//! **The block table** lets a reader verify what it reads and nothing
//! else: a lazy restore ([`LazySnapshot`]) checks the header and the
//! table's checksum, then each 64 KiB block the first time it reads from
//! it — a key's entry, a bucket of the key index — so that a 500 MB state
//! restores without reading 500 MB first, and nothing it reads is
//! unverified. An eager open verifies every block.
//!
//! **Checksum: XXH3-64** (`xxhash-rust`). It runs at memory speed on any
//! x86-64 or ARM core without special instructions (SSE2/NEON), which keeps
//! restore of 500 MB well inside its 200 ms budget; its output is frozen by
//! the xxHash specification, so old files stay checkable; and 64 bits make
//! an undetected random corruption a 2⁻⁶⁴ event. CRC32C would need SSE4.2
//! for comparable speed and offers 32 bits; the burst-error guarantees CRCs
//! add matter for links, not for files that are checked end to end. The
//! writer hashes each chunk right after submitting it, so hashing overlaps
//! the device instead of adding a pass.
//!
//! **rkyv format**, pinned by the workspace's feature selection (not
//! rkyv's defaults, which could change): little-endian, aligned, 32-bit
//! relative pointers (`little_endian`, `aligned`, `pointer_width_32`). So an
//! archive reads the same on any host, and one payload is limited to 2 GiB
//! (relative offsets are `i32`). Changing any of these is a new format
//! version.
//!
//! ## Publish protocol
//!
//! The I/O thread, for checkpoint `id`:
//!
//! 1. creates `chk-<id>/`; for each snapshot, writes the payload, then the
//!    header block, then `fsync`s the file (io_uring `O_DIRECT`, see
//!    [`crate::sys::uring`]);
//! 2. `fsync`s `chk-<id>/`, so the file names are durable;
//! 3. writes `manifest-<id>.json.tmp` (files, sizes, checksums, positions),
//!    `fsync`s it, renames it to `manifest-<id>.json`, `fsync`s `DIR`;
//! 4. applies retention: deletes the manifests of all but the newest
//!    `retain` checkpoints (then `fsync`s `DIR`), then their `chk-<id>/`
//!    directories, and `chk-<id>/` leftovers of unpublished checkpoints older
//!    than the newest one.
//!
//! A savepoint follows the same steps in `sp-<id>/` with `sp-<id>/manifest.json`,
//! then `fsync`s `DIR`; retention never touches `sp-*`.
//!
//! ## What a crash leaves
//!
//! | crash during / after       | on disk                                   | restart uses |
//! |----------------------------|-------------------------------------------|--------------|
//! | 1–2 (files)                | partial `chk-<id>/`, no manifest          | previous checkpoint; the leftover is removed by the next retention pass |
//! | 3 before the rename        | `manifest-<id>.json.tmp`                  | previous checkpoint (`.tmp` is never read) |
//! | 3 after the rename         | `manifest-<id>.json` (maybe not yet durable) | `id` if the rename reached the disk, else the previous one — either is complete |
//! | 4                          | some old manifests or directories remain  | `id`; the next pass finishes the deletion |
//!
//! Because a manifest is only published after every file and the directory
//! are fsynced, a published manifest never names missing or partial bytes —
//! unless the disk itself corrupts them, which the checksums catch:
//! [`SnapshotStore::latest_valid`] verifies every file of the newest
//! manifest and falls back to older retained ones, returning each skipped
//! checkpoint with its [`CheckpointError`].
//!
//! ## Restore
//!
//! [`SnapshotFile::open`] maps a file, checks header, length and payload
//! checksum (every block); [`SnapshotFile::access`] then validates the archive with rkyv's
//! checked access (bytecheck). [`LazySnapshot::open`] checks the header,
//! the length and the block table, and each block as it is read; a keyed
//! state restores from one key by key (`crate::state`'s lazy restore). [`SnapshotFile::verify`] (and
//! [`Manifest::check`]) make the same checks without a map, for readers of
//! files another process owns. Every reader opens only regular files (a
//! FIFO or a device in a store is an error, never a wait or an endless
//! read) and reads a manifest of at most [`MAX_MANIFEST`] bytes. [`SnapshotFile::access_unchecked`] skips
//! bytecheck — sound only for a file this engine wrote from that type, which
//! the checksum (already verified) and the caller's promise establish.

mod error;
pub mod format;
pub mod lazy;
pub mod manifest;
pub mod probe;
pub mod replicate;
pub mod restore;
pub mod store;

pub use error::CheckpointError;
pub use format::{serialize, ArchiveSteps, Position, SnapshotBytes, SnapshotHeader, StateCapture};
pub use lazy::LazySnapshot;
pub use replicate::{ReplicationError, Replicator};
pub use restore::SnapshotFile;

use rkyv::{api::high::HighValidator, bytecheck::CheckBytes, rancor, Archive, Portable};

/// The archived `T` in a snapshot payload (e.g. the bytes handed to
/// [`crate::Process::restore_state`]), validated by rkyv's checked access.
pub fn access<T>(payload: &[u8]) -> Result<&T::Archived, CheckpointError>
where
    T: Archive,
    T::Archived: Portable + for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
{
    rkyv::access::<T::Archived, rancor::Error>(payload)
        .map_err(|source| CheckpointError::Access { source })
}
pub use manifest::{
    list, open_savepoint, ChainFile, FileEntry, LatestValid, Listing, Manifest, Skipped,
    SnapshotKind, MAX_MANIFEST,
};
pub use store::{OperatorSnapshot, Pending, Published, SnapshotStore, DEFAULT_RETAIN};
