//! The dead-letter file: records an operator could not handle, with the
//! reason, kept instead of dropped.
//!
//! One JSON line per record:
//! `{"operator":"flatmap","instance":0,"partition":0,"seq":41,"reason":"…","payload":"…"}`.
//! The file is created on the first dead letter, in the run directory the
//! user named or else in a fresh temporary directory; never in the current
//! directory.
//!
//! A record goes there once per operator: a recovery that replays it (a
//! restart from a checkpoint, a takeover, a hot standby following along)
//! finds it there already, and neither writes nor counts it again. What
//! was written is remembered exactly, in bounded memory ([`seen`]).
//!
//! The file is the user's once the job succeeds (its path is in the
//! report). A job that fails leaves nothing: a temporary directory the
//! engine made is removed, and in a named run directory the file is
//! removed if this job created it.

mod seen;

use crate::record::TupleId;
use crate::sys::scratch::ScratchDir;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Mutex;

const FILE: &str = "dead-letters.jsonl";

pub(crate) struct DeadLetters {
    dir: Option<PathBuf>,
    state: Mutex<State>,
}

struct State {
    file: Option<BufWriter<File>>,
    path: Option<PathBuf>,
    /// The temporary directory the file is in, when no run directory was
    /// named.
    scratch: Option<ScratchDir>,
    /// The file did not exist before this job.
    created: bool,
    /// The job is over (finished or discarded): nothing more is written.
    closed: bool,
    line: Vec<u8>,
    /// `(operator, tuple ID)` of every record written.
    seen: seen::Seen,
    /// Operator names, numbered for `seen`'s keys.
    operators: Vec<String>,
}

type WriteError = (Option<PathBuf>, std::io::Error);

impl DeadLetters {
    pub(crate) fn new(_job: &str, dir: Option<PathBuf>) -> Self {
        DeadLetters {
            dir,
            state: Mutex::new(State {
                file: None,
                path: None,
                scratch: None,
                created: false,
                closed: false,
                line: Vec::new(),
                seen: seen::Seen::new(),
                operators: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn open(&self, st: &mut State) -> Result<(), WriteError> {
        let dir = match &self.dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| (Some(d.clone()), e))?;
                d.clone()
            }
            None => {
                let tmp = std::env::temp_dir();
                let s = ScratchDir::unique(&tmp, "deadletters").map_err(|e| (Some(tmp), e))?;
                let d = s.path().to_path_buf();
                st.scratch = Some(s);
                d
            }
        };
        let path = dir.join(FILE);
        st.created = !path.exists();
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| (Some(path.clone()), e))?;
        st.seen.spill_to(seen::prefix(&dir, FILE));
        st.file = Some(BufWriter::new(f));
        st.path = Some(path);
        Ok(())
    }

    pub(crate) fn write(
        &self,
        operator: &str,
        instance: usize,
        id: TupleId,
        reason: &str,
        payload: &[u8],
    ) -> Result<bool, WriteError> {
        let mut st = self.lock();
        if st.closed {
            // A worker of the job, abandoned when it ended, still running.
            return Ok(false);
        }
        if st.file.is_none() {
            self.open(&mut st)?;
        }
        let st = &mut *st;
        if id != TupleId::NONE {
            let op = match st.operators.iter().position(|o| o == operator) {
                Some(i) => i,
                None => {
                    st.operators.push(operator.to_string());
                    st.operators.len() - 1
                }
            };
            let key = (op as u128) << 64 | id.0 as u128;
            let new = st.seen.insert(key).map_err(|e| (st.path.clone(), e))?;
            if !new {
                return Ok(false);
            }
        }
        let l = &mut st.line;
        l.clear();
        l.extend_from_slice(b"{\"operator\":");
        json_str(l, operator);
        l.extend_from_slice(format!(",\"instance\":{instance}").as_bytes());
        if id != TupleId::NONE {
            l.extend_from_slice(
                format!(",\"partition\":{},\"seq\":{}", id.partition(), id.seq()).as_bytes(),
            );
        }
        l.extend_from_slice(b",\"reason\":");
        json_str(l, reason);
        l.extend_from_slice(b",\"payload\":");
        json_str(l, &String::from_utf8_lossy(payload));
        l.extend_from_slice(b"}\n");
        let f = st.file.as_mut().expect("opened above");
        f.write_all(l).map_err(|e| (st.path.clone(), e))?;
        Ok(true)
    }

