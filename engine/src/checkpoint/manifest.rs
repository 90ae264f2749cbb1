//! What a published checkpoint or savepoint is on disk, and how it is read
//! back: its manifest (the files, their sizes, checksums and positions),
//! the listing of a store directory, a savepoint directory. The writer is
//! [`super::store`]; the protocol is in the [module docs](super#publish-protocol).

use std::{
    fs,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::{
    format::{Position, SnapshotHeader},
    lazy::LazySnapshot,
    restore::SnapshotFile,
    CheckpointError,
};

/// The largest manifest [`Manifest::load`] reads: 64 MiB, some 200,000
/// files (one this engine wrote takes about 300 bytes a file).
pub const MAX_MANIFEST: u64 = 64 << 20;

/// Whether a snapshot set is a retained checkpoint or a savepoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotKind {
    /// Periodic; subject to retention.
    Checkpoint,
    /// Taken on demand; never deleted by retention.
    Savepoint,
}

/// One file of a manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the manifest's directory.
    pub path: String,
    /// Operator name.
    pub operator: String,
    /// Operator instance.
    pub instance: u32,
    /// Tuple positions the snapshot covers.
    pub positions: Vec<Position>,
    /// File length (header block + padded payload).
    pub file_len: u64,
    /// Payload bytes.
    pub payload_len: u64,
    /// XXH3-64 of the payload (version 2: of its block table).
    pub payload_checksum: u64,
    /// Bytes of the key index after the payload (a keyed state's archive
    /// that a restore reads lazily; 0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub index_len: u64,
    /// Whether the payload is a delta over the last link of `chain`
    /// ([`crate::state::delta`]); else the whole state.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delta: bool,
    /// For a delta: the files a restore reads before this one, oldest
    /// first — the last whole archive, then the deltas after it — each
    /// written by an earlier checkpoint of the same store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<Link>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A file an incremental snapshot's restore reads before it (see
/// [`FileEntry::chain`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The checkpoint that wrote it.
    pub checkpoint: u64,
    /// Path relative to the manifest's directory.
    pub path: String,
    /// File length.
    pub file_len: u64,
    /// Payload bytes.
    pub payload_len: u64,
    /// XXH3-64 of the payload.
    pub payload_checksum: u64,
    /// Whether it is a delta (every link but the first).
    pub delta: bool,
}

impl FileEntry {
    /// This file as a link of a later checkpoint's chain.
    pub fn as_link(&self, checkpoint: u64) -> Link {
        Link {
            checkpoint,
            path: self.path.clone(),
            file_len: self.file_len,
            payload_len: self.payload_len,
            payload_checksum: self.payload_checksum,
            delta: self.delta,
        }
    }

    /// Payload bytes a restore reads: this file's and its chain's.
    pub fn restore_bytes(&self) -> u64 {
        self.chain
            .iter()
            .fold(self.payload_len, |a, l| a.saturating_add(l.payload_len))
    }
}

/// A published checkpoint or savepoint: what `manifest-<id>.json` (or
/// `sp-<id>/manifest.json`) holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Snapshot format version of the files.
    pub format_version: u32,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// Checkpoint id.
    pub id: u64,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The state backend whose keyed state the files hold (`memory` or
    /// `disk`, [`crate::state::StateBackend::name`]); a keyed state
    /// restores only into the backend that wrote it, and a job on the
    /// other is refused before it starts. `None`: written before Tandem
    /// recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_backend: Option<String>,
    /// The snapshot files.
    pub files: Vec<FileEntry>,
    /// Directory the file paths are relative to (not stored).
    #[serde(skip)]
    pub dir: PathBuf,
}

/// The pseudo-operator whose file lists every operator's parallelism when
/// the checkpoint was taken (what a restore at another parallelism
/// redistributes from).
pub(crate) const SHAPE_ENTRY: &str = "~parallelism";

impl Manifest {
    /// Each operator's parallelism when the checkpoint was taken, by name
    /// (a source's: its number of partitions, which a restore keeps);
    /// `None` for a checkpoint written before Tandem recorded it.
    pub fn parallelism(
        &self,
    ) -> Result<Option<std::collections::HashMap<String, usize>>, CheckpointError> {
        let Some(e) = self.files.iter().find(|e| e.operator == SHAPE_ENTRY) else {
            return Ok(None);
        };
        let file = self.open(e)?;
        let list = crate::checkpoint::access::<Vec<(String, u32)>>(file.payload())?;
        Ok(Some(
            list.iter()
                .map(|i| (i.0.to_string(), i.1.to_native() as usize))
                .collect(),
        ))
    }

