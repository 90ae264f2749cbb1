//! The frame every benchmark binary runs in ([`main`]): signals taken over
//! and leftovers removed ([`crate::cleanup`]), an error printed once on
//! standard error as `error: …` with its causes and never a backtrace
//! (whatever `RUST_BACKTRACE` says), and output that cannot panic —
//! [`outln!`](crate::outln) returns an error when standard output is
//! closed or full (`> /dev/full`), [`errln!`](crate::errln) ignores one on
//! standard error.

use crate::cleanup;
use std::fmt;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// How long the main thread has to stop the job and clean up after a
/// signal before the signal thread does it (see [`crate::cleanup`]).
pub const GRACE: Duration = Duration::from_secs(10);

/// Writes a line to standard output; a failed write (a closed pipe, a full
/// disk) is an `anyhow::Error`, never a panic.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::write_out(format_args!("\n"))
    };
    ($($t:tt)*) => {
        $crate::cli::write_out(format_args!("{}\n", format_args!($($t)*)))
    };
}

/// Writes a line to standard error, ignoring a failure to (there is
/// nowhere left to say it).
#[macro_export]
macro_rules! errln {
    ($($t:tt)*) => {
        $crate::cli::write_err(format_args!("{}\n", format_args!($($t)*)))
    };
}

/// See [`outln!`](crate::outln).
pub fn write_out(args: fmt::Arguments) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::anyhow!("writing to standard output: {e}"))
}

