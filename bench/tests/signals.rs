//! SIGINT and SIGTERM at a random moment of a run — generating its
//! input, running its job (every strategy, with `--output`, checkpoints
//! and standbys), merging its output — end it with 130 or 143 and leave
//! nothing behind: nothing in `/dev/shm` or the temp dir, nothing beside
//! `--output`; and a signal that comes once the run wrote its output
//! keeps it. A killed run (`kill -9`) of `nexmark` or of a
//! process-isolated `paper` leaves nothing once any later run has started.
//! (Every other binary signalled: `signals_binaries.rs`.)
//!
//! `TANDEM_SIGNAL_RUNS` sets the runs per configuration (default 2; the
//! issue's bar, 20, is a campaign: `TANDEM_SIGNAL_RUNS=20 cargo test
//! --release -p tandem-bench --test signals`).

mod common;

use common::{fresh, listing};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    // The output only of a run that finished, or wrote it before the
    // signal came: once written, it is the user's.
    let wrote = err.contains("wrote out.jsonl");
    assert_eq!(
        dir.join("out.jsonl").exists(),
        !interrupted || wrote,
        "{tag}: the output\n{err}"
    );
    let beside: Vec<String> = listing(dir)
        .into_iter()
        .filter(|n| n != "out.jsonl")
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

/// Runs `paper` and sends `sig` the moment it says it wrote its output;
/// returns the exit status, stderr and the output's lines.
fn signal_after_wrote(dir: &Path, tmp: &Path, sig: i32) -> (i32, String, usize) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args([
            "--records",
            "20000",
            "--output",
            "out.jsonl",
            "--report",
            "r.json",
        ])
        .current_dir(dir)
        .env("TMPDIR", tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    let mut r = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while r.read_line(&mut line).unwrap() > 0 {
        if line.starts_with("wrote out.jsonl") {
            // SAFETY: signalling a child we spawned and have not reaped.
            unsafe { libc::kill(child.id() as i32, sig) };
        }
        err.push_str(&line);
        line.clear();
    }
    let status = child.wait().unwrap();
    let lines = std::fs::read_to_string(dir.join("out.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    (status.code().unwrap_or(-1), err, lines)
}

#[test]
fn a_signal_right_after_the_output_is_written_keeps_it() {
    let dir = fresh("after-wrote");
    let tmp = fresh("after-wrote-tmp");
    // 20 000 records: 18 000 pass the filter, and one summary a user.
    let (code, err, expected) = signal_after_wrote(&dir, &tmp, 0);
    assert_eq!(code, 0, "{err}");
    assert!(expected > 18_000, "{expected} lines\n{err}");
    for i in 0..20 {
        let sig = if i % 2 == 0 {
            libc::SIGINT
        } else {
            libc::SIGTERM
        };
        std::fs::remove_file(dir.join("out.jsonl")).unwrap();
        let (code, err, lines) = signal_after_wrote(&dir, &tmp, sig);
        assert!(
            code == 0 || code == 128 + sig,
            "run {i}: exit {code}\n{err}"
        );
        assert_eq!(lines, expected, "run {i}: signal {sig}, exit {code}\n{err}");
        if code != 0 {
            assert!(err.contains("kept out.jsonl"), "run {i}: {err}");
        }
        assert!(listing(&tmp).is_empty(), "run {i}: {:?}", listing(&tmp));
        let beside: Vec<String> = listing(&dir)
            .into_iter()
            .filter(|n| n != "out.jsonl" && n != "r.json")
            .collect();
        assert!(beside.is_empty(), "run {i}: {beside:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(tmp).unwrap();
}

/// Waits until `pid` has no child processes left (a process-isolated
/// run's children die with it, a moment later), at most 10 s.
fn wait_for_children_of(pid: u32) {
    let t = Instant::now();
    loop {
        let any = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
                // The field after the command's closing parenthesis: state,
                // then the parent's pid.
                s.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.split(' ').nth(1).map(str::to_owned))
                    == Some(pid.to_string())
            })
        });
        if !any || t.elapsed() > Duration::from_secs(10) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Everything under `dir` whose name holds `pid` as a scratch directory's
/// (`tandem-<kind>-<pid>-…`), at any depth.
fn scratch_of(dir: &Path, pid: u32) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        // `tandem-<kind>-<pid>-<stamp>-<n>`; a kind may hold a dash.
        if n.starts_with("tandem-") && n.split('-').any(|part| part == pid.to_string()) {
            found.push(e.path());
        } else if e.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(scratch_of(&e.path(), pid));
        }
    }
    found
}

