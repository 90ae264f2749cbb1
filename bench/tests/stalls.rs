//! Stalls that never end, on every core at once: the standbys that would
//! take over are tasks on those same cores. Without checkpoints the job
//! must fail, naming the stall — never hang; with them, a restart from the
//! last checkpoint gives exactly the clean output.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn paper(dir: &Path, tag: &str, args: &[&str]) -> (bool, String, Vec<String>) {
    let out = dir.join(format!("{tag}.jsonl"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "20000", "--rate", "100000", "--cores", "2"])
        .args(["--output", out.to_str().unwrap()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{tag}: paper {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    // A failed run leaves no output.
    let lines = if out.exists() {
        common::sorted_lines(&out)
    } else {
        Vec::new()
    };
    (status.success(), err, lines)
}

#[test]
fn endless_stalls_on_every_core_fail_the_job_or_restart_never_hang() {
    if tandem::sys::affinity::available_cores().len() < 2 {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tandem-stalls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (ok, err, clean) = paper(&dir, "clean", &[]);
    assert!(ok, "{err}");
    // Records 5000 and 5001 come from the two partitions: both flatmap
    // primaries stall, one on each core, within microseconds.
    let stalls = [
        "--fault",
        "stall@flatmap:5000:forever",
        "--fault",
        "stall@flatmap:5001:forever",
    ];
    let standby = ["--strategy", "bqbs", "--standby", "flatmap"];
    let (ok, err, lines) = paper(&dir, "standby", &[&standby[..], &stalls[..]].concat());
    if ok {
        // A standby got in between the two: then it is exact.
        assert!(lines == clean, "output differs\n{err}");
    } else {
        assert!(err.contains("stalled"), "{err}");
    }
    let (ok, err, lines) = paper(
        &dir,
        "checkpoints",
        &[
            &standby[..],
            &["--checkpoint-interval-ms", "20"],
            &stalls[..],
        ]
        .concat(),
    );
    assert!(ok, "{err}");
    assert!(lines == clean, "output differs\n{err}");
    std::fs::remove_dir_all(dir).unwrap();
}
