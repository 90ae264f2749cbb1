//! A child the engine starts dies with the engine's process, however that
//! process ends: here it is killed with SIGKILL, which runs no destructor.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
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
