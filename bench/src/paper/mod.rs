//! The paper's pipeline (seeds/000, §experiments), on Tandem.
//!
//! ```text
//! source (JSON lines) ─▶ flatmap (parse, flatten, text stats, score)
//!                        ─▶ filter (drop seq % 10 == 9)
//!                        ─▶ map = connect(levels, broadcast) (level from likes)
//!                        ─▶ key_by(user id) ─▶ keyed (count, likes sum per user)
//!                        ─▶ sink (latency; optional JSONL output)
//! levels (7 like thresholds) ─┘
//! ```
//!
//! The output is a deterministic function of the input, whatever the core
//! count, parallelism or interleaving: per-record lines carry only the
//! record's own fields and its level (never a running aggregate), the map
//! stage reads no main record before the whole mapping has arrived
//! (`CoProcess::first_ready`), and at end of stream the keyed stage emits one
//! summary line per user. Records that do not parse go to the dead-letter
//! file with the parser's message.

mod codec;
mod faults;
pub mod gen;
mod input;
pub mod json;
mod output;

use compact_str::CompactString;
use serde::Deserialize;
use std::borrow::Cow;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use tandem::checkpoint::{CheckpointError, SnapshotBytes};
use tandem::sinks::transactional::TransactionalFile;
use tandem::{
    CoProcess, Job, JobBuilder, KeyedProcess, OperatorInfo, Output, Record, Source, SourcePoll,
    Stream,
};

pub use faults::Protection;
pub use gen::{check_records, Input};
pub use input::{InputError, DEFAULT_MAX_RECORD_BYTES, KEPT_OF_OVERSIZED, MAX_RECORD_BYTES};
pub use output::{
    claim, lock_path, merge_output, part_path, staging, txn_dir, write_line, OutputClaim,
    OutputMode, SinkCounts,
};
use output::{PaperSink, SinkOut};

/// Operator names, as used in reports and fault specs.
pub mod names {
    /// The JSON source.
    pub const SOURCE: &str = "source";
    /// The level-mapping side source.
    pub const LEVELS: &str = "levels";
    /// Parse and flatten.
    pub const FLATMAP: &str = "flatmap";
    /// Drop every tenth record.
    pub const FILTER: &str = "filter";
    /// Connect with the mapping; set the level.
    pub const MAP: &str = "map";
    /// Per-user count and likes sum.
    pub const KEYED: &str = "keyed";
    /// Latency and output.
    pub const SINK: &str = "sink";
}

/// The like → level mapping: 7 thresholds (minimum likes for levels 1..=7).
pub const LEVEL_THRESHOLDS: [u32; 7] = [0, 10, 50, 100, 500, 2_000, 10_000];

/// A reference to one input line (the source hands out positions in the
/// pre-generated input, like offsets into a memory-mapped log segment).
#[derive(Clone, Copy, Debug, tandem::standby::Codec)]
pub struct LineRef(pub u64);

#[derive(Deserialize)]
struct Answer<'a> {
    seq: u64,
    ts: u64,
    answer_id: u64,
    #[serde(borrow)]
    user: User<'a>,
    stats: Stats,
    #[serde(borrow)]
    text: Cow<'a, str>,
}

#[derive(Deserialize)]
struct User<'a> {
    id: u32,
    #[serde(borrow)]
    name: Cow<'a, str>,
    reputation: u32,
}

#[derive(Deserialize)]
struct Stats {
    likes: u32,
    favorites: u32,
    comments: u32,
}

/// A parsed, flattened answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Flat {
    /// Sequence number from the input.
    pub seq: u64,
    /// Event time from the input (ns).
    pub ts: u64,
    /// The answer's id.
    pub answer_id: u64,
    /// The author's id.
    pub user_id: u32,
    /// The author's name.
    pub user_name: CompactString,
    /// The author's reputation.
    pub reputation: u32,
    /// Likes.
    pub likes: u32,
    /// Favourites.
    pub favorites: u32,
    /// Comments.
    pub comments: u32,
    /// Characters of text.
    pub text_len: u32,
    /// Words of text.
    pub word_count: u32,
    /// A deterministic engagement score.
    pub score: u64,
}

/// Parses one JSON line into a [`Flat`] record (the hot-path parser, see
/// [`json`]).
#[inline]
pub fn parse(line: &[u8]) -> Result<Flat, json::ParseError> {
    json::parse_answer(line).map(flatten)
}

