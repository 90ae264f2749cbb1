//! One output discipline for every file flag of `paper` and `nexmark`:
//! given a character device (a private `mknod` copy of `/dev/null`, never
//! the real `/dev`), a FIFO with no reader, or a symlink to either, each
//! flag is refused by name before any work, within seconds, and the
//! device, FIFO and symlink are still there afterwards; a symlink to a
//! regular file is written through and stays a symlink; any two flags that
//! name one path — the input included — are refused before any work, the
//! input unchanged.

mod common;

use common::listing;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn fresh(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-flags-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `bin args` in `dir` (temp dir `dir/tmp`), at most 30 s; returns
/// its output and how long it took.
fn run(bin: &str, dir: &Path, args: &[&str]) -> (Output, Duration) {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let t = Instant::now();
    let child = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", &tmp)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(30));
        // SAFETY: a no-op if the child has ended; it is ours.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let o = child.wait_with_output().unwrap();
    drop(killer);
    (o, t.elapsed())
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A private character device like `/dev/null` (1, 3) at `p`; false where
/// this user may not make one (not root).
fn mknod_null(p: &Path) -> bool {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) == 0 }
}

/// The special files every flag is tried on: (name, what it is), each also
/// behind a symlink.
fn specials(dir: &Path) -> Vec<(String, &'static str)> {
    let mut v = Vec::new();
    mkfifo(&dir.join("fifo"));
    v.push(("fifo".to_string(), "is a FIFO"));
    if mknod_null(&dir.join("dev")) {
        v.push(("dev".to_string(), "is a character device"));
    } else {
        eprintln!("not root: no private device; FIFOs and symlinks only");
    }
    for (name, what) in v.clone() {
        let link = format!("link-{name}");
        std::os::unix::fs::symlink(&name, dir.join(&link)).unwrap();
        v.push((link, what));
    }
    v
}

/// The special files are all there, of their kinds.
fn still_there(dir: &Path, specials: &[(String, &str)], tag: &str) {
    for (name, _) in specials {
        let m = std::fs::symlink_metadata(dir.join(name))
            .unwrap_or_else(|e| panic!("{tag}: {name} is gone: {e}"));
        let t = m.file_type();
        let ok = if name.starts_with("link-") {
            t.is_symlink()
        } else if name == "fifo" {
            t.is_fifo()
        } else {
            t.is_char_device()
        };
        assert!(ok, "{tag}: {name} became {t:?}");
    }
}

fn refused_before_work(o: &Output, took: Duration, want: &[&str], tag: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{tag}: {err}");
    for w in want {
        assert!(err.contains(w), "{tag}: `{w}` not in\n{err}");
    }
    assert!(
        !err.contains("generated") && !err.contains("read ") && !err.contains("wrote"),
        "{tag}: work was done before the refusal\n{err}"
    );
    assert!(took < Duration::from_secs(15), "{tag}: took {took:?}");
}

