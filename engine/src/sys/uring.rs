//! io_uring file writes from 4 KiB-aligned buffers: the only unsafe code on
//! the snapshot I/O path.
//!
//! ## What this module owns
//!
//! (The buffers it writes, [`AlignedBuf`], are [`super::aligned`]'s.)
//!
//! - [`FileWriter`]: writes byte ranges of such a buffer to a file and
//!   fsyncs it — through an owned io_uring when the kernel allows one,
//!   through `pwrite(2)` + `fsync(2)` otherwise ([`Backend`] says which).
//!
//! ## How a write runs
//!
//! A range is cut into pieces that end on [`CHUNK`] (1 MiB) boundaries of
//! the file, so a snapshot payload (which starts after the 4096-byte header
//! block) goes out as 1 MiB-aligned writes after its first piece; up to [`DEPTH`] of them are in
//! flight at once (one SQE each, `user_data` = the slot holding the piece's
//! offset and length). Every CQE is checked: a negative result is returned as
//! the `io::Error` it encodes, a short write is resubmitted for its remainder
//! from the same slot, a zero-byte write is an error (`WriteZero`). Between
//! submitting and waiting, the caller's `on_submitted` callback sees each
//! submitted piece once, in file order — the snapshot writer checksums there,
//! so hashing overlaps with the device.
//!
//! ## Invariants the unsafe code relies on
//!
//! - The kernel reads the buffer of every in-flight write. A write call
//!   borrows the buffer for its whole duration and returns only after every
//!   SQE it pushed has completed — also on error and on unwinding out of the
//!   callback (`InFlight`'s `Drop` waits for the stragglers).
//! - The file descriptor is borrowed for the same duration.
//!
//! ## Why no registered buffers
//!
//! `IORING_REGISTER_BUFFERS` pins the pages, which counts against
//! `RLIMIT_MEMLOCK` (8 MiB here without `CAP_IPC_LOCK`). Snapshot buffers are
//! hundreds of MB and new for every checkpoint, so registering them is not
//! possible under that limit, and bouncing them through a small registered
//! pool costs a memcpy of every byte — more than the ~15 % the issue measured
//! registration to gain. The writer therefore uses plain `IORING_OP_WRITE`.

use std::{
    fs::{File, OpenOptions},
    io,
    os::{
        fd::AsRawFd,
        unix::fs::{FileExt, OpenOptionsExt},
    },
    path::Path,
};

use io_uring::{opcode, types, IoUring};

pub use super::aligned::{round_up, AlignedBuf, BLOCK};

/// Bytes per write SQE.
pub const CHUNK: usize = 1 << 20;
/// Writes in flight at once.
pub const DEPTH: usize = 16;

/// How a [`FileWriter`] moves bytes to disk, ordered from most to least
/// direct (a set of files reports the `max` of its files' backends).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Backend {
    /// io_uring writes to a file opened with `O_DIRECT` (no page cache).
    UringDirect,
    /// io_uring writes through the page cache: the file system refused
    /// `O_DIRECT` (e.g. tmpfs).
    UringBuffered,
    /// `pwrite(2)` + `fsync(2)`: io_uring could not be set up (kernel too
    /// old, disabled by `kernel.io_uring_disabled`, or blocked by seccomp).
    Pwrite,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::UringDirect => "io_uring O_DIRECT",
            Backend::UringBuffered => "io_uring buffered",
            Backend::Pwrite => "pwrite+fsync",
        })
    }
}

/// Writes aligned buffers to files and fsyncs them; owns its io_uring.
///
/// Not `Sync`: one thread (the snapshot I/O thread) owns it.
pub struct FileWriter {
    ring: Option<IoUring>,
    /// Why the ring is missing, when it is.
    fallback_reason: Option<io::Error>,
}

impl FileWriter {
    /// A writer with its own ring, or the `pwrite` fallback when the ring
    /// cannot be created ([`fallback_reason`](Self::fallback_reason) says
    /// why).
    pub fn new() -> Self {
        match IoUring::new((DEPTH * 2) as u32) {
            Ok(ring) => FileWriter {
                ring: Some(ring),
                fallback_reason: None,
            },
            Err(e) => FileWriter {
                ring: None,
                fallback_reason: Some(e),
            },
        }
    }

