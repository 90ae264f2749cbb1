//! `tandem bq inspect`: a buffer queue file (the standby's tuple log) — its
//! header, positions and tuple IDs, occupancy, reader cursors and first and
//! last entries — and whether it validates. A file that cannot be opened is
//! an error (status 2); one that is not a queue of this format, or whose
//! entries are damaged, is damage (status 1). Figures read from a damaged
//! header are printed as they are, never trusted for arithmetic.
//!
//! Only a regular file is opened (a FIFO would block, `/dev/zero` never
//! end), and it is read into memory, not mapped
//! ([`BufferQueue::open_read_only`]): the queue of a running job may be
//! truncated or removed while it is read, which would kill a mapped reader
//! with `SIGBUS`; here it is an error naming the file.

use std::io::Write;
use std::path::Path;

use tandem::standby::bq::{BqError, BufferQueue};

use crate::out::outln;
use crate::Verdict;

/// A reader cursor of `u64::MAX`: the reader slot is released.
const UNATTACHED: u64 = u64::MAX;

/// Prints a buffer queue and validates it.
pub fn inspect(file: &Path, show: u64, out: &mut dyn Write) -> anyhow::Result<Verdict> {
    let q = match BufferQueue::open_read_only(file) {
        Ok(q) => q,
        Err(e @ BqError::Invalid { .. }) => {
            outln!(out, "{}", file.display())?;
            outln!(out, "  INVALID: {e}")?;
            return Ok(Verdict::Fail);
        }
        Err(e) => return Err(e.into()),
    };
    let c = q.config();
    let (head, tail) = (q.head(), q.tail());
    // Validated first: the arena figures are only read from a sound queue.
    let valid = q.validate();
    outln!(out, "{}", file.display())?;
    outln!(
        out,
        "  format {}  slots {}  arena {} bytes  readers {}",
        tandem::standby::bq::VERSION,
        c.slots,
        c.arena,
        c.readers
    )?;
    let held = tail.checked_sub(head).filter(|&n| n <= c.slots);
    match held {
        Some(n) if valid.is_ok() => outln!(
            out,
            "  positions [{head}, {tail})  held {n}  ({:.1} % of slots, {} arena bytes = {:.1} %)",
            n as f64 * 100.0 / c.slots as f64,
            q.arena_used(),
            q.arena_used() as f64 * 100.0 / c.arena as f64
        )?,
        Some(n) => outln!(
            out,
            "  positions [{head}, {tail})  held {n}  ({:.1} % of slots)",
            n as f64 * 100.0 / c.slots as f64
        )?,
        None => outln!(
            out,
            "  positions [{head}, {tail})  (not a range of held entries)"
        )?,
    }
    let cursors: Vec<String> = (0..c.readers as usize)
        .map(|r| match q.reader_cursor(r) {
            UNATTACHED => format!("{r}:unattached"),
            p => format!("{r}:{p}"),
        })
        .collect();
    outln!(
        out,
        "  covered by a snapshot below {}  reader cursors {}",
        q.covered(),
        cursors.join(" ")
    )?;
    if held.is_some_and(|n| n > 0) {
        let first = q.get(head).map(|e| e.tuple_id);
        let last = q.get(tail - 1).map(|e| e.tuple_id);
        outln!(
            out,
            "  tuple IDs {} ..= {}",
            first.map_or("?".into(), |t| t.to_string()),
            last.map_or("?".into(), |t| t.to_string())
        )?;
        let front_end = tail.min(head.saturating_add(show));
        let mut shown: Vec<u64> = (head..front_end).collect();
        shown.extend(tail.saturating_sub(show).max(front_end)..tail);
        for p in shown {
            if let Some(e) = q.get(p) {
                let preview: String = String::from_utf8_lossy(&e.bytes[..e.bytes.len().min(48)])
                    .chars()
                    .map(|ch| if ch.is_control() { '.' } else { ch })
                    .collect();
                outln!(
                    out,
                    "    #{:<10} id {:<20} {:>6} bytes  {preview}",
                    e.position,
                    e.tuple_id,
                    e.bytes.len()
                )?;
            }
        }
    }
    match valid {
        Ok(n) => {
            outln!(out, "  valid ({n} entries checked)")?;
            Ok(Verdict::Pass)
        }
        Err(e) => {
            outln!(out, "  INVALID: {e}")?;
            Ok(Verdict::Fail)
        }
    }
}
