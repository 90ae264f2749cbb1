//! Exactly-once output into a JetStream stream.
//!
//! The output between two checkpoint barriers is an *epoch*, named by the
//! barrier that closes it (`c<id>`), or `f<id>` for the output after the
//! last barrier `id` (the final epoch). It goes through three steps:
//!
//! 1. **Staged** (`pre_commit`, phase one): the epoch's records are
//!    stored in the checkpoint store's stream of staged epochs
//!    ([`CheckpointStore::stage`]: plain messages of up to 256 KiB, no
//!    digest), off the host, by the client's thread, under a name that
//!    holds the claim's token — a fenced owner staging the same epoch
//!    never touches its successor's. The checkpoint is published only once
//!    that is done ([`tandem::Committer::prepared`]).
//! 2. **Committed**: the checkpoint's pointer moved
//!    ([`crate::store::ObjectStoreReplicator`]): from now on, whoever owns
//!    the part restores this checkpoint and publishes the staged epoch.
//! 3. **Published** (`commit`, phase two): each message with
//!    `Nats-Msg-Id: <job>:<part>:<epoch>:<index>`, then the staged epoch
//!    is removed.
//!
//! The id depends only on the epoch and the message's place in it, and
//! ids sort in the order they are published (epochs in order, each
//! epoch's messages in order). Output partition `<stream>.<partition>` is
//! written by one part only, one message at a time, each publish
//! **expecting the partition's last stored message** to be the one the
//! publisher last saw (`Nats-Expected-Last-Subject-Sequence`). So a
//! publisher that was not the last to write — a fenced owner waking from
//! a stop, or a new owner republishing what its predecessor staged — has
//! its publish refused by the server, reads the partition's last message
//! again, and skips every message whose id sorts at or before it. No
//! message is stored twice, however long after the duplicate window a
//! late publish comes (`Nats-Msg-Id` is set too, so the window drops a
//! retry at once). A partition whose last message is not this part's
//! (another group's, or a record of an input stream) is refused: a stream
//! takes the output of one group.
//!
//! An epoch whose checkpoint never committed is deleted by the next owner
//! and its output produced again by the replay, under the next
//! checkpoint's name.

use crate::store::{CheckpointStore, ObjectStoreReplicator, Pointer};
use crate::stream::subject;
use crate::{nats_err, through_outages, Client, Error};
use async_nats::HeaderMap;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
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

/// Parses an epoch name back (or a staged one's: `<epoch>.<token>`):
/// `(is_final, id)`.
fn parse_epoch(name: &str) -> Option<(bool, u64)> {
    let name = epoch_of(name);
    let (kind, id) = name.split_at_checked(1)?;
    let id = id.parse().ok()?;
    match kind {
        "c" => Some((false, id)),
        "f" => Some((true, id)),
        _ => None,
    }
}

/// The epoch of a staged epoch's name (`<epoch>.<token>`: the claim that
/// staged it).
fn epoch_of(staged: &str) -> &str {
    staged.split_once('.').map_or(staged, |(e, _)| e)
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
    /// How long staging and publishing wait out servers that do not
    /// answer before the job fails.
    pub patience: Duration,
}

/// The number of records a packed output message holds (absent: one).
pub const RECORDS: &str = crate::stream::RECORDS;

/// The header that makes a publish conditional on the partition's last
/// stored message.
const EXPECT_LAST: &str = "Nats-Expected-Last-Subject-Sequence";

impl SinkTarget {
    /// The key a staged epoch (`<epoch>.<token>`) has in the store.
    fn stage_key(&self, staged: &str) -> String {
        format!("{}.{}.{staged}", self.job, self.part)
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
    patience: Duration,
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
        let patience = target.patience;
        target.client.clone().spawn(run(target, rx, s));
        JetStreamSink {
            encode,
            lines: Vec::new(),
            scratch: Vec::new(),
            last_barrier: restored.unwrap_or(0),
            shared,
            patience,
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
            patience: self.patience,
        }))
    }
}

struct JetStreamCommitter {
    shared: Arc<Shared>,
    patience: Duration,
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
        // Bounded: what is queued before it waits out outages for at most
        // the sink's patience each.
        let bound = self.patience * 2 + Duration::from_secs(10);
        match rx.recv_timeout(bound) {
            Ok(r) => r.map_err(std::io::Error::other),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(std::io::Error::other(format!(
                "the output was not settled within {bound:?}"
            ))),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(std::io::Error::other("the NATS client thread is gone"))
            }
        }
    }
}

