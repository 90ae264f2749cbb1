//! [`AlignedBuf`]: a growable byte buffer whose start is aligned to
//! [`BLOCK`] (4096) bytes, the alignment `O_DIRECT` asks of the memory, the
//! length and the file offset of every transfer. Its bytes live in the heap,
//! or in an unlinked file mapped shared ([`AlignedBuf::in_file`]) for an
//! archive larger than the memory the process may use. The io_uring writer
//! that sends such buffers to disk is [`super::uring`].

use std::{
    alloc::{self, Layout},
    fs::{File, OpenOptions},
    io,
    os::{fd::AsRawFd, unix::fs::OpenOptionsExt},
    path::Path,
    ptr::NonNull,
};

/// Alignment and size granule of `O_DIRECT` transfers.
pub const BLOCK: usize = 4096;

/// `n` rounded up to a multiple of [`BLOCK`].
#[inline]
pub const fn round_up(n: usize) -> usize {
    n.div_ceil(BLOCK) * BLOCK
}

/// A growable byte buffer starting on a [`BLOCK`] boundary.
///
/// Capacity is always a multiple of [`BLOCK`]; bytes past `len` are
/// unspecified until [`pad_to_block`](Self::pad_to_block) zero-fills them.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
    /// `Some`: the bytes live in this (unlinked) file, mapped shared, not
    /// in the heap ([`AlignedBuf::in_file`]).
    file: Option<File>,
}

