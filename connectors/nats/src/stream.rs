//! Partitioned streams: how records are laid out in JetStream, producing
//! them, finding a record by its partition sequence, and dumping a stream.
//!
//! A stream `S` of `P` partitions has the subjects `S.0` … `S.<P-1>`.
//! Every record carries headers:
//!
//! - `Tandem-Seq`: its sequence number within its partition (0, 1, …),
//!   which is the engine's tuple sequence: what a checkpoint records.
//! - `Tandem-Event-Time`: event time in nanoseconds (optional; the
//!   message's timestamp otherwise).
//! - `Nats-Msg-Id`: `<partition>:<seq>`, so a producer that retries after
//!   an error inside the stream's duplicate window stores nothing twice.
//!
//! A message may pack several records (`Producer::packed`): `Tandem-Seq`
//! is then its first record's number, `Tandem-Records: n` how many it
//! holds, the payload the records newline-separated, and
//! `Tandem-Event-Times` each later record's event time as a difference
//! from the first's (comma-separated). Checkpoints, seeks and gap checks
//! stay per record.
//!
//! The last message of a partition has `Tandem-End: <records>` and no
//! payload: a source that reads it ends.

use crate::{nats_err, Client, Error};
use async_nats::jetstream::{self, stream::Config as StreamConfig};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures_util::StreamExt;
use std::collections::VecDeque;
use std::io::Write;
use std::time::Duration;

/// The record's sequence number within its partition.
pub const SEQ: &str = "Tandem-Seq";
/// The record's event time, nanoseconds.
pub const EVENT_TIME: &str = "Tandem-Event-Time";
/// The end of a partition; its value is the partition's record count.
pub const END: &str = "Tandem-End";
/// Records a packed message holds (absent: one).
pub const RECORDS: &str = "Tandem-Records";
/// A packed message's later records' event times, as differences from
/// the first's (`Tandem-Event-Time`), comma-separated.
pub const EVENT_TIMES: &str = "Tandem-Event-Times";
/// Publishes in flight, at most, per producer or sink.
pub const MAX_IN_FLIGHT: usize = 512;

/// The subject of partition `p` of stream `stream`.
pub fn subject(stream: &str, p: u32) -> String {
    format!("{stream}.{p}")
}

/// How a stream is created when it does not exist.
#[derive(Clone, Debug)]
pub struct StreamSpec {
    /// Stream name (and subject prefix).
    pub name: String,
    /// Copies kept by a cluster (1 on a single server).
    pub replicas: usize,
    /// How long the server remembers a `Nats-Msg-Id` to drop a duplicate.
    pub duplicate_window: Duration,
    /// What the stream is for, kept in its description (`None`: nothing
    /// is recorded or checked). An existing stream that says it is for
    /// something else is refused: a group's output stream names its group,
    /// so that no other group (and no producer) writes into it.
    pub purpose: Option<String>,
}

impl StreamSpec {
    /// A stream of one replica and a two-minute duplicate window.
    pub fn new(name: &str) -> Self {
        StreamSpec {
            name: name.to_string(),
            replicas: 1,
            duplicate_window: Duration::from_secs(120),
            purpose: None,
        }
    }
}

/// How long creating a stream rides out a cluster that does not answer
/// yet (a leader election, a replicated stream being placed).
const ELECTION: Duration = Duration::from_secs(30);

