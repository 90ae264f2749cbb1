//! One placement rule for `.standby()`: right before the call that builds
//! the operator. A window marked on its stream before `key_by`, on the
//! keyed stream, or on the windowed stream gets the same standby, and its
//! output under takeovers is the clean run's.

mod common;

use common::{cores, quiet_injected_panics, Faults};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::time::{Watermarks, Windows};
use tandem::{IterSource, JobBuilder, RuntimeConfig, StandbyConfig};

const MS: u64 = 1_000_000;
const N: u64 = 4_000;

#[derive(Clone, Copy, Debug)]
enum Mark {
    BeforeKeyBy,
    OnKeyed,
    OnWindowed,
    Nowhere,
}

/// `(key, window start, count)` per window, as the sink collects them.
type Counts = Arc<Mutex<Vec<(u64, u64, u64)>>>;

/// Per key, 50 ms tumbling windows counted, the window marked at `mark`.
fn job(mark: Mark, out: &Counts) -> tandem::Job {
    let job = JobBuilder::new("placement");
    job.default_parallelism(2);
    let src = job
        .source("recs", |i| {
            let me = i.instance as u64;
            IterSource(
                (0..N)
                    .filter(move |k| k % 2 == me)
                    .map(|k| ((k % 7, k * MS / 4), k * MS / 4)),
            )
        })
        .watermarks(Watermarks::bounded(Duration::ZERO));
    let src = match mark {
        Mark::BeforeKeyBy => src.standby(),
        _ => src,
    };
    let keyed = src.key_by(|r: &(u64, u64)| r.0);
    let keyed = match mark {
        Mark::OnKeyed => keyed.standby(),
        _ => keyed,
    };
    let windowed = keyed.window(Windows::tumbling(Duration::from_millis(50)));
    let windowed = match mark {
        Mark::OnWindowed => windowed.standby(),
        _ => windowed,
    };
    let o = Arc::clone(out);
    windowed
        .process("count", |k: &u64, w, recs: &[(u64, u64)], out| {
            out((*k, w.start, recs.len() as u64))
        })
        .results()
        .for_each("out", move |r| o.lock().unwrap().push(r.value));
    job.build().unwrap()
}

#[test]
fn a_window_marked_before_key_by_on_the_keyed_or_the_windowed_stream_gets_one_standby() {
    quiet_injected_panics();
    let clean = {
        let out = Arc::new(Mutex::new(Vec::new()));
        job(Mark::Nowhere, &out)
            .run(&RuntimeConfig::default().cores(cores()))
            .unwrap();
        let mut v = std::mem::take(&mut *out.lock().unwrap());
        v.sort();
        v
    };
    assert!(clean.len() > 100);
    for mark in [Mark::BeforeKeyBy, Mark::OnKeyed, Mark::OnWindowed] {
        let out = Arc::new(Mutex::new(Vec::new()));
        let j = job(mark, &out);
        assert_eq!(j.standby_operators(), ["count"], "{mark:?}");
        let faults = Faults::panics("count", &[(0, 500), (1, 1_200)]);
        let report = j
            .run(
                &RuntimeConfig::default()
                    .cores(cores())
                    .standby(StandbyConfig::default())
                    .probes(Arc::new(faults.clone())),
            )
            .unwrap();
        assert!(faults.all_fired(), "{mark:?}");
        let takeovers = report.standby.as_ref().map_or(0, |s| s.takeovers);
        assert!(takeovers >= 2, "{mark:?}: {takeovers} takeovers");
        let mut got = std::mem::take(&mut *out.lock().unwrap());
        got.sort();
        assert!(
            got == clean,
            "{mark:?}: the output differs from the clean run's"
        );
    }
}