/// See [`errln!`](crate::errln).
pub fn write_err(args: fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Parses the command line of `A` (see [`parse_matches`]).
pub fn parse<A: clap::Parser>() -> A {
    let m = parse_matches(A::command());
    A::from_arg_matches(&m).unwrap_or_else(|e| exit_clap(e))
}

/// Parses the command line: a usage error is clap's message on standard
/// error and status 2; `--help` and `--version` go to standard output, and
/// a failed write there (`> /dev/full`) is an error, status 2, as for any
/// output — not a silent success. A negative number is a value (`--rate
/// -5` is refused naming `--rate`, not taken for an unknown flag `-5`),
/// and what the user typed is echoed with its control characters escaped.
pub fn parse_matches(cmd: clap::Command) -> clap::ArgMatches {
    cmd.mut_args(|a| {
        if a.get_action().takes_values() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .try_get_matches()
    .unwrap_or_else(|e| exit_clap(e))
}

fn exit_clap(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let text = e.render().to_string();
            if let Err(w) = write_out(format_args!("{text}")) {
                write_err(format_args!("error: {w}\n"));
                std::process::exit(2);
            }
            std::process::exit(0)
        }
        _ => {
            // Plain text: the values it quotes are the user's, and a
            // terminal must not take them for its own escapes.
            write_err(format_args!("{}", printable(&e.render().to_string())));
            std::process::exit(e.exit_code())
        }
    }
}

/// `text` with every control character but the newline escaped
/// (`\u{1b}`): what a program prints of what a user typed cannot drive
/// the terminal.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Notes for the line printed when a run is interrupted: what it kept.
static KEPT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Says, if the run is interrupted, that `what` was kept (and why).
pub fn kept(what: String) {
    KEPT.lock().unwrap_or_else(|p| p.into_inner()).push(what);
}

/// Runs a binary's `body` (see the module docs): its exit status on
/// success; on an error, leftovers removed, the error printed and
/// `error_status`; on a signal, leftovers removed, one line saying what was
/// removed and kept, and `128 + signal`.
pub fn main(error_status: u8, body: impl FnOnce() -> anyhow::Result<ExitCode>) -> ExitCode {
    cleanup::install(GRACE);
    // What killed runs of any binary left in the temp dir and /dev/shm.
    // A child of process isolation is part of a live run: it sweeps
    // nothing.
    if !tandem::is_incarnation_process() {
        tandem::sys::scratch::sweep_usual();
    }
    let result = body();
    // A signal that came once the work was done (the body returned Ok)
    // interrupted nothing.
    if let (Some(sig), false) = (cleanup::signal(), result.is_ok()) {
        let removed = cleanup::remove_all();
        let kept = KEPT.lock().unwrap_or_else(|p| p.into_inner()).join("; ");
        errln!(
            "interrupted by {}: stopped; removed its scratch files{}{}",
            cleanup::name(sig),
            if removed.is_empty() {
                String::new()
            } else {
                format!(" and {}", cleanup::list(&removed))
            },
            if kept.is_empty() {
                String::new()
            } else {
                format!("; kept {}", printable(&kept))
            }
        );
        return ExitCode::from(cleanup::exit_status(sig));
    }
    match result {
        Ok(code) => {
            cleanup::succeeded();
            code
        }
        Err(e) => {
            cleanup::remove_all();
            errln!("error: {}", printable(&tandem::error::report(&*e)));
            ExitCode::from(error_status)
        }
    }
}

/// Whether the run was interrupted; for the loops of a binary's body.
pub fn interrupted() -> bool {
    cleanup::signal().is_some()
}

/// An error if the run was interrupted by a signal: `?` it in a binary's
/// loops (a step of a second or less between two checks), and the frame
/// ([`main`]) exits `128 + signal` with its line.
pub fn check_interrupted() -> anyhow::Result<()> {
    anyhow::ensure!(!interrupted(), "interrupted");
    Ok(())
}

/// Runs `job` on `config` to its end, as [`join_job`] joins it.
pub fn run_job(
    job: tandem::Job,
    config: &tandem::RuntimeConfig,
) -> anyhow::Result<tandem::JobReport> {
    join_job(job.start(config)?)
}

/// Waits for the job `handle` runs; a signal that interrupts the run
/// meanwhile cancels it (its scratch files go with it) and makes this an
/// error, "interrupted", for the frame ([`main`]) to exit `128 + signal`.
pub fn join_job(handle: tandem::JobHandle) -> anyhow::Result<tandem::JobReport> {
    let mut cancelled = false;
    while !handle.is_finished() {
        if !cancelled && interrupted() {
            handle.cancel();
            cancelled = true;
        }
        // A look every 20 ms: a signal is answered at once, and the job's
        // cores see no more of this thread than 50 wake-ups a second.
        std::thread::sleep(Duration::from_millis(20));
    }
    let joined = handle.join();
    check_interrupted()?;
    Ok(joined?)
}

/// How a child process this run waited for ended.
#[derive(Debug)]
pub enum Waited {
    /// It exited by itself.
    Exited(std::process::ExitStatus),
    /// It was still running past the timeout, and was stopped (`SIGTERM`,
    /// then killed after [`GRACE`] and two seconds).
    TimedOut,
}

/// Waits for `child`, a process this run started, at most `timeout`: a
/// signal that interrupts the run meanwhile is passed on to it (it stops
/// and cleans up as this process does; killed after [`GRACE`] and two
/// seconds if it does not), and makes this an error, "interrupted". While
/// it runs, a signal's hard exit waits for it ([`cleanup::child`]).
pub fn wait_child(
    child: &mut std::process::Child,
    timeout: Option<Duration>,
) -> anyhow::Result<Waited> {
    cleanup::child(child.id());
    let started = std::time::Instant::now();
    let waited = (|| loop {
        if let Some(s) = child.try_wait()? {
            return Ok(Waited::Exited(s));
        }
        let sig = cleanup::signal();
        let late = timeout.is_some_and(|t| started.elapsed() > t);
        if sig.is_some() || late {
            stop_child(child, sig.unwrap_or(libc::SIGTERM))?;
            anyhow::ensure!(sig.is_none(), "interrupted");
            return Ok(Waited::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(10));
    })();
    cleanup::child_ended(child.id());
    waited
}

/// Sends `sig` to `child` and waits until it has ended, killing it after
/// [`GRACE`] and two seconds.
fn stop_child(child: &mut std::process::Child, sig: i32) -> std::io::Result<()> {
    // SAFETY: `kill` reads no memory of ours; the child has not been
    // reaped, so its pid is its own.
    unsafe { libc::kill(child.id() as i32, sig) };
    let waited = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if waited.elapsed() > GRACE + Duration::from_secs(2) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Raises its flag when dropped — a thread that ends early (an error, a
/// signal, a panic unwinding) tells the threads that wait on it — unless
/// disarmed first (the thread did all its work).
pub struct RaiseOnDrop<'a>(&'a std::sync::atomic::AtomicBool, bool);

impl<'a> RaiseOnDrop<'a> {
    /// Raises `flag` when dropped.
    pub fn armed(flag: &'a std::sync::atomic::AtomicBool) -> Self {
        RaiseOnDrop(flag, true)
    }

    /// Drops without raising the flag.
    pub fn disarm(&mut self) {
        self.1 = false;
    }
}

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}
