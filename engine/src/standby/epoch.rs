//! The liveness cell a primary and its standby share: one cache line with
//! the current epoch, the primary's heartbeat and a wake-up word.
//!
//! ```text
//! state  = epoch << 1 | failed     (AtomicU64)
//! beat   = the primary's last sign of life, engine nanoseconds
//! wake   = bumped on every state change; the standby parks on it (futex)
//! ```
//!
//! - The primary of epoch `e` calls [`Liveness::beat`] as it works; once the
//!   epoch is over the call says [`Fenced`], and the primary must stop —
//!   its consumers no longer read its rings, and its determinant-log
//!   appends, recovery points and end are refused.
//! - A primary that panics or loses its input calls
//!   [`Liveness::report_failure`]: the `failed` bit is set and the standby
//!   woken at once.
//! - The standby waits in [`Liveness::wait_for_failure`]: parked on the wake
//!   word (no spinning: a spinning standby on a shared core would cost the
//!   primary most of its throughput), waking to check the heartbeat every
//!   `min(timeout / 4, 1 ms)`. It returns when the primary failed or stalled past the
//!   timeout; the standby then [`claim`](Liveness::claim)s epoch `e + 1` with
//!   a compare-and-swap — exactly one claimant wins, and the old primary is
//!   fenced from that moment.
//!
//! Under `--cfg loom` the futex is replaced by loom's yield, so the models
//! explore every interleaving of the state machine.
//!
//! ## Between processes
//!
//! The cell is four atomic words and nothing else, so it works the same in
//! memory two processes map: [`LivenessFile`] is the cell in a file of its
//! own (mode 0600) that a primary and a standby in different processes map
//! shared. The futex is a shared one (no `FUTEX_PRIVATE_FLAG`), so a wake
//! from one process reaches a waiter in another. Every change is one atomic
//! operation, so a process that dies at any point leaves a cell another can
//! read: a primary killed between its heartbeat and its next one simply
//! stops beating (its death is seen by the stall timeout, or at once by
//! whoever watches its process); a claimant killed between raising the beat
//! and its compare-and-swap leaves the epoch unclaimed with a fresher beat,
//! which only delays the stall by one timeout. Heartbeats are only
//! comparable when every process reads the same clock: the file's header
//! names it, `CLOCK_MONOTONIC` nanoseconds from an origin the processes
//! agree on.
//!
//! ```text
//! 0   magic "TNDMLV\0\x01"   8  version (u32) = 1   12  cell bytes (u32) = 64
//! 16  clock (u32) = 1: CLOCK_MONOTONIC nanoseconds
//! 64  state (atomic u64)   72  beat (atomic u64)   80  wake (atomic u32)
//! 84  stop (atomic u32)    88..128 zero
//! ```

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// The epoch has ended: the caller is no longer the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced {
    /// The epoch now current.
    pub current: u64,
}

/// Why a waiting standby woke up for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The primary reported a failure (panic, cut input).
    Failed,
    /// No heartbeat for longer than the timeout; `since` is the last beat.
    Stalled {
        /// Engine nanoseconds of the last heartbeat.
        since: u64,
    },
    /// Someone else already ended the epoch (another standby claimed it).
    Ended {
        /// The epoch now current.
        current: u64,
    },
    /// The waiter was asked to stop ([`Liveness::stop_waiting`]).
    Stopped,
}

/// The shared cell (one cache line).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Liveness {
    state: AtomicU64,
    beat: AtomicU64,
    wake: AtomicU32,
    stop: AtomicU32,
}

impl Liveness {
    /// A cell whose epoch 1 belongs to the first primary, with a heartbeat
    /// at `now`.
    pub fn new(now: u64) -> Self {
        Liveness {
            state: AtomicU64::new(1 << 1),
            beat: AtomicU64::new(now),
            wake: AtomicU32::new(0),
            stop: AtomicU32::new(0),
        }
    }

    /// The current epoch.
    pub fn current(&self) -> u64 {
        self.state.load(Ordering::Acquire) >> 1
    }

    /// Whether the current epoch's primary reported a failure.
    pub fn failed(&self) -> bool {
        self.state.load(Ordering::Acquire) & 1 == 1
    }

