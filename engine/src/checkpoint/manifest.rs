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
    /// XXH3-64 of the payload.
    pub payload_checksum: u64,
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
    /// The snapshot files.
    pub files: Vec<FileEntry>,
    /// Directory the file paths are relative to (not stored).
    #[serde(skip)]
    pub dir: PathBuf,
}

impl Manifest {
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

    /// Absolute path of one of its files.
    pub fn file_path(&self, entry: &FileEntry) -> PathBuf {
        self.dir.join(&entry.path)
    }

    /// Total payload bytes.
    pub fn payload_bytes(&self) -> u64 {
        // Saturating: an unverified manifest may claim anything.
        self.files
            .iter()
            .fold(0, |a, f| a.saturating_add(f.payload_len))
    }

    /// Maps and verifies one of its files (header, length, checksum, and
    /// agreement with this manifest).
    pub fn open(&self, entry: &FileEntry) -> Result<SnapshotFile, CheckpointError> {
        let path = self.inside(entry)?;
        let file = SnapshotFile::open(&path)?;
        self.agrees(entry, file.header(), path)?;
        Ok(file)
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
        if h.positions != entry.positions {
            return mismatch(
                "positions",
                format!("{:?}", entry.positions),
                format!("{:?}", h.positions),
            );
        }
        Ok(())
    }

    /// Verifies every file; the first error found, if any.
    pub fn verify(&self) -> Result<(), CheckpointError> {
        self.files.iter().try_for_each(|e| self.open(e).map(drop))
    }
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
