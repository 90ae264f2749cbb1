//! Deterministic input for the paper pipeline: nested Q&A answer records as
//! JSON text, one per line, as they would arrive from a log.
//!
//! ```text
//! {"seq":N,"ts":T,"answer_id":A,"user":{"id":U,"name":"…","reputation":R},
//!  "stats":{"likes":L,"favorites":F,"comments":C},"text":"<~100 chars>"}
//! ```
//!
//! Every field of record `N` is a function of `(seed, N)` only, so any
//! record can be regenerated alone and the generator runs in parallel. It is
//! run *before* timing starts; the text is written with a hand-rolled writer
//! (`itoa` + byte copies, ~10× faster than `format!`). Texts contain JSON
//! escapes (`\"`, `\n`, `\u00e9`) now and then, and user names include some
//! non-ASCII ones, so the parser does real unescaping work. With
//! `malformed_every = k > 0`, every k-th record is broken (truncated, or a
//! field of the wrong type) to exercise the dead-letter path.

/// Number of distinct users.
pub const USERS: u32 = 100_000;
/// Event time of record 0 (ns since the epoch): 2023-11-14.
pub const BASE_TS: u64 = 1_700_000_000_000_000_000;

const WORDS: [&str; 48] = [
    "stream",
    "window",
    "state",
    "barrier",
    "kafka",
    "flink",
    "latency",
    "record",
    "operator",
    "core",
    "queue",
    "epoch",
    "snapshot",
    "replay",
    "standby",
    "watermark",
    "join",
    "key",
    "shuffle",
    "buffer",
    "partition",
    "checkpoint",
    "restart",
    "failover",
    "throughput",
    "the",
    "a",
    "of",
    "to",
    "and",
    "why",
    "how",
    "does",
    "my",
    "job",
    "lose",
    "data",
    "after",
    "crash",
    "rust",
    "thread",
    "pinned",
    "ring",
    "lock",
    "free",
    "fast",
    "slow",
    "java",
];

#[inline]
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small deterministic random stream for one record.
struct Rng(u64);
impl Rng {
    fn new(seed: u64, seq: u64) -> Self {
        Rng(mix(seed ^ mix(seq)))
    }
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = mix(self.0);
        self.0
    }
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// The event time of record `seq` (1 ms apart, with sub-ms jitter).
pub fn event_time(seed: u64, seq: u64) -> u64 {
    BASE_TS + seq * 1_000_000 + (mix(seed ^ seq.rotate_left(17)) % 1_000_000)
}

/// Pre-generated input: the JSON lines of records `0..len`, in chunks.
///
/// Or read from a file ([`Input::from_jsonl`], `super::input`): then each
/// record remembers its line in the file, and a line over the size limit
/// keeps only its first bytes and its length.
pub struct Input {
    pub(super) chunks: Vec<Chunk>,
    pub(super) chunk_records: u64,
    pub(super) len: u64,
    pub(super) seed: u64,
    /// Read from a file: where each record came from, and what was over
    /// the limit.
    pub(super) file: Option<super::input::FileOrigin>,
    /// Mapped from a file another process wrote ([`Input::open_shared`]):
    /// the records are there, not in `chunks`.
    pub(super) mapped: Option<Mapped>,
}

/// A generated input in a file (`Input::write_shared`), mapped.
pub(super) struct Mapped {
    map: memmap2::Mmap,
    /// Per chunk: where its line ends start, where its bytes start.
    chunks: Vec<(usize, usize)>,
}

/// The shared input file's first bytes.
const SHARED_MAGIC: &[u8; 8] = b"TNDMPIN2";

pub(super) struct Chunk {
    pub(super) bytes: Vec<u8>,
    /// End offset of each record's line (exclusive, no newline stored).
    pub(super) ends: Vec<u32>,
}

pub(super) const CHUNK_RECORDS: u64 = 1 << 16;

/// Bytes a generated record takes in memory: its JSON (285 on average,
/// measured over 1 M records) and its offset.
pub const GENERATED_RECORD_BYTES: u64 = 290;

/// Refuses `n` generated records (flag `flag`) whose input would not fit
/// in half of the memory this process may still take: the input is made
/// whole before timing starts, and the job needs the other half.
pub fn check_records(flag: &str, n: u64) -> anyhow::Result<()> {
    let needed = n.saturating_mul(GENERATED_RECORD_BYTES);
    if let Some(available) = tandem::sys::limits::available_memory() {
        anyhow::ensure!(
            needed <= available / 2,
            "{flag} {n}: the generated input needs {} in memory and {} is available \
             (at most {} records here)",
            tandem::sys::fs::human_bytes(needed),
            tandem::sys::fs::human_bytes(available),
            available / 2 / GENERATED_RECORD_BYTES
        );
    }
    Ok(())
}

