//! Child processes the engine starts, and never leaves behind.
//!
//! A [`Child`] is a process started from [`std::process::Command`] with
//! three guarantees the standard library does not give:
//!
//! - **It dies with this process.** Its parent-death signal is `SIGKILL`
//!   (`PR_SET_PDEATHSIG`). Linux sends that signal when the *thread* that
//!   forked the child ends, not the process, so every child is forked by
//!   one process-wide spawner thread that lives as long as the process: a
//!   child started from a short-lived thread does not die with the thread.
//!   A parent that died between `fork` and `prctl` is caught by comparing
//!   `getppid` with the parent's PID, and the spawn fails.
//! - **Its exit is a file descriptor.** A `pidfd` (Linux 5.3) becomes
//!   readable when the child exits, so a supervisor can `poll` it with its
//!   other work ([`Child::wait_any`]), and signals sent through it can never
//!   reach another process that reused the PID.
//! - **Its end is reported, with its cost.** [`Child::try_wait`] reaps it
//!   with `wait4` and gives the exit code or the signal that ended it, its
//!   CPU time and its peak resident set size. Dropping a `Child` that still
//!   runs kills it and reaps it: no child outlives its handle, and none is
//!   left a zombie.
//!
//! The child's standard streams are what the `Command` says; the std child
//! is kept (for its pipes) but never waited on through std.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::mpsc::{self, Sender, SyncSender};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It called `exit` with this code.
    Code(i32),
    /// A signal ended it.
    Signal {
        /// The signal's number (`libc::SIGKILL`, …).
        signal: i32,
        /// Whether it dumped core.
        core_dumped: bool,
    },
}

impl Exit {
    /// Whether it exited with code 0.
    pub fn success(&self) -> bool {
        *self == Exit::Code(0)
    }

    fn from_status(status: libc::c_int) -> Exit {
        if libc::WIFSIGNALED(status) {
            Exit::Signal {
                signal: libc::WTERMSIG(status),
                core_dumped: libc::WCOREDUMP(status),
            }
        } else {
            Exit::Code(libc::WEXITSTATUS(status))
        }
    }
}

/// The usual name of a signal (`SIGKILL`), or its number.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal {
                signal,
                core_dumped,
            } => {
                write!(f, "killed by {}", signal_name(*signal))?;
                if *core_dumped {
                    f.write_str(" (core dumped)")?;
                }
                Ok(())
            }
        }
    }
}

/// A child's end and what it cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildExit {
    /// How it ended.
    pub exit: Exit,
    /// User and system CPU time it used (its own children's not included).
    pub cpu: Duration,
    /// Its peak resident set size, in bytes.
    pub peak_rss_bytes: u64,
}

/// A child process (see the [module docs](self)).
pub struct Child {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    /// Kept for its standard streams; never waited on.
    std: std::process::Child,
    exit: Option<ChildExit>,
}

impl fmt::Debug for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Child")
            .field("pid", &self.pid)
            .field("exit", &self.exit)
            .finish()
    }
}

/// A command, whether the child arms its parent-death signal itself, and
/// where the answer goes.
type SpawnRequest = (Command, bool, SyncSender<io::Result<std::process::Child>>);

/// The process-wide spawner thread (see the module docs), started on first
/// use.
fn spawner() -> io::Result<Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Option<Mutex<Sender<SpawnRequest>>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("tandem-spawn".into())
            .spawn(move || {
                unpin_this_thread();
                for (mut cmd, arms_itself, reply) in rx {
                    let _ = reply.send(if arms_itself {
                        cmd.spawn()
                    } else {
                        spawn_here(&mut cmd)
                    });
                }
            })
            .ok()?;
        Some(Mutex::new(tx))
    });
    match tx {
        Some(tx) => Ok(tx.lock().unwrap_or_else(|p| p.into_inner()).clone()),
        None => Err(io::Error::other(
            "could not start the thread that starts child processes",
        )),
    }
}

/// Lets this thread run on every CPU the process may use: the spawner may
/// be started from a worker pinned to one core, and its children would
/// inherit the pin (a child that counts its cores would count one).
fn unpin_this_thread() {
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set; `CPU_SET` writes
    // bits inside it; `sched_setaffinity` reads `size_of` bytes of it. The
    // kernel keeps only the CPUs the process's cpuset allows.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn spawn_here(cmd: &mut Command) -> io::Result<std::process::Child> {
    // SAFETY: `getpid` has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before `exec` and calls
    // only `prctl` and `getppid`, both async-signal-safe; it allocates
    // nothing (the error is built from an errno).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before the signal was armed: it will never
            // come, so the child must not start.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    };
    cmd.spawn()
}

impl Child {
    /// Starts `cmd` as a child that dies with this process (see the module
    /// docs).
    pub fn spawn(cmd: Command) -> io::Result<Child> {
        Self::start(cmd, false)
    }

    /// Starts `cmd` as [`Child::spawn`] does, for a program that arms its
    /// own parent-death signal first thing ([`die_with_parent`]): with no
    /// code to run between `fork` and `exec`, the standard library starts
    /// it with `posix_spawn` (a `vfork`), which does not copy this
    /// process's page tables — `fork` of a process holding gigabytes takes
    /// tens of milliseconds, during which the thread that asked waits.
    pub fn spawn_arming_itself(cmd: Command) -> io::Result<Child> {
        Self::start(cmd, true)
    }