    /// Reads and parses a manifest file (a regular file of at most
    /// [`MAX_MANIFEST`] bytes).
    pub fn load(path: &Path) -> Result<Self, CheckpointError> {
        let bytes = crate::sys::file::read_bounded(path, MAX_MANIFEST, "manifest")
            .map_err(CheckpointError::io(path, "read"))?;
        let mut m: Manifest =
            serde_json::from_slice(&bytes).map_err(|source| CheckpointError::Manifest {
                path: path.to_path_buf(),
                source,
            })?;
        m.dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        Ok(m)
    }

    /// The point this manifest describes, as a job's report names it.
    pub fn restore_point(&self) -> crate::metrics::RestorePoint {
        crate::metrics::RestorePoint {
            kind: match self.kind {
                SnapshotKind::Checkpoint => crate::metrics::RestoreKind::Checkpoint,
                SnapshotKind::Savepoint => crate::metrics::RestoreKind::Savepoint,
            },
            id: self.id,
            created_at_ms: self.created_at_ms,
            dir: self.dir.clone(),
        }
    }

    /// Absolute path of one of its files.
    pub fn file_path(&self, entry: &FileEntry) -> PathBuf {
        self.dir.join(&entry.path)
    }

    /// Payload bytes a restore of every file reads (chains included).
    pub fn restore_bytes(&self) -> u64 {
        self.files
            .iter()
            .fold(0, |a, f| a.saturating_add(f.restore_bytes()))
    }

    /// Checkpoints whose files this one's chains read.
    pub fn links(&self) -> std::collections::BTreeSet<u64> {
        self.files
            .iter()
            .flat_map(|f| f.chain.iter().map(|l| l.checkpoint))
            .collect()
    }

    /// Maps and verifies the links of one of its files' chain, oldest
    /// first (none for a whole snapshot): each must be the file its link
    /// names — written by that checkpoint for the same operator instance,
    /// of that length and checksum — the first whole, the others deltas.
    pub fn open_chain(&self, entry: &FileEntry) -> Result<Vec<SnapshotFile>, CheckpointError> {
        self.chain_links(entry, |path| {
            let f = SnapshotFile::open(path)?;
            let h = f.header().clone();
            Ok((f, h))
        })
    }

    /// As [`open_chain`](Self::open_chain), but a link with a key index
    /// is opened for a lazy read ([`open_lazy`](Self::open_lazy)).
    pub fn open_chain_lazily(&self, entry: &FileEntry) -> Result<Vec<ChainFile>, CheckpointError> {
        self.chain_links(entry, |path| {
            if let Some(f) = LazySnapshot::open(path)?.filter(|f| f.header().index_len > 0) {
                let h = f.header().clone();
                return Ok((ChainFile::Lazy(f), h));
            }
            let f = SnapshotFile::open(path)?;
            let h = f.header().clone();
            Ok((ChainFile::Eager(f), h))
        })
    }

    /// As [`open_chain`](Self::open_chain), reading the files through
    /// instead of mapping them.
    pub fn check_chain(&self, entry: &FileEntry) -> Result<(), CheckpointError> {
        self.chain_links(entry, |path| Ok(((), SnapshotFile::verify(path)?)))
            .map(drop)
    }

    fn chain_links<T>(
        &self,
        entry: &FileEntry,
        mut open: impl FnMut(&Path) -> Result<(T, SnapshotHeader), CheckpointError>,
    ) -> Result<Vec<T>, CheckpointError> {
        let broken = |link: u64, reason: String| CheckpointError::BrokenChain {
            id: self.id,
            operator: entry.operator.clone(),
            instance: entry.instance,
            link,
            reason,
        };
        if entry.delta == entry.chain.is_empty() {
            return Err(broken(
                self.id,
                format!(
                    "a {} with {} links before it",
                    if entry.delta {
                        "delta"
                    } else {
                        "whole snapshot"
                    },
                    entry.chain.len()
                ),
            ));
        }
        let mut out = Vec::with_capacity(entry.chain.len());
        for (i, l) in entry.chain.iter().enumerate() {
            if l.delta != (i > 0) || l.checkpoint >= self.id {
                return Err(broken(
                    l.checkpoint,
                    "the links are not a whole snapshot then deltas of earlier checkpoints".into(),
                ));
            }
            let as_entry = FileEntry {
                path: l.path.clone(),
                operator: entry.operator.clone(),
                instance: entry.instance,
                positions: Vec::new(),
                file_len: l.file_len,
                payload_len: l.payload_len,
                payload_checksum: l.payload_checksum,
                index_len: 0,
                delta: l.delta,
                chain: Vec::new(),
            };
            let path = self.inside(&as_entry)?;
            let (t, h) = open(&path).map_err(|e| broken(l.checkpoint, e.to_string()))?;
            let linked = Manifest {
                id: l.checkpoint,
                ..self.clone_header()
            };
            linked
                .agrees_but_positions(&as_entry, &h, path)
                .map_err(|e| broken(l.checkpoint, e.to_string()))?;
            out.push(t);
        }
        Ok(out)
    }

