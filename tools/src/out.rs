//! Standard output for the commands: a reader that goes away early
//! (`tandem check … | head`) ends the output quietly — no panic, no error —
//! and the command still finishes and exits with the status of what it
//! found; any other write error names standard output.

use std::io::{self, ErrorKind, StdoutLock, Write};

/// Standard output that drops what is written once its reader is gone.
pub struct Out {
    inner: StdoutLock<'static>,
    closed: bool,
}

impl Out {
    /// The process's standard output, locked for the command's lifetime.
    pub fn stdout() -> Self {
        Out {
            inner: io::stdout().lock(),
            closed: false,
        }
    }

    fn sorted<T>(&mut self, r: io::Result<T>, done: T) -> io::Result<T> {
        match r {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(done)
            }
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("writing to standard output: {e}"),
            )),
            ok => ok,
        }
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let r = self.inner.write(buf);
        self.sorted(r, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.flush();
        self.sorted(r, ())
    }
}
