//! The exit status and output of the inspecting commands: `snapshot
//! inspect` exits 1 when anything it looked at is corrupt (a file, a
//! manifest's file, a store's), still printing what it found; timestamps
//! print as UTC RFC 3339; an unattached reader cursor of a buffer queue
//! prints as `unattached`; an error prints once, as `error: …`, without a
//! backtrace, with status 2.

mod common;

use std::{
    fs,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    process::Command,
};

use common::store;

/// Runs `tandem ARGS PATH` with `RUST_BACKTRACE=1`: (status, stdout, stderr).
fn tandem(args: &[&str], path: &Path) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .arg(path)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh directory for one test, removed when it ends.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let d =
            std::env::temp_dir().join(format!("tandem-inspect-cli-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Whether `s` starts with a UTC RFC 3339 time with milliseconds in this
/// century, `20YY-MM-DDTHH:MM:SS.mmmZ`.
fn starts_with_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let shape = b"20dd-dd-ddTdd:dd:dd.dddZ";
    b.len() >= shape.len()
        && shape.iter().zip(b).all(|(&want, &got)| match want {
            b'd' => got.is_ascii_digit(),
            _ => got == want,
        })
}

#[test]
fn snapshot_inspect_exits_1_on_a_corrupt_file_manifest_or_store_and_prints_what_it_found() {
    let d = Dir::new("corrupt");
    store(&d.0);
    let file = d.0.join("chk-2/sum-0.snap");
    let manifest = d.0.join("manifest-2.json");

    // Healthy: status 0, creation times as RFC 3339.
    let (code, out, err) = tandem(&["snapshot", "inspect"], &file);
    assert_eq!(code, Some(0), "{out}{err}");
    let created = out
        .lines()
        .find_map(|l| l.strip_prefix("created        : "))
        .expect("a created line");
    assert!(starts_with_rfc3339(created), "{out}");
    assert!(!out.contains(" ms"), "no raw milliseconds: {out}");
    let (code, out, err) = tandem(&["snapshot", "ls"], &d.0);
    assert_eq!(code, Some(0), "{out}{err}");
    let created = out.split("created ").nth(1).expect("created in ls");
    assert!(starts_with_rfc3339(created), "{out}");
    for path in [&manifest, &d.0] {
        let (code, out, err) = tandem(&["snapshot", "inspect"], path);
        assert_eq!(code, Some(0), "{out}{err}");
        assert!(
            out.contains("verified") && !out.contains("CORRUPT"),
            "{out}"
        );
    }

    // One payload byte flipped: the file, its manifest and the store.
    let f = fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(b"X", 4096).unwrap();
    let (code, out, err) = tandem(&["snapshot", "inspect"], &file);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("operator       : sum#0"),
        "header still shown: {out}"
    );
    assert!(
        out.contains("verify         : CORRUPT") && out.contains("checksum"),
        "{out}"
    );
    for path in [&manifest, &d.0] {
        let (code, out, err) = tandem(&["snapshot", "inspect"], path);
        assert_eq!(code, Some(1), "{}: {out}{err}", path.display());
        assert!(out.contains("CORRUPT"), "{out}");
        assert!(out.contains("sum#0"), "{out}");
        assert!(err.contains("1 problem(s) found"), "{err}");
    }

    // A damaged header (the creation time, under the header checksum).
    f.write_all_at(&[0xff], 48).unwrap();
    let (code, out, err) = tandem(&["snapshot", "inspect"], &file);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("CORRUPT") && out.contains("header checksum"),
        "{out}"
    );

    // An unparsable manifest, alone and in its store.
    fs::write(&manifest, b"{ not json").unwrap();
    let (code, out, err) = tandem(&["snapshot", "inspect"], &manifest);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("CORRUPT") && out.contains("bad manifest"),
        "{out}"
    );
    let (code, out, err) = tandem(&["snapshot", "inspect"], &d.0);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("Checkpoint 1"),
        "the sound one still shown: {out}"
    );
}

#[test]
fn bq_inspect_prints_an_unattached_reader_as_unattached() {
    let d = Dir::new("bq");
    fs::create_dir_all(&d.0).unwrap();
    let path = d.0.join("q.bq");
    let q = common::small_queue(&path);
    q.push(7, b"x").unwrap();
    q.advance(0, 1);
    q.release(1);
    drop(q);
    let (code, out, err) = tandem(&["bq", "inspect"], &path);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("reader cursors 0:1 1:unattached"), "{out}");
    assert!(!out.contains(&u64::MAX.to_string()), "{out}");

    // Not a queue at all: damage, status 1.
    fs::write(&path, vec![0u8; 8192]).unwrap();
    let (code, out, err) = tandem(&["bq", "inspect"], &path);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("INVALID") && out.contains("not a buffer queue"),
        "{out}"
    );
}

#[test]
fn an_error_prints_once_without_a_backtrace_and_exits_2() {
    let d = Dir::new("errors");
    let missing = d.0.join("no-such-thing");
    for args in [
        &["snapshot", "inspect"][..],
        &["snapshot", "ls"],
        &["snapshot", "verify"],
        &["bq", "inspect"],
    ] {
        let (code, out, err) = tandem(args, &missing);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains("no-such-thing"), "{args:?}: {err}");
        assert_eq!(
            err.matches("No such file or directory").count(),
            1,
            "{args:?}: each cause once: {err}"
        );
        assert!(
            !err.contains("backtrace") && !err.contains("Backtrace") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("Caused by"), "not anyhow's Debug form: {err}");
    }
}
