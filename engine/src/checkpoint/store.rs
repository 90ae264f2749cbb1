//! The snapshot store: one directory of checkpoints and savepoints, one I/O
//! thread that writes and publishes them. The protocol is described in the
//! [module docs](super#publish-protocol).

use std::{
    collections::HashSet,
    fs::{self, File, OpenOptions},
    io::Write,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::mpsc,
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use super::manifest::{
    list, FileEntry, LatestValid, Listing, Manifest, Skipped, SnapshotKind, SAVEPOINT_MANIFEST,
};
use super::probe::{StorageAction, StorageProbe};
use super::replicate::Replicator;
use super::{
    format::{self, Position, SnapshotBytes, SnapshotHeader, FORMAT_VERSION, HEADER_BLOCK},
    restore::SnapshotFile,
    CheckpointError,
};
use crate::sys::uring::{AlignedBuf, Backend, FileWriter};
use std::sync::Arc;

/// Snapshot images up to this size are hashed up front and written with the
/// others of their set in one batch; larger ones are hashed while the
/// device writes them, one file at a time.
const BATCHED_IMAGE: usize = 16 << 20;

/// Checkpoints kept by default.
pub const DEFAULT_RETAIN: usize = 3;

/// The serialized state of one operator instance at one checkpoint.
#[derive(Debug)]
pub struct OperatorSnapshot {
    /// Operator name (part of the file name: no `/`, NUL, `.` or `..`).
    pub operator: String,
    /// Operator instance.
    pub instance: u32,
    /// Tuple positions the state covers.
    pub positions: Vec<Position>,
    /// The rkyv payload.
    pub bytes: SnapshotBytes,
}

/// What the I/O thread reports once a set is durable and published.
#[derive(Debug)]
pub struct Published {
    /// The manifest, as written.
    pub manifest: Manifest,
    /// Where it was published.
    pub manifest_path: PathBuf,
    /// How the bytes went to disk.
    pub backend: Backend,
    /// From the I/O thread taking the job to the last file fsynced.
    pub write_time: Duration,
    /// From the I/O thread taking the job to the directory fsync after the
    /// manifest rename (the checkpoint's durability point).
    pub publish_time: Duration,
    /// Checkpoint ids retention deleted afterwards.
    pub removed: Vec<u64>,
}

/// A submitted checkpoint or savepoint on its way to disk.
#[must_use = "a pending snapshot reports I/O errors only through `wait`"]
pub struct Pending {
    id: u64,
    rx: mpsc::Receiver<Result<Published, CheckpointError>>,
}

impl Pending {
    /// The id submitted.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Blocks until the set is published (or failed).
    pub fn wait(self) -> Result<Published, CheckpointError> {
        self.rx.recv().map_err(|_| CheckpointError::WriterGone)?
    }

    /// The outcome if it is known, without blocking. Returns `Some` once.
    pub fn try_wait(&mut self) -> Option<Result<Published, CheckpointError>> {
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => Some(Err(CheckpointError::WriterGone)),
        }
    }
}

struct Job {
    kind: SnapshotKind,
    id: u64,
    state_backend: Option<&'static str>,
    snapshots: Vec<OperatorSnapshot>,
    done: mpsc::SyncSender<Result<Published, CheckpointError>>,
}

/// A directory of checkpoints and savepoints and the thread writing them.
///
/// One store per directory: two stores (or processes) writing one
/// directory would race on retention. Jobs are written one at a time, in
/// submission order; dropping the store waits for the queued ones.
pub struct SnapshotStore {
    dir: PathBuf,
    retain: usize,
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<thread::JoinHandle<()>>,
    backend_note: Option<String>,
    /// Recorded in every manifest written ([`Manifest::state_backend`]).
    state_backend: Option<&'static str>,
}

impl SnapshotStore {
    /// Opens (creating it if needed) the store in `dir`, keeping the newest
    /// `retain` checkpoints (at least 1), and starts its I/O thread.
    pub fn open(dir: impl Into<PathBuf>, retain: usize) -> Result<Self, CheckpointError> {
        Self::open_with(dir, retain, FileWriter::new())
    }

    /// As [`open`](Self::open), writing through `writer` (e.g.
    /// [`FileWriter::pwrite_only`]).
    pub fn open_with(
        dir: impl Into<PathBuf>,
        retain: usize,
        writer: FileWriter,
    ) -> Result<Self, CheckpointError> {
        Self::open_probed(dir, retain, writer, None)
    }

