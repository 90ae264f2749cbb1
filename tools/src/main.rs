//! `tandem`: the command-line tool around the engine.

use clap::{Parser, Subcommand};

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
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Info => info(),
    }
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
