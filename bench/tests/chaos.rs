//! A small chaos campaign, as CI runs it: 20 random fault schedules per
//! strategy (restart-all, region, bqbs warm, bqbs hot, bqbs with
//! checkpoints) on
//! 100 k records, full rate and throttled, every output checked against the
//! clean run's by the independent checker — not one line lost, duplicated
//! or changed, no run failed or hung.

use std::process::Command;

#[test]
fn twenty_random_schedules_per_strategy_lose_and_duplicate_nothing() {
    let dir = std::env::temp_dir().join(format!("tandem-chaos-test-{}", std::process::id()));
    let report = dir.with_extension("json");
    let o = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args(["--schedules", "20", "--records", "100000", "--seed", "2026"])
        .args(["--quiet", "--report", report.to_str().unwrap()])
        .args(["--dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let strategies = r["strategies"].as_object().unwrap();
    assert_eq!(strategies.len(), 5, "{stdout}");
    let mut fired = 0;
    for (name, t) in strategies {
        assert_eq!(t["schedules"], 20, "{name}");
        for k in ["lost", "duplicated", "changed", "failed"] {
            assert_eq!(t[k], 0, "{name}: {k}\n{stdout}");
        }
        fired += t["faults_fired"].as_u64().unwrap();
        // Faults were answered: takeovers under bqbs, restarts with
        // checkpoints.
        let recoveries = t["takeovers"].as_u64().unwrap() + t["restarts"].as_u64().unwrap();
        assert!(recoveries > 0, "{name}: no recovery ran\n{stdout}");
    }
    assert!(
        fired >= 100,
        "{fired} faults fired in 100 schedules\n{stdout}"
    );
    assert!(r["failing"].as_array().unwrap().is_empty());
    std::fs::remove_file(report).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn random_schedules_under_process_isolation_with_process_deaths_lose_and_duplicate_nothing() {
    let dir = std::env::temp_dir().join(format!("tandem-chaos-proc-{}", std::process::id()));
    let report = dir.with_extension("json");
    let o = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args(["--strategies", "bqbs-process", "--schedules", "12"])
        .args(["--records", "20000", "--seed", "2027", "--max-faults", "3"])
        .args(["--quiet", "--report", report.to_str().unwrap()])
        .args(["--dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let t = &r["strategies"]["bqbs-process"];
    assert_eq!(t["schedules"], 12, "{stdout}");
    for k in ["lost", "duplicated", "changed", "failed"] {
        assert_eq!(t[k], 0, "{k}\n{stdout}");
    }
    assert!(t["takeovers"].as_u64().unwrap() > 0, "{stdout}");
    // Process deaths were among the faults drawn, and were survived.
    assert!(stderr.contains("dies of"), "no process died:\n{stderr}");
    std::fs::remove_file(report).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
