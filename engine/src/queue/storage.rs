//! Backing storage of the SPSC ring: the shared [`Header`] and the slot array.
//!
//! A ring is two handles ([`Producer`](super::spsc::Producer) and
//! [`Consumer`](super::spsc::Consumer)), each owning one value of a
//! [`Storage`] type; both values refer to the same header and slots.
//!
//! * [`Heap`]: an `Arc`-owned allocation, for any `T: Send`. The last handle
//!   to go drops every item still in the ring, exactly once.
//! * [`Mapped`] (not under `cfg(loom)`): a `memmap2` mapping, anonymous or
//!   backed by a file that other processes can map too, for [`Pod`] items.
//!   See [`Mapped`] for the on-disk layout.

use core::{
    fmt,
    marker::PhantomData,
    mem::MaybeUninit,
    ptr::{self, NonNull},
};
use std::alloc::{self, Layout};

use crossbeam_utils::CachePadded;

use crate::sync::{Arc, AtomicU32, AtomicUsize, Ordering, UnsafeCell};

/// One slot of the ring: possibly-uninitialised `T`, shared between threads.
///
/// Has the same size, alignment and ABI as `T` (outside `cfg(loom)`).
pub type Slot<T> = UnsafeCell<MaybeUninit<T>>;

/// State of one side: never attached (only possible for a mapped ring that
/// has been created but not yet opened from the other side).
const UNCLAIMED: u32 = 0;
/// State of one side: a handle for this side is alive.
const ATTACHED: u32 = 1;
/// State of one side: its handle was dropped. Final.
const ABANDONED: u32 = 2;

/// One end of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The writing end.
    Producer,
    /// The reading end.
    Consumer,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Producer => "producer",
            Side::Consumer => "consumer",
        })
    }
}

/// The attach/abandon flags of both sides (written once or twice per ring
/// lifetime, so they share a line).
#[repr(C)]
struct Sides {
    producer: AtomicU32,
    consumer: AtomicU32,
}

/// The shared, mutable part of a ring: the two indices and the side states.
///
/// `#[repr(C)]`, each field on its own cache line (`CachePadded`, 128 bytes
/// on x86-64 and aarch64) so the producer's stores to `tail` never invalidate
/// the line holding `head` and vice versa:
///
/// | field   | written by       | read by                                     |
/// |---------|------------------|---------------------------------------------|
/// | `head`  | consumer (Release) | producer, only when its cached copy says full (Acquire) |
/// | `tail`  | producer (Release) | consumer, only when its cached copy says empty (Acquire) |
/// | `sides` | each side on attach/drop | the other side's `is_abandoned` |
///
/// Both indices are free-running `usize` counters (they wrap at
/// `usize::MAX`, which is harmless because the capacity is a power of two);
/// slot `i` lives at `i & (capacity - 1)`. `tail - head` is the number of
/// published items and never exceeds the capacity. All bit patterns
/// (in particular all-zero) are a valid header.
#[repr(C)]
pub struct Header {
    /// Next slot the consumer will read. Owned by the consumer.
    pub(crate) head: CachePadded<AtomicUsize>,
    /// Next slot the producer will publish. Owned by the producer.
    pub(crate) tail: CachePadded<AtomicUsize>,
    sides: CachePadded<Sides>,
}

impl Header {
    /// A header with both indices at `start` and both sides attached.
    pub(crate) fn attached(start: usize) -> Self {
        Self {
            head: CachePadded::new(AtomicUsize::new(start)),
            tail: CachePadded::new(AtomicUsize::new(start)),
            sides: CachePadded::new(Sides {
                producer: AtomicU32::new(ATTACHED),
                consumer: AtomicU32::new(ATTACHED),
            }),
        }
    }

    #[inline]
    fn side(&self, side: Side) -> &AtomicU32 {
        match side {
            Side::Producer => &self.sides.producer,
            Side::Consumer => &self.sides.consumer,
        }
    }

