//! Which cores the process may run on, and pinning the current thread to one.

/// The cores this process may run on, in ascending order.
///
/// Falls back to `0..available_parallelism` when the affinity mask cannot be
/// read (in which case pinning is best effort).
pub fn available_cores() -> Vec<usize> {
    match core_affinity::get_core_ids() {
        Some(ids) if !ids.is_empty() => {
            let mut v: Vec<usize> = ids.into_iter().map(|c| c.id).collect();
            v.sort_unstable();
            v
        }
        _ => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// Pins the calling thread to `core`. Returns whether the OS accepted it.
pub fn pin_current_thread(core: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: core })
}