    /// The primary's last heartbeat.
    pub fn last_beat(&self) -> u64 {
        self.beat.load(Ordering::Acquire)
    }

    /// The primary of `epoch` is alive at `now`; [`Fenced`] once the epoch
    /// is over.
    #[inline]
    pub fn beat(&self, epoch: u64, now: u64) -> Result<(), Fenced> {
        let s = self.state.load(Ordering::Acquire);
        if s >> 1 != epoch {
            return Err(Fenced { current: s >> 1 });
        }
        self.beat.fetch_max(now, Ordering::Release);
        Ok(())
    }

    /// The primary of `epoch` failed: mark it and wake the standby. Returns
    /// `false` if the epoch had already ended.
    pub fn report_failure(&self, epoch: u64) -> bool {
        let ok = self
            .state
            .compare_exchange(
                epoch << 1,
                epoch << 1 | 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if ok {
            self.notify();
        }
        ok
    }

    /// Ends `epoch` and makes the caller the primary of `epoch + 1`, with a
    /// heartbeat at `now`. Exactly one caller per epoch succeeds; the others
    /// get the epoch now current.
    pub fn claim(&self, epoch: u64, now: u64) -> Result<u64, Fenced> {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            if s >> 1 != epoch {
                return Err(Fenced { current: s >> 1 });
            }
            // The beat first: the new primary must not look stalled at once.
            self.beat.fetch_max(now, Ordering::Release);
            // SeqCst: the claim is one side of the fencing handshakes with
            // the old primary (its determinant-log appends, its copying
            // mark in the queues), each with a SeqCst fence on both sides.
            match self.state.compare_exchange_weak(
                s,
                (epoch + 1) << 1,
                Ordering::SeqCst,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.notify();
                    return Ok(epoch + 1);
                }
                Err(now_s) => s = now_s,
            }
        }
    }

    /// Wakes every waiter for good (shutting the standby down).
    pub fn stop_waiting(&self) {
        self.stop.store(1, Ordering::Release);
        self.notify();
    }

    fn notify(&self) {
        self.wake.fetch_add(1, Ordering::Release);
        park::wake_all(&self.wake);
    }

    /// The standby's wait: returns when the primary of `epoch` failed,
    /// stalled past `timeout` (by `now()`, engine nanoseconds), the epoch
    /// ended otherwise, or [`stop_waiting`](Self::stop_waiting) was called.
    pub fn wait_for_failure(&self, epoch: u64, timeout: Duration, now: impl Fn() -> u64) -> Wake {
        let timeout_ns = timeout.as_nanos() as u64;
        // Woken at once by a failure report; a stall is found within
        // `timeout` plus one slice (at most 1 ms).
        let slice = (timeout / 4).clamp(Duration::from_micros(50), Duration::from_millis(1));
        loop {
            // Read the wake word before the conditions: a change after this
            // load makes the park below return at once (no lost wake-up).
            let w = self.wake.load(Ordering::Acquire);
            if self.stop.load(Ordering::Acquire) != 0 {
                return Wake::Stopped;
            }
            let s = self.state.load(Ordering::Acquire);
            if s >> 1 != epoch {
                return Wake::Ended { current: s >> 1 };
            }
            if s & 1 == 1 {
                return Wake::Failed;
            }
            let since = self.beat.load(Ordering::Acquire);
            if !super::decide::epoch_live(epoch, s >> 1, since, now(), timeout_ns) {
                return Wake::Stalled { since };
            }
            park::wait(&self.wake, w, slice);
        }
    }
}

pub use file::LivenessFile;

/// Under loom the cell cannot be a mapping (loom models only its own
/// atomics): the same API over a heap cell, so the crate builds; the model
/// checks exercise [`Liveness`] directly.
#[cfg(loom)]
mod file {
    use super::Liveness;
    use crate::standby::bq::BqError;
    use std::path::{Path, PathBuf};

    /// A liveness cell (loom build: in memory).
    #[derive(Debug)]
    pub struct LivenessFile {
        cell: Liveness,
        path: PathBuf,
    }

