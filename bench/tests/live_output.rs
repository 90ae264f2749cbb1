//! What a run writes beside its report: `--hlog` is an interval log whose
//! intervals hold every latency sample the report counts; `--timeline`
//! has 10 ms buckets whose counts add up to the sink's records and marks
//! each recovery's fault where it happened; `experiments` says what is
//! missing rather than failing halfway.

mod common;

use std::process::Command;

#[test]
fn a_paper_run_logs_every_latency_sample_and_marks_its_fault_on_the_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let (hlog, tl, report) = (
        dir.path().join("l.hlog"),
        dir.path().join("t.json"),
        dir.path().join("r.json"),
    );
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "60000", "--rate", "100000", "--cores", "2"])
        .args(["--strategy", "bqbs", "--fault", "panic@flatmap:30000"])
        .arg("--hlog")
        .arg(&hlog)
        .arg("--timeline")
        .arg(&tl)
        .arg("--report")
        .arg(&report)
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    common::assert_success(&o, "paper");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();

    // The interval log: well formed, every sample once.
    let text = std::fs::read(&hlog).unwrap();
    let mut samples = 0;
    let mut intervals = 0;
    for e in hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&text) {
        if let hdrhistogram::serialization::interval_log::LogEntry::Interval(i) =
            e.expect("a well-formed interval log")
        {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(i.encoded_histogram())
                .unwrap();
            let h: hdrhistogram::Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
                .deserialize(&mut std::io::Cursor::new(bytes))
                .unwrap();
            samples += h.len();
            intervals += 1;
        }
    }
    assert!(intervals >= 1);
    assert_eq!(samples, r["latency_ns"]["samples"].as_u64().unwrap());

    // The timeline: the buckets' counts are the sink's records; the fault
    // is marked where the report says it happened.
    let t: tandem_bench::live::Timeline =
        serde_json::from_slice(&std::fs::read(&tl).unwrap()).unwrap();
    assert!(t.buckets.len() > 20, "0.6 s in 10 ms buckets");
    let counted: f64 = t
        .buckets
        .windows(2)
        .map(|w| w[1].rate * (w[1].t_ms - w[0].t_ms) / 1e3)
        .sum::<f64>()
        + t.buckets[0].rate * t.buckets[0].t_ms / 1e3;
    let sink_records = r["records_out"].as_u64().unwrap() + r["summaries_out"].as_u64().unwrap();
    // (The first bucket's start is the sampler's, a little after the
    // job's: it is counted over its whole width, an overestimate.)
    let slack = t.buckets[0].rate * t.buckets[0].t_ms / 1e3 + 0.01 * sink_records as f64;
    assert!(
        (counted - sink_records as f64).abs() <= slack,
        "buckets count {counted}, the sink {sink_records}"
    );
    assert_eq!(t.faults.len(), 1);
    let at = r["recovery"][0]["fault_at_ms"].as_f64().unwrap();
    assert_eq!((t.faults[0].0, t.faults[0].1.as_str()), (at, "takeover"));
    assert!(at > 0.0 && at < t.buckets.last().unwrap().t_ms);
}

#[test]
fn experiments_without_its_paper_binary_says_how_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .arg("--paper-bin")
        .arg(dir.path().join("missing"))
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--paper-bin") && err.contains("no such file"),
        "{err}"
    );
    assert!(!dir.path().join("out").exists(), "nothing written");

    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(["--profile", "huge"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "a usage error");
}
