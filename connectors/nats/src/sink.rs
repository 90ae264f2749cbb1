//! Exactly-once output into a JetStream stream.
//!
//! The output between two checkpoint barriers is an *epoch*, named by the
//! barrier that closes it (`c<id>`), or `f<id>` for the output after the
//! last barrier `id` (the final epoch). It goes through three steps:
//!
//! 1. **Staged** (`pre_commit`, phase one): the epoch's messages are stored
//!    as one object `<job>/<part>/stage/<epoch>` in the checkpoint store's
//!    object store, off the host, by the client's thread. The checkpoint is
//!    published only once that is done ([`tandem::Committer::prepared`]).
//! 2. **Committed**: the checkpoint's pointer moved
//!    ([`crate::store::ObjectStoreReplicator`]): from now on, whoever owns
//!    the part restores this checkpoint and publishes the staged epoch.
//! 3. **Published** (`commit`, phase two): each message with
//!    `Nats-Msg-Id: <job>:<part>:<epoch>:<index>`, then the staged object
//!    is deleted.
//!
//! The id depends only on the epoch and the message's place in it, so a
//! process that takes a part over and republishes a staged epoch (its
//! predecessor died between steps 2 and 3, or in the middle of 3) sends
//! the same ids, and the server drops what it already has — within the
//! stream's duplicate window. For a takeover later than that window,
//! [`settle`] reads the id of the partition's last stored message and
//! skips what sorts at or before it (epochs are published in order, and
//! the messages of one epoch in order on one connection).
//!
//! An epoch whose checkpoint never committed is deleted by the next owner
//! and its output produced again by the replay, under the next
//! checkpoint's name.

use crate::store::{CheckpointStore, ObjectStoreReplicator, Pointer};
use crate::stream::{subject, Producer};
use crate::{nats_err, Client, Error};
use async_nats::HeaderMap;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};
use tandem::{Committer, Record, Sink, FINAL_EPOCH};
use tokio::sync::mpsc;

/// The epoch ids of one part, as they sort: numbered epochs in order,
/// then final epochs.
fn epoch_name(final_after: Option<u64>, id: u64) -> String {
    match final_after {
        None => format!("c{id:020}"),
        Some(k) => format!("f{k:020}"),
    }
}

/// The checkpoint a numbered epoch belongs to (`None` for a final one).
pub(crate) fn epoch_id(name: &str) -> Option<u64> {
    match parse_epoch(name)? {
        (false, id) => Some(id),
        (true, _) => None,
    }
}

/// Parses an epoch name back: `(is_final, id)`.
fn parse_epoch(name: &str) -> Option<(bool, u64)> {
    let (kind, id) = name.split_at_checked(1)?;
    let id = id.parse().ok()?;
    match kind {
        "c" => Some((false, id)),
        "f" => Some((true, id)),
        _ => None,
    }
}

/// Where a part's output goes.
#[derive(Clone, Debug)]
pub struct SinkTarget {
    /// The client.
    pub client: Client,
    /// Where epochs are staged.
    pub store: CheckpointStore,
    /// The output stream (it must exist).
    pub stream: String,
    /// The job's name (the first part of every message id).
    pub job: String,
    /// The part (`p3`).
    pub part: String,
    /// The output partition: messages go to `<stream>.<partition>`.
    pub partition: u32,
    /// The part's checkpoint pointer: the end of the job is recorded there
    /// before its final output is published.
    pub pointer: Arc<ObjectStoreReplicator>,
    /// Records are packed, newline-separated, into messages of up to this
    /// many bytes (header `Tandem-Records`: how many); 0: one record a
    /// message.
    pub batch_bytes: usize,
}

/// The number of records a packed output message holds (absent: one).
pub const RECORDS: &str = "Tandem-Records";

impl SinkTarget {
    fn stage_prefix(&self) -> String {
        format!("{}/{}/stage/", self.job, self.part)
    }

    fn msg_id(&self, epoch: &str, i: usize) -> String {
        format!("{}:{}:{epoch}:{i}", self.job, self.part)
    }
}

