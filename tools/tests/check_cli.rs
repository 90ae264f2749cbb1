//! `tandem check CLEAN FAULTED` on crafted outputs: the same lines in
//! another order are identical (status 0); a lost, a duplicated or a
//! changed line is a difference (status 1) with its counts printed; a
//! missing file is an error naming it (status 2).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh directory for one test, removed when it ends.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let d =
            std::env::temp_dir().join(format!("tandem-check-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn file(&self, name: &str, lines: &[String]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, lines.concat()).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rec(seq: u64, v: u64) -> String {
    format!("{{\"type\":\"record\",\"seq\":{seq},\"v\":{v}}}\n")
}

fn sum(user: u64, n: u64) -> String {
    format!("{{\"type\":\"summary\",\"user_id\":{user},\"count\":{n}}}\n")
}

/// Runs `tandem check`: (status, stdout, stderr).
fn check(clean: &Path, faulted: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .arg("check")
        .arg(clean)
        .arg(faulted)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn clean_output() -> Vec<String> {
    vec![rec(1, 1), rec(2, 2), rec(3, 3), sum(7, 2), sum(8, 1)]
}

#[test]
fn the_same_lines_in_another_order_are_identical_and_exit_0() {
    let d = Dir::new("same");
    let clean = d.file("clean.jsonl", &clean_output());
    let mut lines = clean_output();
    lines.reverse();
    let faulted = d.file("faulted.jsonl", &lines);
    let (code, out, err) = check(&clean, &faulted, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(": 5 lines"), "{out}");
    assert!(
        out.contains("identical: 0 lost, 0 duplicated, 0 changed, 0 unexpected"),
        "{out}"
    );
    assert!(out.contains("record "), "counts by type: {out}");
    assert!(out.contains("summary "), "counts by type: {out}");
}

#[test]
fn a_lost_line_exits_1_and_is_counted_and_shown() {
    let d = Dir::new("lost");
    let clean = d.file("clean.jsonl", &clean_output());
    let mut lines = clean_output();
    lines.remove(1);
    let faulted = d.file("faulted.jsonl", &lines);
    let (code, out, err) = check(&clean, &faulted, &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("DIFFERENT: 1 lost, 0 duplicated, 0 changed, 0 unexpected"),
        "{out}"
    );
    assert!(out.contains("4 lines"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("lost (×1)") && l.contains(rec(2, 2).trim_end())),
        "the lost line as an example: {out}"
    );
}

#[test]
fn a_duplicated_line_exits_1_and_is_counted() {
    let d = Dir::new("dup");
    let clean = d.file("clean.jsonl", &clean_output());
    let mut lines = clean_output();
    lines.push(rec(3, 3));
    lines.push(rec(3, 3));
    let faulted = d.file("faulted.jsonl", &lines);
    let (code, out, err) = check(&clean, &faulted, &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("DIFFERENT: 0 lost, 2 duplicated, 0 changed, 0 unexpected"),
        "{out}"
    );
    assert!(out.contains("duplicated (+2)"), "{out}");
}

#[test]
fn a_changed_summary_exits_1_counted_under_its_type() {
    let d = Dir::new("changed");
    let clean = d.file("clean.jsonl", &clean_output());
    let mut lines = clean_output();
    lines[3] = sum(7, 3);
    let faulted = d.file("faulted.jsonl", &lines);
    let (code, out, err) = check(&clean, &faulted, &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("DIFFERENT: 0 lost, 0 duplicated, 1 changed, 0 unexpected"),
        "{out}"
    );
    // type  clean  faulted  lost  duplicated  changed  unexpected
    let summary: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("summary "))
        .expect("a summary row")
        .split_whitespace()
        .collect();
    assert_eq!(summary, ["summary", "2", "2", "0", "0", "1", "0"], "{out}");
    assert!(out.contains(sum(7, 2).trim_end()) && out.contains(sum(7, 3).trim_end()));

    // Keyed on a field whose value changed with it, the changed line is
    // unexpected (and its clean line lost).
    let (code, out, _) = check(&clean, &faulted, &["--key", "count"]);
    assert_eq!(code, Some(1));
    assert!(
        out.contains("DIFFERENT: 1 lost, 0 duplicated, 0 changed, 1 unexpected"),
        "{out}"
    );
}

#[test]
fn json_output_holds_the_outcome_and_show_caps_the_examples() {
    let d = Dir::new("json");
    let clean = d.file("clean.jsonl", &clean_output());
    let faulted = d.file("faulted.jsonl", &[rec(9, 9)]);
    let (code, out, err) = check(&clean, &faulted, &["--json", "--show", "2"]);
    assert_eq!(code, Some(1), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["identical"], false);
    assert_eq!(v["clean_lines"], 5);
    assert_eq!(v["faulted_lines"], 1);
    assert_eq!(v["lost"], 5);
    assert_eq!(v["unexpected"], 1);
    assert_eq!(v["by_type"]["summary"]["lost"], 2);
    assert_eq!(v["examples"].as_array().unwrap().len(), 2);
}

#[test]
fn a_missing_file_exits_2_naming_it() {
    let d = Dir::new("missing");
    let clean = d.file("clean.jsonl", &clean_output());
    let nope = d.0.join("no-such-output.jsonl");
    for (a, b) in [(&clean, &nope), (&nope, &clean)] {
        let (code, out, err) = check(a, b, &[]);
        assert_eq!(code, Some(2), "{out}{err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains("no-such-output.jsonl"), "{err}");
        assert_eq!(err.lines().count(), 1, "printed once: {err}");
        assert!(out.is_empty(), "nothing compared: {out}");
    }
}

/// A pseudo-file, whose length the system gives as 0 (`/proc`), is read
/// for what a read returns: it used to count as empty, so that two
/// different ones compared identical.
#[test]
fn a_pseudo_file_is_read_to_its_end_not_taken_as_empty() {
    let version = Path::new("/proc/version");
    let ostype = Path::new("/proc/sys/kernel/ostype");
    let (code, out, err) = check(version, version, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("/proc/version: 1 lines"), "{out}");
    let (code, out, err) = check(version, ostype, &[]);
    assert_eq!(code, Some(1), "two different files differ: {out}{err}");
}
