//! Snapshot files from arbitrary bytes: `SnapshotHeader::decode` on the
//! bytes themselves, then `SnapshotFile::open` on a file holding them and,
//! when it opens, the checked `access` of the archived types the engine
//! restores. Every damaged file must be an error, never a panic.
//!
//! The first byte picks how the file is made:
//!
//! - even: the remaining bytes are the file, as they are;
//! - odd: a well-formed snapshot is built from the remaining bytes (an
//!   archived value of one of the engine's types, or raw payload bytes,
//!   behind a header with a fuzzed name, instance and positions), then
//!   patched byte by byte, its checksums optionally recomputed after the
//!   patches (so that damage behind a valid checksum is reached: XXH3 is no
//!   MAC, anyone can forge one) and its length optionally changed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tandem::checkpoint::format::{checksum, Position, FIXED_HEADER, HEADER_BLOCK};
use tandem::checkpoint::{SnapshotBytes, SnapshotFile, SnapshotHeader};
use tandem::state::StateSnapshot;
use tandem::KeyedState;
use tandem_fuzz::{patch, scratch, write_file, Input};

fuzz_target!(|data: &[u8]| {
    let path = scratch("snapshot.snap");
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let image = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        build(&mut Input::new(rest))
    };
    // The header decoder on the bytes themselves (whole and truncated).
    let _ = SnapshotHeader::decode(&image, &path);
    if image.len() >= HEADER_BLOCK {
        let _ = SnapshotHeader::decode(&image[..HEADER_BLOCK], &path);
    }
    // Its payload as `restore_state` gets it (4096-aligned, as in a map).
    if image.len() > HEADER_BLOCK {
        read_payload(SnapshotBytes::from_payload(&image[HEADER_BLOCK..]).payload());
    }
    write_file(&path, &image);
    if let Ok(file) = SnapshotFile::open(&path) {
        read_file(&file, &path);
    }
});

/// A snapshot file image built (and damaged) from fuzz choices.
fn build(input: &mut Input<'_>) -> Vec<u8> {
    let kind = input.u8();
    let payload = payload(kind, input);
    let operator: String = String::from_utf8_lossy(input.bytes(64)).into_owned();
    let positions = (0..input.u8() % 8)
        .map(|_| Position {
            partition: input.u32(),
            next_seq: input.interesting_u64(),
        })
        .collect();
    let header = SnapshotHeader {
        checkpoint_id: input.interesting_u64(),
        operator,
        instance: input.u32(),
        positions,
        created_at_ms: input.u64(),
        payload_len: payload.len() as u64,
        payload_checksum: checksum(&payload),
        // Version 1 images (still read); version 2 adds the block table.
        index_len: 0,
        version: 1,
    };
    let mut image = vec![0u8; HEADER_BLOCK];
    header
        .encode(&mut image)
        .expect("a header of this size fits");
    image.extend_from_slice(&payload);
    image.resize(image.len().next_multiple_of(HEADER_BLOCK), 0);

    let flags = input.u8();
    if flags & 1 != 0 {
        // A new length: cut short, or grown by up to 3 blocks.
        let n = input.u16() as usize;
        let len = if flags & 2 != 0 {
            n % (image.len() + 1)
        } else {
            image.len() + n % (3 * HEADER_BLOCK + 1)
        };
        image.resize(len, 0);
    }
    patch(&mut image, input, 16);
    if flags & 4 != 0 {
        fix_payload_checksum(&mut image);
    }
    if flags & 8 != 0 {
        fix_header_checksum(&mut image);
    }
    image
}

