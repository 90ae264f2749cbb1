//! The snapshot file format: a 4096-byte header block, then the rkyv
//! payload padded to 4096 bytes. The byte layout is in the
//! [module docs](super#snapshot-file-layout).
//!
//! The header is hand-encoded little-endian (not rkyv) so that a reader of
//! any later version can still tell what a file is, which version wrote it
//! and whether its bytes are intact before it interprets the payload.

use std::path::Path;

use rkyv::{
    api::high::HighSerializer,
    rancor,
    ser::{allocator::ArenaHandle, Positional, Writer},
};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::CheckpointError;
use crate::sys::uring::{AlignedBuf, BLOCK};

/// First eight bytes of every snapshot file.
pub const MAGIC: [u8; 8] = *b"TNDMSNAP";
/// The format version this build writes. It reads version 1 too (a
/// payload checksummed whole, no key index, restored only eagerly).
pub const FORMAT_VERSION: u32 = 2;
/// Size of the header block; the payload starts at this offset.
pub const HEADER_BLOCK: usize = BLOCK;
/// Bytes of the fixed header fields before the operator name (version 2;
/// version 1 has [`FIXED_HEADER_V1`]).
pub const FIXED_HEADER: usize = 80;
/// Bytes of the fixed header fields of a version 1 file.
pub const FIXED_HEADER_V1: usize = 64;
/// log2 of the bytes of one checksummed block of a version 2 file's body
/// (64 KiB): a lazy restore verifies a block when it first reads from it.
pub const CHECK_BLOCK_LOG2: u32 = 16;
/// Bytes of one checksummed block of the body.
pub const CHECK_BLOCK: usize = 1 << CHECK_BLOCK_LOG2;
/// Bytes of one encoded [`Position`].
pub const POSITION_BYTES: usize = 12;

/// The payload checksum: XXH3-64 (see the module docs for the choice).
#[inline]
pub fn checksum(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

/// Where one source partition stands in a snapshot: every tuple of
/// `partition` with a sequence number below `next_seq` is reflected in the
/// state, none at or above it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Position {
    /// Source partition.
    pub partition: u32,
    /// First sequence number *not* covered.
    pub next_seq: u64,
}

/// The decoded header of one snapshot file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// Checkpoint (or savepoint) id the file belongs to.
    pub checkpoint_id: u64,
    /// Operator name.
    pub operator: String,
    /// Operator instance.
    pub instance: u32,
    /// Tuple positions the snapshot covers.
    pub positions: Vec<Position>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Payload bytes (without padding).
    pub payload_len: u64,
    /// Version 2: XXH3-64 of the block table (which holds the XXH3-64 of
    /// every [`CHECK_BLOCK`] of the body); version 1: of the payload.
    pub payload_checksum: u64,
    /// Bytes of the key index after the padded payload (0: none; see
    /// `state::index`). Always 0 in version 1.
    pub index_len: u64,
    /// The format version the file was written in.
    pub version: u32,
}

/// Where the parts of a version 2 file lie (offsets in the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The payload: `[HEADER_BLOCK, HEADER_BLOCK + payload_len)`.
    pub payload_len: u64,
    /// Start of the key index (after the padded payload).
    pub index_at: u64,
    /// Bytes of the key index.
    pub index_len: u64,
    /// Bytes of the body the block table covers, from `HEADER_BLOCK`: the
    /// padded payload and the padded index.
    pub body_len: u64,
    /// Start of the block table (after the body).
    pub table_at: u64,
    /// Blocks of the body (entries of the table).
    pub blocks: u64,
    /// The file's length.
    pub file_len: u64,
}

impl Layout {
    /// The layout of a version 2 file with these lengths; `None` when it
    /// overflows a `u64` (a forged header).
    pub fn of(payload_len: u64, index_len: u64) -> Option<Layout> {
        let b = BLOCK as u64;
        let index_at = payload_len
            .checked_next_multiple_of(b)?
            .checked_add(HEADER_BLOCK as u64)?;
        let table_at = index_at.checked_add(index_len.checked_next_multiple_of(b)?)?;
        let body_len = table_at - HEADER_BLOCK as u64;
        let blocks = body_len.div_ceil(CHECK_BLOCK as u64);
        let file_len = table_at.checked_add(blocks.checked_mul(8)?.checked_next_multiple_of(b)?)?;
        Some(Layout {
            payload_len,
            index_at,
            index_len,
            body_len,
            table_at,
            blocks,
            file_len,
        })
    }

