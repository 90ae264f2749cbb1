//! The standby's buffer-queue file from arbitrary bytes: `BufferQueue::open`
//! on a file holding them, then the reader side (`validate`, `head`,
//! `tail`, `get` over the held positions, `Entry::verify`, `position_of`).
//! The queue maps its file, so a read the header's sizes send past the map
//! is undefined behaviour: build with AddressSanitizer (cargo fuzz's
//! default), and `open` must refuse sizes that do not match the file.
//!
//! The first byte picks how the file is made:
//!
//! - 0: the remaining bytes are the file, as they are;
//! - 1: the remaining bytes start the file, which is then extended (sparse,
//!   zeros) to the length its header implies, when that is at most 64 MiB
//!   (else to whole blocks), so that fuzzed headers reach the index and the
//!   arena;
//! - 2: a real queue is written from fuzz choices (`BufferQueue::create`,
//!   pushes, reader progress, eviction, so the ring wraps), then damaged:
//!   fields of its layout (sizes, head, tail, cursors, index slots' ids,
//!   offsets, lengths) set to boundary values or nudged, and bytes patched.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;
use std::path::Path;
use tandem::standby::bq::{BqConfig, BufferQueue};
use tandem_fuzz::{patch, scratch, write_file, Input};

/// Header block, index slot size (see engine/src/standby/bq.rs).
const HEADER: u64 = 4096;
const SLOT: u64 = 32;
/// Largest file the padded mode makes.
const MAX_PADDED: u64 = 64 << 20;
/// Positions read one by one per input.
const MAX_GETS: u64 = 256;

fuzz_target!(|data: &[u8]| {
    let path = scratch("queue.bq");
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut input = Input::new(rest);
    match mode % 3 {
        0 => write_file(&path, rest),
        1 => padded(&path, rest),
        _ => built(&path, &mut input),
    }
    let probe_id = input.interesting_u64();
    if let Ok(q) = BufferQueue::open(&path) {
        read(&q, probe_id);
    }
});

/// The bytes, then zeros up to the length the header implies.
fn padded(path: &Path, bytes: &[u8]) {
    write_file(path, bytes);
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let (Some(slots), Some(arena)) = (u64_at(16), u64_at(24)) else {
        return;
    };
    let len = slots
        .checked_mul(SLOT)
        .and_then(|i| i.checked_next_multiple_of(4096))
        .and_then(|i| i.checked_add(HEADER))
        .and_then(|i| i.checked_add(arena));
    // Sizes that imply no possible length (or a huge one) still get a
    // file of whole blocks, at least the header's, for `open` to check.
    let len = len
        .filter(|&l| l <= MAX_PADDED && l >= bytes.len() as u64)
        .unwrap_or_else(|| (bytes.len() as u64).next_multiple_of(4096).max(HEADER));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("reopen the fuzz file");
    f.set_len(len).expect("extend the fuzz file");
}

/// A queue written by the real writer, then damaged.
fn built(path: &Path, input: &mut Input<'_>) {
    let _ = std::fs::remove_file(path);
    let cfg = BqConfig {
        slots: 2 << (input.u8() % 6),
        arena: 4096 << (input.u8() % 3),
        readers: 1 + (input.u8() % 8) as u32,
    };
    {
        let q = BufferQueue::create(path, cfg).expect("create a queue");
        let max = cfg.arena / 4;
        let mut id = input.u16() as u64;
        for _ in 0..input.u8() % 64 {
            match input.u8() % 4 {
                0 | 1 => {
                    let len = (input.u16() as u64 % (max + 1)) as usize;
                    let fill = input.u8();
                    let bytes: Vec<u8> = (0..len).map(|i| fill ^ i as u8).collect();
                    if q.push(id, &bytes).is_ok() {
                        id += 1 + input.u8() as u64;
                    }
                }
                2 => {
                    // Every reader and the snapshot move past some entries.
                    let to = q.head() + 1 + (input.u8() % 8) as u64;
                    let to = to.min(q.tail());
                    for r in 0..cfg.readers as usize {
                        q.advance(r, to);
                    }
                    q.set_covered(to);
                    q.evict();
                }
                _ => {
                    let r = input.u8() as usize % cfg.readers as usize;
                    q.release(r);
                }
            }
        }
    }
    let mut image = std::fs::read(path).expect("read the queue back");
    patch_fields(&mut image, cfg, input);
    patch(&mut image, input, 16);
    write_file(path, &image);
}

