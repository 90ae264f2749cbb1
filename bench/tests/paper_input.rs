//! `paper --input FILE`: a file of answer records with bad lines of every
//! kind among good ones yields exactly one dead letter per bad line (with
//! its line number and a reason) and exactly the output of the good lines
//! alone — also through a standby's buffer queues with a takeover.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use tandem_bench::paper::Input;

const GOOD: u64 = 3_000;
const LIMIT: usize = 4096;

/// Bad lines, each with what makes it bad.
fn bad_lines(good: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let text = String::from_utf8(good.to_vec()).unwrap();
    let sub = |from: &str, to: &str| {
        assert!(text.contains(from), "{from} in {text}");
        text.replacen(from, to, 1).into_bytes()
    };
    let likes = text.find("\"likes\":").unwrap();
    let likes_end = likes + text[likes..].find([',', '}']).unwrap();
    let with_likes = |v: &str| {
        let mut s = text.clone();
        s.replace_range(likes..likes_end, &format!("\"likes\":{v}"));
        s.into_bytes()
    };
    let mut invalid_utf8 = good.to_vec();
    let at = text.find("\"text\":\"").unwrap() + 8;
    invalid_utf8.splice(at..at, [0xff, 0xfe]);
    let mut huge = text.clone();
    let t = huge.find("\"text\":\"").unwrap() + 8;
    huge.insert_str(t, &"x".repeat(LIMIT * 3));
    vec![
        ("malformed", b"{\"seq\":1,,}".to_vec()),
        ("not json", b"hello world".to_vec()),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("oversized", huge.into_bytes()),
        ("invalid utf-8", invalid_utf8),
        ("wrong type", with_likes("\"ten\"")),
        ("negative", with_likes("-3")),
        ("out of range", with_likes("4294967296")),
        ("fraction", with_likes("1.5")),
        ("missing field", sub("\"answer_id\":", "\"answer_idx\":")),
        ("trailing garbage", format!("{text} x").into_bytes()),
        ("array", format!("[{text}]").into_bytes()),
    ]
}

/// Writes `dir/mixed.jsonl` (good and bad lines, blank lines) and
/// `dir/good.jsonl` (the good lines alone); returns the bad count.
fn files(dir: &Path) -> usize {
    let input = Input::generate(GOOD, 5, 0, 2);
    let bad = bad_lines(input.line(17));
    let (mut mixed, mut good) = (Vec::new(), Vec::new());
    for k in 0..GOOD {
        let line = input.line(k);
        good.extend_from_slice(line);
        good.push(b'\n');
        mixed.extend_from_slice(line);
        mixed.push(b'\n');
        if k % 200 == 7 {
            let (_, b) = &bad[(k / 200) as usize % bad.len()];
            mixed.extend_from_slice(b);
            mixed.extend_from_slice(b"\n\n");
        }
    }
    // Every kind at least once, and a last line without a newline.
    for (_, b) in &bad {
        mixed.extend_from_slice(b);
        mixed.push(b'\n');
    }
    mixed.extend_from_slice(b"   \n");
    mixed.extend_from_slice(b"{\"truncated at the end");
    std::fs::write(dir.join("mixed.jsonl"), &mixed).unwrap();
    std::fs::write(dir.join("good.jsonl"), &good).unwrap();
    let inline = (0..GOOD).filter(|k| k % 200 == 7).count();
    inline + bad.len() + 1
}

fn paper(dir: &Path, input: &str, tag: &str, extra: &[&str]) -> (Vec<String>, serde_json::Value) {
    let out = dir.join(format!("{tag}.jsonl"));
    let report = dir.join(format!("{tag}.json"));
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--input", dir.join(input).to_str().unwrap()])
        .args(["--max-record-bytes", &LIMIT.to_string()])
        .args(["--cores", "2", "--output", out.to_str().unwrap()])
        .args(["--report", report.to_str().unwrap()])
        .args([
            "--run-dir",
            dir.join(format!("{tag}-run")).to_str().unwrap(),
        ])
        .args(extra)
        .output()
        .unwrap();
    common::assert_success(&o, tag);
    let lines = common::sorted_lines(&out);
    let rep: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    (lines, rep)
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-input-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn every_bad_line_is_one_dead_letter_and_every_good_record_arrives() {
    let dir = tempdir("mixed");
    let bad = files(&dir);
    let (reference, rep) = paper(&dir, "good.jsonl", "reference", &[]);
    assert_eq!(rep["dead_letters"], 0);
    assert_eq!(rep["records_in"], GOOD);
    for (tag, extra) in [
        ("plain", vec![]),
        (
            "standby",
            vec![
                "--strategy",
                "bqbs",
                "--standby",
                "flatmap,keyed",
                "--rate",
                "200000",
                "--fault",
                "panic@flatmap:1410",
                "--fault",
                "panic@keyed:2500",
            ],
        ),
    ] {
        let (lines, rep) = paper(&dir, "mixed.jsonl", tag, &extra);
        assert_eq!(rep["dead_letters"], bad as u64, "{tag}");
        assert_eq!(rep["blank_lines"], (bad - 1 - 12) as u64 + 1, "{tag}");
        assert_eq!(lines.len(), reference.len(), "{tag}: line count");
        assert!(lines == reference, "{tag}: the good records' output");
        // One dead letter per bad line, with its line number and reason.
        let path = rep["dead_letter_path"].as_str().unwrap();
        let letters = std::fs::read_to_string(path).unwrap();
        assert_eq!(letters.lines().count(), bad, "{tag}");
        for l in letters.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let reason = v["reason"].as_str().unwrap();
            assert!(reason.starts_with("input line "), "{reason}");
        }
        assert!(letters.contains("over the limit of 4096 bytes"), "{tag}");
        assert!(letters.contains("UTF-8"), "{tag}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_missing_input_is_an_error_naming_it_before_any_work() {
    let dir = tempdir("missing");
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--input", "/nonexistent/answers.jsonl"])
        .args(["--output", dir.join("out.jsonl").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--input /nonexistent/answers.jsonl"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "nothing left behind"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