    /// Marks `side` attached if it never was; false if it is (or was) taken.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn claim(&self, side: Side) -> bool {
        self.side(side)
            .compare_exchange(UNCLAIMED, ATTACHED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Marks `side` abandoned. Release: everything the side did before
    /// (in particular the producer's final `tail` store) is visible to
    /// whoever observes the flag with [`Header::is_abandoned`].
    pub(crate) fn abandon(&self, side: Side) {
        self.side(side).store(ABANDONED, Ordering::Release);
    }

    /// Whether `side`'s handle has been dropped (Acquire).
    #[inline]
    pub(crate) fn is_abandoned(&self, side: Side) -> bool {
        self.side(side).load(Ordering::Acquire) == ABANDONED
    }
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Header")
            .field("head", &self.head.load(Ordering::Relaxed))
            .field("tail", &self.tail.load(Ordering::Relaxed))
            .field("producer", &self.sides.producer.load(Ordering::Relaxed))
            .field("consumer", &self.sides.consumer.load(Ordering::Relaxed))
            .finish()
    }
}

/// Rounds a requested capacity up to a power of two (at least 2), or `None`
/// if it exceeds `isize::MAX / 2`.
pub(crate) fn round_capacity(requested: usize) -> Option<usize> {
    if requested > isize::MAX as usize / 2 {
        None
    } else {
        Some(requested.max(2).next_power_of_two())
    }
}

mod private {
    pub trait Sealed {}
}

/// Where a ring keeps its [`Header`] and slots. Sealed: implemented by
/// [`Heap`] and [`Mapped`] only.
///
/// # Safety
///
/// An implementation must guarantee, for every value and as long as it lives:
///
/// * [`header`](Storage::header) and [`slots`](Storage::slots) always return
///   the same addresses, and the two storage values of one ring (the
///   producer's and the consumer's) refer to the same header and the same
///   slot memory (possibly through two mappings of the same file);
/// * `slots()` points to [`capacity()`](Storage::capacity) contiguous,
///   properly aligned `Slot<T>`s, valid for reads and writes;
/// * `capacity()` is a constant power of two, at least 2;
/// * the header and slots stay valid until both storage values are dropped,
///   and slots `[head, tail)` are not accessed by anything but the ring
///   handles.
pub unsafe trait Storage<T>: private::Sealed {
    /// The shared header.
    fn header(&self) -> &Header;
    /// The first of `capacity()` slots.
    fn slots(&self) -> NonNull<Slot<T>>;
    /// Number of slots; a power of two, at least 2.
    fn capacity(&self) -> usize;
}

// ---------------------------------------------------------------------------
// Heap
// ---------------------------------------------------------------------------

/// Heap storage: the header and the slot array, shared through an `Arc`.
///
/// The slot array is aligned to the cache-line padding of the header (128
/// bytes on x86-64), so a slot whose size is a multiple of the cache line
/// never straddles two lines, and the first slot shares no line with other
/// heap data.
///
/// When both handles are gone, the items still in the ring are dropped,
/// each exactly once.
pub struct Heap<T> {
    inner: Arc<HeapInner<T>>,
}

struct HeapInner<T> {
    header: Header,
    /// `capacity` initialised (empty) slots, allocated with `slots_layout`.
    slots: NonNull<Slot<T>>,
    capacity: usize,
    /// The items in `[head, tail)` are owned (and dropped) by this value.
    _owns: PhantomData<T>,
}

/// Alignment of the heap slot array: `CachePadded`'s.
const SLOTS_ALIGN: usize = core::mem::align_of::<CachePadded<u8>>();

/// Layout of `capacity` slots, cache-line aligned.
///
/// # Panics
///
/// If the array exceeds `isize::MAX` bytes (like `Vec`'s "capacity overflow").
fn slots_layout<T>(capacity: usize) -> Layout {
    Layout::array::<Slot<T>>(capacity)
        .and_then(|layout| layout.align_to(SLOTS_ALIGN))
        .expect("SPSC ring capacity overflow")
}

