//! The replicator of one claimed part: copies its checkpoints into the
//! object store, moves its pointer by compare-and-set, keeps the newest
//! two, and records the part's end (see the [parent module](super)).

use super::{chk_prefix, pointer_key, CheckpointStore, Claim, Pointer};
use crate::Error;
use async_nats::jetstream::kv;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use tandem::checkpoint::{Manifest, ReplicationError, Replicator};

/// Copies a part's checkpoints into the object store and moves its pointer
/// (see the [module docs](super)).
pub struct ObjectStoreReplicator {
    pub(super) patience: Duration,
    /// This claim's owner token (see [`CheckpointStore::claim`]).
    pub(super) owner: String,
    pub(super) store: CheckpointStore,
    pub(super) job: String,
    pub(super) part: String,
    pub(super) state: Mutex<Claim>,
    /// The object names of each checkpoint in the object store.
    pub(super) objects: Mutex<BTreeMap<u64, Vec<String>>>,
    /// Epochs the sink staged and has not published yet.
    pub(super) unpublished: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for ObjectStoreReplicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreReplicator")
            .field("job", &self.job)
            .field("part", &self.part)
            .finish()
    }
}

/// The longest a checkpoint's copy may take.
const REPLICATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Checkpoints kept in the object store per part.
const KEEP: usize = 2;

impl ObjectStoreReplicator {
    /// The token that tells this claim's staged epochs from any other's
    /// (a fenced owner staging the same epoch never touches them).
    pub fn stage_token(&self) -> &str {
        self.owner.rsplit('#').next().unwrap_or("")
    }

    /// The newest checkpoint this replicator published (or restored).
    pub fn checkpoint(&self) -> Option<u64> {
        self.state.lock().unwrap().pointer.checkpoint
    }

    /// Checkpoint `id`, restored from the object store, consists of
    /// `names` (removed by retention like the ones this process writes).
    pub fn adopt(&self, id: u64, names: Vec<String>) {
        self.objects.lock().unwrap().insert(id, names);
    }

    /// The sink staged `epoch` (see [`crate::sink`]).
    pub fn staged(&self, epoch: &str) {
        self.unpublished.lock().unwrap().insert(epoch.to_string());
    }

    /// The sink published `epoch` completely.
    pub fn published(&self, epoch: &str) {
        self.unpublished.lock().unwrap().remove(epoch);
    }

    async fn copy(&self, dir: &Path, manifest: &Manifest) -> Result<(), Error> {
        let prefix = chk_prefix(&self.job, &self.part, manifest.id);
        let mut names = Vec::new();
        for f in &manifest.files {
            let path = dir.join(&f.path);
            let bytes = std::fs::read(&path).map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })?;
            let name = format!("{prefix}{}", f.path);
            self.store.put(&name, &bytes).await?;
            names.push(name);
        }
        let json = serde_json::to_vec_pretty(manifest).expect("a manifest serializes");
        let name = format!("{prefix}manifest.json");
        self.store.put(&name, &json).await?;
        names.push(name);
        self.objects.lock().unwrap().insert(manifest.id, names);
        Ok(())
    }

    /// Deletes checkpoint `id`'s objects: those this process wrote or
    /// restored, or — for one a predecessor wrote — those under its
    /// prefix.
    async fn remove(&self, id: u64) -> Result<(), Error> {
        let known = self.objects.lock().unwrap().remove(&id);
        let names = match known {
            Some(names) => names,
            None => {
                self.store
                    .names_under(&chk_prefix(&self.job, &self.part, id))
                    .await?
            }
        };
        for name in names {
            self.store.delete(&name).await?;
        }
        Ok(())
    }

    /// The part finished and its output is published: deletes every
    /// object it has in the store (best effort: what is left is reported,
    /// and `tandem nats gc` removes it).
    pub async fn clear_store(&self) {
        let cleared = tokio::time::timeout(
            Duration::from_secs(30),
            self.store.clear_part(&self.job, &self.part),
        )
        .await
        .unwrap_or_else(|_| Err(Error::Invalid("not done within 30 s".into())));
        if let Err(e) = cleared {
            eprintln!(
                "tandem-nats: {}/{}/{}/ left in the store: {e}",
                self.store.bucket, self.job, self.part
            );
        }
    }
}

