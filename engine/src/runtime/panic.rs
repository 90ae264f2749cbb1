//! The engine hears of a panic before anything else does.
//!
//! A panic runs the process's panic hook on the panicking thread *before*
//! unwinding reaches the worker's `catch_unwind`; the default hook, with
//! `RUST_BACKTRACE` set, spends tens to hundreds of milliseconds
//! symbolizing a backtrace there — long enough for a heartbeat-based
//! detector to call the failure a stall, and for a standby to wait. So the
//! engine installs (once per process, at the first job start) a hook that
//! first reports the failure of the task the panicking worker is polling —
//! a standby group's primary marks its epoch failed and wakes the standby;
//! any other task fails its attempt — and then calls the hook that was
//! installed before it, with the worker's heartbeat reading "busy, not
//! checked" (a worker printing a backtrace is not stalled: restart-all's
//! watchdog must not answer the panic a second time). On one core a
//! standby shares the panicking worker, so its takeover waits for that
//! hook to return — unless the job asks for [`PanicOutput::Deferred`]:
//! then the engine prints the panic's line itself and hands its backtrace,
//! captured but not resolved, to a printer thread that resolves and prints
//! it, and the worker goes on at once. A hook a program sets later should
//! chain to the one it replaces (as `std::panic::take_hook` allows) to
//! keep this.
//!
//! The worker names the task it polls in a thread-local around each poll;
//! panics elsewhere (other threads, the engine's own setup) pass straight
//! to the previous hook.

use super::task::TaskCtx;
use crate::error::JobError;
use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::{Mutex, Once, OnceLock};

/// Who prints a panic in one of a job's operators
/// ([`crate::RuntimeConfig::panic_output`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PanicOutput {
    /// The hook installed before the engine's prints it, on the panicking
    /// worker: a program's own hook sees every panic. With `RUST_BACKTRACE`
    /// set, the default hook resolves the backtrace's symbols there first
    /// (tens to hundreds of milliseconds); on one core, a standby taking
    /// over shares that worker and waits for it.
    #[default]
    Chained,
    /// The engine prints the panic's first line (thread, location,
    /// message) at once, to stderr, and captures its backtrace as
    /// `RUST_BACKTRACE` asks — without resolving it — for a printer thread
    /// of its own to resolve and print; the worker goes on at once. The
    /// hook installed before the engine's is not called for panics in this
    /// job's operators (it still is for every other panic).
    Deferred,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<TaskCtx>>> = const { RefCell::new(None) };
}

/// The worker polls `ctx`'s task until [`leave`].
#[inline]
pub(crate) fn enter(ctx: &Rc<TaskCtx>) {
    CURRENT.with(|c| *c.borrow_mut() = Some(Rc::clone(ctx)));
}

/// The worker is between task polls.
#[inline]
pub(crate) fn leave() {
    CURRENT.with(|c| *c.borrow_mut() = None);
}

/// The record the operator running on this thread processes now, if any.
pub(crate) fn current_record() -> Option<crate::record::TupleId> {
    CURRENT
        .try_with(|c| c.try_borrow().ok().and_then(|c| c.as_ref()?.record.get()))
        .ok()
        .flatten()
}

/// Installs the engine's panic hook, and the answer to
/// [`crate::operator::current_record`] (once per process).
pub(crate) fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        crate::operator::answer_current_record(current_record);
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| match report(info.payload()) {
            Some(ctx) if ctx.shared.panic_output == PanicOutput::Deferred => deferred(info),
            // The previous hook may symbolize a backtrace for 100+ ms on
            // this worker: busy, not stalled. Its heartbeat reads "busy,
            // not checked" meanwhile, and no standby takes this worker's
            // other primaries for silent (the panicking one is failed
            // already); restart-all's watchdog would otherwise answer the
            // panic a second time, as a stall.
            Some(ctx) => ctx.long(|| previous(info)),
            None => previous(info),
        }));
    });
}

