//! The snapshot store's durability properties: round trips, crash before
//! publish, corruption fallback, retention, savepoints, atomic manifests.

use std::{
    fs::{self, OpenOptions},
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
};

use proptest::prelude::*;
use tandem::{
    checkpoint::{
        CheckpointError, Manifest, OperatorSnapshot, Position, SnapshotBytes, SnapshotStore,
    },
    state::{ArchivedKeyedState, KeyedState},
};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "tandem-ckpt-{}-{name}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn state(n: u64, salt: u64) -> KeyedState<u64, (u64, u64)> {
    let mut s = KeyedState::default();
    for k in 0..n {
        *s.get_or_default(&k) = (k ^ salt, salt);
    }
    s
}

fn snap(op: &str, instance: u32, s: &KeyedState<u64, (u64, u64)>) -> OperatorSnapshot {
    OperatorSnapshot {
        operator: op.into(),
        instance,
        positions: vec![Position {
            partition: instance,
            next_seq: s.len() as u64,
        }],
        bytes: s.to_snapshot_bytes().unwrap(),
    }
}

/// Checkpoint `id` with two operator instances whose state carries `id`.
fn checkpoint(store: &SnapshotStore, id: u64) {
    let snaps = vec![
        snap("count", 0, &state(50, id)),
        snap("count", 1, &state(70, id)),
    ];
    store.submit(id, snaps).wait().unwrap();
}

fn salt_of(store: &SnapshotStore, m: &Manifest) -> u64 {
    let f = store.restore(m, &m.files[0]).unwrap();
    let a = f.access::<KeyedState<u64, (u64, u64)>>().unwrap();
    let back = KeyedState::from_archived(a).unwrap();
    let salt = back.get(&0).unwrap().1;
    salt
}

fn flip(path: &Path, offset: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ 0x01], offset).unwrap();
}

