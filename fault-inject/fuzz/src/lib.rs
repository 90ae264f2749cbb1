//! Helpers shared by the fuzz targets: a per-process scratch directory on
//! tmpfs and a cursor that turns fuzz bytes into choices.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This process's scratch directory, `/dev/shm/tandem-fuzz-<pid>/` (the
/// system temp directory where `/dev/shm` does not exist), created on first
/// use and removed when the process exits normally. A crashing input
/// aborts the process and leaves it behind (a few KiB).
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch_path();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the fuzz scratch directory");
        // SAFETY: `remove_scratch` is an `extern "C" fn()` that cannot
        // unwind (it catches any panic) and only removes this directory.
        unsafe {
            libc::atexit(remove_scratch);
        }
        dir
    })
}

extern "C" fn remove_scratch() {
    let _ = std::panic::catch_unwind(|| std::fs::remove_dir_all(scratch_path()));
}

fn scratch_path() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("tandem-fuzz-{}", std::process::id()))
}

/// A path in the scratch directory.
pub fn scratch(name: &str) -> PathBuf {
    scratch_dir().join(name)
}

/// Writes `bytes` to `path` (replacing what was there).
pub fn write_file(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write the fuzz input file");
}

/// Reads choices from fuzz bytes; past the end every read gives zeros.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next `N` bytes, zero-padded.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        out
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// Up to `max` bytes (the count read first).
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let n = (self.u8() as usize).min(max).min(self.data.len());
        let (b, rest) = self.data.split_at(n);
        self.data = rest;
        b
    }

    /// Everything not yet read.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    /// A u64 that is often a boundary value (0, 1, a small number, a power
    /// of two or one off it, the top of the range) rather than uniform.
    pub fn interesting_u64(&mut self) -> u64 {
        let sel = self.u8();
        match sel % 8 {
            0 => 0,
            1 => 1 + (sel as u64 >> 3),
            2 => u64::MAX - (sel as u64 >> 3),
            3 => 1u64 << (self.u8() % 64),
            4 => (1u64 << (self.u8() % 64)).wrapping_sub(1),
            5 => (1u64 << (self.u8() % 64)).wrapping_add(1),
            6 => self.u32() as u64,
            _ => self.u64(),
        }
    }
}

/// Applies up to `max` byte patches read from `input` to `image`: each an
/// offset (wrapped into the image) and either one byte or an aligned u64
/// (the header's and index's fields are u64s).
pub fn patch(image: &mut [u8], input: &mut Input<'_>, max: usize) {
    if image.is_empty() {
        return;
    }
    let n = (input.u8() as usize).min(max);
    for _ in 0..n {
        if input.is_empty() {
            break;
        }
        let kind = input.u8();
        let at = input.u32() as usize % image.len();
        if kind & 1 == 0 {
            image[at] = input.u8();
        } else {
            let at = at & !7;
            let v = input.interesting_u64().to_le_bytes();
            let end = (at + 8).min(image.len());
            image[at..end].copy_from_slice(&v[..end - at]);
        }
    }
}
