//! The report: the paper's tables as Markdown, each of Tandem's figures
//! beside the paper's, the bars judged, and the one-screen summary.

use crate::tables::{flat, ResourceRow, Results};
use std::fmt::Write;

fn f(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "–".into(),
    }
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{x:+.1} %")
    } else {
        "–".into()
    }
}

/// Milliseconds shown in µs (or ms from 10 ms on).
fn us(ms: f64) -> String {
    if !ms.is_finite() {
        "–".into()
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else if ms >= 0.1 {
        format!("{:.0} µs", ms * 1e3)
    } else {
        format!("{:.1} µs", ms * 1e3)
    }
}

fn ms_or_s(ms: Option<f64>) -> String {
    match ms {
        Some(v) if v >= 1000.0 => format!("{:.2} s", v / 1000.0),
        Some(v) if v >= 10.0 => format!("{v:.0} ms"),
        Some(v) => format!("{v:.2} ms"),
        None => "–".into(),
    }
}

/// One claim of the paper, its figure, this run's, and the bar Tandem
/// holds itself to.
pub struct Bar {
    pub claim: String,
    pub paper: &'static str,
    pub ours: String,
    pub bar: &'static str,
    pub met: bool,
}

/// The bars, judged on this run's figures: each BQBS mode on its own (the
/// paper's standby computes along, as `hot` does; `warm` restores a
/// snapshot and replays).
pub fn bars(r: &Results) -> Vec<Bar> {
    let mut out = Vec::new();
    for v in &r.failures.versus_restart_all {
        out.push(Bar {
            claim: format!(
                "recovery per failure: restart-all (30 s checkpoints) over {}",
                v.config
            ),
            paper: "~70 s over 31 s: 2.3× at the 1st failure",
            ours: format!(
                "{:.0}× at the closest failure, {:.0}× over all {}",
                v.speedup_min, v.speedup_total, r.failures.failures
            ),
            bar: "≥ 100×",
            met: v.speedup_min >= 100.0,
        });
    }
    for v in &r.failures.versus_restart_all {
        out.push(Bar {
            claim: format!("{} recovery, later failures over earlier ones", v.config),
            paper: "grows: 31 s, 73 s, …, 157 s",
            ours: format!("{:.2}× ({:+.2} ms)", v.growth, v.growth_ms),
            bar: "flat: ≤ 2× or ≤ +1 ms",
            met: flat(v),
        });
    }
    for o in &r.latency.overheads {
        if o.config.contains('+') {
            continue;
        }
        out.push(Bar {
            claim: format!(
                "mean latency of {} over none at {} records",
                o.config, o.records
            ),
            paper: "+4 %",
            ours: pct(o.mean_latency_pct),
            bar: "≤ +4 %",
            met: o.mean_latency_pct <= 4.0,
        });
    }
    // Normal operation against none, and the paper's own +8 %: BQBS
    // against Flink's restart-all while failures are handled.
    let normal = |x: &ResourceRow| x.cpu_normal_pct;
    let failing = |x: &ResourceRow| x.cpu_failure_pct;
    cpu_bars(
        r,
        "none",
        normal,
        "in normal operation",
        "about equal; +8 % during failures",
        &mut out,
    );
    cpu_bars(
        r,
        "restart-all",
        failing,
        "during failures",
        "+8 %",
        &mut out,
    );
    out
}

/// A bar per BQBS mode: its CPU over `base`'s, both read by `cpu`.
fn cpu_bars(
    r: &Results,
    base: &str,
    cpu: impl Fn(&ResourceRow) -> Option<f64>,
    when: &str,
    paper: &'static str,
    out: &mut Vec<Bar>,
) {
    let Some(n) = r
        .resources
        .rows
        .iter()
        .find(|x| x.config == base)
        .and_then(&cpu)
    else {
        return;
    };
    for row in r
        .resources
        .rows
        .iter()
        .filter(|x| x.config.starts_with("bqbs"))
    {
        let Some(b) = cpu(row) else { continue };
        let over = (b / n - 1.0) * 100.0;
        out.push(Bar {
            claim: format!(
                "CPU of {} over {base} {when} (idle workers park)",
                row.config
            ),
            paper,
            ours: format!("{} ({b:.1} % against {n:.1} % of the cores)", pct(over)),
            bar: "≤ +8 %",
            met: over <= 8.0,
        });
    }
}

pub fn markdown(r: &Results, plots: &[String]) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(s, "# Tandem against the BQBS paper's experiments\n");
    let _ = writeln!(
        s,
        "Profile `{}`, measured {} on {} ({} of {} cores used, {:.1} GiB memory, {}; load {:.2} at the start), Tandem {}. Took {:.0} s. Every figure below was measured in this run; the paper's are quoted from its text (a Flink 1.x cluster of 5 servers, parallelism 8).\n",
        r.profile, m.date_utc, m.cpu, m.cores_used, m.cores_online, m.memory_gib, m.kernel, m.load_at_start, m.tandem_version, r.took_s
    );
    let _ = writeln!(s, "## Summary\n");
    let _ = writeln!(
        s,
        "| claim | paper | Tandem, this run | bar | |\n| --- | --- | --- | --- | --- |"
    );
    for b in bars(r) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            b.claim,
            b.paper,
            b.ours,
            b.bar,
            if b.met { "met" } else { "**not met**" }
        );
    }
    let _ = writeln!(s);

    // Table 5.
    let c = &r.criticality;
    let _ = writeln!(
        s,
        "## Table 5 — criticality: recovery per operator under restart-all\n"
    );
    let _ = writeln!(
        s,
        "{} faults (panics) into each operator, spread over one run each; restart-all with {} ms checkpoints. Recovery: fault → every sink back where it was (the paper's reload + replay). The paper: 50 faults per operator, 30 s checkpoints; FlatMap ranked first and was backed up first (its per-operator times are not in its text).\n",
        c.faults_per_operator, c.checkpoint_interval_ms
    );
    let _ = writeln!(s, "| operator | faults | recoveries | mean | p99 | first output (mean) | rank |\n| --- | --- | --- | --- | --- | --- | --- |");
    for row in &c.rows {
        let rank = c
            .ranking
            .iter()
            .position(|o| *o == row.operator)
            .map_or(0, |i| i + 1);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.operator,
            row.faults_fired,
            row.recoveries,
            ms_or_s(row.mean_ms),
            ms_or_s(row.p99_ms),
            ms_or_s(row.first_output_mean_ms),
            rank
        );
    }
    let means: Vec<f64> = c.rows.iter().filter_map(|r| r.mean_ms).collect();
    let (lo, hi) = means
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let _ = writeln!(
        s,
        "\nRanking: {}. Backed up in the experiments below: **{}** (the paper's rule: the most critical operator a standby can back up; `paper --standby` takes flatmap, filter or keyed). Under restart-all every failure restarts the whole job, so recovery depends on how far the fault lies past the last checkpoint more than on the operator: the slowest operator's mean is {:.2}× the fastest's here.\n",
        c.ranking.join(" > "),
        c.backed_up,
        hi / lo.max(1e-9)
    );

    // Table 6.
    let l = &r.latency;
    let _ = writeln!(s, "## Table 6 — latency at 100 k, 500 k and 1 M records\n");
    let _ = writeln!(
        s,
        "Records fed at {:.0} k/s; end-to-end latency (source release → sink) per record; medians of {} run(s). The standby backs up `{}`. The standby runs in the job's process (`paper --isolation process` runs each incarnation in a process of its own; these tables do not use it). The paper: no visible difference below 1 M records, about +4 % with BQBS at 1 M.\n",
        l.rate / 1e3,
        l.repetitions,
        c.backed_up
    );
    let _ = writeln!(s, "| records | strategy | mean | (runs' means) | p50 | p99 | processing time | CPU (of cores) | engine memory |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for row in &l.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}–{} | {} | {} | {:.2} s | {:.1} % | {:.1} MiB |",
            row.records,
            row.config,
            us(row.mean_ms),
            us(row.mean_range_ms[0]),
            us(row.mean_range_ms[1]),
            us(row.p50_ms),
            us(row.p99_ms),
            row.processing_s,
            row.cpu_pct,
            row.engine_mib
        );
    }
    if !l.overheads.is_empty() {
        let _ = writeln!(
            s,
            "\nAgainst `none` at {} records:\n",
            l.overheads[0].records
        );
        let _ = writeln!(
            s,
            "| strategy | mean latency | p50 latency | p99 latency |\n| --- | --- | --- | --- |"
        );
        for o in &l.overheads {
            let _ = writeln!(
                s,
                "| {} | {} ({:+.1} µs) | {} ({:+.2} µs) | {} |",
                o.config,
                pct(o.mean_latency_pct),
                o.mean_latency_delta_us,
                pct(o.p50_latency_pct),
                o.p50_latency_delta_us,
                pct(o.p99_latency_pct)
            );
        }
    }
    let _ = writeln!(s, "\nThe workers spin while idle (the engine's default), so at this rate both cores are busy whatever the strategy (the CPU column) and latency is in microseconds; table 8 measures CPU with idle workers parking. Read each difference against the spread of a strategy's own runs (the runs' means).");
    let _ = writeln!(s);

    // Table 7.
    let fl = &r.failures;
    let _ = writeln!(s, "## Table 7 — recovery over successive failures\n");
    let _ = writeln!(
        s,
        "{} panics into `{}` spread over one run (medians of the runs per failure). Recovery: fault → back where it was. The paper: restart-all ~70 s per failure (reload ~30 s); BQBS 31 s at the 1st failure, 73 s at the 2nd, 157 s at the 4th.\n",
        fl.failures, c.backed_up
    );
    let _ = write!(s, "| strategy |");
    for i in 1..=fl.failures {
        let _ = write!(s, " failure {i} |");
    }
    let _ = writeln!(
        s,
        " cumulative | detection (mean) | recoveries no fault explains |"
    );
    let _ = writeln!(s, "|{}", " --- |".repeat(fl.failures as usize + 4));
    for row in &fl.rows {
        let _ = write!(s, "| {} |", row.config);
        for x in &row.per_failure_ms {
            let _ = write!(s, " {} |", ms_or_s(*x));
        }
        let _ = writeln!(
            s,
            " {} | {} | {} |",
            ms_or_s(row.cumulative_ms.last().copied().flatten()),
            ms_or_s(row.detect_mean_ms),
            row.unprovoked
        );
    }
    let _ = writeln!(s);
    for row in fl.rows.iter().filter(|r| !r.unexplained.is_empty()) {
        let _ = writeln!(s, "Recoveries no injected fault explains, {}:", row.config);
        for u in &row.unexplained {
            let _ = writeln!(s, "- {u}");
        }
        let _ = writeln!(s);
    }
    for v in &fl.versus_restart_all {
        let _ = writeln!(
            s,
            "- restart-all (30 s checkpoints) over {}: {:.0}× over the {} failures, {:.0}× at the closest one; its later failures over its earlier ones: {:.2}× ({:+.2} ms).",
            v.config, v.speedup_total, fl.failures, v.speedup_min, v.growth, v.growth_ms
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "With 30 s checkpoints no checkpoint completes within these runs, so each restart replays from the start — the cost the paper's interval implies on a short run.\n");

    // Table 8.
    let _ = writeln!(s, "## Table 8 — resources\n");
    let _ = writeln!(
        s,
        "The failure runs again ({} panics into `{}`; none without), with idle workers parking at once so that CPU is work rather than spinning. CPU from the 10 ms timeline buckets: from {:.0} ms to {:.0} ms around each fault (during failures), and the rest of the run (normal operation). Memory: peak RSS (the input is pre-generated in memory; engine = RSS − input). The paper: CPU about equal in normal operation, +8 % with BQBS during failures; memory 40.01 % (restart-all) against 42.70 % (BQBS).\n",
        r.failures.failures, r.criticality.backed_up, r.resources.window_ms[0], r.resources.window_ms[1]
    );
    let _ = writeln!(s, "| strategy | CPU normal | CPU during failures | CPU time (run) | peak RSS | engine | buffer queues (peak, one group) | memory (of the machine) |\n| --- | --- | --- | --- | --- | --- | --- | --- |");
    for row in &r.resources.rows {
        let _ = writeln!(
            s,
            "| {} | {} % | {} % | {} s | {} MiB | {} MiB | {} MiB | {} % |",
            row.config,
            f(row.cpu_normal_pct, 1),
            f(row.cpu_failure_pct, 1),
            f(row.cpu_seconds, 2),
            f(row.rss_mib, 1),
            f(row.engine_mib, 1),
            f(row.queue_peak_mib, 2),
            f(row.memory_pct, 2)
        );
    }
    state_table(r, &mut s);
    let _ = writeln!(s, "\n## Plots\n");
    for p in plots {
        let _ = writeln!(s, "![{p}]({p}.svg)\n");
    }
    let _ = writeln!(
        s,
        "Each run's report, log, interval log (`.hlog`) and timeline are in `runs/`; `results.json` holds every figure above."
    );
    s
}

