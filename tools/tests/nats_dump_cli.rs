//! `tandem nats dump` against servers that are not what they claim, and
//! outputs that are not what they seem:
//!
//! - a "server" that streams garbage (bytes without a newline, a 200 MB
//!   `INFO` line, a valid `INFO` and then garbage, a message larger than
//!   any NATS server sends) is refused within seconds, in bounded memory,
//!   with status 2 and an error that says so — measured on the child:
//!   its exit, its time and its peak RSS (`wait4`);
//! - credentials in the address never reach an error;
//! - `--out` naming an existing file is left byte-identical when the dump
//!   fails, with nothing beside it; `--out` naming a FIFO is refused by
//!   name, at once, unopened.
//!
//! With `nats-server` on the `PATH` (else these say so and pass, unless
//! `TANDEM_REQUIRE_NATS` is set), a real stream is dumped through the
//! guard whole and in order, to standard output and to `--out`, and a
//! dump whose reader goes away (`| head -c 100`) fails.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tandem::sys::process::{Child, ChildExit, Exit};

/// The most a refused dump may take.
const QUICK: Duration = Duration::from_secs(10);
/// The most a refused dump may hold.
const SMALL: u64 = 64 << 20;

/// A fresh directory for one test, removed when it ends (the `TempDir`).
struct Dir(
    PathBuf,
    // Held for its drop, which removes the directory.
    #[allow(dead_code)] tempfile::TempDir,
);

impl Dir {
    fn new(name: &str) -> Self {
        let t = tempfile::Builder::new()
            .prefix(&format!("tandem-nats-dump-{name}-"))
            .tempdir()
            .unwrap();
        Dir(t.path().to_path_buf(), t)
    }