    /// This manifest without its files (to check a link's header against).
    fn clone_header(&self) -> Manifest {
        Manifest {
            format_version: self.format_version,
            kind: self.kind,
            id: self.id,
            created_at_ms: self.created_at_ms,
            state_backend: self.state_backend.clone(),
            files: Vec::new(),
            dir: self.dir.clone(),
        }
    }

    /// Total payload bytes.
    pub fn payload_bytes(&self) -> u64 {
        // Saturating: an unverified manifest may claim anything.
        self.files
            .iter()
            .fold(0, |a, f| a.saturating_add(f.payload_len))
    }

    /// Total key index bytes written with the payloads.
    pub fn index_bytes(&self) -> u64 {
        self.files
            .iter()
            .fold(0, |a, f| a.saturating_add(f.index_len))
    }

    /// Maps and verifies one of its files (header, length, checksum, and
    /// agreement with this manifest).
    pub fn open(&self, entry: &FileEntry) -> Result<SnapshotFile, CheckpointError> {
        let path = self.inside(entry)?;
        let file = SnapshotFile::open(&path)?;
        self.agrees(entry, file.header(), path)?;
        Ok(file)
    }

    /// Opens one of its files for a lazy read ([`LazySnapshot`]): header,
    /// length, block table and agreement with this manifest are checked
    /// now, each block of the body when it is first read. `Ok(None)`: a
    /// version 1 file, read only eagerly.
    pub fn open_lazy(
        &self,
        entry: &FileEntry,
    ) -> Result<Option<std::sync::Arc<LazySnapshot>>, CheckpointError> {
        let path = self.inside(entry)?;
        let Some(file) = LazySnapshot::open(&path)? else {
            return Ok(None);
        };
        self.agrees(entry, file.header(), path)?;
        Ok(Some(file))
    }

    /// Verifies one of its files as [`open`](Self::open) does, reading it
    /// through instead of mapping it ([`SnapshotFile::verify`]): for a
    /// reader of a store another process writes. Returns its header.
    pub fn check(&self, entry: &FileEntry) -> Result<SnapshotHeader, CheckpointError> {
        let path = self.inside(entry)?;
        let header = SnapshotFile::verify(&path)?;
        self.agrees(entry, &header, path)?;
        Ok(header)
    }

