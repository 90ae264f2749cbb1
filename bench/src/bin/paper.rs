//! The paper's pipeline (JSON answers → parse → filter → level → per-user
//! stats → sink) on Tandem, with throughput, HDR latency, CPU and memory.
//!
//! Input is pre-generated before timing starts (see `paper::gen`); its size
//! is reported as `input_bytes` so the engine's own memory is
//! `peak_rss_bytes - input_bytes`.

use anyhow::Context;
use clap::Parser;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem::sys::rusage;
use tandem::{Chaining, RuntimeConfig};
use tandem_bench::paper::{self, names, Input, PaperOptions};
use tandem_bench::report::{fmt_ns, write_json, LatencyNs};

/// Runs the paper's pipeline and prints throughput and latency.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Records to generate and process.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Source rate in records/s over all partitions; 0 = as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Seed of the input generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Cores to run on (default: all the process may use).
    #[arg(long)]
    cores: Option<usize>,
    /// Instances per operator (default: the number of cores).
    #[arg(long)]
    parallelism: Option<usize>,
    /// Write one JSONL line per output record here.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Write a JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Make every k-th input record malformed (0 = none).
    #[arg(long, default_value_t = 0)]
    malformed_every: u64,
    /// Directory for files the run creates (dead letters); default: a temp dir.
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Operator chaining: auto, always or never.
    #[arg(long, default_value = "auto", value_parser = parse_chaining)]
    chaining: Chaining,
    /// Slots per ring between tasks.
    #[arg(long, default_value_t = 1024)]
    ring_capacity: usize,
    /// Inject a fault: panic@OPERATOR:N, stall@OPERATOR:N:MILLIS or
    /// cut@OPERATOR:N, where N is the input record's seq (repeatable). Until
    /// a recovery strategy exists, a panic or a cut ends the run with an
    /// error naming the operator; a stall delays it.
    #[arg(long = "fault")]
    faults: Vec<tandem_fault_inject::FaultSpec>,
}

fn parse_chaining(s: &str) -> Result<Chaining, String> {
    match s {
        "auto" => Ok(Chaining::Auto),
        "always" => Ok(Chaining::Always),
        "never" => Ok(Chaining::Never),
        _ => Err(format!("expected auto, always or never, got `{s}`")),
    }
}

#[derive(Serialize)]
struct Report {
    records_in: u64,
    records_out: u64,
    summaries_out: u64,
    dead_letters: u64,
    dead_letter_path: Option<PathBuf>,
    throughput_rps: f64,
    elapsed_s: f64,
    latency_ns: LatencyNs,
    cpu_seconds: f64,
    peak_rss_bytes: u64,
    input_bytes: u64,
    engine_memory_bytes: u64,
    cores: usize,
    parallelism: usize,
    workers: usize,
    tasks: usize,
    rate: f64,
    seed: u64,
    input_pregenerated: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let available = tandem::sys::affinity::available_cores().len();
    let cores = args.cores.unwrap_or(available);
    anyhow::ensure!(cores >= 1, "--cores must be at least 1");
    anyhow::ensure!(
        cores <= available,
        "--cores {cores}: only {available} cores are available to this process"
    );
    let parallelism = args.parallelism.unwrap_or(cores);
    anyhow::ensure!(parallelism >= 1, "--parallelism must be at least 1");
    anyhow::ensure!(
        args.rate >= 0.0 && args.rate.is_finite(),
        "--rate must be ≥ 0"
    );

    let t = Instant::now();
    let input = Arc::new(Input::generate(
        args.records,
        args.seed,
        args.malformed_every,
        available,
    ));
    let input_bytes = input.memory_bytes();
    eprintln!(
        "generated {} records ({:.1} MB of JSON) in {:.2} s",
        args.records,
        input_bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );

    let opts = PaperOptions {
        parallelism,
        rate: (args.rate > 0.0).then_some(args.rate),
        output: args.output.clone(),
    };
    let (job, counts) = paper::build_job(Arc::clone(&input), &opts)?;
    let mut cfg = RuntimeConfig::default()
        .cores(cores)
        .chaining(args.chaining)
        .ring_capacity(args.ring_capacity);
    if let Some(d) = &args.run_dir {
        cfg = cfg.run_dir(d);
    }
    if !args.faults.is_empty() {
        let (len, p) = (args.records, parallelism);
        let injector = tandem_fault_inject::FaultInjector::new(&args.faults, move |n| {
            paper::tuple_of(len, p, n)
        });
        cfg = cfg.probes(std::sync::Arc::new(injector));
    }

