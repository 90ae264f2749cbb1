//! Checkpoints off the host: an object-store bucket for the files, a
//! key-value bucket for the pointer to the newest one.
//!
//! ```text
//! object store BUCKET:
//!   <job>/<part>/chk/<id>/<operator>-<instance>.snap   a checkpoint's files
//!   <job>/<part>/chk/<id>/manifest.json                its manifest
//! stream BUCKET-staged, subject BUCKET-staged.<job>.<part>.<epoch>.<token>:
//!   a sink's staged epoch (see crate::sink), in chunks of up to 256 KiB
//! key-value BUCKET-manifests:
//!   <job>.<part> = {"checkpoint": id | null, "owner": "...", ...}
//! ```
//!
//! `<part>` names a set of partitions (`p3`): the unit a group hands from
//! one process to another, with its own checkpoints.
//!
//! **Fencing.** A process that takes a part over first rewrites its
//! pointer (compare-and-set on the revision it read), naming itself the
//! owner. Every later pointer update by the previous owner then fails its
//! compare-and-set, so its checkpoints are never published
//! ([`tandem::checkpoint::ReplicationError::Fenced`] stops its job), and a
//! sink publishes an epoch's output only after its checkpoint's pointer
//! update succeeded: a zombie process can commit neither.

use crate::{nats_err, through_outages, Client, Error};
use async_nats::jetstream::{kv, object_store};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::checkpoint::Manifest;
use tokio::io::AsyncReadExt;

mod replicator;
pub use replicator::ObjectStoreReplicator;

/// What the key-value bucket says of one part.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pointer {
    /// The newest checkpoint in the object store (`None`: none yet).
    pub checkpoint: Option<u64>,
    /// The process that owns the part.
    pub owner: String,
    /// Checkpoints whose files are still in the object store, oldest
    /// first (the newest is `checkpoint`).
    #[serde(default)]
    pub kept: Vec<u64>,
    /// The part's job completed: the staged epochs (see [`crate::sink`])
    /// that hold its output after `checkpoint`, to be published by
    /// whoever finds them; nothing is left to run.
    #[serde(default)]
    pub finished: Option<Vec<String>>,
    /// Staged epochs of `checkpoint` and earlier that may not be published
    /// yet: whoever restores `checkpoint` publishes them first.
    #[serde(default)]
    pub pending: Vec<String>,
}

/// A part claimed by this process: the pointer it read and the revision
/// its own rewrite produced.
#[derive(Clone, Debug)]
pub struct Claim {
    /// The part's pointer after the claim.
    pub pointer: Pointer,
    /// Its revision: the compare-and-set of the next update.
    pub revision: u64,
}

/// The object store and manifest bucket of one `--checkpoint-store`.
#[derive(Clone)]
pub struct CheckpointStore {
    client: Client,
    objects: object_store::ObjectStore,
    /// The stream of staged epochs.
    staged: async_nats::jetstream::stream::Stream,
    pointers: kv::Store,
    bucket: String,
}

impl std::fmt::Debug for CheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointStore")
            .field("bucket", &self.bucket)
            .finish()
    }
}

fn chk_prefix(job: &str, part: &str, id: u64) -> String {
    format!("{job}/{part}/chk/{id}/")
}

fn pointer_key(job: &str, part: &str) -> String {
    format!("{job}.{part}")
}

