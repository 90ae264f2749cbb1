//! What a run writes beside its report: `--hlog` is an interval log whose
//! intervals hold every latency sample the report counts; `--timeline`
//! has 10 ms buckets whose counts add up to the sink's records and marks
//! each recovery's fault where it happened; `experiments` says what is
//! missing rather than failing halfway.

mod common;

use std::process::Command;

#[test]
fn a_paper_run_logs_every_latency_sample_and_marks_its_fault_on_the_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let (hlog, tl, report) = (
        dir.path().join("l.hlog"),
        dir.path().join("t.json"),
        dir.path().join("r.json"),
    );
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "60000", "--rate", "100000", "--cores", "2"])
        .args(["--strategy", "bqbs", "--fault", "panic@flatmap:30000"])
        .arg("--hlog")
        .arg(&hlog)
        .arg("--timeline")
        .arg(&tl)
        .arg("--report")
        .arg(&report)
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    common::assert_success(&o, "paper");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();

    // The interval log: well formed, every sample once.
    let text = std::fs::read(&hlog).unwrap();
    let mut samples = 0;
    let mut intervals = 0;
    for e in hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&text) {
        if let hdrhistogram::serialization::interval_log::LogEntry::Interval(i) =
            e.expect("a well-formed interval log")
        {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(i.encoded_histogram())
                .unwrap();
            let h: hdrhistogram::Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
                .deserialize(&mut std::io::Cursor::new(bytes))
                .unwrap();
            samples += h.len();
            intervals += 1;
        }
    }
    assert!(intervals >= 1);
    assert_eq!(samples, r["latency_ns"]["samples"].as_u64().unwrap());

    // The timeline: the buckets' counts are the sink's records; the fault
    // is marked where the report says it happened.
    let t: tandem_bench::live::Timeline =
        serde_json::from_slice(&std::fs::read(&tl).unwrap()).unwrap();
    assert!(t.buckets.len() > 20, "0.6 s in 10 ms buckets");
    let counted: f64 = t
        .buckets
        .windows(2)
        .map(|w| w[1].rate * (w[1].t_ms - w[0].t_ms) / 1e3)
        .sum::<f64>()
        + t.buckets[0].rate * t.buckets[0].t_ms / 1e3;
    let sink_records = r["records_out"].as_u64().unwrap() + r["summaries_out"].as_u64().unwrap();
    // (The first bucket's start is the sampler's, a little after the
    // job's: it is counted over its whole width, an overestimate.)
    let slack = t.buckets[0].rate * t.buckets[0].t_ms / 1e3 + 0.01 * sink_records as f64;
    assert!(
        (counted - sink_records as f64).abs() <= slack,
        "buckets count {counted}, the sink {sink_records}"
    );
    assert_eq!(t.faults.len(), 1);
    // The injected fault's recovery (on a loaded host an unprovoked one
    // may come first: the timeline lists it apart, as unexplained).
    let injected: Vec<_> = r["recovery"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["reason"] == "injected")
        .collect();
    assert_eq!(injected.len(), 1, "{}", r["recovery"]);
    let at = injected[0]["fault_at_ms"].as_f64().unwrap();
    assert_eq!((t.faults[0].0, t.faults[0].1.as_str()), (at, "takeover"));
    assert!(at > 0.0 && at < t.buckets.last().unwrap().t_ms);
}

#[test]
fn experiments_without_its_paper_binary_says_how_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .arg("--paper-bin")
        .arg(dir.path().join("missing"))
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--paper-bin") && err.contains("no such file"),
        "{err}"
    );
    assert!(!dir.path().join("out").exists(), "nothing written");

    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(["--profile", "huge"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "a usage error");
}

/// One `GET /metrics`; the body (`None`: nobody answers there any more).
fn scrape(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    Some(resp.split_once("\r\n\r\n")?.1.to_string())
}

