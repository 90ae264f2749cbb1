//! The files `nexmark` writes besides its report: `--output` and
//! `--dump-input`, each staged beside its path and renamed into place.

use anyhow::Context;
use std::io::Write;
use std::path::Path;
use tandem_bench::nexmark::gen::{GenConfig, Tables};
use tandem_bench::nexmark::queries::event_json;
use tandem_bench::paths;

/// Writes `--output` (staged beside it, renamed into place).
pub(crate) fn write_lines(path: &Path, lines: &[String]) -> anyhow::Result<()> {
    let o = paths::output_file("--output", path)?;
    let mut f = std::io::BufWriter::with_capacity(1 << 20, paths::stage("--output", &o)?);
    let write = |f: &mut std::io::BufWriter<paths::Writing>| -> std::io::Result<()> {
        for l in lines {
            f.write_all(l.as_bytes())?;
            f.write_all(b"\n")?;
        }
        f.flush()
    };
    write(&mut f).with_context(|| format!("writing --output {}", path.display()))?;
    f.into_inner().map_err(|e| e.into_error())?.commit()
}

/// Writes `--dump-input` (staged beside it, renamed into place).
pub(crate) fn dump_input(
    gen: &GenConfig,
    tables: &Tables,
    events: u64,
    path: &Path,
) -> anyhow::Result<()> {
    let o = paths::output_file("--dump-input", path)?;
    let mut f = std::io::BufWriter::with_capacity(1 << 20, paths::stage("--dump-input", &o)?);
    let mut write = || -> std::io::Result<()> {
        let mut line = String::new();
        for n in 0..events {
            if n % 65_536 == 0 && tandem_bench::cli::interrupted() {
                return Err(std::io::Error::other("interrupted"));
            }
            line.clear();
            event_json(&gen.event(n, tables), &mut line);
            line.push('\n');
            f.write_all(line.as_bytes())?;
        }
        f.flush()
    };
    write().with_context(|| format!("writing --dump-input {}", path.display()))?;
    f.into_inner().map_err(|e| e.into_error())?.commit()?;
    tandem_bench::cli::kept(path.display().to_string());
    Ok(())
}