/// The client-thread side of one sink instance: stages, publishes and
/// settles in the order the sink and its committer asked.
async fn run(target: SinkTarget, mut rx: mpsc::UnboundedReceiver<Cmd>, shared: Arc<Shared>) {
    let mut staged: BTreeMap<String, Bytes> = BTreeMap::new();
    let mut tail: Option<Tail> = None;
    let mut failed: Option<String> = None;
    let never = || false;
    while let Some(cmd) = rx.recv().await {
        if failed.is_some() && !matches!(cmd, Cmd::Settle(_)) {
            // The attempt fails (`prepared`, `settle` say why): nothing
            // more of it is staged or published — above all no final
            // epoch over an epoch that is not out.
            continue;
        }
        let r: Result<(), Error> = async {
            match cmd {
                Cmd::Stage { epoch, lines } => {
                    // Stored even when empty: a successor finds every
                    // epoch the pointer names. Staging that failed is done
                    // again whole (what was staged is replaced).
                    let name = format!("{epoch}.{}", target.pointer.stage_token());
                    let key = target.stage_key(&name);
                    through_outages(&format!("staging {key}"), target.patience, &never, || {
                        target.store.stage(&key, &lines)
                    })
                    .await?;
                    target.pointer.staged(&name);
                    staged.insert(name, lines);
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
                        // Kept until it is out: a failed publish leaves it
                        // staged, for no final epoch to pass over.
                        publish_epoch(&target, &mut tail, &e, &staged[&e]).await?;
                        staged.remove(&e);
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
                        publish_epoch(&target, &mut tail, &e, &staged[&e]).await?;
                        staged.remove(&e);
                    }
                    // Finished: nothing of the part in the store is needed
                    // again (a successor finds the pointer finished and
                    // every epoch it lists published).
                    target.pointer.clear_store().await;
                }
                Cmd::Settle(done) => {
                    let _ = done.send(match &failed {
                        Some(f) => Err(f.clone()),
                        None => Ok(()),
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

/// The last message stored in a part's output partition, as its
/// publisher last saw it.
#[derive(Debug)]
struct Tail {
    /// Its stream sequence (0: the partition is empty).
    seq: u64,
    /// Its epoch and first record's index (`None`: the partition is
    /// empty).
    id: Option<(String, usize)>,
}

/// Reads the partition's last message: the only messages it may hold are
/// this part's (see the [module docs](self)).
async fn read_tail(target: &SinkTarget) -> Result<Tail, Error> {
    let subject = subject(&target.stream, target.partition);
    let stream = target
        .client
        .js()
        .get_stream_no_info(&target.stream)
        .await
        .map_err(nats_err(format!("stream {}", target.stream)))?;
    let m = match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(m) => m,
        Err(e)
            if e.kind()
                == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
        {
            return Ok(Tail { seq: 0, id: None })
        }
        Err(e) => return Err(nats_err(format!("last message of {subject}"))(e)),
    };
    let prefix = format!("{}:{}:", target.job, target.part);
    let id = m.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_string());
    let parsed = id.as_deref().and_then(|id| {
        let (e, i) = id.strip_prefix(&prefix)?.rsplit_once(':')?;
        parse_epoch(e)?;
        Some((e.to_string(), i.parse().ok()?))
    });
    match parsed {
        Some(id) => Ok(Tail {
            seq: m.sequence,
            id: Some(id),
        }),
        None => Err(Error::Invalid(format!(
            "{subject}: its last message (sequence {}, id {}) is not the output of group {} part {}: an output stream takes one group's output",
            m.sequence,
            id.as_deref().unwrap_or("none"),
            target.job,
            target.part
        ))),
    }
}

/// Publishes one message of epoch `epoch` (its records from index
/// `first`) unless the partition already holds it: conditional on the
/// partition's last message being `tail`'s, re-read whenever someone else
/// wrote since. Outages are waited out for the target's patience.
async fn publish_one(
    target: &SinkTarget,
    tail: &mut Option<Tail>,
    epoch: &str,
    first: usize,
    count: usize,
    payload: Bytes,
) -> Result<(), Error> {
    let subject = subject(&target.stream, target.partition);
    // The same outage bound for every wait of this message.
    let mut backoff = crate::Backoff::new(&subject, target.patience);
    loop {
        let t = match tail {
            Some(t) => t,
            None => match read_tail(target).await {
                Ok(t) => tail.insert(t),
                Err(e) => {
                    tokio::time::sleep(backoff.after(e, false)?).await;
                    continue;
                }
            },
        };
        if t.id
            .as_ref()
            .is_some_and(|(e, i)| (e.as_str(), *i) >= (epoch, first))
        {
            // Stored already (by a predecessor, or by this publisher
            // before a reply was lost).
            return Ok(());
        }
        let mut h = HeaderMap::new();
        h.insert("Nats-Msg-Id", target.msg_id(epoch, first).as_str());
        h.insert(EXPECT_LAST, t.seq.to_string().as_str());
        if count > 1 {
            h.insert(RECORDS, count.to_string().as_str());
        }
        let sent = target
            .client
            .js()
            .publish_with_headers(subject.clone(), h, payload.clone())
            .await;
        let acked = match sent {
            Ok(ack) => ack.await,
            Err(e) => {
                *tail = None;
                let e = nats_err(format!("publishing to {subject}"))(e);
                tokio::time::sleep(backoff.after(e, false)?).await;
                continue;
            }
        };
        match acked {
            Ok(ack) if !ack.duplicate => {
                *tail = Some(Tail {
                    seq: ack.sequence,
                    id: Some((epoch.to_string(), first)),
                });
                return Ok(());
            }
            // Someone else wrote since (or the window knew the id): read
            // again what the partition holds.
            Ok(_) => *tail = None,
            Err(e)
                if e.kind()
                    == async_nats::jetstream::context::PublishErrorKind::WrongLastSequence =>
            {
                *tail = None
            }
            Err(e) => {
                *tail = None;
                let e = nats_err(format!("publishing to {subject}"))(e);
                tokio::time::sleep(backoff.after(e, false)?).await;
            }
        }
    }
}

/// Publishes one staged epoch in order, each message only if the
/// partition does not hold it yet (see [`publish_one`]), then deletes the
/// staged epoch.
async fn publish_epoch(
    target: &SinkTarget,
    tail: &mut Option<Tail>,
    staged: &str,
    lines: &[u8],
) -> Result<(), Error> {
    let epoch = epoch_of(staged);
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
    while !rest.is_empty() {
        let (len, tail_bytes) = rest.split_at_checked(4).ok_or_else(truncated)?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (payload, tail_bytes) = tail_bytes.split_at_checked(len).ok_or_else(truncated)?;
        rest = tail_bytes;
        if target.batch_bytes > 0 && payload.contains(&b'\n') {
            return Err(Error::Invalid(format!(
                "{}: a record holds a newline, so it cannot be packed with others (a batch is newline-separated)",
                target.part
            )));
        }
        if count > 0 && batch.len() + 1 + payload.len() > target.batch_bytes {
            let p = Bytes::from(std::mem::take(&mut batch));
            publish_one(target, tail, epoch, first, count, p).await?;
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
    if count > 0 {
        publish_one(target, tail, epoch, first, count, Bytes::from(batch)).await?;
    }
    target.pointer.published(staged);
    // Best effort: a staged epoch left behind is garbage, removed when
    // the part finishes.
    let key = target.stage_key(staged);
    if let Err(e) = target.store.unstage(&key).await {
        eprintln!("tandem-nats: {key} stays staged for now: {e}");
    }
    Ok(())
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
    let never = || false;
    target.client.block(async {
        let mut tail = None;
        for name in due {
            // A staged epoch is removed only once every message of it is
            // acknowledged: gone means published (its owner published it
            // after the pointer that lists it was written).
            let key = target.stage_key(name);
            let read = || async {
                match target.store.staged(&key).await {
                    // Read while its previous owner, done publishing it,
                    // removed it: read again (gone now: published).
                    Err(Error::Invalid(e)) if e.contains("is incomplete") => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        target.store.staged(&key).await
                    }
                    r => r,
                }
            };
            let staged =
                through_outages(&format!("reading {key}"), target.patience, &never, read).await?;
            let Some(lines) = staged else {
                continue;
            };
            publish_epoch(target, &mut tail, name, &lines).await?;
        }
        if pointer.finished.is_some() {
            target.pointer.clear_store().await;
            return Ok(true);
        }
        // The output may hold nothing past the checkpoint restored: its
        // owner published an epoch only once its checkpoint's pointer
        // moved. More means the server lost an acknowledged update of the
        // pointer; running on would write that output a second time.
        let t = match tail {
            Some(t) => t,
            None => {
                through_outages("reading the output's last message", target.patience, &never, || {
                    read_tail(target)
                })
                .await?
            }
        };
        let restored = pointer.checkpoint.unwrap_or(0);
        if let Some((e, _)) = &t.id {
            let past = match parse_epoch(e) {
                Some((false, id)) => id > restored,
                _ => true,
            };
            if past {
                return Err(Error::Invalid(format!(
                    "{}: holds output of epoch {e}, past checkpoint {restored} that the pointer names: the server lost an acknowledged update of the pointer (a server killed before it wrote it?); the part is not run again, which would publish that output twice",
                    subject(&target.stream, target.partition)
                )));
            }
        }
        Ok(false)
    })
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