    /// A writer that never uses io_uring (for tests of the fallback).
    pub fn pwrite_only() -> Self {
        FileWriter {
            ring: None,
            fallback_reason: None,
        }
    }

    /// Whether an io_uring is in use.
    pub fn has_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// Why io_uring is not used, if it could not be set up.
    pub fn fallback_reason(&self) -> Option<&io::Error> {
        self.fallback_reason.as_ref()
    }

    /// Creates (or truncates) `path`, mode 0600, for writing; `O_DIRECT`
    /// when this writer has a ring and the file system accepts it.
    pub fn create(&self, path: &Path) -> io::Result<(File, Backend)> {
        let mut opts = OpenOptions::new();
        opts.write(true).create(true).truncate(true).mode(0o600);
        if self.ring.is_none() {
            return Ok((opts.open(path)?, Backend::Pwrite));
        }
        match opts.clone().custom_flags(libc::O_DIRECT).open(path) {
            Ok(f) => Ok((f, Backend::UringDirect)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                Ok((opts.open(path)?, Backend::UringBuffered))
            }
            Err(e) => Err(e),
        }
    }

    /// Writes `buf[range]` at file offset `range.start`, calling
    /// `on_submitted` with every piece once it is on its way (in order), and
    /// returns when every byte is written. For `O_DIRECT` files both range
    /// ends must be multiples of [`BLOCK`].
    pub fn write_range(
        &mut self,
        file: &File,
        buf: &AlignedBuf,
        range: std::ops::Range<usize>,
        mut on_submitted: impl FnMut(&[u8]),
    ) -> io::Result<()> {
        assert!(range.start <= range.end && range.end <= buf.len());
        let Some(ring) = self.ring.as_mut() else {
            for piece in buf[range.clone()].chunks(CHUNK) {
                on_submitted(piece);
            }
            return file.write_all_at(&buf[range.clone()], range.start as u64);
        };
        let fd = types::Fd(file.as_raw_fd());
        let mut slots = [(0usize, 0usize); DEPTH];
        let mut free: Vec<usize> = (0..DEPTH).rev().collect();
        let mut next = range.start;
        let mut seen = range.start;
        let mut flight = InFlight { ring, n: 0 };
        loop {
            while next < range.end {
                let Some(slot) = free.pop() else { break };
                // Pieces end on CHUNK boundaries of the file, so a range
                // starting past the header block still issues aligned 1 MiB
                // writes after its first piece.
                let len = (CHUNK - next % CHUNK).min(range.end - next);
                slots[slot] = (next, len);
                // SAFETY: `buf[next..next + len]` lies inside `buf`, which is
                // borrowed until this function returns, and `flight` waits
                // for every pushed SQE before that (also on unwind).
                unsafe { flight.push(fd, buf, next, len, slot)? };
                next += len;
            }
            flight.ring.submit()?;
            if seen < next {
                on_submitted(&buf[seen..next]);
                seen = next;
            }
            if flight.n == 0 {
                return Ok(());
            }
            let done = flight.reap()?;
            for (slot, res) in done {
                let slot = slot as usize;
                let (off, len) = slots[slot];
                if res < 0 {
                    return Err(io::Error::from_raw_os_error(-res));
                }
                let wrote = res as usize;
                if wrote == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                if wrote < len {
                    slots[slot] = (off + wrote, len - wrote);
                    // SAFETY: a sub-range of a range pushed above; same
                    // borrow argument.
                    unsafe { flight.push(fd, buf, off + wrote, len - wrote, slot)? };
                } else {
                    free.push(slot);
                }
            }
        }
    }

