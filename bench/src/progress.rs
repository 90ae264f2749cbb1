//! The progress line of `paper` and `nexmark`: records, rate and ETA, and
//! what happens to the job — takeovers, restarts, checkpoints, the
//! current p99 — read from its [`JobWatch`].
//!
//! On a terminal, everything else written to standard error while the bar
//! is up (an injected fault's line, a child process's death, the engine's
//! warnings — from any thread, or from a child process that inherited
//! the descriptor) goes above the bar, never glued onto it: standard error
//! is a pipe for that time, whose lines a thread prints above the bar on
//! the real terminal. [`Progress::finish`] (or a signal's hard exit,
//! [`restore_stderr`]) puts the terminal back. Off a terminal the bar is
//! hidden and standard error is left alone.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tandem::{JobWatch, LatencyHistogram};

/// The real standard error while it is redirected (-1: it is not).
static REAL_STDERR: AtomicI32 = AtomicI32::new(-1);

/// Puts the real standard error back on descriptor 2 (a signal's hard
/// exit calls it before its last line, so that line is not left in a
/// pipe nobody reads any more).
pub fn restore_stderr() {
    let real = REAL_STDERR.swap(-1, Ordering::AcqRel);
    if real >= 0 {
        // SAFETY: `real` is a descriptor we duplicated and still own;
        // `dup2` onto 2 only replaces what 2 refers to.
        unsafe { libc::dup2(real, 2) };
    }
}

/// The terminal the bar draws on: the real standard error (a clone
/// writes to the same one: the bar and the reader thread share it).
#[derive(Clone, Debug)]
struct Terminal {
    out: Arc<Mutex<File>>,
    width: u16,
}

impl Terminal {
    fn put(&self, s: &str) -> std::io::Result<()> {
        self.out
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(s.as_bytes())
    }
}

impl TermLike for Terminal {
    fn width(&self) -> u16 {
        self.width
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}A"))?;
        }
        Ok(())
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}B"))?;
        }
        Ok(())
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}C"))?;
        }
        Ok(())
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}D"))?;
        }
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.put(&format!("{s}\n"))
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.put("\r\x1b[2K")
    }
    fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

/// Standard error redirected into a pipe whose lines go above the bar.
struct Redirect {
    terminal: Terminal,
    reader: JoinHandle<()>,
}

impl Redirect {
    /// `None` when standard error is not a terminal, or a step fails (the
    /// bar then draws as usual).
    fn start(bar_slot: Arc<Mutex<Option<ProgressBar>>>) -> Option<Redirect> {
        // SAFETY: `isatty` reads no memory of ours.
        if unsafe { libc::isatty(2) } != 1 {
            return None;
        }
        // SAFETY: an all-zero `winsize` is a valid value; `ioctl` writes
        // into it, ours, for descriptor 2.
        let width = unsafe {
            let mut ws: libc::winsize = std::mem::zeroed();
            match libc::ioctl(2, libc::TIOCGWINSZ, &mut ws) {
                0 if ws.ws_col > 0 => ws.ws_col,
                _ => 80,
            }
        };
        // SAFETY: duplicates descriptor 2, which is open; the new one is
        // ours alone.
        let real = unsafe { libc::dup(2) };
        if real < 0 {
            return None;
        }
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            // SAFETY: `real` is ours and used nowhere else.
            unsafe { libc::close(real) };
            return None;
        }
        // SAFETY: both ends are ours; descriptor 2 becomes the write end
        // (without close-on-exec: child processes write there too), and
        // our own copy of the write end is closed.
        unsafe {
            libc::dup2(fds[1], 2);
            libc::close(fds[1]);
        }
        REAL_STDERR.store(real, Ordering::Release);
        // SAFETY: `fds[0]` is the read end, owned by this File alone. The
        // terminal's File owns a second duplicate of the real stderr, so
        // `REAL_STDERR`'s stays valid for `restore_stderr`.
        let (read, out) = unsafe {
            (
                File::from_raw_fd(fds[0]),
                File::from_raw_fd(libc::dup(real)),
            )
        };
        let terminal = Terminal {
            out: Arc::new(Mutex::new(out)),
            width,
        };
        let t = terminal.clone();
        let reader = std::thread::Builder::new()
            .name("stderr-above-bar".into())
            .spawn(move || {
                for line in BufReader::new(read).split(b'\n').map_while(Result::ok) {
                    let line = String::from_utf8_lossy(&line);
                    let bar = bar_slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    let print = || {
                        let _ = t.write_line(&line);
                        let _ = t.flush();
                    };
                    match bar {
                        Some(b) => b.suspend(print),
                        None => print(),
                    }
                }
            })
            .ok()?;
        Some(Redirect { terminal, reader })
    }

    /// Standard error back on the terminal; the lines still in the pipe
    /// printed (waiting a moment for writers that still hold it: a child
    /// process that has not exited yet).
    fn stop(self) {
        restore_stderr();
        let until = Instant::now() + Duration::from_millis(500);
        while !self.reader.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.terminal.flush();
    }
}

