//! Test helpers shared by `sys`'s unit tests: a scratch directory per test
//! and a FIFO made in it.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A fresh directory for one test, removed when it ends.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    /// `tandem-sys-<tag>-<pid>` in the temp dir, empty.
    pub(crate) fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("tandem-sys-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// What it holds, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes a FIFO at `p`.
pub(crate) fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}
