//! `tandem` on hostile input never hangs, crashes or lies: control
//! characters from the files never reach the terminal. Every run is killed
//! after 10 s and then fails its test.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use common::{store, tandem_within, Run};

/// A fresh directory for one test, removed when it ends.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("tandem-hostile-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `tandem ARGS… PATH…`, captured, within the time limit.
fn run(args: &[&str], paths: &[&Path]) -> Run {
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.extend(paths.iter().map(|p| p.as_os_str()));
    tandem_within(&all, None)
}

/// An error: status 2, one `error: …` line holding `needle`, no panic.
fn assert_error(r: &Run, needle: &str, what: &str) {
    assert_eq!(r.code, Some(2), "{what}: {}{}", r.stdout, r.stderr);
    assert!(r.stderr.starts_with("error: "), "{what}: {}", r.stderr);
    assert!(r.stderr.contains(needle), "{what}: {}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
}

#[test]
fn control_characters_read_from_files_are_shown_escaped() {
    let d = Dir::new("escapes");
    let clean = d.0.join("clean.jsonl");
    let faulted = d.0.join("faulted.jsonl");
    // Clear the screen, a C1 CSI, a bell, a carriage return: in lines and
    // in a `type`.
    fs::write(
        &clean,
        "{\"type\":\"record\",\"seq\":1,\"v\":\"\x1b[2J\"}\n{\"type\":\"x\x1b]0;pwned\x07\",\"seq\":2}\n",
    )
    .unwrap();
    fs::write(
        &faulted,
        "{\"type\":\"record\",\"seq\":1,\"v\":\"\u{9b}31m\rok\"}\n",
    )
    .unwrap();
    let raw = |s: &str| s.chars().any(|c| c.is_control() && c != '\n');
    let r = run(&["check"], &[&clean, &faulted]);
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    assert!(!raw(&r.stdout), "{:?}", r.stdout);
    assert!(r.stdout.contains("\\u{1b}[2J"), "{}", r.stdout);
    assert!(r.stdout.contains("\\u{9b}31m\\rok"), "{}", r.stdout);
    assert!(r.stdout.contains("x\\u{1b}]0;pwned\\u{7}"), "{}", r.stdout);
    let r = run(&["check", "--json"], &[&clean, &faulted]);
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    assert!(!raw(&r.stdout), "{:?}", r.stdout);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(v.to_string().contains("\\u001b[2J"), "{v}");

    // An operator name and a file path in a manifest.
    let store_dir = d.0.join("store");
    store(&store_dir);
    let manifest = store_dir.join("manifest-2.json");
    let mut m: serde_json::Value = serde_json::from_slice(&fs::read(&manifest).unwrap()).unwrap();
    m["files"][0]["operator"] = "sum\x1b[8m".into();
    m["files"][0]["path"] = "chk-2/\x1b[2Jsum-0.snap".into();
    fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    for args in [
        &["snapshot", "ls"][..],
        &["snapshot", "verify"],
        &["snapshot", "inspect"],
    ] {
        let r = run(args, &[&store_dir]);
        assert!(!raw(&r.stdout), "{args:?}: {:?}", r.stdout);
        assert!(!raw(&r.stderr), "{args:?}: {:?}", r.stderr);
        assert!(r.stdout.contains("\\u{1b}[2Jsum-0.snap"), "{}", r.stdout);
    }
    // And in the error of a path named on the command line.
    let r = run(&["snapshot", "inspect"], &[&d.0.join("no\x1b[2Jsuch")]);
    assert_error(&r, "no\\u{1b}[2Jsuch", "an escape in a missing path");
    assert!(!raw(&r.stderr.replace('\n', "")), "{:?}", r.stderr);
}