/// The progress line of a run over `len` items (`unit`: "records",
/// "events").
pub struct Progress {
    bar: ProgressBar,
    redirect: Option<Redirect>,
    last: Instant,
    last_pos: u64,
    rate: f64,
    /// The cumulative latency at the previous update (the p99 shown is
    /// over the last second).
    prev: Option<LatencyHistogram>,
    p99: Option<u64>,
}

impl Progress {
    /// A bar over `len` items.
    pub fn new(len: u64, unit: &str) -> Progress {
        let slot = Arc::new(Mutex::new(None));
        let redirect = Redirect::start(Arc::clone(&slot));
        let bar = match &redirect {
            Some(r) => ProgressBar::with_draw_target(
                Some(len),
                ProgressDrawTarget::term_like(Box::new(r.terminal.clone())),
            ),
            None => ProgressBar::new(len),
        };
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{{spinner}} {{elapsed_precise}} {{wide_bar}} {{pos}}/{{len}} {unit}, ETA {{eta}}\n  {{msg}}"
            ))
            .expect("static template"),
        );
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(bar.clone());
        Progress {
            bar,
            redirect,
            last: Instant::now(),
            last_pos: 0,
            rate: 0.0,
            prev: None,
            p99: None,
        }
    }

    /// The items done so far (`pos`), and what the job did (`watch`): the
    /// rate and p99 are brought up to date twice a second.
    pub fn update(&mut self, pos: u64, watch: Option<&JobWatch>) {
        self.bar.set_position(pos);
        let dt = self.last.elapsed().as_secs_f64();
        if dt < 0.5 {
            return;
        }
        self.rate = pos.saturating_sub(self.last_pos) as f64 / dt;
        (self.last, self.last_pos) = (Instant::now(), pos);
        let mut msg = format!("{:.2} M/s", self.rate / 1e6);
        if let Some(w) = watch {
            let h = w.latency();
            if let Some(prev) = &self.prev {
                let d = h.since(prev);
                if !d.is_empty() {
                    self.p99 = Some(d.quantile(0.99));
                }
            }
            self.prev = Some(h);
            if let Some(p) = self.p99 {
                msg.push_str(&format!(", p99 {}", crate::report::fmt_ns(p)));
            }
            let s = w.status();
            let n = |count: u64, what: &str| {
                format!(", {count} {what}{}", if count == 1 { "" } else { "s" })
            };
            if s.checkpoints_started > 0 {
                msg.push_str(&n(s.checkpoints_completed, "checkpoint"));
            }
            if s.standby_groups > 0 || s.takeovers > 0 {
                msg.push_str(&n(s.takeovers, "takeover"));
            }
            if s.restarts > 0 {
                msg.push_str(&n(u64::from(s.restarts), "restart"));
            }
        }
        self.bar.set_message(msg);
    }

    /// Whether the bar is drawn (standard error is a terminal).
    pub fn visible(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Prints `line` above the bar.
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| crate::errln!("{line}"));
    }

    /// Clears the bar and puts standard error back.
    pub fn finish(self) {
        self.bar.finish_and_clear();
        if let Some(r) = self.redirect {
            r.stop();
        }
    }
}
