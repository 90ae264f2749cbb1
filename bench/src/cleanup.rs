//! What a benchmark binary leaves behind: nothing, when it fails or is
//! interrupted.
//!
//! **Leftovers.** Paths a run creates (the staging of its outputs,
//! directories it made for `--run-dir` or `--checkpoint-dir`, its scratch
//! dirs) are registered here as they are made ([`add`], [`create_dir_all`])
//! and removed by [`remove_all`] when the run fails or is interrupted; a
//! run that succeeds keeps them ([`succeeded`]), but for directories it
//! created for the user's flags and left empty. An output renamed into
//! place is never registered: once a run wrote it, it is the user's,
//! whatever comes after.
//!
//! **What killed runs left.** [`main`](crate::cli::main) first sweeps the
//! temp dir and `/dev/shm` of scratch directories whose runs died
//! ([`tandem::sys::scratch::sweep_usual`]), whichever binary made them.
//!
//! **Signals.** [`install`] blocks `SIGINT`, `SIGTERM` and `SIGHUP` in the
//! calling thread — call it first in `main`, so that every thread spawned
//! later (the engine's workers among them) inherits the mask — and waits
//! for them on a thread of its own with `sigwait`. The first signal is
//! only noted ([`signal`]): the binary's main loop polls it, stops the job
//! through the engine's `cancel` (which removes the job's own scratch
//! files: standby mappings, temp checkpoints), removes its leftovers and
//! exits with `128 + signal` (130, 143, 129), printing one line of what it
//! removed and kept. If the main thread has not exited after the grace
//! given to [`install`] (a long blocking step), or a second signal
//! arrives, the signal thread does the same itself and `_exit`s: it
//! removes the registered leftovers and this process's scratch
//! directories (`tandem-<kind>-<pid>-…` in the temp dir and `/dev/shm`) —
//! after waiting, up to their own grace, for the child processes the run
//! registered ([`child`]) to stop and clean up theirs.
//!
//! Note: the mask is inherited across `exec`; a binary that starts child
//! processes must unblock the signals in them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

static SIGNAL: AtomicI32 = AtomicI32::new(0);
static LEFTOVERS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Every directory [`create_dir_all`] created, outermost first.
static CREATED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Child processes running now, by pid: a signal's hard exit waits for
/// them.
static CHILDREN: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// Every leftover removed so far, by whichever thread: the signal
/// thread's last line reports those the main thread removed too.
static REMOVED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn leftovers() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LEFTOVERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes `path` (a file or a whole directory) if the run fails or is
/// interrupted.
pub fn add(path: impl Into<PathBuf>) {
    let p = path.into();
    let mut l = leftovers();
    if !l.contains(&p) {
        l.push(p);
    }
}

/// `path` is the user's now (the run succeeded, or it existed before).
pub fn forget(path: &Path) {
    leftovers().retain(|p| p != path);
}

/// Keeps `path` and every registered directory holding it.
pub fn keep(path: &Path) {
    leftovers().retain(|p| !path.starts_with(p));
}

/// The run succeeded: nothing it made is removed, but for the
/// directories it created that are still empty (innermost first; a
/// directory that holds something keeps the ones above it). Returns
/// those removed.
pub fn succeeded() -> Vec<PathBuf> {
    leftovers().clear();
    let created = std::mem::take(&mut *CREATED.lock().unwrap_or_else(|p| p.into_inner()));
    let mut removed = Vec::new();
    for d in created.iter().rev() {
        if std::fs::remove_dir(d).is_ok() {
            removed.push(d.clone());
        }
    }
    removed
}

/// Creates `dir` and its missing parents, and registers the topmost
/// directory it created (with everything below it) as a leftover.
pub fn create_dir_all(dir: &Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut p = Some(dir);
    while let Some(d) = p {
        if d.as_os_str().is_empty() || std::fs::symlink_metadata(d).is_ok() {
            break;
        }
        missing.push(d.to_path_buf());
        p = d.parent();
    }
    std::fs::create_dir_all(dir)?;
    if let Some(top) = missing.last() {
        add(top.clone());
    }
    let mut created = CREATED.lock().unwrap_or_else(|p| p.into_inner());
    created.extend(missing.into_iter().rev());
    Ok(())
}

/// A child process the run started (`pid`) and must outlive: if a signal
/// ends this process the hard way, it waits for the child first.
pub fn child(pid: u32) {
    CHILDREN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(pid as i32);
}

/// The child `pid` has ended (and been reaped).
pub fn child_ended(pid: u32) {
    CHILDREN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|&c| c != pid as i32);
}