/// A payload: an archive of one of the types the engine restores, or raw
/// bytes.
fn payload(kind: u8, input: &mut Input<'_>) -> Vec<u8> {
    let bytes = match kind % 5 {
        0 => {
            let v: Vec<(u32, u8)> = (0..input.u8() % 32)
                .map(|_| (input.u32(), input.u8()))
                .collect();
            tandem::checkpoint::serialize(&v, 64 + 8 * v.len())
        }
        1 => {
            let v: Vec<(String, u32)> = (0..input.u8() % 8)
                .map(|_| {
                    let s = String::from_utf8_lossy(input.bytes(24)).into_owned();
                    (s, input.u32())
                })
                .collect();
            tandem::checkpoint::serialize(&v, 256)
        }
        2 => {
            let mut s: KeyedState<u64, (u64, u64)> = KeyedState::default();
            for _ in 0..input.u8() % 16 {
                let k = input.u64();
                let v = (input.u64(), input.u64());
                *s.get_or_default(&k) = v;
            }
            s.to_snapshot_bytes()
        }
        3 => {
            let mut s: KeyedState<String, u64> = KeyedState::default();
            for _ in 0..input.u8() % 8 {
                let k = String::from_utf8_lossy(input.bytes(24)).into_owned();
                let v = input.u64();
                *s.get_or_default(&k) = v;
            }
            s.to_snapshot_bytes()
        }
        _ => return input.bytes(255).to_vec(),
    };
    bytes
        .expect("archiving a fresh value succeeds")
        .payload()
        .to_vec()
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Rewrites the payload checksum (offset 32) for the payload length the
/// header holds (offset 24), where that many bytes exist.
fn fix_payload_checksum(image: &mut [u8]) {
    let Some(len) = u64_at(image, 24) else { return };
    let Some(end) = (len as usize).checked_add(HEADER_BLOCK) else {
        return;
    };
    if let Some(payload) = image.get(HEADER_BLOCK..end) {
        let sum = checksum(payload);
        image[32..40].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Rewrites the header checksum (offset 16) for the header length the
/// header holds (offset 12), where it is a possible one.
fn fix_header_checksum(image: &mut [u8]) {
    let Some(len) = u32_at(image, 12) else { return };
    let len = len as usize;
    if !(FIXED_HEADER..=HEADER_BLOCK).contains(&len) || image.len() < len {
        return;
    }
    image[16..24].fill(0);
    let sum = checksum(&image[..len]);
    image[16..24].copy_from_slice(&sum.to_le_bytes());
}

/// Everything a restore reads from an opened file.
fn read_file(file: &SnapshotFile, path: &Path) {
    assert_eq!(file.path(), path);
    let h = file.header();
    let payload = file.payload();
    assert_eq!(payload.len() as u64, h.payload_len);
    assert_eq!(checksum(payload), h.payload_checksum);
    let _ = format!("{file:?}");
    if let Ok(v) = file.access::<Vec<(u32, u8)>>() {
        let _: u64 = v.iter().map(|r| r.0.to_native() as u64 + r.1 as u64).sum();
    }
    if let Ok(v) = file.access::<Vec<(String, u32)>>() {
        let _: usize = v.iter().map(|r| r.0.len() + r.1.to_native() as usize).sum();
    }
    if let Ok(s) = file.access::<KeyedState<u64, (u64, u64)>>() {
        let _ = s.iter().count();
        let _ = KeyedState::<u64, (u64, u64)>::from_archived(s);
    }
    if let Ok(s) = file.access::<KeyedState<String, u64>>() {
        let _: usize = s.iter().map(|(k, _)| k.len()).sum();
        let _ = KeyedState::<String, u64>::from_archived(s);
    }
    read_payload(payload);
}

/// The payload as `restore_state` implementations read it: the engine's
/// `checkpoint::access` (the paper's `Leveler` reads `Vec<(u32, u8)>`, a
/// job's metadata `Vec<(String, u32)>`) and keyed state's restore.
fn read_payload(payload: &[u8]) {
    if let Ok(rules) = tandem::checkpoint::access::<Vec<(u32, u8)>>(payload) {
        let _: Vec<(u32, u8)> = rules.iter().map(|r| (r.0.to_native(), r.1)).collect();
    }
    if let Ok(list) = tandem::checkpoint::access::<Vec<(String, u32)>>(payload) {
        let _: Vec<(String, u32)> = list
            .iter()
            .map(|r| (r.0.to_string(), r.1.to_native()))
            .collect();
    }
    if let Ok(s) = <KeyedState<u64, (u64, u64)> as StateSnapshot>::restore(payload) {
        let _ = s.len();
    }
    if let Ok(s) = <KeyedState<String, u64> as StateSnapshot>::restore(payload) {
        let _ = s.len();
    }
}
