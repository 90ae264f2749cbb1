//! Fixtures shared by the `tandem` command tests.

use std::path::Path;
use tandem::standby::bq::{BqConfig, BufferQueue};

/// A new buffer queue of 16 slots, a 4 KiB arena and two readers.
pub fn small_queue(path: &Path) -> BufferQueue {
    BufferQueue::create(
        path,
        BqConfig {
            slots: 16,
            arena: 4096,
            readers: 2,
        },
    )
    .unwrap()
}
