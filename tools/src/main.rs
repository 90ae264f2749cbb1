//! `tandem`: the command-line tool around the engine.
//!
//! This file owns the command line (its flags and their help), the exit
//! status and how errors are printed; each command lives in its own
//! module: [`info`], [`snapshot`] (`ls`, `inspect`, `verify`), [`bq`]
//! (`inspect`) and [`check`] (a faulted run's output against a clean
//! run's). Commands write to an [`out::Out`] and return a [`Verdict`].
//!
//! Exit status: 0 when everything looked at is sound (or identical), 1 when
//! a command found damage or a difference (after printing what it found),
//! 2 on an error (a missing file, an unreadable directory, a bad flag, a
//! standard output that cannot be written — `--help` and `--version`
//! included —, a `nats dump` whose reader went away or whose server does
//! not speak NATS), printed once on standard error as `error: …`, never
//! with a backtrace, its control characters escaped.

mod bq;
mod check;
mod info;
mod out;
mod snapshot;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tandem::sys::output::OutputFile;

use clap::{Parser, Subcommand};

/// Tandem's command-line tool.
///
/// Exit status: 0 when everything looked at is sound, 1 when a command
/// found damage or a difference, 2 on an error.
#[derive(Parser, Debug)]
#[command(name = "tandem", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Shows what this machine offers the engine: cores, locked-memory limit,
    /// kernel.
    Info,
    /// Lists, inspects and verifies checkpoints and savepoints.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Inspects buffer queues (the standby's tuple log).
    #[command(subcommand)]
    Bq(BqCommand),
    /// Compares a faulted run's JSONL output with a clean run's, as
    /// multisets of lines: what was lost, duplicated, changed or is
    /// unexpected, in total and by line `type`; exits with status 1 when
    /// they differ.
    Check(check::CheckArgs),
    /// NATS JetStream: streams a group reads and writes.
    #[command(subcommand)]
    Nats(NatsCommand),
}

