//! `tandem info`: what this machine offers the engine — the cores the
//! process may use, the locked-memory limit, the kernel.

use std::io::Write;

use crate::out::outln;
use crate::Verdict;

/// Prints the machine's figures.
pub fn info(out: &mut dyn Write) -> anyhow::Result<Verdict> {
    let cores = tandem::sys::affinity::available_cores();
    outln!(out, "cores available : {} ({:?})", cores.len(), cores)?;
    match tandem::sys::limits::memlock() {
        Some((soft, hard)) => outln!(
            out,
            "memlock limit   : soft {} hard {}",
            fmt_limit(soft),
            fmt_limit(hard)
        )?,
        None => outln!(out, "memlock limit   : unknown")?,
    }
    outln!(
        out,
        "kernel          : {}",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    )?;
    Ok(Verdict::Pass)
}

fn fmt_limit(v: Option<u64>) -> String {
    match v {
        None => "unlimited".into(),
        Some(b) => format!("{} KiB", b / 1024),
    }
}