enum Cmd {
    Stage { epoch: String, lines: Bytes },
    Publish { upto: u64 },
    PublishFinal,
    Settle(std::sync::mpsc::Sender<Result<(), String>>),
}

#[derive(Default)]
struct Progress {
    staged: BTreeSet<String>,
    failed: Option<String>,
}

struct Shared {
    tx: mpsc::UnboundedSender<Cmd>,
    progress: Mutex<Progress>,
    changed: Condvar,
}

/// A sink instance writing into a JetStream stream, exactly once; its
/// records are encoded by `encode` (one message each).
pub struct JetStreamSink<T> {
    encode: fn(&T, &mut Vec<u8>),
    lines: Vec<u8>,
    scratch: Vec<u8>,
    last_barrier: u64,
    shared: Arc<Shared>,
}

impl<T> JetStreamSink<T> {
    /// Opens the sink of `target` for an instance restored from
    /// `restored` (its checkpoint id: the name of the final epoch if no
    /// barrier follows). [`settle`] must have run for the part first.
    pub fn new(target: SinkTarget, restored: Option<u64>, encode: fn(&T, &mut Vec<u8>)) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            tx,
            progress: Mutex::new(Progress::default()),
            changed: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        target.client.clone().spawn(run(target, rx, s));
        JetStreamSink {
            encode,
            lines: Vec::new(),
            scratch: Vec::new(),
            last_barrier: restored.unwrap_or(0),
            shared,
        }
    }
}

impl<T: 'static> Sink<T> for JetStreamSink<T> {
    fn write(&mut self, rec: Record<T>) -> std::io::Result<()> {
        self.scratch.clear();
        (self.encode)(&rec.value, &mut self.scratch);
        // Length-prefixed: a payload may hold any byte.
        self.lines
            .extend_from_slice(&(self.scratch.len() as u32).to_le_bytes());
        self.lines.extend_from_slice(&self.scratch);
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: u64) -> std::io::Result<()> {
        let epoch = if checkpoint == FINAL_EPOCH {
            epoch_name(Some(self.last_barrier), 0)
        } else {
            self.last_barrier = checkpoint;
            epoch_name(None, checkpoint)
        };
        let lines = Bytes::from(std::mem::take(&mut self.lines));
        self.shared
            .tx
            .send(Cmd::Stage { epoch, lines })
            .map_err(|_| std::io::Error::other("the NATS client thread is gone"))
    }

    fn committer(&self) -> Option<Box<dyn Committer>> {
        Some(Box::new(JetStreamCommitter {
            shared: Arc::clone(&self.shared),
        }))
    }
}

struct JetStreamCommitter {
    shared: Arc<Shared>,
}

impl JetStreamCommitter {
    fn send(&self, c: Cmd) -> std::io::Result<()> {
        self.shared
            .tx
            .send(c)
            .map_err(|_| std::io::Error::other("the NATS client thread is gone"))
    }
}

impl Committer for JetStreamCommitter {
    fn prepared(&mut self, checkpoint: u64) -> std::io::Result<bool> {
        let p = self.shared.progress.lock().unwrap();
        if let Some(e) = &p.failed {
            return Err(std::io::Error::other(e.clone()));
        }
        Ok(p.staged.contains(&epoch_name(None, checkpoint)))
    }

    fn commit(&mut self, checkpoint: u64) -> std::io::Result<()> {
        if checkpoint == FINAL_EPOCH {
            return self.commit_final();
        }
        self.send(Cmd::Publish { upto: checkpoint })
    }

    fn commit_final(&mut self) -> std::io::Result<()> {
        self.send(Cmd::PublishFinal)
    }

    fn settle(&mut self) -> std::io::Result<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.send(Cmd::Settle(tx))?;
        rx.recv()
            .map_err(|_| std::io::Error::other("the NATS client thread is gone"))?
            .map_err(std::io::Error::other)
    }
}