/// Overwrites fields of the layout (header sizes and counters, cursors,
/// index slots) with boundary values or small changes of what they hold.
fn patch_fields(image: &mut [u8], cfg: BqConfig, input: &mut Input<'_>) {
    const HEADER_FIELDS: [(usize, usize); 8] = [
        (8, 4),   // version
        (12, 4),  // readers
        (16, 8),  // slots
        (24, 8),  // arena
        (64, 8),  // tail
        (128, 8), // head
        (192, 8), // covered
        (256, 8), // arena_tail
    ];
    const SLOT_FIELDS: [(usize, usize); 5] = [(0, 8), (8, 8), (16, 8), (24, 4), (28, 4)];
    for _ in 0..input.u8() % 8 {
        let sel = input.u8();
        let (at, width) = match sel % 4 {
            0 => HEADER_FIELDS[input.u8() as usize % HEADER_FIELDS.len()],
            1 => (
                320 + 64 * (input.u8() as usize % 8) + 8 * (sel as usize >> 7),
                8,
            ),
            _ => {
                let slot = HEADER + SLOT * (input.u8() as u64 % cfg.slots);
                let (o, w) = SLOT_FIELDS[input.u8() as usize % SLOT_FIELDS.len()];
                (slot as usize + o, w)
            }
        };
        let Some(field) = image.get_mut(at..at + width) else {
            continue;
        };
        let mut old = [0u8; 8];
        old[..width].copy_from_slice(field);
        let old = u64::from_le_bytes(old);
        let new = if sel & 0x40 != 0 {
            old.wrapping_add(input.u8() as i8 as u64)
        } else {
            input.interesting_u64()
        };
        field.copy_from_slice(&new.to_le_bytes()[..width]);
    }
}

/// Everything a reader (primary, standby, takeover) reads from a queue.
fn read(q: &BufferQueue, probe_id: u64) {
    let cfg = q.config();
    assert!(cfg.slots.is_power_of_two() && cfg.arena.is_power_of_two());
    let (head, tail) = (q.head(), q.tail());
    let _ = q.covered();
    for r in 0..cfg.readers as usize {
        let _ = q.reader_cursor(r);
    }
    let valid = q.validate();
    let mut ids = BTreeSet::new();
    if head <= tail {
        for p in head..tail.min(head.saturating_add(MAX_GETS)) {
            if let Some(e) = q.get(p) {
                assert_eq!(e.position, p);
                assert!(e.bytes.len() as u64 <= cfg.arena);
                let ok = e.verify().is_ok();
                if valid.is_ok() {
                    assert!(ok, "validate() passed, but entry {p} does not verify");
                }
                ids.insert(e.tuple_id);
            } else if valid.is_ok() {
                panic!("validate() passed, but held position {p} has no entry");
            }
        }
    }
    for p in [head.wrapping_sub(1), tail, tail.wrapping_add(1), u64::MAX] {
        if let Some(e) = q.get(p) {
            let _ = e.verify();
        }
    }
    ids.insert(probe_id);
    ids.insert(probe_id.wrapping_add(1));
    for id in ids {
        if let Some(p) = q.position_of(id) {
            assert_eq!(q.get(p).map(|e| e.tuple_id), Some(id));
        }
    }
    if valid.is_ok() {
        let _ = q.arena_used();
    }
}
