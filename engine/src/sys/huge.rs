//! Memory for large tables in transparent huge pages.
//!
//! A keyed state's hash table holds every key of an operator instance: a
//! gigabyte for 20 M keys. In 4 KiB pages, the kernel maps it a page at a
//! time as it is first written (262,144 faults) and unmaps it a page at a
//! time when it is freed: 44 ms of the freeing thread's CPU on the 2-core
//! reference machine, measured for a 20.8 M-key table — most of what a
//! restart of a 500 MB keyed state waited for its failed attempt's worker
//! to stop (~100 ms, then ~25 ms with huge pages). Every lookup of a key
//! is a random access to it, a TLB miss a page away.
//!
//! [`HugePages`] is an allocator (`allocator_api2`, which hashbrown's
//! tables take) that maps an allocation of [`HUGE_FROM`] or more bytes on
//! its own and advises the kernel to back it with 2 MiB pages
//! (`MADV_HUGEPAGE`: used where transparent huge pages are enabled
//! `always` or `madvise`, ignored where they are `never`); a smaller one
//! comes from the global allocator, as it would otherwise. The size a
//! table is freed with is the size it was allocated with, so the two kinds
//! never mix.

use allocator_api2::alloc::{AllocError, Allocator, Global};
use std::alloc::Layout;
use std::ptr::NonNull;

/// Allocations of at least this many bytes get a mapping of their own.
pub const HUGE_FROM: usize = 4 << 20;

/// See the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct HugePages;

/// Whether an allocation of `layout` gets a mapping of its own (a page
/// aligns anything up to 4 KiB).
#[inline]
fn own_mapping(layout: Layout) -> bool {
    layout.size() >= HUGE_FROM && layout.align() <= 4096
}

// SAFETY: `allocate` returns either the global allocator's block for
// `layout` or a fresh private anonymous mapping of at least `layout.size()`
// bytes, page-aligned (so aligned for any `layout.align() <= 4096`), valid
// until `deallocate` is called for it with the same layout — which picks
// the same branch (`own_mapping` depends on the layout alone) and so gives
// each block back to where it came from. Copies of `HugePages` are
// interchangeable: it has no state.
unsafe impl Allocator for HugePages {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if !own_mapping(layout) {
            return Global.allocate(layout);
        }
        let len = layout.size();
        // SAFETY: an anonymous private mapping: no file, no fixed address;
        // the kernel checks every argument.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(AllocError);
        }
        // SAFETY: `p..p + len` is the mapping just made; advice changes no
        // contents. Refused advice (huge pages disabled) changes nothing.
        let _ = unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
        let p = NonNull::new(p.cast::<u8>()).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, len))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if !own_mapping(layout) {
            // SAFETY: the caller gives back a block this allocator made
            // for `layout`: below the threshold, the global allocator's.
            unsafe { Global.deallocate(ptr, layout) };
            return;
        }
        // SAFETY: a block of this size was mapped by `allocate` above at
        // `ptr` with this length, and the caller no longer uses it.
        let _ = unsafe { libc::munmap(ptr.as_ptr().cast(), layout.size()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_blocks_are_writable_and_given_back_where_they_came_from() {
        for size in [16, 4096, HUGE_FROM - 1, HUGE_FROM, 3 * HUGE_FROM + 5] {
            let layout = Layout::from_size_align(size, 8).unwrap();
            let p = HugePages.allocate(layout).unwrap();
            assert!(p.len() >= size);
            let bytes = p.cast::<u8>().as_ptr();
            // SAFETY: the block holds at least `size` bytes.
            unsafe {
                bytes.write(1);
                bytes.add(size - 1).write(2);
                assert_eq!(bytes.read() + bytes.add(size - 1).read(), 3);
                HugePages.deallocate(p.cast(), layout);
            }
        }
    }

    #[test]
    fn a_hashbrown_table_lives_in_it() {
        let mut m: hashbrown::HashMap<u64, u64, rustc_hash::FxBuildHasher, HugePages> =
            hashbrown::HashMap::with_capacity_and_hasher_in(1 << 20, Default::default(), HugePages);
        for k in 0..1u64 << 20 {
            m.insert(k, k * 3);
        }
        assert_eq!(m.get(&77), Some(&231));
        assert_eq!(m.len(), 1 << 20);
    }
}