impl Input {
    /// Generates `n` records from `seed` on `threads` threads.
    pub fn generate(n: u64, seed: u64, malformed_every: u64, threads: usize) -> Input {
        let nchunks = n.div_ceil(CHUNK_RECORDS) as usize;
        let mut chunks: Vec<Option<Chunk>> = (0..nchunks).map(|_| None).collect();
        let threads = threads.clamp(1, nchunks.max(1));
        std::thread::scope(|s| {
            let per = nchunks.div_ceil(threads);
            for (t, slot) in chunks.chunks_mut(per.max(1)).enumerate() {
                s.spawn(move || {
                    for (j, c) in slot.iter_mut().enumerate() {
                        let k = (t * per + j) as u64;
                        let lo = k * CHUNK_RECORDS;
                        let hi = (lo + CHUNK_RECORDS).min(n);
                        *c = Some(gen_chunk(seed, lo, hi, malformed_every));
                    }
                });
            }
        });
        Input {
            chunks: chunks.into_iter().map(|c| c.expect("generated")).collect(),
            chunk_records: CHUNK_RECORDS,
            len: n,
            seed,
            file: None,
            mapped: None,
        }
    }

    /// Writes the input to `path` (created, 0600) for other processes to
    /// map with [`Input::open_shared`]: the children of process isolation,
    /// which need the records the source refers to without generating or
    /// reading them again — a child must see exactly what the driver read,
    /// whatever happens to the user's file meanwhile. Layout: magic,
    /// records, seed, records per chunk, chunks, per chunk its record
    /// count and byte length, then per chunk its line ends (`u32`,
    /// little-endian) and its bytes; then, for an input read from a file,
    /// where its records came from (see `write_origin`).
    pub fn write_shared(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        assert!(self.mapped.is_none(), "an input in memory");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        w.write_all(SHARED_MAGIC)?;
        for v in [
            self.len,
            self.seed,
            self.chunk_records,
            self.chunks.len() as u64,
        ] {
            w.write_all(&v.to_le_bytes())?;
        }
        for c in &self.chunks {
            w.write_all(&(c.ends.len() as u64).to_le_bytes())?;
            w.write_all(&(c.bytes.len() as u64).to_le_bytes())?;
        }
        for c in &self.chunks {
            for e in &c.ends {
                w.write_all(&e.to_le_bytes())?;
            }
            w.write_all(&c.bytes)?;
        }
        if let Some(o) = &self.file {
            write_origin(&mut w, o)?;
        }
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    }

    /// Maps an input [`Input::write_shared`] wrote.
    pub fn open_shared(path: &std::path::Path) -> anyhow::Result<Input> {
        let f = std::fs::File::open(path)
            .map_err(|e| anyhow::anyhow!("opening the shared input {}: {e}", path.display()))?;
        // SAFETY: the file is written whole before any child starts and
        // never changed while it is mapped (the driver removes it after
        // the run).
        let map = unsafe { memmap2::Mmap::map(&f) }?;
        let bad = || anyhow::anyhow!("{} is not a shared paper input", path.display());
        let u = |o: usize| -> anyhow::Result<u64> {
            Ok(u64::from_le_bytes(
                map.get(o..o.checked_add(8).ok_or_else(bad)?)
                    .ok_or_else(bad)?
                    .try_into()
                    .expect("8 bytes"),
            ))
        };
        anyhow::ensure!(map.get(..8) == Some(&SHARED_MAGIC[..]), bad());
        let (len, seed, chunk_records, n) = (u(8)?, u(16)?, u(24)?, u(32)? as usize);
        anyhow::ensure!(chunk_records > 0 && n <= map.len() / 16, bad());
        let mut at = 40 + 16 * n;
        let mut chunks = Vec::with_capacity(n);
        let mut total = 0u64;
        for k in 0..n {
            let (records, bytes) = (u(40 + 16 * k)? as usize, u(48 + 16 * k)? as usize);
            total += records as u64;
            chunks.push((at, at + 4 * records));
            at = at
                .checked_add(4 * records + bytes)
                .filter(|&e| e <= map.len())
                .ok_or_else(bad)?;
        }
        anyhow::ensure!(total == len, bad());
        let file = if at == map.len() {
            None
        } else {
            Some(read_origin(&map[at..], len).ok_or_else(bad)?)
        };
        Ok(Input {
            chunks: Vec::new(),
            chunk_records,
            len,
            seed,
            file,
            mapped: Some(Mapped { map, chunks }),
        })
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The seed the input was generated from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The JSON line of record `seq` (without newline).
    #[inline]
    pub fn line(&self, seq: u64) -> &[u8] {
        if let Some(m) = &self.mapped {
            return m.line(seq, self.chunk_records);
        }
        let c = &self.chunks[(seq / self.chunk_records) as usize];
        let i = (seq % self.chunk_records) as usize;
        let start = if i == 0 { 0 } else { c.ends[i - 1] as usize };
        &c.bytes[start..c.ends[i] as usize]
    }

    /// Bytes of memory the input occupies (text plus line index).
    pub fn memory_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .map(|c| (c.bytes.capacity() + c.ends.capacity() * 4) as u64)
            .sum::<u64>()
            + self.file.as_ref().map_or(0, |f| f.memory_bytes())
    }
}

