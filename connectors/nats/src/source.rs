//! One partition of a JetStream stream as a Tandem source.
//!
//! The source instance lives on its pinned worker and only pops a
//! lock-free SPSC ring ([`rtrb`]); a task on the [`Client`]'s thread fills
//! it from an ordered pull consumer (acknowledgement-free, recreated by the
//! client at a gap). A full ring holds the task back, so backpressure
//! reaches the server as unrequested messages, not as memory.
//!
//! **Position.** The engine numbers a partition's records 0, 1, … and a
//! checkpoint holds the next one to read. The producer stamped each record
//! with that number (`Tandem-Seq`), so a restored instance finds the
//! stream sequence to start at by binary search
//! ([`crate::stream::find_record`]) and the consumer starts there
//! (`DeliverPolicy::ByStartSequence`). Every record read is checked to be
//! the next number: a gap (a message lost to retention, a foreign
//! producer) fails the job with the numbers, it is never skipped. A packed
//! message (see [`crate::stream`]) is split into its records here, on the
//! client's thread.
//!
//! **Outages.** A consumer that fails or vanishes (a server restarted, a
//! cluster electing the stream's leader) is made again at the next record
//! to read, for as long as the outage bound allows
//! ([`JetStreamSource::patience`]); past it the job fails, naming the
//! outage.

use crate::stream::{find_record, header_u64, subject, END, EVENT_TIME, EVENT_TIMES, RECORDS, SEQ};
use crate::{is_outage, nats_err, Client, Error};
use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use bytes::Bytes;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::{Source, SourcePoll};

/// Records buffered between the network thread and the worker.
pub const RING: usize = 1 << 14;

/// Messages one pull of a partition asks for, at most.
const PULL_BATCH: i64 = 64;

enum Item {
    Record { payload: Bytes, event_time: u64 },
    End,
    Failed(String),
}

/// Partition `partition` of stream `stream`: a [`Source`] of payloads.
pub struct JetStreamSource {
    client: Client,
    stream: String,
    partition: u32,
    next_seq: u64,
    ring: Option<rtrb::Consumer<Item>>,
    stop: Arc<AtomicBool>,
    ended: bool,
    patience: Duration,
}

impl JetStreamSource {
    /// Reads partition `partition` of `stream` through `client`.
    pub fn new(client: &Client, stream: &str, partition: u32) -> Self {
        JetStreamSource {
            client: client.clone(),
            stream: stream.to_string(),
            partition,
            next_seq: 0,
            ring: None,
            stop: Arc::new(AtomicBool::new(false)),
            ended: false,
            patience: crate::DEFAULT_OUTAGE,
        }
    }

    /// How long the source waits out a server that does not answer (its
    /// consumer made again at its position) before the job fails
    /// (default [`crate::DEFAULT_OUTAGE`]).
    pub fn patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    fn start(&mut self) {
        let (tx, rx) = rtrb::RingBuffer::new(RING);
        self.ring = Some(rx);
        let js = self.client.js().clone();
        let (stream, p, start, stop, patience) = (
            self.stream.clone(),
            self.partition,
            self.next_seq,
            Arc::clone(&self.stop),
            self.patience,
        );
        self.client.spawn(async move {
            let mut tx = tx;
            if let Err(e) = feed_through(&js, &stream, p, start, &mut tx, &stop, patience).await {
                let _ = push(&mut tx, Item::Failed(e.to_string()), &stop).await;
            }
        });
    }
}

impl Drop for JetStreamSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Source<Bytes> for JetStreamSource {
    fn poll_next(&mut self) -> SourcePoll<Bytes> {
        if self.ended {
            return SourcePoll::End;
        }
        if self.ring.is_none() {
            self.start();
        }
        match self.ring.as_mut().expect("started above").pop() {
            Ok(Item::Record {
                payload,
                event_time,
            }) => {
                self.next_seq += 1;
                SourcePoll::Ready {
                    value: payload,
                    event_time,
                }
            }
            Ok(Item::End) => {
                self.ended = true;
                SourcePoll::End
            }
            // The engine fails the attempt with this operator's name and
            // the message; nothing is skipped.
            Ok(Item::Failed(e)) => panic!("{}: {e}", subject(&self.stream, self.partition)),
            Err(_) => SourcePoll::Pending,
        }
    }

    fn seek(&mut self, next_seq: u64) -> Result<(), tandem::SeekError> {
        if self.ring.is_some() {
            return Err(tandem::SeekError::Source(
                "seek after the first poll".into(),
            ));
        }
        self.next_seq = next_seq;
        Ok(())
    }

    fn seeks_directly(&self) -> bool {
        true
    }
}