impl<T> Heap<T> {
    /// Two storage values (producer's, consumer's) sharing one ring of
    /// `capacity` slots (already rounded), indices starting at `start`.
    pub(crate) fn pair(capacity: usize, start: usize) -> (Self, Self) {
        debug_assert!(capacity.is_power_of_two() && capacity >= 2);
        let layout = slots_layout::<T>(capacity);
        let slots = if layout.size() == 0 {
            // Zero-sized slots: no allocation, any aligned pointer will do.
            NonNull::<Slot<T>>::dangling()
        } else {
            // SAFETY: `layout` has a non-zero size.
            let ptr = unsafe { alloc::alloc(layout) }.cast::<Slot<T>>();
            NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout))
        };
        for i in 0..capacity {
            // SAFETY: `i < capacity`, within the allocation; each slot is
            // written once before any use. (A no-op outside `cfg(loom)`.)
            unsafe { slots.add(i).write(UnsafeCell::new(MaybeUninit::uninit())) };
        }
        let inner = Arc::new(HeapInner {
            header: Header::attached(start),
            slots,
            capacity,
            _owns: PhantomData,
        });
        (
            Heap {
                inner: inner.clone(),
            },
            Heap { inner },
        )
    }
}

impl<T> Drop for HeapInner<T> {
    fn drop(&mut self) {
        // The last `Arc` is going away, so both handles are gone; the Arc's
        // refcount protocol orders their final index stores before this.
        let mask = self.capacity - 1;
        let mut head = self.header.head.load(Ordering::Acquire);
        let tail = self.header.tail.load(Ordering::Acquire);
        if core::mem::needs_drop::<T>() {
            while head != tail {
                // SAFETY: slots in [head, tail) hold items that were published
                // and not popped, so they are initialised; `&mut self` gives
                // exclusive access, and advancing `head` drops each exactly once.
                unsafe {
                    self.slots
                        .add(head & mask)
                        .as_ref()
                        .with_mut(|slot| (*slot).assume_init_drop());
                }
                head = head.wrapping_add(1);
            }
        }
        let layout = slots_layout::<T>(self.capacity);
        // SAFETY: the `capacity` slots were initialised in `pair` and are not
        // used again (their contents were dropped above, `MaybeUninit`
        // itself has no drop glue); then the allocation made there with the
        // same layout is freed.
        unsafe {
            ptr::drop_in_place(ptr::slice_from_raw_parts_mut(
                self.slots.as_ptr(),
                self.capacity,
            ));
            if layout.size() != 0 {
                alloc::dealloc(self.slots.as_ptr().cast(), layout);
            }
        }
    }
}

// SAFETY: a `Heap<T>` is only ever held by the single producer and the single
// consumer of its ring, which hand items over through the header's
// release/acquire protocol; what crosses threads is `T` (requires `T: Send`),
// and the remaining items are dropped on whichever thread drops last.
unsafe impl<T: Send> Send for Heap<T> {}

impl<T> private::Sealed for Heap<T> {}

// SAFETY: header and slots are owned by the `Arc` allocation, shared by the
// two values made by `Heap::pair` and freed only after both are dropped; the
// slot array never moves and holds `capacity` slots, a power of two >= 2
// (`pair` asserts it, callers round with `round_capacity`).
unsafe impl<T> Storage<T> for Heap<T> {
    #[inline(always)]
    fn header(&self) -> &Header {
        &self.inner.header
    }

    #[inline(always)]
    fn slots(&self) -> NonNull<Slot<T>> {
        self.inner.slots
    }

    #[inline(always)]
    fn capacity(&self) -> usize {
        self.inner.capacity
    }
}

impl<T> fmt::Debug for Heap<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Heap")
            .field("capacity", &self.inner.capacity)
            .field("header", &self.inner.header)
            .finish()
    }
}

// ---------------------------------------------------------------------------
// Pod and Mapped
// ---------------------------------------------------------------------------

/// Plain old data: values that can live in memory shared with another
/// process and be copied in and out bytewise.
///
/// # Safety
///
/// Implement only for types that
///
/// * are `#[repr(C)]` or primitive, with no padding bytes, no drop glue and
///   an alignment of at most 4096;
/// * are valid for every bit pattern of their size (all-zero included): a
///   mapped ring's slots start zeroed and are written by another process;
/// * contain no pointers, references, or other process-local values
///   (file descriptors, thread ids, ...).
pub unsafe trait Pod: Copy + Send + Sync + 'static {}