impl Mapped {
    fn line(&self, seq: u64, chunk_records: u64) -> &[u8] {
        let (ends, bytes) = self.chunks[(seq / chunk_records) as usize];
        let i = (seq % chunk_records) as usize;
        let end = |i: usize| {
            let o = ends + 4 * i;
            u32::from_le_bytes(self.map[o..o + 4].try_into().expect("4 bytes")) as usize
        };
        let start = if i == 0 { 0 } else { end(i - 1) };
        &self.map[bytes + start..bytes + end(i)]
    }
}

/// Writes where a file's records came from, after the records of a shared
/// input: the path's length and bytes, the record size limit, the blank
/// lines, then each record's line number and the records over the limit
/// (count, then record and length each) — every number a `u64`,
/// little-endian.
fn write_origin(w: &mut impl std::io::Write, o: &super::input::FileOrigin) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = o.path.as_os_str().as_bytes();
    w.write_all(&(path.len() as u64).to_le_bytes())?;
    w.write_all(path)?;
    for v in [
        o.max_record_bytes as u64,
        o.blank_lines,
        o.line_of.len() as u64,
    ] {
        w.write_all(&v.to_le_bytes())?;
    }
    for v in &o.line_of {
        w.write_all(&v.to_le_bytes())?;
    }
    w.write_all(&(o.oversized.len() as u64).to_le_bytes())?;
    for (r, l) in &o.oversized {
        w.write_all(&r.to_le_bytes())?;
        w.write_all(&l.to_le_bytes())?;
    }
    Ok(())
}

/// Reads what [`write_origin`] wrote (the whole of `b`) for an input of
/// `len` records; `None` if it is not that.
fn read_origin(b: &[u8], len: u64) -> Option<super::input::FileOrigin> {
    use std::os::unix::ffi::OsStrExt;
    let mut at = 0usize;
    let mut u = || -> Option<u64> {
        let v = u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?);
        at += 8;
        Some(v)
    };
    let plen = usize::try_from(u()?).ok()?;
    let path_at = at;
    let path = b.get(path_at..path_at.checked_add(plen)?)?;
    at = path_at + plen;
    let mut u = || -> Option<u64> {
        let v = u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?);
        at += 8;
        Some(v)
    };
    let (max_record_bytes, blank_lines, lines) = (u()?, u()?, u()?);
    if lines != len || lines > (b.len() / 8) as u64 {
        return None;
    }
    let line_of = (0..lines).map(|_| u()).collect::<Option<Vec<u64>>>()?;
    let over = u()?;
    if over > (b.len() / 16) as u64 {
        return None;
    }
    let oversized = (0..over)
        .map(|_| Some((u()?, u()?)))
        .collect::<Option<Vec<(u64, u64)>>>()?;
    if at != b.len() {
        return None;
    }
    Some(super::input::FileOrigin {
        path: std::path::PathBuf::from(std::ffi::OsStr::from_bytes(path)),
        line_of,
        oversized,
        max_record_bytes: usize::try_from(max_record_bytes).ok()?,
        blank_lines,
    })
}

fn gen_chunk(seed: u64, lo: u64, hi: u64, malformed_every: u64) -> Chunk {
    let n = (hi - lo) as usize;
    let mut bytes = Vec::with_capacity(n * 300);
    let mut ends = Vec::with_capacity(n);
    for seq in lo..hi {
        let start = bytes.len();
        write_record(&mut bytes, seed, seq);
        if malformed_every > 0 && seq % malformed_every == malformed_every - 1 {
            corrupt(&mut bytes, start, seq);
        }
        ends.push(bytes.len() as u32);
    }
    bytes.shrink_to_fit();
    Chunk { bytes, ends }
}

