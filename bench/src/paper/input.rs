//! Input from a JSONL file (`paper --input FILE`): one answer record per
//! line, in the generator's shape, read whole before timing starts.
//!
//! Reading never fails on a bad record — that is the job's business: every
//! line becomes a record, and the parse stage sends what it cannot use to
//! the dead-letter file, with the line number and the reason. Only a line
//! longer than the limit is cut here: its first [`KEPT_OF_OVERSIZED`] bytes
//! are kept (for the dead letter) with its real length, so that one huge
//! line can neither exhaust memory nor reach a queue. Blank lines are not
//! records; they are counted and skipped. A file that cannot be opened or
//! read is an error naming it.

use super::gen::{Chunk, Input, CHUNK_RECORDS};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

/// The default of `--max-record-bytes`: 64 KiB (a generated record is ~280
/// bytes; a long answer a few KiB).
pub const DEFAULT_MAX_RECORD_BYTES: usize = 64 << 10;

/// The largest `--max-record-bytes`: a chunk of records holds at most
/// 4 GiB (its offsets are `u32`), and no record needs more than 1 GiB.
pub const MAX_RECORD_BYTES: usize = 1 << 30;

/// Bytes kept of a line over the limit.
pub const KEPT_OF_OVERSIZED: usize = 1024;

/// Where the records of a file came from.
pub(super) struct FileOrigin {
    pub(super) path: PathBuf,
    /// 1-based line number of each record.
    pub(super) line_of: Vec<u64>,
    /// Records over the limit, in order: (record, its length).
    pub(super) oversized: Vec<(u64, u64)>,
    pub(super) max_record_bytes: usize,
    pub(super) blank_lines: u64,
}

impl FileOrigin {
    pub(super) fn memory_bytes(&self) -> u64 {
        (self.line_of.capacity() * 8 + self.oversized.capacity() * 16) as u64
    }
}

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("--input {}: {source}", path.display())]
pub struct InputError {
    /// The file.
    pub path: PathBuf,
    /// What failed.
    #[source]
    pub source: io::Error,
}

impl Input {
    /// Reads `path`, one record per line; lines longer than
    /// `max_record_bytes` are kept cut (see the module docs).
    pub fn from_jsonl(path: &Path, max_record_bytes: usize) -> Result<Input, InputError> {
        let err = |source| InputError {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(err)?;
        if meta.is_dir() {
            return Err(err(io::Error::other("is a directory, not a file")));
        }
        let f = File::open(path).map_err(err)?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        // A chunk's offsets are u32: records per chunk such that one never
        // holds 4 GiB.
        let chunk_records = ((u32::MAX as usize / 2)
            / max_record_bytes
                .clamp(KEPT_OF_OVERSIZED, MAX_RECORD_BYTES)
                .saturating_add(1))
        .clamp(1, CHUNK_RECORDS as usize) as u64;
        let mut origin = FileOrigin {
            path: path.to_path_buf(),
            line_of: Vec::new(),
            oversized: Vec::new(),
            max_record_bytes,
            blank_lines: 0,
        };
        let mut chunks = vec![Chunk {
            bytes: Vec::new(),
            ends: Vec::new(),
        }];
        let mut line_no = 0u64;
        let mut len = 0u64;
        loop {
            let (n, full_len, complete) =
                read_line(&mut r, &mut chunks, max_record_bytes).map_err(err)?;
            if !complete && n == 0 && full_len == 0 {
                break;
            }
            line_no += 1;
            let c = chunks.last_mut().expect("one chunk at least");
            let start = c.ends.last().copied().unwrap_or(0) as usize;
            if c.bytes[start..].iter().all(u8::is_ascii_whitespace)
                && full_len as usize == c.bytes.len() - start
            {
                // Not a record.
                c.bytes.truncate(start);
                origin.blank_lines += 1;
            } else {
                c.ends.push(c.bytes.len() as u32);
                if full_len > max_record_bytes as u64 {
                    origin.oversized.push((len, full_len));
                }
                origin.line_of.push(line_no);
                len += 1;
                if c.ends.len() as u64 == chunk_records {
                    c.bytes.shrink_to_fit();
                    chunks.push(Chunk {
                        bytes: Vec::new(),
                        ends: Vec::new(),
                    });
                }
            }
            if !complete {
                break;
            }
        }
        if chunks.last().is_some_and(|c| c.ends.is_empty()) && chunks.len() > 1 {
            chunks.pop();
        }
        Ok(Input {
            chunks,
            chunk_records,
            len,
            seed: 0,
            file: Some(origin),
            mapped: None,
        })
    }

    /// Where record `i` came from: `input line N` of a file, or `record N`
    /// of the generated input.
    pub fn position(&self, i: u64) -> String {
        match &self.file {
            Some(f) => format!("input line {}", f.line_of[i as usize]),
            None => format!("record {i}"),
        }
    }

    /// The full length of record `i` when it is over the limit (its line
    /// then holds only its first bytes), with the limit.
    #[inline]
    pub fn oversized(&self, i: u64) -> Option<(u64, usize)> {
        let f = self.file.as_ref()?;
        if f.oversized.is_empty() {
            return None;
        }
        let k = f.oversized.binary_search_by_key(&i, |o| o.0).ok()?;
        Some((f.oversized[k].1, f.max_record_bytes))
    }

    /// The file the input was read from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|f| f.path.as_path())
    }