    /// `fsync(2)` of `file` (data and metadata), through the ring when there
    /// is one.
    pub fn fsync(&mut self, file: &File) -> io::Result<()> {
        let Some(ring) = self.ring.as_mut() else {
            return file.sync_all();
        };
        let sqe = opcode::Fsync::new(types::Fd(file.as_raw_fd()))
            .build()
            .user_data(u64::MAX);
        // SAFETY: FSYNC references no memory; the fd is borrowed until the
        // completion is reaped below.
        unsafe { ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        submit_and_wait(ring, 1)?;
        let res = ring
            .completion()
            .next()
            .map(|c| c.result())
            .ok_or_else(|| io::Error::other("io_uring fsync: no completion"))?;
        if res < 0 {
            return Err(io::Error::from_raw_os_error(-res));
        }
        Ok(())
    }
}

impl FileWriter {
    /// Writes each `buf` whole at offset 0 of its file, in pieces of at
    /// most [`CHUNK`] with up to [`DEPTH`] in flight across all the files: a
    /// set of small files waits for the device about once instead of once
    /// per file. For `O_DIRECT` files every length must be a multiple of
    /// [`BLOCK`]. Returns the index of the first item that failed with its
    /// error.
    pub fn write_many(&mut self, items: &[(&File, &AlignedBuf)]) -> Result<(), (usize, io::Error)> {
        let Some(ring) = self.ring.as_mut() else {
            for (i, (f, b)) in items.iter().enumerate() {
                f.write_all_at(b, 0).map_err(|e| (i, e))?;
            }
            return Ok(());
        };
        // Per slot: the item and the range of its buffer the write in
        // flight covers.
        let mut slots = [(0usize, 0usize, 0usize); DEPTH];
        let mut free: Vec<usize> = (0..DEPTH).rev().collect();
        // The next piece to issue: item and offset.
        let (mut item, mut off) = (0usize, 0usize);
        let mut flight = InFlight { ring, n: 0 };
        let mut first_err: Option<(usize, io::Error)> = None;
        loop {
            while first_err.is_none() {
                while item < items.len() && off >= items[item].1.len() {
                    item += 1;
                    off = 0;
                }
                if item == items.len() {
                    break;
                }
                let Some(slot) = free.pop() else { break };
                let (f, buf) = items[item];
                let end = (off + CHUNK).min(buf.len());
                slots[slot] = (item, off, end);
                // SAFETY: `buf[off..end]` lies inside `buf`, borrowed from
                // `items` until this function returns; `flight` waits for
                // every pushed SQE before that (also on unwind).
                unsafe { flight.push(types::Fd(f.as_raw_fd()), buf, off, end - off, slot) }
                    .map_err(|e| (item, e))?;
                off = end;
            }
            let last = item.min(items.len().saturating_sub(1));
            flight.ring.submit().map_err(|e| (last, e))?;
            if flight.n == 0 {
                return first_err.map_or(Ok(()), Err);
            }
            let done = flight.reap().map_err(|e| (last, e))?;
            for (slot, res) in done {
                let slot = slot as usize;
                let (i, start, end) = slots[slot];
                let failed = match res {
                    r if r < 0 => Some(io::Error::from_raw_os_error(-r)),
                    0 => Some(io::ErrorKind::WriteZero.into()),
                    _ => None,
                };
                if let Some(e) = failed {
                    first_err.get_or_insert((i, e));
                    free.push(slot);
                    continue;
                }
                let wrote_to = start + res as usize;
                if wrote_to < end && first_err.is_none() {
                    // A short write: the rest of the piece, same slot.
                    let (f, buf) = items[i];
                    slots[slot] = (i, wrote_to, end);
                    // SAFETY: a range inside `buf`; same borrow argument.
                    unsafe {
                        flight.push(
                            types::Fd(f.as_raw_fd()),
                            buf,
                            wrote_to,
                            end - wrote_to,
                            slot,
                        )
                    }
                    .map_err(|e| (i, e))?;
                } else {
                    free.push(slot);
                }
            }
        }
    }

