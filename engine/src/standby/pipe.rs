//! A message pipe between two processes: length-prefixed byte messages,
//! batched into the 64-byte frames of a file-backed SPSC ring
//! ([`crate::queue::spsc::MappedProducer`]).
//!
//! ## Layout
//!
//! The file is the ring's (`queue::storage::Mapped` documents its header:
//! magic `TNDMSPSC`, version, element size 64). What one commit publishes
//! is a *batch*: it starts a frame with its length `B` (4 bytes,
//! little-endian), then `B` bytes over as many frames as `4 + B` needs (the
//! rest of the last frame is padding). A batch's bytes are the messages
//! staged since the commit before, each its length `L` (4 bytes) and its
//! `L` bytes, packed.
//!
//! ## Why batches
//!
//! A process-isolated operator sends a message per record both ways.
//! Framed one by one, every message cost a look at the other side's index
//! (a cache line the other process writes) and a release store per frame
//! read. Batched, the writer looks at the reader's index only when its
//! cached view of the free frames is too small, and the reader releases a
//! whole batch's frames with one store: per record, the pipe costs copies.
//!
//! ## A writer that dies mid-write
//!
//! The writer keeps the messages it stages in memory and writes them into
//! the ring at the commit, whose one `tail` store publishes the whole batch
//! (the ring cannot publish part of it), so a writer killed at any
//! instruction leaves the reader whole batches of whole messages and
//! nothing of the one it was writing. A length the reader cannot believe
//! (a batch over [`MAX_MESSAGE`] or longer than what was published, a
//! message that overruns its batch) is a broken pipe
//! ([`PipeError::Torn`]), never a message. The ring cannot say that its
//! writer died (a killed process drops nothing): the driver learns that
//! from the child's exit.

#[cfg(not(loom))]
use crate::queue::spsc::{MappedConsumer, MappedProducer};
use std::path::Path;

/// A ring's mapping error as an I/O error (what callers report).
#[cfg(not(loom))]
fn io(e: crate::queue::spsc::MapError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Under loom the rings are not file-backed: a pipe cannot be made (no
/// loom model runs process isolation).
#[cfg(loom)]
mod stand_in {
    pub(crate) struct Ring;
    impl Ring {
        pub(crate) fn capacity(&self) -> usize {
            unreachable!("no pipe under loom")
        }
        pub(crate) fn free_slots(&mut self) -> usize {
            unreachable!("no pipe under loom")
        }
        pub(crate) fn stage(&mut self, _: [u8; super::FRAME]) -> Result<(), ()> {
            unreachable!("no pipe under loom")
        }
        pub(crate) fn commit(&mut self) {}
        pub(crate) fn peek(&mut self) -> Option<&[u8; super::FRAME]> {
            unreachable!("no pipe under loom")
        }
        pub(crate) fn pop_batch<F: FnMut([u8; super::FRAME])>(&mut self, _: usize, _: F) -> usize {
            unreachable!("no pipe under loom")
        }
        pub(crate) fn len(&mut self) -> usize {
            unreachable!("no pipe under loom")
        }
    }
    pub(crate) fn unsupported() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::Unsupported, "no pipe under loom")
    }
}

#[cfg(not(loom))]
type Writer = MappedProducer<Frame>;
#[cfg(not(loom))]
type Reader = MappedConsumer<Frame>;
#[cfg(loom)]
type Writer = stand_in::Ring;
#[cfg(loom)]
type Reader = stand_in::Ring;

/// Bytes of one frame.
pub(crate) const FRAME: usize = 64;
#[cfg_attr(loom, allow(dead_code))]
type Frame = [u8; FRAME];
/// The longest message a pipe carries (a larger snapshot goes through the
/// snapshot exchange, not a pipe).
pub(crate) const MAX_MESSAGE: usize = 64 << 20;

/// What a pipe's reader can find.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PipeError {
    #[error("a message of {len} bytes in a pipe of {capacity} frames (torn or foreign)")]
    Torn { len: usize, capacity: usize },
}

/// Frames a batch of `len` bytes takes.
fn frames(len: usize) -> usize {
    (4 + len).div_ceil(FRAME)
}

/// The writing end.
pub(crate) struct PipeWriter {
    ring: Writer,
    /// The batch being staged: each message's length and bytes.
    batch: Vec<u8>,
    /// Free frames, as last read from the reader's index: a stage looks
    /// again only when the batch would not fit in these.
    room: usize,
}

impl PipeWriter {
    /// Creates the pipe file at `path` (0600; fails if it exists) with room
    /// for at least `bytes`.
    pub(crate) fn create(path: &Path, bytes: usize) -> std::io::Result<Self> {
        #[cfg(not(loom))]
        return Ok(PipeWriter::over(
            MappedProducer::create(path, bytes.div_ceil(FRAME).max(4)).map_err(io)?,
        ));
        #[cfg(loom)]
        {
            let _ = (path, bytes);
            Err(stand_in::unsupported())
        }
    }