#[derive(Subcommand, Debug)]
enum NatsCommand {
    /// Writes every message of a stream (as it stands when the dump
    /// starts), one payload a line, in stream order; partition end markers
    /// are left out.
    Dump {
        /// nats://HOST:PORT/STREAM
        url: String,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Deletes what a group left in its checkpoint store (an outage can
    /// leave objects behind): every finished part's checkpoints and
    /// staged epochs; a part still running is only counted.
    Gc {
        /// The group's --checkpoint-store: nats://HOST:PORT/BUCKET
        url: String,
        /// The group's name.
        group: String,
        /// Only say what would be deleted.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand, Debug)]
enum BqCommand {
    /// Prints a buffer queue's header, position and ID range, occupancy,
    /// reader cursors and its first and last entries, and validates it;
    /// exits with status 1 when it is damaged.
    Inspect {
        /// The buffer queue file.
        file: PathBuf,
        /// Entries to show from each end.
        #[arg(long, default_value_t = 3)]
        entries: u64,
    },
}

#[derive(Subcommand, Debug)]
enum SnapshotCommand {
    /// Lists the published checkpoints and savepoints of a store directory
    /// (from their manifests: ids, sizes, operators, positions, checksums)
    /// and any unpublished leftovers.
    Ls {
        /// The store directory (or a savepoint directory).
        dir: PathBuf,
    },
    /// Shows a snapshot file's header (and whether its checksum holds), a
    /// manifest, a savepoint directory or every manifest of a store, with
    /// every file verified; exits with status 1 when any of it is corrupt.
    Inspect {
        /// A snapshot file, a manifest (`*.json`), a savepoint directory or
        /// a store directory.
        path: PathBuf,
    },
    /// Verifies every file of every checkpoint and savepoint in a store (or
    /// one savepoint directory); exits with status 1 on any corruption.
    Verify {
        /// The store directory (or a savepoint directory).
        dir: PathBuf,
    },
}

/// What a command found in what it looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Sound (or identical): exit status 0.
    Pass,
    /// Damaged (or different), and printed: exit status 1.
    Fail,
}

impl Verdict {
    /// `Fail` when `problems` is not zero.
    fn of_problems(problems: usize) -> Self {
        if problems == 0 {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    }
}

fn run(command: Command, out: &mut out::Out) -> anyhow::Result<Verdict> {
    match command {
        Command::Info => info::info(out),
        Command::Bq(BqCommand::Inspect { file, entries }) => bq::inspect(&file, entries, out),
        Command::Snapshot(SnapshotCommand::Ls { dir }) => snapshot::ls(&dir, out),
        Command::Snapshot(SnapshotCommand::Inspect { path }) => snapshot::inspect(&path, out),
        Command::Snapshot(SnapshotCommand::Verify { dir }) => snapshot::verify(&dir, out),
        Command::Check(args) => check::check(&args, out),
        Command::Nats(NatsCommand::Dump { url, out: file }) => {
            nats_dump(&url, file.as_deref(), out)
        }
        Command::Nats(NatsCommand::Gc {
            url,
            group,
            dry_run,
        }) => nats_gc(&url, &group, dry_run, out),
    }
}

/// `tandem nats gc`: one line per part of the group in the store.
fn nats_gc(url: &str, group: &str, dry_run: bool, out: &mut out::Out) -> anyhow::Result<Verdict> {
    let url: tandem_nats::NatsUrl = url.parse()?;
    anyhow::ensure!(
        !group.is_empty()
            && group
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
        "GROUP must be letters, digits, '_' or '-'"
    );
    let client = tandem_nats::Client::connect_guarded(&url.server, Duration::from_secs(10))?;
    let store = tandem_nats::store::CheckpointStore::open(&client, &url.name, 1)?;
    let parts = client.block_checked(store.gc(group, dry_run))?;
    let mut w = out.strict();
    if parts.is_empty() {
        writeln!(w, "{group}: nothing in {url}")?;
    }
    for p in &parts {
        let state = match (p.finished, p.has_pointer) {
            (true, true) => "finished",
            (true, false) => "no pointer",
            (false, _) => "not finished",
        };
        let done = if !p.finished {
            "left as it is".to_string()
        } else if dry_run {
            format!(
                "{} objects and its staged epochs would be deleted",
                p.objects
            )
        } else {
            format!("{} objects and its staged epochs deleted", p.removed)
        };
        writeln!(
            w,
            "{group}/{}: {state}, {} objects: {done}",
            p.part, p.objects
        )?;
    }
    Ok(Verdict::Pass)
}

/// `tandem nats dump`: the lines, and their count on standard error.
///
/// Unlike the other commands', a dump's output is its whole result: a
/// reader that went away (`| head`) leaves it incomplete, which is an
/// error, not a quiet end. `--out` is checked before connecting (a FIFO or
/// a device is refused by name, unopened) and replaced only once the dump
/// is complete: a failed dump leaves the file as it was
/// ([`tandem::sys::output`]). What the server sends is bounded by the
/// client's guard ([`tandem_nats::guard`]).
fn nats_dump(url: &str, file: Option<&Path>, out: &mut out::Out) -> anyhow::Result<Verdict> {
    use tandem_nats::{stream::dump, Error};
    let url: tandem_nats::NatsUrl = url.parse()?;
    let target = file
        .map(OutputFile::check)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--out {e}"))?;
    let client = tandem_nats::Client::connect_guarded(&url.server, Duration::from_secs(10))?;
    let lines = match target {
        Some(target) => {
            // A write that failed names the file; the dump's other errors
            // are not about it.
            let named = |e: Error| match e {
                Error::Output { .. } => {
                    anyhow::Error::from(e).context(target.path().display().to_string())
                }
                e => e.into(),
            };
            let mut w = std::io::BufWriter::new(target.stage()?);
            let n = dump(&client, &url.name, &mut w).map_err(named)?;
            let staged = w.into_inner().map_err(|e| {
                named(Error::Output {
                    lines: n,
                    source: e.into_error(),
                })
            })?;
            staged.commit()?;
            n
        }
        None => {
            let mut w = out.strict();
            let n = dump(&client, &url.name, &mut w).and_then(|n| {
                w.flush()
                    .map(|()| n)
                    .map_err(|source| Error::Output { lines: n, source })
            });
            match n {
                Err(Error::Output { lines, source })
                    if source.kind() == std::io::ErrorKind::BrokenPipe =>
                {
                    anyhow::bail!(
                        "standard output closed after {lines} lines: the dump of {url} is incomplete"
                    )
                }
                n => n?,
            }
        }
    };
    let _ = writeln!(std::io::stderr(), "{lines} messages from {url}");
    Ok(Verdict::Pass)
}

fn main() -> ExitCode {
    // What killed runs of any Tandem binary left in the temp directory and
    // /dev/shm (only what no live process holds: `tandem::sys::scratch`).
    let _ = tandem::sys::scratch::sweep_usual();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e),
    };
    let mut out = out::Out::stdout();
    let result = run(cli.command, &mut out).and_then(|v| {
        out.flush()?;
        Ok(v)
    });
    match result {
        Ok(Verdict::Pass) => ExitCode::SUCCESS,
        Ok(Verdict::Fail) => ExitCode::from(1),
        Err(e) => {
            let _ = out.flush();
            error(&*e)
        }
    }
}

/// Prints `e` once on standard error as `error: …` (each line's control
/// characters escaped: messages quote paths and names read from files);
/// status 2.
fn error(e: &(dyn std::error::Error + 'static)) -> ExitCode {
    let text = tandem::error::report(e);
    let lines: Vec<_> = text.lines().map(out::escaped).collect();
    // Not `eprintln!`: a closed standard error is no reason to panic.
    let _ = writeln!(std::io::stderr(), "error: {}", lines.join("\n"));
    ExitCode::from(2)
}

/// What clap's `exit` does — usage errors on standard error, status 2;
/// `--help` and `--version` on standard output, status 0 — except that
/// help or a version that cannot be written is an error, not a success.
fn clap_exit(e: &clap::Error) -> ExitCode {
    let to_stdout = !e.use_stderr();
    let printed = e.print().and_then(|()| {
        if to_stdout {
            std::io::stdout().flush()
        } else {
            Ok(())
        }
    });
    match printed {
        // A reader gone early ends the output quietly, as in `out`.
        Err(w) if to_stdout && w.kind() != std::io::ErrorKind::BrokenPipe => {
            let w = std::io::Error::new(w.kind(), format!("writing to standard output: {w}"));
            error(&w)
        }
        _ => ExitCode::from(e.exit_code() as u8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_prints_each_cause_once_when_it_adds_to_the_message() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::from(io).context("x.snap: open: gone");
        assert_eq!(tandem::error::report(&*e), "x.snap: open: gone");
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::from(io).context("opening x.bq");
        assert_eq!(
            tandem::error::report(&*e),
            "opening x.bq\n  caused by: gone"
        );
    }

    #[test]
    fn the_command_line_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
