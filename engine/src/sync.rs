//! Synchronisation primitives, switchable to [loom] for model checking.
//!
//! Every atomic and every `UnsafeCell` that is shared between threads by a
//! lock-free structure of this crate is imported from here rather than from
//! `std`, in the style of tokio's `loom` shim. A normal build re-exports the
//! `std` types; a build with `RUSTFLAGS="--cfg loom"` re-exports loom's
//! instrumented versions so that `loom::model` can explore every interleaving
//! (and detect data races on `UnsafeCell` contents) permitted by the C++11
//! memory model.
//!
//! `std::cell::UnsafeCell` has no `with`/`with_mut`; the std flavour of
//! [`UnsafeCell`] here is a zero-cost `#[repr(transparent)]` wrapper providing
//! loom's closure-based API, so code compiles unchanged under both.
//!
//! [loom]: https://docs.rs/loom

#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

#[cfg(loom)]
pub use loom::{
    cell::UnsafeCell,
    sync::{
        atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    thread,
};

#[cfg(not(loom))]
pub use std::{
    sync::{
        atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    thread,
};

#[cfg(not(loom))]
pub use self::std_cell::UnsafeCell;

#[cfg(not(loom))]
mod std_cell {
    /// `std::cell::UnsafeCell` with loom's `with`/`with_mut` access API.
    ///
    /// `#[repr(transparent)]`: it has the same layout as `T` (which is what
    /// lets the memory-mapped ring reinterpret raw slot memory as cells).
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        /// Wraps `value`.
        #[inline(always)]
        pub const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        /// Unwraps the value.
        #[inline(always)]
        pub fn into_inner(self) -> T {
            self.0.into_inner()
        }
    }

    impl<T: ?Sized> UnsafeCell<T> {
        /// Calls `f` with a shared raw pointer to the contents.
        ///
        /// Dereferencing the pointer is the caller's responsibility (and its
        /// `unsafe` block must justify that no `&mut` access is concurrent).
        #[inline(always)]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Calls `f` with a mutable raw pointer to the contents.
        ///
        /// Dereferencing the pointer is the caller's responsibility (and its
        /// `unsafe` block must justify that access is exclusive).
        #[inline(always)]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}