impl ObjectStoreReplicator {
    /// Moves the pointer by compare-and-set from the revision this process
    /// last wrote: `Fenced` if another process wrote it since. An update
    /// whose reply was lost but which landed is recognised (the pointer
    /// still names this claim) and `change` applied again to it.
    async fn update(
        &self,
        mut change: impl FnMut(&mut Pointer),
    ) -> Result<Pointer, ReplicationError> {
        let key = pointer_key(&self.job, &self.part);
        for _ in 0..3 {
            let (mut next, revision) = {
                let s = self.state.lock().unwrap();
                (s.pointer.clone(), s.revision)
            };
            change(&mut next);
            let value = Bytes::from(serde_json::to_vec(&next).expect("serializes"));
            match self.store.pointers.update(&key, value, revision).await {
                Ok(r) => {
                    *self.state.lock().unwrap() = Claim {
                        pointer: next.clone(),
                        revision: r,
                    };
                    return Ok(next);
                }
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    let now = self.store.pointers.entry(key.clone()).await.map_err(|e| {
                        ReplicationError::Failed(format!(
                            "{}-manifests/{key}: {e}",
                            self.store.bucket
                        ))
                    })?;
                    let ours = now.as_ref().and_then(|e| {
                        let p: Pointer = serde_json::from_slice(&e.value).ok()?;
                        (e.operation == kv::Operation::Put && p.owner == self.owner)
                            .then_some((p, e.revision))
                    });
                    let Some((pointer, revision)) = ours else {
                        return Err(ReplicationError::Fenced(format!(
                            "{}-manifests/{key} was rewritten by another process since revision {revision}: the part was taken over",
                            self.store.bucket
                        )));
                    };
                    *self.state.lock().unwrap() = Claim { pointer, revision };
                }
                Err(e) => {
                    return Err(ReplicationError::Failed(format!(
                        "{}-manifests/{key}: {e}",
                        self.store.bucket
                    )))
                }
            }
        }
        Err(ReplicationError::Failed(format!(
            "{}-manifests/{key}: its revision kept moving under this claim",
            self.store.bucket
        )))
    }

    /// The part's job completed; its output after the last checkpoint is
    /// in the staged `epochs`. Recorded before any of it is published, so
    /// that a successor publishes those epochs instead of running again.
    /// Outages are waited out (for the replicator's patience).
    pub async fn finish(&self, epochs: Vec<String>) -> Result<(), ReplicationError> {
        let t = std::time::Instant::now();
        loop {
            match self.update(|p| p.finished = Some(epochs.clone())).await {
                Ok(_) => return Ok(()),
                Err(ReplicationError::Failed(e)) if t.elapsed() < self.patience => {
                    eprintln!(
                        "tandem-nats: recording the end of {}: {e}; retrying",
                        self.part
                    );
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Replicator for ObjectStoreReplicator {
    fn replicate(&self, dir: &Path, manifest: &Manifest) -> Result<(), ReplicationError> {
        let client = self.store.client.clone();
        let pending: Vec<String> = self
            .unpublished
            .lock()
            .unwrap()
            .iter()
            .filter(|e| crate::sink::epoch_id(e).is_some_and(|id| id <= manifest.id))
            .cloned()
            .collect();
        let work = async {
            self.copy(dir, manifest)
                .await
                .map_err(|e| ReplicationError::Failed(e.to_string()))?;
            let mut retire = Vec::new();
            self.update(|p| {
                p.pending = pending.clone();
                match p.checkpoint {
                    // An update of this very checkpoint landed unseen.
                    Some(c) if c == manifest.id => {}
                    Some(c) => p.kept.push(c),
                    None => {}
                }
                p.checkpoint = Some(manifest.id);
                let excess = p.kept.len().saturating_sub(KEEP - 1);
                retire = p.kept.drain(..excess).collect();
            })
            .await?;
            for id in retire {
                // Best effort: a leftover is garbage, not an error.
                let _ = self.remove(id).await;
            }
            Ok(())
        };
        // Never stuck: a checkpoint that cannot be copied in time fails,
        // and the next one tries again.
        client.block(async {
            tokio::time::timeout(REPLICATE_TIMEOUT, work)
                .await
                .unwrap_or_else(|_| {
                    Err(ReplicationError::Failed(format!(
                        "checkpoint {} not copied within {REPLICATE_TIMEOUT:?}",
                        manifest.id
                    )))
                })
        })
    }
}