impl CheckpointStore {
    /// Opens (creating them if needed) bucket `bucket` and its manifest
    /// bucket `<bucket>-manifests`, with `replicas` copies in a cluster.
    pub fn open(client: &Client, bucket: &str, replicas: usize) -> Result<Self, Error> {
        let js = client.js();
        let (objects, pointers, staged) = client.block(async {
            let objects = match js.get_object_store(bucket).await {
                Ok(o) => o,
                Err(_) => js
                    .create_object_store(object_store::Config {
                        bucket: bucket.to_string(),
                        num_replicas: replicas,
                        ..Default::default()
                    })
                    .await
                    .map_err(nats_err(format!("object store {bucket}")))?,
            };
            let name = format!("{bucket}-manifests");
            let pointers = crate::key_value(js, &name, Duration::ZERO, replicas).await?;
            let staged = js
                .get_or_create_stream(async_nats::jetstream::stream::Config {
                    name: format!("{bucket}-staged"),
                    subjects: vec![format!("{bucket}-staged.>")],
                    num_replicas: replicas.max(1),
                    duplicate_window: Duration::from_secs(120),
                    ..Default::default()
                })
                .await
                .map_err(nats_err(format!("stream {bucket}-staged")))?;
            Ok::<_, Error>((objects, pointers, staged))
        })?;
        Ok(CheckpointStore {
            client: client.clone(),
            staged,
            objects,
            pointers,
            bucket: bucket.to_string(),
        })
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The subject of staged epoch `key` (`<job>.<part>.<epoch>.<token>`).
    fn staged_subject(&self, key: &str) -> String {
        format!("{}-staged.{key}", self.bucket)
    }

    /// Stages `bytes` as `key`, replacing whatever was staged under it:
    /// in chunks of up to [`STAGE_CHUNK`] bytes, published with a bounded
    /// number in flight, each naming its index and the count (what a
    /// reader checks: [`CheckpointStore::staged`]). Plain messages: no
    /// digest, no object metadata.
    pub async fn stage(&self, key: &str, bytes: &[u8]) -> Result<(), Error> {
        let subject = self.staged_subject(key);
        self.unstage(key).await?;
        let chunks: Vec<&[u8]> = if bytes.is_empty() {
            vec![&[][..]]
        } else {
            bytes.chunks(STAGE_CHUNK).collect()
        };
        let n = chunks.len();
        // Ids unique to this attempt: an attempt after a failed one (an
        // outage) purges what that one stored, and ids the server still
        // remembers would have this attempt's chunks dropped as
        // duplicates — leaving the epoch empty or partial, which a
        // successor would take for published. Within the attempt, the
        // ids let a retried publish be dropped.
        let attempt = claim_nonce();
        let mut producer =
            crate::stream::Producer::new(&self.client, &format!("{}-staged", self.bucket));
        for (i, c) in chunks.into_iter().enumerate() {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("{key}:{attempt:x}:{i}").as_str());
            h.insert(CHUNK, i.to_string().as_str());
            h.insert(CHUNKS, n.to_string().as_str());
            producer
                .send(subject.clone(), h, Bytes::copy_from_slice(c))
                .await?;
        }
        producer.flush().await
    }

    /// What is staged as `key`, whole; `None` when nothing is (it was
    /// published and removed). A part of a staged epoch is an error.
    pub async fn staged(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        use async_nats::jetstream::stream::RawMessageErrorKind;
        let subject = self.staged_subject(key);
        let mut chunks: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut count = None;
        let mut at = 1u64;
        loop {
            let m = match self
                .staged
                .raw_message_builder()
                .sequence(at)
                .next_by_subject(&subject)
                .send()
                .await
            {
                Ok(m) => m,
                Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => break,
                Err(e) => return Err(nats_err(format!("reading {subject}"))(e)),
            };
            at = m.sequence + 1;
            let h = Some(&m.headers);
            let (Some(i), Some(n)) = (
                crate::stream::header_u64(h, CHUNK),
                crate::stream::header_u64(h, CHUNKS),
            ) else {
                return Err(Error::Invalid(format!(
                    "{subject}: a message that is no chunk"
                )));
            };
            count = Some(n);
            chunks.entry(i).or_insert_with(|| m.payload.to_vec());
        }
        let Some(n) = count else {
            return Ok(None);
        };
        if chunks.len() as u64 != n || chunks.keys().next_back() != Some(&(n - 1)) {
            return Err(Error::Invalid(format!(
                "{subject}: {} of its {n} chunks are staged: it is incomplete",
                chunks.len()
            )));
        }
        Ok(Some(chunks.into_values().flatten().collect()))
    }

    /// Removes what is staged as `key` (nothing staged is fine).
    pub async fn unstage(&self, key: &str) -> Result<(), Error> {
        let subject = self.staged_subject(key);
        self.staged
            .purge()
            .filter(subject.clone())
            .await
            .map_err(nats_err(format!("removing {subject}")))?;
        Ok(())
    }