/// Gets stream `spec.name`, creating it (subjects `NAME.*`) if missing,
/// and checks that the server's idea of it is what this crate relies on:
/// a server older than the client silently ignores fields it does not
/// know, so the configuration is read back, not assumed.
pub async fn ensure_stream(
    js: &jetstream::Context,
    spec: &StreamSpec,
) -> Result<jetstream::stream::Stream, Error> {
    use async_nats::jetstream::context::CreateStreamErrorKind as Kind;
    let subjects = format!("{}.*", spec.name);
    let config = StreamConfig {
        name: spec.name.clone(),
        subjects: vec![subjects.clone()],
        num_replicas: spec.replicas,
        duplicate_window: spec.duplicate_window,
        description: spec.purpose.clone(),
        ..Default::default()
    };
    // A cluster that is electing its leaders (just started, or one server
    // gone) or busy placing a replicated stream answers late or not yet:
    // asked again, for a while, before it is an error.
    let asked = std::time::Instant::now();
    let mut stream = loop {
        match js.get_or_create_stream(config.clone()).await {
            Ok(s) => break s,
            Err(e)
                if matches!(e.kind(), Kind::TimedOut | Kind::JetStreamUnavailable)
                    && asked.elapsed() < ELECTION =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(nats_err(format!("creating stream {}", spec.name))(e)),
        }
    };
    let info = stream
        .info()
        .await
        .map_err(nats_err(format!("stream {} info", spec.name)))?;
    if !info.config.subjects.contains(&subjects) {
        return Err(Error::Invalid(format!(
            "stream {} exists with subjects {:?}, not {subjects}: it was not made by Tandem (or for another layout)",
            spec.name, info.config.subjects
        )));
    }
    if let Some(purpose) = &spec.purpose {
        if info.config.description.as_ref() != Some(purpose) {
            return Err(Error::Invalid(format!(
                "stream {} is {}, not {purpose}: give another stream",
                spec.name,
                info.config
                    .description
                    .as_deref()
                    .map_or("not made for that".to_string(), |d| d.to_string())
            )));
        }
    }
    Ok(stream)
}

/// The number of partitions of a stream: one more than the highest
/// partition subject that holds a message.
pub async fn partitions_of(stream: &mut jetstream::stream::Stream) -> Result<u32, Error> {
    let name = stream.cached_info().config.name.clone();
    let info = stream
        .info_with_subjects(format!("{name}.*"))
        .await
        .map_err(nats_err(format!("stream {name} subjects")))?;
    let mut n = 0u32;
    // Item by item, ending at the first error (the client's stream must
    // not be polled once it failed).
    let mut subjects = std::pin::pin!(info);
    while let Some(r) = subjects.next().await {
        let (s, _) = r.map_err(nats_err(format!("stream {name} subjects")))?;
        let p = s
            .strip_prefix(&format!("{name}."))
            .and_then(|p| p.parse::<u32>().ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "stream {name} has a subject {s}, not {name}.<partition>"
                ))
            })?;
        n = n.max(p + 1);
    }
    Ok(n)
}

/// Publishes records into a partitioned stream with bounded publishes in
/// flight (a server answering 429 or timing out is retried, never skipped).
pub struct Producer {
    js: jetstream::Context,
    stream: String,
    in_flight: VecDeque<(jetstream::context::PublishAckFuture, Pending)>,
    /// Records are packed into messages of up to this many payload bytes
    /// (0: one record a message).
    pack: usize,
    /// Each partition's message being packed.
    open: std::collections::BTreeMap<u32, Pack>,
}

/// Records of one partition being packed into a message.
#[derive(Default)]
struct Pack {
    first: u64,
    count: u64,
    first_time: Option<u64>,
    /// Later records' event times as differences from the first's.
    times: String,
    payload: Vec<u8>,
}

/// A publish to retry if its acknowledgement fails.
struct Pending {
    subject: String,
    headers: HeaderMap,
    payload: Bytes,
}

impl Producer {
    /// Publishes into `stream` (which must exist).
    pub fn new(client: &Client, stream: &str) -> Self {
        Producer {
            js: client.js().clone(),
            stream: stream.to_string(),
            in_flight: VecDeque::new(),
            pack: 0,
            open: Default::default(),
        }
    }

    /// Packs each partition's consecutive records into messages of up to
    /// `bytes` payload bytes (see the [module docs](self)); a record that
    /// holds a newline, or is larger, goes alone.
    pub fn packed(mut self, bytes: usize) -> Self {
        self.pack = bytes;
        self
    }