#[test]
fn a_killed_nexmark_leaves_nothing_once_another_binary_has_started() {
    let dir = fresh("nexmark-killed");
    let tmp = fresh("nexmark-killed-tmp");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nexmark"))
        .args([
            "--query",
            "q5",
            "--events",
            "50000000",
            "--strategy",
            "both",
            "--output",
            "o.jsonl",
        ])
        .current_dir(&dir)
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Until its scratch (checkpoints, the output's staging) and standby
    // files exist.
    let t = Instant::now();
    while scratch_of(&tmp, pid).is_empty() || shm_of(pid).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!scratch_of(&tmp, pid).is_empty());
    // Any later run of any binary: here `paper`, somewhere else.
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "100"])
        .current_dir(&tmp)
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
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
fn a_killed_process_isolated_paper_leaves_nothing_once_the_next_run_started() {
    let dir = fresh("process-killed");
    let tmp = fresh("process-killed-tmp");
    let run_dir = dir.join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args([
            "--records",
            "2000000",
            "--rate",
            "400000",
            "--strategy",
            "bqbs",
            "--standby",
            "flatmap",
            "--isolation",
            "process",
            "--run-dir",
            "run",
            "--output",
            "o.jsonl",
        ])
        .current_dir(&dir)
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Until the driver's copy of the input is in the run dir and the
    // sink writes.
    let t = Instant::now();
    while scratch_of(&run_dir, pid).is_empty() || !dir.join("o.jsonl.part-0").exists() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for_children_of(pid);
    assert!(!scratch_of(&run_dir, pid).is_empty());
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args([
            "--records",
            "100",
            "--run-dir",
            "run",
            "--output",
            "next.jsonl",
        ])
        .current_dir(&dir)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let left = scratch_of(&run_dir, pid);
    assert!(left.is_empty(), "left in the run dir: {left:?}");
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
    let beside: Vec<String> = listing(&dir)
        .into_iter()
        .filter(|n| n != "run" && n != "next.jsonl")
        .collect();
    assert!(beside.is_empty(), "left beside the output: {beside:?}");
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(tmp).unwrap();
}

/// The pids of `pid`'s child processes.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (_, rest) = stat.rsplit_once(") ")?;
            (rest.split(' ').nth(1)? == pid.to_string()).then_some(child)
        })
        .collect()
}

#[test]
fn an_experiments_campaign_signalled_twice_waits_for_its_run_to_clean_up() {
    let dir = fresh("experiments-twice");
    let tmp = fresh("experiments-twice-tmp");
    let mut exp = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(["--profile", "quick", "--out", "out"])
        .current_dir(&dir)
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until its first `paper` run is under way.
    let t = Instant::now();
    let paper = loop {
        if let Some(&c) = children_of(exp.id()).first() {
            if !shm_of(c).is_empty() || !listing(&tmp).is_empty() {
                break c;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no run started");
        std::thread::sleep(Duration::from_millis(5));
    };
    std::thread::sleep(Duration::from_millis(200));
    // As `timeout` does after its grace: SIGTERM, and SIGTERM again.
    // SAFETY: signalling a child we spawned and have not reaped.
    unsafe { libc::kill(exp.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(30));
    // SAFETY: as above.
    unsafe { libc::kill(exp.id() as i32, libc::SIGTERM) };
    let status = exp.wait().unwrap();
    let err = {
        use std::io::Read;
        let mut s = String::new();
        exp.stderr.take().unwrap().read_to_string(&mut s).unwrap();
        s
    };
    assert_eq!(status.code(), Some(143), "{err}");
    // Its run ended before it did (gone, or a zombie nobody reaped yet),
    // and left nothing.
    let state = std::fs::read_to_string(format!("/proc/{paper}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.chars().next()))
        .flatten();
    assert!(
        matches!(state, None | Some('Z') | Some('X')),
        "the paper run {paper} outlived the campaign ({state:?})\n{err}"
    );
    assert!(shm_of(paper).is_empty(), "{:?}", shm_of(paper));
    assert!(listing(&tmp).is_empty(), "{:?}\n{err}", listing(&tmp));
    assert!(listing(&dir).is_empty(), "{:?}\n{err}", listing(&dir));
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(tmp).unwrap();
}
