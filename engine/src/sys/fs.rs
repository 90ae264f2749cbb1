//! Space on filesystems: reserving a mapped file's blocks when it is
//! created, and asking a filesystem how much it has free.
//!
//! Why reserve: the engine's shared mappings (buffer queues, determinant
//! logs, snapshot exchanges, mapped rings) are created with `ftruncate`,
//! which makes a *sparse* file: no block is allocated until a page is
//! first written through the mapping. On a full filesystem — a 64 MiB
//! `/dev/shm`, Docker's default — that first write cannot be refused with
//! an error; the kernel delivers `SIGBUS` and the process dies without a
//! word. [`reserve`] allocates every block up front (`posix_fallocate`), so
//! a file that does not fit fails its creation with `ENOSPC`, an error the
//! engine reports with the path, the bytes needed and the bytes free.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Allocates the blocks of `file`'s first `len` bytes, so that writes
/// through a mapping of them never fault for lack of space. The file's
/// length becomes at least `len`.
pub fn reserve(file: &File, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let len = libc::off_t::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{len} bytes is beyond the largest file offset"),
        )
    })?;
    loop {
        // SAFETY: `posix_fallocate` reads no memory of ours; the descriptor
        // is open for writing for as long as `file` lives.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
        match rc {
            0 => return Ok(()),
            libc::EINTR => continue,
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// Bytes an unprivileged writer may still allocate on the filesystem that
/// holds `path` (`statvfs`: available blocks × fragment size).
pub fn free_bytes(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    // SAFETY: an all-zero `statvfs` is a valid value of the plain C struct.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated string and `s` a struct we own; the
    // call writes only into `s`.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ by target
    Ok((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

/// `n` bytes as people read sizes: `512 B`, `64.0 KiB`, `1.5 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_file_has_its_blocks_allocated() {
        let dir = std::env::temp_dir().join(format!("tandem-reserve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        let f = File::create(&p).unwrap();
        f.set_len(1 << 20).unwrap();
        use std::os::unix::fs::MetadataExt;
        let sparse = std::fs::metadata(&p).unwrap().blocks();
        reserve(&f, 1 << 20).unwrap();
        let reserved = std::fs::metadata(&p).unwrap().blocks();
        assert!(sparse < 2048 && reserved >= 2048, "{sparse} → {reserved}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn free_bytes_of_a_missing_path_is_an_error() {
        assert!(free_bytes(Path::new("/no/such/dir/anywhere")).is_err());
        assert!(free_bytes(Path::new("/")).unwrap() > 0);
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(64 << 20), "64.0 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(u64::MAX), "16384.0 PiB");
    }
}