    let cpu0 = rusage::process_cpu_time();
    let handle = job.start(&cfg).context("starting the job")?;
    let bar = indicatif::ProgressBar::new(args.records);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} records {msg}",
        )
        .expect("static template"),
    );
    let (mut last_pos, mut last_t) = (0u64, Instant::now());
    while !handle.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
        let p = handle.progress();
        let pos = p.operator(names::SOURCE).map_or(0, |o| o.records);
        let dt = last_t.elapsed().as_secs_f64();
        if dt >= 0.5 {
            bar.set_message(format!("({:.2} M/s)", (pos - last_pos) as f64 / dt / 1e6));
            (last_pos, last_t) = (pos, Instant::now());
        }
        bar.set_position(pos);
    }
    let report = handle.join().context("the job failed")?;
    let cpu = rusage::process_cpu_time() - cpu0;
    bar.finish_and_clear();

    let peak_rss = rusage::peak_rss_bytes().unwrap_or(0);
    let records_in = report.operator(names::SOURCE).map_or(0, |o| o.records);
    let secs = report.elapsed.as_secs_f64();
    let rep = Report {
        records_in,
        records_out: counts.records.load(std::sync::atomic::Ordering::Relaxed),
        summaries_out: counts.summaries.load(std::sync::atomic::Ordering::Relaxed),
        dead_letters: report.dead_letters,
        dead_letter_path: report.dead_letter_path.clone(),
        throughput_rps: records_in as f64 / secs.max(1e-9),
        elapsed_s: secs,
        latency_ns: LatencyNs::from(&report.latency),
        cpu_seconds: cpu.as_secs_f64(),
        peak_rss_bytes: peak_rss,
        input_bytes,
        engine_memory_bytes: peak_rss.saturating_sub(input_bytes),
        cores,
        parallelism,
        workers: report.workers,
        tasks: report.tasks,
        rate: args.rate,
        seed: args.seed,
        input_pregenerated: true,
    };
    if let Some(out) = &args.output {
        let bytes = paper::merge_output(out, parallelism)
            .with_context(|| format!("merging output into {}", out.display()))?;
        eprintln!("wrote {} ({:.1} MB)", out.display(), bytes as f64 / 1e6);
    }

    let l = &rep.latency_ns;
    println!(
        "paper pipeline: {} cores, parallelism {}, {} workers, {} tasks",
        cores, parallelism, rep.workers, rep.tasks
    );
    println!("  records in        {}", rep.records_in);
    println!(
        "  records out       {} (+ {} per-user summaries)",
        rep.records_out, rep.summaries_out
    );
    println!(
        "  dead letters      {}{}",
        rep.dead_letters,
        rep.dead_letter_path
            .as_ref()
            .map(|p| format!(" ({})", p.display()))
            .unwrap_or_default()
    );
    println!("  elapsed           {:.3} s", rep.elapsed_s);
    println!("  throughput        {:.0} records/s", rep.throughput_rps);
    println!(
        "  latency           min {}  p50 {}  p99 {}  p99.9 {}  max {}  ({} samples)",
        fmt_ns(l.min),
        fmt_ns(l.p50),
        fmt_ns(l.p99),
        fmt_ns(l.p999),
        fmt_ns(l.max),
        l.samples
    );
    println!("  cpu               {:.2} s", rep.cpu_seconds);
    println!(
        "  peak rss          {:.1} MiB (input {:.1} MiB, engine {:.1} MiB)",
        rep.peak_rss_bytes as f64 / 1048576.0,
        rep.input_bytes as f64 / 1048576.0,
        rep.engine_memory_bytes as f64 / 1048576.0
    );
    if let Some(path) = &args.report {
        write_json(path, &rep)?;
        eprintln!("report written to {}", path.display());
    }
    Ok(())
}
