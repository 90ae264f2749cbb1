//! `tandem` on hostile input never hangs, crashes or lies: a FIFO or a
//! device where a file should be is an error, not a wait or an endless
//! read; a directory without checkpoints is no sound store; damage `ls`
//! sees sets its status; a symlink loop is called one; control characters
//! from the files never reach the terminal; a `--key` no line has is
//! refused; a standard output that cannot be written is an error printed
//! once. Every run is killed after 10 s and then fails its test.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

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

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo").arg(p).status().unwrap().success();
    assert!(ok, "mkfifo {}", p.display());
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
fn a_fifo_or_a_device_named_on_the_command_line_is_an_error_not_a_wait() {
    let d = Dir::new("named-fifo");
    let fifo = d.0.join("fifo");
    mkfifo(&fifo);
    let fifo_json = d.0.join("manifest-9.json");
    symlink(&fifo, &fifo_json).unwrap();
    let zero_json = d.0.join("zero.json");
    symlink("/dev/zero", &zero_json).unwrap();
    let clean = d.0.join("clean.jsonl");
    fs::write(&clean, "{\"seq\":1}\n").unwrap();
    for (args, paths, needle) in [
        (&["bq", "inspect"][..], vec![&*fifo], "a FIFO"),
        (
            &["bq", "inspect"],
            vec![Path::new("/dev/zero")],
            "character device",
        ),
        (&["snapshot", "inspect"], vec![&*fifo], "a FIFO"),
        (&["snapshot", "inspect"], vec![&*fifo_json], "a FIFO"),
        (
            &["snapshot", "inspect"],
            vec![&*zero_json],
            "character device",
        ),
        (&["snapshot", "ls"], vec![&*fifo], "not a directory"),
        (&["snapshot", "verify"], vec![&*fifo], "not a directory"),
        (&["check"], vec![&*fifo, &*clean], "a FIFO"),
        (&["check"], vec![&*clean, &*fifo], "a FIFO"),
        (
            &["check"],
            vec![&*clean, Path::new("/dev/zero")],
            "character device",
        ),
    ] {
        let r = run(args, &paths);
        assert_error(&r, needle, &format!("{args:?} {paths:?}"));
    }
}

#[test]
fn a_fifo_or_a_device_inside_a_store_is_damage_not_a_wait() {
    let d = Dir::new("store-fifo");
    store(&d.0);
    // A manifest that is a FIFO, one that is `/dev/zero`, a snapshot file
    // that is a FIFO, a savepoint whose manifest is a FIFO.
    mkfifo(&d.0.join("manifest-7.json"));
    symlink("/dev/zero", d.0.join("manifest-8.json")).unwrap();
    let snap = d.0.join("chk-2/sum-0.snap");
    fs::remove_file(&snap).unwrap();
    mkfifo(&snap);
    fs::create_dir(d.0.join("sp-5")).unwrap();
    mkfifo(&d.0.join("sp-5/manifest.json"));
    for args in [
        &["snapshot", "ls"][..],
        &["snapshot", "verify"],
        &["snapshot", "inspect"],
    ] {
        let r = run(args, &[&d.0]);
        assert_eq!(r.code, Some(1), "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("Checkpoint 1"), "{args:?}: {}", r.stdout);
        for name in ["manifest-7.json", "manifest-8.json", "sp-5/manifest.json"] {
            assert!(
                r.stdout
                    .lines()
                    .any(|l| l.contains("CORRUPT") && l.contains(name)),
                "{args:?}: {name}: {}",
                r.stdout
            );
        }
        assert!(
            r.stdout.contains("a FIFO, not a regular file"),
            "{}",
            r.stdout
        );
        assert!(
            r.stdout.contains("a character device, not a regular file"),
            "{}",
            r.stdout
        );
    }
    let r = run(&["snapshot", "verify"], &[&d.0]);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("CORRUPT Checkpoint 2") && l.contains("a FIFO")),
        "{}",
        r.stdout
    );
}

#[test]
fn a_directory_without_checkpoints_is_an_error_not_a_sound_store() {
    let d = Dir::new("empty");
    let empty = d.0.join("empty");
    fs::create_dir(&empty).unwrap();
    // A savepoint directory whose manifest never got written.
    let sp = d.0.join("sp-7");
    fs::create_dir(&sp).unwrap();
    fs::write(sp.join("sum-0.snap"), [0u8; 8192]).unwrap();
    for dir in [&*empty, &sp, Path::new("/proc")] {
        for args in [
            &["snapshot", "ls"][..],
            &["snapshot", "verify"],
            &["snapshot", "inspect"],
        ] {
            let r = run(args, &[dir]);
            assert_error(
                &r,
                "holds no checkpoint or savepoint",
                &format!("{args:?} {}", dir.display()),
            );
        }
    }
    // `ls` still shows the leftovers it found.
    fs::create_dir(empty.join("chk-3")).unwrap();
    let r = run(&["snapshot", "ls"], &[&empty]);
    assert_error(&r, "holds no checkpoint", "ls with a leftover");
    assert!(r.stdout.contains("unpublished: chk-3"), "{}", r.stdout);
}