/// The client-thread side of one sink instance: stages, publishes and
/// settles in the order the sink and its committer asked.
async fn run(target: SinkTarget, mut rx: mpsc::UnboundedReceiver<Cmd>, shared: Arc<Shared>) {
    let mut staged: BTreeMap<String, Bytes> = BTreeMap::new();
    let mut producer = Producer::new(&target.client, &target.stream);
    let mut failed: Option<String> = None;
    while let Some(cmd) = rx.recv().await {
        let r: Result<(), Error> = async {
            match cmd {
                Cmd::Stage { epoch, lines } => {
                    // Stored even when empty: a successor finds every
                    // epoch the pointer names.
                    let name = format!("{}{epoch}", target.stage_prefix());
                    target.store.put(&name, &lines).await?;
                    target.pointer.staged(&epoch);
                    staged.insert(epoch.clone(), lines);
                    shared.progress.lock().unwrap().staged.insert(epoch);
                    shared.changed.notify_all();
                }
                Cmd::Publish { upto } => {
                    let due: Vec<String> = staged
                        .keys()
                        .filter(|e| matches!(parse_epoch(e), Some((false, id)) if id <= upto))
                        .cloned()
                        .collect();
                    for e in due {
                        let lines = staged.remove(&e).expect("listed above");
                        publish_epoch(&target, &mut producer, &e, &lines, None).await?;
                    }
                }
                Cmd::PublishFinal => {
                    // Numbered epochs still staged (their checkpoints were in
                    // flight as the input ended) come first, then the final.
                    let due: Vec<String> = staged.keys().cloned().collect();
                    target
                        .pointer
                        .finish(due.clone())
                        .await
                        .map_err(|e| Error::Invalid(e.to_string()))?;
                    for e in due {
                        let lines = staged.remove(&e).expect("listed above");
                        publish_epoch(&target, &mut producer, &e, &lines, None).await?;
                    }
                }
                Cmd::Settle(done) => {
                    let r = producer.flush().await;
                    let _ = done.send(match (&failed, r) {
                        (Some(f), _) => Err(f.clone()),
                        (None, Err(e)) => Err(e.to_string()),
                        (None, Ok(())) => Ok(()),
                    });
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = r {
            let e = format!("{}: {e}", subject(&target.stream, target.partition));
            failed.get_or_insert(e.clone());
            shared.progress.lock().unwrap().failed.get_or_insert(e);
            shared.changed.notify_all();
        }
    }
}

/// Publishes one staged epoch in order, skipping messages up to `skip`
/// (the id of the last message the stream holds, when it is older than the
/// duplicate window), then deletes the staged object.
async fn publish_epoch(
    target: &SinkTarget,
    producer: &mut Producer,
    epoch: &str,
    lines: &[u8],
    skip: Option<(&str, usize)>,
) -> Result<(), Error> {
    let subject = subject(&target.stream, target.partition);
    let truncated = || {
        Error::Invalid(format!(
            "staged epoch {epoch} of {} is truncated",
            target.part
        ))
    };
    let mut rest = lines;
    let mut i = 0usize;
    // Records packed into messages of up to `batch_bytes`, newline-
    // separated; a message's id is its first record's index, so the
    // packing — a function of the epoch alone — is the same in every
    // publish of it.
    let mut batch: Vec<u8> = Vec::new();
    let (mut first, mut count) = (0usize, 0usize);
    let send = |batch: &mut Vec<u8>, first: usize, count: usize| {
        let skipped = count == 0 || skip.is_some_and(|(e, j)| (epoch, first) <= (e, j));
        let payload = Bytes::from(std::mem::take(batch));
        (!skipped).then(|| {
            let mut h = HeaderMap::new();
            h.insert("Nats-Msg-Id", target.msg_id(epoch, first).as_str());
            if count > 1 {
                h.insert(RECORDS, count.to_string().as_str());
            }
            (h, payload)
        })
    };
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(4).ok_or_else(truncated)?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (payload, tail) = tail.split_at_checked(len).ok_or_else(truncated)?;
        rest = tail;
        if target.batch_bytes > 0 && payload.contains(&b'\n') {
            return Err(Error::Invalid(format!(
                "{}: a record holds a newline, so it cannot be packed with others (a batch is newline-separated)",
                target.part
            )));
        }
        if count > 0 && batch.len() + 1 + payload.len() > target.batch_bytes {
            if let Some((h, payload)) = send(&mut batch, first, count) {
                producer.send(subject.clone(), h, payload).await?;
            }
            count = 0;
        }
        if count == 0 {
            first = i;
        } else {
            batch.push(b'\n');
        }
        batch.extend_from_slice(payload);
        count += 1;
        i += 1;
    }
    if let Some((h, payload)) = send(&mut batch, first, count) {
        producer.send(subject.clone(), h, payload).await?;
    }
    producer.flush().await?;
    target.pointer.published(epoch);
    target
        .store
        .delete(&format!("{}{epoch}", target.stage_prefix()))
        .await
}

/// Before a part's job starts on a process that took it over (or restarts
/// it): publishes the epochs its predecessor staged and committed but may
/// not have published — those `pointer` lists as pending, or, when it says
/// the job finished, exactly the epochs it lists. Returns whether the part
/// is finished: then there is nothing left to run.
///
/// Epochs staged after the checkpoint restored are not committed: the job
/// produces their output again, under the same names, and its staging
/// replaces them.
pub fn settle(target: &SinkTarget, pointer: &Pointer) -> Result<bool, Error> {
    let due: &[String] = pointer.finished.as_deref().unwrap_or(&pointer.pending);
    target.client.block(async {
        let skip = high_water_mark(target).await?;
        let skip_ref = skip.as_ref().map(|(e, i)| (e.as_str(), *i));
        let mut producer = Producer::new(&target.client, &target.stream);
        let prefix = target.stage_prefix();
        for name in due {
            // A staged epoch is deleted only once every message of it is
            // acknowledged: gone means published (its owner published it
            // after the pointer that lists it was written).
            let Some(lines) = target.store.get_if_any(&format!("{prefix}{name}")).await? else {
                continue;
            };
            publish_epoch(target, &mut producer, name, &lines, skip_ref).await?;
        }
        Ok(pointer.finished.is_some())
    })
}

/// The epoch and index of the partition's last stored message, if it was
/// stored longer ago than 90 % of the stream's duplicate window: the server
/// no longer remembers its id, so what sorts before it must be skipped by
/// the publisher. `None` when the window still covers it (or there is
/// nothing): the server drops repeats itself, which is exact even if a
/// retried message was stored out of order.
async fn high_water_mark(target: &SinkTarget) -> Result<Option<(String, usize)>, Error> {
    let stream = target
        .client
        .js()
        .get_stream(&target.stream)
        .await
        .map_err(nats_err(format!("stream {}", target.stream)))?;
    let window = stream.cached_info().config.duplicate_window;
    let subject = subject(&target.stream, target.partition);
    let m = match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(m) => m,
        Err(e)
            if e.kind()
                == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
        {
            return Ok(None)
        }
        Err(e) => return Err(nats_err(format!("last message of {subject}"))(e)),
    };
    let stored =
        SystemTime::UNIX_EPOCH + Duration::from_nanos(m.time.unix_timestamp_nanos().max(0) as u64);
    let age = SystemTime::now()
        .duration_since(stored)
        .unwrap_or(Duration::ZERO);
    if age < window.mul_f64(0.9) {
        return Ok(None);
    }
    let Some(id) = m.headers.get("Nats-Msg-Id") else {
        return Ok(None);
    };
    let prefix = format!("{}:{}:", target.job, target.part);
    let parsed = id.as_str().strip_prefix(&prefix).and_then(|r| {
        let (e, i) = r.rsplit_once(':')?;
        Some((e.to_string(), i.parse().ok()?))
    });
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_names_sort_numbered_before_final_and_by_id() {
        let mut v = [
            epoch_name(Some(3), 0),
            epoch_name(None, 10),
            epoch_name(None, 9),
            epoch_name(Some(0), 0),
        ];
        v.sort();
        let parsed: Vec<_> = v.iter().map(|n| parse_epoch(n).unwrap()).collect();
        assert_eq!(parsed, [(false, 9), (false, 10), (true, 0), (true, 3)]);
        assert_eq!(parse_epoch("x1"), None);
        assert_eq!(parse_epoch("c"), None);
    }
}