    /// The job succeeded: flushes the file and hands it to the user;
    /// returns its path if any record was written.
    pub(crate) fn finish(&self) -> Result<Option<PathBuf>, WriteError> {
        let mut st = self.lock();
        st.closed = true;
        st.seen.remove_files();
        let path = st.path.clone();
        if let Some(f) = st.file.as_mut() {
            f.flush().map_err(|e| (path.clone(), e))?;
        }
        if let Some(s) = st.scratch.take() {
            s.keep();
        }
        Ok(path)
    }

    /// The job failed: removes what it wrote (see the module docs).
    pub(crate) fn discard(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.seen.remove_files();
        st.file = None;
        if st.scratch.take().is_none() && st.created {
            if let Some(p) = &st.path {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Appends `s` as a JSON string literal.
pub fn json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_quotes_backslashes_and_controls() {
        let mut v = Vec::new();
        json_str(&mut v, "a\"b\\c\nd\u{1}é");
        assert_eq!(String::from_utf8(v).unwrap(), r#""a\"b\\c\nd\u0001é""#);
    }

    #[test]
    fn dead_letters_land_in_the_named_directory() {
        let dir = std::env::temp_dir().join(format!("tandem-dl-test-{}", std::process::id()));
        let dl = DeadLetters::new("t", Some(dir.clone()));
        assert!(dl
            .write("parse", 1, TupleId::new(0, 5), "bad json", b"{oops")
            .unwrap());
        // A replay of the record writes it no more.
        assert!(!dl
            .write("parse", 0, TupleId::new(0, 5), "bad json", b"{oops")
            .unwrap());
        let path = dl.finish().unwrap().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(path.starts_with(&dir));
        assert_eq!(
            text,
            "{\"operator\":\"parse\",\"instance\":1,\"partition\":0,\"seq\":5,\"reason\":\"bad json\",\"payload\":\"{oops\"}\n"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_failed_jobs_dead_letters_are_removed_and_a_successful_ones_kept() {
        let dir = std::env::temp_dir().join(format!("tandem-dl-keep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // In a named run directory: the file this job created goes.
        let dl = DeadLetters::new("t", Some(dir.clone()));
        dl.write("parse", 0, TupleId::new(0, 1), "bad", b"x")
            .unwrap();
        dl.discard();
        assert!(!dir.join(FILE).exists());
        // A worker still writing after the job ended writes nothing.
        assert!(!dl
            .write("parse", 0, TupleId::new(0, 2), "bad", b"x")
            .unwrap());
        assert!(!dir.join(FILE).exists());
        // A file an earlier job left there is not this job's to remove.
        std::fs::write(dir.join(FILE), b"earlier\n").unwrap();
        let dl = DeadLetters::new("t", Some(dir.clone()));
        dl.write("parse", 0, TupleId::new(0, 1), "bad", b"x")
            .unwrap();
        dl.discard();
        assert!(dir.join(FILE).exists());
        // In a temp directory of the engine's: removed on failure, kept
        // (and never swept) on success.
        let dl = DeadLetters::new("t", None);
        dl.write("parse", 0, TupleId::new(0, 1), "bad", b"x")
            .unwrap();
        let tmp = dl.lock().path.clone().unwrap();
        dl.discard();
        assert!(!tmp.parent().unwrap().exists());
        let dl = DeadLetters::new("t", None);
        dl.write("parse", 0, TupleId::new(0, 1), "bad", b"x")
            .unwrap();
        let kept = dl.finish().unwrap().unwrap();
        crate::sys::scratch::sweep(&std::env::temp_dir());
        assert!(kept.exists());
        std::fs::remove_dir_all(kept.parent().unwrap()).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
