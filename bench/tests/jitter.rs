//! `jitter`: its report is consistent with itself, and absurd flags are
//! refused before any spinning, naming the flag.

use std::process::Command;

fn jitter(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_jitter"))
        .args(args)
        .output()
        .expect("run jitter")
}

#[test]
fn the_report_counts_each_gap_once_per_threshold_it_passes() {
    let dir = std::env::temp_dir().join(format!("tandem-jitter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("jitter.json");
    let o = jitter(&[
        "--seconds",
        "1",
        "--cores",
        "1",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(r["seconds"], 1);
    let cores = r["cores"].as_array().unwrap();
    assert_eq!(cores.len(), 1);
    let c = &cores[0];
    let n = |k: &str| c[k].as_u64().unwrap();
    assert!(n("over_1ms") <= n("over_500us") && n("over_500us") <= n("over_100us"));
    assert!(
        n("max_ns") <= n("gaps_ns"),
        "the longest gap is one of those summed"
    );
    assert!(
        n("gaps_ns") <= 1_000_000_000 + n("max_ns"),
        "gaps fit in the run"
    );
    assert_eq!(n("over_100us") == 0, n("max_ns") == 0);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("core") && out.contains("max"), "{out}");
}

#[test]
fn absurd_flags_are_refused_naming_the_flag() {
    for (args, flag) in [
        (vec!["--seconds", "0"], "--seconds"),
        (vec!["--seconds", "3601"], "--seconds"),
        (vec!["--cores", "0"], "--cores"),
        (vec!["--cores", "100000"], "--cores"),
        (vec!["--seconds=-1"], "--seconds"),
    ] {
        let o = jitter(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