/// The state-size axis: recovery of each strategy at each size.
fn state_table(r: &Results, s: &mut String) {
    let st = &r.state_sizes;
    if st.rows.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## State size — recovery against the keyed state\n");
    let _ = writeln!(
        s,
        "The `restore` benchmark's job (one `count` instance holds every key, 24 bytes a key archived): each key inserted once, then updates at 20 k records/s; once the state is built and covered (a checkpoint, or a recovery point the standby has — for a following standby, applied), the page cache is dropped (as root) and one panic goes into `count`. Every output is checked. restart-all: incremental checkpoints every 2 s, restored lazily from the mapped files; `bqbs-warm`: the standby restores the newest recovery point whole; `bqbs-warm-follow`: the standby has applied the points' deltas to its own copy and restores nothing. Each figure is the median of the row's runs; the range is theirs.\n"
    );
    let _ = writeln!(s, "| state | strategy | runs | first output | (range) | caught up | restore | replayed | restore read |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for row in &st.rows {
        let _ = writeln!(
            s,
            "| {} MB | {} | {} | {} | {}–{} | {} | {} | {} | {} |",
            row.state_mb,
            row.config,
            row.runs,
            ms_or_s(Some(row.first_output_ms)),
            ms_or_s(Some(row.first_output_range_ms[0])),
            ms_or_s(Some(row.first_output_range_ms[1])),
            ms_or_s(row.caught_up_ms),
            ms_or_s(Some(row.restore_ms)),
            row.replayed,
            row.restored_mb.map_or("–".into(), |m| format!("{m:.1} MB"))
        );
    }
}

/// What `experiments` prints when done.
pub fn summary(r: &Results) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "criticality: {} (backed up: {})",
        r.criticality.ranking.join(" > "),
        r.criticality.backed_up
    );
    for row in &r.failures.rows {
        let v: Vec<String> = row.per_failure_ms.iter().map(|x| ms_or_s(*x)).collect();
        let _ = writeln!(
            s,
            "recovery per failure, {:<16} {}",
            row.config,
            v.join("  ")
        );
    }
    for row in &r.state_sizes.rows {
        let _ = writeln!(
            s,
            "state {:>5} MB, {:<16} first output {}, caught up {}",
            row.state_mb,
            row.config,
            ms_or_s(Some(row.first_output_ms)),
            ms_or_s(row.caught_up_ms)
        );
    }
    for b in bars(r) {
        let _ = writeln!(
            s,
            "{}: {} (bar {}: {})",
            b.claim,
            b.ours,
            b.bar,
            if b.met { "met" } else { "NOT MET" }
        );
    }
    s
}