fn round_trip<K, S>(entries: Vec<(K, S)>, dir: &Path)
where
    K: std::hash::Hash + Eq + Clone + std::fmt::Debug + rkyv::Archive,
    S: Default + Clone + PartialEq + std::fmt::Debug + rkyv::Archive,
    KeyedState<K, S>: rkyv::Archive<Archived = ArchivedKeyedState<K, S>>
        + for<'a> rkyv::Serialize<tandem::checkpoint::format::SnapshotSerializer<'a>>,
    ArchivedKeyedState<K, S>: rkyv::Portable
        + for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rkyv::rancor::Error>>
        + rkyv::Deserialize<KeyedState<K, S>, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>,
{
    let mut s = KeyedState::<K, S>::default();
    for (k, v) in entries {
        *s.get_or_default(&k) = v;
    }
    let store = SnapshotStore::open(dir, 3).unwrap();
    let bytes = s.to_snapshot_bytes().unwrap();
    let p = store
        .submit(
            1,
            vec![OperatorSnapshot {
                operator: "op".into(),
                instance: 0,
                positions: vec![],
                bytes,
            }],
        )
        .wait()
        .unwrap();
    let m = &p.manifest;
    let file = store.restore(m, &m.files[0]).unwrap();
    let back =
        KeyedState::<K, S>::from_archived(file.access::<KeyedState<K, S>>().unwrap()).unwrap();
    assert_eq!(back.len(), s.len());
    let mut s = s;
    s.for_each_mut(|k, v| {
        assert_eq!(back.get(k).as_deref(), Some(&*v), "key {k:?}");
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn numeric_keyed_state_round_trips_through_disk(
        entries in prop::collection::vec((any::<u64>(), any::<(u64, u64)>()), 0..300)
    ) {
        let dir = TempDir::new("prop-num");
        round_trip(entries, &dir.0);
    }

    #[test]
    fn string_keyed_state_round_trips_through_disk(
        entries in prop::collection::vec((".{0,24}", any::<u64>()), 0..200)
    ) {
        let dir = TempDir::new("prop-str");
        round_trip(entries, &dir.0);
    }
}

#[test]
fn a_crash_before_publish_leaves_the_previous_checkpoint_in_use() {
    let dir = TempDir::new("crash");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    checkpoint(&store, 1);
    checkpoint(&store, 2);
    // The crash: checkpoint 3's files are on disk but its manifest was never
    // renamed into place.
    checkpoint(&store, 3);
    fs::rename(
        dir.0.join("manifest-3.json"),
        dir.0.join("manifest-3.json.tmp"),
    )
    .unwrap();
    let latest = store.latest_valid().unwrap();
    let m = latest.checkpoint.unwrap();
    assert_eq!(m.id, 2);
    assert!(latest.skipped.is_empty(), "{:?}", latest.skipped);
    assert_eq!(salt_of(&store, &m), 2);
}

#[test]
fn a_manifest_tmp_is_never_read_as_a_manifest() {
    let dir = TempDir::new("tmp");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    checkpoint(&store, 1);
    // A torn manifest write (crash mid-write of checkpoint 2's manifest).
    fs::write(
        dir.0.join("manifest-2.json.tmp"),
        b"{\"format_version\": 1, \"ki",
    )
    .unwrap();
    let listed: Vec<u64> = store.list().unwrap().iter().map(|l| l.id).collect();
    assert_eq!(listed, vec![1]);
    let latest = store.latest_valid().unwrap();
    assert_eq!(latest.checkpoint.unwrap().id, 1);
    assert!(latest.skipped.is_empty());
    // Publishing never leaves a `.tmp` behind.
    checkpoint(&store, 3);
    assert!(!dir.0.join("manifest-3.json.tmp").exists());
}

/// Corrupts checkpoint 2 with `damage` and checks that 1 is used instead
/// and the damage is reported as the expected error.
fn corruption_falls_back(name: &str, damage: impl Fn(&Path), expect: fn(&CheckpointError) -> bool) {
    let dir = TempDir::new(name);
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    checkpoint(&store, 1);
    checkpoint(&store, 2);
    damage(&dir.0.join("chk-2/count-1.snap"));
    let latest = store.latest_valid().unwrap();
    let m = latest.checkpoint.expect("checkpoint 1 is intact");
    assert_eq!(m.id, 1);
    assert_eq!(salt_of(&store, &m), 1);
    assert_eq!(latest.skipped.len(), 1);
    assert_eq!(latest.skipped[0].id, 2);
    let e = &latest.skipped[0].error;
    assert!(expect(e), "unexpected error: {e}");
    assert!(e.to_string().contains("count-1.snap"), "{e}");
}

#[test]
fn a_flipped_payload_byte_is_caught_by_the_checksum() {
    corruption_falls_back(
        "flip-payload",
        |p| flip(p, 4096 + 100),
        // The block table names the 64 KiB block the byte is in.
        |e| matches!(e, CheckpointError::BlockChecksum { block: 0, .. }),
    );
}

#[test]
fn a_flipped_header_byte_is_caught_by_the_header_checksum() {
    corruption_falls_back(
        "flip-header",
        |p| flip(p, 66), // inside the operator name
        |e| matches!(e, CheckpointError::HeaderChecksum { .. }),
    );
}

#[test]
fn a_truncated_file_is_caught_by_its_length() {
    corruption_falls_back(
        "truncate",
        |p| {
            let f = OpenOptions::new().write(true).open(p).unwrap();
            f.set_len(4096).unwrap();
        },
        |e| matches!(e, CheckpointError::Length { .. }),
    );
}

#[test]
fn a_missing_file_is_reported_not_panicked() {
    corruption_falls_back(
        "missing",
        |p| fs::remove_file(p).unwrap(),
        |e| matches!(e, CheckpointError::Io { .. }),
    );
}

#[test]
fn a_garbled_manifest_is_skipped_with_its_parse_error() {
    let dir = TempDir::new("bad-manifest");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    checkpoint(&store, 1);
    checkpoint(&store, 2);
    fs::write(dir.0.join("manifest-2.json"), b"not json").unwrap();
    let latest = store.latest_valid().unwrap();
    assert_eq!(latest.checkpoint.unwrap().id, 1);
    assert!(matches!(
        latest.skipped[0].error,
        CheckpointError::Manifest { .. }
    ));
}

#[test]
fn retention_keeps_exactly_n_checkpoints_and_every_savepoint() {
    let dir = TempDir::new("retain");
    let store = SnapshotStore::open(&dir.0, 2).unwrap();
    checkpoint(&store, 1);
    let sp = store
        .save_savepoint(100, vec![snap("count", 0, &state(10, 100))])
        .wait()
        .unwrap();
    for id in 2..=5 {
        checkpoint(&store, id);
    }
    let mut names: Vec<String> = fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "chk-4",
            "chk-5",
            "manifest-4.json",
            "manifest-5.json",
            "sp-100"
        ]
    );
    // The savepoint is self-contained and still verifies.
    let m = tandem::checkpoint::open_savepoint(dir.0.join("sp-100")).unwrap();
    assert_eq!(m, sp.manifest);
    assert_eq!(salt_of(&store, &m), 100);
}

