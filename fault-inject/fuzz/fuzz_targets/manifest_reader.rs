//! Checkpoint manifests from arbitrary bytes: `Manifest::load` on a file
//! holding them and, when it loads, `Manifest::verify`, which opens every
//! snapshot file it names relative to its directory (the scratch
//! directory, which holds one real snapshot, `chk-7/op-0.snap`, so that
//! the agreement checks between manifest and file are reached).
//!
//! An input starting with a NUL byte (never valid JSON) builds a manifest
//! from the bytes after it — files naming the real snapshot, missing ones,
//! directories, other paths, with fuzzed or real ids, lengths, checksums
//! and positions — and serialises it, optionally damaging the JSON text;
//! any other input is the manifest file itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use tandem::checkpoint::format::{checksum, Position, FORMAT_VERSION, HEADER_BLOCK};
use tandem::checkpoint::{FileEntry, Manifest, SnapshotHeader, SnapshotKind};
use tandem_fuzz::{patch, scratch, scratch_dir, write_file, Input};

const ID: u64 = 7;
const FILE: &str = "chk-7/op-0.snap";

/// The real snapshot in the scratch directory, written once.
struct Real {
    operator: String,
    instance: u32,
    positions: Vec<Position>,
    file_len: u64,
    payload_len: u64,
    payload_checksum: u64,
}

fn real() -> &'static Real {
    static REAL: OnceLock<Real> = OnceLock::new();
    REAL.get_or_init(|| {
        let rules: Vec<(u32, u8)> = vec![(0, 1), (10, 2), (50, 3)];
        let bytes = tandem::checkpoint::serialize(&rules, 64).expect("archive");
        let payload = bytes.payload();
        let header = SnapshotHeader {
            checkpoint_id: ID,
            operator: "op".into(),
            instance: 0,
            positions: vec![Position {
                partition: 0,
                next_seq: 10,
            }],
            created_at_ms: 1_700_000_000_000,
            payload_len: payload.len() as u64,
            payload_checksum: checksum(payload),
            index_len: 0,
            version: 1,
        };
        let mut image = vec![0u8; HEADER_BLOCK];
        header.encode(&mut image).expect("encode");
        image.extend_from_slice(payload);
        image.resize(header.file_len() as usize, 0);
        std::fs::create_dir_all(scratch_dir().join("chk-7")).expect("mkdir");
        write_file(&scratch_dir().join(FILE), &image);
        Real {
            file_len: header.file_len(),
            operator: header.operator,
            instance: header.instance,
            positions: header.positions,
            payload_len: header.payload_len,
            payload_checksum: header.payload_checksum,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let real = real();
    let path: PathBuf = scratch("manifest.json");
    match data.split_first() {
        Some((0, rest)) => write_file(&path, &built(real, &mut Input::new(rest))),
        _ => write_file(&path, data),
    }
    if let Ok(m) = Manifest::load(&path) {
        assert_eq!(m.dir, scratch_dir());
        for e in &m.files {
            let _ = m.file_path(e);
        }
        if m.verify().is_ok() {
            // Not before: an unverified manifest's payload lengths can sum
            // past u64::MAX (see the fuzzing notes).
            let _ = m.payload_bytes();
        }
    }
});

/// A manifest's JSON text from fuzz choices.
fn built(real: &Real, input: &mut Input<'_>) -> Vec<u8> {
    let pick = |input: &mut Input<'_>| input.u8() & 1 == 0;
    let files = (0..input.u8() % 4)
        .map(|_| {
            let path = match input.u8() % 8 {
                0..=2 => FILE.to_string(),
                3 => "chk-7/missing.snap".into(),
                4 => "chk-7".into(),
                5 => String::new(),
                6 => "chk-7/../chk-7/op-0.snap".into(),
                _ => String::from_utf8_lossy(input.bytes(32)).into_owned(),
            };
            FileEntry {
                path,
                operator: if pick(input) {
                    real.operator.clone()
                } else {
                    String::from_utf8_lossy(input.bytes(16)).into_owned()
                },
                instance: if pick(input) {
                    real.instance
                } else {
                    input.u32()
                },
                positions: if pick(input) {
                    real.positions.clone()
                } else {
                    (0..input.u8() % 4)
                        .map(|_| Position {
                            partition: input.u32(),
                            next_seq: input.interesting_u64(),
                        })
                        .collect()
                },
                file_len: if pick(input) {
                    real.file_len
                } else {
                    input.interesting_u64()
                },
                payload_len: if pick(input) {
                    real.payload_len
                } else {
                    input.interesting_u64()
                },
                payload_checksum: if pick(input) {
                    real.payload_checksum
                } else {
                    input.u64()
                },
                index_len: 0,
                delta: false,
                chain: Vec::new(),
            }
        })
        .collect();
    let m = Manifest {
        format_version: if pick(input) {
            FORMAT_VERSION
        } else {
            input.u32()
        },
        kind: if pick(input) {
            SnapshotKind::Checkpoint
        } else {
            SnapshotKind::Savepoint
        },
        id: if pick(input) {
            ID
        } else {
            input.interesting_u64()
        },
        created_at_ms: input.u64(),
        files,
        dir: PathBuf::new(),
    };
    let mut json = serde_json::to_vec(&m).expect("a manifest serialises");
    if pick(input) {
        patch(&mut json, input, 4);
    }
    json
}