    /// `fsync(2)` of every file in `files`, all in flight at once (up to
    /// [`DEPTH`]) when there is a ring: concurrent fsyncs on one file
    /// system share journal commits, so a set of small files waits for
    /// the disk about once instead of once per file. Returns the index of
    /// the first file that failed with its error.
    pub fn fsync_many(&mut self, files: &[&File]) -> Result<(), (usize, io::Error)> {
        let Some(ring) = self.ring.as_mut() else {
            for (i, f) in files.iter().enumerate() {
                f.sync_all().map_err(|e| (i, e))?;
            }
            return Ok(());
        };
        let mut first_err: Option<(usize, io::Error)> = None;
        for (b, batch) in files.chunks(DEPTH).enumerate() {
            for (j, f) in batch.iter().enumerate() {
                let sqe = opcode::Fsync::new(types::Fd(f.as_raw_fd()))
                    .build()
                    .user_data((b * DEPTH + j) as u64);
                // SAFETY: FSYNC references no memory, so nothing the kernel
                // may still touch outlives this call even on an early
                // return; the fds are borrowed from `files`.
                unsafe { ring.submission().push(&sqe) }.map_err(|_| {
                    (
                        b * DEPTH + j,
                        io::Error::other("io_uring submission queue full"),
                    )
                })?;
            }
            let mut left = batch.len();
            while left > 0 {
                if let Err(e) = submit_and_wait(ring, 1) {
                    return Err((b * DEPTH, e));
                }
                for c in ring.completion() {
                    left -= 1;
                    if c.result() < 0 && first_err.is_none() {
                        first_err = Some((
                            c.user_data() as usize,
                            io::Error::from_raw_os_error(-c.result()),
                        ));
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Default for FileWriter {
    fn default() -> Self {
        Self::new()
    }
}

/// `io_uring_enter` waiting for `want` completions, retried when a signal
/// interrupts it.
fn submit_and_wait(ring: &IoUring, want: usize) -> io::Result<usize> {
    loop {
        match ring.submit_and_wait(want) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// The SQEs pushed by one `write_range` call and not yet completed; waits
/// for them on drop so the buffer outlives every kernel access to it.
struct InFlight<'r> {
    ring: &'r mut IoUring,
    n: usize,
}

impl InFlight<'_> {
    /// Queues a write of `buf[off..off + len]` at file offset `off`.
    ///
    /// # Safety
    ///
    /// `buf` must stay alive and unmodified until this `InFlight` is dropped
    /// or has reaped the completion.
    unsafe fn push(
        &mut self,
        fd: types::Fd,
        buf: &AlignedBuf,
        off: usize,
        len: usize,
        slot: usize,
    ) -> io::Result<()> {
        let sqe = opcode::Write::new(fd, buf[off..off + len].as_ptr(), len as u32)
            .offset(off as u64)
            .build()
            .user_data(slot as u64);
        // SAFETY: the caller keeps `buf` alive while the write is in flight;
        // `len <= CHUNK` fits in u32.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        self.n += 1;
        Ok(())
    }
}

impl InFlight<'_> {
    /// Waits for at least one completion; returns every one reaped as
    /// (user data, result), already discounted from what is in flight (an
    /// early return must leave `n` counting only what still is).
    fn reap(&mut self) -> io::Result<Vec<(u64, i32)>> {
        submit_and_wait(self.ring, 1)?;
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        self.n -= done.len();
        Ok(done)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Only reached with writes pending on an error or unwind path: wait
        // for them, whatever they report, so the buffer outlives them.
        while self.n > 0 {
            if submit_and_wait(self.ring, 1).is_err() {
                // The ring itself is broken; nothing sound is left to do
                // but stop before the buffer can be freed under the kernel.
                std::process::abort();
            }
            let reaped = self.ring.completion().count();
            self.n = self.n.saturating_sub(reaped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tandem-uring-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&d);
        d
    }

    #[test]
    fn aligned_buf_starts_on_a_block_and_pads_with_zeros() {
        let mut b = AlignedBuf::new();
        b.extend_from_slice(b"abc");
        assert_eq!(b.as_ptr() as usize % BLOCK, 0);
        b.extend_from_slice(&vec![7u8; 3 * BLOCK]);
        assert_eq!(b.as_ptr() as usize % BLOCK, 0);
        b.pad_to_block();
        assert_eq!(b.len(), 4 * BLOCK);
        assert!(b[3 * BLOCK + 3..].iter().all(|&x| x == 0));
        assert_eq!(&b[..3], b"abc");
    }

    fn write_and_read_back(mut w: FileWriter, name: &str) {
        let path = tmp(name);
        let mut buf = AlignedBuf::zeroed(3 * CHUNK + 5 * BLOCK);
        for (i, x) in buf.iter_mut().enumerate() {
            *x = (i % 251) as u8;
        }
        let (file, _backend) = w.create(&path).unwrap();
        let mut seen = 0;
        w.write_range(&file, &buf, BLOCK..buf.len(), |p| seen += p.len())
            .unwrap();
        w.write_range(&file, &buf, 0..BLOCK, |_| {}).unwrap();
        w.fsync(&file).unwrap();
        assert_eq!(seen, buf.len() - BLOCK);
        assert_eq!(std::fs::read(&path).unwrap(), buf.as_slice());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn ring_write_puts_every_byte_at_its_offset() {
        let w = FileWriter::new();
        if let Some(e) = w.fallback_reason() {
            eprintln!("io_uring unavailable here ({e}); testing the fallback only");
        }
        write_and_read_back(w, "ring");
    }

    fn write_many_and_read_back(mut w: FileWriter, name: &str) {
        // Sizes: empty, one block, several blocks, and several CHUNKs (its
        // pieces in flight at once, beside the other files').
        let sizes = [0, BLOCK, 7 * BLOCK, 3 * CHUNK + 3 * BLOCK, 2 * BLOCK];
        let paths: Vec<_> = (0..sizes.len())
            .map(|i| tmp(&format!("{name}-many-{i}")))
            .collect();
        let bufs: Vec<AlignedBuf> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                let mut b = AlignedBuf::zeroed(n);
                for (i, x) in b.iter_mut().enumerate() {
                    *x = ((i + k) % 253) as u8;
                }
                b
            })
            .collect();
        let files: Vec<File> = paths.iter().map(|p| w.create(p).unwrap().0).collect();
        let items: Vec<(&File, &AlignedBuf)> = files.iter().zip(&bufs).collect();
        w.write_many(&items).unwrap();
        let refs: Vec<&File> = files.iter().collect();
        w.fsync_many(&refs).unwrap();
        for (p, b) in paths.iter().zip(&bufs) {
            assert_eq!(std::fs::read(p).unwrap(), b.as_slice());
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn write_many_puts_every_file_whole_at_offset_zero() {
        write_many_and_read_back(FileWriter::new(), "ring");
        write_many_and_read_back(FileWriter::pwrite_only(), "pwrite");
    }

    #[test]
    fn write_many_names_the_file_that_failed() {
        for mut w in [FileWriter::new(), FileWriter::pwrite_only()] {
            let ok = tmp("many-ok");
            let ro = tmp("many-ro");
            std::fs::write(&ro, b"").unwrap();
            let good = w.create(&ok).unwrap().0;
            let bad = File::open(&ro).unwrap(); // read-only: EBADF
            let buf = AlignedBuf::zeroed(BLOCK);
            let err = w.write_many(&[(&good, &buf), (&bad, &buf)]).unwrap_err();
            assert_eq!(err.0, 1, "{err:?}");
            for p in [ok, ro] {
                std::fs::remove_file(p).unwrap();
            }
        }
    }

    #[test]
    fn pwrite_fallback_puts_every_byte_at_its_offset() {
        write_and_read_back(FileWriter::pwrite_only(), "pwrite");
    }

    #[test]
    fn write_errors_are_returned_not_panicked() {
        let mut w = FileWriter::new();
        // Several pieces in flight, all failing: the first error returns
        // after the others have completed (and are not waited for twice).
        let buf = AlignedBuf::zeroed(4 * CHUNK);
        // A read-only descriptor: every write fails with EBADF.
        let file = File::open("/proc/self/stat").unwrap();
        let err = w
            .write_range(&file, &buf, 0..buf.len(), |_| {})
            .unwrap_err();
        assert!(err.raw_os_error().is_some(), "{err}");
    }
}