#[test]
fn an_unpublished_leftover_is_removed_by_the_next_retention_pass() {
    let dir = TempDir::new("leftover");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    checkpoint(&store, 1);
    checkpoint(&store, 2);
    fs::remove_file(dir.0.join("manifest-2.json")).unwrap(); // crashed before publish
    checkpoint(&store, 3);
    assert!(!dir.0.join("chk-2").exists());
    assert!(dir.0.join("chk-1").exists());
}

#[test]
fn a_published_id_is_never_overwritten() {
    let dir = TempDir::new("dup");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    checkpoint(&store, 1);
    let err = store
        .submit(1, vec![snap("count", 0, &state(3, 9))])
        .wait()
        .unwrap_err();
    assert!(matches!(
        err,
        CheckpointError::AlreadyPublished { id: 1, .. }
    ));
    assert_eq!(
        salt_of(&store, &store.latest_valid().unwrap().checkpoint.unwrap()),
        1
    );
}

#[test]
fn submit_returns_before_the_bytes_are_durable() {
    let dir = TempDir::new("async");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    let mut pending = store.submit(1, vec![snap("count", 0, &state(1000, 1))]);
    // Polling never blocks; eventually the outcome arrives exactly once.
    let published = loop {
        if let Some(r) = pending.try_wait() {
            break r.unwrap();
        }
        std::thread::yield_now();
    };
    assert_eq!(published.manifest.id, 1);
    assert!(published.publish_time >= published.write_time);
}

#[test]
fn bad_operator_names_and_duplicates_are_refused() {
    let dir = TempDir::new("names");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    let err = store
        .submit(1, vec![snap("../x", 0, &state(1, 1))])
        .wait()
        .unwrap_err();
    assert!(matches!(err, CheckpointError::InvalidName { .. }), "{err}");
    let err = store
        .submit(
            1,
            vec![snap("a", 0, &state(1, 1)), snap("a", 0, &state(1, 1))],
        )
        .wait()
        .unwrap_err();
    assert!(matches!(err, CheckpointError::Duplicate { .. }), "{err}");
}

#[test]
fn the_pwrite_fallback_writes_the_same_files() {
    let dir = TempDir::new("pwrite");
    let store =
        SnapshotStore::open_with(&dir.0, 3, tandem::sys::uring::FileWriter::pwrite_only()).unwrap();
    let p = store
        .submit(1, vec![snap("count", 0, &state(100, 1))])
        .wait()
        .unwrap();
    assert_eq!(p.backend, tandem::sys::uring::Backend::Pwrite);
    assert_eq!(salt_of(&store, &p.manifest), 1);
}

#[test]
fn arbitrary_payloads_round_trip_byte_for_byte() {
    let dir = TempDir::new("raw");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    for (id, len) in [
        (1u64, 0usize),
        (2, 1),
        (3, 4095),
        (4, 4096),
        (5, 3 << 20 | 17),
    ] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 256) as u8).collect();
        let p = store
            .submit(
                id,
                vec![OperatorSnapshot {
                    operator: "raw".into(),
                    instance: 0,
                    positions: vec![],
                    bytes: SnapshotBytes::from_payload(&payload),
                }],
            )
            .wait()
            .unwrap();
        let f = store.restore(&p.manifest, &p.manifest.files[0]).unwrap();
        assert_eq!(f.payload(), &payload[..], "len {len}");
        assert_eq!(f.payload().as_ptr() as usize % 4096, 0);
    }
}