    /// Attaches the writer of the pipe at `path` (made by
    /// [`PipeReader::create`]).
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        #[cfg(not(loom))]
        return Ok(PipeWriter::over(MappedProducer::open(path).map_err(io)?));
        #[cfg(loom)]
        {
            let _ = path;
            Err(stand_in::unsupported())
        }
    }

    #[cfg(not(loom))]
    fn over(ring: Writer) -> Self {
        PipeWriter {
            ring,
            batch: Vec::with_capacity(4096),
            room: 0,
        }
    }

    /// The largest message this pipe can ever take (alone in its batch).
    pub(crate) fn max_message(&self) -> usize {
        (self.ring.capacity() * FRAME - 8).min(MAX_MESSAGE - 4)
    }

    /// Stages `msg` (published at the next [`commit`](Self::commit));
    /// `false` if the pipe has no room for it now, with the messages staged
    /// before it (nothing of it is staged).
    ///
    /// # Panics
    ///
    /// If `msg` is longer than [`max_message`](Self::max_message): the
    /// caller sizes its messages (an engine bug otherwise).
    pub(crate) fn stage(&mut self, msg: &[u8]) -> bool {
        assert!(
            msg.len() <= self.max_message(),
            "engine bug: a pipe message of {} bytes",
            msg.len()
        );
        let len = self.batch.len() + 4 + msg.len();
        if len > MAX_MESSAGE {
            return false;
        }
        let n = frames(len);
        if n > self.room {
            self.room = self.ring.free_slots();
            if n > self.room {
                return false;
            }
        }
        self.batch
            .extend_from_slice(&(msg.len() as u32).to_le_bytes());
        self.batch.extend_from_slice(msg);
        true
    }

    /// Publishes every message staged so far (one batch).
    pub(crate) fn commit(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let len = self.batch.len();
        let mut frame = [0u8; FRAME];
        frame[..4].copy_from_slice(&(len as u32).to_le_bytes());
        let first = len.min(FRAME - 4);
        frame[4..4 + first].copy_from_slice(&self.batch[..first]);
        let mut staged = self.ring.stage(frame).is_ok();
        for chunk in self.batch[first..].chunks(FRAME) {
            let mut f = [0u8; FRAME];
            f[..chunk.len()].copy_from_slice(chunk);
            staged &= self.ring.stage(f).is_ok();
        }
        assert!(staged, "engine bug: a pipe's batch outgrew the room it had");
        self.ring.commit();
        self.room -= frames(len);
        self.batch.clear();
    }
}

/// The reading end.
pub(crate) struct PipeReader {
    ring: Reader,
    /// The batch being read (its length first), and where its next
    /// message starts.
    batch: Vec<u8>,
    at: usize,
}

impl PipeReader {
    #[cfg(not(loom))]
    fn over(ring: Reader) -> Self {
        PipeReader {
            ring,
            batch: Vec::with_capacity(4096),
            at: 0,
        }
    }

    /// Creates the pipe file at `path` (0600; fails if it exists) with room
    /// for at least `bytes`.
    pub(crate) fn create(path: &Path, bytes: usize) -> std::io::Result<Self> {
        #[cfg(not(loom))]
        return Ok(PipeReader::over(
            MappedConsumer::create(path, bytes.div_ceil(FRAME).max(4)).map_err(io)?,
        ));
        #[cfg(loom)]
        {
            let _ = (path, bytes);
            Err(stand_in::unsupported())
        }
    }

