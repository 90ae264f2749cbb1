//! The paper pipeline's output is a deterministic function of its input:
//! the same multiset of JSONL lines on 1 or 2 cores, with any parallelism and
//! any chaining; malformed records go to the dead-letter file, counted.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tandem::{Chaining, RuntimeConfig};
use tandem_bench::paper::{self, Input, PaperOptions};

const RECORDS: u64 = 30_000;
const MALFORMED_EVERY: u64 = 997;

fn run(
    input: &Arc<Input>,
    dir: &Path,
    tag: &str,
    cores: usize,
    parallelism: usize,
    chaining: Chaining,
) -> (Vec<String>, u64) {
    let out = dir.join(format!("{tag}.jsonl"));
    let opts = PaperOptions {
        parallelism,
        rate: None,
        output: Some(out.clone()),
        output_mode: paper::OutputMode::Direct,
        standby: Vec::new(),
    };
    let (job, _counts) = paper::build_job(Arc::clone(input), &opts).unwrap();
    let cfg = RuntimeConfig::default()
        .cores(cores)
        .chaining(chaining)
        .ring_capacity(64)
        .run_dir(dir.join(format!("{tag}-run")));
    let report = job.run(&cfg).unwrap();
    paper::merge_output(&out, parallelism, paper::OutputMode::Direct).unwrap();
    // A successful run keeps its dead letters for the user; the test
    // counts them and is done with them.
    if let Some(kept) = report.dead_letter_path.as_ref().and_then(|p| p.parent()) {
        if kept.starts_with(std::env::temp_dir()) && kept.to_string_lossy().contains("deadletters")
        {
            let _ = std::fs::remove_dir_all(kept);
        }
    }
    (common::sorted_lines(&out), report.dead_letters)
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-paper-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn output_is_the_same_multiset_on_one_or_two_cores_and_any_parallelism() {
    let cores = tandem::sys::affinity::available_cores().len().min(2);
    let dir = tempdir();
    let input = Arc::new(Input::generate(RECORDS, 11, MALFORMED_EVERY, 2));
    let (reference, dead) = run(&input, &dir, "c1p1", 1, 1, Chaining::Auto);

    let malformed = RECORDS / MALFORMED_EVERY;
    assert_eq!(dead, malformed, "every malformed record is a dead letter");
    // Records: valid ones minus the filtered tenth; summaries: one per user.
    let records = reference
        .iter()
        .filter(|l| l.contains("\"type\":\"record\""))
        .count() as u64;
    let expected = (0..RECORDS)
        .filter(|s| s % 10 != 9 && s % MALFORMED_EVERY != MALFORMED_EVERY - 1)
        .count() as u64;
    assert_eq!(records, expected);
    let mut per_user: BTreeMap<u64, u64> = BTreeMap::new();
    let mut summed = 0;
    for l in &reference {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if v["type"] == "summary" {
            assert!(
                per_user.insert(v["user_id"].as_u64().unwrap(), 0).is_none(),
                "one summary per user"
            );
            summed += v["count"].as_u64().unwrap();
        } else {
            let level = v["level"].as_u64().unwrap();
            assert!((1..=7).contains(&level), "every record is levelled: {l}");
        }
    }
    assert_eq!(summed, records, "summaries count every record once");

    for (tag, c, p, ch) in [
        ("c2p1", cores, 1, Chaining::Auto),
        ("c2p2", cores, 2, Chaining::Auto),
        ("c1p2", 1, 2, Chaining::Auto),
        ("c2p3never", cores, 3, Chaining::Never),
    ] {
        let (lines, dead) = run(&input, &dir, tag, c, p, ch);
        assert_eq!(dead, malformed, "{tag}");
        assert_eq!(lines.len(), reference.len(), "{tag}: line count");
        assert!(lines == reference, "{tag}: output differs from --cores 1");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
