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
//! finds it there already, and neither writes nor counts it again.

use crate::record::TupleId;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Mutex;

pub(crate) struct DeadLetters {
    job: String,
    dir: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    file: Option<BufWriter<File>>,
    path: Option<PathBuf>,
    line: Vec<u8>,
    /// (operator, tuple ID) of every record written.
    seen: std::collections::HashSet<(String, u64)>,
}

type WriteError = (Option<PathBuf>, std::io::Error);

impl DeadLetters {
    pub(crate) fn new(job: &str, dir: Option<PathBuf>) -> Self {
        DeadLetters {
            job: job.to_string(),
            dir,
            state: Mutex::new(State::default()),
        }
    }

    fn open(&self, st: &mut State) -> Result<(), WriteError> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => {
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let safe: String = self
                    .job
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect();
                std::env::temp_dir().join(format!("tandem-{safe}-{}-{stamp}", std::process::id()))
            }
        };
        std::fs::create_dir_all(&dir).map_err(|e| (Some(dir.clone()), e))?;
        let path = dir.join("dead-letters.jsonl");
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| (Some(path.clone()), e))?;
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
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if id != TupleId::NONE && !st.seen.insert((operator.to_string(), id.0)) {
            return Ok(false);
        }
        if st.file.is_none() {
            self.open(&mut st)?;
        }
        let st = &mut *st;
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

    /// Flushes the file; returns its path if any record was written.
    pub(crate) fn finish(&self) -> Result<Option<PathBuf>, WriteError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let path = st.path.clone();
        if let Some(f) = st.file.as_mut() {
            f.flush().map_err(|e| (path.clone(), e))?;
        }
        Ok(path)
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
}
