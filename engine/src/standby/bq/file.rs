//! A buffer queue's file: created with every block reserved, opened and
//! validated, mapped shared for a running job or copied for a reader that
//! does not own it (see the module docs of [`super`]). Snapshot exchanges
//! and determinant logs are created the same way ([`create_mapped`]).

use super::{BqConfig, BqError, BufferQueue, HEADER, MAGIC, VERSION};
use crate::sys::file::read_measured;
use memmap2::{MmapMut, MmapOptions};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Creates a file of `len` bytes at `path` ([`create_file`]) and maps it
/// shared: the start of every file the standby shares between its
/// incarnations.
pub(crate) fn create_mapped(path: &Path, len: u64) -> Result<MmapMut, BqError> {
    let file = create_file(path, len)?;
    // SAFETY: a fresh file of ours (`create_new`, mode 0600, every block
    // reserved); its users access the shared bytes by their module's
    // protocol, and nobody truncates it while it is mapped.
    unsafe { MmapOptions::new().map_mut(&file) }.map_err(|source| BqError::Io {
        path: path.to_path_buf(),
        op: "mmap",
        source,
    })
}

/// Creates a file of `len` bytes at `path` for a shared mapping: mode
/// 0600, never over an existing file (another run's, or another user's),
/// and with every block reserved, so that a write through the mapping
/// never meets a full filesystem ([`BqError::NoSpace`] instead, the file
/// removed).
fn create_file(path: &Path, len: u64) -> Result<File, BqError> {
    let io = |op| {
        let path = path.to_path_buf();
        move |source| BqError::Io { path, op, source }
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io("create"))?;
    let sized = file
        .set_len(len)
        .map_err(io("set_len"))
        .and_then(|()| crate::sys::fs::reserve(&file, len).map_err(io("reserve")));
    if let Err(e) = sized {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(match e {
            BqError::Io { path, source, .. } if no_space(&source) => BqError::NoSpace {
                free: path
                    .parent()
                    .and_then(|d| crate::sys::fs::free_bytes(d).ok())
                    .unwrap_or(0),
                path,
                needed: len,
            },
            e => e,
        });
    }
    Ok(file)
}

/// Opens an existing shared file that another incarnation (possibly in
/// another process) created, checks its magic and format version, and maps
/// it shared. Returns the map and the header's first 64 bytes, read from
/// the file before mapping, for the caller to check the sizes it implies
/// against the map's length (a file truncated meanwhile is an error, not a
/// `SIGBUS` later).
pub(crate) fn open_mapped(
    path: &Path,
    magic: &[u8; 8],
    version: u32,
    what: &str,
) -> Result<(MmapMut, [u8; 64]), BqError> {
    let io = |op| {
        let path = path.to_path_buf();
        move |source| BqError::Io { path, op, source }
    };
    let invalid = |reason: String| BqError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    let (file, len) =
        crate::sys::file::open_regular(path, OpenOptions::new().read(true).write(true))
            .map_err(io("open"))?;
    if len < 64 {
        return Err(invalid(format!("{len} bytes: shorter than a header")));
    }
    let mut h = [0u8; 64];
    read_measured(&file, &mut h).map_err(io("read header"))?;
    if &h[0..8] != magic {
        return Err(invalid(format!("not a {what} (magic {:02x?})", &h[0..8])));
    }
    let found = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    if found != version {
        return Err(invalid(format!(
            "{what} format version {found} (this build reads {version})"
        )));
    }
    // SAFETY: a regular file opened for writing by its owner; every access
    // to its shared bytes follows its module's protocol. Another process
    // truncating it would fault accesses — a broken deployment, as for
    // `BufferQueue::map`.
    let map = unsafe { MmapOptions::new().map_mut(&file) }.map_err(io("mmap"))?;
    if map.len() as u64 != len {
        return Err(invalid(format!(
            "{} bytes mapped, {len} measured",
            map.len()
        )));
    }
    Ok((map, h))
}

/// The filesystem (or the user's quota, or the largest file size) has no
/// room.
fn no_space(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
    )
}

