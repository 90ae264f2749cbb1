//! The checker: a faulted run's output against a clean run's, line by line,
//! as multisets — what was lost, duplicated, changed — on its own code path
//! (it knows nothing of the engine's deduplication, cuts or commits).
//!
//! Both files are read as lines (`\n`-separated, compared byte for byte).
//! Each distinct line is counted in both (by a 128-bit hash); a line the
//! faulted output holds fewer times than the clean one is *lost* that many
//! times, one it holds more times is *duplicated*. A line only the faulted
//! output holds is *changed* when it has the key of a lost line — the same
//! `type` and the same value of the first key field it has (by default
//! `seq`, then `user_id`: the paper pipeline's record and per-user summary
//! lines) — and *unexpected* otherwise. Every difference is also counted
//! by the line's `type` (record, summary …), so that per-key summaries
//! are reported apart.
//!
//! The outputs are untrusted: [`Checker::compare_files`] opens regular
//! files only (a FIFO would block, `/dev/zero` never end) and reads no
//! more than their length when opened; a line longer than [`MAX_LINE`]
//! is an error, not an allocation as large as the file; an output that
//! changes between the two passes is an error, not a panic.
//!
//! ```
//! use tandem_fault_inject::check::Checker;
//!
//! let clean = "{\"type\":\"record\",\"seq\":1,\"v\":1}\n{\"type\":\"record\",\"seq\":2,\"v\":2}\n";
//! let faulted = "{\"type\":\"record\",\"seq\":2,\"v\":3}\n{\"type\":\"record\",\"seq\":1,\"v\":1}\n{\"type\":\"record\",\"seq\":1,\"v\":1}\n";
//! let o = Checker::default().compare(clean.as_bytes(), faulted.as_bytes()).unwrap();
//! assert_eq!((o.lost, o.duplicated, o.changed, o.unexpected), (0, 1, 1, 0));
//! assert!(!o.identical());
//! ```

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use xxhash_rust::xxh3::xxh3_128;

/// The longest line read: 64 MiB (a record or summary line is a few
/// hundred bytes; a file without line breaks is not line-oriented output).
pub const MAX_LINE: usize = 64 << 20;

/// How lines are keyed, and how much is kept to show.
#[derive(Clone, Debug)]
pub struct Checker {
    /// JSON fields naming a line's key, the first present wins.
    pub keys: Vec<String>,
    /// Differences kept as examples (all are counted).
    pub examples: usize,
}

impl Default for Checker {
    fn default() -> Self {
        Checker {
            keys: vec!["seq".into(), "user_id".into()],
            examples: 20,
        }
    }
}

/// One difference between the outputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "what", rename_all = "lowercase")]
pub enum Difference {
    /// A clean line the faulted output lacks (`missing` times).
    Lost {
        /// The line.
        line: String,
        /// How many times fewer.
        missing: u64,
    },
    /// A clean line the faulted output holds `extra` more times.
    Duplicated {
        /// The line.
        line: String,
        /// How many times more.
        extra: u64,
    },
    /// A line with the key of a lost one, but other content.
    Changed {
        /// The clean line.
        clean: String,
        /// The faulted one.
        faulted: String,
    },
    /// A line no clean line resembles.
    Unexpected {
        /// The line.
        line: String,
    },
}

/// Differences of one line type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Lines of this type in the clean output.
    pub clean: u64,
    /// In the faulted output.
    pub faulted: u64,
    /// Lost lines.
    pub lost: u64,
    /// Extra copies of clean lines.
    pub duplicated: u64,
    /// Changed lines.
    pub changed: u64,
    /// Unexpected lines.
    pub unexpected: u64,
}

/// What the comparison found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// Lines of the clean output.
    pub clean_lines: u64,
    /// Lines of the faulted output.
    pub faulted_lines: u64,
    /// Lost lines (a changed line is not counted lost).
    pub lost: u64,
    /// Extra copies of clean lines.
    pub duplicated: u64,
    /// Lines changed.
    pub changed: u64,
    /// Lines no clean line resembles.
    pub unexpected: u64,
    /// The same, by the lines' `type` field (`-` for lines without one).
    pub by_type: BTreeMap<String, Tally>,
    /// Up to [`Checker::examples`] differences.
    pub examples: Vec<Difference>,
    /// The [`Checker::keys`] that some line of either output has as a
    /// top-level field (a key no line has keys nothing: a misspelt one).
    #[serde(skip)]
    pub keys_found: BTreeSet<String>,
}

impl Outcome {
    /// Whether the outputs hold the same lines the same number of times.
    pub fn identical(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.changed == 0 && self.unexpected == 0
    }
}

