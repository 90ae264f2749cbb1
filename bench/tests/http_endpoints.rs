//! The HTTP endpoints (`--metrics-addr`, `--ui-addr`) survive any client
//! while a job runs: hostile requests (absurd, negative and overflowing
//! `Content-Length`s, chunked bodies, malformed request lines, heads too
//! large, a flood of headers), slow senders, and thousands of idle
//! connections. Through all of it a scrape and the view's state are still
//! answered, the run completes with exactly a quiet run's output, and its
//! peak memory stays within 64 MiB of the quiet run's. (One request with
//! `Content-Length: 1000000000000` used to abort the whole process.)

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PAPER: &str = env!("CARGO_BIN_EXE_paper");

const RECORDS: &str = "600000";

/// A run with both endpoints: its sorted output lines and its peak RSS
/// in MiB (the summary's), the run's endpoints given to `during` while it
/// runs.
fn run(dir: &std::path::Path, tag: &str, during: impl FnOnce(&str, &str)) -> (Vec<String>, f64) {
    let out = dir.join(format!("{tag}.jsonl"));
    let mut child = Command::new(PAPER)
        .args([
            "--records",
            RECORDS,
            "--rate",
            "100000",
            "--cores",
            "2",
            "--metrics-addr",
            "127.0.0.1:0",
            "--ui-addr",
            "127.0.0.1:0",
            "--output",
        ])
        .arg(&out)
        .arg("--run-dir")
        .arg(dir.join(format!("{tag}-run")))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut addr = |prefix: &str, suffix: &str| {
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        line.trim()
            .strip_prefix(prefix)
            .and_then(|l| l.strip_suffix(suffix))
            .unwrap_or_else(|| panic!("{tag}: {line}"))
            .to_string()
    };
    let metrics = addr("metrics at http://", "/metrics");
    let view = addr("live view at http://", "/");
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    during(&metrics, &view);
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = child.wait().unwrap();
    let stderr = drain.join().unwrap();
    assert!(status.success(), "{tag}: {status}\n{stderr}");
    let peak = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("peak rss"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{tag}: no peak rss in\n{stdout}"));
    let mut lines: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort_unstable();
    (lines, peak)
}

/// Sends `bytes`, then reads what comes back for a moment (whatever it
/// is: the endpoint must only not be hurt).
fn hostile(addr: &str, bytes: &[u8]) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET path`: the status line and body.
fn get(addr: &str, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// The requests the endpoints must survive, 50 of them (each sent to
/// both: 100).
fn requests() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = Vec::new();
    for len in [
        "1000000000000",
        "-1",
        "-9223372036854775808",
        "99999999999999999999999",
        "18446744073709551615",
        "0x10",
        "abc",
        "1, 2",
    ] {
        for method in ["POST", "GET", "PUT"] {
            v.push(
                format!("{method} /metrics HTTP/1.1\r\nContent-Length: {len}\r\n\r\nzz")
                    .into_bytes(),
            );
        }
    }
    for chunk in ["ffffffffffffffff", "-1", "zz", "7fffffffffffffff\r\nabc"] {
        v.push(
            format!("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}\r\n")
                .into_bytes(),
        );
        v.push(
            format!(
                "GET /api/state HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n{chunk}\r\n"
            )
            .into_bytes(),
        );
    }
    for line in [
        "GET",
        "GET /",
        "GET / HTTP/9.9",
        "\u{0}\u{1}\u{2}",
        "GET /\u{7f}\u{1b}[31m HTTP/1.1",
        "  / HTTP/1.1",
        "GET http://[::1 HTTP/1.1",
    ] {
        v.push(format!("{line}\r\n\r\n").into_bytes());
    }
    // A head far past any bound, a flood of headers, a megabyte of URL.
    v.push(format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(1 << 20)).into_bytes());
    v.push(
        format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            (0..5000)
                .map(|i| format!("H{i}: v\r\n"))
                .collect::<String>()
        )
        .into_bytes(),
    );
    v.push(format!("GET /{} HTTP/1.1\r\n\r\n", "x".repeat(1 << 20)).into_bytes());
    v.push(vec![0xff; 64 << 10]);
    v.truncate(50);
    while v.len() < 50 {
        v.push(b"POST / HTTP/1.1\r\nContent-Length: 1000000000000\r\n\r\n".to_vec());
    }
    v
}

#[test]
fn hostile_clients_and_thousands_of_connections_cost_the_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (quiet, quiet_peak) = run(dir.path(), "quiet", |_, _| {});
    assert!(quiet.len() > 300_000, "{} lines", quiet.len());
    let (hostile_out, hostile_peak) = run(dir.path(), "hostile", |metrics, view| {
        let t = Instant::now();
        // Slow senders: a byte every 50 ms, for as long as the rest
        // takes.
        let slow: Vec<_> = [metrics, view]
            .iter()
            .map(|a| {
                let a = a.to_string();
                std::thread::spawn(move || {
                    let Ok(mut s) = TcpStream::connect(&a) else {
                        return;
                    };
                    for b in b"GET /metrics HTTP/1.1\r\nX-Slow: "
                        .iter()
                        .chain([b'a'; 60].iter())
                    {
                        if s.write_all(&[*b]).is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                })
            })
            .collect();
        // 2,000 idle connections, 1,000 to each endpoint, held open.
        let mut idle = Vec::new();
        for i in 0..2000 {
            let a = if i % 2 == 0 { metrics } else { view };
            if let Ok(s) = TcpStream::connect(a) {
                idle.push(s);
            }
        }
        assert!(idle.len() >= 1900, "{} idle connections", idle.len());
        // 100 hostile requests.
        let reqs = requests();
        for r in &reqs {
            for a in [metrics, view] {
                hostile(a, r);
            }
        }
        // Answered through it all.
        let (status, body) = get(metrics, "/metrics").expect("a scrape after the flood");
        assert!(status.contains("200"), "{status}");
        assert!(body.contains("tandem_build_info"), "{body}");
        let (status, body) = get(view, "/api/state").expect("the view's state after the flood");
        assert!(status.contains("200"), "{status}");
        assert!(body.starts_with('{'), "{body}");
        drop(idle);
        for s in slow {
            let _ = s.join();
        }
        assert!(t.elapsed() < Duration::from_secs(120));
    });
    assert_eq!(hostile_out.len(), quiet.len(), "line count");
    assert!(hostile_out == quiet, "the hostile run's output differs");
    assert!(
        hostile_peak < quiet_peak + 64.0,
        "peak RSS {hostile_peak} MiB, the quiet run's {quiet_peak} MiB"
    );
}
