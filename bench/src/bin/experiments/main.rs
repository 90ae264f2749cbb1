//! The paper's experiments by one command: criticality of each operator
//! (table 5), latency at 100 k, 500 k and 1 M records (table 6), recovery
//! over successive failures (table 7) and resources (table 8) — each a set
//! of `paper` runs — and recovery against the size of the keyed state
//! (`restore` runs), written as a Markdown report beside the JSON behind
//! it and the plots, in `--out DIR`.
//!
//! ```text
//! cargo build --release -p tandem-bench
//! target/release/experiments --profile quick --out results/
//! ```

mod plan;
mod plots;
mod report;
mod runs;
mod tables;

use anyhow::{ensure, Context};
use clap::Parser;
use plan::{Profile, Spec};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tandem_bench::{errln, outln};

/// The longest `--run-timeout-s`: a day.
const MAX_RUN_TIMEOUT_S: u64 = 86_400;

/// Runs the paper's experiments and writes their report, JSON and plots.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// quick (about 4 minutes on 2 cores: 10 faults per operator, 3 runs
    /// of each configuration) or full (the paper's 50 faults per
    /// operator, 5 runs of each).
    #[arg(long, default_value = "quick", value_parser = ["quick", "full"])]
    profile: String,
    /// Directory for report.md, results.json, the plots and each run's
    /// files (runs/); created if missing.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The `paper` binary (default: the one beside this binary).
    #[arg(long)]
    paper_bin: Option<PathBuf>,
    /// The `restore` binary, which the state-size runs use (default: the
    /// one beside this binary).
    #[arg(long)]
    restore_bin: Option<PathBuf>,
    /// The operator the standby backs up in the latency and failure
    /// experiments (flatmap, filter or keyed); default: the one the
    /// criticality ranking picks (the paper's rule).
    #[arg(long, value_parser = ["flatmap", "filter", "keyed"])]
    backup: Option<String>,
    /// Cores each run may use (default: all).
    #[arg(long)]
    cores: Option<usize>,
    /// A run not finished in this many seconds is stopped and the
    /// campaign fails.
    #[arg(long, default_value_t = 300)]
    run_timeout_s: u64,
}

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        run(&args)?;
        Ok(ExitCode::SUCCESS)
    })
}

fn run(args: &Args) -> anyhow::Result<()> {
    let profile = Profile::named(&args.profile);
    let bin = runs::sibling_binary("paper", "--paper-bin", args.paper_bin.as_deref())?;
    let restore_bin =
        runs::sibling_binary("restore", "--restore-bin", args.restore_bin.as_deref())?;
    if let Some(c) = args.cores {
        let have = tandem::sys::affinity::available_cores().len();
        if c == 0 || c > have {
            anyhow::bail!("--cores {c}: this process may use 1 to {have} cores");
        }
    }
    ensure!(
        (1..=MAX_RUN_TIMEOUT_S).contains(&args.run_timeout_s),
        "--run-timeout-s {}: 1 to {MAX_RUN_TIMEOUT_S} (a day)",
        args.run_timeout_s
    );
    // Created if missing (and removed again if the campaign fails before
    // it wrote anything there).
    tandem_bench::paths::writable_dir("--out", &args.out)?;
    let machine = tables::Machine::describe(args.cores);
    let mut common = Vec::new();
    if let Some(c) = args.cores {
        common.extend(["--cores".to_string(), c.to_string()]);
    }
    let runner = runs::Runner {
        bin,
        dir: args.out.clone(),
        common,
        timeout: Duration::from_secs(args.run_timeout_s),
    };
    let started = Instant::now();

    // Table 5 first: its ranking picks the operator the rest back up.
    let crit_specs = plan::criticality(&profile);
    let state_specs = plan::state_sizes(&profile);
    let later_estimate: f64 =
        plan::estimate_rest(&profile) + state_specs.iter().map(|s| s.run.estimate_s).sum::<f64>();
    let total: f64 = crit_specs.iter().map(|s| s.run.estimate_s).sum::<f64>() + later_estimate;
    let bar = progress(total);
    let crit_done = execute(&runner, &crit_specs, &bar)?;
    let mut criticality = tables::criticality(&crit_done);
    if let Some(b) = &args.backup {
        criticality.backed_up = b.clone();
    }
    let target = criticality.backed_up.clone();
    bar.suspend(|| {
        errln!(
            "criticality: {}; {}",
            criticality.ranking.join(" > "),
            if args.backup.is_some() {
                format!("backing up {target} (--backup)")
            } else {
                criticality.why.clone()
            }
        )
    });

    let rest = plan::rest(&profile, &target);
    let done = execute(&runner, &rest, &bar)?;
    let mut state_done = Vec::with_capacity(state_specs.len());
    for s in &state_specs {
        bar.set_message(s.run.name.clone());
        let (r, _wall) = runner
            .run_restore(&restore_bin, &s.run)
            .with_context(|| format!("experiment run {}", s.run.name))?;
        bar.inc((s.run.estimate_s * 1000.0) as u64);
        state_done.push((s.clone(), r));
    }
    bar.finish_and_clear();

    let latency = tables::latency(&profile, &done);
    let failures = tables::failures(&done);
    let resources = tables::resources(&done);
    let state_sizes = tables::state_sizes(&state_done);
    let mut results = tables::Results {
        profile: profile.name.to_string(),
        machine,
        took_s: started.elapsed().as_secs_f64(),
        backed_up: target.clone(),
        verdicts: Vec::new(),
        criticality,
        latency,
        failures,
        resources,
        state_sizes,
        runs: crit_done
            .iter()
            .chain(&done)
            .map(|(s, d)| tables::RunSummary::of(s, d))
            .collect(),
    };
    results.verdicts = report::bars(&results);
    let plots = plots::draw_all(&args.out, &results, &done)?;
    tandem_bench::report::write_json("--out", &args.out.join("results.json"), &results)?;
    let md = report::markdown(&results, &plots);
    tandem_bench::paths::write_file("--out", &args.out.join("report.md"), md.as_bytes())?;
    outln!("{}", report::summary(&results))?;
    outln!(
        "wrote {}/report.md, results.json and {} plots in {:.0} s",
        args.out.display(),
        plots.len() * 2,
        started.elapsed().as_secs_f64()
    )?;
    Ok(())
}

fn progress(total_s: f64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new((total_s * 1000.0) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {percent:>3}% ETA {eta} {msg}",
        )
        .expect("static template"),
    );
    bar
}

/// Runs each spec in turn; the first failure ends the campaign.
fn execute(
    runner: &runs::Runner,
    specs: &[Spec],
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<(Spec, runs::Done)>> {
    let mut out = Vec::with_capacity(specs.len());
    for s in specs {
        bar.set_message(s.run.name.clone());
        let d = runner
            .run(&s.run)
            .with_context(|| format!("experiment run {}", s.run.name))?;
        bar.inc((s.run.estimate_s * 1000.0) as u64);
        out.push((s.clone(), d));
    }
    Ok(out)
}
