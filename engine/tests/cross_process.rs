//! What the process-level standby stands on, across real processes (this
//! test binary started again in a role): a child the engine starts dies
//! with the engine's process however that process ends, the liveness
//! cell in a shared file fences, wakes and outlives a killed primary, and
//! a file-backed ring shows only whole records when its producer is killed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tandem::queue::spsc::{MappedConsumer, MappedProducer};
use tandem::standby::epoch::{LivenessFile, Wake};
use tandem::sys::process::{Child, Exit};

const ROLE: &str = "TANDEM_TEST_PROCESS_ROLE";

fn gone(pid: u32) -> bool {
    // Absent, or a zombie its new parent has yet to reap.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_child_dies_with_the_process_that_started_it_even_under_sigkill() {
    if std::env::var_os(ROLE).is_some() {
        // The middle process: start a grandchild, say its PID, wait to be
        // killed.
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg("sleep 60");
        let c = Child::spawn(cmd).unwrap();
        println!("grandchild {}", c.pid());
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "a_child_dies_with_the_process_that_started_it_even_under_sigkill",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env(ROLE, "middle")
    .stdout(Stdio::piped());
    let mut middle = Child::spawn(cmd).unwrap();
    let out = middle.std_mut().stdout.take().unwrap();
    let grandchild: u32 = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        // libtest prints the test's name on the same line.
        .find_map(|l| l.split("grandchild ").nth(1)?.trim().parse().ok())
        .expect("the middle process names its child");
    assert!(!gone(grandchild), "the grandchild runs");

    let e = middle.kill().unwrap();
    assert_eq!(
        e.exit,
        Exit::Signal {
            signal: libc::SIGKILL,
            core_dumped: false
        }
    );
    let t = Instant::now();
    while !gone(grandchild) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "grandchild {grandchild} outlived its parent"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

const CELL: &str = "TANDEM_TEST_LIVENESS_CELL";

/// `CLOCK_MONOTONIC` nanoseconds: the clock every process of a cell reads.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

const CELL_TEST: &str =
    "the_liveness_cell_fences_wakes_and_outlives_a_killed_primary_across_processes";

fn start(role: &str, cell: &std::path::Path) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", CELL_TEST, "--nocapture", "--test-threads", "1"])
        .env(ROLE, role)
        .env(CELL, cell)
        .stdout(Stdio::null());
    Child::spawn(cmd).unwrap()
}

fn run_role(role: &str) {
    let cell = LivenessFile::open(std::env::var_os(CELL).unwrap()).unwrap();
    let code = match role {
        // Beats its epoch until fenced; exits 10 + the epoch that fenced it.
        "primary" => {
            let epoch = cell.current();
            loop {
                if let Err(f) = cell.beat(epoch, mono_ns()) {
                    break 10 + f.current as i32;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        // Waits for the primary of the current epoch to fail; exits 0 on a
        // reported failure.
        "standby" => {
            let epoch = cell.current();
            match cell.wait_for_failure(epoch, Duration::from_secs(60), mono_ns) {
                Wake::Failed => 0,
                w => {
                    eprintln!("{w:?}");
                    1
                }
            }
        }
        r => panic!("unknown role {r}"),
    };
    std::process::exit(code);
}

const RING_TEST: &str =
    "a_ring_between_processes_loses_or_tears_nothing_when_its_producer_is_killed";

/// Pushes `[seq, !seq]` for ever, from 0, into the ring at `CELL`.
fn produce() -> ! {
    let mut tx = MappedProducer::<[u64; 2]>::open(std::env::var_os(CELL).unwrap()).unwrap();
    let mut seq = 0u64;
    loop {
        match tx.push([seq, !seq]) {
            Ok(()) => seq += 1,
            Err(_) => std::hint::spin_loop(),
        }
    }
}

#[test]
fn a_ring_between_processes_loses_or_tears_nothing_when_its_producer_is_killed() {
    if std::env::var_os(ROLE).is_some() {
        produce();
    }
    let dir = std::env::temp_dir().join(format!("tandem-cross-ring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ring");
    let mut rx = MappedConsumer::<[u64; 2]>::create(&path, 256).unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", RING_TEST, "--nocapture", "--test-threads", "1"])
        .env(ROLE, "producer")
        .env(CELL, &path)
        .stdout(Stdio::null());
    let mut producer = Child::spawn(cmd).unwrap();
    let mut expected = 0u64;
    let take = |rx: &mut MappedConsumer<[u64; 2]>, expected: &mut u64| {
        rx.pop_batch(64, |[seq, check]| {
            assert_eq!((seq, check), (*expected, !*expected), "in order, whole");
            *expected += 1;
        })
    };
    let t = Instant::now();
    while expected < 200_000 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the producer stalled at {expected}"
        );
        take(&mut rx, &mut expected);
    }
    // Killed mid-stream, perhaps between writing a slot and publishing
    // it: what was published is whole and in order, the rest never shows.
    producer.kill().unwrap();
    while take(&mut rx, &mut expected) > 0 {}
    assert_eq!(take(&mut rx, &mut expected), 0, "nothing after the death");
    // SIGKILL runs no destructor: the ring cannot say its producer is
    // gone. Whoever reads it learns that from the process (its pidfd).
    assert!(!rx.is_abandoned());
    drop(rx);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_liveness_cell_fences_wakes_and_outlives_a_killed_primary_across_processes() {
    if let Some(role) = std::env::var_os(ROLE) {
        return run_role(role.to_str().unwrap());
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("tandem-cross-process-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("flatmap-0.live");
    let cell = LivenessFile::create(&path, mono_ns()).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(cell.current(), 1);

    // A primary in another process beats; claiming the epoch here fences it
    // there, and it says which epoch did.
    let created = cell.last_beat();
    let mut primary = start("primary", &path);
    let t = Instant::now();
    while cell.last_beat() == created {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no heartbeat arrived"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(cell.claim(1, mono_ns()), Ok(2));
    assert_eq!(primary.wait().unwrap().exit, Exit::Code(12));

    // A primary killed outright leaves the cell readable: its beat stops,
    // and the stall is found.
    let mut primary = start("primary", &path);
    let before = cell.last_beat();
    while cell.last_beat() == before {
        std::thread::sleep(Duration::from_millis(1));
    }
    primary.kill().unwrap();
    match cell.wait_for_failure(2, Duration::from_millis(50), mono_ns) {
        Wake::Stalled { since } => assert!(since > before),
        w => panic!("{w:?}"),
    }
    assert_eq!(cell.claim(2, mono_ns()), Ok(3));

    // A failure reported here wakes a standby parked in another process.
    let mut standby = start("standby", &path);
    std::thread::sleep(Duration::from_millis(20));
    assert!(cell.report_failure(3));
    assert_eq!(standby.wait().unwrap().exit, Exit::Code(0));

    // Another format, or a half-created file, is refused, not read.
    std::fs::write(dir.join("junk.live"), [0u8; 128]).unwrap();
    let e = LivenessFile::open(dir.join("junk.live")).unwrap_err();
    assert!(e.to_string().contains("not a liveness cell"), "{e}");
    drop(cell);
    std::fs::remove_dir_all(&dir).unwrap();
}