    /// The checksummed block that holds body offset `at`.
    pub fn block_of(at: u64) -> u64 {
        at >> CHECK_BLOCK_LOG2
    }
}

/// Hashes a stream of body bytes block by block ([`CHECK_BLOCK`]),
/// whatever the pieces it is fed: the block table of a version 2 file.
pub struct BlockHasher {
    cur: Xxh3,
    filled: usize,
    table: Vec<u64>,
}

impl BlockHasher {
    /// A hasher for a body of about `len` bytes.
    pub fn new(len: usize) -> Self {
        BlockHasher {
            cur: Xxh3::new(),
            filled: 0,
            table: Vec::with_capacity(len.div_ceil(CHECK_BLOCK)),
        }
    }

    /// Feeds the next body bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = (CHECK_BLOCK - self.filled).min(bytes.len());
            self.cur.update(&bytes[..n]);
            self.filled += n;
            bytes = &bytes[n..];
            if self.filled == CHECK_BLOCK {
                self.table.push(self.cur.digest());
                self.cur.reset();
                self.filled = 0;
            }
        }
    }

    /// The table (the last block may be short).
    pub fn finish(mut self) -> Vec<u64> {
        if self.filled > 0 {
            self.table.push(self.cur.digest());
        }
        self.table
    }
}

/// A whole version 2 file: `header` (its lengths and checksum set here),
/// `payload`, `index`, the block table. For tests and tools; the store
/// writes its files in pieces.
pub fn file_image(mut header: SnapshotHeader, payload: &[u8], index: &[u8]) -> Vec<u8> {
    header.version = FORMAT_VERSION;
    header.payload_len = payload.len() as u64;
    header.index_len = index.len() as u64;
    let l = Layout::of(header.payload_len, header.index_len).expect("a file's lengths");
    let mut image = vec![0; l.file_len as usize];
    image[HEADER_BLOCK..HEADER_BLOCK + payload.len()].copy_from_slice(payload);
    let at = l.index_at as usize;
    image[at..at + index.len()].copy_from_slice(index);
    let mut hasher = BlockHasher::new(l.body_len as usize);
    hasher.update(&image[HEADER_BLOCK..l.table_at as usize]);
    let (table, sum) = table_bytes(&hasher.finish());
    let at = l.table_at as usize;
    image[at..at + table.len()].copy_from_slice(&table);
    header.payload_checksum = sum;
    header
        .encode(&mut image[..HEADER_BLOCK])
        .expect("a header that fits");
    image
}

/// The little-endian bytes of a block table, and their XXH3-64 (a version
/// 2 header's `payload_checksum`).
pub fn table_bytes(table: &[u64]) -> (Vec<u8>, u64) {
    let bytes: Vec<u8> = table.iter().flat_map(|h| h.to_le_bytes()).collect();
    let sum = checksum(&bytes);
    (bytes, sum)
}

impl SnapshotHeader {
    /// Encoded length of the checksummed part of the header.
    pub fn encoded_len(&self) -> usize {
        let fixed = if self.version == 1 {
            FIXED_HEADER_V1
        } else {
            FIXED_HEADER
        };
        fixed + self.operator.len() + POSITION_BYTES * self.positions.len()
    }

    /// Where the parts of the file lie (version 2; `None` for version 1,
    /// or for lengths no file can hold).
    pub fn layout(&self) -> Option<Layout> {
        (self.version >= 2)
            .then(|| Layout::of(self.payload_len, self.index_len))
            .flatten()
    }

    /// Length of the whole file this header describes (`u64::MAX`, which
    /// no file has, for a payload length no file can hold; [`decode`]
    /// refuses such a header).
    ///
    /// [`decode`]: Self::decode
    pub fn file_len(&self) -> u64 {
        if self.version == 1 {
            return file_len_for(self.payload_len).unwrap_or(u64::MAX);
        }
        self.layout().map_or(u64::MAX, |l| l.file_len)
    }