/// The same as [`parse`], through serde_json's derive: the reference the
/// hot-path parser is tested against.
pub fn parse_with_serde(line: &[u8]) -> Result<Flat, serde_json::Error> {
    let a: Answer<'_> = serde_json::from_slice(line)?;
    Ok(flatten(json::Answer {
        seq: a.seq,
        ts: a.ts,
        answer_id: a.answer_id,
        user_id: a.user.id,
        user_name: CompactString::from(a.user.name.as_ref()),
        reputation: a.user.reputation,
        likes: a.stats.likes,
        favorites: a.stats.favorites,
        comments: a.stats.comments,
        text_chars: a.text.chars().count() as u32,
        text_words: a.text.split_whitespace().count() as u32,
    }))
}

/// Adds the score to a parsed answer.
#[inline]
fn flatten(a: json::Answer) -> Flat {
    let score = 3 * a.likes as u64
        + 5 * a.favorites as u64
        + 2 * a.comments as u64
        + (a.reputation / 1000) as u64
        + a.text_words as u64;
    Flat {
        seq: a.seq,
        ts: a.ts,
        answer_id: a.answer_id,
        user_id: a.user_id,
        user_name: a.user_name,
        reputation: a.reputation,
        likes: a.likes,
        favorites: a.favorites,
        comments: a.comments,
        text_len: a.text_chars,
        word_count: a.text_words,
        score,
    }
}

/// A flattened answer with its level.
#[derive(Clone, Debug, PartialEq, tandem::standby::Codec)]
pub struct Levelled {
    /// The answer.
    pub flat: Flat,
    /// Its level, 1..=7, from likes.
    pub level: u8,
}

/// What the keyed stage emits.
#[derive(Clone, Debug, PartialEq, tandem::standby::Codec)]
pub enum PaperOut {
    /// One per record that passed the filter.
    Record(Levelled),
    /// One per user at end of stream.
    Summary {
        /// The user.
        user_id: u32,
        /// Records of that user.
        count: u64,
        /// Sum of their likes.
        likes_sum: u64,
    },
}

/// A mapping record: records with at least `min_likes` likes get `level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelRule {
    /// Threshold.
    pub min_likes: u32,
    /// Level.
    pub level: u8,
}

/// Source partition `instance` of `parallelism`: every `parallelism`-th
/// record of the input, starting at `instance`. Interleaved (not in
/// contiguous ranges) so that input record `n` enters the pipeline at about
/// `n / rate` seconds whatever the parallelism, and a fault named by `n`
/// fires that far into the run.
pub struct JsonSource {
    next: u64,
    end: u64,
    step: u64,
    seed: u64,
}

impl JsonSource {
    /// The partition's share of `len` records.
    pub fn partition(len: u64, seed: u64, instance: usize, parallelism: usize) -> Self {
        JsonSource {
            next: instance as u64,
            end: len,
            step: parallelism as u64,
            seed,
        }
    }
}

/// The tuple ID the engine gives input record `n` (its `seq`) when the
/// source has `parallelism` partitions: partition `n % parallelism`, offset
/// `n / parallelism` within it.
pub fn tuple_of(parallelism: usize, n: u64) -> tandem::TupleId {
    let p = parallelism as u64;
    tandem::TupleId::new((n % p) as u32, n / p)
}

/// The input record (its `seq`) of tuple ID `t`: the inverse of
/// [`tuple_of`].
pub fn seq_of(parallelism: usize, t: tandem::TupleId) -> u64 {
    t.seq() * parallelism as u64 + t.partition() as u64
}

impl Source<LineRef> for JsonSource {
    #[inline]
    fn poll_next(&mut self) -> SourcePoll<LineRef> {
        if self.next >= self.end {
            return SourcePoll::End;
        }
        let seq = self.next;
        self.next += self.step;
        SourcePoll::Ready {
            value: LineRef(seq),
            event_time: gen::event_time(self.seed, seq),
        }
    }

    /// A position in the input is an offset, like one in a log segment.
    fn seek(&mut self, next_seq: u64) -> Result<(), tandem::SeekError> {
        let at = next_seq
            .checked_mul(self.step)
            .and_then(|o| o.checked_add(self.next))
            .filter(|&at| at <= self.end.max(self.next) + self.step)
            .ok_or(tandem::SeekError::PastEnd {
                len: self.end,
                target: next_seq,
            })?;
        self.next = at;
        Ok(())
    }

    fn seeks_directly(&self) -> bool {
        true
    }
}

struct LevelSource(usize);

