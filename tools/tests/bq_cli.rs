//! `tandem bq inspect` on a real queue file: prints the ranges and entries
//! and exits 0; on a damaged file says what is wrong and exits 1.

mod common;

use std::process::Command;

#[test]
fn bq_inspect_prints_a_valid_queue_and_rejects_a_damaged_one() {
    let path = std::env::temp_dir().join(format!("tandem-bq-cli-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let q = common::small_queue(&path);
    for i in 0..5u64 {
        q.push(1000 + i, format!("tuple {i}").as_bytes()).unwrap();
    }
    q.advance(0, 2);
    drop(q);
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bq", "inspect"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("positions [0, 5)"), "{text}");
    assert!(text.contains("tuple IDs 1000 ..= 1004"), "{text}");
    assert!(text.contains("tuple 3"), "{text}");
    assert!(text.contains("reader cursors 0:2 1:0"), "{text}");
    assert!(text.contains("valid (5 entries checked)"), "{text}");

    // Damage: the index slot of position 3 names another position.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4096 + 3 * 32] ^= 0x10;
    std::fs::write(&path, bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bq", "inspect"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("INVALID"), "{text}");
    std::fs::remove_file(path).unwrap();
}