/// The sum of every sample of metric `name` (any labels).
fn total(body: &str, name: &str) -> f64 {
    body.lines()
        .filter_map(|l| {
            let (metric, value) = l.rsplit_once(' ')?;
            (metric.split('{').next() == Some(name)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// Starts `paper` with `args` (its files in `dir`) and reads the address
/// its first line of standard error announces — `PREFIX ADDR SUFFIX`,
/// before the input is made; the rest of standard error stays to read.
fn paper_serving(
    args: &[&str],
    dir: &std::path::Path,
    prefix: &str,
    suffix: &str,
) -> (
    std::process::Child,
    String,
    std::io::BufReader<std::process::ChildStderr>,
) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(args)
        .arg("--run-dir")
        .arg(dir.join("run"))
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix(prefix)
        .and_then(|l| l.strip_suffix(suffix))
        .unwrap_or_else(|| panic!("first line: {line}"))
        .to_string();
    (child, addr, err)
}

#[test]
fn scrapes_of_a_faulted_paper_run_pass_promtool_and_show_the_takeover_and_checkpoints() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, err) = paper_serving(
        &[
            "--records",
            "400000",
            "--rate",
            "200000",
            "--cores",
            "2",
            "--strategy",
            "bqbs",
            "--standby",
            "keyed",
            "--checkpoint-interval-ms",
            "100",
            "--fault",
            "panic@keyed:150000",
            "--metrics-addr",
            "127.0.0.1:0",
            "--metrics-linger-s",
            "30",
        ],
        dir.path(),
        "metrics at http://",
        "/metrics",
    );
    // The rest of stderr, drained meanwhile (the linger line says the job
    // is over).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in err.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut bodies = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut ended = false;
    while !ended {
        assert!(std::time::Instant::now() < deadline, "the run did not end");
        std::thread::sleep(std::time::Duration::from_millis(150));
        while let Ok(l) = rx.try_recv() {
            ended |= l.contains("stay up for");
        }
        if let Some(b) = scrape(&addr) {
            bodies.push(b);
        }
    }
    // The final figures, after the job.
    let last = scrape(&addr).expect("the endpoint lingers after the job");
    let _ = child.kill();
    let _ = child.wait();
    let attached: Vec<&String> = bodies
        .iter()
        .filter(|b| total(b, "tandem_job_attached") == 1.0)
        .collect();
    assert!(
        attached.len() >= 2,
        "{} scrapes while the job ran",
        attached.len()
    );
    for b in bodies.iter().chain([&last]) {
        let Ok(mut p) = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
        else {
            assert!(
                std::env::var_os("TANDEM_REQUIRE_PROMTOOL").is_none(),
                "promtool is missing (TANDEM_REQUIRE_PROMTOOL is set)"
            );
            break;
        };
        p.stdin.take().unwrap().write_all(b.as_bytes()).unwrap();
        let o = p.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "promtool check metrics: {}{}\n{b}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let count = |b: &str| total(b, "tandem_latency_seconds_count");
    assert!(count(&last) > count(attached[0]), "the histogram grows");
    assert!(total(&last, "tandem_takeovers_total") >= 1.0, "{last}");
    assert!(total(&last, "tandem_recoveries_total") >= 1.0, "{last}");
    assert!(
        total(&last, "tandem_checkpoints_completed_total") >= 1.0,
        "{last}"
    );
    assert_eq!(total(&last, "tandem_source_records_total") as u64, 400_007);
}

#[test]
fn on_a_terminal_a_faults_line_goes_above_the_progress_bar_never_onto_it() {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: `openpty` writes the two descriptors into our integers; the
    // name, termios and window size are optional (null).
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    let ws = libc::winsize {
        ws_row: 40,
        ws_col: 100,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: `slave` is an open terminal; `ws` is ours.
    unsafe { libc::ioctl(slave, libc::TIOCSWINSZ, &ws) };
    // SAFETY: each descriptor is owned by the one File made from it.
    let (mut master, slave) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "600000", "--rate", "300000", "--cores", "2"])
        .args(["--strategy", "bqbs", "--standby", "keyed"])
        .args(["--fault", "panic@keyed:300000"])
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .stdout(std::process::Stdio::null())
        .stderr(slave)
        .spawn()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        // Until the child's side closes (EIO on Linux).
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&all).into_owned()
    });
    assert!(child.wait().unwrap().success());
    let out = reader.join().unwrap();
    assert!(out.contains("ETA"), "a bar was drawn: {out:?}");
    let at = out
        .find("thread 'tandem-")
        .unwrap_or_else(|| panic!("the fault's line: {out:?}"));
    // At the start of a line: after a newline, or after the bar was
    // cleared (the cursor moved to the start of a cleared line).
    let before = &out[..at];
    assert!(
        before.ends_with('\n') || before.ends_with("\x1b[1A") || before.ends_with("\x1b[2K"),
        "the line is glued onto something: {:?}",
        &before[before.len().saturating_sub(120)..]
    );
    assert!(out.contains(", 1 takeover"), "the bar counts it: {out:?}");
}