    /// Takes part `part` of job `job` for `owner`: reads its pointer and
    /// rewrites it naming this claim (`owner` and a token of its own), by
    /// compare-and-set, so that the previous owner's next update fails.
    /// Retries while another process races it, and waits out servers that
    /// do not answer (a leader election) for up to `patience`, or until
    /// `give_up` (the lease lost): a rewrite whose reply was lost is found
    /// to be this claim's when the pointer is read again.
    pub fn claim(
        &self,
        job: &str,
        part: &str,
        owner: &str,
        patience: Duration,
        give_up: &(dyn Fn() -> bool + Sync),
    ) -> Result<Claim, Error> {
        let key = pointer_key(job, part);
        let token = format!("{owner}#{:x}", claim_nonce());
        self.client.block(async {
            let mut races = 0;
            let mut outage: Option<std::time::Instant> = None;
            loop {
                let entry = through_outages(&format!("reading {key}"), patience, give_up, || async {
                    self.pointers
                        .entry(key.clone())
                        .await
                        .map_err(nats_err(format!("reading {key}")))
                })
                .await?;
                let live = entry.as_ref().filter(|e| e.operation == kv::Operation::Put);
                let mut pointer: Pointer = match live {
                    Some(e) => serde_json::from_slice(&e.value).map_err(|e| {
                        Error::Invalid(format!("{}-manifests/{key}: {e}", self.bucket))
                    })?,
                    None => Pointer::default(),
                };
                if pointer.owner == token {
                    // This claim's rewrite landed; its reply was lost.
                    let revision = live.expect("a pointer read").revision;
                    return Ok(Claim { pointer, revision });
                }
                pointer.owner = token.clone();
                let value = Bytes::from(serde_json::to_vec(&pointer).expect("serializes"));
                let r = match &entry {
                    Some(e) => self
                        .pointers
                        .update(&key, value, e.revision)
                        .await
                        .map_err(|e| (e.kind() == kv::UpdateErrorKind::WrongLastRevision, e.to_string())),
                    None => self
                        .pointers
                        .create(&key, value)
                        .await
                        .map_err(|e| (e.kind() == kv::CreateErrorKind::AlreadyExists, e.to_string())),
                };
                match r {
                    Ok(revision) => return Ok(Claim { pointer, revision }),
                    Err((true, _)) => {
                        races += 1;
                        if races >= 100 {
                            return Err(Error::Invalid(format!(
                                "{key}: could not claim it (100 compare-and-set races lost)"
                            )));
                        }
                    }
                    // Perhaps written after all: read again (for a while).
                    Err((false, e)) => {
                        let t = *outage.get_or_insert_with(std::time::Instant::now);
                        if give_up() || t.elapsed() >= patience {
                            return Err(Error::Invalid(format!(
                                "{key}: could not claim it: the servers did not answer for {:.1} s: {e}",
                                t.elapsed().as_secs_f64()
                            )));
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        })
    }

    /// Downloads checkpoint `id` of `part` into `dir` as the engine's
    /// checkpoint store lays it out (`manifest-<id>.json`, `chk-<id>/…`),
    /// so that `dir` can be both restored from and checkpointed into.
    ///
    /// Outages are waited out for up to `patience` (the download begins
    /// again).
    pub fn download(
        &self,
        job: &str,
        part: &str,
        id: u64,
        dir: &Path,
        patience: Duration,
        give_up: &(dyn Fn() -> bool + Sync),
    ) -> Result<Vec<String>, Error> {
        let prefix = chk_prefix(job, part, id);
        let what = format!("downloading {}/{prefix}", self.bucket);
        self.client
            .block(through_outages(&what, patience, give_up, || {
                self.download_once(&prefix, id, dir)
            }))
    }

    async fn download_once(&self, prefix: &str, id: u64, dir: &Path) -> Result<Vec<String>, Error> {
        {
            let mut names = vec![format!("{prefix}manifest.json")];
            let manifest = self.get(&format!("{prefix}manifest.json")).await?;
            let m: Manifest = serde_json::from_slice(&manifest)
                .map_err(|e| Error::Invalid(format!("{prefix}manifest.json: {e}")))?;
            for f in &m.files {
                if f.path.contains("..") || f.path.starts_with('/') {
                    return Err(Error::Invalid(format!(
                        "{prefix}manifest.json names {}, outside its checkpoint",
                        f.path
                    )));
                }
                let name = format!("{prefix}{}", f.path);
                let bytes = self.get(&name).await?;
                write_file(&dir.join(&f.path), &bytes)?;
                names.push(name);
            }
            write_file(&dir.join(format!("manifest-{id}.json")), &manifest)?;
            Ok(names)
        }
    }

    /// The names of every object whose name starts with `prefix`: read
    /// from the subjects of the bucket's stream (one request; the client's
    /// own listing waits for ever on some servers), each checked to be
    /// live (a deleted object's marker stays until it is replaced).
    pub async fn names_under(&self, prefix: &str) -> Result<Vec<String>, Error> {
        use base64::Engine;
        use futures_util::StreamExt;
        let what = || format!("listing {}", self.bucket);
        let stream = self
            .client
            .js()
            .get_stream_no_info(format!("OBJ_{}", self.bucket))
            .await
            .map_err(nats_err(what()))?;
        let meta = format!("$O.{}.M.", self.bucket);
        let subjects = stream
            .info_with_subjects(format!("{meta}>"))
            .await
            .map_err(nats_err(what()))?;
        let mut subjects = std::pin::pin!(subjects);
        let mut candidates = Vec::new();
        while let Some(r) = subjects.next().await {
            let (subject, _) = r.map_err(nats_err(what()))?;
            let Some(encoded) = subject.strip_prefix(&meta) else {
                continue;
            };
            let Ok(name) = base64::engine::general_purpose::URL_SAFE.decode(encoded) else {
                continue;
            };
            let name = String::from_utf8_lossy(&name).into_owned();
            if name.starts_with(prefix) {
                candidates.push(name);
            }
        }
        let mut names = Vec::new();
        for name in candidates {
            match self.objects.info(&name).await {
                Ok(info) if !info.deleted => names.push(name),
                Ok(_) => {}
                Err(e) if e.kind() == object_store::InfoErrorKind::NotFound => {}
                Err(e) => return Err(nats_err(what())(e)),
            }
        }
        names.sort();
        Ok(names)
    }

    /// Collects what job `job` left in the store: every part whose pointer
    /// says it finished (and every part with objects but no pointer) has
    /// all its objects and staged epochs deleted; a part still running is
    /// left as it is (its owner removes its own garbage, and what is in
    /// flight cannot be told from what is left). With `dry_run`, nothing
    /// is deleted. One line of what was done, per part.
    pub async fn gc(&self, job: &str, dry_run: bool) -> Result<Vec<GcPart>, Error> {
        let prefix = format!("{job}.");
        let keys =
            crate::live_keys(self.client.js(), &format!("{}-manifests", self.bucket)).await?;
        let mut parts: BTreeMap<String, Option<Pointer>> = BTreeMap::new();
        for key in keys.iter().filter_map(|k| k.strip_prefix(&prefix)) {
            let entry = self
                .pointers
                .get(format!("{prefix}{key}"))
                .await
                .map_err(nats_err(format!("reading {prefix}{key}")))?;
            let pointer = entry.and_then(|v| serde_json::from_slice::<Pointer>(&v).ok());
            if pointer.is_some() {
                parts.insert(key.to_string(), pointer);
            }
        }
        let names = self.names_under(&format!("{job}/")).await?;
        let mut objects: BTreeMap<String, usize> = BTreeMap::new();
        for n in &names {
            if let Some(part) = n.split('/').nth(1) {
                *objects.entry(part.to_string()).or_default() += 1;
                parts.entry(part.to_string()).or_insert(None);
            }
        }
        let mut out = Vec::new();
        for (part, pointer) in parts {
            let held = objects.get(&part).copied().unwrap_or(0);
            let finished = pointer.as_ref().is_none_or(|p| p.finished.is_some());
            let removed = if finished && !dry_run {
                self.clear_part(job, &part).await?
            } else {
                0
            };
            out.push(GcPart {
                part,
                finished,
                has_pointer: pointer.is_some(),
                objects: held,
                removed,
            });
        }
        Ok(out)
    }

    /// Deletes every object of part `part` of job `job` (its checkpoints
    /// and what takeovers left behind) and every epoch it staged; returns
    /// how many objects.
    pub async fn clear_part(&self, job: &str, part: &str) -> Result<usize, Error> {
        let staged = format!("{}-staged.{job}.{part}.>", self.bucket);
        self.staged
            .purge()
            .filter(staged.clone())
            .await
            .map_err(nats_err(format!("removing {staged}")))?;
        let names = self.names_under(&format!("{job}/{part}/")).await?;
        for n in &names {
            self.delete(n).await?;
        }
        Ok(names.len())
    }

    /// An object's bytes.
    pub async fn get(&self, name: &str) -> Result<Vec<u8>, Error> {
        self.get_if_any(name)
            .await?
            .ok_or_else(|| Error::Invalid(format!("{}/{name}: no such object", self.bucket)))
    }

    /// An object's bytes, `None` if there is no such object.
    pub async fn get_if_any(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        let mut o = match self.objects.get(name).await {
            Ok(o) => o,
            Err(e) if e.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(nats_err(format!("{}/{name}", self.bucket))(e)),
        };
        let mut v = Vec::new();
        o.read_to_end(&mut v).await.map_err(|source| Error::Io {
            path: format!("{}/{name}", self.bucket),
            source,
        })?;
        Ok(Some(v))
    }

    /// Stores `bytes` as object `name` (whole or not at all: the object's
    /// entry is written after its chunks).
    pub async fn put(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let mut r = bytes;
        self.objects
            .put(name, &mut r)
            .await
            .map_err(nats_err(format!("{}/{name}", self.bucket)))?;
        Ok(())
    }

    /// Deletes object `name` (gone already is fine).
    pub async fn delete(&self, name: &str) -> Result<(), Error> {
        match self.objects.delete(name).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == object_store::DeleteErrorKind::NotFound => Ok(()),
            Err(e) => Err(nats_err(format!("deleting {}/{name}", self.bucket))(e)),
        }
    }

    /// The replicator for part `part` of job `job`, owned through `claim`.
    /// Outages are waited out for `patience` where the part cannot go on
    /// without the server (recording its end).
    pub fn replicator(
        &self,
        job: &str,
        part: &str,
        claim: Claim,
        patience: Duration,
    ) -> Arc<ObjectStoreReplicator> {
        Arc::new(ObjectStoreReplicator {
            patience,
            owner: claim.pointer.owner.clone(),
            store: self.clone(),
            job: job.to_string(),
            part: part.to_string(),
            state: Mutex::new(claim),
            objects: Mutex::new(BTreeMap::new()),
            unpublished: Mutex::new(BTreeSet::new()),
        })
    }
}

/// What [`CheckpointStore::gc`] found and did for one part.
#[derive(Clone, Debug)]
pub struct GcPart {
    /// The part (`p3`).
    pub part: String,
    /// Finished (or without a pointer): nothing of it is needed.
    pub finished: bool,
    /// Whether the part has a pointer.
    pub has_pointer: bool,
    /// Objects it held.
    pub objects: usize,
    /// Objects deleted (its staged epochs are removed too).
    pub removed: usize,
}

/// The most bytes of a staged epoch one message holds.
pub const STAGE_CHUNK: usize = 256 << 10;
/// A staged chunk's index.
const CHUNK: &str = "Tandem-Chunk";
/// How many chunks the staged epoch has.
const CHUNKS: &str = "Tandem-Chunks";

/// A number no other claim of this process uses, unlikely in any other.
fn claim_nonce() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    now ^ NEXT.fetch_add(1, Ordering::Relaxed).rotate_right(17)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let io = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(io)?;
    }
    std::fs::write(path, bytes).map_err(io)
}
