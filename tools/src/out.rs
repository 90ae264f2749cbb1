//! Standard output for the commands, and text made safe to show.
//!
//! A reader that goes away early (`tandem check … | head`) ends the output
//! quietly — no panic, no error — and the command still finishes and exits
//! with the status of what it found; any other write error names standard
//! output. A command whose output is its whole result (`nats dump`) writes
//! through [`Out::strict`] instead, which reports the reader's going as
//! an error.
//!
//! What the tool shows comes from files it does not trust: lines of a run's
//! output, operator names and paths from manifests and snapshot headers,
//! file names from directories. A control character in it must not reach
//! the terminal as one (an escape sequence can rewrite the screen or the
//! title, or hide a line), so every line of text is written with
//! [`outln!`], which escapes them ([`escaped`]); JSON goes through
//! [`json_safe`].

use std::borrow::Cow;
use std::fmt::{self, Write as _};
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

    /// Whether the reader went away (what was written since was dropped).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// This output as a command whose output is its result sees it: a
    /// reader gone away is an error ([`ErrorKind::BrokenPipe`]), not a
    /// quiet end. Other commands' quiet end is unchanged.
    pub fn strict(&mut self) -> Strict<'_> {
        Strict(self)
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

/// See [`Out::strict`].
pub struct Strict<'a>(&'a mut Out);

impl Strict<'_> {
    /// `r`, unless the reader is gone.
    fn unless_closed<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if self.0.is_closed() {
            return Err(io::Error::new(
                ErrorKind::BrokenPipe,
                "standard output was closed (its reader went away)",
            ));
        }
        r
    }
}

impl Write for Strict<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.unless_closed(Ok(()))?;
        let r = self.0.write(buf);
        self.unless_closed(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.unless_closed(Ok(()))?;
        let r = self.0.flush();
        self.unless_closed(r)
    }
}

/// `writeln!` with every control character of the line escaped.
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {
        $crate::out::line($out, format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes `args` as one line, its control characters escaped.
pub fn line(out: &mut dyn Write, args: fmt::Arguments) -> io::Result<()> {
    let text = match args.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(args.to_string()),
    };
    writeln!(out, "{}", escaped(&text))
}

/// `s` with each control character — C0, DEL and C1, line breaks and tabs
/// included — written as an escape (`\n`, `\t`, `\r`, `\u{1b}`), so that it
/// shows as text, on one line.
pub fn escaped(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut o = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            '\r' => o.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(o, "\\u{{{:x}}}", c as u32);
            }
            c => o.push(c),
        }
    }
    Cow::Owned(o)
}

/// JSON text with DEL and the C1 controls (U+007F–U+009F), which JSON
/// allows raw inside strings, written as `\u00XX` escapes; serde_json
/// escapes the C0 controls itself. They can only be inside strings: JSON
/// has no other place for them.
pub fn json_safe(json: &str) -> Cow<'_, str> {
    let raw = |c: &char| ('\u{7f}'..='\u{9f}').contains(c);
    if !json.chars().any(|c| raw(&c)) {
        return Cow::Borrowed(json);
    }
    let mut o = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if raw(&c) {
            let _ = write!(o, "\\u{:04x}", c as u32);
        } else {
            o.push(c);
        }
    }
    Cow::Owned(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(escaped("plain — ünïcode"), Cow::Borrowed(_)));
        assert_eq!(
            escaped("a\x1b[2Jb\tc\rd\ne\u{9b}f\u{7f}"),
            "a\\u{1b}[2Jb\\tc\\rd\\ne\\u{9b}f\\u{7f}"
        );
        let mut v = Vec::new();
        outln!(&mut v, "{} {}", "x\x07", 3).unwrap();
        assert_eq!(v, b"x\\u{7} 3\n");
    }

    #[test]
    fn json_made_safe_still_parses_to_the_same_value() {
        let value = serde_json::json!({"line": "a\u{9b}31m\u{7f}\x1b[0m", "n": 1});
        let raw = serde_json::to_string_pretty(&value).unwrap();
        let safe = json_safe(&raw);
        assert!(!safe.chars().any(|c| c.is_control() && c != '\n'), "{safe}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
    }
}