#[test]
fn a_payload_of_the_wrong_shape_fails_checked_access_with_an_error() {
    let dir = TempDir::new("shape");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    // Intact bytes (the checksum holds) that are not a string-keyed state:
    // a length claiming far more entries than the payload holds.
    let garbage: Vec<u8> = (0..64u32)
        .flat_map(|i| (i * 0x0101_0101).to_le_bytes())
        .collect();
    let p = store
        .submit(
            1,
            vec![OperatorSnapshot {
                operator: "op".into(),
                instance: 0,
                positions: vec![],
                bytes: SnapshotBytes::from_payload(&garbage),
            }],
        )
        .wait()
        .unwrap();
    let f = store.restore(&p.manifest, &p.manifest.files[0]).unwrap();
    let Err(err) = f.access::<KeyedState<String, u64>>() else {
        panic!("garbage passed validation");
    };
    assert!(matches!(err, CheckpointError::Validate { .. }), "{err}");
}

#[test]
fn a_manifest_naming_a_file_outside_its_directory_or_not_a_regular_file_is_refused() {
    let dir = TempDir::new("paths");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    checkpoint(&store, 1);
    let path = dir.0.join("manifest-1.json");
    let good = Manifest::load(&path).unwrap();
    good.verify().unwrap();
    let outside = dir.0.join("outside.snap");
    fs::copy(good.file_path(&good.files[0]), &outside).unwrap();
    for bad in [
        "../outside.snap".to_string(),
        outside.display().to_string(),
        "chk-1".to_string(),
        String::new(),
    ] {
        let mut m = good.clone();
        m.files[0].path = bad.clone();
        let e = m.verify().unwrap_err();
        assert!(
            matches!(
                e,
                CheckpointError::ManifestMismatch { .. } | CheckpointError::Io { .. }
            ),
            "{bad}: {e}"
        );
    }
    // A summed size past u64 is no panic.
    let mut m = good.clone();
    m.files[0].payload_len = u64::MAX;
    m.files.push(m.files[0].clone());
    assert_eq!(m.payload_bytes(), u64::MAX);
}

