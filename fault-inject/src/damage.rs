//! Damaging files as a disk or a stray writer would: a snapshot of a
//! published checkpoint, an entry of a buffer queue.
//!
//! Written from the documented file layouts (`tandem::checkpoint::format`,
//! `tandem::standby::bq`), not through the engine's readers: the damage
//! must be found by the engine's own checks, not arranged with them.

use crate::spec::Damage;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use tandem::checkpoint::Manifest;

/// The snapshot file header block (payload starts after it).
const SNAPSHOT_HEADER: u64 = tandem::checkpoint::format::HEADER_BLOCK as u64;

/// Damages the largest snapshot file of `manifest` (the manifest itself
/// when it lists none); says what it did.
pub fn snapshot(manifest: &Manifest, damage: Damage) -> io::Result<String> {
    let Some(entry) = manifest.files.iter().max_by_key(|f| f.payload_len) else {
        let path = manifest.dir.join(format!("manifest-{}.json", manifest.id));
        let len = std::fs::metadata(&path)?.len();
        OpenOptions::new()
            .write(true)
            .open(&path)?
            .set_len(len / 2)?;
        return Ok(format!("truncated {} (no snapshot files)", path.display()));
    };
    let path = manifest.file_path(entry);
    let f = OpenOptions::new().read(true).write(true).open(&path)?;
    match damage {
        Damage::Flip => {
            // A payload byte if there is one, else a header byte.
            let at = if entry.payload_len > 0 {
                SNAPSHOT_HEADER + entry.payload_len / 2
            } else {
                16
            };
            flip(&f, at)?;
            Ok(format!("flipped a bit of byte {at} of {}", path.display()))
        }
        Damage::Truncate => {
            let len = f.metadata()?.len();
            f.set_len(len / 2)?;
            f.sync_all()?;
            Ok(format!(
                "truncated {} from {len} to {} bytes",
                path.display(),
                len / 2
            ))
        }
    }
}

fn flip(f: &std::fs::File, at: u64) -> io::Result<()> {
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at)?;
    b[0] ^= 0x40;
    f.write_all_at(&b, at)?;
    f.sync_all()
}

fn u64_at(f: &std::fs::File, at: u64) -> io::Result<u64> {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, at)?;
    Ok(u64::from_le_bytes(b))
}

// The buffer queue's layout (see `tandem::standby::bq`).
const BQ_MAGIC: &[u8; 8] = b"TNDMBQ\0\x01";
const BQ_HEADER: u64 = 4096;
const BQ_SLOT: u64 = 32;

/// Damages the entry holding tuple ID `tuple` in the buffer queue at
/// `path`: a bit of its bytes flipped, or its length halved. `Ok(None)`
/// when the queue holds no such entry.
pub fn queue_entry(path: &Path, tuple: u64, damage: Damage) -> io::Result<Option<String>> {
    let f = OpenOptions::new().read(true).write(true).open(path)?;
    let mut magic = [0u8; 8];
    f.read_exact_at(&mut magic, 0)?;
    if &magic != BQ_MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a buffer queue", path.display()),
        ));
    }
    let slots = u64_at(&f, 16)?;
    let arena = u64_at(&f, 24)?;
    let tail = u64_at(&f, 64)?;
    let head = u64_at(&f, 128)?;
    let arena_start = BQ_HEADER + (slots * BQ_SLOT).next_multiple_of(4096);
    // The newest entries first: the record was written moments ago.
    for p in (head..tail).rev() {
        let at = BQ_HEADER + (p % slots) * BQ_SLOT;
        if u64_at(&f, at)? != p || u64_at(&f, at + 8)? != tuple {
            continue;
        }
        let off = u64_at(&f, at + 16)?;
        let mut lb = [0u8; 4];
        f.read_exact_at(&mut lb, at + 24)?;
        let len = u32::from_le_bytes(lb) as u64;
        return match damage {
            Damage::Flip if len > 0 => {
                let byte = arena_start + (off % arena) + len / 2;
                flip(&f, byte)?;
                Ok(Some(format!(
                    "flipped a bit of entry {p} (tuple {tuple:#x}) in {}",
                    path.display()
                )))
            }
            Damage::Flip | Damage::Truncate => {
                f.write_all_at(&((len / 2) as u32).to_le_bytes(), at + 24)?;
                Ok(Some(format!(
                    "cut entry {p} (tuple {tuple:#x}) in {} from {len} to {} bytes",
                    path.display(),
                    len / 2
                )))
            }
        };
    }
    Ok(None)
}
