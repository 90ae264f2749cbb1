//! Reading files this process does not control: a manifest, a snapshot
//! file or a buffer queue named by a user or listed in a directory that
//! another process writes, retires or damages.
//!
//! Such a reader must not block for ever on a FIFO, read a device like
//! `/dev/zero` until memory runs out, or take a length from a file's
//! contents as the size of an allocation. So:
//!
//! - [`open_regular`] opens only regular files. It refuses anything else
//!   before opening it (opening a device can have effects of its own), opens
//!   with `O_NONBLOCK`, so that a FIFO swapped in after that look does not
//!   block the open, and then asks the opened descriptor — not the path,
//!   which may have changed — what it is. It returns the length measured
//!   on that descriptor.
//! - [`read_bounded`] reads a whole file of at most a given size, and
//!   never more than the length measured; [`read_measured`] fills a buffer
//!   from a file's start and says so when the file shrank below it while
//!   it was read (a mapping of such a file would have raised `SIGBUS`).
//!
//! `O_NONBLOCK` stays set on the returned file: for a regular file it
//! changes nothing.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` with `options` (read-only with `OpenOptions::new().read(true)`)
/// if it is a regular file; returns it and its length.
///
/// Anything else — a directory, a FIFO, a device, a socket — is an error
/// of kind [`io::ErrorKind::InvalidInput`] saying what it is; a failed
/// look or open keeps the system's error ([`loop_named`]).
pub fn open_regular(path: &Path, options: &OpenOptions) -> io::Result<(File, u64)> {
    not_regular(std::fs::metadata(path).map_err(loop_named)?.file_type())?;
    let file = options
        .clone()
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(loop_named)?;
    let meta = file.metadata()?;
    not_regular(meta.file_type())?;
    Ok((file, meta.len()))
}

/// `e`, saying "symlink loop" when it is one (`ELOOP`): the system's text,
/// "Too many levels of symbolic links", reads like a limit, not like links
/// that lead back to themselves.
pub fn loop_named(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(e.kind(), format!("a symlink loop: {e}"))
    } else {
        e
    }
}

/// What a file type is, in words: `a FIFO`, `a character device`, ….
pub fn kind_of(t: FileType) -> &'static str {
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symlink"
    } else {
        "not a file"
    }
}

/// `Ok` for a regular file, else the error naming what it is.
fn not_regular(t: FileType) -> io::Result<()> {
    if t.is_file() {
        return Ok(());
    }
    let what = kind_of(t);
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what}, not a regular file"),
    ))
}

/// The contents of the regular file at `path`, which must not be longer
/// than `max` bytes (a `what` — "manifest" — names it in the error). Reads
/// no more than the length measured when it was opened: a file that grows
/// meanwhile is read as it was; one that shrinks is an error.
pub fn read_bounded(path: &Path, max: u64, what: &str) -> io::Result<Vec<u8>> {
    let (file, len) = open_regular(path, OpenOptions::new().read(true))?;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{len} bytes: larger than any {what} ({max} bytes at most)"),
        ));
    }
    // `len <= max`, and `max` is the caller's bound on memory.
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut bytes)?;
    if (bytes.len() as u64) < len {
        return Err(shrank(len));
    }
    Ok(bytes)
}

/// Fills `buf` with the bytes at the start of `file`, which was measured
/// at `buf.len()` bytes or more; a file that shrank below that meanwhile
/// is an error saying so.
pub fn read_measured(file: &File, buf: &mut [u8]) -> io::Result<()> {
    file.read_exact_at(buf, 0).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            shrank(buf.len() as u64)
        } else {
            e
        }
    })
}

/// The error of a file that was `len` bytes when measured and is shorter
/// now.
pub fn shrank(len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the file shrank below {len} bytes while it was read"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::test_dir::{mkfifo, Dir};
    use std::time::{Duration, Instant};

    fn read() -> OpenOptions {
        let mut o = OpenOptions::new();
        o.read(true);
        o
    }

    #[test]
    fn a_fifo_is_refused_at_once_without_a_writer() {
        let d = Dir::new("file-fifo");
        let p = d.0.join("fifo");
        mkfifo(&p);
        let t = Instant::now();
        let e = open_regular(&p, &read()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let e = read_bounded(&p, 1 << 20, "manifest").unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn devices_directories_and_links_to_them_are_refused() {
        let d = Dir::new("file-dev");
        let link = d.0.join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        for (p, what) in [
            (Path::new("/dev/zero"), "a character device"),
            (&link, "a character device"),
            (&d.0, "a directory"),
        ] {
            let e = read_bounded(p, 1 << 20, "manifest").unwrap_err();
            assert!(e.to_string().contains(what), "{}: {e}", p.display());
        }
    }

    #[test]
    fn a_symlink_loop_is_reported_as_one() {
        let d = Dir::new("file-loop");
        std::os::unix::fs::symlink("b", d.0.join("a")).unwrap();
        std::os::unix::fs::symlink("a", d.0.join("b")).unwrap();
        let e = open_regular(&d.0.join("a"), &read()).unwrap_err();
        assert!(e.to_string().starts_with("a symlink loop: "), "{e}");
        assert!(e.to_string().contains("symbolic links"), "{e}");
        let other = loop_named(io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(other.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn a_file_larger_than_the_bound_is_refused_unread() {
        let d = Dir::new("file-large");
        let p = d.0.join("m.json");
        std::fs::write(&p, vec![b' '; 4097]).unwrap();
        let e = read_bounded(&p, 4096, "manifest").unwrap_err();
        assert!(
            e.to_string()
                .contains("4097 bytes: larger than any manifest"),
            "{e}"
        );
        assert_eq!(read_bounded(&p, 4097, "manifest").unwrap().len(), 4097);
    }

    #[test]
    fn a_file_that_shrinks_after_it_was_measured_is_an_error() {
        let d = Dir::new("file-shrink");
        let p = d.0.join("q");
        std::fs::write(&p, vec![7u8; 8192]).unwrap();
        let (f, len) = open_regular(&p, &read()).unwrap();
        assert_eq!(len, 8192);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(100)
            .unwrap();
        let mut buf = vec![0u8; len as usize];
        let e = read_measured(&f, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("shrank below 8192 bytes"), "{e}");
    }
}
