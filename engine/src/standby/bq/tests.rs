//! The buffer queue's unit tests (layout, protocol, eviction, damage).

use super::*;
use std::fs::OpenOptions;

fn tmp(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "tandem-bq-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}

fn small(tag: &str, slots: u64, arena: u64) -> (BufferQueue, PathBuf) {
    let p = tmp(tag);
    let q = BufferQueue::create(
        &p,
        BqConfig {
            slots,
            arena,
            readers: 2,
        },
    )
    .unwrap();
    (q, p)
}

#[test]
fn pushed_tuples_are_found_by_position_and_by_id() {
    let (q, p) = small("basic", 16, 4096);
    for i in 0..10u64 {
        assert_eq!(q.push(100 + 3 * i, format!("t{i}").as_bytes()), Ok(i));
    }
    let e = q.get(4).unwrap();
    assert_eq!((e.tuple_id, e.bytes), (112, &b"t4"[..]));
    assert_eq!(q.position_of(112), Some(4));
    assert_eq!(q.position_of(113), None);
    assert_eq!(q.get(10), None);
    assert_eq!(q.validate().unwrap(), 10);
    std::fs::remove_file(p).unwrap();
}

#[test]
fn nothing_is_evicted_until_covered_and_read_by_everyone_then_fifo() {
    let (q, p) = small("evict", 4, 4096);
    for i in 0..4u64 {
        q.push(i, b"x").unwrap();
    }
    assert_eq!(q.push(4, b"x"), Err(Full), "full, nothing evictable");
    q.advance(0, 2);
    q.advance(1, 3);
    assert_eq!(q.push(4, b"x"), Err(Full), "read but not covered");
    q.set_covered(1);
    assert_eq!(q.push(4, b"x"), Ok(4), "position 0 evicted");
    assert_eq!(q.head(), 1);
    assert_eq!(q.get(0), None);
    q.set_covered(10);
    assert_eq!(q.push(5, b"x"), Ok(5));
    assert_eq!(q.head(), 2, "reader 0 still needs position 2");
    assert_eq!(q.get(2).unwrap().tuple_id, 2);
    std::fs::remove_file(p).unwrap();
}

#[test]
fn arena_wraps_without_splitting_an_entry() {
    let (q, p) = small("wrap", 64, 4096);
    let big = vec![7u8; 1500];
    for i in 0..20u64 {
        let payload: Vec<u8> = big.iter().map(|b| b ^ i as u8).collect();
        let pos = loop {
            match q.push(i, &payload) {
                Ok(p) => break p,
                Err(Full) => {
                    let h = q.head();
                    q.advance(0, h + 1);
                    q.advance(1, h + 1);
                    q.set_covered(h + 1);
                }
            }
        };
        let e = q.get(pos).unwrap();
        assert_eq!(e.bytes, &payload[..]);
        q.validate().unwrap();
    }
    assert!(q.arena_used() <= 4096);
    std::fs::remove_file(p).unwrap();
}

#[test]
fn a_reopened_file_holds_the_same_entries_and_validates() {
    let (q, p) = small("reopen", 8, 4096);
    q.push(5, b"five").unwrap();
    q.push(9, b"nine").unwrap();
    drop(q);
    let q = BufferQueue::open(&p).unwrap();
    assert_eq!(q.get(1).unwrap().bytes, b"nine");
    assert_eq!(q.validate().unwrap(), 2);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    std::fs::remove_file(p).unwrap();
}

#[test]
fn a_read_only_open_reads_the_entries_and_never_changes_the_file() {
    let (q, p) = small("read-only", 8, 4096);
    q.push(5, b"five").unwrap();
    q.push(9, b"nine").unwrap();
    drop(q);
    let before = std::fs::read(&p).unwrap();
    let q = BufferQueue::open_read_only(&p).unwrap();
    assert_eq!(q.get(1).unwrap().bytes, b"nine");
    assert_eq!(q.validate().unwrap(), 2);
    // A write through the handle stays in this process's private copy.
    q.push(12, b"twelve").unwrap();
    assert_eq!(q.validate().unwrap(), 3);
    drop(q);
    assert!(std::fs::read(&p).unwrap() == before, "the file changed");
    std::fs::remove_file(p).unwrap();
}

#[test]
fn damaged_or_foreign_files_are_errors_not_panics() {
    let p = tmp("foreign");
    std::fs::write(&p, vec![0u8; 8192]).unwrap();
    assert!(matches!(
        BufferQueue::open(&p),
        Err(BqError::Invalid { .. })
    ));
    std::fs::write(&p, b"short").unwrap();
    assert!(BufferQueue::open(&p).is_err());
    std::fs::remove_file(&p).unwrap();
    let (q, p) = small("trunc", 8, 4096);
    drop(q);
    let f = OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(4096 * 2).unwrap();
    let e = BufferQueue::open(&p).unwrap_err().to_string();
    assert!(e.contains("implies"), "{e}");
    std::fs::remove_file(p).unwrap();
}

/// A header block with the given sizes (magic and version intact).
fn header_with(slots: u64, arena: u64, readers: u32) -> Vec<u8> {
    let mut h = vec![0u8; HEADER];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&readers.to_le_bytes());
    h[16..24].copy_from_slice(&slots.to_le_bytes());
    h[24..32].copy_from_slice(&arena.to_le_bytes());
    h
}