#[test]
fn every_paper_file_flag_refuses_devices_fifos_and_links_to_them() {
    let d = fresh("paper-special");
    let sp = specials(&d);
    for flag in ["--output", "--report", "--hlog", "--timeline"] {
        for (name, what) in &sp {
            let tag = format!("paper {flag} {name}");
            let (o, took) = run(
                env!("CARGO_BIN_EXE_paper"),
                &d,
                &["--records", "1000", flag, name],
            );
            refused_before_work(&o, took, &[&format!("{flag} {name}: {what}")], &tag);
            still_there(&d, &sp, &tag);
        }
    }
    for (flag, extra) in [
        ("--run-dir", &[][..]),
        ("--checkpoint-dir", &["--strategy", "restart-all"][..]),
    ] {
        for (name, what) in &sp {
            let tag = format!("paper {flag} {name}");
            let mut args = vec!["--records", "1000", flag, name];
            args.extend(extra);
            let (o, took) = run(env!("CARGO_BIN_EXE_paper"), &d, &args);
            let what = what.trim_start_matches("is ");
            refused_before_work(
                &o,
                took,
                &[&format!(
                    "{flag} {name}: exists and is {what}, not a directory"
                )],
                &tag,
            );
            still_there(&d, &sp, &tag);
        }
    }
    for (flag, extra) in [
        ("--input", &[][..]),
        ("--from-savepoint", &["--strategy", "restart-all"][..]),
    ] {
        for (name, what) in &sp {
            let tag = format!("paper {flag} {name}");
            let mut args = vec![flag, name.as_str()];
            if flag == "--from-savepoint" {
                args.extend(["--records", "1000"]);
            }
            args.extend(extra);
            let (o, took) = run(env!("CARGO_BIN_EXE_paper"), &d, &args);
            refused_before_work(&o, took, &[&format!("{flag} {name}: {what}")], &tag);
            still_there(&d, &sp, &tag);
        }
    }
    let mut names: Vec<String> = sp.iter().map(|(n, _)| n.to_string()).collect();
    names.push("tmp".into());
    names.sort();
    assert_eq!(listing(&d), names);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn every_nexmark_file_flag_refuses_devices_fifos_and_links_to_them() {
    let d = fresh("nexmark-special");
    let sp = specials(&d);
    for flag in [
        "--output",
        "--report",
        "--hlog",
        "--dump-input",
        "--work-dir",
    ] {
        for (name, what) in &sp {
            let tag = format!("nexmark {flag} {name}");
            let (o, took) = run(
                env!("CARGO_BIN_EXE_nexmark"),
                &d,
                &["--query", "q1", "--events", "1000", flag, name],
            );
            let want = if flag == "--work-dir" {
                format!(
                    "{flag} {name}: exists and is {}, not a directory",
                    what.trim_start_matches("is ")
                )
            } else {
                format!("{flag} {name}: {what}")
            };
            refused_before_work(&o, took, &[&want], &tag);
            still_there(&d, &sp, &tag);
        }
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_symlink_to_a_regular_file_is_written_through_and_stays_a_link() {
    let d = fresh("through");
    for f in ["o.real", "r.real", "h.real", "t.real"] {
        std::fs::write(d.join(f), b"old").unwrap();
    }
    for (link, real) in [
        ("o", "o.real"),
        ("r", "r.real"),
        ("h", "h.real"),
        ("t", "t.real"),
    ] {
        std::os::unix::fs::symlink(real, d.join(link)).unwrap();
    }
    let (o, _) = run(
        env!("CARGO_BIN_EXE_paper"),
        &d,
        &[
            "--records",
            "2000",
            "--output",
            "o",
            "--report",
            "r",
            "--hlog",
            "h",
            "--timeline",
            "t",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (link, real) in [
        ("o", "o.real"),
        ("r", "r.real"),
        ("h", "h.real"),
        ("t", "t.real"),
    ] {
        let m = std::fs::symlink_metadata(d.join(link)).unwrap();
        assert!(m.file_type().is_symlink(), "{link} is no longer a link");
        assert_eq!(std::fs::read_link(d.join(link)).unwrap(), Path::new(real));
        assert_ne!(std::fs::read(d.join(real)).unwrap(), b"old", "{real}");
    }
    // nexmark's files the same way.
    let (o, _) = run(
        env!("CARGO_BIN_EXE_nexmark"),
        &d,
        &[
            "--query",
            "q1",
            "--events",
            "2000",
            "--output",
            "o",
            "--report",
            "r",
            "--dump-input",
            "t",
            "--hlog",
            "h",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (link, real) in [
        ("o", "o.real"),
        ("r", "r.real"),
        ("h", "h.real"),
        ("t", "t.real"),
    ] {
        let m = std::fs::symlink_metadata(d.join(link)).unwrap();
        assert!(
            m.file_type().is_symlink(),
            "nexmark: {link} is no longer a link"
        );
        assert!(std::fs::metadata(d.join(real)).unwrap().len() > 3, "{real}");
    }
    assert_eq!(
        listing(&d),
        ["h", "h.real", "o", "o.real", "r", "r.real", "t", "t.real", "tmp"]
    );
    std::fs::remove_dir_all(d).unwrap();
}

/// Every pair of `flags` (flag, extra args it needs) named `same`.
fn pairs<'a>(flags: &[(&'a str, &'a [&'a str])]) -> Vec<Vec<&'a str>> {
    let mut v = Vec::new();
    for i in 0..flags.len() {
        for j in i + 1..flags.len() {
            let mut args = vec![flags[i].0, "same", flags[j].0, "same"];
            for e in flags[i].1.iter().chain(flags[j].1) {
                if !args.contains(e) {
                    args.push(e);
                }
            }
            v.push(args);
        }
    }
    v
}

/// Runs `bin` with every pair of `flags` naming the path `same` — absent,
/// and present as a user's file (always present where `--input` is one of
/// the pair) — plus `base` (a pair without `--input`) and checks each run
/// is refused before any work, the file unchanged and nothing made.
/// `dirs` are the flags that name a directory: a file there is refused
/// for being no directory.
fn every_pair_is_refused(
    bin: &str,
    tag: &str,
    flags: &[(&str, &[&str])],
    base: &[&str],
    dirs: &[&str],
) {
    let d = fresh(tag);
    let mine = "{\"seq\":0}\n";
    for mut args in pairs(flags) {
        let input = args.contains(&"--input");
        if !input {
            args.extend(base);
        }
        for exists in [true, false] {
            let _ = std::fs::remove_file(d.join("same"));
            if exists {
                std::fs::write(d.join("same"), mine).unwrap();
            } else if input {
                continue;
            }
            let tag = format!("{args:?} (exists: {exists})");
            let (o, took) = run(bin, &d, &args);
            let want = if exists && dirs.iter().any(|f| args.contains(f)) {
                "not a directory"
            } else {
                "name the same file"
            };
            refused_before_work(&o, took, &[want], &tag);
            if exists {
                assert_eq!(
                    std::fs::read_to_string(d.join("same")).unwrap(),
                    mine,
                    "{tag}"
                );
            } else {
                assert!(!d.join("same").exists(), "{tag}");
            }
            assert_eq!(
                listing(&d).len(),
                1 + usize::from(exists),
                "{tag}: {:?}",
                listing(&d)
            );
        }
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn any_two_paper_flags_naming_one_path_are_refused_before_work() {
    let restart = &["--strategy", "restart-all"][..];
    every_pair_is_refused(
        env!("CARGO_BIN_EXE_paper"),
        "paper-pairs",
        &[
            ("--output", &[]),
            ("--report", &[]),
            ("--hlog", &[]),
            ("--timeline", &[]),
            ("--run-dir", &[]),
            ("--checkpoint-dir", restart),
            ("--input", &[]),
        ],
        &["--records", "1000"],
        &["--run-dir", "--checkpoint-dir"],
    );
}

#[test]
fn any_two_nexmark_flags_naming_one_path_are_refused_before_work() {
    every_pair_is_refused(
        env!("CARGO_BIN_EXE_nexmark"),
        "nexmark-pairs",
        &[
            ("--output", &[]),
            ("--report", &[]),
            ("--hlog", &[]),
            ("--dump-input", &[]),
            ("--work-dir", &[]),
        ],
        &["--query", "q1", "--events", "1000"],
        &["--work-dir"],
    );
}

#[test]
fn directories_a_run_created_are_kept_only_if_they_hold_something() {
    let d = fresh("created");
    // nexmark's work dir a/b/c holds only its scratch: all three go.
    let (o, _) = run(
        env!("CARGO_BIN_EXE_nexmark"),
        &d,
        &["--query", "q1", "--events", "2000", "--work-dir", "a/b/c"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(listing(&d), ["tmp"]);
    // paper's run dir x/y with dead letters in it: kept.
    let (o, _) = run(
        env!("CARGO_BIN_EXE_paper"),
        &d,
        &[
            "--records",
            "2000",
            "--malformed-every",
            "10",
            "--run-dir",
            "x/y",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!listing(&d.join("x/y")).is_empty());
    std::fs::remove_dir_all(d).unwrap();
}
