//! The key index a checkpoint file carries after a whole keyed archive, so
//! that a restore can find a key's entry without reading the archive: a
//! restore in O(what is touched) ([`super::lazy`]).
//!
//! The archive is a vector of `(key, state)` entries in insertion order
//! (see the [module docs](super)); the index maps a key's hash to the
//! places of the entries in its bucket. It is built from the finished
//! archive by the snapshot store's I/O thread
//! ([`SnapshotBytes::set_indexer`](crate::checkpoint::SnapshotBytes::set_indexer)),
//! off the data path, and written after the payload; the file's block
//! checksums cover it as they cover the payload.
//!
//! ```text
//! offset   size     field (little-endian)
//!      0      8     magic "TNDMKIDX"
//!      8      4     hash: 1 = StableHasher below
//!     12      4     zero
//!     16      8     n: entries
//!     24      8     B: buckets (a power of two, about n / 4)
//!     32      8     payload offset of the entry array
//!     40      8     bytes per entry
//!     48  4(B+1)    bucket b's places are pos[dir[b]..dir[b+1]]
//!      …     4n     pos: the entries' places, by bucket, ascending within one
//! ```
//!
//! A key's bucket is `(h >> 32) * B >> 32` for its 64-bit hash `h`. Four
//! entries a bucket on average: a lookup reads the directory, one short
//! run of places, and about three entries (each a page of the archive at
//! most) — a few page faults where a cold restore has the file on disk.
//! About 4.1 bytes a key; at 24 bytes an entry (`u64` keys, `(u64, u64)`
//! states) the file grows by a sixth.
//!
//! The hash is this module's own ([`StableHasher`], fed by the key's
//! `Hash`), not the map's: the index must mean the same to the process
//! that restores it as to the one that wrote it. A build whose keys hash
//! differently (a changed `Hash` impl) finds no entry where one is, and
//! the restore notices: it reads every entry in order in the background,
//! and a key found there that the index did not find is an error naming
//! the file, never a silently fresh state.

use rkyv::{
    api::high::{HighDeserializer, HighValidator},
    bytecheck::CheckBytes,
    collections::util::Entry,
    rancor, Archive, Archived, Deserialize,
};
use std::hash::{Hash, Hasher};

use crate::checkpoint::{self, CheckpointError};

/// First bytes of an index.
pub(crate) const MAGIC: [u8; 8] = *b"TNDMKIDX";
/// The hash function an index of this build uses.
pub(crate) const HASH_STABLE: u32 = 1;
/// Bytes before the directory.
pub(crate) const HEADER: usize = 48;

/// A hasher whose output is fixed by this code (a multiply–rotate per
/// word, as FxHash, then a final avalanche), whatever the crates and the
/// Rust version: indexes written by one build are read by the next.
#[derive(Default)]
pub(crate) struct StableHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl StableHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for StableHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // murmur3's fmix64: every output bit depends on every input bit.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// The stable hash of `key`.
#[inline]
pub(crate) fn hash_of<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = StableHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// The bucket of hash `h` among `buckets`.
#[inline]
pub(crate) fn bucket(h: u64, buckets: u64) -> u64 {
    ((h >> 32) * buckets) >> 32
}

/// Buckets for `n` entries: about four entries each, a power of two.
fn buckets_for(n: usize) -> u64 {
    ((n / 4).max(1) as u64).next_power_of_two().min(1 << 31)
}

/// The decoded header of an index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) n: u64,
    pub(crate) buckets: u64,
    pub(crate) array_at: u64,
    pub(crate) entry: u64,
}

impl Geometry {
    /// Bytes of an index of this geometry.
    pub(crate) fn len(&self) -> Option<u64> {
        let dir = self.buckets.checked_add(1)?.checked_mul(4)?;
        (HEADER as u64)
            .checked_add(dir)?
            .checked_add(self.n.checked_mul(4)?)
    }

    /// Where the places begin.
    pub(crate) fn pos_at(&self) -> u64 {
        HEADER as u64 + 4 * (self.buckets + 1)
    }