/// Found by the `bq_reader` fuzz target: sizes whose file length
/// overflows. Computed unchecked they panicked (overflow checks) or
/// wrapped to a small length — 4096 + 0 + 4096 for 2^59 slots — that a
/// short file matched, and `get` then read index slots past the map.
#[test]
fn a_header_whose_sizes_overflow_the_file_length_is_refused() {
    let cases = [
        // 2^59 slots × 32 bytes wraps to 0: "needs" 8192 bytes.
        (1u64 << 59, 4096u64, 8192u64),
        (1 << 63, 4096, 8192),
        // Index 2^63 + arena 2^63 + header wraps to 4096.
        (1 << 58, 1 << 63, 4096),
        (1 << 58, 1 << 63, 8192),
    ];
    for (slots, arena, len) in cases {
        let p = tmp("overflow");
        let mut bytes = header_with(slots, arena, 2);
        // Slot 0 names position 0 and tail is 1, so a reader that got
        // past `open` would look at the index.
        bytes[OFF_TAIL..OFF_TAIL + 8].copy_from_slice(&1u64.to_le_bytes());
        bytes.resize(len as usize, 0);
        std::fs::write(&p, &bytes).unwrap();
        let r = BufferQueue::open(&p);
        std::fs::remove_file(&p).unwrap();
        let Err(e) = r else {
            panic!("{slots} slots, {arena}-byte arena in {len} bytes: opened");
        };
        assert!(matches!(e, BqError::Invalid { .. }), "{e}");
        assert!(e.to_string().contains("2^64"), "{e}");
    }
    // The same sizes as a configuration are refused up front.
    let cfg = BqConfig {
        slots: 1 << 59,
        arena: 4096,
        readers: 2,
    };
    assert!(matches!(cfg.check(), Err(BqError::Config(_))));
}