/// Incremental checkpoints through the store: each delta's manifest entry
/// names its chain, the chain restores the state of its checkpoint,
/// retention keeps the sets a kept chain reads (and only those), and a
/// link that is gone or damaged makes the checkpoint fail to verify with
/// an error naming the link.
#[test]
fn a_chain_of_incremental_checkpoints_restores_and_retention_keeps_what_it_reads() {
    use tandem::state::delta::{CaptureFor, Incremental};
    use tandem::state::StateSnapshot;
    let dir = TempDir::new("chain");
    let store = SnapshotStore::open(&dir.0, 2).unwrap();
    let mut s: KeyedState<u64, (u64, u64)> = state(2_000, 1);
    let policy = Incremental {
        max_deltas: 3,
        max_delta_ratio: 10.0,
    };
    let mut completed = None;
    for id in 1..=9u64 {
        for k in (id * 7..id * 7 + 40).map(|k| k % 2_500) {
            *s.get_or_default(&k) = (k, id);
        }
        let how = CaptureFor {
            checkpoint: id,
            base: completed,
            policy,
        };
        let bytes = s.capture_for(how).unwrap().archive().unwrap();
        let snapshot = OperatorSnapshot {
            operator: "count".into(),
            instance: 0,
            positions: vec![Position {
                partition: 0,
                next_seq: id,
            }],
            bytes,
        };
        store.submit(id, vec![snapshot]).wait().unwrap();
        completed = Some(id);
        let m = store.latest_valid().unwrap().checkpoint.unwrap();
        assert_eq!(m.id, id);
        let f = &m.files[0];
        // Whole at 1, 5, 9; deltas chained on them between.
        assert_eq!(f.delta, (id - 1) % 4 != 0, "checkpoint {id}");
        assert_eq!(f.chain.len() as u64, (id - 1) % 4, "checkpoint {id}");
        let links = m.open_chain(f).unwrap();
        let newest = m.open(f).unwrap();
        let mut payloads: Vec<&[u8]> = links.iter().map(|l| l.payload()).collect();
        payloads.push(newest.payload());
        let back = KeyedState::<u64, (u64, u64)>::restore_chain(&payloads, None).unwrap();
        let mut want = Vec::new();
        s.for_each_mut(|k, v| want.push((*k, *v)));
        let mut got = Vec::new();
        let mut back = back;
        back.for_each_mut(|k, v| got.push((*k, *v)));
        assert_eq!(got, want, "checkpoint {id} restores its state");
        // Retention: the 2 newest, and the sets their chains read.
        let mut expect: std::collections::BTreeSet<u64> = [id, id.saturating_sub(1)]
            .into_iter()
            .filter(|&i| i > 0)
            .collect();
        for l in store.list().unwrap() {
            expect.extend(l.load().unwrap().links());
        }
        let sets: std::collections::BTreeSet<u64> = fs::read_dir(&dir.0)
            .unwrap()
            .filter_map(|e| {
                e.unwrap()
                    .file_name()
                    .to_str()?
                    .strip_prefix("chk-")?
                    .parse()
                    .ok()
            })
            .collect();
        assert_eq!(sets, expect, "after checkpoint {id}");
    }
    // 8 is a delta over 7, 6 and the whole 5: damage 6's file.
    let m = store.latest_valid().unwrap().checkpoint.unwrap();
    assert_eq!(m.id, 9);
    let eight = Manifest::load(&dir.0.join("manifest-8.json")).unwrap();
    assert_eq!(eight.files[0].chain.len(), 3);
    flip(&dir.0.join("chk-6/count-0.snap"), 4096 + 10);
    let err = eight.verify().unwrap_err().to_string();
    assert!(
        err.contains("chain is broken at checkpoint 6"),
        "the error names the link: {err}"
    );
    // 9 is whole: still the newest valid one.
    assert_eq!(store.latest_valid().unwrap().checkpoint.unwrap().id, 9);
    // Gone altogether: named too.
    fs::remove_dir_all(dir.0.join("chk-5")).unwrap();
    let err = eight.verify().unwrap_err().to_string();
    assert!(err.contains("chain is broken at checkpoint 5"), "{err}");
}

/// A savepoint must stand alone, and a delta needs its base: both are
/// refused, naming why, and nothing is published.
#[test]
fn a_delta_in_a_savepoint_or_over_a_missing_base_is_refused() {
    let dir = TempDir::new("chain-refused");
    let store = SnapshotStore::open(&dir.0, 3).unwrap();
    let s = state(10, 1);
    let mut bytes = s.to_snapshot_bytes().unwrap();
    bytes.set_delta_over(Some(1));
    let snapshot = |bytes| OperatorSnapshot {
        operator: "count".into(),
        instance: 0,
        positions: Vec::new(),
        bytes,
    };
    let err = store.submit(2, vec![snapshot(bytes)]).wait().unwrap_err();
    assert!(
        matches!(err, CheckpointError::BrokenChain { link: 1, .. }),
        "{err}"
    );
    store.submit(3, vec![snap("other", 0, &s)]).wait().unwrap();
    let mut bytes = s.to_snapshot_bytes().unwrap();
    bytes.set_delta_over(Some(3));
    let err = store.submit(4, vec![snapshot(bytes)]).wait().unwrap_err();
    assert!(
        err.to_string()
            .contains("no snapshot of this operator instance"),
        "{err}"
    );
    let mut bytes = s.to_snapshot_bytes().unwrap();
    bytes.set_delta_over(Some(3));
    let err = store
        .save_savepoint(5, vec![snapshot(bytes)])
        .wait()
        .unwrap_err();
    assert!(err.to_string().contains("savepoint"), "{err}");
    let ids: Vec<u64> = store.list().unwrap().iter().map(|l| l.id).collect();
    assert_eq!(ids, vec![3], "nothing else published");
}
