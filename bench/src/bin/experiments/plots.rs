//! The report's pictures, each as SVG and PNG: latency CDFs, a recovery
//! timeline per strategy, recovery per successive failure, CPU and memory,
//! and the criticality ranking.

use crate::plan::Kind;
use crate::runs::Done;
use crate::tables::Results;
use anyhow::anyhow;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The font text is drawn with (shipped: a fresh machine may have none).
const FONT: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");
const SANS: &str = "sans-serif";

type R = anyhow::Result<()>;

fn e<E: std::fmt::Display>(x: E) -> anyhow::Error {
    anyhow!("drawing: {x}")
}

/// One colour per strategy, the same in every picture.
fn colour(key: &str) -> RGBColor {
    match key {
        "none" => RGBColor(90, 90, 90),
        k if k.starts_with("restart-all-30") => RGBColor(200, 40, 40),
        k if k.starts_with("restart-all") => RGBColor(230, 130, 30),
        "bqbs-warm" => RGBColor(30, 100, 200),
        "bqbs-hot" => RGBColor(20, 160, 90),
        "bqbs-warm-follow" => RGBColor(0, 170, 200),
        k if k.starts_with("bqbs") => RGBColor(140, 60, 180),
        _ => RGBColor(0, 0, 0),
    }
}

/// Draws `$body` (with the drawing area as `$a`) into `out/name.svg` and
/// `out/name.png`.
macro_rules! both {
    ($out:expr, $name:expr, $size:expr, |$a:ident| $body:expr) => {{
        let svg = $out.join(format!("{}.svg", $name));
        {
            let $a = SVGBackend::new(&svg, $size).into_drawing_area();
            $a.fill(&WHITE).map_err(e)?;
            $body?;
            $a.present().map_err(e)?;
        }
        let png = $out.join(format!("{}.png", $name));
        {
            let $a = BitMapBackend::new(&png, $size).into_drawing_area();
            $a.fill(&WHITE).map_err(e)?;
            $body?;
            $a.present().map_err(e)?;
        }
    }};
}