/// Where the next newline is.
fn memchr(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// Pushes `item`, waiting (off the worker) while the ring is full.
/// `false`: the source was dropped.
async fn push(tx: &mut rtrb::Producer<Item>, mut item: Item, stop: &AtomicBool) -> bool {
    let mut spins = 0u32;
    loop {
        match tx.push(item) {
            Ok(()) => return true,
            Err(rtrb::PushError::Full(back)) => item = back,
        }
        if stop.load(Ordering::Acquire) || tx.is_abandoned() {
            return false;
        }
        spins += 1;
        if spins < 64 {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// [`feed`], its consumer made again at the next record after an outage
/// (a consumer that failed, vanished or ended early), until `patience`
/// passes without a record read.
async fn feed_through(
    js: &async_nats::jetstream::Context,
    stream_name: &str,
    p: u32,
    start: u64,
    tx: &mut rtrb::Producer<Item>,
    stop: &AtomicBool,
    patience: Duration,
) -> Result<(), Error> {
    let mut next = start;
    let mut since: Option<(std::time::Instant, u64)> = None;
    let mut delay = Duration::from_millis(50);
    loop {
        let e = match feed(js, stream_name, p, &mut next, tx, stop).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if stop.load(Ordering::Acquire) {
            return Ok(());
        }
        // A consumer lost to a server restart answers "not found"; one
        // cut by a leader election ends early.
        let text = e.to_string();
        let lost = is_outage(&e)
            || text.contains("consumer not found")
            || text.contains("consumer ended before");
        if !lost {
            return Err(e);
        }
        let (t, at) = match since {
            // Records read since the last outage: a new one.
            Some((t, at)) if at == next => (t, at),
            _ => {
                eprintln!(
                    "tandem-nats: {}: {e}; reading again from record {next} for up to {patience:?}",
                    subject(stream_name, p)
                );
                delay = Duration::from_millis(50);
                (std::time::Instant::now(), next)
            }
        };
        since = Some((t, at));
        if t.elapsed() >= patience {
            return Err(Error::Invalid(format!(
                "{}: no record read for {:.1} s (the outage bound is {patience:?}): {e}",
                subject(stream_name, p),
                t.elapsed().as_secs_f64()
            )));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// Reads partition `p` from record `*next` on, into `tx`; `*next` follows
/// what was pushed.
async fn feed(
    js: &async_nats::jetstream::Context,
    stream_name: &str,
    p: u32,
    next: &mut u64,
    tx: &mut rtrb::Producer<Item>,
    stop: &AtomicBool,
) -> Result<(), Error> {
    let start = *next;
    let subject = subject(stream_name, p);
    let stream = js
        .get_stream(stream_name)
        .await
        .map_err(nats_err(format!("stream {stream_name}")))?;
    let deliver_policy = if start == 0 {
        DeliverPolicy::All
    } else {
        match find_record(&stream, &subject, start).await? {
            Some(s) => DeliverPolicy::ByStartSequence { start_sequence: s },
            // Not produced yet: it is the partition's next message.
            None => DeliverPolicy::ByStartSequence {
                start_sequence: stream
                    .get_info()
                    .await
                    .map_err(nats_err(format!("stream {stream_name} info")))?
                    .state
                    .last_sequence
                    + 1,
            },
        }
    };
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: subject.clone(),
            deliver_policy,
            // Pulls of at most this many messages: packed messages of
            // 32 KiB in the client's default batch of 500, for each of a
            // member's partitions, overran the server's 64 MiB of pending
            // bytes for one connection ("slow consumer"), which cut it.
            max_batch: PULL_BATCH,
            ..Default::default()
        })
        .await
        .map_err(nats_err(format!("consumer on {subject}")))?;
    let echoed = &consumer.cached_info().config.filter_subject;
    if echoed != &subject {
        return Err(Error::Invalid(format!(
            "the server ignored the consumer's filter {subject} (it answered {echoed:?}): is it older than 2.9?"
        )));
    }
    let mut msgs = consumer
        .messages()
        .await
        .map_err(nats_err(format!("reading {subject}")))?;
    while let Some(m) = msgs.next().await {
        if stop.load(Ordering::Acquire) {
            return Ok(());
        }
        let m = m.map_err(nats_err(format!("reading {subject}")))?;
        let h = m.headers.as_ref();
        let seq = header_u64(h, SEQ).ok_or_else(|| {
            Error::Invalid(format!(
                "{subject}: a message without {SEQ}: not a Tandem partition"
            ))
        })?;
        let count = header_u64(h, RECORDS).unwrap_or(1).max(1);
        // The first message after a seek may hold records before it.
        if !(seq <= *next && *next < seq + count) {
            return Err(Error::Invalid(format!(
                "{subject}: record {seq} where {} was next: the partition has a gap",
                *next
            )));
        }
        if header_u64(h, END).is_some() {
            push(tx, Item::End, stop).await;
            return Ok(());
        }
        let first_time = match header_u64(h, EVENT_TIME) {
            Some(t) => t,
            None => m
                .info()
                .map(|i| i.published.unix_timestamp_nanos().max(0) as u64)
                .unwrap_or(0),
        };
        if count == 1 {
            let item = Item::Record {
                payload: m.payload.clone(),
                event_time: first_time,
            };
            if !push(tx, item, stop).await {
                return Ok(());
            }
            *next += 1;
            continue;
        }
        let bad = |why: &str| {
            Error::Invalid(format!(
                "{subject}: the packed message of records {seq}..{}: {why}",
                seq + count
            ))
        };
        let mut times = h
            .and_then(|h| h.get(EVENT_TIMES))
            .map(|v| v.as_str().split(','));
        let mut rest = m.payload.clone();
        for i in 0..count {
            let record = match memchr(&rest) {
                Some(at) if i + 1 < count => {
                    let r = rest.slice(..at);
                    rest = rest.slice(at + 1..);
                    r
                }
                None if i + 1 == count => std::mem::take(&mut rest),
                _ => return Err(bad("its payload does not hold that many records")),
            };
            let event_time = match (i, times.as_mut()) {
                (0, _) | (_, None) => first_time,
                (_, Some(t)) => {
                    let d: i128 = t
                        .next()
                        .and_then(|d| d.parse().ok())
                        .ok_or_else(|| bad("its event times do not match its records"))?;
                    (first_time as i128 + d).clamp(0, u64::MAX as i128) as u64
                }
            };
            if seq + i < *next {
                continue;
            }
            if !push(
                tx,
                Item::Record {
                    payload: record,
                    event_time,
                },
                stop,
            )
            .await
            {
                return Ok(());
            }
            *next += 1;
        }
    }
    Err(Error::Invalid(format!(
        "{subject}: the consumer ended before the partition's end marker"
    )))
}