impl Source<LevelRule> for LevelSource {
    fn poll_next(&mut self) -> SourcePoll<LevelRule> {
        match LEVEL_THRESHOLDS.get(self.0) {
            Some(&min_likes) => {
                self.0 += 1;
                SourcePoll::Ready {
                    value: LevelRule {
                        min_likes,
                        level: self.0 as u8,
                    },
                    event_time: 0,
                }
            }
            None => SourcePoll::End,
        }
    }
}

/// Sets the level of each record once all rules have arrived.
struct Leveler {
    rules: Vec<LevelRule>,
}

impl CoProcess<Flat, LevelRule, Levelled> for Leveler {
    fn process_first(&mut self, rec: Record<Flat>, out: &mut Output<'_, Levelled>) {
        let likes = rec.value.likes;
        let level = self
            .rules
            .iter()
            .filter(|r| r.min_likes <= likes)
            .map(|r| r.level)
            .max()
            .unwrap_or(0);
        out.emit(Levelled {
            flat: rec.value,
            level,
        });
    }

    fn process_second(&mut self, rec: Record<LevelRule>, _out: &mut Output<'_, Levelled>) {
        self.rules.push(rec.value);
    }

    fn first_ready(&self) -> bool {
        self.rules.len() >= LEVEL_THRESHOLDS.len()
    }

    /// Every instance reads the same broadcast rules: a restore at another
    /// parallelism gives each new instance a copy.
    fn redistribution() -> tandem::Redistribution {
        tandem::Redistribution::Replicate
    }

    /// The rules received so far: a restored instance must not wait for a
    /// side stream that has already ended.
    fn snapshot_state(&mut self) -> Result<Option<SnapshotBytes>, CheckpointError> {
        let rules: Vec<(u32, u8)> = self.rules.iter().map(|r| (r.min_likes, r.level)).collect();
        tandem::checkpoint::serialize(&rules, 64 + 8 * rules.len()).map(Some)
    }

    fn restore_state(&mut self, payload: &[u8]) -> Result<(), CheckpointError> {
        let rules = tandem::checkpoint::access::<Vec<(u32, u8)>>(payload)?;
        self.rules = rules
            .iter()
            .map(|r| LevelRule {
                min_likes: r.0.to_native(),
                level: r.1,
            })
            .collect();
        Ok(())
    }
}

/// Per user: how many records and the sum of their likes.
struct PerUser;

impl KeyedProcess<u32, Levelled, PaperOut> for PerUser {
    type State = (u64, u64);

    #[inline]
    fn process(
        &mut self,
        _user: &u32,
        s: &mut (u64, u64),
        rec: Record<Levelled>,
        out: &mut Output<'_, PaperOut>,
    ) {
        s.0 += 1;
        s.1 += rec.value.flat.likes as u64;
        out.emit(PaperOut::Record(rec.value));
    }

    fn on_end(&mut self, user: &u32, s: &mut (u64, u64), out: &mut Output<'_, PaperOut>) {
        out.emit(PaperOut::Summary {
            user_id: *user,
            count: s.0,
            likes_sum: s.1,
        });
    }
}

/// How to build the pipeline.
#[derive(Clone, Debug)]
pub struct PaperOptions {
    /// Instances of every operator (the level source always has one).
    pub parallelism: usize,
    /// Total source rate in records/s (`None`: as fast as possible).
    pub rate: Option<f64>,
    /// Where to write the JSONL output (`None`: count only).
    pub output: Option<PathBuf>,
    /// How to write it.
    pub output_mode: OutputMode,
    /// Operators built to run with a standby (`flatmap`, `filter`,
    /// `keyed`); the runtime's standby config decides whether they do.
    pub standby: Vec<String>,
}

