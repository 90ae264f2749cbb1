//! `tandem snapshot ls|inspect|verify` against a real store.

use std::{fs, os::unix::fs::FileExt, path::Path, process::Command};

use tandem::{
    checkpoint::{OperatorSnapshot, Position, SnapshotStore},
    state::KeyedState,
};

fn tandem(args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .arg(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn verify_passes_a_healthy_store_and_fails_a_corrupted_one() {
    let dir = std::env::temp_dir().join(format!("tandem-cli-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    {
        let store = SnapshotStore::open(&dir, 3).unwrap();
        for id in 1..=2 {
            let mut s: KeyedState<u64, u64> = KeyedState::default();
            *s.get_or_default(&id) = id;
            let snap = || OperatorSnapshot {
                operator: "sum".into(),
                instance: 0,
                positions: vec![Position {
                    partition: 0,
                    next_seq: 42,
                }],
                bytes: s.to_snapshot_bytes().unwrap(),
            };
            store.submit(id, vec![snap()]).wait().unwrap();
            store.save_savepoint(100 + id, vec![snap()]).wait().unwrap();
        }
    }
    let (ok, out) = tandem(&["snapshot", "ls"], &dir);
    assert!(ok);
    assert!(
        out.contains("Checkpoint 2") && out.contains("Savepoint 101"),
        "{out}"
    );
    assert!(out.contains("sum#0") && out.contains("[0:42]"), "{out}");

    let (ok, out) = tandem(&["snapshot", "verify"], &dir);
    assert!(ok, "{out}");

    let file = dir.join("chk-2/sum-0.snap");
    let (ok, out) = tandem(&["snapshot", "inspect"], &file);
    assert!(ok && out.contains("verify         : ok"), "{out}");

    let f = fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(b"X", 4096).unwrap();
    let (ok, out) = tandem(&["snapshot", "verify"], &dir);
    assert!(!ok, "{out}");
    assert!(
        out.contains("CORRUPT Checkpoint 2") && out.contains("checksum"),
        "{out}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_manifest_copied_under_another_id_is_refused_not_listed_as_that_checkpoint() {
    let dir = std::env::temp_dir().join(format!("tandem-cli-misnamed-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    {
        let store = SnapshotStore::open(&dir, 3).unwrap();
        let s: KeyedState<u64, u64> = KeyedState::default();
        let snap = OperatorSnapshot {
            operator: "sum".into(),
            instance: 0,
            positions: vec![],
            bytes: s.to_snapshot_bytes().unwrap(),
        };
        store.submit(6, vec![snap]).wait().unwrap();
    }
    fs::copy(dir.join("manifest-6.json"), dir.join("manifest-9.json")).unwrap();
    for cmd in ["ls", "verify"] {
        let (ok, out) = tandem(&["snapshot", cmd], &dir);
        assert!(!ok, "{cmd}: {out}");
        assert_eq!(out.matches("Checkpoint 6").count(), 1, "{cmd}: {out}");
        assert!(
            out.contains("named for id 9, holds checkpoint 6"),
            "{cmd}: {out}"
        );
    }
    // The engine restores from the checkpoint that is what it says.
    let (m, skipped) = tandem::runtime::restore_point(&dir).unwrap();
    assert_eq!(m.id, 6);
    assert!(skipped[0].contains("named for id 9"), "{skipped:?}");
    fs::remove_dir_all(&dir).unwrap();
}