/// The live view's state, as the page reads it.
fn view_state(addr: &str) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(s, "GET /api/state HTTP/1.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    serde_json::from_str(resp.split_once("\r\n\r\n")?.1).ok()
}

#[test]
fn a_browser_shows_the_live_views_graph_takeover_and_checkpoint() {
    use std::io::BufRead;
    // Headless Chromium, where it is installed (`.ci/run` installs it and
    // sets TANDEM_REQUIRE_CHROMIUM: there a missing one fails).
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let Some(chromium) = chromium else {
        assert!(
            std::env::var_os("TANDEM_REQUIRE_CHROMIUM").is_none(),
            "no chromium (TANDEM_REQUIRE_CHROMIUM is set)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, err) = paper_serving(
        &[
            "--records",
            "2000000",
            "--rate",
            "250000",
            "--cores",
            "2",
            "--strategy",
            "bqbs",
            "--standby",
            "keyed",
            "--checkpoint-interval-ms",
            "200",
            "--fault",
            "panic@keyed:300000",
            "--ui-addr",
            "127.0.0.1:0",
            "--metrics-linger-s",
            "60",
        ],
        dir.path(),
        "live view at http://",
        "/",
    );
    std::thread::spawn(move || for _ in err.lines().map_while(Result::ok) {});
    // Until the takeover and a checkpoint happened.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let s = view_state(&addr);
        let seen = s.as_ref().is_some_and(|s| {
            s["takeovers"].as_u64() >= Some(1) && s["checkpoints"]["completed"].as_u64() >= Some(1)
        });
        if seen {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no takeover: {s:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let page = Command::new(chromium)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=3000",
            "--dump-dom",
        ])
        .arg(format!("http://{addr}/"))
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let dom = String::from_utf8_lossy(&page.stdout);
    // The graph: every operator a box, the standby's marked.
    for op in ["source", "flatmap", "filter", "map", "keyed", "sink"] {
        assert!(
            dom.contains(&format!("data-name=\"{op}\"")),
            "{op} is drawn: {dom}"
        );
    }
    // The keyed box's classes: it has a standby (and may be marked
    // backpressured besides).
    let keyed_class = dom
        .split("<g ")
        .find(|g| g.contains("data-name=\"keyed\""))
        .and_then(|g| g.split("class=\"").nth(1))
        .and_then(|c| c.split('"').next())
        .unwrap_or("");
    assert!(
        keyed_class.split(' ').any(|c| c == "standby"),
        "keyed's box: class {keyed_class:?}"
    );
    // The takeover, in the recoveries, and a checkpoint among the events.
    assert!(dom.contains("<td>takeover</td>"), "{dom}");
    assert!(dom.contains("checkpoint"), "{dom}");
    assert!(dom.contains("completed in"), "{dom}");
}

/// Headless Chromium's DOM of the live view at `addr`.
fn dom_of(chromium: &str, addr: &str) -> String {
    let page = Command::new(chromium)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--virtual-time-budget=2000",
            "--dump-dom",
        ])
        .arg(format!("http://{addr}/"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&page.stdout).into_owned()
}

/// What the page's header says of the job's state.
fn state_shown(dom: &str) -> String {
    dom.split("id=\"state\">")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .unwrap_or("")
        .to_string()
}

/// Chromium where it is installed; `None` (skipped) where not, unless
/// `TANDEM_REQUIRE_CHROMIUM` is set.
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("TANDEM_REQUIRE_CHROMIUM").is_none(),
            "no chromium (TANDEM_REQUIRE_CHROMIUM is set)"
        );
    }
    found
}