/// A line's `type` and key, read from its JSON (`None` for a line that is
/// not a JSON object).
fn parse_key(keys: &[String], line: &[u8]) -> (String, Option<String>) {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_slice::<serde_json::Value>(line) else {
        return ("-".into(), None);
    };
    let ty = match m.get("type") {
        Some(serde_json::Value::String(s)) => s.clone(),
        _ => "-".into(),
    };
    let key = keys
        .iter()
        .find_map(|k| m.get(k).map(|v| format!("{k}={v}")));
    (ty, key)
}

/// Only the `type` of a line, cheaply: counted for every line.
fn line_type(line: &[u8]) -> &[u8] {
    const P: &[u8] = b"\"type\":\"";
    let Some(i) = line.windows(P.len()).position(|w| w == P) else {
        return b"-";
    };
    let rest = &line[i + P.len()..];
    let end = rest.iter().position(|&b| b == b'"').unwrap_or(rest.len());
    &rest[..end]
}

/// Whether the JSON object `line` has the top-level field `key` — looked
/// for in the text first, parsed only where the name is there.
fn has_key(line: &[u8], key: &str) -> bool {
    let quoted = format!("\"{key}\"");
    line.windows(quoted.len()).any(|w| w == quoted.as_bytes())
        && matches!(
            serde_json::from_slice::<serde_json::Value>(line),
            Ok(serde_json::Value::Object(m)) if m.contains_key(key)
        )
}

/// Calls `f` on each line of `r` (without its `\n`); returns how many.
fn each_line(r: impl Read, f: impl FnMut(&[u8])) -> io::Result<u64> {
    lines_within(r, MAX_LINE, f)
}

/// [`each_line`] with lines of at most `max` bytes.
fn lines_within(r: impl Read, max: usize, mut f: impl FnMut(&[u8])) -> io::Result<u64> {
    let mut r = BufReader::with_capacity(1 << 20, r);
    let mut line = Vec::new();
    let mut n = 0;
    loop {
        line.clear();
        // At most one byte more than a line may hold, newline included.
        if (&mut r).take(max as u64 + 1).read_until(b'\n', &mut line)? == 0 {
            return Ok(n);
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if line.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "line {} is longer than {max} bytes: not line-oriented output",
                    n + 1
                ),
            ));
        }
        f(&line);
        n += 1;
    }
}

