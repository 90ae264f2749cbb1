//! Errors of the checkpoint layer: each names the file and what failed.

use std::path::PathBuf;

/// Why a snapshot could not be written, published, listed or restored.
///
/// Variants found while reading (`BadMagic` … `Validate`) describe
/// corruption or incompatibility of one file; restore code reports them and
/// falls back to an older checkpoint, it never panics on them.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A delta payload ([`crate::state::delta`]) that does not parse, or
    /// a chain of snapshots that does not fit together.
    #[error("incremental snapshot: {0}")]
    Delta(String),
    /// A file a lazy restore reads ([`crate::checkpoint::LazySnapshot`])
    /// that does not fit what it should hold: its key index, or where an
    /// archive says its parts are.
    #[error("{path}: {reason}", path = path.display())]
    Lazy { path: PathBuf, reason: String },
    /// A file found damaged earlier in this process (a block that did not
    /// verify as a lazy restore read it): passed over from then on.
    #[error("{path}: found damaged earlier in this run: {why}", path = path.display())]
    Condemned { path: PathBuf, why: String },
    /// The disk state backend's store ([`crate::state::disk`]) failed.
    #[error("disk state backend: {what}: {source}")]
    Disk {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A link of a checkpoint's chain of incremental snapshots is missing
    /// or does not verify.
    #[error("checkpoint {id}: {operator}#{instance}: its chain is broken at checkpoint {link}: {reason}")]
    BrokenChain {
        id: u64,
        operator: String,
        instance: u32,
        link: u64,
        reason: String,
    },
    /// The checkpoint could not be copied off the host (see
    /// [`super::Replicator`]); it was not published.
    #[error("checkpoint {id}: replication: {source}")]
    Replication {
        id: u64,
        #[source]
        source: super::ReplicationError,
    },
    /// A system call on `path` failed.
    #[error("{path}: {op}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with `TNDMSNAP`.
    #[error("{path}: not a snapshot: magic is {found:02x?}, expected \"TNDMSNAP\"", path = path.display())]
    BadMagic { path: PathBuf, found: [u8; 8] },
    /// The file was written by a format this build cannot read.
    #[error("{path}: format version {found} is not supported (this build reads {supported})", path = path.display())]
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// The header's own checksum does not match its bytes.
    #[error("{path}: header checksum mismatch: stored {stored:#018x}, computed {computed:#018x}", path = path.display())]
    HeaderChecksum {
        path: PathBuf,
        stored: u64,
        computed: u64,
    },
    /// A header field is out of range (caught before the checksum when it
    /// would make the checksum unreadable, e.g. a header length > 4096).
    #[error("{path}: malformed header: {field}: {reason}", path = path.display())]
    MalformedHeader {
        path: PathBuf,
        field: &'static str,
        reason: String,
    },
    /// The file is shorter or longer than its header says.
    #[error("{path}: file is {found} bytes, its header implies {expected}", path = path.display())]
    Length {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    /// The payload's bytes do not hash to the header's checksum.
    #[error("{path}: payload checksum mismatch: stored {stored:#018x}, computed {computed:#018x}", path = path.display())]
    PayloadChecksum {
        path: PathBuf,
        stored: u64,
        computed: u64,
    },
    /// One checked block of a version 2 file's body does not hash to its
    /// entry in the block table (found when the block was first read).
    #[error("{path}: block {block} (bytes {from}..{to} of the body) checksum mismatch: stored {stored:#018x}, computed {computed:#018x}", path = path.display(), from = block * crate::checkpoint::format::CHECK_BLOCK as u64, to = (block + 1) * crate::checkpoint::format::CHECK_BLOCK as u64)]
    BlockChecksum {
        path: PathBuf,
        block: u64,
        stored: u64,
        computed: u64,
    },
    /// The file's header disagrees with the manifest that lists it.
    #[error("{path}: {field}: manifest says {expected}, file says {found}", path = path.display())]
    ManifestMismatch {
        path: PathBuf,
        field: &'static str,
        expected: String,
        found: String,
    },
    /// A manifest could not be parsed.
    #[error("{path}: bad manifest: {source}", path = path.display())]
    Manifest {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The payload is not a valid archive of the requested type.
    #[error("{path}: archived value failed validation: {source}", path = path.display())]
    Validate {
        path: PathBuf,
        #[source]
        source: rkyv::rancor::Error,
    },
    /// An archived payload (without a file to name) failed validation.
    #[error("archived state failed validation: {source}")]
    Access {
        #[source]
        source: rkyv::rancor::Error,
    },
    /// An archive validated but could not be turned back into its value.
    #[error("restoring state: {source}")]
    Deserialize {
        #[source]
        source: rkyv::rancor::Error,
    },
    /// A value could not be serialized.
    #[error("serializing snapshot state: {source}")]
    Serialize {
        #[source]
        source: rkyv::rancor::Error,
    },
    /// The header fields of one snapshot exceed the 4096-byte header block.
    #[error("operator `{operator}`: snapshot header needs {needed} bytes, the limit is {limit}")]
    HeaderTooLarge {
        operator: String,
        needed: usize,
        limit: usize,
    },
    /// An operator name that cannot be part of a file name.
    #[error("operator name `{name}` cannot name a snapshot file: {reason}")]
    InvalidName { name: String, reason: &'static str },
    /// Two snapshots of one checkpoint share an operator instance.
    #[error("checkpoint {id}: two snapshots for operator `{operator}` instance {instance}")]
    Duplicate {
        id: u64,
        operator: String,
        instance: u32,
    },
    /// A published manifest whose file name says one id and whose content
    /// another: a copy or a rename, not what the store published there.
    #[error("{path}: named for id {named}, holds {kind} {holds} (a copy or a rename, not what was published there)", path = path.display())]
    Misnamed {
        path: PathBuf,
        named: u64,
        holds: u64,
        kind: &'static str,
    },
    /// A checkpoint or savepoint with this id is already published.
    #[error("{path}: id {id} is already published", path = path.display())]
    AlreadyPublished { id: u64, path: PathBuf },
    /// The process "crashed" while writing checkpoint `id` — before
    /// publishing it, or right after (an injected fault, see
    /// [`super::probe::StorageProbe`]): what is on disk stays as
    /// a crash leaves it, and the attempt fails as a crash would end it.
    #[error("checkpoint {id}: crashed {}", if *published { "right after publishing it" } else { "between writing it and publishing it" })]
    Crashed { id: u64, published: bool },
    /// The snapshot I/O thread has stopped (it panicked); nothing more can
    /// be written through this store.
    #[error("the snapshot I/O thread has stopped")]
    WriterGone,
    /// A backed-up chain's state, handed to its standby, does not parse.
    #[error("{0}")]
    ChainFrame(String),
}

impl CheckpointError {
    /// The error of `op` on `path` failing with an I/O error (a symlink
    /// loop called one: [`loop_named`](crate::sys::file::loop_named)).
    pub(crate) fn io(
        path: impl Into<PathBuf>,
        op: &'static str,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| CheckpointError::Io {
            path,
            op,
            source: crate::sys::file::loop_named(source),
        }
    }
}
