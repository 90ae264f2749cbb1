//! A job's latency as an HdrHistogram interval log ([`IntervalLog`]).

use crate::metrics::LatencyHistogram;
use crate::runtime::JobWatch;
use crate::sys::output::{OutputFile, Staged};
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, IntervalLogWriterError};
use hdrhistogram::serialization::V2DeflateSerializer;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Writes a job's latency as an HdrHistogram interval log (`.hlog`: the
/// format of HdrHistogram's `HistogramLogWriter`, V2 compressed
/// histograms, values in nanoseconds, `Interval_Max` in milliseconds),
/// one interval per `every` (a second, as is usual), from a thread of its
/// own; [`IntervalLog::finish`] writes the last, partial one and puts the
/// log in place (it is written beside its path and renamed there, by the
/// discipline of [`crate::sys::output`]: a device or FIFO is refused
/// before anything is written, never replaced). HdrHistogram's
/// own tools read it (`HistogramLogProcessor -i FILE -outputValueUnitRatio 1000000`
/// prints milliseconds).
pub struct IntervalLog {
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<io::Result<(u64, Staged)>>>,
    path: PathBuf,
    staging: PathBuf,
}

impl IntervalLog {
    /// Checks `path` as an output and starts logging beside it.
    pub fn start(path: &Path, watch: JobWatch, every: Duration) -> io::Result<IntervalLog> {
        let staged = OutputFile::check(path)?.stage()?;
        let staging = staged.staging_path().to_path_buf();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("tandem-hlog".into())
            .spawn(move || write_log(staged, &watch, every, &stopped))?;
        Ok(IntervalLog {
            stop,
            thread: Some(thread),
            path: path.to_path_buf(),
            staging,
        })
    }

    /// Where the log is written until [`IntervalLog::finish`] puts it in
    /// place (removed if the log is dropped unfinished).
    pub fn staging_path(&self) -> &Path {
        &self.staging
    }

    /// Writes the last interval (call it once the job has ended, so that
    /// every sink's last samples are in), puts the log in place and
    /// returns how many intervals it holds.
    pub fn finish(mut self) -> io::Result<u64> {
        let _ = self.stop.send(());
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => {
                let (n, staged) = r.map_err(|e| {
                    io::Error::new(e.kind(), format!("{}: {e}", self.path.display()))
                })?;
                staged.commit()?;
                Ok(n)
            }
            _ => Err(io::Error::other(format!(
                "the interval log writer of {} panicked",
                self.path.display()
            ))),
        }
    }
}

impl Drop for IntervalLog {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write_log(
    file: Staged,
    watch: &JobWatch,
    every: Duration,
    stopped: &mpsc::Receiver<()>,
) -> io::Result<(u64, Staged)> {
    let mut out = BufWriter::new(file);
    let mut ser = V2DeflateSerializer::new();
    let start = SystemTime::now();
    let t0 = Instant::now();
    let hist_err = |e| match e {
        IntervalLogWriterError::IoError(e) => e,
        IntervalLogWriterError::SerializeError(e) => {
            io::Error::other(format!("writing an interval: {e}"))
        }
    };
    writeln!(out, "#[Logged with Tandem {}]", env!("CARGO_PKG_VERSION"))?;
    writeln!(out, "#[Histogram log format version 1.3]")?;
    drop(
        IntervalLogWriterBuilder::new()
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut out, &mut ser)?,
    );
    writeln!(
        out,
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
    )?;
    let mut log = IntervalLogWriterBuilder::new()
        .with_max_value_divisor(1e6)
        .begin_log_with(&mut out, &mut ser)?;
    let (mut prev, mut prev_t) = (LatencyHistogram::new(), Duration::ZERO);
    let mut intervals = 0;
    loop {
        let last = !matches!(
            stopped.recv_timeout(every.saturating_sub(t0.elapsed() - prev_t)),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        // Whole milliseconds: the format prints seconds to three decimals,
        // so rounded starts and lengths still tile the run exactly.
        let now_t = Duration::from_millis(t0.elapsed().as_millis() as u64);
        let cum = watch.latency();
        let interval = cum.since(&prev);
        log.write_histogram(interval.inner(), prev_t, now_t - prev_t, None)
            .map_err(hist_err)?;
        intervals += 1;
        (prev, prev_t) = (cum, now_t);
        if last {
            break;
        }
    }
    drop(log);
    let staged = out.into_inner().map_err(|e| e.into_error())?;
    Ok((intervals, staged))
}
