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
//! producer) fails the job with the numbers, it is never skipped.

use crate::stream::{find_record, header_u64, subject, END, EVENT_TIME, SEQ};
use crate::{nats_err, Client, Error};
use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use bytes::Bytes;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::{Source, SourcePoll};

/// Records buffered between the network thread and the worker.
pub const RING: usize = 1 << 14;

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
        }
    }

    fn start(&mut self) {
        let (tx, rx) = rtrb::RingBuffer::new(RING);
        self.ring = Some(rx);
        let js = self.client.js().clone();
        let (stream, p, start, stop) = (
            self.stream.clone(),
            self.partition,
            self.next_seq,
            Arc::clone(&self.stop),
        );
        self.client.spawn(async move {
            let mut tx = tx;
            if let Err(e) = feed(&js, &stream, p, start, &mut tx, &stop).await {
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

async fn feed(
    js: &async_nats::jetstream::Context,
    stream_name: &str,
    p: u32,
    start: u64,
    tx: &mut rtrb::Producer<Item>,
    stop: &AtomicBool,
) -> Result<(), Error> {
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
    let mut expected = start;
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
        if seq != expected {
            return Err(Error::Invalid(format!(
                "{subject}: record {seq} where {expected} was next: the partition has a gap"
            )));
        }
        if header_u64(h, END).is_some() {
            push(tx, Item::End, stop).await;
            return Ok(());
        }
        let event_time = match header_u64(h, EVENT_TIME) {
            Some(t) => t,
            None => m
                .info()
                .map(|i| i.published.unix_timestamp_nanos().max(0) as u64)
                .unwrap_or(0),
        };
        let item = Item::Record {
            payload: m.payload.clone(),
            event_time,
        };
        if !push(tx, item, stop).await {
            return Ok(());
        }
        expected += 1;
    }
    Err(Error::Invalid(format!(
        "{subject}: the consumer ended before the partition's end marker"
    )))
}
