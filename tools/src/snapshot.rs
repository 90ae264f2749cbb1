//! `tandem snapshot ls|inspect|verify`: a checkpoint store, a savepoint, a
//! manifest or one snapshot file, as the engine wrote them.
//!
//! What the user names must be readable, else it is an error (status 2);
//! what is found inside it — an unparsable manifest, a file that is
//! missing, short, or fails its header or payload checksum — is damage:
//! printed where it is found as `CORRUPT`, and `inspect` and `verify` then
//! exit with status 1.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use tandem::checkpoint::{self, CheckpointError, Manifest, SnapshotFile, SnapshotHeader};

use crate::out::outln;
use crate::time::rfc3339_ms;
use crate::Verdict;

type Manifests = Vec<(PathBuf, Result<Manifest, CheckpointError>)>;

/// The manifests in `dir`: a savepoint directory's own, or a store's.
fn manifests(dir: &Path) -> anyhow::Result<Manifests> {
    let own = dir.join("manifest.json");
    if own.is_file() {
        return Ok(vec![(own.clone(), Manifest::load(&own))]);
    }
    Ok(checkpoint::list(dir)?
        .into_iter()
        .map(|l| {
            let m = Manifest::load(&l.manifest_path);
            (l.manifest_path, m)
        })
        .collect())
}

/// `snapshot ls`: the manifests and the unpublished leftovers. A listing,
/// not a check: it passes whatever it finds.
pub fn ls(dir: &Path, out: &mut dyn Write) -> anyhow::Result<Verdict> {
    for (path, m) in manifests(dir)? {
        match m {
            Ok(m) => {
                print_manifest(&m, false, out)?;
            }
            Err(e) => outln!(out, "{}: unreadable manifest: {e}", path.display())?,
        }
    }
    // Unpublished leftovers: directories without a manifest, `.tmp` files.
    let published: Vec<_> = checkpoint::list(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|l| l.id)
        .collect();
    if let Ok(rd) = std::fs::read_dir(dir) {
        let mut left: Vec<String> = rd
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| {
                n.ends_with(".tmp")
                    || n.strip_prefix("chk-")
                        .and_then(|i| i.parse::<u64>().ok())
                        .is_some_and(|id| !published.contains(&id))
            })
            .collect();
        left.sort();
        for n in left {
            outln!(out, "unpublished: {n}")?;
        }
    }
    Ok(Verdict::Pass)
}

/// Prints a manifest and its files, each verified when `detail`; returns
/// how many of them are corrupt.
fn print_manifest(m: &Manifest, detail: bool, out: &mut dyn Write) -> std::io::Result<usize> {
    outln!(
        out,
        "{:?} {}  created {}  {} file(s)  {} payload bytes  (format {})",
        m.kind,
        m.id,
        rfc3339_ms(m.created_at_ms),
        m.files.len(),
        m.payload_bytes(),
        m.format_version
    )?;
    let mut bad = 0;
    for f in &m.files {
        outln!(
            out,
            "  {}#{}  {}  {} bytes (payload {})  xxh3 {:#018x}  positions {}",
            f.operator,
            f.instance,
            f.path,
            f.file_len,
            f.payload_len,
            f.payload_checksum,
            fmt_positions(&f.positions)
        )?;
        if detail {
            match m.open(f) {
                Ok(_) => outln!(out, "    verified")?,
                Err(e) => {
                    bad += 1;
                    outln!(out, "    CORRUPT: {e}")?
                }
            }
        }
    }
    Ok(bad)
}

fn fmt_positions(p: &[checkpoint::Position]) -> String {
    let v: Vec<String> = p
        .iter()
        .map(|p| format!("{}:{}", p.partition, p.next_seq))
        .collect();
    format!("[{}]", v.join(", "))
}