/// Sends `sig` to every registered child and waits until each has ended
/// (not reaped: its parent does that) or `grace` has passed; those still
/// running then are killed. Returns the pids waited for.
fn stop_children(sig: i32, grace: Duration) -> Vec<i32> {
    let pids = CHILDREN.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for &pid in &pids {
        // SAFETY: `kill` reads no memory of ours; `pid` is a child of this
        // process that has not been reaped (its pid is not reused).
        unsafe { libc::kill(pid, sig) };
    }
    let started = std::time::Instant::now();
    let ended = |pid: i32| {
        // SAFETY: an all-zero `siginfo_t` is a valid value of the C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is ours; WNOWAIT leaves the child to be reaped by
        // whoever waits for it.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: `si_pid` is set when waitid reports a child.
        rc != 0 || unsafe { info.si_pid() } != 0
    };
    for &pid in &pids {
        while !ended(pid) {
            if started.elapsed() > grace {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    pids
}

/// Removes every registered leftover that exists; returns those removed.
///
/// The registry stays locked until the last one is gone: a second call
/// (the signal thread's hard exit beside the main thread's cleanup) waits
/// for the first to finish rather than finding the list empty and ending
/// the process while a directory is half removed.
pub fn remove_all() -> Vec<PathBuf> {
    let mut registry = leftovers();
    let list = std::mem::take(&mut *registry);
    let mut removed = Vec::new();
    for p in list {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let r = if m.is_dir() {
            remove_dir_retrying(&p)
        } else {
            std::fs::remove_file(&p)
        };
        if r.is_ok() {
            removed.push(p);
        }
    }
    REMOVED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(removed.iter().cloned());
    drop(registry);
    removed
}

/// `remove_dir_all`, again if a thread of the run created a file in it
/// meanwhile.
fn remove_dir_retrying(p: &Path) -> std::io::Result<()> {
    let mut last = Ok(());
    for _ in 0..5 {
        last = std::fs::remove_dir_all(p);
        if last.is_ok() || !p.exists() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    last
}

/// The signal that interrupted the run, if one did.
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::Acquire) {
        0 => None,
        s => Some(s),
    }
}

/// The exit status of a run stopped by `sig`: `128 + sig`.
pub fn exit_status(sig: i32) -> u8 {
    (128 + sig).clamp(0, 255) as u8
}

/// `SIGINT`, `SIGTERM`, …
pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Paths as one line: `a, b and c`, or `nothing`.
pub fn list(paths: &[PathBuf]) -> String {
    crate::cli::printable(&list_raw(paths))
}

fn list_raw(paths: &[PathBuf]) -> String {
    match paths {
        [] => "nothing".into(),
        [a] => a.display().to_string(),
        [rest @ .., last] => format!(
            "{} and {}",
            rest.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            last.display()
        ),
    }
}

fn sigset() -> libc::sigset_t {
    // SAFETY: `sigemptyset` initialises the set we own; `sigaddset` adds
    // valid signal numbers to it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Takes `SIGINT`, `SIGTERM` and `SIGHUP` over (see the module docs): the
/// main thread has `grace` to stop, clean up and exit after the first.
/// Call it before any thread is spawned.
pub fn install(grace: Duration) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let set = sigset();
        // SAFETY: blocks signals in this thread only; `set` is initialised.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            // The default actions stay: a signal ends the run as before.
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("tandem-signals".into())
            .spawn(move || watch(set, grace));
        if spawned.is_err() {
            // Nobody would take the signals: let them act as before.
            // SAFETY: as above, unblocking in this thread.
            unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
        }
    });
}

/// The signal thread: the first signal is noted; after `grace`, or at a
/// second one, the process ends here.
fn watch(set: libc::sigset_t, grace: Duration) {
    let first = loop {
        let mut sig = 0;
        // SAFETY: `set` is initialised and the signals in it are blocked in
        // every thread (inherited from `install`'s caller).
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            break sig;
        }
    };
    SIGNAL.store(first, Ordering::Release);
    let ts = libc::timespec {
        tv_sec: grace.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: grace.subsec_nanos() as libc::c_long,
    };
    // A second signal or the end of the grace: whichever comes first.
    loop {
        // SAFETY: as above; `ts` and a null info pointer are valid.
        let r = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
        if r >= 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
            break;
        }
    }
    // Children clean up after themselves: they get the signal too, and
    // their grace (a second is added for their exit).
    let waited = stop_children(first, grace + Duration::from_secs(2));
    remove_all();
    // Those the main thread removed count too (it may have been removing
    // them while this thread waited above).
    let mut removed = REMOVED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for dir in [std::env::temp_dir(), PathBuf::from("/dev/shm")] {
        removed.extend(remove_own_scratch(&dir));
    }
    // The last line goes to the terminal, not into the progress bar's pipe.
    crate::progress::restore_stderr();
    eprintln!(
        "interrupted by {}: stopped without waiting for the run{}; removed {}",
        name(first),
        match waited.len() {
            0 => String::new(),
            1 => format!(" (after its child process {} ended)", waited[0]),
            _ => format!(" (after its {} child processes ended)", waited.len()),
        },
        list(&removed)
    );
    // SAFETY: ends the process at once; nothing of ours needs to run.
    unsafe { libc::_exit(exit_status(first) as i32) }
}

/// Removes this process's scratch directories in `dir`
/// (`tandem-<kind>-<pid>-…`, see `tandem::sys::scratch`).
fn remove_own_scratch(dir: &Path) -> Vec<PathBuf> {
    let pid = std::process::id().to_string();
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        // `tandem-<kind>-<pid>-<stamp>-<n>`: the kind may hold a dash
        // (`paper-input`), so the pid is counted from the end.
        let mine = name.starts_with("tandem-") && name.rsplit('-').nth(2) == Some(pid.as_str());
        if mine && e.file_type().is_ok_and(|t| t.is_dir()) && remove_dir_retrying(&e.path()).is_ok()
        {
            removed.push(e.path());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_dir_all_registers_the_topmost_directory_it_made() {
        let root = std::env::temp_dir().join(format!("tandem-cleanup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let deep = root.join("a/b/c");
        create_dir_all(&deep).unwrap();
        assert!(leftovers().contains(&root.join("a")));
        assert!(CREATED.lock().unwrap().ends_with(&[
            root.join("a"),
            root.join("a/b"),
            root.join("a/b/c")
        ]));
        std::fs::write(deep.join("f"), b"x").unwrap();
        let removed = remove_all();
        assert!(removed.contains(&root.join("a")));
        assert!(!root.join("a").exists() && root.exists());
        // An existing directory is not the run's to remove.
        create_dir_all(&root).unwrap();
        assert!(!leftovers().contains(&root));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn lists_read_as_a_sentence() {
        assert_eq!(list(&[]), "nothing");
        assert_eq!(list(&["a".into()]), "a");
        assert_eq!(list(&["a".into(), "b".into(), "c".into()]), "a, b and c");
    }
}