/// Process isolation: the child running the polled task's operators died
/// (`message` says how). Reported at once, as a panic's hook would; said
/// in one line on stderr (the driver's stack says nothing of it); then the
/// task unwinds to its worker like a panic, without the panic hooks.
pub(crate) fn child_died(message: String, stuck: Option<String>) -> ! {
    let died = ProcessDied(message, stuck);
    let _ = report(&died);
    eprintln!("tandem: {}", died.0);
    std::panic::resume_unwind(Box::new(died))
}

/// The payload a child's death unwinds with ([`child_died`]): what ended
/// it, in words ("…: the process was killed by SIGKILL"), and the
/// liveness rule's evidence when its driver killed it as stuck.
pub(crate) struct ProcessDied(pub(crate) String, pub(crate) Option<String>);

/// The failure of `operator`'s `instance` whose unwind carried `payload`:
/// a child process's death as the death it is, anything else as a panic.
pub(crate) fn failure(
    operator: &str,
    instance: usize,
    payload: &(dyn std::any::Any + Send),
) -> JobError {
    match payload.downcast_ref::<ProcessDied>() {
        Some(d) => JobError::OperatorProcessDied {
            operator: operator.to_string(),
            instance,
            how: d.0.clone(),
            stuck: d.1.clone(),
        },
        None => JobError::OperatorPanicked {
            operator: operator.to_string(),
            instance,
            message: panic_message(payload),
        },
    }
}

/// Reports the failure of the task this worker polls, if it polls one,
/// and returns that task's context.
fn report(payload: &(dyn std::any::Any + Send)) -> Option<Rc<TaskCtx>> {
    let ctx = CURRENT
        .try_with(|c| c.try_borrow().ok().and_then(|c| c.clone()))
        .ok()
        .flatten()?;
    let e = failure(&ctx.shared.names[ctx.current_op()], ctx.instance, payload);
    let blame = ctx.blame();
    match ctx.watch.get() {
        Some(w) => {
            let epoch = ctx.epoch.get();
            if epoch != 0 {
                w.primary_panicked(&ctx.shared, epoch, e, blame, ctx.clock.now());
            }
            // A standby's failure is handled when the worker catches it.
        }
        None => {
            ctx.shared.note_fault_tuple(blame);
            ctx.shared.fail(e);
        }
    }
    Some(ctx)
}

/// [`PanicOutput::Deferred`]: the panic's line now, its backtrace from the
/// printer thread.
fn deferred(info: &std::panic::PanicHookInfo<'_>) {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("<unnamed>");
    let message = panic_message(info.payload());
    let at = info
        .location()
        .map_or_else(String::new, |l| format!(" at {l}"));
    let line = format!("thread '{name}' panicked{at}:\n{message}\n");
    // Walking the stack is quick; resolving its symbols is what is slow.
    let trace = Backtrace::capture();
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if trace.status() == BacktraceStatus::Captured {
        let sent = printer()
            .lock()
            .map(|tx| tx.send((line, trace)).is_ok())
            .unwrap_or(false);
        if !sent {
            let _ = writeln!(std::io::stderr(), "(its backtrace could not be printed)");
        }
    }
}

/// The printer thread's inbox, started with the first deferred backtrace.
fn printer() -> &'static Mutex<mpsc::Sender<(String, Backtrace)>> {
    static TX: OnceLock<Mutex<mpsc::Sender<(String, Backtrace)>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(String, Backtrace)>();
        // Should the thread not start, the receiver goes with it: every
        // send fails, and each panic's line alone is printed.
        let _ = std::thread::Builder::new()
            .name("tandem-panic-printer".into())
            .spawn(move || {
                for (line, trace) in rx {
                    // Resolving the symbols happens here, off the worker.
                    let text = format!("stack backtrace of {line}{trace}\n");
                    let _ = std::io::stderr().lock().write_all(text.as_bytes());
                }
            });
        Mutex::new(tx)
    })
}

/// A panic's message: its text, or what a child's death says.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(d) = p.downcast_ref::<ProcessDied>() {
        d.0.clone()
    } else if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
