//! Process deaths on demand: what `kill`, `abort` and `segv` faults do
//! when they fire. Each ends the calling process at once, as the real
//! thing would: no unwinding, no destructor, no buffered output flushed
//! (a line on stderr first says which fault it was).

use crate::spec::Death;

/// Ends this process the way `death` says; never returns.
pub(crate) fn die(death: Death, what: &str) -> ! {
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