/// Builds the pipeline over `input`; the returned counts fill in as the sinks
/// finish.
pub fn build_job(input: Arc<Input>, opts: &PaperOptions) -> anyhow::Result<(Job, Arc<SinkCounts>)> {
    use names::*;
    let job = JobBuilder::new("paper");
    job.default_parallelism(opts.parallelism);
    // What leaves a backed-up chain under process isolation.
    job.codec::<Flat>().codec::<Levelled>().codec::<PaperOut>();
    let (len, seed) = (input.len(), input.seed());
    let mut source = job.source(SOURCE, move |i| {
        JsonSource::partition(len, seed, i.instance, i.parallelism)
    });
    if let Some(r) = opts.rate {
        source = source.rate_limit(r);
    }
    let levels = levels(&job);
    for s in &opts.standby {
        anyhow::ensure!(
            [FLATMAP, FILTER, KEYED].contains(&s.as_str()),
            "--standby {s}: only flatmap, filter and keyed can have a standby (map has two inputs, sources and sinks none)"
        );
    }
    let standby = |name: &str| opts.standby.iter().any(|s| s == name);
    if standby(FLATMAP) {
        source = source.standby();
    }
    let parsed = source.flat_map(FLATMAP, move |line: LineRef, out: &mut Output<'_, Flat>| {
        let bytes = input.line(line.0);
        if let Some((len, max)) = input.oversized(line.0) {
            // Only its head was kept: it never reaches a queue.
            return out.dead_letter(
                format_args!(
                    "{}: a record of {len} bytes is over the limit of {max} bytes (--max-record-bytes); its first {} bytes are kept here",
                    input.position(line.0),
                    bytes.len()
                ),
                bytes,
            );
        }
        match parse(bytes) {
            Ok(flat) => out.emit(flat),
            Err(e) => out.dead_letter(
                format_args!("{}: invalid answer record: {e}", input.position(line.0)),
                bytes,
            ),
        }
    });
    let counts = Arc::new(SinkCounts::default());
    let c = Arc::clone(&counts);
    // Output locations are created here, so an unwritable output is an
    // error now, not a failure inside a running job.
    // (Not in a child of process isolation: the driver's sinks write.)
    let output_files = if tandem::is_incarnation_process() {
        None
    } else {
        opts.output.as_ref()
    };
    match (output_files, opts.output_mode) {
        (Some(o), OutputMode::Direct) => {
            for i in 0..opts.parallelism {
                let p = part_path(o, i);
                File::create(&p)
                    .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", p.display()))?;
            }
        }
        (Some(o), OutputMode::Transactional) => {
            let d = txn_dir(o);
            if d.exists() {
                std::fs::remove_dir_all(&d)
                    .map_err(|e| anyhow::anyhow!("cannot clear {}: {e}", d.display()))?;
            }
            std::fs::create_dir_all(&d)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", d.display()))?;
        }
        (None, _) => {}
    }
    let output = opts.output.clone();
    let mode = opts.output_mode;
    // Opened by each attempt's sink instances (a restarted attempt builds
    // them again); an I/O error here panics in the factory, which fails
    // the attempt with the sink's name.
    let open = move |info: &OperatorInfo| -> SinkOut {
        match (&output, mode) {
            (None, _) => SinkOut::None,
            (Some(o), OutputMode::Direct) => {
                let p = part_path(o, info.instance);
                SinkOut::Direct(
                    std::fs::OpenOptions::new()
                        .append(true)
                        .open(&p)
                        .unwrap_or_else(|e| panic!("cannot open {}: {e}", p.display())),
                )
            }
            (Some(o), OutputMode::Transactional) => SinkOut::Transactional(
                TransactionalFile::open(
                    txn_dir(o),
                    info.instance,
                    info.attempt,
                    info.restored.clone(),
                )
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", txn_dir(o).display())),
            ),
        }
    };
    pipeline(&parsed, &levels, &standby)
        .sink(SINK, move |info| PaperSink::new(open(info), Arc::clone(&c)));
    Ok((job.build()?, counts))
}

/// The pipeline after parsing — filter, level (with the broadcast `levels`
/// source), per-user stats — up to the sink, which the caller adds.
/// `standby(name)`: whether operator `name` is built with a standby.
pub fn pipeline(
    parsed: &Stream<Flat>,
    levels: &Stream<LevelRule>,
    standby: &dyn Fn(&str) -> bool,
) -> Stream<PaperOut> {
    use names::*;
    let parsed = if standby(FILTER) {
        parsed.standby()
    } else {
        parsed.clone()
    };
    let mapped = parsed
        .filter(FILTER, |f: &Flat| f.seq % 10 != 9)
        .connect(&levels.clone().broadcast())
        .process(MAP, |_| Leveler { rules: Vec::new() });
    let mapped = if standby(KEYED) {
        mapped.standby()
    } else {
        mapped
    };
    mapped
        .key_by(|l: &Levelled| l.flat.user_id)
        .process(KEYED, |_| PerUser)
}