impl Checker {
    /// Compares the files `clean` and `faulted` (regular files, each read
    /// up to its length when opened).
    pub fn compare_files(&self, clean: &Path, faulted: &Path) -> io::Result<Outcome> {
        let open = |p: &Path| {
            tandem::sys::file::open_regular(p, OpenOptions::new().read(true))
                // As long as it was when opened (an output still growing is
                // read as it was); a length of 0 may be a pseudo-file's
                // (`/proc`), whose contents only a read tells: to its end.
                .map(|(f, len)| f.take(if len == 0 { u64::MAX } else { len }))
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        // Opened twice each: counted, then (only if they differ) the
        // differing lines read back.
        self.compare_with(&mut || open(clean), &mut || open(faulted))
    }

    /// Compares two outputs in memory.
    pub fn compare(&self, clean: &[u8], faulted: &[u8]) -> io::Result<Outcome> {
        self.compare_with(&mut || Ok(clean), &mut || Ok(faulted))
    }

    fn compare_with<R: Read>(
        &self,
        clean: &mut dyn FnMut() -> io::Result<R>,
        faulted: &mut dyn FnMut() -> io::Result<R>,
    ) -> io::Result<Outcome> {
        let mut counts: HashMap<u128, (u64, u64)> = HashMap::new();
        let mut out = Outcome::default();
        let mut types: BTreeMap<String, Tally> = BTreeMap::new();
        let ty = |line: &[u8]| String::from_utf8_lossy(line_type(line)).into_owned();
        let mut keys_found = BTreeSet::new();
        let mut find_keys = |l: &[u8]| {
            for k in &self.keys {
                if !keys_found.contains(k) && has_key(l, k) {
                    keys_found.insert(k.clone());
                }
            }
        };
        out.clean_lines = each_line(clean()?, |l| {
            counts.entry(xxh3_128(l)).or_default().0 += 1;
            types.entry(ty(l)).or_default().clean += 1;
            find_keys(l);
        })?;
        out.faulted_lines = each_line(faulted()?, |l| {
            counts.entry(xxh3_128(l)).or_default().1 += 1;
            types.entry(ty(l)).or_default().faulted += 1;
            find_keys(l);
        })?;
        out.keys_found = keys_found;
        let diff: HashMap<u128, (u64, u64)> =
            counts.into_iter().filter(|(_, (c, f))| c != f).collect();
        out.by_type = types;
        if diff.is_empty() {
            return Ok(out);
        }
        // The differing lines' text, from either file.
        let mut text: HashMap<u128, Vec<u8>> = HashMap::new();
        let mut keep = |l: &[u8]| {
            let h = xxh3_128(l);
            if diff.contains_key(&h) && !text.contains_key(&h) {
                text.insert(h, l.to_vec());
            }
        };
        each_line(clean()?, &mut keep)?;
        each_line(faulted()?, &mut keep)?;
        // Every differing line was read in the first pass; one missing in
        // the second means a file changed in between.
        if text.len() < diff.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "an output changed while it was being compared (read twice, it differed)",
            ));
        }
        let mut lost: Vec<(u128, u64)> = Vec::new();
        let mut extra: Vec<u128> = Vec::new();
        for (&h, &(c, f)) in &diff {
            if f < c {
                lost.push((h, c - f));
            } else if c > 0 {
                let line = &text[&h];
                let t = out.by_type.entry(ty(line)).or_default();
                t.duplicated += f - c;
                out.duplicated += f - c;
                self.example(
                    &mut out.examples,
                    Difference::Duplicated {
                        line: String::from_utf8_lossy(line).into_owned(),
                        extra: f - c,
                    },
                );
            } else {
                for _ in 0..f {
                    extra.push(h);
                }
            }
        }
        // Pair extra lines with lost ones of the same key: changed.
        let mut lost_by_key: HashMap<(String, String), Vec<u128>> = HashMap::new();
        let mut lost_left: HashMap<u128, u64> = lost.iter().copied().collect();
        for &(h, n) in &lost {
            if let (t, Some(k)) = parse_key(&self.keys, &text[&h]) {
                for _ in 0..n {
                    lost_by_key
                        .entry((t.clone(), k.clone()))
                        .or_default()
                        .push(h);
                }
            }
        }
        extra.sort_unstable();
        for h in extra {
            let line = &text[&h];
            let (t, key) = parse_key(&self.keys, line);
            let paired = key
                .and_then(|k| lost_by_key.get_mut(&(t.clone(), k)))
                .and_then(|v| v.pop());
            let tally = out.by_type.entry(t).or_default();
            match paired {
                Some(c) => {
                    *lost_left.get_mut(&c).expect("a lost line") -= 1;
                    tally.changed += 1;
                    out.changed += 1;
                    self.example(
                        &mut out.examples,
                        Difference::Changed {
                            clean: String::from_utf8_lossy(&text[&c]).into_owned(),
                            faulted: String::from_utf8_lossy(line).into_owned(),
                        },
                    );
                }
                None => {
                    tally.unexpected += 1;
                    out.unexpected += 1;
                    self.example(
                        &mut out.examples,
                        Difference::Unexpected {
                            line: String::from_utf8_lossy(line).into_owned(),
                        },
                    );
                }
            }
        }
        let mut left: Vec<(u128, u64)> = lost_left.into_iter().filter(|(_, n)| *n > 0).collect();
        left.sort_unstable();
        for (h, n) in left {
            let line = &text[&h];
            out.by_type.entry(ty(line)).or_default().lost += n;
            out.lost += n;
            self.example(
                &mut out.examples,
                Difference::Lost {
                    line: String::from_utf8_lossy(line).into_owned(),
                    missing: n,
                },
            );
        }
        Ok(out)
    }

    fn example(&self, v: &mut Vec<Difference>, d: Difference) {
        if v.len() < self.examples {
            v.push(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, v: u64) -> String {
        format!("{{\"type\":\"record\",\"seq\":{seq},\"v\":{v}}}\n")
    }

    fn sum(user: u64, n: u64) -> String {
        format!("{{\"type\":\"summary\",\"user_id\":{user},\"count\":{n}}}\n")
    }

    fn check(clean: &str, faulted: &str) -> Outcome {
        Checker::default()
            .compare(clean.as_bytes(), faulted.as_bytes())
            .unwrap()
    }

    #[test]
    fn the_same_lines_in_another_order_are_identical() {
        let clean = [rec(1, 1), rec(2, 2), sum(7, 2)].concat();
        let faulted = [sum(7, 2), rec(2, 2), rec(1, 1)].concat();
        let o = check(&clean, &faulted);
        assert!(o.identical(), "{o:?}");
        assert_eq!((o.clean_lines, o.faulted_lines), (3, 3));
        assert_eq!(o.by_type["record"].clean, 2);
        assert_eq!(o.by_type["summary"].faulted, 1);
    }

    #[test]
    fn a_missing_line_is_lost_and_an_extra_copy_duplicated() {
        let clean = [rec(1, 1), rec(2, 2), rec(2, 2), rec(3, 3)].concat();
        let faulted = [rec(1, 1), rec(1, 1), rec(1, 1), rec(2, 2)].concat();
        let o = check(&clean, &faulted);
        assert_eq!(o.lost, 2, "one copy of seq 2 and seq 3: {o:?}");
        assert_eq!(o.duplicated, 2);
        assert_eq!(o.changed + o.unexpected, 0);
        assert!(o.examples.contains(&Difference::Duplicated {
            line: rec(1, 1).trim_end().into(),
            extra: 2
        }));
    }

    #[test]
    fn a_line_with_a_lost_lines_key_is_changed_and_others_unexpected() {
        let clean = [rec(1, 1), rec(2, 2), sum(9, 4)].concat();
        let faulted = [
            rec(1, 1),
            rec(2, 5),
            sum(9, 3),
            rec(77, 7),
            "not json\n".into(),
        ]
        .concat();
        let o = check(&clean, &faulted);
        assert_eq!(o.changed, 2, "{o:?}");
        assert_eq!(o.unexpected, 2);
        assert_eq!(o.lost, 0);
        assert_eq!(o.by_type["summary"].changed, 1);
        assert_eq!(o.by_type["record"].changed, 1);
        assert_eq!(o.by_type["-"].unexpected, 1);
    }

    #[test]
    fn a_summary_counted_twice_is_a_changed_summary_not_a_record_difference() {
        let clean = [rec(1, 1), sum(4, 1)].concat();
        let faulted = [rec(1, 1), sum(4, 2)].concat();
        let o = check(&clean, &faulted);
        assert_eq!(o.by_type["summary"].changed, 1);
        assert_eq!(
            o.by_type["record"],
            Tally {
                clean: 1,
                faulted: 1,
                ..Default::default()
            }
        );
    }

    #[test]
    fn empty_outputs_and_a_missing_last_newline_compare_by_content() {
        assert!(check("", "").identical());
        let o = check(&rec(1, 1), rec(1, 1).trim_end());
        assert!(o.identical(), "{o:?}");
        let o = check(&rec(1, 1), "");
        assert_eq!(o.lost, 1);
    }

    #[test]
    fn examples_are_capped_but_every_difference_counted() {
        let clean: String = (0..100).map(|i| rec(i, i)).collect();
        let c = Checker {
            examples: 3,
            ..Default::default()
        };
        let o = c.compare(clean.as_bytes(), b"").unwrap();
        assert_eq!(o.lost, 100);
        assert_eq!(o.examples.len(), 3);
    }

    #[test]
    fn a_line_longer_than_the_limit_is_an_error_not_an_allocation() {
        let count = |text: &[u8]| lines_within(text, 8, |_| {});
        let e = count(b"12345678\n123456789\n").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(
            e.to_string().contains("line 2 is longer than 8 bytes"),
            "{e}"
        );
        assert!(count(b"123456789").is_err());
        // A line of the limit exactly, newline or not, is a line.
        assert_eq!(count(b"12345678\n12345678").unwrap(), 2);
        assert_eq!(count(b"12345678\n\n").unwrap(), 2);
    }

    #[test]
    fn an_output_that_changes_between_the_passes_is_an_error_not_a_panic() {
        let first = [rec(1, 1), rec(2, 2)].concat();
        let second = [rec(1, 1), rec(2, 9)].concat();
        let mut reads = 0;
        let mut clean = || {
            reads += 1;
            Ok(if reads == 1 {
                first.as_bytes()
            } else {
                second.as_bytes()
            })
        };
        let e = Checker::default()
            .compare_with(&mut clean, &mut || Ok(b"".as_slice()))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("changed while it was being compared"),
            "{e}"
        );
    }

    #[test]
    fn the_keys_some_line_has_are_told_from_those_none_has() {
        let c = Checker {
            keys: vec!["seq".into(), "user_id".into(), "v".into(), "nosuch".into()],
            ..Checker::default()
        };
        // `user_id` only inside a value, `v` only in the faulted output.
        let clean = "{\"seq\":1,\"note\":\"user_id\"}\n";
        let faulted = "{\"seq\":1,\"v\":2}\n[\"nosuch\"]\n";
        let o = c.compare(clean.as_bytes(), faulted.as_bytes()).unwrap();
        let found: Vec<&str> = o.keys_found.iter().map(String::as_str).collect();
        assert_eq!(found, ["seq", "v"]);
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_not_waited_on() {
        let dir = std::env::temp_dir().join(format!("tandem-check-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, fifo) = (dir.join("a"), dir.join("fifo"));
        std::fs::write(&a, rec(1, 1)).unwrap();
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        for other in [&*fifo, Path::new("/dev/zero")] {
            let e = Checker::default().compare_files(&a, other).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn files_are_compared_and_a_missing_one_named() {
        let dir = std::env::temp_dir().join(format!("tandem-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, [rec(1, 1), rec(2, 2)].concat()).unwrap();
        std::fs::write(&b, [rec(2, 2), rec(1, 1)].concat()).unwrap();
        assert!(Checker::default()
            .compare_files(&a, &b)
            .unwrap()
            .identical());
        let e = Checker::default()
            .compare_files(&a, &dir.join("nope"))
            .unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
