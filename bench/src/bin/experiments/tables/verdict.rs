//! The statistics the tables and verdicts rest on: medians, ranges,
//! 95 % intervals of a mean, and a bar's verdict on a figure's runs.

use serde::Serialize;

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

pub(super) fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// Student's t at 97.5 % for `df` degrees of freedom: a two-sided 95 %
/// interval of a mean.
fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        d if d <= T.len() => T[d - 1],
        _ => 1.96,
    }
}

/// The mean of `v` and the half-width of its 95 % confidence interval
/// (infinite for a single value).
pub(super) fn mean_ci(v: &[f64]) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return Some((mean, f64::INFINITY));
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, t975(v.len() - 1) * (var / n).sqrt()))
}

/// The smallest and largest of `v` (`None`: empty).
pub fn spread(v: &[f64]) -> Option<[f64; 2]> {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    (!v.is_empty()).then(|| {
        v.iter()
            .fold([f64::INFINITY, f64::NEG_INFINITY], |[lo, hi], &x| {
                [lo.min(x), hi.max(x)]
            })
    })
}

/// A bar judged on every run it rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every run meets the bar.
    Met,
    /// No run meets it.
    NotMet,
    /// The runs disagree: the bar lies within this machine's noise.
    WithinNoise,
}

impl Verdict {
    /// The verdict on a figure whose runs gave `runs`, against the bar
    /// `bar` (`higher`: the figure must be at least the bar; else at
    /// most): the runs' median against the bar, with a band of noise
    /// around it — the runs' own range, the range of the baseline's runs
    /// the figure is taken against (`baseline_noise`, in the figure's
    /// units), and at least a quarter of the bar — inside
    /// which the verdict is *within noise*. A ratio (`log`) is judged on
    /// a log scale. A figure near its bar is thus within noise in every
    /// campaign, rather than met in one and not met in the next.
    pub fn judge(runs: &[f64], bar: f64, higher: bool, log: bool, baseline_noise: f64) -> Verdict {
        let v: Vec<f64> = runs.iter().copied().filter(|x| x.is_finite()).collect();
        let (Some(m), Some([lo, hi])) = (median(v.clone()), spread(&v)) else {
            return Verdict::NotMet;
        };
        let f = |x: f64| if log { x.max(1e-12).ln() } else { x };
        let quarter = if log { 1.25f64.ln() } else { 0.25 * bar.abs() };
        let baseline = if log {
            (1.0 + baseline_noise.max(0.0)).ln()
        } else {
            baseline_noise
        };
        let band = (f(hi) - f(lo)).max(baseline).max(quarter);
        let margin = if higher { f(m) - f(bar) } else { f(bar) - f(m) };
        if margin > band {
            Verdict::Met
        } else if margin < -band {
            Verdict::NotMet
        } else {
            Verdict::WithinNoise
        }
    }

    /// Met when either is, not met when both are not.
    pub fn either(self, other: Verdict) -> Verdict {
        match (self, other) {
            (Verdict::Met, _) | (_, Verdict::Met) => Verdict::Met,
            (Verdict::NotMet, Verdict::NotMet) => Verdict::NotMet,
            _ => Verdict::WithinNoise,
        }
    }

    /// `Some(true)` met, `Some(false)` not met, `None` within the noise.
    pub fn met(self) -> Option<bool> {
        match self {
            Verdict::Met => Some(true),
            Verdict::NotMet => Some(false),
            Verdict::WithinNoise => None,
        }
    }

    pub fn words(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::NotMet => "not met",
            Verdict::WithinNoise => "within noise",
        }
    }
}

/// One claim of the paper, its figure, this campaign's, and the bar Tandem
/// holds itself to, judged on each run.
#[derive(Clone, Debug, Serialize)]
pub struct Judged {
    #[serde(rename = "name")]
    pub claim: String,
    pub paper: &'static str,
    /// The figure in words (the median over the runs, and their spread).
    pub ours: String,
    pub bar: &'static str,
    /// The median of `runs`.
    pub value: f64,
    /// The figure of each run (repetition) the verdict rests on.
    pub runs: Vec<f64>,
    pub verdict: Verdict,
    /// As `verdict`: `null` when the runs disagree.
    pub met: Option<bool>,
}

/// The operator the paper's table 5 found most critical, backed up when
/// no operator is clearly most critical here.
pub const PAPER_CHOICE: &str = "flatmap";