/// The level rules' source (one instance).
pub fn levels(job: &JobBuilder) -> Stream<LevelRule> {
    job.source(names::LEVELS, |_| LevelSource(0)).parallelism(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem::standby::Codec;

    #[test]
    fn parse_unescapes_and_counts_text() {
        let line = br#"{"seq":3,"ts":9,"answer_id":4,"user":{"id":5,"name":"O\"Neil","reputation":2500},"stats":{"likes":10,"favorites":1,"comments":2},"text":"caf\u00e9 \"q\" a\nb"}"#;
        let f = parse(line).unwrap();
        assert_eq!(f.user_name, "O\"Neil");
        assert_eq!(f.text_len, 12); // café "q" a\nb
        assert_eq!(f.word_count, 4);
        assert_eq!(f.score, 30 + 5 + 4 + 2 + 4);
    }

    #[test]
    fn parse_rejects_wrong_types_and_truncation() {
        assert!(parse(br#"{"seq":1"#).is_err());
        assert!(parse(br#"{"seq":"x","ts":1}"#).is_err());
    }

    fn agree(line: &[u8]) -> Result<(), String> {
        let ours = parse(line);
        let theirs = parse_with_serde(line);
        match (&ours, &theirs) {
            (Ok(a), Ok(b)) if a == b => Ok(()),
            (Err(_), Err(_)) => Ok(()),
            // Deliberate: the whole line must be UTF-8 (RFC 8259), where
            // serde_json does not check the strings of fields it skips.
            (Err(e), Ok(_)) if e.what == "invalid UTF-8" && std::str::from_utf8(line).is_err() => {
                Ok(())
            }
            _ => Err(format!(
                "disagree on {:?}: ours {ours:?} serde {theirs:?}",
                String::from_utf8_lossy(line)
            )),
        }
    }

    #[test]
    fn hand_parser_agrees_with_serde_on_generated_records() {
        let input = gen::Input::generate(20_000, 3, 97, 1);
        for seq in 0..input.len() {
            agree(input.line(seq)).unwrap();
        }
    }

    #[test]
    fn invalid_utf8_in_a_skipped_field_is_refused_where_serde_lets_it_pass() {
        let mut line = br#"{"seq":1,"ts":2,"answer_id":3,"user":{"id":4,"name":"n","reputation":5},"stats":{"likes":6,"favorites":7,"comments":8},"text":"T","x":"?"}"#.to_vec();
        let at = line.iter().rposition(|&b| b == b'?').unwrap();
        line[at] = 0xff;
        assert!(parse_with_serde(&line).is_ok());
        assert_eq!(parse(&line).unwrap_err().what, "invalid UTF-8");
        agree(&line).unwrap();
    }

    #[test]
    fn hand_parser_agrees_with_serde_on_edge_cases() {
        let base = r#"{"seq":1,"ts":2,"answer_id":3,"user":{"id":4,"name":"n","reputation":5},"stats":{"likes":6,"favorites":7,"comments":8},"text":"T"}"#;
        let cases = [
            base.to_string(),
            base.replace("\"T\"", r#""a\u00e9\ud83d\ude00 \t b\u2003c""#),
            base.replace("\"T\"", r#""\ud83d""#),
            base.replace("\"T\"", r#""\udc00x""#),
            base.replace("\"T\"", "\"\u{a0}x\u{3000}y\""),
            base.replace("\"seq\":1", "\"seq\":-0"),
            base.replace("\"seq\":1", "\"seq\":-1"),
            base.replace("\"seq\":1", "\"seq\":1.0"),
            base.replace("\"seq\":1", "\"seq\":1e3"),
            base.replace("\"seq\":1", "\"seq\":01"),
            base.replace("\"seq\":1", "\"seq\":18446744073709551616"),
            base.replace("\"id\":4", "\"id\":4294967296"),
            base.replace("\"seq\":1,", ""),
            base.replace("\"seq\":1", "\"seq\":1,\"seq\":1"),
            base.replace(
                "\"seq\":1",
                "\"extra\":[1,{\"a\":[true,false,null,\"x\\\"\"]},-2.5e-3],\"seq\":1",
            ),
            base.replace("\"seq\":1", "\"s\\u0065q\":1"),
            base.replace("\"seq\":1", " \"seq\" : 1 "),
            format!("{base} "),
            format!("{base} x"),
            format!("[{base}]"),
            base.replace("\"n\"", "\"\\x\""),
            base.replace("\"n\"", "null"),
            base.replace("\"T\"", "\"a\u{1}b\""),
            base.replace("\"extra\"", "nope"),
            base.replace("\"seq\":1", "\"x\":tru,\"seq\":1"),
        ];
        for c in cases {
            agree(c.as_bytes()).unwrap();
        }
        // Invalid UTF-8 inside the strings the fast path reads itself.
        for bad in [&b"\"n\xff\""[..], b"\"\xc3\"", b"\"\xe2\x82\""] {
            let mut line = base.as_bytes().to_vec();
            let at = base.find("\"n\"").unwrap();
            line.splice(at..at + 3, bad.iter().copied());
            agree(&line).unwrap();
            assert!(parse(&line).is_err());
            let mut line = base.as_bytes().to_vec();
            let at = base.find("\"T\"").unwrap();
            line.splice(at..at + 3, bad.iter().copied());
            assert!(parse(&line).is_err());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Random edits of valid records: both parsers accept exactly the
        /// same lines and read the same values from them.
        #[test]
        fn hand_parser_agrees_with_serde_on_mutated_records(
            seq in 0u64..5000,
            edits in proptest::collection::vec((0usize..400, 0usize..4, proptest::sample::select(vec![
                b'"', b'\\', b'{', b'}', b'[', b']', b':', b',', b' ', b'0', b'9', b'-', b'.',
                b'e', b'u', b'n', b't', b'a', 0x01, 0xc3, 0xa9,
            ])), 0..4),
        ) {
            let input = gen::Input::generate(seq + 1, 5, 0, 1);
            let mut line = input.line(seq).to_vec();
            for (pos, op, byte) in edits {
                let pos = pos % (line.len() + 1);
                match op {
                    0 if pos < line.len() => { line.remove(pos); }
                    1 => line.insert(pos, byte),
                    2 if pos < line.len() => line[pos] = byte,
                    _ => line.truncate(pos),
                }
            }
            proptest::prop_assert!(agree(&line).is_ok(), "{}", agree(&line).unwrap_err());
        }
    }

    #[test]
    fn tuple_of_names_the_partition_and_offset_the_source_assigns() {
        for (len, p) in [(10u64, 3usize), (100_003, 4), (7, 1), (5, 8)] {
            let mut seen = 0;
            for i in 0..p {
                let mut s = JsonSource::partition(len, 0, i, p);
                let mut k = 0;
                while let SourcePoll::Ready { value, .. } = s.poll_next() {
                    let id = tandem::TupleId::new(i as u32, k);
                    assert_eq!(tuple_of(p, value.0), id, "len {len} p {p}");
                    assert_eq!(seq_of(p, id), value.0);
                    k += 1;
                    seen += 1;
                }
            }
            assert_eq!(seen, len);
        }
    }

    #[test]
    fn seek_resumes_a_partition_at_the_checkpointed_offset() {
        let (len, p) = (1000u64, 3usize);
        for i in 0..p {
            let full: Vec<u64> = {
                let mut s = JsonSource::partition(len, 0, i, p);
                std::iter::from_fn(|| match s.poll_next() {
                    SourcePoll::Ready { value, .. } => Some(value.0),
                    _ => None,
                })
                .collect()
            };
            for k in [0, 1, 17, full.len() as u64] {
                let mut s = JsonSource::partition(len, 0, i, p);
                s.seek(k).unwrap();
                let rest: Vec<u64> = std::iter::from_fn(|| match s.poll_next() {
                    SourcePoll::Ready { value, .. } => Some(value.0),
                    _ => None,
                })
                .collect();
                assert_eq!(rest, full[k as usize..], "partition {i} from {k}");
            }
            assert!(JsonSource::partition(len, 0, i, p).seek(u64::MAX).is_err());
        }
    }

    #[test]
    fn records_round_trip_through_the_standby_codec() {
        let input = gen::Input::generate(200, 9, 0, 1);
        for seq in 0..input.len() {
            let f = parse(input.line(seq)).unwrap();
            let l = Levelled { flat: f, level: 3 };
            let mut b = Vec::new();
            l.encode(&mut b);
            let (back, rest) = Levelled::decode(&b).unwrap();
            assert_eq!(back, l);
            assert!(rest.is_empty());
            assert!(Levelled::decode(&b[..b.len() - 1]).is_err());
        }
    }

    #[test]
    fn output_lines_have_a_stable_field_order() {
        let mut buf = Vec::new();
        write_line(
            &mut buf,
            &PaperOut::Summary {
                user_id: 1,
                count: 2,
                likes_sum: 3,
            },
        );
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "{\"type\":\"summary\",\"user_id\":1,\"count\":2,\"likes_sum\":3}\n"
        );
    }
}
