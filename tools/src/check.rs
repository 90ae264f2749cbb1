//! `tandem check CLEAN FAULTED`: a faulted run's JSONL output against a
//! clean run's, with the fault injector's independent checker
//! ([`tandem_fault_inject::check::Checker`]): both files as multisets of
//! lines, what was lost, duplicated, changed (a line with the key of a lost
//! one) or is unexpected, in total and by the lines' `type`, with examples.
//! Identical: status 0; different: status 1; a file that cannot be read —
//! missing, not a regular file (a FIFO, a device), a line longer than
//! [`MAX_LINE`](tandem_fault_inject::check::MAX_LINE) — or a `--key` that
//! no line of either file has: status 2, naming it (both files are checked
//! before either is read through). Lines are shown with their control
//! characters escaped: they are the runs' output, not the tool's.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use tandem_fault_inject::check::{Checker, Difference, Outcome};

use crate::out::{escaped, json_safe, outln};
use crate::Verdict;

/// The flags of `tandem check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The clean run's output (JSONL, one record or summary a line).
    pub clean: PathBuf,
    /// The faulted run's output.
    pub faulted: PathBuf,
    /// JSON field naming a line's key, to tell a changed line from an
    /// unexpected one; repeat it for fallbacks (the first a line has wins).
    /// Default: `seq`, then `user_id`. A field that no line of either file
    /// has is refused.
    #[arg(long = "key", value_name = "FIELD")]
    pub keys: Vec<String>,
    /// Differences to show as examples (all are counted).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub show: usize,
    /// Print the outcome as JSON (with `identical`) instead of a report.
    #[arg(long)]
    pub json: bool,
}

/// Compares the two files and prints what differs.
pub fn check(args: &CheckArgs, out: &mut dyn Write) -> anyhow::Result<Verdict> {
    readable("clean output", &args.clean)?;
    readable("faulted output", &args.faulted)?;
    if let Some(k) = args.keys.iter().find(|k| k.is_empty()) {
        bail!("--key {k:?}: a key names a JSON field, it cannot be empty");
    }
    let checker = Checker {
        keys: if args.keys.is_empty() {
            Checker::default().keys
        } else {
            args.keys.clone()
        },
        examples: args.show,
    };
    let o = checker.compare_files(&args.clean, &args.faulted)?;
    let lines = o.clean_lines + o.faulted_lines;
    if let Some(k) = args
        .keys
        .iter()
        .find(|k| lines > 0 && !o.keys_found.contains(*k))
    {
        bail!(
            "--key {k:?}: no line of {} or {} has this field",
            args.clean.display(),
            args.faulted.display()
        );
    }
    if args.json {
        let json = Json {
            identical: o.identical(),
            outcome: &o,
        };
        let text = serde_json::to_string_pretty(&json)?;
        writeln!(out, "{}", json_safe(&text))?;
    } else {
        report(args, &o, out)?;
    }
    Ok(if o.identical() {
        Verdict::Pass
    } else {
        Verdict::Fail
    })
}

/// What `--json` prints: the outcome, and whether it is identical.
#[derive(serde::Serialize)]
struct Json<'a> {
    identical: bool,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

/// `path` is a regular file this process can open.
fn readable(what: &str, path: &Path) -> anyhow::Result<()> {
    tandem::sys::file::open_regular(path, OpenOptions::new().read(true))
        .map_err(|e| anyhow!("{what} {}: {e}", path.display()))?;
    Ok(())
}

fn report(args: &CheckArgs, o: &Outcome, out: &mut dyn Write) -> std::io::Result<()> {
    outln!(
        out,
        "clean   {}: {} lines",
        args.clean.display(),
        o.clean_lines
    )?;
    outln!(
        out,
        "faulted {}: {} lines",
        args.faulted.display(),
        o.faulted_lines
    )?;
    let w = o
        .by_type
        .keys()
        .map(|t| escaped(t).chars().count())
        .chain([5])
        .max()
        .unwrap_or(5);
    let head = format!(
        "{:<w$}  {:>10}  {:>10}  {:>8}  {:>10}  {:>8}  {:>10}",
        "type", "clean", "faulted", "lost", "duplicated", "changed", "unexpected"
    );
    outln!(out, "{head}")?;
    for (t, n) in &o.by_type {
        // Escaped before it is padded, so that the columns line up.
        let t = escaped(t);
        let row = format!(
            "{t:<w$}  {:>10}  {:>10}  {:>8}  {:>10}  {:>8}  {:>10}",
            n.clean, n.faulted, n.lost, n.duplicated, n.changed, n.unexpected
        );
        outln!(out, "{row}")?;
    }
    let totals = format!(
        "{} lost, {} duplicated, {} changed, {} unexpected",
        o.lost, o.duplicated, o.changed, o.unexpected
    );
    if o.identical() {
        outln!(out, "identical: {totals}")?;
        return Ok(());
    }
    outln!(out, "DIFFERENT: {totals}")?;
    if o.examples.is_empty() {
        return Ok(());
    }
    // Lines the examples account for, against all that differ.
    let shown: u64 = o
        .examples
        .iter()
        .map(|d| match d {
            Difference::Lost { missing, .. } => *missing,
            Difference::Duplicated { extra, .. } => *extra,
            Difference::Changed { .. } | Difference::Unexpected { .. } => 1,
        })
        .sum();
    if shown < o.lost + o.duplicated + o.changed + o.unexpected {
        outln!(
            out,
            "examples (the first {}; --show N for more):",
            o.examples.len()
        )?;
    } else {
        outln!(out, "examples:")?;
    }
    let line = |out: &mut dyn Write, label: String, text: &str| outln!(out, "  {label:<16} {text}");
    for d in &o.examples {
        match d {
            Difference::Lost { line: l, missing } => line(out, format!("lost (×{missing})"), l)?,
            Difference::Duplicated { line: l, extra } => {
                line(out, format!("duplicated (+{extra})"), l)?
            }
            Difference::Changed { clean, faulted } => {
                line(out, "changed from".into(), clean)?;
                line(out, "          to".into(), faulted)?;
            }
            Difference::Unexpected { line: l } => line(out, "unexpected".into(), l)?,
        }
    }
    Ok(())
}
