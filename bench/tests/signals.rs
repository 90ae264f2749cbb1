//! SIGINT and SIGTERM at a random moment of a run — generating its
//! input, running its job (every strategy, with `--output`, checkpoints
//! and standbys), merging its output — end it with 130 or 143 and leave
//! nothing behind: nothing in `/dev/shm` or the temp dir, nothing beside
//! `--output`.
//!
//! `TANDEM_SIGNAL_RUNS` sets the runs per configuration (default 2; the
//! issue's bar, 20, is a campaign: `TANDEM_SIGNAL_RUNS=20 cargo test
//! --release -p tandem-bench --test signals`).

mod common;

use common::listing;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fresh(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-signals-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn runs() -> u64 {
    std::env::var("TANDEM_SIGNAL_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// SplitMix64: the moments and signals, reproducible from the seed printed.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What a process left in `/dev/shm` (its scratch directories name it).
fn shm_of(pid: u32) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("tandem-") && n.split('-').nth(2) == Some(&pid.to_string()))
        .collect()
}

/// Starts `bin args` with its temp dir in `tmp`, signals it after `after`
/// (if it still runs), and checks how it ended and what it left. Returns
/// whether the signal reached a running process.
fn signal_run(
    bin: &str,
    args: &[String],
    dir: &Path,
    tmp: &Path,
    after: Duration,
    sig: i32,
    tag: &str,
) -> bool {
    let mut child = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let t = Instant::now();
    let mut sent = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if !sent && t.elapsed() >= after {
            // SAFETY: signalling a child we spawned and have not reaped.
            unsafe { libc::kill(pid as i32, sig) };
            sent = true;
        }
        if t.elapsed() > after + Duration::from_secs(20) {
            let _ = child.kill();
            panic!("{tag}: still running 20 s after the signal");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let err = {
        use std::io::Read;
        let mut s = String::new();
        child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
        s
    };
    assert!(
        status.signal().is_none(),
        "{tag}: died of signal {:?}\n{err}",
        status.signal()
    );
    let code = status.code().unwrap();
    let interrupted = code == 128 + sig;
    assert!(
        interrupted || code == 0,
        "{tag}: exit {code}, expected {} or 0 (finished before the signal)\n{err}",
        128 + sig
    );
    if interrupted {
        assert!(err.contains("interrupted by"), "{tag}: {err}");
        assert_eq!(
            err.matches("interrupted by").count(),
            1,
            "{tag}: one line\n{err}"
        );
    }
    assert!(
        shm_of(pid).is_empty(),
        "{tag}: left in /dev/shm: {:?}",
        shm_of(pid)
    );
    let left = listing(tmp);
    assert!(
        left.is_empty(),
        "{tag}: left in the temp dir: {left:?}\n{err}"
    );
    // The output only of a run that finished.
    let beside: Vec<String> = listing(dir)
        .into_iter()
        .filter(|n| interrupted || n != "out.jsonl")
        .collect();
    assert!(
        beside.is_empty(),
        "{tag}: left beside the output: {beside:?}\n{err}"
    );
    let _ = std::fs::remove_file(dir.join("out.jsonl"));
    interrupted
}

#[test]
fn a_signalled_paper_run_stops_with_its_status_and_leaves_nothing() {
    let configs: &[&[&str]] = &[
        &["--strategy", "none", "--sink-mode", "direct"],
        &[
            "--strategy",
            "restart-all",
            "--checkpoint-interval-ms",
            "20",
        ],
        &["--strategy", "bqbs", "--standby", "flatmap,keyed"],
        &[
            "--strategy",
            "bqbs",
            "--standby",
            "keyed",
            "--standby-mode",
            "hot",
            "--checkpoint-interval-ms",
            "30",
        ],
    ];
    let mut seed = 0x5157_u64;
    let mut reached = 0;
    let mut total = 0;
    for (c, config) in configs.iter().enumerate() {
        for r in 0..runs() {
            let dir = fresh(&format!("paper-{c}-{r}"));
            let tmp = fresh(&format!("paper-tmp-{c}-{r}"));
            let after = Duration::from_millis(next(&mut seed) % 1500);
            let sig = if next(&mut seed).is_multiple_of(2) {
                libc::SIGINT
            } else {
                libc::SIGTERM
            };
            let mut args: Vec<String> = ["--records", "150000", "--rate", "150000"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.extend(config.iter().map(|s| s.to_string()));
            args.extend(["--output".into(), "out.jsonl".into()]);
            let tag = format!("{config:?} signal {sig} after {after:?}");
            total += 1;
            reached += u64::from(signal_run(
                env!("CARGO_BIN_EXE_paper"),
                &args,
                &dir,
                &tmp,
                after,
                sig,
                &tag,
            ));
            std::fs::remove_dir_all(dir).unwrap();
            std::fs::remove_dir_all(tmp).unwrap();
        }
    }
    // The moments fall inside the runs (each takes about a second): most
    // signals must have found one running.
    eprintln!("paper: {reached} of {total} signals reached a running run");
    assert!(
        reached * 2 > total,
        "{reached} of {total} signals reached a run"
    );
}

#[test]
fn a_signalled_chaos_campaign_stops_with_its_status_and_leaves_nothing() {
    let mut seed = 0xC4A05_u64;
    let mut reached = 0;
    for r in 0..runs() {
        let dir = fresh(&format!("chaos-{r}"));
        let tmp = fresh(&format!("chaos-tmp-{r}"));
        let after = Duration::from_millis(200 + next(&mut seed) % 1500);
        let sig = if r.is_multiple_of(2) {
            libc::SIGINT
        } else {
            libc::SIGTERM
        };
        let args: Vec<String> = [
            "--schedules",
            "20",
            "--records",
            "20000",
            "--strategies",
            "restart-all,bqbs-warm",
            "--quiet",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        reached += u64::from(signal_run(
            env!("CARGO_BIN_EXE_chaos"),
            &args,
            &dir,
            &tmp,
            after,
            sig,
            &format!("chaos signal {sig} after {after:?}"),
        ));
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::remove_dir_all(tmp).unwrap();
    }
    assert_eq!(reached, runs(), "a campaign of 40 schedules outlasts 1.7 s");
}

#[test]
fn what_a_killed_run_left_is_swept_by_the_next_run_of_any_strategy() {
    let dir = fresh("killed");
    let tmp = fresh("killed-tmp");
    let mut child = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args([
            "--records",
            "400000",
            "--rate",
            "200000",
            "--strategy",
            "bqbs",
            "--standby",
            "flatmap,keyed",
            "--checkpoint-interval-ms",
            "20",
            "--malformed-every",
            "50",
            "--output",
            "killed.jsonl",
        ])
        .current_dir(&dir)
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Until its standby files, checkpoints, dead letters and staging exist.
    let t = Instant::now();
    while shm_of(pid).is_empty()
        || listing(&tmp).len() < 2
        || !dir.join("killed.jsonl.txn").exists()
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!shm_of(pid).is_empty() && !listing(&tmp).is_empty());
    // The next run, of another strategy, writing another output there.
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "100", "--output", "next.jsonl"])
        .current_dir(&dir)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        shm_of(pid).is_empty(),
        "left in /dev/shm: {:?}",
        shm_of(pid)
    );
    assert!(
        listing(&tmp).is_empty(),
        "left in the temp dir: {:?}",
        listing(&tmp)
    );
    assert_eq!(listing(&dir), ["next.jsonl"]);
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(tmp).unwrap();
}