    impl LivenessFile {
        /// A cell with epoch 1 and a heartbeat at `now`.
        pub fn create(path: impl AsRef<Path>, now: u64) -> Result<Self, BqError> {
            Ok(LivenessFile {
                cell: Liveness::new(now),
                path: path.as_ref().to_path_buf(),
            })
        }
        /// The cell.
        pub fn cell(&self) -> &Liveness {
            &self.cell
        }
        /// The file.
        pub fn path(&self) -> &Path {
            &self.path
        }
    }

    impl std::ops::Deref for LivenessFile {
        type Target = Liveness;
        fn deref(&self) -> &Liveness {
            &self.cell
        }
    }
}

#[cfg(not(loom))]
mod file {
    use super::Liveness;
    use crate::standby::bq::BqError;
    use memmap2::MmapRaw;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::Ordering;

    /// File magic.
    pub const MAGIC: [u8; 8] = *b"TNDMLV\0\x01";
    const VERSION: u32 = 1;
    /// The header's clock: `CLOCK_MONOTONIC` nanoseconds.
    const CLOCK_MONOTONIC_NS: u32 = 1;
    const OFF_CELL: usize = 64;
    const LEN: usize = 128;

    /// A [`Liveness`] cell in a file that several processes map shared
    /// (see the module docs for its layout and what a dead writer leaves).
    pub struct LivenessFile {
        map: MmapRaw,
        path: PathBuf,
    }

    impl std::fmt::Debug for LivenessFile {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("LivenessFile")
                .field("path", &self.path)
                .field("epoch", &self.current())
                .finish()
        }
    }

    const _: () = assert!(std::mem::size_of::<Liveness>() == OFF_CELL);
    const _: () = assert!(std::mem::align_of::<Liveness>() <= OFF_CELL);

    impl LivenessFile {
        /// Creates the file (mode 0600; an existing file is an error) with
        /// epoch 1 and a heartbeat at `now`.
        pub fn create(path: impl AsRef<Path>, now: u64) -> Result<Self, BqError> {
            let path = path.as_ref().to_path_buf();
            let map = MmapRaw::from(crate::standby::bq::create_mapped(&path, LEN as u64)?);
            let f = LivenessFile { map, path };
            // The cell first, the magic last: a file whose creator died
            // half-way is refused by `open`, never read as a cell.
            let cell = f.cell();
            cell.state.store(1 << 1, Ordering::Relaxed);
            cell.beat.store(now, Ordering::Relaxed);
            let mut h = [0u8; 64];
            h[8..12].copy_from_slice(&VERSION.to_le_bytes());
            h[12..16].copy_from_slice(&(OFF_CELL as u32).to_le_bytes());
            h[16..20].copy_from_slice(&CLOCK_MONOTONIC_NS.to_le_bytes());
            h[0..8].copy_from_slice(&MAGIC);
            std::sync::atomic::fence(Ordering::Release);
            // SAFETY: the header's 64 bytes are ours alone until the path
            // is handed to another process, which happens after this; the
            // cell (from byte 64) is not touched.
            unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), f.map.as_mut_ptr(), 64) };
            Ok(f)
        }

        /// Maps an existing cell file another process created, after
        /// checking its header: a file of another format, version or
        /// clock, or of another length, is refused.
        pub fn open(path: impl AsRef<Path>) -> Result<Self, BqError> {
            let path = path.as_ref().to_path_buf();
            // Magic and version: a file whose creator died before writing
            // its magic is refused here.
            let (map, h) =
                crate::standby::bq::open_mapped(&path, &MAGIC, VERSION, "liveness cell")?;
            let invalid = |reason: String| BqError::Invalid {
                path: path.clone(),
                reason,
            };
            if map.len() != LEN {
                return Err(invalid(format!(
                    "{} bytes: a liveness cell file has {LEN}",
                    map.len()
                )));
            }
            let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4 bytes"));
            if u32_at(12) != OFF_CELL as u32 || u32_at(16) != CLOCK_MONOTONIC_NS {
                return Err(invalid(format!(
                    "a cell of {} bytes on clock {} (this build: {OFF_CELL} bytes, clock {CLOCK_MONOTONIC_NS})",
                    u32_at(12),
                    u32_at(16)
                )));
            }
            // From here on only raw: every access to the cell is atomic,
            // from this and any other mapping.
            let map = MmapRaw::from(map);
            Ok(LivenessFile { map, path })
        }

        /// The cell.
        pub fn cell(&self) -> &Liveness {
            // SAFETY: the map is page-aligned and `LEN` bytes long, so the
            // cell at `OFF_CELL` is aligned (see the asserts above) and in
            // bounds; it lives as long as `self`; `Liveness` is atomics
            // only, valid for any bit pattern another process may leave,
            // and every access to them is atomic.
            unsafe { &*(self.map.as_ptr().add(OFF_CELL) as *const Liveness) }
        }

        /// The file.
        pub fn path(&self) -> &Path {
            &self.path
        }
    }

    impl std::ops::Deref for LivenessFile {
        type Target = Liveness;
        fn deref(&self) -> &Liveness {
            self.cell()
        }
    }
}