/// Before its job attaches (a program still making its input) the page
/// says the job is being prepared — it used to say "unreachable", its
/// script failing on fields the unattached state lacked — and once the
/// job has ended its elapsed time stays the job's own (it used to count
/// on while the endpoint lingered).
#[test]
fn the_live_view_says_preparing_before_the_job_and_keeps_the_jobs_time_after_it() {
    let Some(chromium) = chromium() else { return };
    let view = tandem::export::LiveView::start("127.0.0.1:0", "prepared").unwrap();
    let addr = view.addr().to_string();
    let before = view_state(&addr).expect("the state before the job");
    assert_eq!(before["phase"], "preparing", "{before}");
    let dom = dom_of(chromium, &addr);
    assert_eq!(state_shown(&dom), "preparing", "{dom}");
    assert!(dom.contains(">Preparing:"), "the page says so: {dom}");

    let job = tandem::JobBuilder::new("prepared");
    job.source("numbers", |_| {
        tandem::IterSource((0..200_000u64).map(|n| (n, n)))
    })
    .rate_limit(400_000.0)
    .map("double", |n: u64| n * 2)
    .for_each("drop", |_| {});
    let handle = job
        .build()
        .unwrap()
        .start(&tandem::RuntimeConfig::default().cores(1))
        .unwrap();
    view.attach(handle.watch());
    let report = handle.join().unwrap();
    view.ended();
    let ended = view_state(&addr).expect("the state after the job");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let later = view_state(&addr).expect("the state, later");
    assert_eq!(later["phase"], "ended", "{later}");
    assert_eq!(
        ended["elapsed_s"], later["elapsed_s"],
        "elapsed stays the job's time"
    );
    let shown = later["elapsed_s"].as_f64().unwrap();
    let ran = report.elapsed.as_secs_f64();
    assert!(
        (shown - ran).abs() < 1e-5,
        "the view shows {shown} s, the job ran {ran} s"
    );
    let dom = dom_of(chromium, &addr);
    assert_eq!(state_shown(&dom), "ended", "{dom}");
    assert!(dom.contains(">The job has ended after"), "{dom}");
}

/// While a faulted run goes on, what the view's state says holds: a
/// source's count never goes back (restart-all restores its position),
/// every operator of a backed-up chain is marked (not only the one named
/// by `--standby`), and every recovery of an injected fault is in the
/// history at its fault's time, marked injected.
#[test]
fn the_live_views_counts_chains_and_recoveries_hold_through_takeovers_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, err) = paper_serving(
        &[
            "--records",
            "1200000",
            "--rate",
            "300000",
            "--cores",
            "2",
            "--strategy",
            "bqbs",
            "--standby",
            "flatmap",
            "--checkpoint-interval-ms",
            "100",
            "--fault",
            "panic@flatmap:~3",
            "--fault",
            "panic@keyed:~3",
            "--ui-addr",
            "127.0.0.1:0",
            "--metrics-linger-s",
            "30",
        ],
        dir.path(),
        "live view at http://",
        "/",
    );
    std::thread::spawn(move || {
        use std::io::BufRead;
        for _ in err.lines().map_while(Result::ok) {}
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut high: std::collections::HashMap<String, u64> = Default::default();
    let last = loop {
        assert!(std::time::Instant::now() < deadline, "the run did not end");
        let Some(s) = view_state(&addr) else {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        };
        for o in s["operators"].as_array().unwrap() {
            if o["source"] == true {
                let name = o["name"].as_str().unwrap().to_string();
                let n = o["records"].as_u64().unwrap();
                let h = high.entry(name.clone()).or_default();
                assert!(n >= *h, "{name}'s count went back from {h} to {n}");
                *h = n;
            }
        }
        if s["phase"] == "ended" {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let marked: Vec<&str> = last["operators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["standby"] == true)
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    for op in ["source", "flatmap", "filter"] {
        assert!(
            marked.contains(&op),
            "{op} is in the backed-up chain: {marked:?}"
        );
    }
    assert!(!marked.contains(&"keyed"), "{marked:?}");
    let history = last["recovery_history"].as_array().unwrap();
    let injected: Vec<&serde_json::Value> =
        history.iter().filter(|r| r["injected"] == true).collect();
    assert_eq!(
        injected.len(),
        6,
        "every injected fault's recovery: {history:?}"
    );
    assert!(
        injected.iter().any(|r| r["kind"] == "takeover"),
        "{history:?}"
    );
    assert!(
        injected.iter().any(|r| r["kind"] == "restart-all"),
        "{history:?}"
    );
    let elapsed = last["elapsed_s"].as_f64().unwrap();
    let mut at: Vec<f64> = injected.iter().map(|r| r["t"].as_f64().unwrap()).collect();
    assert!(
        at.iter().all(|&t| t > 0.0 && t <= elapsed),
        "{at:?} in {elapsed} s"
    );
    at.dedup();
    assert_eq!(at.len(), 6, "each at its own fault's time: {at:?}");
}