    /// Blank lines of the file, skipped.
    pub fn blank_lines(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.blank_lines)
    }
}

/// Appends the next line (without its newline) to the last chunk, keeping
/// at most `max` bytes of it (or [`KEPT_OF_OVERSIZED`] once it is over):
/// returns (bytes kept, the line's full length, whether a newline ended
/// it). (0, 0, false) at the end of the file.
fn read_line(
    r: &mut BufReader<File>,
    chunks: &mut [Chunk],
    max: usize,
) -> io::Result<(usize, u64, bool)> {
    let c = chunks.last_mut().expect("one chunk at least");
    let start = c.bytes.len();
    let mut full = 0u64;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok((c.bytes.len() - start, full, false));
        }
        let (piece, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        full += piece.len() as u64;
        let kept = c.bytes.len() - start;
        if full > max as u64 {
            // Over the limit: keep only the head of it.
            let keep = KEPT_OF_OVERSIZED.min(max.max(1));
            if kept > keep {
                c.bytes.truncate(start + keep);
            } else {
                let more = (keep - kept).min(piece.len());
                c.bytes.extend_from_slice(&piece[..more]);
            }
        } else {
            c.bytes.extend_from_slice(piece);
        }
        let used = piece.len() + usize::from(done);
        r.consume(used);
        if done {
            return Ok((c.bytes.len() - start, full, true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(tag: &str, body: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("tandem-input-{tag}-{}", std::process::id()));
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn every_line_is_a_record_with_its_line_number_and_blank_lines_are_skipped() {
        let p = file("lines", b"a\n\n{\"x\":1}\n   \nlast-without-newline");
        let i = Input::from_jsonl(&p, 100).unwrap();
        assert_eq!(i.len(), 3);
        assert_eq!(i.line(0), b"a");
        assert_eq!(i.line(1), b"{\"x\":1}");
        assert_eq!(i.line(2), b"last-without-newline");
        assert_eq!(i.position(1), "input line 3");
        assert_eq!(i.position(2), "input line 5");
        assert_eq!(i.blank_lines(), 2);
        assert_eq!(i.oversized(0), None);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_shared_copy_of_a_file_input_is_what_was_read_whatever_the_file_becomes() {
        let mut body = b"a\n\n{\"x\":1}\n".to_vec();
        body.extend(vec![b'y'; 3000]);
        body.extend_from_slice(b"\nlast");
        let p = file("shared", &body);
        let read = Input::from_jsonl(&p, 1024).unwrap();
        let shared = p.with_extension("shared");
        let _ = std::fs::remove_file(&shared);
        read.write_shared(&shared).unwrap();
        // The user's file changes; the copy does not.
        std::fs::write(&p, b"other\n").unwrap();
        let copy = Input::open_shared(&shared).unwrap();
        assert_eq!(copy.len(), read.len());
        for i in 0..read.len() {
            assert_eq!(copy.line(i), read.line(i));
            assert_eq!(copy.position(i), read.position(i));
            assert_eq!(copy.oversized(i), read.oversized(i));
        }
        assert_eq!(copy.oversized(2), Some((3000, 1024)));
        assert_eq!(copy.blank_lines(), 1);
        assert_eq!(copy.path(), Some(p.as_path()));
        // A copy cut short is refused, not misread.
        let bytes = std::fs::read(&shared).unwrap();
        std::fs::remove_file(&shared).unwrap();
        std::fs::write(&shared, &bytes[..bytes.len() - 4]).unwrap();
        assert!(Input::open_shared(&shared).is_err());
        std::fs::remove_file(shared).unwrap();
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_line_over_the_limit_keeps_its_head_and_length() {
        let mut body = vec![b'x'; 5000];
        body.push(b'\n');
        body.extend_from_slice(b"ok\n");
        let p = file("big", &body);
        let i = Input::from_jsonl(&p, 2000).unwrap();
        assert_eq!(i.len(), 2);
        assert_eq!(i.oversized(0), Some((5000, 2000)));
        assert_eq!(i.line(0).len(), KEPT_OF_OVERSIZED);
        assert_eq!(i.line(1), b"ok");
        assert_eq!(i.oversized(1), None);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn records_span_many_chunks_when_the_limit_is_large() {
        let body: Vec<u8> = (0..3000)
            .flat_map(|k| format!("{k}\n").into_bytes())
            .collect();
        let p = file("chunks", &body);
        let i = Input::from_jsonl(&p, 1 << 30).unwrap();
        assert!(i.chunks.len() > 1);
        for k in 0..3000u64 {
            assert_eq!(i.line(k), k.to_string().as_bytes());
        }
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_missing_file_or_a_directory_is_an_error_naming_it() {
        let Err(e) = Input::from_jsonl(Path::new("/nonexistent/in.jsonl"), 100) else {
            panic!("a missing file was read")
        };
        assert!(e.to_string().contains("/nonexistent/in.jsonl"), "{e}");
        let Err(e) = Input::from_jsonl(&std::env::temp_dir(), 100) else {
            panic!("a directory was read")
        };
        assert!(e.to_string().contains("directory"), "{e}");
    }
}