    /// As [`open_with`](Self::open_with), its I/O thread consulting `probe`
    /// (fault injection: failed writes and fsyncs, crashes around the
    /// publication, damaged files) at each step.
    pub fn open_probed(
        dir: impl Into<PathBuf>,
        retain: usize,
        writer: FileWriter,
        probe: Option<Arc<dyn StorageProbe>>,
    ) -> Result<Self, CheckpointError> {
        Self::open_replicated(dir, retain, writer, probe, None)
    }

    /// As [`open_probed`](Self::open_probed), a checkpoint being published
    /// only once `replicator` has copied it off the host (see
    /// [`super::replicate`]).
    pub fn open_replicated(
        dir: impl Into<PathBuf>,
        retain: usize,
        writer: FileWriter,
        probe: Option<Arc<dyn StorageProbe>>,
        replicator: Option<Arc<dyn Replicator>>,
    ) -> Result<Self, CheckpointError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(CheckpointError::io(&dir, "create_dir"))?;
        let retain = retain.max(1);
        let backend_note = writer
            .fallback_reason()
            .map(|e| format!("io_uring unavailable ({e}); snapshots use pwrite+fsync"));
        let (tx, rx) = mpsc::channel::<Job>();
        let io = IoThread {
            dir: dir.clone(),
            retain,
            writer,
            probe,
            replicator,
        };
        let thread = thread::Builder::new()
            .name("tandem-snapshot-io".into())
            .spawn(move || io.run(rx))
            .map_err(CheckpointError::io(&dir, "spawn snapshot I/O thread"))?;
        Ok(SnapshotStore {
            dir,
            retain,
            tx: Some(tx),
            thread: Some(thread),
            backend_note,
            state_backend: None,
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Checkpoints kept.
    pub fn retain(&self) -> usize {
        self.retain
    }

    /// Why the store writes without io_uring, if it does.
    pub fn backend_note(&self) -> Option<&str> {
        self.backend_note.as_deref()
    }

    /// Records `name` as the state backend of every set written from now
    /// on ([`Manifest::state_backend`]).
    pub fn record_state_backend(&mut self, name: &'static str) {
        self.state_backend = Some(name);
    }

    /// Queues checkpoint `id` for writing and returns at once; the I/O
    /// thread writes, fsyncs and publishes it, then applies retention.
    pub fn submit(&self, id: u64, snapshots: Vec<OperatorSnapshot>) -> Pending {
        self.enqueue(SnapshotKind::Checkpoint, id, snapshots)
    }

    /// Queues savepoint `id` (`sp-<id>/`, never deleted by retention).
    pub fn save_savepoint(&self, id: u64, snapshots: Vec<OperatorSnapshot>) -> Pending {
        self.enqueue(SnapshotKind::Savepoint, id, snapshots)
    }

    fn enqueue(&self, kind: SnapshotKind, id: u64, snapshots: Vec<OperatorSnapshot>) -> Pending {
        let (done, rx) = mpsc::sync_channel(1);
        let job = Job {
            kind,
            id,
            state_backend: self.state_backend,
            snapshots,
            done,
        };
        // A send error drops `done`; `wait` then reports `WriterGone`.
        let _ = self.tx.as_ref().map(|tx| tx.send(job));
        Pending { id, rx }
    }

    /// Published checkpoints and savepoints, by id.
    pub fn list(&self) -> Result<Vec<Listing>, CheckpointError> {
        list(&self.dir)
    }

    /// The newest checkpoint whose manifest parses and whose every file
    /// verifies (header, length, checksum, agreement with the manifest);
    /// newer ones that fail are returned in `skipped` with the reason.
    pub fn latest_valid(&self) -> Result<LatestValid, CheckpointError> {
        let mut skipped = Vec::new();
        let mut checkpoints: Vec<_> = self
            .list()?
            .into_iter()
            .filter(|l| l.kind == SnapshotKind::Checkpoint)
            .collect();
        checkpoints.sort_by_key(|l| std::cmp::Reverse(l.id));
        for l in checkpoints {
            match l.load().and_then(|m| m.verify().map(|()| m)) {
                Ok(m) => {
                    return Ok(LatestValid {
                        checkpoint: Some(m),
                        skipped,
                    })
                }
                Err(error) => skipped.push(Skipped { id: l.id, error }),
            }
        }
        Ok(LatestValid {
            checkpoint: None,
            skipped,
        })
    }

    /// Maps and verifies one file of a manifest for restoring.
    pub fn restore(
        &self,
        manifest: &Manifest,
        entry: &FileEntry,
    ) -> Result<SnapshotFile, CheckpointError> {
        manifest.open(entry)
    }
}

impl Drop for SnapshotStore {
    fn drop(&mut self) {
        // Closing the channel lets the I/O thread finish queued jobs and end.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The I/O thread's state: it alone touches the store's files.
struct IoThread {
    dir: PathBuf,
    retain: usize,
    writer: FileWriter,
    probe: Option<Arc<dyn StorageProbe>>,
    replicator: Option<Arc<dyn Replicator>>,
}

impl IoThread {
    fn run(mut self, rx: mpsc::Receiver<Job>) {
        while let Ok(job) = rx.recv() {
            let result = self.write_set(job.kind, job.id, job.state_backend, job.snapshots);
            if let Err(e) = &result {
                self.discard_unpublished(job.kind, job.id, e);
            }
            let _ = job.done.send(result);
        }
    }

    /// A set's directory and its manifest's path.
    fn set_paths(&self, kind: SnapshotKind, id: u64) -> (PathBuf, PathBuf) {
        match kind {
            SnapshotKind::Checkpoint => (
                self.dir.join(format!("chk-{id}")),
                self.dir.join(format!("manifest-{id}.json")),
            ),
            SnapshotKind::Savepoint => {
                let d = self.dir.join(format!("sp-{id}"));
                let m = d.join(SAVEPOINT_MANIFEST);
                (d, m)
            }
        }
    }

    /// A set that failed before it was published (a full disk, an I/O
    /// error) is of no use to anyone: its files and staged manifest go, so
    /// that a failing disk is not filled further by every retry. A crash
    /// (injected: the process "dies" there) leaves them as a crash would,
    /// and a published set is not this failure's.
    fn discard_unpublished(&mut self, kind: SnapshotKind, id: u64, e: &CheckpointError) {
        if matches!(
            e,
            CheckpointError::Crashed { .. } | CheckpointError::AlreadyPublished { .. }
        ) {
            return;
        }
        let (set_dir, manifest_path) = self.set_paths(kind, id);
        if manifest_path.exists() {
            return;
        }
        let _ = fs::remove_file(manifest_path.with_extension("json.tmp"));
        let _ = fs::remove_dir_all(&set_dir);
    }

    fn write_set(
        &mut self,
        kind: SnapshotKind,
        id: u64,
        state_backend: Option<&'static str>,
        snapshots: Vec<OperatorSnapshot>,
    ) -> Result<Published, CheckpointError> {
        let start = Instant::now();
        let (set_dir, manifest_path) = self.set_paths(kind, id);
        check_new_set(id, &manifest_path, &snapshots)?;
        fs::create_dir_all(&set_dir).map_err(CheckpointError::io(&set_dir, "create_dir"))?;
        let created_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut files = Vec::with_capacity(snapshots.len());
        let mut open = Vec::with_capacity(snapshots.len() + 1);
        let mut paths = Vec::with_capacity(snapshots.len() + 1);
        let mut backend = Backend::UringDirect;
        // Images up to `BATCHED_IMAGE` are written together below.
        let mut small = Vec::new();
        // The chains the deltas extend, found before anything is written.
        let mut chains = Vec::with_capacity(snapshots.len());
        // Each base manifest read once, whatever the number of instances.
        let mut bases = std::collections::HashMap::new();
        for s in &snapshots {
            chains.push(self.chain_for(kind, id, s, &mut bases)?);
        }
        for (s, chain) in snapshots.into_iter().zip(chains) {
            let name = format!("{}-{}.snap", s.operator, s.instance);
            let path = set_dir.join(&name);
            let (entry, file, image, b) = self.write_file(&path, id, created_at_ms, s)?;
            backend = backend.max(b);
            files.push(FileEntry {
                path: name,
                delta: !chain.is_empty(),
                chain,
                ..entry
            });
            if let Some(image) = image {
                small.push((open.len(), image));
            }
            open.push(file);
            paths.push(path);
        }
        if let Some(p) = &self.probe {
            for (i, _) in &small {
                if let Some(e) = p.write(id, &paths[*i]) {
                    return Err(CheckpointError::io(&paths[*i], "write")(e));
                }
            }
        }
        let items: Vec<(&File, &AlignedBuf)> = small.iter().map(|(i, b)| (&open[*i], b)).collect();
        self.writer
            .write_many(&items)
            .map_err(|(k, e)| CheckpointError::io(&paths[small[k].0], "write")(e))?;
        drop(items);
        drop(small);
        let manifest_dir = manifest_path.parent().unwrap().to_path_buf();
        let mut manifest = Manifest {
            format_version: FORMAT_VERSION,
            kind,
            id,
            created_at_ms,
            state_backend: state_backend.map(str::to_string),
            files,
            dir: manifest_dir.clone(),
        };
        if kind == SnapshotKind::Checkpoint {
            for f in &mut manifest.files {
                f.path = format!("chk-{id}/{}", f.path);
            }
        }
        let (tmp, tmp_file) = stage_manifest(&manifest, &manifest_path)?;
        // Every file, the set's directory and the staged manifest fsynced
        // at once: concurrent fsyncs share journal commits, and under
        // another process's heavy writeback each commit can wait tens of
        // milliseconds — one per file made a dozen small snapshots wait
        // for a dozen of them.
        open.push(File::open(&set_dir).map_err(CheckpointError::io(&set_dir, "open dir"))?);
        paths.push(set_dir.clone());
        open.push(tmp_file);
        paths.push(tmp.clone());
        if let Some(e) = self.probe.as_ref().and_then(|p| p.fsync(id, &paths[0])) {
            return Err(CheckpointError::io(&paths[0], "fsync")(e));
        }
        let refs: Vec<&File> = open.iter().collect();
        self.writer
            .fsync_many(&refs)
            .map_err(|(i, e)| CheckpointError::io(&paths[i], "fsync")(e))?;
        drop(refs);
        drop(open);
        if let (Some(r), SnapshotKind::Checkpoint) = (&self.replicator, kind) {
            r.replicate(&self.dir, &manifest)
                .map_err(|source| CheckpointError::Replication { id, source })?;
        }
        let write_time = start.elapsed();
        // The rename publishes it; the directory fsync makes that durable —
        // and, for a checkpoint, the removal of the manifests retention
        // retires, in the same journal commit.
        if self
            .probe
            .as_ref()
            .is_some_and(|p| p.before_publish(id) == StorageAction::Crash)
        {
            return Err(CheckpointError::Crashed {
                id,
                published: false,
            });
        }
        fs::rename(&tmp, &manifest_path).map_err(CheckpointError::io(&manifest_path, "rename"))?;
        let retired = match kind {
            SnapshotKind::Checkpoint => Some(self.retire_manifests()),
            SnapshotKind::Savepoint => None,
        };
        // Made durable whether retention went well or not.
        fsync_dir(&mut self.writer, &manifest_dir)?;
        if kind == SnapshotKind::Savepoint {
            // The `sp-<id>` entry itself must reach the store directory.
            fsync_dir(&mut self.writer, &self.dir)?;
        }
        let publish_time = start.elapsed();
        if self
            .probe
            .as_ref()
            .is_some_and(|p| p.published(&manifest) == StorageAction::Crash)
        {
            return Err(CheckpointError::Crashed {
                id,
                published: true,
            });
        }
        let removed = match retired {
            Some(r) => {
                let r = r?;
                self.remove_unlisted_sets(&r)?;
                r.removed
            }
            None => Vec::new(),
        };
        Ok(Published {
            manifest,
            manifest_path,
            backend,
            write_time,
            publish_time,
            removed,
        })
    }

    /// The links a delta's restore reads before it: its base checkpoint's
    /// file of the same operator instance and that file's own chain. A
    /// whole snapshot has none; a delta in a savepoint (which must stand
    /// alone) or over a checkpoint that lacks the instance is refused.
    fn chain_for(
        &self,
        kind: SnapshotKind,
        id: u64,
        s: &OperatorSnapshot,
        bases: &mut std::collections::HashMap<u64, Manifest>,
    ) -> Result<Vec<super::manifest::Link>, CheckpointError> {
        let Some(base) = s.bytes.delta_over() else {
            return Ok(Vec::new());
        };
        let broken = |reason: String| CheckpointError::BrokenChain {
            id,
            operator: s.operator.clone(),
            instance: s.instance,
            link: base,
            reason,
        };
        if kind == SnapshotKind::Savepoint {
            return Err(broken("a savepoint's snapshots must be whole".into()));
        }
        if base >= id {
            return Err(broken("a delta over a later checkpoint".into()));
        }
        let m = match bases.entry(base) {
            std::collections::hash_map::Entry::Occupied(m) => m.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let path = self.dir.join(format!("manifest-{base}.json"));
                v.insert(Manifest::load(&path).map_err(|e| broken(e.to_string()))?)
            }
        };
        let e = m
            .files
            .iter()
            .find(|f| f.operator == s.operator && f.instance == s.instance)
            .ok_or_else(|| broken("it has no snapshot of this operator instance".into()))?;
        let mut chain = e.chain.clone();
        chain.push(e.as_link(base));
        Ok(chain)
    }

    /// Creates one snapshot file. A large image is written here: payload
    /// first (hashed while the device works), then the header block. One up
    /// to [`BATCHED_IMAGE`] is hashed and headed and handed back for the
    /// caller to write with the others. The caller fsyncs the file.
    fn write_file(
        &mut self,
        path: &Path,
        id: u64,
        created_at_ms: u64,
        s: OperatorSnapshot,
    ) -> Result<(FileEntry, File, Option<AlignedBuf>, Backend), CheckpointError> {
        let payload_len = s.bytes.len();
        // A whole keyed state's key index, built here, off the data path.
        let index = match s.bytes.indexer() {
            Some(build) => build(s.bytes.payload())?,
            None => Vec::new(),
        };
        let mut image = s.bytes.into_image();
        image.pad_to_block();
        image.extend_from_slice(&index);
        image.pad_to_block();
        let table_at = image.len();
        let layout = format::Layout::of(payload_len as u64, index.len() as u64)
            .filter(|l| l.table_at == table_at as u64)
            .ok_or_else(|| {
                CheckpointError::io(path, "lay out")(std::io::Error::other(
                    "the payload and its index do not fit in a file",
                ))
            })?;
        drop(index);
        let (file, backend) = self
            .writer
            .create(path)
            .map_err(CheckpointError::io(path, "create"))?;
        let mut header = SnapshotHeader {
            checkpoint_id: id,
            operator: s.operator,
            instance: s.instance,
            positions: s.positions,
            created_at_ms,
            payload_len: payload_len as u64,
            payload_checksum: 0,
            index_len: layout.index_len,
            version: FORMAT_VERSION,
        };
        if image.len() > BATCHED_IMAGE {
            if let Some(e) = self.probe.as_ref().and_then(|p| p.write(id, path)) {
                return Err(CheckpointError::io(path, "write")(e));
            }
        }
        // The block table goes after the body: the XXH3-64 of each
        // checked block, and the header holds the table's own checksum.
        let put_table = |image: &mut AlignedBuf, table: Vec<u64>| {
            let (bytes, sum) = format::table_bytes(&table);
            image.resize_zeroed(table_at);
            image.extend_from_slice(&bytes);
            image.pad_to_block();
            sum
        };
        let deferred = if table_at <= BATCHED_IMAGE {
            let mut hasher = format::BlockHasher::new(table_at - HEADER_BLOCK);
            hasher.update(&image[HEADER_BLOCK..table_at]);
            header.payload_checksum = put_table(&mut image, hasher.finish());
            header.encode(&mut image[..HEADER_BLOCK])?;
            Some(image)
        } else {
            let mut hasher = format::BlockHasher::new(table_at - HEADER_BLOCK);
            self.writer
                .write_range(&file, &image, HEADER_BLOCK..table_at, |piece| {
                    hasher.update(piece)
                })
                .map_err(CheckpointError::io(path, "write"))?;
            header.payload_checksum = put_table(&mut image, hasher.finish());
            header.encode(&mut image[..HEADER_BLOCK])?;
            self.writer
                .write_range(&file, &image, table_at..image.len(), |_| {})
                .map_err(CheckpointError::io(path, "write"))?;
            self.writer
                .write_range(&file, &image, 0..HEADER_BLOCK, |_| {})
                .map_err(CheckpointError::io(path, "write"))?;
            None
        };

        let entry = FileEntry {
            path: String::new(),
            file_len: header.file_len(),
            operator: header.operator,
            instance: header.instance,
            positions: header.positions,
            payload_len: header.payload_len,
            payload_checksum: header.payload_checksum,
            index_len: header.index_len,
            delta: false,
            chain: Vec::new(),
        };
        Ok((entry, file, deferred, backend))
    }

    /// Removes the manifests of checkpoints beyond the newest `retain` (the
    /// caller fsyncs the directory before any of their files go: no
    /// published manifest ever names a deleted file).
    fn retire_manifests(&mut self) -> Result<Retired, CheckpointError> {
        let mut ids: Vec<u64> = list(&self.dir)?
            .into_iter()
            .filter(|l| l.kind == SnapshotKind::Checkpoint)
            .map(|l| l.id)
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        // The sets the kept checkpoints' chains read stay too (their
        // manifests go: they are no longer restore points of their own).
        let mut kept: HashSet<u64> = ids.iter().take(self.retain).copied().collect();
        for &id in ids.iter().take(self.retain) {
            let m = Manifest::load(&self.dir.join(format!("manifest-{id}.json")))?;
            kept.extend(m.links());
        }
        let mut removed = Vec::new();
        for &id in ids.iter().skip(self.retain) {
            let m = self.dir.join(format!("manifest-{id}.json"));
            fs::remove_file(&m).map_err(CheckpointError::io(&m, "remove"))?;
            removed.push(id);
        }
        Ok(Retired {
            newest: ids.first().copied(),
            kept,
            removed,
        })
    }

    /// Deletes every `chk-<id>` set no kept manifest names that is older
    /// than the newest published checkpoint: those retention retired (their
    /// manifests' removal is durable by now) and unpublished leftovers.
    fn remove_unlisted_sets(&mut self, r: &Retired) -> Result<(), CheckpointError> {
        for entry in fs::read_dir(&self.dir).map_err(CheckpointError::io(&self.dir, "read_dir"))? {
            let entry = entry.map_err(CheckpointError::io(&self.dir, "read_dir"))?;
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("chk-"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if !r.kept.contains(&id) && r.newest.is_some_and(|n| id < n) {
                let p = entry.path();
                fs::remove_dir_all(&p).map_err(CheckpointError::io(&p, "remove"))?;
            }
        }
        Ok(())
    }
}

/// What a retention pass retired and kept.
struct Retired {
    newest: Option<u64>,
    kept: HashSet<u64>,
    removed: Vec<u64>,
}

fn check_name(name: &str) -> Result<(), CheckpointError> {
    let reason = if name.is_empty() {
        "empty"
    } else if name == "." || name == ".." {
        "a relative directory"
    } else if name.contains(['/', '\0']) {
        "contains `/` or NUL"
    } else if name.len() > 200 {
        "longer than 200 bytes"
    } else {
        return Ok(());
    };
    Err(CheckpointError::InvalidName {
        name: name.to_owned(),
        reason,
    })
}

fn fsync_dir(writer: &mut FileWriter, dir: &Path) -> Result<(), CheckpointError> {
    let d = File::open(dir).map_err(CheckpointError::io(dir, "open dir"))?;
    writer
        .fsync(&d)
        .map_err(CheckpointError::io(dir, "fsync dir"))
}

/// Writes `<manifest>.tmp` (not yet fsynced): the caller fsyncs it with the
/// snapshot files, renames it over `<manifest>` and fsyncs the directory, so
/// readers see the old state or the whole new manifest.
fn stage_manifest(manifest: &Manifest, path: &Path) -> Result<(PathBuf, File), CheckpointError> {
    let tmp = path.with_extension("json.tmp");
    let json = serde_json::to_vec_pretty(manifest).expect("a manifest always serializes");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(CheckpointError::io(&tmp, "create"))?;
    f.write_all(&json)
        .map_err(CheckpointError::io(&tmp, "write"))?;
    Ok((tmp, f))
}

/// Set `id` is not published yet, and names each operator instance once,
/// by a name a file may take.
fn check_new_set(
    id: u64,
    manifest_path: &Path,
    snapshots: &[OperatorSnapshot],
) -> Result<(), CheckpointError> {
    if manifest_path.exists() {
        return Err(CheckpointError::AlreadyPublished {
            id,
            path: manifest_path.to_path_buf(),
        });
    }
    let mut seen = HashSet::new();
    for s in snapshots {
        check_name(&s.operator)?;
        if !seen.insert((s.operator.as_str(), s.instance)) {
            return Err(CheckpointError::Duplicate {
                id,
                operator: s.operator.clone(),
                instance: s.instance,
            });
        }
    }
    Ok(())
}