    /// Writes the header into `block` (the whole block: unused bytes are
    /// zeroed), in its version's encoding.
    pub fn encode(&self, block: &mut [u8]) -> Result<(), CheckpointError> {
        assert_eq!(block.len(), HEADER_BLOCK);
        assert!(
            matches!(self.version, 1 | FORMAT_VERSION),
            "a header of version {} is never written",
            self.version
        );
        let len = self.encoded_len();
        if len > HEADER_BLOCK || self.operator.len() > u16::MAX as usize {
            return Err(CheckpointError::HeaderTooLarge {
                operator: self.operator.clone(),
                needed: len,
                limit: HEADER_BLOCK,
            });
        }
        block.fill(0);
        block[0..8].copy_from_slice(&MAGIC);
        block[8..12].copy_from_slice(&self.version.to_le_bytes());
        block[12..16].copy_from_slice(&(len as u32).to_le_bytes());
        // 16..24: header checksum, filled last.
        block[24..32].copy_from_slice(&self.payload_len.to_le_bytes());
        block[32..40].copy_from_slice(&self.payload_checksum.to_le_bytes());
        block[40..48].copy_from_slice(&self.checkpoint_id.to_le_bytes());
        block[48..56].copy_from_slice(&self.created_at_ms.to_le_bytes());
        block[56..60].copy_from_slice(&self.instance.to_le_bytes());
        block[60..62].copy_from_slice(&(self.operator.len() as u16).to_le_bytes());
        block[62..64].copy_from_slice(&(self.positions.len() as u16).to_le_bytes());
        let mut at = FIXED_HEADER_V1;
        if self.version >= 2 {
            block[64..72].copy_from_slice(&self.index_len.to_le_bytes());
            block[72..76].copy_from_slice(&CHECK_BLOCK_LOG2.to_le_bytes());
            at = FIXED_HEADER;
        }
        block[at..at + self.operator.len()].copy_from_slice(self.operator.as_bytes());
        at += self.operator.len();
        for p in &self.positions {
            block[at..at + 4].copy_from_slice(&p.partition.to_le_bytes());
            block[at + 4..at + 12].copy_from_slice(&p.next_seq.to_le_bytes());
            at += POSITION_BYTES;
        }
        let sum = checksum(&block[..len]);
        block[16..24].copy_from_slice(&sum.to_le_bytes());
        Ok(())
    }

