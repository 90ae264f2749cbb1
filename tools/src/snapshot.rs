//! `tandem snapshot ls|inspect|verify`: a checkpoint store, a savepoint, a
//! manifest or one snapshot file, as the engine wrote them.
//!
//! What the user names must be readable, else it is an error (status 2);
//! so is a directory that holds no published checkpoint or savepoint — an
//! empty directory, a savepoint directory without its manifest, `/proc` —
//! which would otherwise pass as a sound store with nothing to look at.
//! What is found inside it — an unparsable manifest, a file that is
//! missing, short, or fails its header or payload checksum — is damage:
//! printed where it is found as `CORRUPT`, and the command then exits with
//! status 1 (`ls`, which reads manifests but no snapshot file, for the
//! manifests it could not read).
//!
//! The store may be live: a running job publishes checkpoints and retires
//! old ones meanwhile (their manifest first, then their files). A
//! checkpoint whose manifest is gone by the time one of its files fails to
//! open was retired, not damaged: it is reported as `retired` and is no
//! problem. Files are read through, never mapped
//! ([`Manifest::check`](tandem::checkpoint::Manifest::check)): a file
//! truncated under a map would kill the tool with `SIGBUS`.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use tandem::checkpoint::{
    self, CheckpointError, Manifest, SnapshotFile, SnapshotHeader, SnapshotKind,
};

use crate::out::outln;
use crate::Verdict;
use tandem::sys::utc::rfc3339_ms;

/// One published manifest: where it is, what it is, and what reading it
/// gave.
struct Found {
    path: PathBuf,
    kind: SnapshotKind,
    /// From its name (none for a savepoint directory's own manifest).
    id: Option<u64>,
    manifest: Result<Manifest, CheckpointError>,
}

/// Whether the manifest at `path` has been removed since it was listed
/// (retention retires a checkpoint's manifest before its files).
fn gone(path: &Path) -> bool {
    matches!(fs::symlink_metadata(path), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

/// What became of a checkpoint or savepoint whose manifest was removed
/// while it was read.
fn gone_word(kind: SnapshotKind) -> &'static str {
    match kind {
        SnapshotKind::Checkpoint => "retired",
        SnapshotKind::Savepoint => "removed",
    }
}

/// The manifests in `dir`: a savepoint directory's own, or a store's.
fn manifests(dir: &Path) -> anyhow::Result<Vec<Found>> {
    let meta = fs::metadata(dir).map_err(|e| named(dir, e))?;
    if !meta.is_dir() {
        bail!("{}: not a directory", dir.display());
    }
    // A savepoint directory has a manifest of its own; one that is there
    // but cannot be read (a symlink loop, no permission) is still its
    // manifest, and reading it says why.
    let own = dir.join("manifest.json");
    match fs::symlink_metadata(&own) {
        Ok(_) => {
            let manifest = Manifest::load(&own);
            return Ok(vec![Found {
                path: own,
                kind: SnapshotKind::Savepoint,
                id: None,
                manifest,
            }]);
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(named(&own, e)),
    }
    Ok(checkpoint::list(dir)?
        .into_iter()
        .map(|l| Found {
            manifest: l.load(),
            path: l.manifest_path,
            kind: l.kind,
            id: Some(l.id),
        })
        .collect())
}

/// The error of `path` that could not be looked at or read (a symlink
/// loop called one).
fn named(path: &Path, e: io::Error) -> anyhow::Error {
    anyhow!("{}: {}", path.display(), tandem::sys::file::loop_named(e))
}

/// The error of a directory without a published checkpoint or savepoint.
fn holds_none(dir: &Path) -> anyhow::Error {
    anyhow!(
        "{}: holds no checkpoint or savepoint: no manifest-<id>.json, sp-<id>/manifest.json \
         or manifest.json in it",
        dir.display()
    )
}

/// The manifests under `dir`; an error when there are none.
fn published(dir: &Path) -> anyhow::Result<Vec<Found>> {
    let all = manifests(dir)?;
    if all.is_empty() {
        return Err(holds_none(dir));
    }
    Ok(all)
}

/// Says how many problems were found, on standard error (so that the
/// listing stays one line a file), and what that means for the status.
fn verdict(problems: usize) -> Verdict {
    if problems > 0 {
        let _ = writeln!(io::stderr(), "{problems} problem(s) found");
    }
    Verdict::of_problems(problems)
}

/// `snapshot ls`: the manifests and the unpublished leftovers. It reads
/// the manifests but no snapshot file: a manifest it cannot read is
/// damage (status 1); files are `verify`'s to check.
pub fn ls(dir: &Path, out: &mut dyn Write) -> anyhow::Result<Verdict> {
    let all = manifests(dir)?;
    let bad = print_found(&all, false, out)?;
    // Unpublished leftovers: checkpoint and savepoint directories without
    // a manifest, `.tmp` files.
    let published = |kind, id| all.iter().any(|f| f.kind == kind && f.id == Some(id));
    let rd = fs::read_dir(dir).map_err(|e| named(dir, e))?;
    let mut left: Vec<String> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            let id = |prefix| n.strip_prefix(prefix).and_then(|i| i.parse::<u64>().ok());
            n.ends_with(".tmp")
                || id("chk-").is_some_and(|id| !published(SnapshotKind::Checkpoint, id))
                || id("sp-").is_some_and(|id| !published(SnapshotKind::Savepoint, id))
        })
        .collect();
    left.sort();
    for n in &left {
        outln!(out, "unpublished: {n}")?;
    }
    if all.is_empty() {
        return Err(holds_none(dir));
    }
    Ok(verdict(bad))
}

