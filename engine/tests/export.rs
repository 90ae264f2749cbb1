//! What a running job exposes: a Prometheus scrape during the run parses
//! as the text format and its counters grow between two scrapes; the
//! interval log holds every latency sample the report counts, in the
//! format HdrHistogram's tools read.

mod common;

use common::*;
use std::io::{Read, Write};
use std::time::Duration;
use tandem::export::{IntervalLog, MetricsServer};
use tandem::{CheckpointConfig, IterSource, JobBuilder, RuntimeConfig};

const N: u64 = 30_000;

fn paced_job(name: &str) -> tandem::Job {
    let job = JobBuilder::new(name);
    job.default_parallelism(1);
    job.source("numbers", |_| IterSource((0..N).map(|n| (n, n))))
        // 1.5 s of input: time for two scrapes while it runs.
        .rate_limit(N as f64 / 1.5)
        .map("double", |n: u64| n * 2)
        .for_each("drop", |_| {});
    job.build().unwrap()
}

/// One `GET /metrics`, as a scraper sends it; the body.
fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_string()
}

fn value(scrape: &prometheus_parse::Scrape, name: &str, label: Option<(&str, &str)>) -> f64 {
    let s = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .unwrap_or_else(|| panic!("{name} {label:?} is exported"));
    match s.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
        prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{name}: {other:?}"),
    }
}

fn parse(body: &str) -> prometheus_parse::Scrape {
    let lines = body.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).expect("the Prometheus text format")
}

#[test]
fn a_scrape_during_a_run_parses_and_its_counters_grow_between_two_scrapes() {
    let dir = tempdir("export-metrics");
    let mut cp = CheckpointConfig::every(Duration::from_millis(50));
    cp.dir = Some(dir.join("checkpoints"));
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .pin(false)
        .checkpoint(cp);
    let handle = paced_job("exported").start(&cfg).unwrap();
    let server = MetricsServer::serve("127.0.0.1:0", handle.watch()).unwrap();
    let src = Some(("operator", "numbers"));
    let records = |s: &prometheus_parse::Scrape| value(s, "tandem_records_in_total", src);
    let checkpoints =
        |s: &prometheus_parse::Scrape| value(s, "tandem_checkpoints_completed_total", None);
    // The first scrape once records flow; the second once 300 ms have
    // passed and checkpoints (every 50 ms) completed meanwhile — both
    // while the job runs (a loaded machine only makes it take longer).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let first = loop {
        let s = parse(&scrape(server.addr()));
        if records(&s) > 0.0 {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no record flowed");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300));
    let second = loop {
        let s = parse(&scrape(server.addr()));
        if checkpoints(&s) > checkpoints(&first) || handle.is_finished() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let during = !handle.is_finished();
    let report = handle.join().unwrap();
    assert!(
        during,
        "the second scrape came after the job had ended: a machine too slow for this test"
    );

    let (a, b) = (records(&first), records(&second));
    assert!(a > 0.0 && b > a, "records in: {a} then {b}");
    assert!(checkpoints(&second) > checkpoints(&first));
    let out = Some(("operator", "double"));
    assert!(
        value(&second, "tandem_records_out_total", out)
            > value(&first, "tandem_records_out_total", out)
    );
    assert!(
        value(&second, "tandem_latency_samples_total", None)
            > value(&first, "tandem_latency_samples_total", None)
    );
    assert!(
        value(
            &second,
            "tandem_latency_seconds",
            Some(("quantile", "0.99"))
        ) > 0.0
    );
    // Every sample names the job.
    assert!(second
        .samples
        .iter()
        .all(|s| s.labels.get("job_name") == Some("exported")));
    assert_eq!(report.source_records(), N);

    // Anything but the metrics path is not found.
    let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
    write!(s, "GET /other HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    drop(server);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_interval_log_holds_every_sample_the_report_counts_one_interval_per_period() {
    use base64::Engine;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let dir = tempdir("export-hlog");
    let path = dir.join("latency.hlog");
    let cfg = RuntimeConfig::default().cores(cores()).pin(false);
    let handle = paced_job("logged").start(&cfg).unwrap();
    let log = IntervalLog::start(&path, handle.watch(), Duration::from_millis(200)).unwrap();
    let report = handle.join().unwrap();
    let intervals = log.finish().unwrap();
    assert!(intervals >= 5, "1.5 s in 200 ms intervals: {intervals}");

    let text = std::fs::read(&path).unwrap();
    assert!(text.starts_with(b"#[Logged with Tandem"));
    let (mut read, mut samples, mut start) = (0, 0, false);
    let mut last_end = Duration::ZERO;
    for e in IntervalLogIterator::new(&text) {
        match e.expect("a well-formed interval log") {
            LogEntry::StartTime(_) => start = true,
            LogEntry::BaseTime(_) => {}
            LogEntry::Interval(i) => {
                read += 1;
                assert!(i.start_timestamp() >= last_end, "intervals in order");
                last_end = i.start_timestamp() + i.duration();
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(i.encoded_histogram())
                    .expect("base64");
                let h: hdrhistogram::Histogram<u64> = Deserializer::new()
                    .deserialize(&mut std::io::Cursor::new(bytes))
                    .unwrap();
                samples += h.len();
            }
        }
    }
    assert!(start, "the log says when it started");
    assert_eq!(read, intervals);
    assert_eq!(
        samples,
        report.latency.len(),
        "no sample lost or counted twice"
    );
    assert_eq!(samples, N);
    std::fs::remove_dir_all(dir).unwrap();
}