    /// Decodes and checks a header block read from `path` (magic, version,
    /// lengths, header checksum). The payload is not looked at.
    pub fn decode(block: &[u8], path: &Path) -> Result<Self, CheckpointError> {
        let malformed = |field, reason: String| CheckpointError::MalformedHeader {
            path: path.to_path_buf(),
            field,
            reason,
        };
        if block.len() < HEADER_BLOCK {
            return Err(CheckpointError::Length {
                path: path.to_path_buf(),
                expected: HEADER_BLOCK as u64,
                found: block.len() as u64,
            });
        }
        let u16_at = |o: usize| u16::from_le_bytes(block[o..o + 2].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(block[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(block[o..o + 8].try_into().unwrap());
        let magic: [u8; 8] = block[0..8].try_into().unwrap();
        if magic != MAGIC {
            return Err(CheckpointError::BadMagic {
                path: path.to_path_buf(),
                found: magic,
            });
        }
        let version = u32_at(8);
        if !(1..=FORMAT_VERSION).contains(&version) {
            return Err(CheckpointError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let fixed = if version == 1 {
            FIXED_HEADER_V1
        } else {
            FIXED_HEADER
        };
        let len = u32_at(12) as usize;
        if !(fixed..=HEADER_BLOCK).contains(&len) {
            return Err(malformed(
                "header length",
                format!("{len} is outside {fixed}..={HEADER_BLOCK}"),
            ));
        }
        let stored = u64_at(16);
        let mut hasher = Xxh3::new();
        hasher.update(&block[..16]);
        hasher.update(&[0; 8]);
        hasher.update(&block[24..len]);
        let computed = hasher.digest();
        if stored != computed {
            return Err(CheckpointError::HeaderChecksum {
                path: path.to_path_buf(),
                stored,
                computed,
            });
        }
        let name_len = u16_at(60) as usize;
        let n_pos = u16_at(62) as usize;
        let expected = fixed + name_len + POSITION_BYTES * n_pos;
        if expected != len {
            return Err(malformed(
                "header length",
                format!("{len}, but name and positions need {expected}"),
            ));
        }
        let payload_len = u64_at(24);
        if file_len_for(payload_len).is_none() {
            return Err(malformed(
                "payload length",
                format!("{payload_len} bytes do not fit in a file"),
            ));
        }
        let index_len = if version >= 2 {
            let log2 = u32_at(72);
            if log2 != CHECK_BLOCK_LOG2 {
                return Err(malformed(
                    "block size",
                    format!("2^{log2} bytes; this build checks blocks of 2^{CHECK_BLOCK_LOG2}"),
                ));
            }
            let index_len = u64_at(64);
            if Layout::of(payload_len, index_len).is_none() {
                return Err(malformed(
                    "index length",
                    format!(
                        "{index_len} bytes after a payload of {payload_len} do not fit in a file"
                    ),
                ));
            }
            index_len
        } else {
            0
        };
        let operator = std::str::from_utf8(&block[fixed..fixed + name_len])
            .map_err(|e| malformed("operator", e.to_string()))?
            .to_owned();
        let positions = block[fixed + name_len..len]
            .chunks_exact(POSITION_BYTES)
            .map(|c| Position {
                partition: u32::from_le_bytes(c[0..4].try_into().unwrap()),
                next_seq: u64::from_le_bytes(c[4..12].try_into().unwrap()),
            })
            .collect();
        Ok(SnapshotHeader {
            checkpoint_id: u64_at(40),
            operator,
            instance: u32_at(56),
            positions,
            created_at_ms: u64_at(48),
            payload_len,
            payload_checksum: u64_at(32),
            index_len,
            version,
        })
    }
}

/// The length of a snapshot file holding `payload_len` payload bytes: the
/// header block plus the payload padded to a whole block; `None` when that
/// overflows a `u64` (a damaged or forged header, never one this engine
/// wrote).
fn file_len_for(payload_len: u64) -> Option<u64> {
    payload_len
        .checked_next_multiple_of(BLOCK as u64)?
        .checked_add(HEADER_BLOCK as u64)
}

/// A serialized payload in the memory layout of its file: a zeroed header
/// block followed by the payload, starting on a 4096-byte boundary, so the
/// snapshot writer sends it to disk with `O_DIRECT` without copying.
///
/// It is an rkyv [`Writer`]: [`serialize`] archives straight into it.
/// Positions reported to rkyv are payload offsets, so the archive does not
/// depend on the header in front of it.
pub struct SnapshotBytes {
    buf: AlignedBuf,
    /// `Some(c)`: the payload is a delta over this instance's state at
    /// checkpoint `c` ([`crate::state::delta`]); `None`: the whole state.
    delta_over: Option<u64>,
    /// Builds the key index a checkpoint file carries after this payload
    /// (a whole keyed state's: `state::index`), on the snapshot
    /// I/O thread, off the data path.
    indexer: Option<Indexer>,
}

/// Builds a key index from a payload (see [`SnapshotBytes::set_indexer`]).
pub type Indexer = fn(&[u8]) -> Result<Vec<u8>, CheckpointError>;

impl SnapshotBytes {
    /// An empty payload.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty payload with room for `payload` bytes.
    pub fn with_capacity(payload: usize) -> Self {
        let mut buf = AlignedBuf::with_capacity(HEADER_BLOCK + payload);
        buf.resize_zeroed(HEADER_BLOCK);
        SnapshotBytes {
            buf,
            delta_over: None,
            indexer: None,
        }
    }

    /// An empty payload whose bytes live in an unlinked file in `dir`
    /// rather than the heap (see [`AlignedBuf::in_file`]): an archive
    /// larger than the memory the process may use.
    pub fn in_file(dir: &std::path::Path) -> std::io::Result<Self> {
        let mut buf = AlignedBuf::in_file(dir)?;
        buf.resize_zeroed(HEADER_BLOCK);
        Ok(SnapshotBytes {
            buf,
            delta_over: None,
            indexer: None,
        })
    }

    /// Appends `bytes` to the payload.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The payload bytes, to patch what was written.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf[HEADER_BLOCK..]
    }

    /// Empties the payload (keeps the room it had).
    pub(crate) fn clear(&mut self) {
        self.buf.resize_zeroed(HEADER_BLOCK);
        self.delta_over = None;
        self.indexer = None;
    }

    /// Has the snapshot store build a key index with `indexer` and write
    /// it after the payload (a whole keyed state's archive; a lazy restore
    /// looks keys up through it).
    pub fn set_indexer(&mut self, indexer: Indexer) {
        self.indexer = Some(indexer);
    }

    /// The index builder, if the payload has one.
    pub fn indexer(&self) -> Option<Indexer> {
        self.indexer
    }

    /// `Some(c)`: the payload is a delta over the state at checkpoint `c`
    /// (see [`crate::state::delta`]); `None`: a whole state.
    pub fn delta_over(&self) -> Option<u64> {
        self.delta_over
    }

    /// Marks the payload a delta over checkpoint `base` (or whole).
    pub fn set_delta_over(&mut self, base: Option<u64>) {
        self.delta_over = base;
    }

    /// A payload holding a copy of `bytes`.
    pub fn from_payload(bytes: &[u8]) -> Self {
        let mut s = Self::with_capacity(bytes.len());
        s.buf.extend_from_slice(bytes);
        s
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.buf[HEADER_BLOCK..]
    }

    /// Makes room for `additional` more payload bytes at once (a buffer
    /// that grows by doubling copies all it holds at each doubling).
    pub fn reserve(&mut self, additional: usize) {
        self.buf.reserve(additional);
    }

    /// Payload length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len() - HEADER_BLOCK
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file image (header block + payload, not yet padded).
    pub(crate) fn into_image(self) -> AlignedBuf {
        self.buf
    }
}

impl Default for SnapshotBytes {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SnapshotBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotBytes")
            .field("len", &self.len())
            .finish()
    }
}

impl Positional for SnapshotBytes {
    #[inline]
    fn pos(&self) -> usize {
        self.len()
    }
}

impl<E> Writer<E> for SnapshotBytes {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), E> {
        self.buf.extend_from_slice(bytes);
        Ok(())
    }
}

/// An archive made a slice at a time (a keyed state's, from its freeze:
/// [`crate::state`]), so that whoever drives it
/// decides how long each slice may hold its core.
pub trait ArchiveSteps {
    /// Archives about `entries` more entries (at least one); the archive
    /// once complete — `Some` exactly once, `None` before and after.
    fn step(&mut self, entries: usize) -> Result<Option<SnapshotBytes>, CheckpointError>;
}

/// An operator's state as it hands it over at a barrier or a recovery
/// point: archived already, or frozen and archived in steps by whoever
/// takes it — a standby primary between its records, the snapshot I/O
/// thread for a checkpoint — so that the operator's core does not stop for
/// the milliseconds a large state takes.
pub enum StateCapture {
    /// Archived on the operator's core.
    Bytes(SnapshotBytes),
    /// To be archived in steps, on any thread.
    Steps(Box<dyn ArchiveSteps>),
}

impl StateCapture {
    /// The archive (running every remaining step now, on this thread).
    pub fn archive(self) -> Result<SnapshotBytes, CheckpointError> {
        match self {
            StateCapture::Bytes(b) => Ok(b),
            StateCapture::Steps(mut s) => loop {
                if let Some(b) = s.step(usize::MAX)? {
                    return Ok(b);
                }
            },
        }
    }
}

impl From<SnapshotBytes> for StateCapture {
    fn from(b: SnapshotBytes) -> Self {
        StateCapture::Bytes(b)
    }
}

impl std::fmt::Debug for StateCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateCapture::Bytes(b) => write!(f, "StateCapture::Bytes({} bytes)", b.payload().len()),
            StateCapture::Steps(_) => f.write_str("StateCapture::Steps"),
        }
    }
}