/// Prints a manifest and its files, each verified when `verify` (the
/// manifest's path, to tell a retired checkpoint from a damaged one) is
/// given; returns how many of them are corrupt.
fn print_manifest(
    m: &Manifest,
    verify: Option<&Path>,
    out: &mut dyn Write,
) -> std::io::Result<usize> {
    outln!(
        out,
        "{:?} {}  created {}  {} file(s)  {} payload bytes  (a restore reads {})  (format {})",
        m.kind,
        m.id,
        rfc3339_ms(m.created_at_ms),
        m.files.len(),
        m.payload_bytes(),
        m.restore_bytes(),
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
        if f.delta {
            let links: Vec<String> = f
                .chain
                .iter()
                .map(|l| format!("{}:{}", l.checkpoint, l.path))
                .collect();
            outln!(
                out,
                "    delta; a restore reads {} bytes: {} then this file",
                f.restore_bytes(),
                links.join(", ")
            )?;
        }
        if let Some(manifest_path) = verify {
            match m.check(f).and_then(|_| m.check_chain(f)) {
                Ok(_) => outln!(out, "    verified")?,
                Err(_) if gone(manifest_path) => outln!(
                    out,
                    "    {}: its manifest was removed meanwhile",
                    gone_word(m.kind)
                )?,
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
    let meta = fs::metadata(path).map_err(|e| named(path, e))?;
    let bad = if meta.is_dir() {
        inspect_dir(path, out)?
    } else if path.extension().is_some_and(|e| e == "json") {
        match Manifest::load(path) {
            Ok(m) => print_manifest(&m, Some(path), out)?,
            Err(e @ CheckpointError::Manifest { .. }) => {
                outln!(out, "CORRUPT: {e}")?;
                1
            }
            // What the user named cannot be read: an error.
            Err(e) => return Err(e.into()),
        }
    } else {
        inspect_file(path, out)?
    };
    Ok(verdict(bad))
}

fn inspect_dir(dir: &Path, out: &mut dyn Write) -> anyhow::Result<usize> {
    Ok(print_found(&published(dir)?, true, out)?)
}

/// Prints the manifests found, each file verified when `verify`; returns
/// how many manifests could not be read plus how many files are corrupt.
fn print_found(all: &[Found], verify: bool, out: &mut dyn Write) -> io::Result<usize> {
    let mut bad = 0;
    for f in all {
        match &f.manifest {
            Ok(m) => bad += print_manifest(m, verify.then_some(&*f.path), out)?,
            Err(_) if gone(&f.path) => outln!(
                out,
                "{}: {} since it was listed",
                f.path.display(),
                gone_word(f.kind)
            )?,
            // The error names the manifest.
            Err(e) => {
                bad += 1;
                outln!(out, "CORRUPT: unreadable manifest: {e}")?
            }
        }
    }
    Ok(bad)
}

/// One snapshot file: its header, then the whole file verified. Returns 1
/// when it is corrupt, 0 when it verifies.
fn inspect_file(path: &Path, out: &mut dyn Write) -> anyhow::Result<usize> {
    let head = checkpoint::format::HEADER_BLOCK + tandem::state::delta::HEADER;
    let mut block = Vec::with_capacity(head);
    tandem::sys::file::open_regular(path, OpenOptions::new().read(true))
        .and_then(|(f, _)| f.take(head as u64).read_to_end(&mut block))
        .map_err(|e| named(path, e))?;
    let payload = block.split_off(block.len().min(checkpoint::format::HEADER_BLOCK));
    outln!(out, "file           : {}", path.display())?;
    let h = match SnapshotHeader::decode(&block, path) {
        Ok(h) => h,
        Err(e) => {
            outln!(out, "verify         : CORRUPT: {e}")?;
            return Ok(1);
        }
    };
    outln!(out, "format version : {}", h.version)?;
    outln!(out, "checkpoint id  : {}", h.checkpoint_id)?;
    outln!(out, "operator       : {}#{}", h.operator, h.instance)?;
    outln!(out, "positions      : {}", fmt_positions(&h.positions))?;
    outln!(out, "created        : {}", rfc3339_ms(h.created_at_ms))?;
    match h.layout() {
        Some(l) => {
            outln!(
                out,
                "payload        : {} bytes in {} checked blocks of 64 KiB (with the index), block table xxh3 {:#018x}",
                h.payload_len,
                l.blocks,
                h.payload_checksum
            )?;
            if h.index_len > 0 {
                outln!(
                    out,
                    "key index      : {} bytes (a restore reads the state lazily, key by key)",
                    h.index_len
                )?;
            }
        }
        None => outln!(
            out,
            "payload        : {} bytes, xxh3 {:#018x}",
            h.payload_len,
            h.payload_checksum
        )?,
    }
    outln!(out, "file length    : {} bytes expected", h.file_len())?;
    if tandem::state::delta::is_delta(&payload) {
        let base = u64::from_le_bytes(payload[8..16].try_into().expect("8 bytes"));
        outln!(
            out,
            "kind           : delta over checkpoint {base} (its manifest names the chain a restore reads)"
        )?;
    } else {
        outln!(out, "kind           : whole")?;
    }
    match SnapshotFile::verify(path) {
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
    let all = published(dir)?;
    Ok(verdict(verify_all(&all, out)?))
}

/// Verifies every file of `all`; returns how many are corrupt.
fn verify_all(all: &[Found], out: &mut dyn Write) -> io::Result<usize> {
    let mut bad = 0;
    for found in all {
        let m = match &found.manifest {
            Ok(m) => m,
            Err(_) if gone(&found.path) => {
                outln!(
                    out,
                    "{} {:?} {}: its manifest was removed since it was listed",
                    gone_word(found.kind),
                    found.kind,
                    found.path.display()
                )?;
                continue;
            }
            Err(e) => {
                outln!(out, "CORRUPT {}: {e}", found.path.display())?;
                bad += 1;
                continue;
            }
        };
        for f in &m.files {
            match m.check(f).and_then(|_| m.check_chain(f)) {
                Ok(_) if f.delta => outln!(
                    out,
                    "ok      {:?} {} {} (delta; its chain of {} verified)",
                    m.kind,
                    m.id,
                    f.path,
                    f.chain.len()
                )?,
                Ok(_) => outln!(out, "ok      {:?} {} {}", m.kind, m.id, f.path)?,
                Err(_) if gone(&found.path) => outln!(
                    out,
                    "{} {:?} {} {}: its manifest was removed meanwhile",
                    gone_word(m.kind),
                    m.kind,
                    m.id,
                    f.path
                )?,
                Err(e) => {
                    outln!(out, "CORRUPT {:?} {} {}: {e}", m.kind, m.id, f.path)?;
                    bad += 1;
                }
            }
        }
    }
    Ok(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem::checkpoint::{OperatorSnapshot, Position, SnapshotBytes, SnapshotStore};

    /// Retention retires a checkpoint — its manifest, then its files —
    /// while `verify` reads the store: the files it can no longer open are
    /// reported as retired, not as damage (they were `CORRUPT … No such
    /// file or directory`, status 1, in 5 of 40 runs on a live store).
    #[test]
    fn a_checkpoint_retired_during_verify_is_reported_retired_not_corrupt() {
        let dir =
            std::env::temp_dir().join(format!("tandem-verify-retired-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        {
            let store = SnapshotStore::open(&dir, 3).unwrap();
            for id in 1..=2 {
                let snap = OperatorSnapshot {
                    operator: "sum".into(),
                    instance: 0,
                    positions: vec![Position {
                        partition: 0,
                        next_seq: id,
                    }],
                    bytes: SnapshotBytes::from_payload(&[id as u8; 64]),
                };
                store.submit(id, vec![snap]).wait().unwrap();
            }
        }
        // Listed and loaded; then retired as retention does it.
        let all = published(&dir).unwrap();
        fs::remove_file(dir.join("manifest-1.json")).unwrap();
        fs::remove_dir_all(dir.join("chk-1")).unwrap();
        let mut out = Vec::new();
        assert_eq!(verify_all(&all, &mut out).unwrap(), 0);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("retired Checkpoint 1 chk-1/sum-0.snap: its manifest was removed"),
            "{text}"
        );
        assert!(text.contains("ok      Checkpoint 2"), "{text}");
        assert!(!text.contains("CORRUPT"), "{text}");

        // A file missing under a manifest that is still there is damage.
        fs::remove_dir_all(dir.join("chk-2")).unwrap();
        let all = published(&dir).unwrap();
        let mut out = Vec::new();
        assert_eq!(verify_all(&all, &mut out).unwrap(), 1);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("CORRUPT Checkpoint 2"), "{text}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