macro_rules! impl_pod {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: a primitive number: no padding, no pointers, every bit
            // pattern is a valid value.
            unsafe impl Pod for $t {}
        )*
    };
}

impl_pod!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

// SAFETY: an array of `Pod` has no padding between elements, no pointers, and
// every bit pattern is valid because it is valid for each element.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

#[cfg(not(loom))]
pub use self::mapped::{MapError, Mapped};

#[cfg(not(loom))]
mod mapped {
    use core::{marker::PhantomData, mem, ptr::NonNull};
    use std::{fs, io, path::Path, sync::atomic::AtomicU64};

    use memmap2::{MmapMut, MmapRaw};

    use super::{private, round_capacity, Header, Pod, Side, Slot, Storage};
    use crate::sync::{Arc, Ordering};

    /// `b"TNDMSPSC"` as a native-endian `u64`.
    pub(super) const MAGIC: u64 = u64::from_ne_bytes(*b"TNDMSPSC");
    /// Format version; bumped on any layout change.
    pub(super) const VERSION: u32 = 1;
    /// Largest element alignment a mapping (page-aligned) can honour.
    const MAX_ALIGN: usize = 4096;

    /// Immutable description of a mapped ring, at offset 0.
    #[repr(C)]
    struct Meta {
        /// [`MAGIC`], stored last (Release) when the ring is created.
        magic: AtomicU64,
        version: u32,
        /// `size_of::<usize>()`: width of `head` and `tail`.
        index_bytes: u32,
        capacity: u64,
        elem_size: u64,
        elem_align: u64,
        /// Byte offset of slot 0 from the start of the mapping.
        slots_offset: u64,
    }

    /// Everything before the slots.
    #[repr(C)]
    struct Prefix {
        meta: Meta,
        header: Header,
    }