impl BufferQueue {
    /// Creates a queue file at `path` (mode 0600; an existing file is an
    /// error) and maps it.
    pub fn create(path: impl AsRef<Path>, cfg: BqConfig) -> Result<Self, BqError> {
        let mut cfg = cfg;
        cfg.slots = cfg.slots.max(2).next_power_of_two();
        cfg.arena = cfg.arena.max(4096).next_power_of_two();
        cfg.check()?;
        let path = path.as_ref().to_path_buf();
        let map = create_mapped(&path, cfg.file_len())?;
        let mut q = Self::from_map(map, path, cfg);
        let h = &mut q.map[..HEADER];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&cfg.readers.to_le_bytes());
        h[16..24].copy_from_slice(&cfg.slots.to_le_bytes());
        h[24..32].copy_from_slice(&cfg.arena.to_le_bytes());
        h[32..40].copy_from_slice(&(cfg.file_len()).to_le_bytes());
        Ok(q)
    }

    /// Opens an existing queue file and validates its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, BqError> {
        Self::open_with(path.as_ref(), true)
    }

    /// Opens an existing queue file for reading only (`tandem bq inspect`,
    /// a file without write permission, one another process owns): its
    /// bytes are copied into this process's memory — never mapped, so that
    /// a file truncated meanwhile is an error naming it, not a `SIGBUS` —
    /// and nothing done through this handle ever reaches the file.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, BqError> {
        Self::open_with(path.as_ref(), false)
    }

    fn open_with(path: &Path, writable: bool) -> Result<Self, BqError> {
        let path = path.to_path_buf();
        let io = |op| {
            let path = path.clone();
            move |source| BqError::Io { path, op, source }
        };
        // A regular file only: a FIFO would block the open, a device
        // (`/dev/zero`) has no length to check.
        let (file, len) =
            crate::sys::file::open_regular(&path, OpenOptions::new().read(true).write(writable))
                .map_err(io("open"))?;
        let invalid = |reason: String| BqError::Invalid {
            path: path.clone(),
            reason,
        };
        if len < HEADER as u64 {
            return Err(invalid(format!("{len} bytes: shorter than the header")));
        }
        let mut h = [0u8; 64];
        read_measured(&file, &mut h).map_err(io("read header"))?;
        if h[0..8] != MAGIC {
            return Err(invalid(format!(
                "not a buffer queue (magic {:02x?})",
                &h[0..8]
            )));
        }
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8 bytes"));
        if u32_at(8) != VERSION {
            return Err(invalid(format!(
                "format version {} (this build reads {VERSION})",
                u32_at(8)
            )));
        }
        let cfg = BqConfig {
            slots: u64_at(16),
            arena: u64_at(24),
            readers: u32_at(12),
        };
        cfg.check().map_err(|e| invalid(e.to_string()))?;
        if cfg.file_len() != len {
            return Err(invalid(format!(
                "{len} bytes, the header implies {}",
                cfg.file_len()
            )));
        }
        if !writable {
            return Self::copy(&file, path, cfg, len);
        }
        let q = Self::map(file, path, cfg)?;
        // The map covers the file as it is now: had its length changed
        // since it was measured, index and arena reads sized by the header
        // could leave a shorter map.
        if q.map.len() as u64 != len {
            return Err(BqError::Invalid {
                path: q.path.clone(),
                reason: format!("{} bytes mapped, the header implies {len}", q.map.len()),
            });
        }
        Ok(q)
    }

    /// Maps the file shared: the queue of a running job.
    fn map(file: File, path: PathBuf, cfg: BqConfig) -> Result<Self, BqError> {
        // SAFETY: the file is ours (created 0600, or opened for writing by
        // its owner); every access to shared bytes follows the protocol in
        // the module docs. Another process truncating the file would fault
        // accesses — a broken deployment this code does not defend against
        // (a reader of a file it does not own copies it: `copy`).
        let map = unsafe { MmapOptions::new().map_mut(&file) }.map_err(|source| BqError::Io {
            path: path.clone(),
            op: "mmap",
            source,
        })?;
        Ok(Self::from_map(map, path, cfg))
    }

    fn from_map(mut map: MmapMut, path: PathBuf, cfg: BqConfig) -> Self {
        let base = map.as_mut_ptr();
        BufferQueue {
            map,
            path,
            cfg,
            base,
        }
    }

    /// Copies the file's `len` bytes (as measured, and as its header
    /// implies) into anonymous memory of this process, page-aligned as a
    /// map is: the queue as it was when read, private to this handle.
    fn copy(file: &File, path: PathBuf, cfg: BqConfig, len: u64) -> Result<Self, BqError> {
        let io = |op| {
            let path = path.clone();
            move |source| BqError::Io { path, op, source }
        };
        let mut map = MmapMut::map_anon(len as usize).map_err(io("allocate"))?;
        read_measured(file, &mut map).map_err(io("read"))?;
        Ok(Self::from_map(map, path, cfg))
    }
}