// SAFETY: `AlignedBuf` owns its allocation exclusively, like `Vec<u8>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only read, like `&Vec<u8>`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// An empty buffer; allocates nothing.
    pub const fn new() -> Self {
        AlignedBuf {
            ptr: NonNull::<[u8; BLOCK]>::dangling().cast(),
            len: 0,
            cap: 0,
            file: None,
        }
    }

    /// An empty buffer whose bytes live in an unlinked file in `dir`,
    /// mapped shared, instead of the heap: the kernel writes its pages back
    /// and drops them under memory pressure, so an archive larger than the
    /// memory the process may use (a disk-backed state's, see
    /// `crate::state::disk`) can still be built whole. Page-aligned, like
    /// every mapping.
    pub fn in_file(dir: &Path) -> io::Result<Self> {
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
        {
            Ok(f) => f,
            // A filesystem without O_TMPFILE: a named file, unlinked at once.
            Err(_) => {
                let path = dir.join(format!(
                    ".tandem-buf-{}-{:x}",
                    std::process::id(),
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos())
                ));
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)?;
                std::fs::remove_file(&path)?;
                f
            }
        };
        let mut b = Self::new();
        b.file = Some(file);
        Ok(b)
    }

    /// Whether the bytes live in a file ([`in_file`](Self::in_file)).
    pub fn is_in_file(&self) -> bool {
        self.file.is_some()
    }

    /// An empty buffer with room for at least `cap` bytes.
    pub fn with_capacity(cap: usize) -> Self {
        let mut b = Self::new();
        b.reserve(cap);
        b
    }

    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        let mut b = Self::with_capacity(len);
        b.resize_zeroed(len);
        b
    }

    /// Bytes written.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no byte was written.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the buffer holds without growing.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    fn layout(cap: usize) -> Layout {
        Layout::from_size_align(cap, BLOCK).expect("buffer capacity overflows isize")
    }

    /// Makes room for `additional` more bytes (capacity at least doubles).
    pub fn reserve(&mut self, additional: usize) {
        let need = self.len.checked_add(additional).expect("capacity overflow");
        if need <= self.cap {
            return;
        }
        let new_cap = round_up(need.max(self.cap.saturating_mul(2)).max(BLOCK));
        if let Some(file) = &self.file {
            return self.grow_file(file.as_raw_fd(), new_cap);
        }
        let new_layout = Self::layout(new_cap);
        let p = if self.cap == 0 {
            // SAFETY: `new_layout` has a non-zero size (at least BLOCK).
            unsafe { alloc::alloc(new_layout) }
        } else {
            // SAFETY: `ptr` was allocated by this allocator with
            // `layout(self.cap)`; `new_cap` is non-zero and, rounded to the
            // alignment, does not overflow isize (checked by `layout`).
            // `realloc` keeps the alignment of the old layout.
            unsafe { alloc::realloc(self.ptr.as_ptr(), Self::layout(self.cap), new_cap) }
        };
        self.ptr = NonNull::new(p).unwrap_or_else(|| alloc::handle_alloc_error(new_layout));
        self.cap = new_cap;
    }

    /// Grows a file-backed buffer to `new_cap` bytes: the file first, then
    /// the mapping (moved if it must; the file keeps the bytes).
    #[cold]
    fn grow_file(&mut self, fd: i32, new_cap: usize) {
        let fail = |what: &str| -> ! {
            // As the heap allocator does when it runs out: a buffer that
            // cannot grow cannot hold what its caller writes next.
            panic!(
                "a file-backed buffer could not grow to {new_cap} bytes ({what}: {})",
                io::Error::last_os_error()
            )
        };
        // SAFETY: `fd` is the buffer's own open file.
        if unsafe { libc::ftruncate(fd, new_cap as libc::off_t) } != 0 {
            fail("ftruncate");
        }
        let p = if self.cap == 0 {
            // SAFETY: a fresh shared mapping of `new_cap` bytes of the file,
            // which now has that length; the kernel picks the address.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    new_cap,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            }
        } else {
            // SAFETY: `ptr..ptr + cap` is this buffer's own mapping of the
            // file (made above, or by an earlier call); no reference into
            // it outlives this `&mut self` call.
            unsafe {
                libc::mremap(
                    self.ptr.as_ptr().cast(),
                    self.cap,
                    new_cap,
                    libc::MREMAP_MAYMOVE,
                )
            }
        };
        if p == libc::MAP_FAILED {
            fail("mmap");
        }
        self.ptr = NonNull::new(p.cast()).unwrap_or_else(|| fail("mmap"));
        self.cap = new_cap;
    }

    /// Appends `bytes`.
    #[inline]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.reserve(bytes.len());
        // SAFETY: `reserve` made `len + bytes.len() <= cap`; the source is a
        // live slice that cannot overlap our exclusively owned allocation.
        unsafe {
            self.ptr
                .as_ptr()
                .add(self.len)
                .copy_from_nonoverlapping(bytes.as_ptr(), bytes.len());
        }
        self.len += bytes.len();
    }

    /// Grows to `new_len` with zero bytes, or truncates to it.
    pub fn resize_zeroed(&mut self, new_len: usize) {
        if new_len > self.len {
            self.reserve(new_len - self.len);
            // SAFETY: `reserve` made `new_len <= cap`.
            unsafe {
                self.ptr
                    .as_ptr()
                    .add(self.len)
                    .write_bytes(0, new_len - self.len)
            };
        }
        self.len = new_len;
    }

    /// Zero-fills up to the next multiple of [`BLOCK`] (no-op when aligned).
    pub fn pad_to_block(&mut self) {
        self.resize_zeroed(round_up(self.len));
    }

    /// The written bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised bytes (dangling but
        // aligned and non-null when `len == 0`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The written bytes, mutably.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Default for AlignedBuf {
    fn default() -> Self {
        Self::new()
    }
}

/// Buffers at least this large are freed on the reaper thread
/// ([`super::reap`]): giving their pages back takes milliseconds.
const FREE_ELSEWHERE: usize = 4 << 20;

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.cap == 0 {
            return;
        }
        if self.file.is_some() {
            // SAFETY: the buffer's own mapping, made by `grow_file`, which
            // nothing refers to any more; the file closes after this.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.cap) };
            return;
        }
        let a = Allocation {
            ptr: self.ptr,
            cap: self.cap,
        };
        if a.cap >= FREE_ELSEWHERE {
            super::reap::later(a);
        } else {
            drop(a);
        }
    }
}

/// An [`AlignedBuf`]'s allocation, freed when this drops.
struct Allocation {
    ptr: NonNull<u8>,
    cap: usize,
}

// SAFETY: the allocation of a buffer that is gone: nothing else refers to
// it, and the global allocator frees memory on any thread.
unsafe impl Send for Allocation {}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: allocated with exactly this layout (see `reserve`), and
        // owned by this value alone.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), AlignedBuf::layout(self.cap)) }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish()
    }
}
