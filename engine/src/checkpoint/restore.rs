//! Reading a snapshot file back: map it, verify it, then hand out the
//! archived value. The only unsafe code of the checkpoint layer lives here.
//!
//! [`SnapshotFile::open`] maps the file read-only (pages populated up front,
//! so the verification pass does not fault page by page), decodes and checks
//! the header, checks the file length, and hashes the payload against the
//! header's checksum. A `SnapshotFile` therefore only exists for intact
//! bytes. [`SnapshotFile::access`] then runs rkyv's validator (bytecheck)
//! over the archive; [`SnapshotFile::access_unchecked`] skips that pass and
//! relies on the checksum plus the caller's word that the file holds a `T`.

use std::{fs::File, path::Path, path::PathBuf};

use memmap2::{Mmap, MmapOptions};
use rkyv::{api::high::HighValidator, bytecheck::CheckBytes, rancor, Archive, Portable};

use super::{
    format::{checksum, SnapshotHeader, HEADER_BLOCK},
    CheckpointError,
};

/// A verified, memory-mapped snapshot file.
pub struct SnapshotFile {
    path: PathBuf,
    header: SnapshotHeader,
    map: Mmap,
}

impl SnapshotFile {
    /// Maps `path` and verifies header, length and payload checksum.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(CheckpointError::io(path, "open"))?;
        let len = file
            .metadata()
            .map_err(CheckpointError::io(path, "stat"))?
            .len();
        if len < HEADER_BLOCK as u64 {
            return Err(CheckpointError::Length {
                path: path.to_path_buf(),
                expected: HEADER_BLOCK as u64,
                found: len,
            });
        }
        // SAFETY: the map is read-only and private to this process. Snapshot
        // files are written once, before their manifest is published, and
        // never modified afterwards; only retention deletes them, which
        // leaves existing mappings intact. An outside process truncating
        // the file would make access raise SIGBUS — a broken deployment,
        // not a state this code can reach on its own.
        let map = unsafe { MmapOptions::new().populate().map(&file) }
            .map_err(CheckpointError::io(path, "mmap"))?;
        // The map's own length from here on: the file's may have changed
        // since it was measured.
        let len = map.len() as u64;
        let header = SnapshotHeader::decode(&map, path)?;
        if header.file_len() != len {
            return Err(CheckpointError::Length {
                path: path.to_path_buf(),
                expected: header.file_len(),
                found: len,
            });
        }
        let payload = &map[HEADER_BLOCK..HEADER_BLOCK + header.payload_len as usize];
        let computed = checksum(payload);
        if computed != header.payload_checksum {
            return Err(CheckpointError::PayloadChecksum {
                path: path.to_path_buf(),
                stored: header.payload_checksum,
                computed,
            });
        }
        Ok(SnapshotFile {
            path: path.to_path_buf(),
            header,
            map,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The verified header.
    pub fn header(&self) -> &SnapshotHeader {
        &self.header
    }

    /// The verified payload bytes (4096-aligned in memory).
    pub fn payload(&self) -> &[u8] {
        &self.map[HEADER_BLOCK..HEADER_BLOCK + self.header.payload_len as usize]
    }

    /// The archived `T` in the payload, validated by rkyv's checked access.
    pub fn access<T>(&self) -> Result<&T::Archived, CheckpointError>
    where
        T: Archive,
        T::Archived: Portable + for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
    {
        rkyv::access::<T::Archived, rancor::Error>(self.payload()).map_err(|source| {
            CheckpointError::Validate {
                path: self.path.clone(),
                source,
            }
        })
    }

    /// The archived `T` in the payload, without rkyv's validation pass.
    ///
    /// # Safety
    ///
    /// The file must have been written by this engine from a value of type
    /// `T` with the same rkyv format options (the ones this crate pins).
    /// Corruption is already excluded: `open` verified the checksum.
    pub unsafe fn access_unchecked<T: Archive>(&self) -> &T::Archived {
        // SAFETY: the payload hashes to the checksum written with it, so
        // these are the bytes the serializer produced; they start 4096-aligned
        // (page-aligned map + 4096), which satisfies every archived
        // alignment; the caller vouches that they archive a `T`.
        unsafe { rkyv::access_unchecked::<T::Archived>(self.payload()) }
    }
}

impl std::fmt::Debug for SnapshotFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}