#[test]
fn ls_exits_1_on_the_damage_it_sees_as_verify_does() {
    let d = Dir::new("ls-damage");
    store(&d.0);
    fs::write(d.0.join("manifest-2.json"), b"{ not json").unwrap();
    for args in [&["snapshot", "ls"][..], &["snapshot", "verify"]] {
        let r = run(args, &[&d.0]);
        assert_eq!(r.code, Some(1), "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("CORRUPT"), "{args:?}: {}", r.stdout);
        assert!(
            r.stdout.contains("manifest-2.json"),
            "{args:?}: {}",
            r.stdout
        );
        assert!(r.stderr.contains("1 problem(s) found"), "{}", r.stderr);
    }
    // An unfinished savepoint is a leftover, not damage.
    fs::remove_file(d.0.join("manifest-2.json")).unwrap();
    fs::create_dir(d.0.join("sp-9")).unwrap();
    let r = run(&["snapshot", "ls"], &[&d.0]);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("unpublished: sp-9"), "{}", r.stdout);
}

#[test]
fn a_symlink_loop_is_reported_as_a_symlink_loop() {
    let d = Dir::new("loop");
    store(&d.0);
    // A savepoint whose manifest is a symlink loop: it was silently
    // skipped (in a store) or taken for an empty store (named itself).
    let sp = d.0.join("sp-4");
    fs::create_dir(&sp).unwrap();
    symlink("b", sp.join("a")).unwrap();
    symlink("a", sp.join("b")).unwrap();
    symlink("a", sp.join("manifest.json")).unwrap();
    for dir in [&d.0, &sp] {
        for args in [
            &["snapshot", "ls"][..],
            &["snapshot", "verify"],
            &["snapshot", "inspect"],
        ] {
            let r = run(args, &[dir]);
            let what = format!("{args:?} {}", dir.display());
            assert_eq!(r.code, Some(1), "{what}: {}{}", r.stdout, r.stderr);
            assert!(
                r.stdout.lines().any(|l| l.contains("CORRUPT")
                    && l.contains("sp-4/manifest.json")
                    && l.contains("a symlink loop: Too many levels of symbolic links")),
                "{what}: {}",
                r.stdout
            );
            assert!(!r.stderr.contains("holds no"), "{what}: {}", r.stderr);
        }
    }
    // Named on the command line: an error that says so.
    let a = sp.join("a");
    for args in [
        &["snapshot", "inspect"][..],
        &["snapshot", "ls"],
        &["bq", "inspect"],
    ] {
        let r = run(args, &[&a]);
        assert_error(&r, "a symlink loop: Too many levels", &format!("{args:?}"));
        assert!(!r.stderr.contains("No such file"), "{}", r.stderr);
    }
    let r = run(&["check"], &[&a, &a]);
    assert_error(&r, "a symlink loop", "check");
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

#[test]
fn a_key_that_no_line_has_is_refused() {
    let d = Dir::new("keys");
    let clean = d.0.join("clean.jsonl");
    let faulted = d.0.join("faulted.jsonl");
    fs::write(
        &clean,
        "{\"seq\":1,\"v\":1}\n{\"seq\":2,\"note\":\"nosuch\"}\n",
    )
    .unwrap();
    fs::write(&faulted, "{\"seq\":1,\"v\":2}\n").unwrap();
    // `nosuch` is in a line, but only as a value.
    for keys in [
        &["--key", "nosuch"][..],
        &["--key", "seq", "--key", "nosuch"],
    ] {
        let mut args = vec!["check"];
        args.extend(keys);
        let r = run(&args, &[&clean, &faulted]);
        assert_error(&r, "--key \"nosuch\": no line of", &format!("{keys:?}"));
        assert!(r.stdout.is_empty(), "{}", r.stdout);
    }
    let r = run(&["check", "--key", "v"], &[&clean, &faulted]);
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
}

#[test]
fn a_standard_output_that_cannot_be_written_is_an_error_printed_once() {
    let d = Dir::new("full");
    store(&d.0);
    let queue = d.0.join("q.bq");
    let q = common::small_queue(&queue);
    q.push(1, b"one").unwrap();
    drop(q);
    let clean = d.0.join("clean.jsonl");
    fs::write(&clean, "{\"seq\":1}\n").unwrap();
    let store_arg = d.0.as_os_str();
    let queue_arg = queue.as_os_str();
    let clean_arg = clean.as_os_str();
    let runs: [&[&OsStr]; 8] = [
        &["info".as_ref()],
        &["--help".as_ref()],
        &["--version".as_ref()],
        &["snapshot".as_ref(), "help".as_ref()],
        &["snapshot".as_ref(), "ls".as_ref(), store_arg],
        &["snapshot".as_ref(), "verify".as_ref(), store_arg],
        &["bq".as_ref(), "inspect".as_ref(), queue_arg],
        &["check".as_ref(), clean_arg, clean_arg],
    ];
    for args in runs {
        let full = fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let r = tandem_within(args, Some(full));
        assert_error(&r, "writing to standard output", &format!("{args:?}"));
        assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("acktrace"), "{args:?}: {}", r.stderr);
    }
}