fn corrupt(bytes: &mut Vec<u8>, start: usize, seq: u64) {
    if seq.is_multiple_of(2) {
        // Truncated mid-record, as a torn write would leave it.
        let keep = (bytes.len() - start) / 2;
        bytes.truncate(start + keep);
    } else {
        // A field of the wrong type.
        let line = String::from_utf8(bytes[start..].to_vec()).expect("generated utf-8");
        let bad = line.replacen("\"likes\":", "\"likes\":\"many\",\"x\":", 1);
        bytes.truncate(start);
        bytes.extend_from_slice(bad.as_bytes());
    }
}

fn num(out: &mut Vec<u8>, v: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(v).as_bytes());
}

/// The user of an answer: a few hot users and a long tail.
fn user_of(r: &mut Rng) -> u32 {
    if r.below(100) < 20 {
        r.below(1000) as u32
    } else {
        r.below(USERS as u64) as u32
    }
}

/// Writes the user's display name: deterministic per user id.
fn write_name(out: &mut Vec<u8>, id: u32) {
    match id % 97 {
        0 => out.extend_from_slice("Zo\u{eb} ".as_bytes()),
        1 => out.extend_from_slice(b"O\\\"Neil "),
        2 => out.extend_from_slice("\u{674e}\u{96f7} ".as_bytes()),
        _ => out.extend_from_slice(b"user_"),
    }
    num(out, id as u64);
}

fn write_record(out: &mut Vec<u8>, seed: u64, seq: u64) {
    let mut r = Rng::new(seed, seq);
    let user = user_of(&mut r);
    let reputation = mix(user as u64 ^ seed) % 200_000;
    let likes = if r.below(10) == 0 {
        r.below(20_000)
    } else {
        r.below(300)
    };
    out.extend_from_slice(b"{\"seq\":");
    num(out, seq);
    out.extend_from_slice(b",\"ts\":");
    num(out, event_time(seed, seq));
    out.extend_from_slice(b",\"answer_id\":");
    num(out, 10_000_000 + seq * 3 + r.below(3));
    out.extend_from_slice(b",\"user\":{\"id\":");
    num(out, user as u64);
    out.extend_from_slice(b",\"name\":\"");
    write_name(out, user);
    out.extend_from_slice(b"\",\"reputation\":");
    num(out, reputation);
    out.extend_from_slice(b"},\"stats\":{\"likes\":");
    num(out, likes);
    out.extend_from_slice(b",\"favorites\":");
    num(out, r.below(60));
    out.extend_from_slice(b",\"comments\":");
    num(out, r.below(40));
    out.extend_from_slice(b"},\"text\":\"");
    let target = 90 + r.below(20) as usize;
    let start = out.len();
    let mut first = true;
    while out.len() - start < target {
        if !first {
            out.push(b' ');
        }
        first = false;
        match r.below(64) {
            0 => out.extend_from_slice(b"\\\"quoted\\\""),
            1 => out.extend_from_slice(b"caf\\u00e9"),
            2 => out.extend_from_slice(b"line\\nbreak"),
            _ => out.extend_from_slice(WORDS[r.below(WORDS.len() as u64) as usize].as_bytes()),
        }
    }
    out.extend_from_slice(b"\"}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_bytes_whatever_the_thread_count() {
        let a = Input::generate(70_000, 7, 0, 1);
        let b = Input::generate(70_000, 7, 0, 3);
        for seq in [0, 1, 65_535, 65_536, 69_999] {
            assert_eq!(a.line(seq), b.line(seq));
        }
        let c = Input::generate(10, 8, 0, 1);
        assert_ne!(a.line(3), c.line(3));
    }

    #[test]
    fn generated_lines_are_valid_json_with_about_100_chars_of_text() {
        let input = Input::generate(2000, 1, 0, 2);
        for seq in 0..2000 {
            let v: serde_json::Value = serde_json::from_slice(input.line(seq)).unwrap();
            assert_eq!(v["seq"], seq);
            assert_eq!(v["ts"], event_time(1, seq));
            let text = v["text"].as_str().unwrap();
            // ~100 bytes of escaped text; unescaping shortens it a little.
            assert!((60..=140).contains(&text.chars().count()), "{text}");
        }
    }

    #[test]
    fn malformed_records_appear_exactly_where_asked() {
        let input = Input::generate(1000, 1, 100, 1);
        for seq in 0..1000 {
            let ok = serde_json::from_slice::<serde_json::Value>(input.line(seq))
                .map(|v| v["stats"]["likes"].is_u64())
                .unwrap_or(false);
            assert_eq!(ok, seq % 100 != 99, "record {seq}");
        }
    }
}