/// Found by the `bq_reader` fuzz target: an index slot whose arena
/// offset plus length passes `u64::MAX` (the offset's low bits still
/// place the bytes inside the arena) made `validate` overflow.
#[test]
fn a_slot_whose_offset_and_length_overflow_is_invalid() {
    let (q, p) = small("off-overflow", 2, 4096);
    q.push(0, b"12345678").unwrap();
    drop(q);
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[HEADER + 16..HEADER + 24].copy_from_slice(&(u64::MAX - 7).to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let q = BufferQueue::open(&p).unwrap();
    let e = q.validate().unwrap_err().to_string();
    assert!(e.contains("out of arena order"), "{e}");
    // The reader side gives the entry's bytes or nothing, never a panic.
    let _ = q.get(0).map(|e| e.verify());
    assert_eq!(q.position_of(0), Some(0));
    drop(q);
    std::fs::remove_file(p).unwrap();
}

#[test]
fn eviction_rule_branches() {
    assert!(may_evict(3, 5, &[4, 9]));
    assert!(!may_evict(5, 5, &[9, 9]), "not covered");
    assert!(!may_evict(3, 9, &[3, 9]), "a reader still needs it");
    assert!(!may_evict(0, 9, &[0]), "a reader still needs it");
    assert_eq!(evictable_head(7, [5, 9].into_iter(), 20), 5);
    assert_eq!(evictable_head(7, [8, 9].into_iter(), 20), 7);
    assert_eq!(evictable_head(30, [40].into_iter(), 20), 20);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Against a model: pushes, reads and releases in any order never
    /// lose, reorder or corrupt a held entry, and `Full` comes only when
    /// nothing may be evicted.
    #[test]
    fn behaves_like_a_fifo_of_held_entries(
        ops in proptest::collection::vec((0u8..4, 0usize..700), 1..300)
    ) {
        let (q, p) = small("prop", 8, 4096);
        let mut model: std::collections::VecDeque<(u64, Vec<u8>)> = Default::default();
        let mut next = 0u64;
        let mut released = 0u64;
        for (op, n) in ops {
            match op {
                0 | 1 => {
                    let bytes: Vec<u8> = (0..n).map(|i| (i as u64 ^ next) as u8).collect();
                    match q.push(next * 2 + 1, &bytes) {
                        Ok(pos) => {
                            proptest::prop_assert_eq!(pos, next);
                            model.push_back((pos, bytes));
                            next += 1;
                        }
                        Err(Full) => {
                            // Only when the held entries really fill it.
                            let held = next - q.head();
                            proptest::prop_assert!(held > 0);
                            proptest::prop_assert_eq!(q.head(), released.min(next));
                        }
                    }
                }
                2 => {
                    released = (released + 1 + n as u64 % 3).min(next);
                    q.advance(0, released);
                    q.advance(1, released);
                    q.set_covered(released);
                }
                _ => {}
            }
            while model.front().is_some_and(|(pos, _)| *pos < q.head()) {
                model.pop_front();
            }
            for (pos, bytes) in &model {
                let e = q.get(*pos).unwrap();
                proptest::prop_assert_eq!(e.bytes, &bytes[..]);
                proptest::prop_assert_eq!(e.tuple_id, pos * 2 + 1);
            }
            q.validate().unwrap();
        }
        std::fs::remove_file(p).unwrap();
    }
}

/// `tandem bq inspect` died of `SIGBUS` on a file truncated while it read
/// it: the read-only handle mapped the file. It holds a copy now, so
/// truncating the file after the open changes nothing it reads.
#[test]
fn a_read_only_queue_reads_on_after_its_file_is_truncated() {
    let (q, p) = small("truncated-under-reader", 8, 4096);
    q.push(5, b"five").unwrap();
    q.push(9, b"nine").unwrap();
    drop(q);
    let q = BufferQueue::open_read_only(&p).unwrap();
    OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!((q.head(), q.tail()), (0, 2));
    assert_eq!(q.get(1).unwrap().bytes, b"nine");
    assert_eq!(q.validate().unwrap(), 2);
    std::fs::remove_file(p).unwrap();
}

#[test]
fn a_fifo_or_a_device_is_refused_not_waited_on() {
    let p = tmp("fifo");
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for path in [&*p, Path::new("/dev/zero")] {
        for e in [
            BufferQueue::open_read_only(path).unwrap_err(),
            BufferQueue::open(path).unwrap_err(),
        ] {
            assert!(matches!(e, BqError::Io { op: "open", .. }), "{e}");
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
    }
    std::fs::remove_file(p).unwrap();
}
