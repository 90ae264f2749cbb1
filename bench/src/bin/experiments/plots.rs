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
        let h = 260 * tls.len() as u32 + 40;
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
        both!(out, "criticality", (900, 520), |a| criticality(&a, r));
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
    let mut c = ChartBuilder::on(a)
        .caption(title, (SANS, 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), 0.0..1.0)
        .map_err(e)?;
    c.configure_mesh()
        .x_desc("latency (µs, log scale)")
        .x_label_formatter(&|v| short(*v))
        .y_desc("fraction of records ≤ latency")
        .label_style((SANS, 14))
        .axis_desc_style((SANS, 16))
        .draw()
        .map_err(e)?;
    for (key, pts) in cdfs {
        let col = colour(key);
        c.draw_series(LineSeries::new(pts.iter().copied(), col.stroke_width(2)))
            .map_err(e)?
            .label(key.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((SANS, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}

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
            "Around each fault: sink throughput and p99 latency in 10 ms buckets (faults: red dashes)",
            (SANS, 20),
        )
        .map_err(e)?;
    let panels = rest.split_evenly((tls.len(), 1));
    for ((key, tl), p) in tls.iter().zip(panels) {
        let end = tl.buckets.last().map_or(1.0, |b| b.t_ms / 1e3).max(0.1);
        // The axis ends above the 99.5th percentile bucket: the last bucket
        // (the per-user summaries all at once) would flatten the rest.
        let mut rates: Vec<f64> = tl.buckets.iter().map(|b| b.rate / 1e3).collect();
        rates.sort_by(f64::total_cmp);
        let top = rates
            .get(rates.len().saturating_sub(1) * 995 / 1000)
            .copied()
            .unwrap_or(1.0)
            .max(1.0)
            * 1.3;
        let p99: Vec<f64> = tl
            .buckets
            .iter()
            .filter_map(|b| b.p99_us)
            .map(|u| u / 1e3)
            .collect();
        let p99_hi = p99.iter().copied().fold(1.0, f64::max) * 2.0;
        let p99_lo = p99
            .iter()
            .copied()
            .fold(f64::MAX, f64::min)
            .clamp(0.001, 1.0)
            / 2.0;
        let mut c = ChartBuilder::on(&p)
            .caption(
                format!("{key} — line: throughput (left axis, clipped at the top); dots: p99 (right axis)"),
                (SANS, 15),
            )
            .margin(8)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .right_y_label_area_size(70)
            .build_cartesian_2d(0.0..end, 0.0..top)
            .map_err(e)?
            .set_secondary_coord(0.0..end, (p99_lo..p99_hi).log_scale());
        c.configure_mesh()
            .x_desc("time since the job started (s)")
            .y_desc("records/s (thousands)")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .label_style((SANS, 12))
            .axis_desc_style((SANS, 13))
            .draw()
            .map_err(e)?;
        c.configure_secondary_axes()
            .y_desc("p99 latency (ms, log)")
            .y_label_formatter(&|v| short(*v))
            .label_style((SANS, 12))
            .axis_desc_style((SANS, 13))
            .draw()
            .map_err(e)?;
        let col = colour(key);
        c.draw_series(LineSeries::new(
            tl.buckets
                .iter()
                .map(|b| (b.t_ms / 1e3, (b.rate / 1e3).min(top))),
            col.stroke_width(1),
        ))
        .map_err(e)?;
        c.draw_secondary_series(tl.buckets.iter().filter_map(|b| {
            b.p99_us
                .map(|u| Circle::new((b.t_ms / 1e3, u / 1e3), 1, BLACK.filled()))
        }))
        .map_err(e)?;
        for (at, _) in &tl.faults {
            let x = at / 1e3;
            let dash = plotters::element::DashedPathElement::new(
                vec![(x, 0.0), (x, top)],
                6,
                4,
                RED.stroke_width(2),
            );
            c.draw_series(std::iter::once(dash)).map_err(e)?;
        }
    }
    Ok(())
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
        .build_cartesian_2d(0.5..n + 0.5, (lo..hi).log_scale())
        .map_err(e)?;
    c.configure_mesh()
        .x_desc("failure")
        .y_desc("recovery (ms, log scale)")
        .y_label_formatter(&|v| short(*v))
        .x_labels(r.failures.failures as usize)
        .x_label_formatter(&|x| format!("{x:.0}"))
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
    y_desc: &str,
    groups: &[String],
    series: &[(&str, RGBColor, Vec<Option<f64>>)],
) -> R
where
    DB::ErrorType: 'static,
{
    let top = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().flatten().copied())
        .fold(1.0, f64::max)
        * 1.2;
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
        "Memory, normal operation (MiB)",
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

fn criticality<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, r: &Results) -> R
where
    DB::ErrorType: 'static,
{
    let c = &r.criticality;
    let groups: Vec<String> = c.rows.iter().map(|x| x.operator.clone()).collect();
    bars(
        a,
        &format!(
            "Criticality: recovery under restart-all, {} faults per operator",
            c.faults_per_operator
        ),
        "recovery (ms)",
        &groups,
        &[
            (
                "mean",
                RGBColor(230, 130, 30),
                c.rows.iter().map(|x| x.mean_ms).collect(),
            ),
            (
                "p99",
                RGBColor(200, 40, 40),
                c.rows.iter().map(|x| x.p99_ms).collect(),
            ),
        ],
    )
}
