//! What a running job exposes: a Prometheus scrape during the run parses
//! as the text format (and passes `promtool check metrics` where promtool
//! is installed), its counters grow between two scrapes, the endpoint is
//! up before the job and answers `HEAD`; the interval log holds every
//! latency sample the report counts, in the format HdrHistogram's tools
//! read.

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

/// The value of the sample line `name{labels…} value` whose name is
/// exactly `name` (a histogram's `_count`, which the parser folds away).
fn line_value(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| {
            let (metric, value) = l.rsplit_once(' ')?;
            (metric.split('{').next() == Some(name)).then(|| value.parse().ok())?
        })
        .unwrap_or_else(|| panic!("{name} is exported"))
}

/// `promtool check metrics` on `body`, where promtool is installed
/// (`.ci/run` installs Debian's `prometheus` for it, and sets
/// `TANDEM_REQUIRE_PROMTOOL`: there a missing promtool fails); `None`
/// without it.
fn promtool(body: &str) -> Option<std::process::Output> {
    let spawned = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if std::env::var_os("TANDEM_REQUIRE_PROMTOOL").is_some() => {
            panic!("promtool: {e} (TANDEM_REQUIRE_PROMTOOL is set)")
        }
        Err(_) => return None,
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    Some(child.wait_with_output().unwrap())
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
    // Up before the job: the process's figures, and the job not yet
    // attached.
    let server = MetricsServer::start("127.0.0.1:0", "exported").unwrap();
    let before = scrape(server.addr());
    assert_eq!(line_value(&before, "tandem_job_attached"), 0.0, "{before}");
    assert!(line_value(&before, "process_cpu_seconds_total") > 0.0);
    let handle = paced_job("exported").start(&cfg).unwrap();
    server.attach(handle.watch());
    let src = Some(("operator", "numbers"));
    let records = |s: &prometheus_parse::Scrape| value(s, "tandem_source_records_total", src);
    let checkpoints =
        |s: &prometheus_parse::Scrape| value(s, "tandem_checkpoints_completed_total", None);
    // The first scrape once records flow; the second once 300 ms have
    // passed and checkpoints (every 50 ms) completed meanwhile — both
    // while the job runs (a loaded machine only makes it take longer).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut bodies = Vec::new();
    let first = loop {
        let body = scrape(server.addr());
        let s = parse(&body);
        if records(&s) > 0.0 {
            bodies.push(body);
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no record flowed");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300));
    let second = loop {
        let body = scrape(server.addr());
        let s = parse(&body);
        if checkpoints(&s) > checkpoints(&first) || handle.is_finished() {
            bodies.push(body);
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
    // Where the time goes, and the barriers' alignment, per task (one
    // task here, its barriers injected at its source: none to align).
    assert!(value(&second, "tandem_busy_seconds_total", out) > 0.0);
    assert_eq!(
        value(&second, "tandem_checkpoint_alignments_total", out),
        0.0
    );
    let count = |b: &str| line_value(b, "tandem_latency_seconds_count");
    assert!(count(&bodies[1]) > count(&bodies[0]), "the histogram grows");
    let recent_p99 = bodies[1]
        .lines()
        .find(|l| {
            l.starts_with("tandem_latency_recent_seconds{") && l.contains("quantile=\"0.99\"")
        })
        .and_then(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok());
    assert!(recent_p99.is_some_and(|v| v > 0.0), "{}", bodies[1]);
    assert_eq!(
        value(&second, "tandem_records_in_total", Some(("instance", "0"))),
        value(
            &second,
            "tandem_records_in_total",
            Some(("operator", "double"))
        ),
        "per operator and instance"
    );
    // Every sample of the job names it.
    assert!(second
        .samples
        .iter()
        .filter(|s| s.metric.starts_with("tandem_"))
        .all(|s| s.labels.get("job_name") == Some("exported")));
    // By the book, where promtool is there to say so.
    for b in &bodies {
        if let Some(o) = promtool(b) {
            assert!(
                o.status.success(),
                "promtool check metrics: {}{}\n{b}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    assert_eq!(report.source_records(), N);

    // After the job: its final figures, for as long as the server lives.
    let after = scrape(server.addr());
    assert_eq!(
        line_value(&after, "tandem_latency_seconds_count"),
        report.latency.len() as f64
    );
    // HEAD: the headers of a GET.
    let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
    write!(s, "HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("\r\n\r\n"), "no body: {resp}");
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

#[test]
fn busy_backpressure_watermarks_and_alignments_are_counted_where_they_happen() {
    const RECORDS: u64 = 60_000;
    let dir = tempdir("export-time");
    let job = JobBuilder::new("timed");
    job.default_parallelism(2);
    // One source feeding two slow instances through small rings: the
    // source waits on them (backpressure), they work (busy).
    job.source("numbers", |_| {
        IterSource((0..RECORDS).map(|n| (n, n * 1_000)))
    })
    .parallelism(1)
    .watermarks(tandem::time::Watermarks::bounded(Duration::ZERO).every(64))
    .rebalance()
    .map("slow", |n: u64| {
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_micros(5) {
            std::hint::spin_loop();
        }
        n
    })
    .for_each("drop", |_| {});
    let mut cp = CheckpointConfig::every(Duration::from_millis(20));
    cp.dir = Some(dir.join("checkpoints"));
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .pin(false)
        .ring_capacity(16)
        .checkpoint(cp);
    let report = job.build().unwrap().run(&cfg).unwrap();
    let op = |name: &str| report.operator(name).unwrap();
    let wall = report.elapsed.as_nanos() as u64;
    let (source, slow) = (op("numbers"), op("slow"));
    // Each instance's task: busy and backpressured within the run's wall
    // time, never more (each nanosecond counted once).
    for t in source.time.iter().chain(&slow.time) {
        assert!(
            t.busy_ns + t.backpressured_ns <= wall,
            "{t:?} over {wall} ns"
        );
    }
    assert!(slow.time.iter().all(|t| t.busy_ns > 0), "{:?}", slow.time);
    assert!(
        source.time[0].backpressured_ns > 0,
        "the source never waited on the slow instances: {:?}",
        source.time[0]
    );
    // Chained operators share their task's time.
    let drop = op("drop");
    assert_eq!(
        drop.time.iter().map(|t| t.busy_ns).collect::<Vec<_>>(),
        slow.time.iter().map(|t| t.busy_ns).collect::<Vec<_>>()
    );
    // Watermarks: the source's own, and its downstream's input ended.
    assert!(source.time[0].watermark.is_some(), "{:?}", source.time);
    assert!(
        slow.time.iter().all(|t| t.watermark.is_some()),
        "{:?}",
        slow.time
    );
    // Every completed checkpoint was aligned by every downstream instance
    // (a barrier completes a checkpoint only once every task forwarded
    // it), and no alignment took longer than the run.
    let completed = report.checkpoints.completed;
    assert!(completed > 0, "no checkpoint completed");
    for t in &slow.time {
        assert!(t.alignments >= completed, "{t:?}: {completed} checkpoints");
        assert!(t.alignment_ns >= t.alignment_last_ns && t.alignment_ns <= wall);
    }
    assert!(source.time.iter().all(|t| t.alignments == 0));
    std::fs::remove_dir_all(dir).unwrap();
}