/// Draws every picture; their names (without extension).
pub fn draw_all(
    out: &Path,
    r: &Results,
    done: &[(crate::plan::Spec, Done)],
) -> anyhow::Result<Vec<String>> {
    plotters::style::register_font(SANS, FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the shipped font does not load"))?;
    let mut names = Vec::new();

    // Latency CDFs, from the interval logs of the largest size's first
    // run of each strategy.
    let size = done
        .iter()
        .filter_map(|(s, _)| match &s.kind {
            Kind::Latency { size, .. } => Some(*size),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut cdfs: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (s, d) in done {
        if let (Kind::Latency { config, size: n }, Some(h)) = (&s.kind, &d.hlog) {
            if *n == size && !cdfs.iter().any(|(k, _)| *k == config.key) {
                let h = crate::runs::read_hlog(h)?;
                cdfs.push((config.key.clone(), cdf(&h)));
            }
        }
    }
    if !cdfs.is_empty() {
        let title = format!(
            "End-to-end latency, {size} records at {:.0} k/s",
            r.latency.rate / 1e3
        );
        both!(out, "latency_cdf", (900, 560), |a| latency_cdf(
            &a, &title, &cdfs
        ));
        names.push("latency_cdf".into());
    }

    // Recovery timelines.
    let mut tls = Vec::new();
    for (s, d) in done {
        if let (Kind::Failures { config, .. }, Some(p)) = (&s.kind, &d.timeline) {
            tls.push((config.key.clone(), tandem_bench::live::read_timeline(p)?));
        }
    }
    if !tls.is_empty() {
        let h = 230 * tls.len() as u32 + 40;
        both!(out, "recovery_timeline", (1000, h), |a| timeline(&a, &tls));
        names.push("recovery_timeline".into());
    }

    // Recovery per successive failure.
    if !r.failures.rows.is_empty() {
        both!(out, "successive_failures", (900, 560), |a| successive(
            &a, r
        ));
        names.push("successive_failures".into());
    }

    both!(out, "resources", (1100, 520), |a| resources(&a, r));
    names.push("resources".into());

    if !r.criticality.rows.is_empty() {
        both!(out, "criticality", (900, 520), |a| criticality(
            &a,
            &r.criticality
        ));
        names.push("criticality".into());
    }
    Ok(names)
}

/// A log axis's label: no more digits than it needs.
fn short(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}").trim_end_matches('0').to_string()
    }
}

/// (latency µs, fraction of samples ≤ it), one point per recorded value.
fn cdf(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    let n = h.len().max(1) as f64;
    let mut acc = 0u64;
    h.iter_recorded()
        .map(|v| {
            acc += v.count_at_value();
            (
                (v.value_iterated_to() as f64 / 1e3).max(0.001),
                acc as f64 / n,
            )
        })
        .collect()
}

/// The top of a log axis from `lo` whose data reach `hi`, with room above
/// them for a legend: the data take the lower two thirds, and the legend
/// (upper left) covers no curve.
fn legend_headroom(lo: f64, hi: f64) -> f64 {
    hi * (hi / lo).powf(0.5)
}

/// The x of a percentile plot: 1 / (1 − q), on a log axis (HdrHistogram's
/// own plots: 90 % at 10, 99 % at 100, …).
fn tail_x(q: f64) -> f64 {
    1.0 / (1.0 - q.min(TAIL_MAX_Q))
}

/// The deepest percentile drawn: 99.9999 %.
const TAIL_MAX_Q: f64 = 0.999_999;

fn latency_cdf<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    title: &str,
    cdfs: &[(String, Vec<(f64, f64)>)],
) -> R
where
    DB::ErrorType: 'static,
{
    let lo = cdfs
        .iter()
        .flat_map(|(_, v)| v.first().map(|p| p.0))
        .fold(f64::MAX, f64::min)
        .max(0.01);
    let hi = cdfs
        .iter()
        .flat_map(|(_, v)| v.last().map(|p| p.0))
        .fold(0.0f64, f64::max)
        .max(lo * 10.0);
    // As far as the deepest percentile a strategy has samples for.
    let deepest = cdfs
        .iter()
        .flat_map(|(_, v)| v.iter().rev().nth(1).map(|p| tail_x(p.1)))
        .fold(100.0f64, f64::max)
        .min(tail_x(TAIL_MAX_Q));
    let top = legend_headroom(lo * 0.8, hi * 1.25);
    let mut c = ChartBuilder::on(a)
        .caption(title, (SANS, 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (1.0..deepest * 1.5).log_scale(),
            (lo * 0.8..top).log_scale(),
        )
        .map_err(e)?;
    c.configure_mesh()
        .x_desc("percentile (log scale of the tail: 1 / (1 − q))")
        .x_label_formatter(&|x| {
            let q = (1.0 - 1.0 / x) * 100.0;
            let digits = (x.log10().round() as usize).saturating_sub(2);
            format!("{q:.digits$} %")
        })
        .y_desc("latency (µs, log scale)")
        .y_label_formatter(&|v| short(*v))
        .label_style((SANS, 14))
        .axis_desc_style((SANS, 16))
        .draw()
        .map_err(e)?;
    for (key, pts) in cdfs {
        let col = colour(key);
        // A step per recorded value: the latency reached at each fraction.
        let mut line = Vec::with_capacity(pts.len() * 2);
        let mut prev_q = 0.0;
        for &(lat, q) in pts {
            if prev_q >= TAIL_MAX_Q {
                break;
            }
            line.push((tail_x(prev_q), lat));
            line.push((tail_x(q), lat));
            prev_q = q;
        }
        c.draw_series(LineSeries::new(line, col.stroke_width(2)))
            .map_err(e)?
            .label(key.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((SANS, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}

/// The window drawn around each fault, ms: before, after.
const AROUND_MS: (f64, f64) = (100.0, 400.0);

fn timeline<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    tls: &[(String, tandem_bench::live::Timeline)],
) -> R
where
    DB::ErrorType: 'static,
{
    let (title, rest) = a.split_vertically(40);
    title
        .titled(
            "Around each injected fault (red dash, at 0): sink throughput (line) and p99 latency (dots) in 10 ms buckets; grey dots: recoveries no fault explains",
            (SANS, 15),
        )
        .map_err(e)?;
    // One row per strategy, one column per fault; every panel on the same
    // axes, so that the panels compare.
    let cols = tls
        .iter()
        .map(|(_, t)| t.faults.len())
        .max()
        .unwrap_or(0)
        .max(1);
    // The throughput axis: a few times the median bucket (the steady
    // rate), so the dip to zero and the catch-up both show (a catch-up
    // burst above it is clipped, and says so).
    let mut rates: Vec<f64> = tls
        .iter()
        .flat_map(|(_, t)| t.buckets.iter().map(|b| b.rate / 1e3))
        .filter(|r| *r > 0.0)
        .collect();
    rates.sort_by(f64::total_cmp);
    let top = rates.get(rates.len() / 2).copied().unwrap_or(1.0).max(1.0) * 3.0;
    let p99: Vec<f64> = tls
        .iter()
        .flat_map(|(_, t)| t.buckets.iter().filter_map(|b| b.p99_us))
        .map(|u| u / 1e3)
        .collect();
    let p99_hi = p99.iter().copied().fold(1.0, f64::max) * 2.0;
    let p99_lo = p99
        .iter()
        .copied()
        .fold(f64::MAX, f64::min)
        .clamp(0.001, 1.0)
        / 2.0;
    let rows = rest.split_evenly((tls.len(), 1));
    for ((key, tl), row) in tls.iter().zip(rows) {
        let (label, panels) = row.split_vertically(22);
        label
            .titled(
                &format!("{key} (throughput clipped at {top:.0} k/s)"),
                (SANS, 14),
            )
            .map_err(e)?;
        let panels = panels.split_evenly((1, cols));
        for (i, p) in panels.iter().enumerate() {
            let Some(&(at, _)) = tl.faults.get(i) else {
                // Fewer faults recovered in this run than in another: the
                // panel says so rather than stay blank.
                let (_, h) = p.dim_in_pixel();
                p.draw(&Text::new(
                    format!("no fault {}: this run recovered {}", i + 1, tl.faults.len()),
                    (8, h as i32 / 2),
                    (SANS, 12).into_font().color(&RGBColor(110, 110, 110)),
                ))
                .map_err(e)?;
                continue;
            };
            let x0 = -AROUND_MS.0;
            let x1 = AROUND_MS.1;
            let mut c = ChartBuilder::on(p)
                .margin(4)
                .x_label_area_size(28)
                .y_label_area_size(if i == 0 { 48 } else { 8 })
                .right_y_label_area_size(if i + 1 == cols { 48 } else { 8 })
                .build_cartesian_2d(x0..x1, 0.0..top)
                .map_err(e)?
                .set_secondary_coord(x0..x1, (p99_lo..p99_hi).log_scale());
            c.configure_mesh()
                .x_desc(format!("ms from fault {}", i + 1))
                .y_desc(if i == 0 { "k records/s" } else { "" })
                .y_label_formatter(&|v| {
                    if i == 0 {
                        format!("{v:.0}")
                    } else {
                        String::new()
                    }
                })
                .x_labels(5)
                .x_label_formatter(&|x| format!("{x:.0}"))
                .label_style((SANS, 11))
                .axis_desc_style((SANS, 12))
                .draw()
                .map_err(e)?;
            c.configure_secondary_axes()
                .y_desc(if i + 1 == cols { "p99 (ms)" } else { "" })
                .y_label_formatter(&|v| {
                    if i + 1 == cols {
                        short(*v)
                    } else {
                        String::new()
                    }
                })
                .label_style((SANS, 11))
                .axis_desc_style((SANS, 12))
                .draw()
                .map_err(e)?;
            let near = |t: f64| t - at >= x0 && t - at <= x1;
            let col = colour(key);
            // A line through consecutive buckets only: where buckets are
            // missing (no sample was taken), the line breaks rather than
            // join across the gap.
            for seg in segments(tl.buckets.iter().filter(|b| near(b.t_ms)), tl.bucket_ms) {
                c.draw_series(LineSeries::new(
                    seg.iter().map(|b| (b.t_ms - at, (b.rate / 1e3).min(top))),
                    col.stroke_width(2),
                ))
                .map_err(e)?;
            }
            c.draw_secondary_series(tl.buckets.iter().filter(|b| near(b.t_ms)).filter_map(|b| {
                b.p99_us
                    .map(|u| Circle::new((b.t_ms - at, u / 1e3), 2, BLACK.filled()))
            }))
            .map_err(e)?;
            let dash = plotters::element::DashedPathElement::new(
                vec![(0.0, 0.0), (0.0, top)],
                6,
                4,
                RED.stroke_width(2),
            );
            c.draw_series(std::iter::once(dash)).map_err(e)?;
            for (u, _) in tl.unexplained.iter().filter(|(u, _)| near(*u)) {
                let grey = RGBColor(120, 120, 120);
                c.draw_series(std::iter::once(Circle::new(
                    (u - at, top * 0.95),
                    4,
                    grey.filled(),
                )))
                .map_err(e)?;
            }
        }
    }
    Ok(())
}

/// `buckets` (in time order) split where one is missing: consecutive
/// buckets are `width` ms apart.
fn segments<'a>(
    buckets: impl Iterator<Item = &'a tandem_bench::live::Bucket>,
    width: f64,
) -> Vec<Vec<&'a tandem_bench::live::Bucket>> {
    let mut out: Vec<Vec<&tandem_bench::live::Bucket>> = Vec::new();
    for b in buckets {
        match out.last_mut() {
            Some(seg) if seg.last().is_some_and(|p| b.t_ms - p.t_ms <= width * 1.5) => seg.push(b),
            _ => out.push(vec![b]),
        }
    }
    out
}

fn successive<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, r: &Results) -> R
where
    DB::ErrorType: 'static,
{
    let vals: Vec<f64> = r
        .failures
        .rows
        .iter()
        .flat_map(|row| row.per_failure_ms.iter().flatten().copied())
        .collect();
    let hi = vals.iter().copied().fold(1.0, f64::max) * 3.0;
    let lo = vals
        .iter()
        .copied()
        .fold(f64::MAX, f64::min)
        .clamp(0.01, 1.0)
        / 3.0;
    let n = r.failures.failures as f64;
    let mut c = ChartBuilder::on(a)
        .caption(
            "Recovery per successive failure (fault → back where it was)",
            (SANS, 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        // A column to the right of the last failure for the legend, which
        // then hides no point.
        .build_cartesian_2d(0.5..n + 1.9, (lo..hi).log_scale())
        .map_err(e)?;
    let last = n;
    c.configure_mesh()
        .x_desc("failure")
        .y_desc("recovery (ms, log scale)")
        .y_label_formatter(&|v| short(*v))
        .x_labels(r.failures.failures as usize + 2)
        .x_label_formatter(&move |x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && (1.0..=last).contains(&i) {
                format!("{i:.0}")
            } else {
                String::new()
            }
        })
        .label_style((SANS, 14))
        .axis_desc_style((SANS, 16))
        .draw()
        .map_err(e)?;
    for row in &r.failures.rows {
        let col = colour(&row.config);
        let pts: Vec<(f64, f64)> = row
            .per_failure_ms
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((i as f64 + 1.0, (*v)?)))
            .collect();
        c.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
            .map_err(e)?
            .label(row.config.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
        c.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, col.filled())))
            .map_err(e)?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((SANS, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}

/// Grouped bars: per group (x label), one bar per series.
fn bars<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    groups: &[String],
    series: &[(&str, RGBColor, Vec<Option<f64>>)],
) -> R
where
    DB::ErrorType: 'static,
{
    // The bars take the lower two thirds: the legend (upper right) and
    // the figures over the bars have the rest.
    let top = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().flatten().copied())
        .fold(1.0, f64::max)
        * 1.5;
    let n = groups.len() as f64;
    let mut c = ChartBuilder::on(a)
        .caption(title, (SANS, 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..top)
        .map_err(e)?;
    let labels = groups.to_vec();
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len())
        .x_label_formatter(&move |x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((SANS, 13))
        .axis_desc_style((SANS, 15))
        .draw()
        .map_err(e)?;
    let w = 0.8 / series.len() as f64;
    for (k, (label, col, vals)) in series.iter().enumerate() {
        let col = *col;
        let rects = vals.iter().enumerate().filter_map(|(i, v)| {
            let x0 = i as f64 - 0.4 + k as f64 * w;
            Some(Rectangle::new(
                [(x0, 0.0), (x0 + w * 0.95, (*v)?)],
                col.filled(),
            ))
        });
        c.draw_series(rects)
            .map_err(e)?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], col.filled()));
        let texts = vals.iter().enumerate().filter_map(|(i, v)| {
            let v = (*v)?;
            let x = i as f64 - 0.4 + (k as f64 + 0.1) * w;
            Some(Text::new(
                format!("{v:.1}"),
                (x, v + top * 0.01),
                (SANS, 11).into_font(),
            ))
        });
        c.draw_series(texts).map_err(e)?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((SANS, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}

fn resources<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, r: &Results) -> R
where
    DB::ErrorType: 'static,
{
    let (left, right) = a.split_horizontally(550);
    let rows = &r.resources.rows;
    let groups: Vec<String> = rows.iter().map(|x| x.config.clone()).collect();
    bars(
        &left,
        "CPU (% of the job's cores)",
        "strategy",
        "CPU (%)",
        &groups,
        &[
            (
                "normal operation",
                RGBColor(30, 100, 200),
                rows.iter().map(|x| x.cpu_normal_pct).collect(),
            ),
            (
                "around failures",
                RGBColor(200, 40, 40),
                rows.iter().map(|x| x.cpu_failure_pct).collect(),
            ),
        ],
    )?;
    bars(
        &right,
        "Memory: each run's peak, median over the runs (MiB)",
        "strategy",
        "MiB",
        &groups,
        &[
            (
                "engine (RSS − input)",
                RGBColor(90, 90, 90),
                rows.iter().map(|x| x.engine_mib).collect(),
            ),
            (
                "buffer queues (peak)",
                RGBColor(20, 160, 90),
                rows.iter().map(|x| x.queue_peak_mib).collect(),
            ),
        ],
    )
}

