//! `tandem`: the command-line tool around the engine.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};
use tandem::checkpoint::{self, Manifest, SnapshotFile, SnapshotHeader};

/// Tandem's command-line tool.
#[derive(Parser, Debug)]
#[command(name = "tandem", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Shows what this machine offers the engine: cores, locked-memory limit,
    /// kernel.
    Info,
    /// Lists, inspects and verifies checkpoints and savepoints.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Inspects buffer queues (the standby's tuple log).
    #[command(subcommand)]
    Bq(BqCommand),
}

#[derive(Subcommand, Debug)]
enum BqCommand {
    /// Prints a buffer queue's header, position and ID range, occupancy,
    /// reader cursors and its first and last entries, and validates it;
    /// exits with status 1 when it is damaged.
    Inspect {
        file: PathBuf,
        /// Entries to show from each end.
        #[arg(long, default_value_t = 3)]
        entries: u64,
    },
}

#[derive(Subcommand, Debug)]
enum SnapshotCommand {
    /// Lists the published checkpoints and savepoints of a store directory
    /// (from their manifests: ids, sizes, operators, positions, checksums)
    /// and any unpublished leftovers.
    Ls { dir: PathBuf },
    /// Shows a snapshot file's header (and whether its checksum holds), a
    /// manifest, a savepoint directory or every manifest of a store.
    Inspect { path: PathBuf },
    /// Verifies every file of every checkpoint and savepoint in a store (or
    /// one savepoint directory); exits with status 1 on any corruption.
    Verify { dir: PathBuf },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Info => info(),
        Command::Bq(BqCommand::Inspect { file, entries }) => {
            if !bq_inspect(&file, entries)? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Snapshot(SnapshotCommand::Ls { dir }) => snapshot_ls(&dir),
        Command::Snapshot(SnapshotCommand::Inspect { path }) => snapshot_inspect(&path),
        Command::Snapshot(SnapshotCommand::Verify { dir }) => {
            let bad = snapshot_verify(&dir)?;
            if bad > 0 {
                eprintln!("{bad} problem(s) found");
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

/// The manifests in `dir`: a savepoint directory's own, or a store's.
fn manifests(
    dir: &Path,
) -> anyhow::Result<Vec<(PathBuf, Result<Manifest, checkpoint::CheckpointError>)>> {
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

fn snapshot_ls(dir: &Path) -> anyhow::Result<()> {
    for (path, m) in manifests(dir)? {
        match m {
            Ok(m) => print_manifest(&m, false),
            Err(e) => println!("{}: unreadable manifest: {e}", path.display()),
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
            println!("unpublished: {n}");
        }
    }
    Ok(())
}

fn print_manifest(m: &Manifest, detail: bool) {
    println!(
        "{:?} {}  created {} ms  {} file(s)  {} payload bytes  (format {})",
        m.kind,
        m.id,
        m.created_at_ms,
        m.files.len(),
        m.payload_bytes(),
        m.format_version
    );
    for f in &m.files {
        println!(
            "  {}#{}  {}  {} bytes (payload {})  xxh3 {:#018x}  positions {}",
            f.operator,
            f.instance,
            f.path,
            f.file_len,
            f.payload_len,
            f.payload_checksum,
            fmt_positions(&f.positions)
        );
        if detail {
            match m.open(f) {
                Ok(_) => println!("    verified"),
                Err(e) => println!("    CORRUPT: {e}"),
            }
        }
    }
}

fn fmt_positions(p: &[checkpoint::Position]) -> String {
    let v: Vec<String> = p
        .iter()
        .map(|p| format!("{}:{}", p.partition, p.next_seq))
        .collect();
    format!("[{}]", v.join(", "))
}

fn snapshot_inspect(path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        for (p, m) in manifests(path)? {
            match m {
                Ok(m) => print_manifest(&m, true),
                Err(e) => println!("{}: unreadable manifest: {e}", p.display()),
            }
        }
        return Ok(());
    }
    if path.extension().is_some_and(|e| e == "json") {
        print_manifest(&Manifest::load(path)?, true);
        return Ok(());
    }
    let bytes = {
        use std::io::Read;
        let mut b = vec![0; checkpoint::format::HEADER_BLOCK];
        let mut f =
            std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
        let n = f.read(&mut b)?;
        b.truncate(n);
        b
    };
    let h = SnapshotHeader::decode(&bytes, path)?;
    println!("file           : {}", path.display());
    println!("format version : {}", checkpoint::format::FORMAT_VERSION);
    println!("checkpoint id  : {}", h.checkpoint_id);
    println!("operator       : {}#{}", h.operator, h.instance);
    println!("positions      : {}", fmt_positions(&h.positions));
    println!("created        : {} ms since the epoch", h.created_at_ms);
    println!(
        "payload        : {} bytes, xxh3 {:#018x}",
        h.payload_len, h.payload_checksum
    );
    println!("file length    : {} bytes expected", h.file_len());
    match SnapshotFile::open(path) {
        Ok(_) => println!("verify         : ok"),
        Err(e) => println!("verify         : CORRUPT: {e}"),
    }
    Ok(())
}

/// Prints each file's status; returns how many problems were found.
fn snapshot_verify(dir: &Path) -> anyhow::Result<usize> {
    let mut bad = 0;
    let all = manifests(dir)?;
    if all.is_empty() {
        println!("{}: no published checkpoint or savepoint", dir.display());
    }
    for (path, m) in all {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                println!("CORRUPT {}: {e}", path.display());
                bad += 1;
                continue;
            }
        };
        for f in &m.files {
            match m.open(f) {
                Ok(_) => println!("ok      {:?} {} {}", m.kind, m.id, f.path),
                Err(e) => {
                    println!("CORRUPT {:?} {} {}: {e}", m.kind, m.id, f.path);
                    bad += 1;
                }
            }
        }
    }
    Ok(bad)
}

fn info() -> anyhow::Result<()> {
    let cores = tandem::sys::affinity::available_cores();
    println!("cores available : {} ({:?})", cores.len(), cores);
    match tandem::sys::limits::memlock() {
        Some((soft, hard)) => println!(
            "memlock limit   : soft {} hard {}",
            fmt_limit(soft),
            fmt_limit(hard)
        ),
        None => println!("memlock limit   : unknown"),
    }
    println!(
        "kernel          : {}",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    );
    Ok(())
}

fn fmt_limit(v: Option<u64>) -> String {
    match v {
        None => "unlimited".into(),
        Some(b) => format!("{} KiB", b / 1024),
    }
}

/// Prints a buffer queue; `Ok(false)` when it does not validate.
fn bq_inspect(file: &Path, show: u64) -> anyhow::Result<bool> {
    use tandem::standby::bq::BufferQueue;
    let q = BufferQueue::open(file).with_context(|| format!("opening {}", file.display()))?;
    let c = q.config();
    let (head, tail) = (q.head(), q.tail());
    println!("{}", file.display());
    println!(
        "  format {}  slots {}  arena {} bytes  readers {}",
        tandem::standby::bq::VERSION,
        c.slots,
        c.arena,
        c.readers
    );
    println!(
        "  positions [{head}, {tail})  held {}  ({:.1} % of slots, {} arena bytes = {:.1} %)",
        tail - head,
        (tail - head) as f64 * 100.0 / c.slots as f64,
        q.arena_used(),
        q.arena_used() as f64 * 100.0 / c.arena as f64
    );
    let cursors: Vec<String> = (0..c.readers as usize)
        .map(|r| format!("{r}:{}", q.reader_cursor(r)))
        .collect();
    println!(
        "  covered by a snapshot below {}  reader cursors {}",
        q.covered(),
        cursors.join(" ")
    );
    if head < tail {
        let first = q.get(head).map(|e| e.tuple_id);
        let last = q.get(tail - 1).map(|e| e.tuple_id);
        println!(
            "  tuple IDs {} ..= {}",
            first.map_or("?".into(), |t| t.to_string()),
            last.map_or("?".into(), |t| t.to_string())
        );
        let mut shown: Vec<u64> = (head..tail.min(head + show)).collect();
        shown.extend(tail.saturating_sub(show).max(head + show)..tail);
        for p in shown {
            if let Some(e) = q.get(p) {
                let preview: String = String::from_utf8_lossy(&e.bytes[..e.bytes.len().min(48)])
                    .chars()
                    .map(|ch| if ch.is_control() { '.' } else { ch })
                    .collect();
                println!(
                    "    #{:<10} id {:<20} {:>6} bytes  {preview}",
                    e.position,
                    e.tuple_id,
                    e.bytes.len()
                );
            }
        }
    }
    match q.validate() {
        Ok(n) => {
            println!("  valid ({n} entries checked)");
            Ok(true)
        }
        Err(e) => {
            println!("  INVALID: {e}");
            Ok(false)
        }
    }
}