#[cfg(not(loom))]
mod park {
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    /// Sleeps while `word` still holds `seen`, at most `d`.
    pub(super) fn wait(word: &AtomicU32, seen: u32, d: Duration) {
        let ts = libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a valid, aligned u32 that outlives the call
        // (it is borrowed); the kernel only reads it. A spurious or
        // interrupted return is fine: the caller re-checks and waits again.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                // Shared: the waiter and the waker may be in different
                // processes that map the cell (see `LivenessFile`).
                libc::FUTEX_WAIT,
                seen,
                &ts as *const libc::timespec,
            );
        }
    }

    /// Wakes every thread sleeping on `word`, in any process.
    pub(super) fn wake_all(word: &AtomicU32) {
        // SAFETY: FUTEX_WAKE on a valid, aligned u32; no memory is written.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
        }
    }
}

#[cfg(loom)]
mod park {
    use crate::sync::AtomicU32;
    use std::time::Duration;

    pub(super) fn wait(_word: &AtomicU32, _seen: u32, _d: Duration) {
        loom::thread::yield_now();
    }

    pub(super) fn wake_all(_word: &AtomicU32) {}
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_claimed_epoch_fences_the_old_primary() {
        let l = Liveness::new(0);
        assert_eq!(l.current(), 1);
        assert!(l.beat(1, 10).is_ok());
        assert_eq!(l.claim(1, 20), Ok(2));
        assert_eq!(l.beat(1, 30), Err(Fenced { current: 2 }));
        assert!(l.beat(2, 30).is_ok());
        assert_eq!(l.claim(1, 40), Err(Fenced { current: 2 }), "one winner");
        assert!(!l.report_failure(1), "an ended epoch cannot fail again");
    }

    #[test]
    fn a_reported_failure_wakes_the_parked_standby() {
        let origin = Instant::now();
        let now = move || origin.elapsed().as_nanos() as u64;
        let l = Arc::new(Liveness::new(now()));
        let l2 = Arc::clone(&l);
        let standby =
            std::thread::spawn(move || l2.wait_for_failure(1, Duration::from_secs(30), now));
        std::thread::sleep(Duration::from_millis(20));
        assert!(l.report_failure(1));
        assert_eq!(standby.join().unwrap(), Wake::Failed);
        assert_eq!(l.claim(1, now()), Ok(2));
    }

    #[test]
    fn a_silent_primary_is_found_stalled_after_the_timeout() {
        let origin = Instant::now();
        let now = move || origin.elapsed().as_nanos() as u64;
        let l = Liveness::new(now());
        let t = Instant::now();
        match l.wait_for_failure(1, Duration::from_millis(20), now) {
            Wake::Stalled { since } => assert_eq!(since, l.last_beat()),
            w => panic!("{w:?}"),
        }
        assert!(t.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn stop_waiting_releases_the_standby() {
        let l = Arc::new(Liveness::new(0));
        let l2 = Arc::clone(&l);
        let t = std::thread::spawn(move || l2.wait_for_failure(1, Duration::from_secs(30), || 0));
        std::thread::sleep(Duration::from_millis(5));
        l.stop_waiting();
        assert_eq!(t.join().unwrap(), Wake::Stopped);
    }
}