    fn start(cmd: Command, arms_itself: bool) -> io::Result<Child> {
        let program = cmd.get_program().to_string_lossy().into_owned();
        let (reply, answer) = mpsc::sync_channel(1);
        spawner()?
            .send((cmd, arms_itself, reply))
            .map_err(|_| io::Error::other("the spawner thread is gone"))?;
        let mut std = answer
            .recv()
            .map_err(|_| io::Error::other("the spawner thread is gone"))?
            .map_err(|e| io::Error::new(e.kind(), format!("starting {program}: {e}")))?;
        let pid = std.id() as libc::pid_t;
        // SAFETY: `pidfd_open` takes a PID and flags and returns a new file
        // descriptor or -1. The child cannot have been reaped (only this
        // handle waits for it), so the PID is still its own even if it
        // already exited.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            // No handle to watch it with: it must not run unwatched.
            let _ = std.kill();
            let _ = std.wait();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "pidfd_open of child {pid} ({program}): {e} (Linux 5.3 or newer is needed)"
                ),
            ));
        }
        Ok(Child {
            pid,
            // SAFETY: `fd` is a new descriptor this process owns alone.
            pidfd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
            std,
            exit: None,
        })
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The standard-library child, for its pipes (`stdout.take()`, …).
    /// Do not wait on it: this handle reaps the child.
    pub fn std_mut(&mut self) -> &mut std::process::Child {
        &mut self.std
    }

    /// Sends `signal` through the pidfd. A child that already exited (even
    /// if not yet reaped) is not an error: there is nothing left to signal.
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        if self.exit.is_some() {
            return Ok(());
        }
        // SAFETY: `pidfd_send_signal(pidfd, sig, NULL, 0)` reads nothing
        // from memory we pass; the descriptor is open for `self`'s life.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            e => Err(e),
        }
    }

    /// How it ended, if it has: reaps it the first time it is seen gone.
    pub fn try_wait(&mut self) -> io::Result<Option<ChildExit>> {
        self.reap(libc::WNOHANG)
    }

    /// Waits up to `timeout` for it to end.
    pub fn wait_timeout(&mut self, timeout: Duration) -> io::Result<Option<ChildExit>> {
        if self.exit.is_none() {
            Self::wait_any(&[&*self], timeout)?;
        }
        self.try_wait()
    }

    /// Waits until it ends.
    pub fn wait(&mut self) -> io::Result<ChildExit> {
        match self.reap(0)? {
            Some(e) => Ok(e),
            None => Err(io::Error::other("wait4 returned without a status")),
        }
    }

    /// Kills it (`SIGKILL`) and reaps it.
    pub fn kill(&mut self) -> io::Result<ChildExit> {
        self.signal(libc::SIGKILL)?;
        self.wait()
    }

    /// Waits up to `timeout` until at least one of `children` has exited
    /// and returns the indices of those that have (not yet reaped: call
    /// [`Child::try_wait`] on them). Empty on timeout. An interrupted wait
    /// resumes with the time left.
    pub fn wait_any(children: &[&Child], timeout: Duration) -> io::Result<Vec<usize>> {
        let deadline = Instant::now() + timeout;
        let mut fds: Vec<libc::pollfd> = children
            .iter()
            .map(|c| libc::pollfd {
                fd: c.pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: `fds` is a valid array of `fds.len()` pollfds that
            // `poll` may write `revents` into; it lives across the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let ready: Vec<usize> = children
                .iter()
                .zip(&fds)
                .enumerate()
                .filter(|(_, (c, p))| c.exit.is_some() || p.revents != 0)
                .map(|(i, _)| i)
                .collect();
            if !ready.is_empty() || n == 0 || left.is_zero() {
                return Ok(ready);
            }
        }
    }

    fn reap(&mut self, flags: libc::c_int) -> io::Result<Option<ChildExit>> {
        if let Some(e) = self.exit {
            return Ok(Some(e));
        }
        let mut status: libc::c_int = 0;
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        let got = loop {
            // SAFETY: `status` and `ru` are valid, writable, properly sized
            // and aligned; `wait4` writes them only when it returns the PID.
            let got = unsafe { libc::wait4(self.pid, &mut status, flags, ru.as_mut_ptr()) };
            if got < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break got;
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        if got == 0 {
            return Ok(None);
        }
        // SAFETY: `wait4` returned the PID, so it filled `ru` (zeroed
        // before, so every field is initialised either way).
        let ru = unsafe { ru.assume_init() };
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
        let exit = ChildExit {
            exit: Exit::from_status(status),
            cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
            peak_rss_bytes: (ru.ru_maxrss.max(0) as u64) * 1024,
        };
        self.exit = Some(exit);
        Ok(Some(exit))
    }
}

impl AsFd for Child {
    /// The pidfd: readable once the child has exited.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = self.kill();
        }
    }
}