    /// What it holds, sorted.
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

/// A loopback "server" that greets every connection with `greeting`,
/// then writes `filler` over and over until `budget` bytes of it are out,
/// then `tail`, then holds the connection — for up to a minute, until the
/// peer goes or the test ends.
struct Garbage {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What a [`Garbage`] server sends.
#[derive(Clone, Copy)]
struct Script {
    greeting: &'static [u8],
    filler: &'static [u8],
    budget: u64,
    tail: &'static [u8],
}

impl Script {
    /// `greeting`, then `filler` without end.
    const fn endless(greeting: &'static [u8], filler: &'static [u8]) -> Script {
        Script {
            greeting,
            filler,
            budget: u64::MAX,
            tail: b"",
        }
    }
}

impl Garbage {
    fn start(script: Script) -> Garbage {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            for c in listener.incoming() {
                if halt.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut c) = c else { continue };
                let halt = halt.clone();
                std::thread::spawn(move || {
                    let until = Instant::now() + Duration::from_secs(60);
                    let mut sent = 0u64;
                    let _ = c.write_all(script.greeting);
                    while !halt.load(Ordering::Relaxed) && Instant::now() < until {
                        if sent >= script.budget {
                            let _ = c.write_all(script.tail);
                            // Held open until the peer goes.
                            let _ = c.read(&mut [0u8; 1]);
                            return;
                        }
                        if c.write_all(script.filler).is_err() {
                            return;
                        }
                        sent += script.filler.len() as u64;
                    }
                });
            }
        });
        Garbage {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Garbage {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How a run of `tandem` ended, and what it cost.
struct Ran {
    exit: ChildExit,
    took: Duration,
    stderr: String,
}

/// Runs `tandem ARGS` (standard output to `stdout`, else discarded),
/// killing it after 30 s.
fn tandem(args: &[&str], stdout: Stdio) -> Ran {
    let err = std::env::temp_dir().join(format!(
        "tandem-nats-dump-err-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(std::fs::File::create(&err).unwrap());
    let t = Instant::now();
    let mut child = Child::spawn(cmd).unwrap();
    let exit = match child.wait_timeout(Duration::from_secs(30)).unwrap() {
        Some(e) => e,
        None => {
            child.kill().unwrap();
            panic!("tandem {args:?} still ran after 30 s");
        }
    };
    let took = t.elapsed();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_file(&err);
    Ran { exit, took, stderr }
}

/// An error: status 2, one `error: …` holding `needle`, no panic.
fn assert_error(r: &Ran, needle: &str, what: &str) {
    assert_eq!(r.exit.exit, Exit::Code(2), "{what}: {}", r.stderr);
    assert!(r.stderr.starts_with("error: "), "{what}: {}", r.stderr);
    assert!(r.stderr.contains(needle), "{what}: {}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
}

static AS: [u8; 65536] = [b'a'; 65536];
static FFS: [u8; 65536] = [0xff; 65536];
static SPACES: [u8; 65536] = [b' '; 65536];
const INFO: &[u8] = b"INFO {\"server_id\":\"x\",\"version\":\"2.10.0\",\"max_payload\":1048576,\"headers\":true,\"proto\":1}\r\n";

#[test]
fn a_server_that_streams_garbage_is_refused_quickly_in_bounded_memory() {
    let cases: [(&str, Script, &str); 5] = [
        (
            "endless bytes, no newline",
            Script::endless(b"", &AS),
            "not a NATS server?",
        ),
        (
            "a 200 MB INFO line",
            Script {
                greeting: b"INFO {\"x\":\"",
                filler: &AS,
                budget: 200 << 20,
                tail: b"\"}\r\n",
            },
            "the server sent a protocol line over 64 KiB: not a NATS server?",
        ),
        (
            "INFO, then garbage without a newline",
            Script::endless(INFO, &FFS),
            "not a NATS server?",
        ),
        (
            "INFO, then an endless PING line",
            Script::endless(
                b"INFO {\"server_id\":\"x\",\"max_payload\":1048576}\r\nPING",
                &SPACES,
            ),
            "the server sent a protocol line over 64 KiB: not a NATS server?",
        ),
        (
            "INFO, then a 1 GiB message",
            Script::endless(
                b"INFO {\"server_id\":\"x\",\"max_payload\":1048576}\r\nMSG a 1 1073741824\r\n",
                &AS,
            ),
            "over the limit of 64 MiB",
        ),
    ];
    for (what, script, needle) in cases {
        let g = Garbage::start(script);
        let port = g.port;
        let url = format!("nats://127.0.0.1:{port}/S");
        let r = tandem(&["nats", "dump", &url], Stdio::null());
        drop(g);
        eprintln!(
            "{what}: {}, {:.2} s, peak RSS {:.1} MiB: {}",
            r.exit.exit,
            r.took.as_secs_f64(),
            r.exit.peak_rss_bytes as f64 / f64::from(1 << 20),
            r.stderr.trim_end()
        );
        assert_error(&r, needle, what);
        let named = format!("error: nats://127.0.0.1:{port}: ");
        assert!(r.stderr.starts_with(&named), "{what}: {}", r.stderr);
        assert!(r.took < QUICK, "{what}: took {:?}", r.took);
        assert!(
            r.exit.peak_rss_bytes < SMALL,
            "{what}: peak RSS {} bytes",
            r.exit.peak_rss_bytes
        );
    }
}

#[test]
fn credentials_in_the_address_never_reach_the_error() {
    // Nothing listens on port 1; a garbage server; a bad address.
    let g = Garbage::start(Script::endless(b"", b"HTTP/1.1 400 Bad Request\r\n\r\n"));
    let garbage = format!("nats://user:secret@127.0.0.1:{}/S", g.port);
    for (url, needle) in [
        ("nats://user:secret@127.0.0.1:1/S", "nats://127.0.0.1:1: "),
        (garbage.as_str(), "not a NATS server?"),
        ("nats://user:secret@127.0.0.1:1", "no /NAME"),
        ("nats://user:secret@127.0.0.1:1/S.T", "NAME must be"),
        (
            "nats://user:secret@127.0.0.1:1,other:secret2@127.0.0.1:2/S",
            "different credentials",
        ),
        ("nats://secret@127.0.0.1:1,:secret@/S", "no HOST"),
    ] {
        let r = tandem(&["nats", "dump", url], Stdio::null());
        assert_error(&r, needle, url);
        assert!(!r.stderr.contains("secret"), "{url}: {}", r.stderr);
    }
}

#[test]
fn out_keeps_an_existing_file_when_the_dump_fails() {
    let d = Dir::new("keep");
    let f = d.0.join("dump.txt");
    let before = b"an earlier dump\nwhich must survive\n".to_vec();
    std::fs::write(&f, &before).unwrap();
    let g = Garbage::start(Script::endless(b"", &AS));
    let garbage = format!("nats://127.0.0.1:{}/MISSING", g.port);
    for url in ["nats://127.0.0.1:1/MISSING", garbage.as_str()] {
        let r = tandem(
            &["nats", "dump", url, "--out", f.to_str().unwrap()],
            Stdio::null(),
        );
        assert_error(&r, "nats://127.0.0.1:", url);
        assert_eq!(std::fs::read(&f).unwrap(), before, "{url}");
        assert_eq!(d.names(), ["dump.txt"], "{url}");
    }
}

#[test]
fn out_naming_a_fifo_is_refused_by_name_at_once() {
    let d = Dir::new("fifo");
    let fifo = d.0.join("fifo");
    let ok = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    // A server that would answer: the refusal must come first.
    let g = Garbage::start(Script::endless(b"", &AS));
    let url = format!("nats://127.0.0.1:{}/S", g.port);
    let r = tandem(
        &["nats", "dump", &url, "--out", fifo.to_str().unwrap()],
        Stdio::null(),
    );
    assert_error(&r, "is a FIFO", "--out FIFO");
    assert!(r.took < Duration::from_secs(5), "took {:?}", r.took);
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(d.names(), ["fifo"]);
    let r = tandem(&["nats", "dump", &url, "--out", "/dev/null"], Stdio::null());
    assert_error(&r, "is a character device", "--out /dev/null");
}

// ---- Against a real nats-server --------------------------------------

/// A real `nats-server` on a free loopback port: the connector's tests'
/// own helper.
#[path = "../../connectors/nats/tests/common/mod.rs"]
mod common;

/// `records` records of `size` bytes each (`<n>:` then dots) in three
/// partitions of stream `S`, and their end markers; the lines a dump
/// must print, in stream order.
fn produce(server: &str, records: u64, size: usize) -> Vec<u8> {
    use tandem_nats::stream::{ensure_stream, Producer, StreamSpec};
    let client = tandem_nats::Client::connect(server, Duration::from_secs(5)).unwrap();
    let mut expected = Vec::new();
    client
        .block(async {
            ensure_stream(client.js(), &StreamSpec::new("S")).await?;
            let mut p = Producer::new(&client, "S");
            let mut next = [0u64; 3];
            for n in 0..records {
                let k = (n % 3) as usize;
                let mut line = format!("{n}:").into_bytes();
                line.resize(size.max(line.len()), b'.');
                expected.extend_from_slice(&line);
                expected.push(b'\n');
                p.record(k as u32, next[k], None, line.into()).await?;
                next[k] += 1;
                // In stream order: one publish acknowledged at a time.
                p.flush().await?;
            }
            for (k, &n) in next.iter().enumerate() {
                p.end(k as u32, n).await?;
            }
            p.flush().await
        })
        .unwrap();
    expected
}

#[test]
fn a_real_stream_is_dumped_whole_and_in_order_through_the_guard() {
    let Some((_server, addr)) = common::start(&[]) else {
        return;
    };
    let expected = produce(&addr, 300, 20);
    let d = Dir::new("whole");
    let url = format!("nats://{}/S", addr);

    // To standard output (a file here).
    let out = d.0.join("stdout.txt");
    let r = tandem(
        &["nats", "dump", &url],
        Stdio::from(std::fs::File::create(&out).unwrap()),
    );
    assert_eq!(r.exit.exit, Exit::Code(0), "{}", r.stderr);
    assert!(r.stderr.contains("300 messages from"), "{}", r.stderr);
    assert_eq!(std::fs::read(&out).unwrap(), expected);

    // To --out, replacing what was there, nothing left beside it.
    let f = d.0.join("dump.txt");
    std::fs::write(&f, b"old").unwrap();
    let r = tandem(
        &["nats", "dump", &url, "--out", f.to_str().unwrap()],
        Stdio::null(),
    );
    assert_eq!(r.exit.exit, Exit::Code(0), "{}", r.stderr);
    assert_eq!(std::fs::read(&f).unwrap(), expected);
    assert_eq!(d.names(), ["dump.txt", "stdout.txt"]);

    // A stream that does not exist: an error, and --out untouched.
    let missing = format!("nats://{}/MISSING", addr);
    let r = tandem(
        &["nats", "dump", &missing, "--out", f.to_str().unwrap()],
        Stdio::null(),
    );
    assert_error(&r, "MISSING", "a missing stream");
    assert_eq!(std::fs::read(&f).unwrap(), expected);
    assert_eq!(d.names(), ["dump.txt", "stdout.txt"]);
}

#[test]
fn a_dump_whose_reader_goes_away_fails() {
    let Some((_server, addr)) = common::start(&[]) else {
        return;
    };
    // 2 MB: far more than a pipe holds.
    produce(&addr, 10_000, 200);
    let url = format!("nats://{}/S", addr);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.args(["nats", "dump", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let mut child = Child::spawn(cmd).unwrap();
    // `| head -c 100`: read 100 bytes, then go.
    let mut stdout = child.std_mut().stdout.take().unwrap();
    let mut first = [0u8; 100];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let exit = child.wait_timeout(Duration::from_secs(30)).unwrap();
    let mut err = String::new();
    let mut stderr = child.std_mut().stderr.take().unwrap();
    stderr.read_to_string(&mut err).unwrap();
    let exit = exit.expect("the dump ended once its reader went");
    eprintln!(
        "| head -c 100: {}, {:.2} s: {}",
        exit.exit,
        t.elapsed().as_secs_f64(),
        err.trim_end()
    );
    assert!(first.starts_with(b"0:"), "{}", first.escape_ascii());
    assert_eq!(exit.exit, Exit::Code(2), "{err}");
    assert!(err.contains("standard output closed after"), "{err}");
    assert!(!err.contains("messages from"), "{err}");
}

/// `tandem nats gc` deletes what a finished part left in the store — its
/// objects and its staged epochs — and leaves a part still running as it
/// is.
#[test]
fn gc_clears_finished_parts_and_leaves_running_ones_alone() {
    use tandem_nats::store::CheckpointStore;
    let Some((_server, addr)) = common::start(&[]) else {
        return;
    };
    let client = tandem_nats::Client::connect(&addr, Duration::from_secs(5)).unwrap();
    let store = CheckpointStore::open(&client, "CK", 1).unwrap();
    let never = || false;
    let day = Duration::from_secs(86_400);
    // p0 finished; p1 still runs; both left objects and a staged epoch.
    let done = store.claim("g", "p0", "m", day, &never).unwrap();
    let done = store.replicator("g", "p0", done, day);
    let running = store.claim("g", "p1", "m", day, &never).unwrap();
    client
        .block(async {
            done.finish(Vec::new()).await.unwrap();
            for part in ["p0", "p1"] {
                store.put(&format!("g/{part}/chk/3/a.snap"), b"x").await?;
                store.put(&format!("g/{part}/chk/4/b.snap"), b"y").await?;
                store
                    .stage(&format!("g.{part}.c00000000000000000004.t"), b"z")
                    .await?;
            }
            Ok::<_, tandem_nats::Error>(())
        })
        .unwrap();
    let url = format!("nats://{addr}/CK");
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["nats", "gc", &url, "g"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("g/p0: finished, 2 objects: 2 objects and its staged epochs deleted"),
        "{text}"
    );
    assert!(
        text.contains("g/p1: not finished, 2 objects: left as it is"),
        "{text}"
    );
    let left = client.block(store.names_under("g/")).unwrap();
    assert_eq!(left, ["g/p1/chk/3/a.snap", "g/p1/chk/4/b.snap"]);
    let staged = |part: &str| {
        client
            .block(store.staged(&format!("g.{part}.c00000000000000000004.t")))
            .unwrap()
    };
    assert_eq!(staged("p0"), None);
    assert_eq!(staged("p1").as_deref(), Some(&b"z"[..]));
    drop(running);
}
