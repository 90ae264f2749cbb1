//! What the README shows a user holds when the user does it: its metrics
//! snippet, run as written (with a free port), prints the metric it greps
//! for — it used to `sleep 1` and scrape before the job had attached,
//! printing nothing — and the restart-all line it quotes is the line a
//! run prints.

use std::process::{Command, Stdio};

const README: &str = include_str!("../../README.md");

/// The first ```sh block after the line that contains `marker`.
fn sh_block_after(marker: &str) -> String {
    let at = README
        .find(marker)
        .unwrap_or_else(|| panic!("the README has no `{marker}`"));
    let rest = &README[at..];
    let start = rest.find("```sh\n").expect("a sh block follows") + "```sh\n".len();
    let end = rest[start..].find("```").expect("the block ends");
    rest[start..start + end]
        .lines()
        .map(str::trim_start)
        .collect::<Vec<_>>()
        .join("\n")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_readmes_metrics_snippet_prints_the_metric_it_greps_for() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no curl, which the README's snippet uses");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = sh_block_after("- `--metrics-addr 127.0.0.1:9464`")
        .replace("target/release/paper", env!("CARGO_BIN_EXE_paper"))
        .replace("9464", &free_port().to_string());
    assert!(script.contains("tandem_source_records_total"), "{script}");
    // The run goes on in the background: ended once the snippet has
    // printed (a bound on the wait, for a snippet that never would).
    let out = Command::new("timeout")
        .arg("120")
        .arg("bash")
        .arg("-c")
        .arg(format!("{script}\nkill %1 2>/dev/null; wait"))
        .current_dir(dir.path())
        .env("TMPDIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("tandem_source_records_total{")),
        "the snippet printed: {printed:?}\n{script}"
    );
}

#[test]
fn the_readmes_restart_all_line_is_the_line_a_run_prints() {
    // The line as the README quotes it, its elided figures (`…`) and the
    // checkpoint id (`N`) left to match anything.
    let quoted = {
        let at = README
            .find("its line is `restart-all 1")
            .expect("the quote");
        let rest = &README[at + "its line is `".len()..];
        rest[..rest.find('`').unwrap()]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (head, tail) = quoted.split_once(" … ").expect("figures elided");
    let (before_n, after_n) = tail.split_once(" N").expect("a checkpoint id N");
    let out = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "1000000", "--fault", "panic@flatmap:500000"])
        .args(["--strategy", "restart-all", "--rate", "500000"])
        .args(["--checkpoint-interval-ms", "200"])
        .env("TMPDIR", std::env::temp_dir())
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| l.starts_with("restart-all 1"))
        .unwrap_or_else(|| panic!("no restart-all line in\n{stdout}"));
    assert!(
        line.starts_with(head),
        "{line:?} does not start as {head:?}"
    );
    let from = line
        .find(before_n)
        .unwrap_or_else(|| panic!("{line:?} has no {before_n:?}"));
    let rest = &line[from + before_n.len()..];
    let n: String = rest
        .chars()
        .skip(1)
        .take_while(char::is_ascii_digit)
        .collect();
    let rest = &rest[1 + n.len()..];
    let rest = rest.strip_prefix("none").unwrap_or(rest);
    // Counts of tasks follow the cores: numbers match numbers.
    assert_eq!(
        digits_as_hash(rest),
        digits_as_hash(after_n),
        "{line:?} does not end as the README's"
    );
}

/// `s` with each run of digits as one `#`.
fn digits_as_hash(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('#') {
                out.push('#');
            }
        } else {
            out.push(c);
        }
    }
    out
}