    /// Errors creating or opening a mapped ring. Opening validates the
    /// header and reports a mismatch here; it never panics.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum MapError {
        /// Creating, sizing or mapping the file failed.
        #[error("ring file I/O failed")]
        Io(#[from] io::Error),
        /// The file does not start with the ring magic (not a ring, or its
        /// creator has not finished initialising it).
        #[error("not a tandem SPSC ring (magic {found:#018x})")]
        BadMagic {
            /// The first eight bytes, as a native-endian `u64`.
            found: u64,
        },
        /// The ring was written by an incompatible version of this crate.
        #[error("unsupported ring format version {found} (expected {expected})")]
        UnsupportedVersion {
            /// Version in the file.
            found: u32,
            /// Version this build reads.
            expected: u32,
        },
        /// The element type does not match the ring's.
        #[error(
            "element layout mismatch: ring holds {found_size}-byte elements aligned to \
             {found_align}, this handle expects {expected_size}/{expected_align}"
        )]
        ElementLayout {
            /// Element size recorded in the file.
            found_size: u64,
            /// Element alignment recorded in the file.
            found_align: u64,
            /// `size_of::<T>()`.
            expected_size: u64,
            /// `align_of::<T>()`.
            expected_align: u64,
        },
        /// The ring was created by a build with another index width or
        /// header layout (e.g. another architecture).
        #[error("ring layout mismatch: {what} is {found}, expected {expected}")]
        Layout {
            /// Which field.
            what: &'static str,
            /// Value in the file.
            found: u64,
            /// Value this build uses.
            expected: u64,
        },
        /// The capacity is not a power of two of at least 2, or is too large.
        #[error("invalid ring capacity {found}")]
        BadCapacity {
            /// Capacity requested or recorded.
            found: u64,
        },
        /// The file is shorter than its header says the ring is.
        #[error("ring file is {len} bytes, the ring needs {needed}")]
        TooSmall {
            /// File length.
            len: u64,
            /// Bytes needed.
            needed: u64,
        },
        /// A handle for this side already exists (or existed) for the ring.
        #[error("the {0} side of the ring is already attached or was abandoned")]
        SideTaken(Side),
    }

    /// Memory-mapped storage for [`Pod`] items, shareable between processes.
    ///
    /// # Layout
    ///
    /// All fields native-endian, the mapping page-aligned:
    ///
    /// | offset | size | field |
    /// |--------|------|-------|
    /// | 0      | 8    | magic `b"TNDMSPSC"` (stored last, with Release, at creation) |
    /// | 8      | 4    | format version (1) |
    /// | 12     | 4    | `size_of::<usize>()` |
    /// | 16     | 8    | capacity (power of two, >= 2) |
    /// | 24     | 8    | `size_of::<T>()` |
    /// | 32     | 8    | `align_of::<T>()` |
    /// | 40     | 8    | `slots_offset` |
    /// | `P`    |      | [`Header`]: `head`, `tail`, side flags (`u32` each: 0 unclaimed, 1 attached, 2 abandoned), each on its own `P`-byte line |
    /// | `slots_offset` | capacity × `size_of::<T>()` | slots |
    ///
    /// `P` is the cache-line padding of `crossbeam_utils::CachePadded` (128 on
    /// x86-64 and aarch64); `slots_offset` is `4 P` rounded up to
    /// `align_of::<T>()`. Opening checks every field against the element type
    /// and this build, and the file length against the layout.
    ///
    /// Each side can be attached once: opening a side that is attached or was
    /// abandoned fails with [`MapError::SideTaken`]. A process that dies
    /// without dropping its handle leaves its side attached; its peer will not
    /// see it abandoned.
    ///
    /// # Trust
    ///
    /// Every process mapping the file is assumed to be a ring handle of the
    /// same element type. A corrupt or tampered header cannot make this
    /// process access memory outside the mapping (the layout is validated
    /// once at open, indices are masked, counts clamped to the capacity),
    /// but it can corrupt the items; truncating the file while it is mapped
    /// raises `SIGBUS`, as for any shared mapping.
    pub struct Mapped<T> {
        header: NonNull<Header>,
        slots: NonNull<Slot<T>>,
        capacity: usize,
        /// Keeps the mapping alive; shared by both ends of an anonymous ring.
        /// `MmapRaw` never creates references to the mapped bytes, which
        /// other threads and processes mutate.
        map: Arc<MmapRaw>,
        _marker: PhantomData<T>,
    }

    /// `(slots_offset, total_len)` for a ring of `capacity` `T`s.
    fn layout<T>(capacity: usize) -> Option<(usize, usize)> {
        let align = mem::align_of::<T>();
        let offset = mem::size_of::<Prefix>().checked_next_multiple_of(align)?;
        let total = capacity
            .checked_mul(mem::size_of::<T>())?
            .checked_add(offset)?;
        (total <= isize::MAX as usize).then_some((offset, total))
    }

    fn check_elem<T>() -> Result<(), MapError> {
        if mem::align_of::<T>() > MAX_ALIGN {
            return Err(MapError::ElementLayout {
                found_size: mem::size_of::<T>() as u64,
                found_align: mem::align_of::<T>() as u64,
                expected_size: mem::size_of::<T>() as u64,
                expected_align: MAX_ALIGN as u64,
            });
        }
        Ok(())
    }

    impl<T: Pod> Mapped<T> {
        /// A fresh anonymous mapping, returned as the (producer, consumer)
        /// storage pair; both sides attached.
        pub(crate) fn anonymous(capacity: usize) -> Result<(Self, Self), MapError> {
            check_elem::<T>()?;
            let capacity = round_capacity(capacity).ok_or(MapError::BadCapacity {
                found: capacity as u64,
            })?;
            let (_, total) = layout::<T>(capacity).ok_or(MapError::BadCapacity {
                found: capacity as u64,
            })?;
            let map = MmapRaw::from(MmapMut::map_anon(total)?);
            // SAFETY: the mapping is fresh, private to this call, zeroed and
            // `total` bytes long.
            unsafe { init::<T>(&map, capacity) };
            let map = Arc::new(map);
            let producer = Self::attach(map.clone(), Side::Producer)?;
            let consumer = Self::attach(map, Side::Consumer)?;
            Ok((producer, consumer))
        }

        /// Creates a new ring file at `path` (mode 0600, failing if it
        /// exists) and attaches `side`.
        pub(crate) fn create(path: &Path, capacity: usize, side: Side) -> Result<Self, MapError> {
            check_elem::<T>()?;
            let capacity = round_capacity(capacity).ok_or(MapError::BadCapacity {
                found: capacity as u64,
            })?;
            let (_, total) = layout::<T>(capacity).ok_or(MapError::BadCapacity {
                found: capacity as u64,
            })?;
            let mut options = fs::OpenOptions::new();
            options.read(true).write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let file = options.open(path)?;
            let result = (|| {
                file.set_len(total as u64)?;
                // Every block allocated now: a full filesystem is this
                // error, not a SIGBUS at the first write through the map.
                crate::sys::fs::reserve(&file, total as u64)?;
                let map = MmapRaw::map_raw(&file)?;
                // SAFETY: we created the file (`create_new`), it is zeroed
                // (`set_len` of an empty file) and `total` bytes long; nobody
                // reads beyond the magic before we publish it.
                unsafe { init::<T>(&map, capacity) };
                Self::attach(Arc::new(map), side)
            })();
            if result.is_err() {
                let _ = fs::remove_file(path);
            }
            result
        }

        /// Maps the existing ring file at `path`, validates its header and
        /// attaches `side`.
        pub(crate) fn open(path: &Path, side: Side) -> Result<Self, MapError> {
            check_elem::<T>()?;
            let file = fs::OpenOptions::new().read(true).write(true).open(path)?;
            let len = file.metadata()?.len();
            let prefix = mem::size_of::<Prefix>() as u64;
            if len < prefix {
                return Err(MapError::TooSmall {
                    len,
                    needed: prefix,
                });
            }
            let map = MmapRaw::map_raw(&file)?;
            Self::attach(Arc::new(map), side)
        }

        /// Validates the header of `map` and claims `side`.
        fn attach(map: Arc<MmapRaw>, side: Side) -> Result<Self, MapError> {
            let len = map.len() as u64;
            if len < mem::size_of::<Prefix>() as u64 {
                return Err(MapError::TooSmall {
                    len,
                    needed: mem::size_of::<Prefix>() as u64,
                });
            }
            let base = map.as_mut_ptr();
            let prefix = base.cast::<Prefix>();
            // SAFETY: the mapping is page-aligned and at least
            // `size_of::<Prefix>()` bytes; `magic` is atomic (any bit pattern
            // is valid), so it may be read while another process writes.
            let magic =
                unsafe { (*core::ptr::addr_of!((*prefix).meta.magic)).load(Ordering::Acquire) };
            if magic != MAGIC {
                return Err(MapError::BadMagic { found: magic });
            }
            // SAFETY: as above, in bounds and aligned; these fields are written
            // only before the magic is published, and we acquired the magic,
            // so no write to them is concurrent with this read.
            let (version, index_bytes, capacity, elem_size, elem_align, slots_offset) = unsafe {
                let m = core::ptr::addr_of!((*prefix).meta);
                (
                    core::ptr::addr_of!((*m).version).read(),
                    core::ptr::addr_of!((*m).index_bytes).read(),
                    core::ptr::addr_of!((*m).capacity).read(),
                    core::ptr::addr_of!((*m).elem_size).read(),
                    core::ptr::addr_of!((*m).elem_align).read(),
                    core::ptr::addr_of!((*m).slots_offset).read(),
                )
            };
            if version != VERSION {
                return Err(MapError::UnsupportedVersion {
                    found: version,
                    expected: VERSION,
                });
            }
            if index_bytes as usize != mem::size_of::<usize>() {
                return Err(MapError::Layout {
                    what: "index width",
                    found: index_bytes.into(),
                    expected: mem::size_of::<usize>() as u64,
                });
            }
            if elem_size != mem::size_of::<T>() as u64 || elem_align != mem::align_of::<T>() as u64
            {
                return Err(MapError::ElementLayout {
                    found_size: elem_size,
                    found_align: elem_align,
                    expected_size: mem::size_of::<T>() as u64,
                    expected_align: mem::align_of::<T>() as u64,
                });
            }
            let capacity = usize::try_from(capacity)
                .ok()
                .filter(|&c| c >= 2 && c.is_power_of_two() && round_capacity(c) == Some(c))
                .ok_or(MapError::BadCapacity { found: capacity })?;
            let (offset, total) = layout::<T>(capacity).ok_or(MapError::BadCapacity {
                found: capacity as u64,
            })?;
            if slots_offset != offset as u64 {
                return Err(MapError::Layout {
                    what: "slots offset",
                    found: slots_offset,
                    expected: offset as u64,
                });
            }
            if len < total as u64 {
                return Err(MapError::TooSmall {
                    len,
                    needed: total as u64,
                });
            }
            // SAFETY: in bounds (checked above), aligned (page-aligned base,
            // `Prefix` field); the header consists of atomics only, valid for
            // any bit pattern and meant to be shared.
            let header = unsafe { NonNull::from(&(*prefix).header) };
            // SAFETY: `offset + capacity * size_of::<T>() <= len`, and `offset`
            // is a multiple of `align_of::<T>()` (`Slot<T>` has `T`'s layout).
            let slots = unsafe { NonNull::new_unchecked(base.add(offset).cast::<Slot<T>>()) };
            // SAFETY: `header` was just derived from the live mapping.
            if !unsafe { header.as_ref() }.claim(side) {
                return Err(MapError::SideTaken(side));
            }
            Ok(Mapped {
                header,
                slots,
                capacity,
                map,
                _marker: PhantomData,
            })
        }
    }

    /// Writes the metadata of a fresh ring into `map`, magic last.
    ///
    /// # Safety
    ///
    /// `map` must be zero-filled, at least `layout::<T>(capacity).1` bytes,
    /// and not yet used by any ring handle.
    unsafe fn init<T: Pod>(map: &MmapRaw, capacity: usize) {
        let (offset, total) = layout::<T>(capacity).expect("layout checked by caller");
        debug_assert!(map.len() >= total);
        let prefix = map.as_mut_ptr().cast::<Prefix>();
        // SAFETY: in bounds and aligned (see the caller's contract); nobody
        // else reads these fields before the magic is published below.
        unsafe {
            let m = core::ptr::addr_of_mut!((*prefix).meta);
            core::ptr::addr_of_mut!((*m).version).write(VERSION);
            core::ptr::addr_of_mut!((*m).index_bytes).write(mem::size_of::<usize>() as u32);
            core::ptr::addr_of_mut!((*m).capacity).write(capacity as u64);
            core::ptr::addr_of_mut!((*m).elem_size).write(mem::size_of::<T>() as u64);
            core::ptr::addr_of_mut!((*m).elem_align).write(mem::align_of::<T>() as u64);
            core::ptr::addr_of_mut!((*m).slots_offset).write(offset as u64);
            // The zeroed header already reads as head = tail = 0, both sides
            // unclaimed.
            (*core::ptr::addr_of!((*m).magic)).store(MAGIC, Ordering::Release);
        }
    }

    // SAFETY: the mapping is owned through the `Arc` (`MmapRaw: Send + Sync`);
    // the raw pointers point into it and are used only by the one handle that
    // owns this value; items are `Pod` (`Send`).
    unsafe impl<T: Pod> Send for Mapped<T> {}

    impl<T> private::Sealed for Mapped<T> {}

    // SAFETY: `header`/`slots` point into the mapping kept alive by `map`
    // and were validated by `attach` (bounds, alignment, power-of-two
    // capacity); both ends map the same memory (one anonymous mapping, or
    // two shared mappings of one file, as `MmapRaw::map_raw` is `MAP_SHARED`).
    unsafe impl<T: Pod> Storage<T> for Mapped<T> {
        #[inline(always)]
        fn header(&self) -> &Header {
            // SAFETY: valid for as long as `self.map` lives (see above).
            unsafe { self.header.as_ref() }
        }

        #[inline(always)]
        fn slots(&self) -> NonNull<Slot<T>> {
            self.slots
        }

        #[inline(always)]
        fn capacity(&self) -> usize {
            self.capacity
        }
    }

    impl<T> core::fmt::Debug for Mapped<T> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("Mapped")
                .field("capacity", &self.capacity)
                .field("len", &self.map.len())
                .finish_non_exhaustive()
        }
    }
}