    /// Record `seq` of partition `p`.
    pub async fn record(
        &mut self,
        p: u32,
        seq: u64,
        event_time: Option<u64>,
        payload: Bytes,
    ) -> Result<(), Error> {
        let packable = self.pack > 0 && payload.len() < self.pack && !payload.contains(&b'\n');
        if let Some(open) = self.open.get(&p) {
            let fits = packable
                && open.first + open.count == seq
                && open.first_time.is_some() == event_time.is_some()
                && open.payload.len() + 1 + payload.len() <= self.pack;
            if !fits {
                self.close(p).await?;
            }
        }
        if !packable {
            let mut h = HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("{p}:{seq}").as_str());
            h.insert(SEQ, seq.to_string().as_str());
            if let Some(t) = event_time {
                h.insert(EVENT_TIME, t.to_string().as_str());
            }
            return self.send(subject(&self.stream, p), h, payload).await;
        }
        let open = self.open.entry(p).or_insert_with(|| Pack {
            first: seq,
            first_time: event_time,
            ..Pack::default()
        });
        if open.count > 0 {
            open.payload.push(b'\n');
            if let (Some(t0), Some(t)) = (open.first_time, event_time) {
                use std::fmt::Write as _;
                if open.count > 1 {
                    open.times.push(',');
                }
                let _ = write!(open.times, "{}", t as i128 - t0 as i128);
            }
        }
        open.payload.extend_from_slice(&payload);
        open.count += 1;
        Ok(())
    }

    /// Sends partition `p`'s packed message, if it holds any record.
    async fn close(&mut self, p: u32) -> Result<(), Error> {
        let Some(pack) = self.open.remove(&p) else {
            return Ok(());
        };
        let mut h = HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("{p}:{}", pack.first).as_str());
        h.insert(SEQ, pack.first.to_string().as_str());
        if let Some(t) = pack.first_time {
            h.insert(EVENT_TIME, t.to_string().as_str());
        }
        if pack.count > 1 {
            h.insert(RECORDS, pack.count.to_string().as_str());
            if pack.first_time.is_some() {
                h.insert(EVENT_TIMES, pack.times.as_str());
            }
        }
        self.send(subject(&self.stream, p), h, Bytes::from(pack.payload))
            .await
    }

    /// The end of partition `p`, after `records` records.
    pub async fn end(&mut self, p: u32, records: u64) -> Result<(), Error> {
        self.close(p).await?;
        let mut h = HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("{p}:end").as_str());
        h.insert(SEQ, records.to_string().as_str());
        h.insert(END, records.to_string().as_str());
        self.send(subject(&self.stream, p), h, Bytes::new()).await
    }

    /// Publishes one message with `headers` (a `Nats-Msg-Id` among them).
    pub async fn send(
        &mut self,
        subject: String,
        headers: HeaderMap,
        payload: Bytes,
    ) -> Result<(), Error> {
        while self.in_flight.len() >= MAX_IN_FLIGHT {
            self.settle_one().await?;
        }
        let p = Pending {
            subject,
            headers,
            payload,
        };
        let ack = publish(&self.js, &p).await?;
        self.in_flight.push_back((ack, p));
        Ok(())
    }

    /// Sends what is packed and waits until every publish is
    /// acknowledged.
    pub async fn flush(&mut self) -> Result<(), Error> {
        let open: Vec<u32> = self.open.keys().copied().collect();
        for p in open {
            self.close(p).await?;
        }
        while !self.in_flight.is_empty() {
            self.settle_one().await?;
        }
        Ok(())
    }

    async fn settle_one(&mut self) -> Result<(), Error> {
        let Some((ack, p)) = self.in_flight.pop_front() else {
            return Ok(());
        };
        if ack.await.is_ok() {
            return Ok(());
        }
        // Retried with its Msg-Id: if the first one was stored after all,
        // the server drops this one as a duplicate.
        let mut delay = Duration::from_millis(5);
        let mut tries = 0;
        loop {
            tries += 1;
            match publish(&self.js, &p).await?.await {
                Ok(_) => return Ok(()),
                Err(e) if tries >= 200 => {
                    return Err(Error::Nats {
                        what: format!("publishing to {} (gave up after {tries} tries)", p.subject),
                        source: Box::new(e),
                    })
                }
                Err(_) => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
            }
        }
    }
}

async fn publish(
    js: &jetstream::Context,
    p: &Pending,
) -> Result<jetstream::context::PublishAckFuture, Error> {
    let mut delay = Duration::from_millis(5);
    let mut tries = 0;
    loop {
        tries += 1;
        match js
            .publish_with_headers(p.subject.clone(), p.headers.clone(), p.payload.clone())
            .await
        {
            Ok(ack) => return Ok(ack),
            Err(e) if tries >= 200 => {
                return Err(nats_err(format!("publishing to {}", p.subject))(e))
            }
            Err(_) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
            }
        }
    }
}