fn criticality<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, c: &crate::tables::Criticality) -> R
where
    DB::ErrorType: 'static,
{
    // Each operator with the faults that fired in it (a fault past the
    // end of an operator's input fires nowhere: the counts differ).
    let groups: Vec<String> = c
        .rows
        .iter()
        .map(|x| format!("{} ({} faults)", x.operator, x.faults_fired))
        .collect();
    bars(
        a,
        "Criticality: recovery under restart-all from panics injected into each operator",
        "operator (a panic injected into it)",
        "recovery, fault → caught up (ms)",
        &groups,
        &[
            (
                "mean",
                RGBColor(230, 130, 30),
                c.rows.iter().map(|x| x.mean_ms).collect(),
            ),
            (
                "mean + 95 % interval",
                RGBColor(240, 190, 120),
                c.rows
                    .iter()
                    .map(|x| Some(x.mean_ms? + x.ci95_ms.filter(|h| h.is_finite())?))
                    .collect(),
            ),
            (
                "max",
                RGBColor(200, 40, 40),
                c.rows.iter().map(|x| x.max_ms).collect(),
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_bench::live::Bucket;

    fn bucket(t_ms: f64) -> Bucket {
        Bucket {
            t_ms,
            rate: 1.0,
            p99_us: None,
            cpu_cores: 0.0,
            queue_bytes: 0,
        }
    }

    #[test]
    fn a_timeline_line_breaks_where_buckets_are_missing() {
        let b: Vec<Bucket> = [10.0, 20.0, 30.0, 80.0, 90.0, 200.0]
            .into_iter()
            .map(bucket)
            .collect();
        let segs = segments(b.iter(), 10.0);
        let ends: Vec<Vec<f64>> = segs
            .iter()
            .map(|s| s.iter().map(|b| b.t_ms).collect())
            .collect();
        assert_eq!(
            ends,
            [vec![10.0, 20.0, 30.0], vec![80.0, 90.0], vec![200.0]]
        );
        assert!(segments(std::iter::empty(), 10.0).is_empty());
    }

    #[test]
    fn the_latency_legend_sits_above_every_curve() {
        for (lo, hi) in [(0.5, 2.0e5), (1.0, 10.0), (0.01, 1.0e7)] {
            let top = legend_headroom(lo, hi);
            // Where the highest curve point sits on the axis, from 0 at
            // the bottom to 1 at the top: below the legend's third.
            let at = (hi / lo).ln() / (top / lo).ln();
            assert!(at <= 0.67, "{lo}..{hi}: the data reach {at:.2} of the axis");
        }
    }

    #[test]
    fn criticality_labels_each_operator_with_the_faults_that_fired_in_it() {
        let _ = plotters::style::register_font(SANS, FontStyle::Normal, FONT);
        let row = |op: &str, fired: u64| crate::tables::CritRow {
            operator: op.into(),
            faults_fired: fired,
            recoveries: fired as usize,
            unprovoked: 0,
            mean_ms: Some(20.0),
            ci95_ms: Some(5.0),
            max_ms: Some(30.0),
            missing_caught_up: 0,
            first_output_mean_ms: Some(10.0),
        };
        let c = crate::tables::Criticality {
            faults_per_operator: 10,
            checkpoint_interval_ms: 1000,
            rows: vec![row("flatmap", 10), row("map", 9)],
            ranking: Vec::new(),
            clear: false,
            backed_up: "flatmap".into(),
            why: String::new(),
        };
        let mut svg = String::new();
        {
            let a = SVGBackend::with_string(&mut svg, (900, 520)).into_drawing_area();
            criticality(&a, &c).unwrap();
            a.present().unwrap();
        }
        assert!(
            svg.contains("map (9 faults)") && svg.contains("flatmap (10 faults)"),
            "{svg}"
        );
        assert!(
            !svg.contains("faults per operator"),
            "one count for all: {svg}"
        );
    }
}