/// The rkyv serializer snapshot payloads are written with.
pub type SnapshotSerializer<'a> = HighSerializer<SnapshotBytes, ArenaHandle<'a>, rancor::Error>;

/// Archives `value` into a fresh [`SnapshotBytes`] with room for
/// `size_hint` payload bytes.
pub fn serialize<T>(value: &T, size_hint: usize) -> Result<SnapshotBytes, CheckpointError>
where
    T: for<'a> rkyv::Serialize<SnapshotSerializer<'a>>,
{
    rkyv::api::high::to_bytes_in(value, SnapshotBytes::with_capacity(size_hint))
        .map_err(|source| CheckpointError::Serialize { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SnapshotHeader {
        SnapshotHeader {
            checkpoint_id: 7,
            operator: "count-by-len".into(),
            instance: 3,
            positions: vec![
                Position {
                    partition: 0,
                    next_seq: 10,
                },
                Position {
                    partition: 1,
                    next_seq: u64::MAX,
                },
            ],
            created_at_ms: 1_700_000_000_000,
            payload_len: 12345,
            payload_checksum: 0xdead_beef_0123_4567,
            index_len: 0,
            version: FORMAT_VERSION,
        }
    }

    #[test]
    fn header_round_trips_through_its_encoding() {
        let h = header();
        let mut block = vec![0; HEADER_BLOCK];
        h.encode(&mut block).unwrap();
        assert_eq!(&block[..8], b"TNDMSNAP");
        assert_eq!(SnapshotHeader::decode(&block, Path::new("x")).unwrap(), h);
        // Header, 4 blocks of payload, one of block table.
        assert_eq!(h.file_len(), (HEADER_BLOCK + 5 * BLOCK) as u64);
        let v1 = SnapshotHeader { version: 1, ..h };
        v1.encode(&mut block).unwrap();
        assert_eq!(SnapshotHeader::decode(&block, Path::new("x")).unwrap(), v1);
        assert_eq!(v1.file_len(), (HEADER_BLOCK + 4 * BLOCK) as u64);
        let indexed = SnapshotHeader {
            index_len: 70_000,
            ..header()
        };
        indexed.encode(&mut block).unwrap();
        assert_eq!(
            SnapshotHeader::decode(&block, Path::new("x")).unwrap(),
            indexed
        );
        let l = indexed.layout().unwrap();
        assert_eq!(l.index_at, (HEADER_BLOCK + 4 * BLOCK) as u64);
        assert_eq!(l.table_at, l.index_at + 72 * 1024);
        assert_eq!(l.blocks, 2);
        assert_eq!(l.file_len, l.table_at + BLOCK as u64);
    }

    #[test]
    fn block_hashes_do_not_depend_on_how_the_body_is_cut() {
        let body: Vec<u8> = (0..3 * CHECK_BLOCK + 5).map(|i| (i * 7) as u8).collect();
        let mut whole = BlockHasher::new(body.len());
        whole.update(&body);
        let whole = whole.finish();
        assert_eq!(whole.len(), 4);
        assert_eq!(whole[3], checksum(&body[3 * CHECK_BLOCK..]));
        let mut cut = BlockHasher::new(body.len());
        for piece in body.chunks(999) {
            cut.update(piece);
        }
        assert_eq!(cut.finish(), whole);
    }

    #[test]
    fn every_flipped_header_byte_is_detected() {
        let h = header();
        let mut block = vec![0; HEADER_BLOCK];
        h.encode(&mut block).unwrap();
        for i in 0..h.encoded_len() {
            let mut bad = block.clone();
            bad[i] ^= 0x40;
            assert!(
                SnapshotHeader::decode(&bad, Path::new("x")).is_err(),
                "flip at byte {i} went unnoticed"
            );
        }
    }

    /// Found by the `snapshot_reader` fuzz target: a header (with a valid
    /// checksum: XXH3 is no MAC) whose payload length rounds up past
    /// `u64::MAX` made `file_len` overflow, a panic in `SnapshotFile::open`.
    #[test]
    fn a_header_whose_payload_length_overflows_the_file_length_is_refused() {
        // The largest payload length whose file length fits a u64.
        let largest = u64::MAX - HEADER_BLOCK as u64 - BLOCK as u64 + 1;
        let edges = [
            largest + 1,
            largest + BLOCK as u64,
            largest + BLOCK as u64 + 1,
            u64::MAX,
        ];
        for payload_len in edges {
            let h = SnapshotHeader {
                payload_len,
                version: 1,
                ..header()
            };
            assert_eq!(h.file_len(), u64::MAX, "{payload_len}");
            let mut block = vec![0; HEADER_BLOCK];
            h.encode(&mut block).unwrap();
            let err = SnapshotHeader::decode(&block, Path::new("x")).unwrap_err();
            assert!(
                matches!(
                    err,
                    CheckpointError::MalformedHeader {
                        field: "payload length",
                        ..
                    }
                ),
                "{payload_len}: {err}"
            );
            // The same header block as a whole file: an error from `open`.
            let path = std::env::temp_dir().join(format!(
                "tandem-format-overflow-{}-{payload_len}.snap",
                std::process::id()
            ));
            std::fs::write(&path, &block).unwrap();
            let opened = super::super::SnapshotFile::open(&path);
            std::fs::remove_file(&path).unwrap();
            assert!(opened.is_err(), "{payload_len}");
        }
        // The largest length that still fits decodes.
        let h = SnapshotHeader {
            payload_len: largest,
            version: 1,
            ..header()
        };
        assert_eq!(h.file_len(), u64::MAX - BLOCK as u64 + 1);
        let mut block = vec![0; HEADER_BLOCK];
        h.encode(&mut block).unwrap();
        assert_eq!(SnapshotHeader::decode(&block, Path::new("x")).unwrap(), h);
    }

    #[test]
    fn a_header_that_does_not_fit_its_block_is_refused() {
        let mut h = header();
        h.positions = vec![h.positions[0]; 400];
        let mut block = vec![0; HEADER_BLOCK];
        assert!(matches!(
            h.encode(&mut block),
            Err(CheckpointError::HeaderTooLarge { .. })
        ));
    }
}