    /// The path of one of its files, which a manifest names inside its own
    /// directory by a plain relative name: never an absolute path or `..`.
    /// (That it is a regular file, not a FIFO that would block the open,
    /// the opening checks on the file it opened.)
    fn inside(&self, entry: &FileEntry) -> Result<PathBuf, CheckpointError> {
        let path = self.file_path(entry);
        let inside = Path::new(&entry.path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside || entry.path.is_empty() {
            return Err(CheckpointError::ManifestMismatch {
                path,
                field: "path",
                expected: "a relative path inside the manifest's directory".into(),
                found: entry.path.clone(),
            });
        }
        Ok(path)
    }

    /// Whether a file's verified header says what its entry says.
    fn agrees(
        &self,
        entry: &FileEntry,
        h: &SnapshotHeader,
        path: PathBuf,
    ) -> Result<(), CheckpointError> {
        if h.positions != entry.positions {
            return Err(CheckpointError::ManifestMismatch {
                path,
                field: "positions",
                expected: format!("{:?}", entry.positions),
                found: format!("{:?}", h.positions),
            });
        }
        self.agrees_but_positions(entry, h, path)
    }

    /// [`agrees`](Self::agrees) but for the positions (a link's are those
    /// of its own checkpoint).
    fn agrees_but_positions(
        &self,
        entry: &FileEntry,
        h: &SnapshotHeader,
        path: PathBuf,
    ) -> Result<(), CheckpointError> {
        let mismatch = |field, expected: String, found: String| {
            Err(CheckpointError::ManifestMismatch {
                path,
                field,
                expected,
                found,
            })
        };
        if h.checkpoint_id != self.id {
            return mismatch("id", self.id.to_string(), h.checkpoint_id.to_string());
        }
        if h.operator != entry.operator || h.instance != entry.instance {
            return mismatch(
                "operator",
                format!("{}#{}", entry.operator, entry.instance),
                format!("{}#{}", h.operator, h.instance),
            );
        }
        if h.payload_len != entry.payload_len {
            return mismatch(
                "payload length",
                entry.payload_len.to_string(),
                h.payload_len.to_string(),
            );
        }
        if h.file_len() != entry.file_len {
            return mismatch(
                "file length",
                entry.file_len.to_string(),
                h.file_len().to_string(),
            );
        }
        if h.payload_checksum != entry.payload_checksum {
            return mismatch(
                "payload checksum",
                format!("{:#018x}", entry.payload_checksum),
                format!("{:#018x}", h.payload_checksum),
            );
        }
        Ok(())
    }

    /// Verifies every file and every link of its chain; the first error
    /// found, if any. A file with a key index — a keyed state's whole
    /// archive, which a restore reads lazily — is checked up to its block
    /// table here (and refused if it was found damaged earlier in this
    /// process); its blocks are verified as the restore reads them.
    pub fn verify(&self) -> Result<(), CheckpointError> {
        self.files.iter().try_for_each(|e| {
            match self.open_lazy(e)? {
                Some(f) if f.header().index_len > 0 => {}
                _ => drop(self.open(e)?),
            }
            self.open_chain_lazily(e).map(drop)
        })
    }

    /// Verifies every file and every link of its chain whole, whatever
    /// a restore will read lazily (a restore point from outside the job's
    /// own store: a damage found later could not fall back to anything).
    pub fn verify_whole(&self) -> Result<(), CheckpointError> {
        self.files
            .iter()
            .try_for_each(|e| self.open(e).and_then(|_| self.open_chain(e)).map(drop))
    }
}

/// One file of a chain as a restore reads it.
#[derive(Debug)]
pub enum ChainFile {
    /// Mapped and verified whole.
    Eager(SnapshotFile),
    /// A keyed archive with a key index, read lazily.
    Lazy(std::sync::Arc<LazySnapshot>),
}

/// A checkpoint `latest_valid` passed over, and why.
#[derive(Debug)]
pub struct Skipped {
    /// Its id.
    pub id: u64,
    /// What is wrong with it.
    pub error: CheckpointError,
}

/// What [`SnapshotStore::latest_valid`](super::SnapshotStore::latest_valid) found.
#[derive(Debug)]
pub struct LatestValid {
    /// The newest checkpoint whose manifest and files all verify.
    pub checkpoint: Option<Manifest>,
    /// Newer checkpoints that did not verify, newest first.
    pub skipped: Vec<Skipped>,
}

/// A published manifest found in a store directory.
#[derive(Debug)]
pub struct Listing {
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// Its id (from the file name).
    pub id: u64,
    /// The manifest file.
    pub manifest_path: PathBuf,
}

impl Listing {
    /// Reads the listed manifest ([`Manifest::load`]) and checks that it
    /// is what its name says: its kind and id (a `manifest-6.json` copied
    /// to `manifest-9.json` is refused, not listed or restored as 9).
    pub fn load(&self) -> Result<Manifest, CheckpointError> {
        let m = Manifest::load(&self.manifest_path)?;
        if m.id != self.id || m.kind != self.kind {
            return Err(CheckpointError::Misnamed {
                path: self.manifest_path.clone(),
                named: self.id,
                holds: m.id,
                kind: match m.kind {
                    SnapshotKind::Checkpoint => "checkpoint",
                    SnapshotKind::Savepoint => "savepoint",
                },
            });
        }
        Ok(m)
    }
}

/// Every published manifest in `dir` (checkpoints and savepoints), by id.
/// `*.tmp` files are unpublished and never listed.
pub fn list(dir: &Path) -> Result<Vec<Listing>, CheckpointError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(CheckpointError::io(dir, "read_dir"))? {
        let entry = entry.map_err(CheckpointError::io(dir, "read_dir"))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(id) = checkpoint_manifest_id(name) {
            out.push(Listing {
                kind: SnapshotKind::Checkpoint,
                id,
                manifest_path: entry.path(),
            });
        } else if let Some(id) = name.strip_prefix("sp-").and_then(|s| s.parse().ok()) {
            // Listed unless it has no manifest at all (a savepoint being
            // written, never finished, or not a directory): a manifest
            // that is there but unreadable — a symlink loop, no
            // permission, not a file — is listed for its reader to say why.
            let manifest_path = entry.path().join(SAVEPOINT_MANIFEST);
            let absent = matches!(
                fs::symlink_metadata(&manifest_path),
                Err(e) if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                )
            );
            if !absent {
                out.push(Listing {
                    kind: SnapshotKind::Savepoint,
                    id,
                    manifest_path,
                });
            }
        }
    }
    out.sort_by_key(|l| (l.kind == SnapshotKind::Savepoint, l.id));
    Ok(out)
}

pub(super) const SAVEPOINT_MANIFEST: &str = "manifest.json";

fn checkpoint_manifest_id(name: &str) -> Option<u64> {
    name.strip_prefix("manifest-")?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

/// Opens a savepoint directory (`sp-<id>`, or any copy of one).
pub fn open_savepoint(path: impl AsRef<Path>) -> Result<Manifest, CheckpointError> {
    let m = Manifest::load(&path.as_ref().join(SAVEPOINT_MANIFEST))?;
    m.verify()?;
    Ok(m)
}
