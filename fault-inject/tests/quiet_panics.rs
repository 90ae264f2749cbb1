//! `quiet_injected_panics` keeps a panic of the program's own operator code
//! on an engine worker to one line, unless `RUST_BACKTRACE` asks for more.
//! The job runs in a child process (this test binary again), whose
//! standard error is read back.

use std::process::Command;
use tandem::{IterSource, JobBuilder, RuntimeConfig};

const CHILD: &str = "TANDEM_QUIET_PANICS_CHILD";

/// In the child: a job whose `map` panics (no restart strategy: the job
/// fails).
fn child() {
    tandem_fault_inject::quiet_injected_panics();
    let job = JobBuilder::new("quiet");
    job.source("numbers", |_| IterSource((0..1_000u64).map(|n| (n, n))))
        .map("boom", |n: u64| {
            if n == 500 {
                panic!("the user's own bug at {n}");
            }
            n
        })
        .for_each("drop", |_| {});
    let r = job
        .build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(1).pin(false));
    assert!(r.is_err(), "the job fails");
}

fn run_child(backtrace: Option<&str>) -> String {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "a_users_panic_on_a_worker_is_one_line",
        "--nocapture",
    ])
    .env(CHILD, "1");
    match backtrace {
        Some(v) => c.env("RUST_BACKTRACE", v),
        None => c.env_remove("RUST_BACKTRACE"),
    };
    let out = c.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_users_panic_on_a_worker_is_one_line() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let quiet = run_child(None);
    let lines: Vec<&str> = quiet
        .lines()
        .filter(|l| l.contains("the user's own bug"))
        .collect();
    assert_eq!(lines.len(), 1, "{quiet}");
    assert!(
        lines[0].starts_with("thread 'tandem-w") && lines[0].contains("quiet_panics.rs:"),
        "one line, with the thread and the location: {quiet}"
    );
    assert!(!quiet.contains("stack backtrace"), "{quiet}");
    // Asked for, the backtrace comes from the hook installed before.
    let loud = run_child(Some("1"));
    assert!(loud.contains("stack backtrace"), "{loud}");
}