    /// Decodes and checks a header (of the file at `path`, named in
    /// errors).
    pub(crate) fn decode(
        bytes: &[u8],
        index_len: u64,
        path: &std::path::Path,
    ) -> Result<Self, CheckpointError> {
        let bad = |why: String| CheckpointError::Lazy {
            path: path.to_path_buf(),
            reason: format!("key index: {why}"),
        };
        if bytes.len() < HEADER || bytes[..8] != MAGIC {
            return Err(bad("no index header".into()));
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
        if u32_at(8) != HASH_STABLE {
            return Err(bad(format!(
                "hash function {} (this build knows {HASH_STABLE})",
                u32_at(8)
            )));
        }
        let g = Geometry {
            n: u64_at(16),
            buckets: u64_at(24),
            array_at: u64_at(32),
            entry: u64_at(40),
        };
        if !g.buckets.is_power_of_two() || g.buckets > 1 << 31 || g.n > u32::MAX as u64 {
            return Err(bad(format!("{} entries in {} buckets", g.n, g.buckets)));
        }
        if g.len() != Some(index_len) {
            return Err(bad(format!(
                "{index_len} bytes for {} entries in {} buckets",
                g.n, g.buckets
            )));
        }
        Ok(g)
    }
}

/// The entries of an archived keyed state (a bound generic code can
/// state where it cannot name the archived type).
pub trait Entries<K: Archive, S: Archive> {
    /// The entries, in insertion order.
    fn entries(&self) -> &[Entry<Archived<K>, Archived<S>>];
}

impl<K: Archive, S: Archive> Entries<K, S> for super::ArchivedKeyedState<K, S> {
    fn entries(&self) -> &[Entry<Archived<K>, Archived<S>>] {
        self.map.as_slice()
    }
}

/// Builds the index of a keyed archive (`payload`): an
/// [`Indexer`](crate::checkpoint::format::Indexer) for `KeyedState<K, S>`.
/// Of a whole archive, its entries; of a delta ([`super::delta`]), the
/// entries it writes, in its order (the array's offset is always given
/// from the start of `payload`).
pub(crate) fn build<K, S>(payload: &[u8]) -> Result<Vec<u8>, CheckpointError>
where
    K: Archive + Hash,
    S: Archive,
    Archived<K>: Deserialize<K, HighDeserializer<rancor::Error>>,
    super::KeyedState<K, S>: Archive,
    Archived<super::KeyedState<K, S>>:
        rkyv::Portable + for<'a> CheckBytes<HighValidator<'a, rancor::Error>> + Entries<K, S>,
{
    let at = if super::delta::is_delta(payload) {
        let p = super::delta::parse(payload)?;
        p.entries.as_ptr() as usize - payload.as_ptr() as usize
    } else {
        0
    };
    let archived = checkpoint::access::<super::KeyedState<K, S>>(&payload[at..])?;
    let entries = archived.entries();
    let n = entries.len();
    let entry = std::mem::size_of::<Entry<Archived<K>, Archived<S>>>() as u64;
    let array_at = (entries.as_ptr() as usize).wrapping_sub(payload.as_ptr() as usize) as u64;
    let buckets = buckets_for(n);
    let mut of = Vec::with_capacity(n);
    for e in entries {
        let key: K = rkyv::deserialize::<K, rancor::Error>(&e.key)
            .map_err(|source| CheckpointError::Deserialize { source })?;
        of.push(bucket(hash_of(&key), buckets) as u32);
    }
    let g = Geometry {
        n: n as u64,
        buckets,
        array_at,
        entry,
    };
    let mut out = Vec::with_capacity(g.len().unwrap_or(0) as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&HASH_STABLE.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for v in [g.n, g.buckets, g.array_at, g.entry] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    // Counting sort by bucket: the directory, then the places.
    let mut dir = vec![0u32; buckets as usize + 1];
    for &b in &of {
        dir[b as usize + 1] += 1;
    }
    for b in 0..buckets as usize {
        dir[b + 1] += dir[b];
    }
    let mut next = dir.clone();
    let mut pos = vec![0u32; n];
    for (p, &b) in of.iter().enumerate() {
        let at = &mut next[b as usize];
        pos[*at as usize] = p as u32;
        *at += 1;
    }
    for d in dir {
        out.extend_from_slice(&d.to_le_bytes());
    }
    for p in pos {
        out.extend_from_slice(&p.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::KeyedState;

    #[test]
    fn the_stable_hash_is_what_it_was() {
        // Pinned: an index written by this build must mean the same to
        // every later one.
        assert_eq!(hash_of(&0u64), 0);
        assert_eq!(hash_of(&1u64), 0x37e8_d294_6949_7cd2);
        assert_eq!(hash_of("key"), hash_of(&String::from("key")));
        assert_ne!(hash_of("key"), hash_of("kez"));
    }

    #[test]
    fn every_key_is_in_its_bucket_once() {
        let mut s: KeyedState<u64, u64> = KeyedState::default();
        for k in 0..10_000u64 {
            *s.get_or_default(&(k * 31)) = k;
        }
        let bytes = s.to_snapshot_bytes().unwrap();
        let index = build::<u64, u64>(bytes.payload()).unwrap();
        let g = Geometry::decode(&index, index.len() as u64, std::path::Path::new("test")).unwrap();
        assert_eq!(g.n, 10_000);
        assert_eq!(g.buckets, 4096);
        let u32_at = |o: usize| u32::from_le_bytes(index[o..o + 4].try_into().unwrap());
        let pos_at = g.pos_at() as usize;
        let mut seen = vec![false; 10_000];
        for k in 0..10_000u64 {
            let b = bucket(hash_of(&(k * 31)), g.buckets) as usize;
            let (from, to) = (u32_at(HEADER + 4 * b), u32_at(HEADER + 4 * b + 4));
            let places: Vec<u32> = (from..to)
                .map(|i| u32_at(pos_at + 4 * i as usize))
                .collect();
            // Insertion order: key k * 31 is entry k.
            assert!(places.contains(&(k as u32)), "key {k} not in its bucket");
            seen[k as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