/// Arms this process's parent-death signal (`SIGKILL`), for a child
/// started with [`Child::spawn_arming_itself`]: `Err` if the parent, whose
/// PID is `parent`, already died (the signal would never come: the child
/// must end).
pub fn die_with_parent(parent: u32) -> io::Result<()> {
    // SAFETY: `prctl` with integer arguments, `getppid` without any.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() as u32 != parent {
            return Err(io::Error::other(format!(
                "the parent process {parent} is gone"
            )));
        }
    }
    Ok(())
}

/// How a process dies (a fault injector's `kill`, `abort`, `segv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Death {
    /// `SIGKILL`: no handler, no unwinding (the OOM killer, `kill -9`).
    Kill,
    /// `abort()`: `SIGABRT`, as a failed assertion in native code.
    Abort,
    /// `SIGSEGV`, as a bad pointer in native code.
    Segv,
}

/// Ends this process the way `death` says, at once, as the real thing
/// would: no unwinding, no destructor, no buffered output flushed (`what`
/// goes to standard error first, with the PID). Never returns.
pub fn die(death: Death, what: &str) -> ! {
    // SAFETY: `getpid` has no preconditions.
    let pid = unsafe { libc::getpid() };
    let how = match death {
        Death::Kill => "SIGKILL",
        Death::Abort => "abort()",
        Death::Segv => "SIGSEGV",
    };
    eprintln!("{what}: process {pid} dies of {how}");
    match death {
        Death::Abort => std::process::abort(),
        Death::Kill => {
            // SAFETY: signalling our own PID; SIGKILL cannot be caught, so
            // the call does not return once delivered.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        Death::Segv => {
            // Rust's own SIGSEGV handler (it reports stack overflows)
            // returns for a signal that is not a guard-page fault, which
            // for a raised signal would mean carrying on: restore the
            // default action first.
            // SAFETY: setting SIGSEGV's disposition to the default, then
            // raising it in this thread; both calls take plain integers.
            unsafe {
                libc::signal(libc::SIGSEGV, libc::SIG_DFL);
                libc::raise(libc::SIGSEGV);
            }
        }
    }
    // Delivery is asynchronous for a process signal: wait for it.
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.arg("-c").arg(script);
        c
    }

    #[test]
    fn an_exit_code_is_reported_with_its_cost() {
        let mut c = Child::spawn(sh("exit 3")).unwrap();
        let e = c.wait_timeout(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(e.exit, Exit::Code(3));
        assert!(!e.exit.success());
        assert!(e.peak_rss_bytes > 0, "{e:?}");
        assert_eq!(c.try_wait().unwrap(), Some(e), "the exit is kept");
    }

    #[test]
    fn a_killed_child_reports_the_signal_and_abort_reports_sigabrt() {
        let mut c = Child::spawn(sh("sleep 30")).unwrap();
        assert_eq!(c.try_wait().unwrap(), None, "still running");
        c.signal(libc::SIGKILL).unwrap();
        let e = c.wait().unwrap();
        assert_eq!(
            e.exit,
            Exit::Signal {
                signal: libc::SIGKILL,
                core_dumped: false
            }
        );
        assert_eq!(e.exit.to_string(), "killed by SIGKILL");
        c.signal(libc::SIGKILL)
            .expect("signalling the dead is a no-op");

        let mut a = Child::spawn(sh("kill -ABRT $$")).unwrap();
        let e = a.wait().unwrap();
        assert!(
            matches!(e.exit, Exit::Signal { signal, .. } if signal == libc::SIGABRT),
            "{e:?}"
        );
    }

    #[test]
    fn wait_any_names_the_child_that_ended_and_times_out_otherwise() {
        let slow = Child::spawn(sh("sleep 30")).unwrap();
        let mut quick = Child::spawn(sh("exit 0")).unwrap();
        let ready = Child::wait_any(&[&slow, &quick], Duration::from_secs(10)).unwrap();
        assert_eq!(ready, vec![1]);
        assert!(quick.try_wait().unwrap().unwrap().exit.success());
        let ready = Child::wait_any(&[&slow], Duration::from_millis(20)).unwrap();
        assert!(ready.is_empty(), "the sleeper still runs");
    }

    #[test]
    fn dropping_a_running_child_kills_and_reaps_it() {
        let mut c = Child::spawn(sh("sleep 30")).unwrap();
        let pid = c.pid();
        assert_eq!(c.try_wait().unwrap(), None, "running");
        drop(c);
        assert!(
            std::fs::metadata(format!("/proc/{pid}")).is_err(),
            "killed and reaped, not a zombie"
        );
    }

    #[test]
    fn a_child_outlives_the_thread_that_asked_for_it() {
        // The parent-death signal follows the forking thread: were the
        // child forked here, it would die when this thread ends.
        let mut c = std::thread::spawn(|| Child::spawn(sh("sleep 30")).unwrap())
            .join()
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(c.try_wait().unwrap(), None, "alive after its thread ended");
        assert_eq!(c.kill().unwrap().exit.to_string(), "killed by SIGKILL");
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let e = Child::spawn(Command::new("/nonexistent/tandem-child")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/tandem-child"), "{e}");
    }
}
