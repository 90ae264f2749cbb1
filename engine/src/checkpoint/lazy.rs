//! A snapshot file read lazily: mapped, its header and block table checked
//! at open, each 64 KiB block of its body hashed against the table the
//! first time anything in it is read (Flink's RocksDB and every LSM check
//! a block when they read it, for the same reason). What a lazy restore
//! ([`crate::state`]) reads is then exactly as verified as what an eager
//! one reads, and only what it reads is read at all: a restore of a large
//! state does not wait for the whole file.
//!
//! A thread per file verifies the blocks nobody read yet, in order, in the
//! background (which also brings them into the page cache), and stops when
//! every block is checked or the file is dropped. A block that does not
//! verify — read by the restore or by that thread — is an error naming
//! the file and the block, and the file is **condemned**: the store's
//! [`latest_valid`](super::SnapshotStore::latest_valid) passes over every
//! checkpoint that needs it from then on (in this process), as it passes
//! over one whose file does not verify at open.

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, OnceLock, Weak,
    },
};

use memmap2::Mmap;

use super::{
    format::{checksum, Layout, SnapshotHeader, CHECK_BLOCK, HEADER_BLOCK},
    restore::{check_table_bytes, map_lazily, open_file},
    CheckpointError,
};

/// A version 2 snapshot file, mapped, whose blocks are verified when read.
pub struct LazySnapshot {
    path: PathBuf,
    header: SnapshotHeader,
    layout: Layout,
    map: Mmap,
    table: Vec<u64>,
    /// One bit per block: verified.
    checked: Box<[AtomicU64]>,
    /// What the background verification found wrong, if anything.
    failed: OnceLock<String>,
}