    /// Attaches the reader of the pipe at `path` (made by
    /// [`PipeWriter::create`]).
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        #[cfg(not(loom))]
        return Ok(PipeReader::over(MappedConsumer::open(path).map_err(io)?));
        #[cfg(loom)]
        {
            let _ = path;
            Err(stand_in::unsupported())
        }
    }

    /// The next whole message into `out` (cleared first): `Ok(false)` if
    /// none is published.
    pub(crate) fn recv(&mut self, out: &mut Vec<u8>) -> Result<bool, PipeError> {
        out.clear();
        if self.at >= self.batch.len() && !self.next_batch()? {
            return Ok(false);
        }
        let capacity = self.ring.capacity();
        let rest = &self.batch[self.at..];
        let len = rest
            .get(..4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or(PipeError::Torn {
                len: rest.len(),
                capacity,
            })?;
        let msg = rest
            .get(4..4 + len)
            .ok_or(PipeError::Torn { len, capacity })?;
        out.extend_from_slice(msg);
        self.at += 4 + len;
        Ok(true)
    }

    /// Takes the next published batch (`false`: none), releasing its
    /// frames with one store.
    fn next_batch(&mut self) -> Result<bool, PipeError> {
        let Some(head) = self.ring.peek() else {
            return Ok(false);
        };
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let n = frames(len);
        let capacity = self.ring.capacity();
        // The frames of one batch are published together.
        if len > MAX_MESSAGE || n > capacity || self.ring.len() < n {
            return Err(PipeError::Torn { len, capacity });
        }
        self.batch.clear();
        let batch = &mut self.batch;
        let taken = self.ring.pop_batch(n, |f| batch.extend_from_slice(&f));
        debug_assert_eq!(taken, n, "published with its first frame");
        self.batch.truncate(4 + len);
        self.at = 4;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sys::scratch::ScratchDir;

    fn dir() -> ScratchDir {
        ScratchDir::unique(&std::env::temp_dir(), "pipe-test").unwrap()
    }

    fn pair(frames: usize) -> (ScratchDir, PipeWriter, PipeReader) {
        let dir = dir();
        let p = dir.path().join("pipe");
        let w = PipeWriter::create(&p, frames * FRAME).unwrap();
        let r = PipeReader::open(&p).unwrap();
        (dir, w, r)
    }

    #[test]
    fn messages_of_every_length_arrive_whole_and_in_order() {
        let (_d, mut w, mut r) = pair(64);
        let mut out = Vec::new();
        for len in 0..600usize {
            let msg: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            assert!(w.stage(&msg), "room for {len}");
            w.commit();
            assert!(r.recv(&mut out).unwrap());
            assert_eq!(out, msg, "length {len}");
            assert!(!r.recv(&mut out).unwrap());
        }
    }

    #[test]
    fn staged_messages_are_invisible_until_committed() {
        let (_d, mut w, mut r) = pair(16);
        let mut out = Vec::new();
        assert!(w.stage(b"one"));
        assert!(w.stage(&[9u8; 100]));
        assert!(!r.recv(&mut out).unwrap(), "nothing published yet");
        w.commit();
        assert!(r.recv(&mut out).unwrap());
        assert_eq!(out, b"one");
        assert!(r.recv(&mut out).unwrap());
        assert_eq!(out, vec![9u8; 100]);
    }

    #[test]
    fn a_full_pipe_refuses_without_staging_a_part() {
        let (_d, mut w, mut r) = pair(4);
        let mut out = Vec::new();
        // 3 frames, then 2 more do not fit in 4.
        assert!(w.stage(&[1u8; 150]));
        assert!(!w.stage(&[2u8; 100]));
        w.commit();
        assert!(r.recv(&mut out).unwrap());
        assert_eq!(out, vec![1u8; 150]);
        assert!(
            !r.recv(&mut out).unwrap(),
            "the refused message left nothing"
        );
        assert!(w.stage(&[2u8; 100]));
        w.commit();
        assert!(r.recv(&mut out).unwrap());
        assert_eq!(out, vec![2u8; 100]);
    }

    #[test]
    fn a_message_that_overruns_its_batch_is_a_torn_pipe() {
        let dir = dir();
        let p = dir.path().join("pipe");
        let mut raw = MappedProducer::<Frame>::create(&p, 8).unwrap();
        let mut r = PipeReader::open(&p).unwrap();
        // A batch of 10 bytes whose one message says it has 50.
        let mut f = [0u8; FRAME];
        f[..4].copy_from_slice(&10u32.to_le_bytes());
        f[4..8].copy_from_slice(&50u32.to_le_bytes());
        raw.push(f).unwrap();
        assert!(matches!(
            r.recv(&mut Vec::new()),
            Err(PipeError::Torn { len: 50, .. })
        ));
    }

    #[test]
    fn one_commit_publishes_its_messages_as_one_batch_of_frames() {
        let (_d, mut w, mut r) = pair(16);
        let mut out = Vec::new();
        for i in 0..20u8 {
            assert!(w.stage(&[i; 20]), "24 bytes each: 20 fit in 8 frames");
        }
        w.commit();
        // 4 + 20 · 24 = 484 bytes: 8 frames, not the 20 of a frame each.
        assert_eq!(r.ring.len(), 8);
        for i in 0..20u8 {
            assert!(r.recv(&mut out).unwrap());
            assert_eq!(out, [i; 20]);
        }
        assert!(!r.recv(&mut out).unwrap());
    }

    #[test]
    fn an_unbelievable_length_is_a_torn_pipe() {
        let dir = dir();
        let p = dir.path().join("pipe");
        let mut raw = MappedProducer::<Frame>::create(&p, 8).unwrap();
        let mut r = PipeReader::open(&p).unwrap();
        let mut f = [0u8; FRAME];
        f[..4].copy_from_slice(&(10_000u32).to_le_bytes());
        raw.push(f).unwrap();
        assert!(matches!(
            r.recv(&mut Vec::new()),
            Err(PipeError::Torn { len: 10_000, .. })
        ));
    }

    #[test]
    fn a_pipe_carries_messages_between_threads_under_pressure() {
        let (_d, mut w, mut r) = pair(8);
        let t = std::thread::spawn(move || {
            for i in 0..20_000u32 {
                let msg: Vec<u8> = (0..(i % 300)).map(|k| (k ^ i) as u8).collect();
                while !w.stage(&msg) {
                    std::hint::spin_loop();
                }
                w.commit();
            }
        });
        let mut out = Vec::new();
        let mut i = 0u32;
        while i < 20_000 {
            if r.recv(&mut out).unwrap() {
                let msg: Vec<u8> = (0..(i % 300)).map(|k| (k ^ i) as u8).collect();
                assert_eq!(out, msg);
                i += 1;
            }
        }
        t.join().unwrap();
    }
}