/// `snapshot inspect`: a store or savepoint directory, a manifest or a
/// snapshot file, with everything in it verified.
pub fn inspect(path: &Path, out: &mut dyn Write) -> anyhow::Result<Verdict> {
    let meta = std::fs::metadata(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let bad = if meta.is_dir() {
        inspect_dir(path, out)?
    } else if path.extension().is_some_and(|e| e == "json") {
        match Manifest::load(path) {
            Ok(m) => print_manifest(&m, true, out)?,
            Err(e @ CheckpointError::Manifest { .. }) => {
                outln!(out, "CORRUPT: {e}")?;
                1
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        inspect_file(path, out)?
    };
    if bad > 0 {
        // On standard error, as `verify` says it.
        let _ = writeln!(std::io::stderr(), "{bad} problem(s) found");
    }
    Ok(Verdict::of_problems(bad))
}

/// The manifests under `dir`; says so when there are none.
fn published(dir: &Path, out: &mut dyn Write) -> anyhow::Result<Manifests> {
    let all = manifests(dir)?;
    if all.is_empty() {
        outln!(
            out,
            "{}: no published checkpoint or savepoint",
            dir.display()
        )?;
    }
    Ok(all)
}

fn inspect_dir(dir: &Path, out: &mut dyn Write) -> anyhow::Result<usize> {
    let all = published(dir, out)?;
    let mut bad = 0;
    for (p, m) in all {
        match m {
            Ok(m) => bad += print_manifest(&m, true, out)?,
            Err(e) => {
                bad += 1;
                outln!(out, "{}: CORRUPT: unreadable manifest: {e}", p.display())?
            }
        }
    }
    Ok(bad)
}

/// One snapshot file: its header, then the whole file verified. Returns 1
/// when it is corrupt, 0 when it verifies.
fn inspect_file(path: &Path, out: &mut dyn Write) -> anyhow::Result<usize> {
    let mut block = Vec::with_capacity(checkpoint::format::HEADER_BLOCK);
    std::fs::File::open(path)
        .and_then(|f| {
            f.take(checkpoint::format::HEADER_BLOCK as u64)
                .read_to_end(&mut block)
        })
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    outln!(out, "file           : {}", path.display())?;
    let h = match SnapshotHeader::decode(&block, path) {
        Ok(h) => h,
        Err(e) => {
            outln!(out, "verify         : CORRUPT: {e}")?;
            return Ok(1);
        }
    };
    outln!(
        out,
        "format version : {}",
        checkpoint::format::FORMAT_VERSION
    )?;
    outln!(out, "checkpoint id  : {}", h.checkpoint_id)?;
    outln!(out, "operator       : {}#{}", h.operator, h.instance)?;
    outln!(out, "positions      : {}", fmt_positions(&h.positions))?;
    outln!(out, "created        : {}", rfc3339_ms(h.created_at_ms))?;
    outln!(
        out,
        "payload        : {} bytes, xxh3 {:#018x}",
        h.payload_len,
        h.payload_checksum
    )?;
    outln!(out, "file length    : {} bytes expected", h.file_len())?;
    match SnapshotFile::open(path) {
        Ok(_) => {
            outln!(out, "verify         : ok")?;
            Ok(0)
        }
        Err(e) => {
            outln!(out, "verify         : CORRUPT: {e}")?;
            Ok(1)
        }
    }
}

/// `snapshot verify`: every file of every checkpoint and savepoint.
pub fn verify(dir: &Path, out: &mut dyn Write) -> anyhow::Result<Verdict> {
    let mut bad = 0;
    let all = published(dir, out)?;
    for (path, m) in all {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                outln!(out, "CORRUPT {}: {e}", path.display())?;
                bad += 1;
                continue;
            }
        };
        for f in &m.files {
            match m.open(f) {
                Ok(_) => outln!(out, "ok      {:?} {} {}", m.kind, m.id, f.path)?,
                Err(e) => {
                    outln!(out, "CORRUPT {:?} {} {}: {e}", m.kind, m.id, f.path)?;
                    bad += 1;
                }
            }
        }
    }
    if bad > 0 {
        // On standard error, as before: the listing stays one line a file.
        let _ = writeln!(std::io::stderr(), "{bad} problem(s) found");
    }
    Ok(Verdict::of_problems(bad))
}