impl LazySnapshot {
    /// Maps `path` and checks its header, its length and its block table;
    /// `Ok(None)` for a version 1 file (no block table: it is read eagerly,
    /// with [`super::SnapshotFile::open`]). A file condemned earlier in
    /// this process is refused with what was found wrong with it.
    pub fn open(path: impl AsRef<Path>) -> Result<Option<Arc<Self>>, CheckpointError> {
        let path = path.as_ref();
        let map = map_lazily(&open_file(path)?, path)?;
        // Random access: a fault reads its page, not the read-around
        // window (8 MiB on some hosts: milliseconds per key looked up);
        // each block is asked for whole before it is hashed.
        let _ = map.advise(memmap2::Advice::Random);
        let header = SnapshotHeader::decode(&map, path)?;
        let len = map.len() as u64;
        if header.file_len() != len {
            return Err(CheckpointError::Length {
                path: path.to_path_buf(),
                expected: header.file_len(),
                found: len,
            });
        }
        let Some(layout) = header.layout() else {
            return Ok(None);
        };
        if let Some(why) = condemned(path, header.payload_checksum) {
            return Err(CheckpointError::Condemned {
                path: path.to_path_buf(),
                why,
            });
        }
        let at = layout.table_at as usize;
        let table = check_table_bytes(&map[at..at + 8 * layout.blocks as usize], &header, path)?;
        let checked = (0..layout.blocks.div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        Ok(Some(Arc::new(LazySnapshot {
            path: path.to_path_buf(),
            header,
            layout,
            map,
            table,
            checked,
            failed: OnceLock::new(),
        })))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The checked header.
    pub fn header(&self) -> &SnapshotHeader {
        &self.header
    }

    /// Where the file's parts lie.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The payload bytes `range` (payload offsets), every block they touch
    /// verified first.
    pub fn payload(&self, range: std::ops::Range<usize>) -> Result<&[u8], CheckpointError> {
        if range.start > range.end || range.end as u64 > self.layout.payload_len {
            return Err(self.outside("payload", range));
        }
        self.body(range.start as u64..range.end as u64)
    }

    /// The key index bytes `range` (offsets in the index), verified first.
    pub fn index(&self, range: std::ops::Range<usize>) -> Result<&[u8], CheckpointError> {
        if range.start > range.end || range.end as u64 > self.layout.index_len {
            return Err(self.outside("index", range));
        }
        let at = self.layout.index_at - HEADER_BLOCK as u64;
        self.body(at + range.start as u64..at + range.end as u64)
    }

    /// The whole payload, **not verified**: for rkyv's bounds and layout
    /// checks only (bytecheck is sound on any bytes), never to read values
    /// from that [`payload`](Self::payload) did not cover.
    pub fn payload_unverified(&self) -> &[u8] {
        &self.map[HEADER_BLOCK..HEADER_BLOCK + self.layout.payload_len as usize]
    }

    /// Verifies every block not verified yet (an eager read of the file).
    pub fn verify_all(&self) -> Result<(), CheckpointError> {
        self.body(0..self.layout.body_len).map(drop)
    }

    /// What the background verification found wrong, if anything.
    pub fn failure(&self) -> Option<&str> {
        self.failed.get().map(String::as_str)
    }

    /// Whether every block is verified.
    pub fn all_verified(&self) -> bool {
        (0..self.layout.blocks).all(|b| self.is_checked(b))
    }

    /// Starts the thread that verifies, in order, the blocks nobody has
    /// read yet; it ends when all are verified, when one is not, or when
    /// the file is dropped.
    pub fn verify_in_background(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        let blocks = self.layout.blocks;
        let spawned = std::thread::Builder::new()
            .name("tandem-verify".into())
            .spawn(move || {
                // Behind every read the restore itself makes.
                crate::sys::thread::io_priority_idle();
                for b in 0..blocks {
                    let Some(f) = weak.upgrade() else { return };
                    if b % AHEAD == 0 {
                        f.read_ahead(b, AHEAD);
                    }
                    if f.is_checked(b) {
                        continue;
                    }
                    if let Err(e) = f.check_block(b) {
                        let _ = f.failed.set(e.to_string());
                        return;
                    }
                }
            });
        // Without the thread the blocks are still verified as they are
        // read; nothing is lost but the head start.
        drop(spawned);
    }

    /// The body bytes `range` (offsets from the end of the header block),
    /// every block they touch verified first.
    pub(crate) fn body(&self, range: std::ops::Range<u64>) -> Result<&[u8], CheckpointError> {
        if range.end > range.start {
            let first = Layout::block_of(range.start);
            let last = Layout::block_of(range.end - 1);
            for b in first..=last {
                if !self.is_checked(b) {
                    self.check_block(b)?;
                }
            }
        }
        let at = HEADER_BLOCK + range.start as usize;
        Ok(&self.map[at..HEADER_BLOCK + range.end as usize])
    }

    #[inline]
    fn is_checked(&self, b: u64) -> bool {
        self.checked[(b / 64) as usize].load(Ordering::Acquire) & (1 << (b % 64)) != 0
    }

    /// Asks the kernel for blocks `b..b + n` (one read, not a fault per
    /// page).
    fn read_ahead(&self, b: u64, n: u64) {
        let from = HEADER_BLOCK + b as usize * CHECK_BLOCK;
        let to = (from + n as usize * CHECK_BLOCK).min(self.layout.table_at as usize);
        if from < to {
            let _ = self
                .map
                .advise_range(memmap2::Advice::WillNeed, from, to - from);
        }
    }

    /// Hashes block `b` against the table (two threads may both hash a
    /// block: harmless); a mismatch condemns the file.
    fn check_block(&self, b: u64) -> Result<(), CheckpointError> {
        self.read_ahead(b, 1);
        let from = HEADER_BLOCK + b as usize * CHECK_BLOCK;
        let to = (from + CHECK_BLOCK).min(self.layout.table_at as usize);
        let computed = checksum(&self.map[from..to]);
        let stored = self.table[b as usize];
        if computed != stored {
            let e = CheckpointError::BlockChecksum {
                path: self.path.clone(),
                block: b,
                stored,
                computed,
            };
            condemn(&self.path, self.header.payload_checksum, e.to_string());
            return Err(e);
        }
        self.checked[(b / 64) as usize].fetch_or(1 << (b % 64), Ordering::AcqRel);
        Ok(())
    }

    fn outside(&self, part: &str, range: std::ops::Range<usize>) -> CheckpointError {
        CheckpointError::Lazy {
            path: self.path.clone(),
            reason: format!(
                "bytes {}..{} are outside its {part} (a damaged archive or an engine bug)",
                range.start, range.end
            ),
        }
    }
}

impl std::fmt::Debug for LazySnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazySnapshot")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

/// Blocks the background verification asks for at a time (1 MiB).
const AHEAD: u64 = 16;

/// Files found damaged in this process: (path, the header's checksum of
/// the table, what was wrong). The checksum tells a file written again
/// at the same path apart.
static CONDEMNED: Mutex<Vec<(PathBuf, u64, String)>> = Mutex::new(Vec::new());

fn condemn(path: &Path, sum: u64, why: String) {
    let mut c = CONDEMNED.lock().unwrap_or_else(|p| p.into_inner());
    if !c.iter().any(|(p, s, _)| p == path && *s == sum) {
        c.push((path.to_path_buf(), sum, why));
    }
}

/// What was found wrong with the file at `path` whose header has
/// checksum `sum`, if it was condemned.
pub fn condemned(path: &Path, sum: u64) -> Option<String> {
    let c = CONDEMNED.lock().unwrap_or_else(|p| p.into_inner());
    c.iter()
        .find(|(p, s, _)| p == path && *s == sum)
        .map(|(_, _, why)| why.clone())
}