/// A header's value as a number.
pub fn header_u64(h: Option<&HeaderMap>, name: &str) -> Option<u64> {
    h?.get(name)?.as_str().parse().ok()
}

/// The stream sequence of the message that holds record `n` of partition
/// `subject` (a packed message may hold records before it: the reader
/// skips them), found by a binary search over the stream on the records'
/// `Tandem-Seq` (which grows with the stream sequence within a
/// partition): `O(log len)` lookups, however long the stream. `None` when
/// the partition has no record `n` yet.
pub async fn find_record(
    stream: &jetstream::stream::Stream,
    subject: &str,
    n: u64,
) -> Result<Option<u64>, Error> {
    // `at(s)`: the partition's first message at or after stream sequence
    // `s`, as (stream sequence, its first and its last record).
    let at = |s: u64| async move {
        match stream
            .raw_message_builder()
            .sequence(s)
            .next_by_subject(subject)
            .send()
            .await
        {
            Ok(m) => {
                let seq = header_u64(Some(&m.headers), SEQ).ok_or_else(|| {
                    Error::Invalid(format!(
                        "{subject}: message {} has no {SEQ} header: not a Tandem partition",
                        m.sequence
                    ))
                })?;
                let count = header_u64(Some(&m.headers), RECORDS).unwrap_or(1).max(1);
                Ok(Some((m.sequence, seq, seq + count - 1)))
            }
            Err(e)
                if e.kind()
                    == async_nats::jetstream::stream::RawMessageErrorKind::NoMessageFound =>
            {
                Ok(None)
            }
            Err(e) => Err(nats_err(format!("{subject}: reading at {s}"))(e)),
        }
    };
    let last = stream
        .get_info()
        .await
        .map_err(nats_err(format!("{subject}: stream info")))?
        .state
        .last_sequence;
    // Lower bound: the first stream sequence whose partition message's
    // last record is >= n. `at` is monotone in `s`, and a message wholly
    // below `n` at `s` rules out everything up to `s`.
    let (mut lo, mut hi) = (1u64, last + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match at(mid).await? {
            Some((s, _, end)) if end < n => lo = s + 1,
            _ => hi = mid,
        }
    }
    match at(lo).await? {
        Some((s, seq, _)) if seq <= n => Ok(Some(s)),
        Some((_, seq, _)) if lo == 1 || n == 0 => Err(Error::Invalid(format!(
            "{subject}: record {n} is gone (the partition starts at record {seq}: retention removed it)"
        ))),
        Some((_, seq, _)) => Err(Error::Invalid(format!(
            "{subject}: no record {n} (the next is {seq}): the partition has a gap"
        ))),
        None => Ok(None),
    }
}

/// Writes every message of `stream` (its state when the dump starts) to
/// `out`, one payload a line, partitions in stream order; end markers are
/// left out. Returns the lines written.
///
/// Ends at once with [`Error::Protocol`] when the server breaks the
/// client's [`guard`](crate::guard); a write to `out` that fails is an
/// [`Error::Output`] that counts the lines written before it.
pub fn dump(client: &Client, stream: &str, out: &mut dyn Write) -> Result<u64, Error> {
    client.block_checked(async {
        let mut s = client
            .js()
            .get_stream(stream)
            .await
            .map_err(nats_err(format!("stream {stream}")))?;
        let last = s
            .info()
            .await
            .map_err(nats_err(format!("stream {stream} info")))?
            .state
            .last_sequence;
        if last == 0 {
            return Ok(0);
        }
        let consumer = s
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                deliver_policy: jetstream::consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(nats_err(format!("consumer on {stream}")))?;
        let mut msgs = consumer
            .messages()
            .await
            .map_err(nats_err(format!("reading {stream}")))?;
        let mut lines = 0;
        while let Some(m) = msgs.next().await {
            let m = m.map_err(nats_err(format!("reading {stream}")))?;
            let seq = m
                .info()
                .map_err(|e| Error::Invalid(format!("{stream}: {e}")))?
                .stream_sequence;
            if header_u64(m.headers.as_ref(), END).is_none() {
                out.write_all(&m.payload)
                    .and_then(|()| out.write_all(b"\n"))
                    .map_err(|source| Error::Output { lines, source })?;
                lines += 1;
            }
            if seq >= last {
                break;
            }
        }
        Ok(lines)
    })
}
