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
//!
//! [`SnapshotFile::verify`] makes the same checks without a map, reading
//! the file through in bounded pieces: for a reader that only verifies
//! files another process owns (`tandem snapshot verify` on a live store),
//! where a file truncated under a map would raise `SIGBUS`.

use std::{
    fs::OpenOptions,
    io::{self, Read},
    path::Path,
    path::PathBuf,
};

use memmap2::{Mmap, MmapOptions};
use rkyv::{api::high::HighValidator, bytecheck::CheckBytes, rancor, Archive, Portable};
use xxhash_rust::xxh3::Xxh3;

use super::{
    format::{checksum, BlockHasher, Layout, SnapshotHeader, HEADER_BLOCK},
    CheckpointError,
};
use crate::sys::file::{open_regular, shrank};

/// Bytes [`SnapshotFile::verify`] reads at a time.
const VERIFY_PIECE: usize = 1 << 20;

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
        let file = open_file(path)?;
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
        match header.layout() {
            None => {
                let payload = &map[HEADER_BLOCK..HEADER_BLOCK + header.payload_len as usize];
                let computed = checksum(payload);
                if computed != header.payload_checksum {
                    return Err(CheckpointError::PayloadChecksum {
                        path: path.to_path_buf(),
                        stored: header.payload_checksum,
                        computed,
                    });
                }
            }
            Some(l) => {
                let table = check_table(&map, &header, &l, path)?;
                let mut hasher = BlockHasher::new(l.body_len as usize);
                hasher.update(&map[HEADER_BLOCK..l.table_at as usize]);
                compare_blocks(&table, &hasher.finish(), path)?;
            }
        }
        Ok(SnapshotFile {
            path: path.to_path_buf(),
            header,
            map,
        })
    }

    /// Verifies the file at `path` as [`open`](Self::open) does — header,
    /// length, payload checksum — without mapping it: it is read through
    /// in pieces of a mebibyte, and one that shrinks meanwhile is an error
    /// naming it. Returns the verified header.
    pub fn verify(path: impl AsRef<Path>) -> Result<SnapshotHeader, CheckpointError> {
        let path = path.as_ref();
        let (file, len) = open_regular(path, OpenOptions::new().read(true))
            .map_err(CheckpointError::io(path, "open"))?;
        let length = |expected, found| CheckpointError::Length {
            path: path.to_path_buf(),
            expected,
            found,
        };
        if len < HEADER_BLOCK as u64 {
            return Err(length(HEADER_BLOCK as u64, len));
        }
        // Never more than the length measured, whatever the header says.
        let mut file = file.take(len);
        let mut block = vec![0; HEADER_BLOCK];
        read_measured(&mut file, &mut block, len, path)?;
        let header = SnapshotHeader::decode(&block, path)?;
        if header.file_len() != len {
            return Err(length(header.file_len(), len));
        }
        if let Some(l) = header.layout() {
            let mut hasher = BlockHasher::new(l.body_len as usize);
            let mut piece = vec![0; VERIFY_PIECE.min(l.body_len as usize)];
            let mut left = l.body_len;
            while left > 0 {
                let n = (left as usize).min(piece.len());
                read_measured(&mut file, &mut piece[..n], len, path)?;
                hasher.update(&piece[..n]);
                left -= n as u64;
            }
            let mut table = vec![0; (l.file_len - l.table_at) as usize];
            read_measured(&mut file, &mut table, len, path)?;
            let stored = check_table_bytes(&table[..8 * l.blocks as usize], &header, path)?;
            compare_blocks(&stored, &hasher.finish(), path)?;
            return Ok(header);
        }
        let mut hasher = Xxh3::new();
        let mut piece = vec![0; VERIFY_PIECE.min(header.payload_len as usize)];
        let mut left = header.payload_len;
        while left > 0 {
            let n = (left as usize).min(piece.len());
            read_measured(&mut file, &mut piece[..n], len, path)?;
            hasher.update(&piece[..n]);
            left -= n as u64;
        }
        let computed = hasher.digest();
        if computed != header.payload_checksum {
            return Err(CheckpointError::PayloadChecksum {
                path: path.to_path_buf(),
                stored: header.payload_checksum,
                computed,
            });
        }
        Ok(header)
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

/// Opens the snapshot file at `path` for reading: a regular file at least
/// a header block long.
pub(super) fn open_file(path: &Path) -> Result<std::fs::File, CheckpointError> {
    let (file, len) = open_regular(path, OpenOptions::new().read(true))
        .map_err(CheckpointError::io(path, "open"))?;
    if len < HEADER_BLOCK as u64 {
        return Err(CheckpointError::Length {
            path: path.to_path_buf(),
            expected: HEADER_BLOCK as u64,
            found: len,
        });
    }
    Ok(file)
}

/// Maps a snapshot file read-only without reading it in: pages are read
/// when first touched (a lazy restore, [`super::lazy`]).
pub(super) fn map_lazily(file: &std::fs::File, path: &Path) -> Result<Mmap, CheckpointError> {
    // SAFETY: as in `SnapshotFile::open`: read-only, private, of a file
    // written once before its manifest was published and never modified;
    // retention's deletion leaves the mapping intact.
    unsafe { MmapOptions::new().map(file) }.map_err(CheckpointError::io(path, "mmap"))
}

/// A version 2 file's block table, checked against the header's checksum
/// of it (`map`: the whole file).
fn check_table(
    map: &[u8],
    header: &SnapshotHeader,
    l: &Layout,
    path: &Path,
) -> Result<Vec<u64>, CheckpointError> {
    let at = l.table_at as usize;
    check_table_bytes(&map[at..at + 8 * l.blocks as usize], header, path)
}

/// The block table in `bytes`, checked against the header's checksum of it.
pub(super) fn check_table_bytes(
    bytes: &[u8],
    header: &SnapshotHeader,
    path: &Path,
) -> Result<Vec<u64>, CheckpointError> {
    let computed = checksum(bytes);
    if computed != header.payload_checksum {
        return Err(CheckpointError::PayloadChecksum {
            path: path.to_path_buf(),
            stored: header.payload_checksum,
            computed,
        });
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

/// The first block whose hash is not the table's, as an error.
fn compare_blocks(stored: &[u64], computed: &[u64], path: &Path) -> Result<(), CheckpointError> {
    for (block, (&s, &c)) in stored.iter().zip(computed).enumerate() {
        if s != c {
            return Err(CheckpointError::BlockChecksum {
                path: path.to_path_buf(),
                block: block as u64,
                stored: s,
                computed: c,
            });
        }
    }
    Ok(())
}

/// Fills `buf` from `file` (measured at `len` bytes); a file that ends
/// first shrank while it was read.
fn read_measured(
    file: &mut impl Read,
    buf: &mut [u8],
    len: u64,
    path: &Path,
) -> Result<(), CheckpointError> {
    file.read_exact(buf).map_err(|e| {
        let e = match e.kind() {
            io::ErrorKind::UnexpectedEof => shrank(len),
            _ => e,
        };
        CheckpointError::io(path, "read")(e)
    })
}

impl std::fmt::Debug for SnapshotFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::format::Position;
    use std::os::unix::fs::FileExt;

    /// A snapshot file of `payload` at a fresh path (version 2).
    fn file(tag: &str, payload: &[u8]) -> PathBuf {
        file_of(tag, payload, crate::checkpoint::format::FORMAT_VERSION)
    }

    /// A snapshot file of `payload` in format `version`.
    fn file_of(tag: &str, payload: &[u8], version: u32) -> PathBuf {
        let h = SnapshotHeader {
            checkpoint_id: 3,
            operator: "sum".into(),
            instance: 1,
            positions: vec![Position {
                partition: 0,
                next_seq: 9,
            }],
            created_at_ms: 1,
            payload_len: payload.len() as u64,
            payload_checksum: checksum(payload),
            index_len: 0,
            version,
        };
        let image = if version == 1 {
            let mut image = vec![0; h.file_len() as usize];
            h.encode(&mut image[..HEADER_BLOCK]).unwrap();
            image[HEADER_BLOCK..HEADER_BLOCK + payload.len()].copy_from_slice(payload);
            image
        } else {
            crate::checkpoint::format::file_image(h, payload, &[])
        };
        let p = std::env::temp_dir().join(format!(
            "tandem-restore-{tag}-v{version}-{}.snap",
            std::process::id()
        ));
        std::fs::write(&p, image).unwrap();
        p
    }

    #[test]
    fn verify_without_a_map_agrees_with_open() {
        // Payloads around the piece size: none, one byte, a piece and more.
        for version in [1, 2] {
            for len in [0, 1, VERIFY_PIECE, VERIFY_PIECE + 5] {
                let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
                let p = file_of(&format!("agree-{len}"), &payload, version);
                let h = SnapshotFile::verify(&p).unwrap();
                assert_eq!(&h, SnapshotFile::open(&p).unwrap().header());
                if len > 0 {
                    let f = OpenOptions::new().write(true).open(&p).unwrap();
                    f.write_all_at(&[!payload[len - 1]], (HEADER_BLOCK + len - 1) as u64)
                        .unwrap();
                    for e in [
                        SnapshotFile::verify(&p).unwrap_err(),
                        SnapshotFile::open(&p).unwrap_err(),
                    ] {
                        assert!(
                            matches!(
                                (version, &e),
                                (1, CheckpointError::PayloadChecksum { .. })
                                    | (2, CheckpointError::BlockChecksum { .. })
                            ),
                            "v{version} {len}: {e}"
                        );
                    }
                }
                std::fs::remove_file(p).unwrap();
            }
        }
    }

    #[test]
    fn a_file_shorter_than_its_header_says_is_an_error_naming_it() {
        let p = file("short", &[1; 5000]);
        OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(HEADER_BLOCK as u64 + 4096)
            .unwrap();
        for e in [
            SnapshotFile::verify(&p).unwrap_err(),
            SnapshotFile::open(&p).unwrap_err(),
        ] {
            assert!(matches!(e, CheckpointError::Length { .. }), "{e}");
            assert!(e.to_string().contains(&*p.to_string_lossy()), "{e}");
        }
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_not_waited_on() {
        let p = std::env::temp_dir().join(format!("tandem-restore-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for path in [&*p, Path::new("/dev/zero")] {
            for e in [
                SnapshotFile::verify(path).unwrap_err(),
                SnapshotFile::open(path).unwrap_err(),
            ] {
                assert!(e.to_string().contains("not a regular file"), "{e}");
            }
        }
        std::fs::remove_file(p).unwrap();
    }
}
