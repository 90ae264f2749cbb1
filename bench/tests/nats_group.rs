//! `paper` over NATS JetStream with real servers, started here: a group
//! whose member is killed (`SIGKILL`) or stopped past its lease and the
//! output's duplicate window (`SIGSTOP`), whose server is killed and
//! restarted, and a three-server cluster that loses its busiest server,
//! each publishes exactly the output of a clean one-member run; a finished
//! group leaves nothing in the object store; a member started for another
//! job than its group's is refused before it reads a record.
//!
//! The servers are Debian's `nats-server` (`.ci/run` installs it). Without
//! it these tests say so and pass, unless `TANDEM_REQUIRE_NATS` is set, as
//! CI sets it: there a missing server fails them.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PAPER: &str = env!("CARGO_BIN_EXE_paper");

fn nats_server() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
            .map(|d| d.join("nats-server"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("TANDEM_REQUIRE_NATS").is_none(),
            "nats-server is not installed (apt-get install nats-server) and TANDEM_REQUIRE_NATS is set"
        );
        eprintln!("SKIPPED: nats-server is not installed (apt-get install nats-server)");
    }
    found
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `nats-server` process, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    /// Its monitoring port (cluster members only).
    http: Option<u16>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_listening(port: u16) {
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "nats-server on {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_server(bin: &Path, dir: &Path) -> Server {
    start_server_on(bin, dir, free_port())
}

/// A server on `port` with its store in `dir` (a restart keeps both).
fn start_server_on(bin: &Path, dir: &Path, port: u16) -> Server {
    let child = Command::new(bin)
        .args(["-js", "-sd"])
        .arg(dir)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port);
    Server {
        child,
        port,
        http: None,
    }
}

/// The client connections a server holds now (its `/varz`).
fn connections(s: &Server) -> u64 {
    use std::io::{Read, Write};
    let Some(http) = s.http else { return 0 };
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", http)) else {
        return 0;
    };
    let _ = c.write_all(b"GET /varz HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut text = String::new();
    let _ = c.read_to_string(&mut text);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["connections"].as_u64())
        .unwrap_or(0)
}

/// Three servers in one cluster, JetStream on each.
fn start_cluster(bin: &Path, dir: &Path) -> Vec<Server> {
    let ports: Vec<(u16, u16, u16)> = (0..3)
        .map(|_| (free_port(), free_port(), free_port()))
        .collect();
    let routes: Vec<String> = ports
        .iter()
        .map(|(_, r, _)| format!("nats-route://127.0.0.1:{r}"))
        .collect();
    let servers: Vec<Server> = ports
        .iter()
        .enumerate()
        .map(|(i, &(port, route, http))| {
            let conf = dir.join(format!("n{i}.conf"));
            let store = dir.join(format!("n{i}"));
            std::fs::write(
                &conf,
                format!(
                    "server_name: n{i}\nlisten: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http}\njetstream {{ store_dir: \"{}\" }}\ncluster {{ name: tandem\n listen: 127.0.0.1:{route}\n routes: [{}] }}\n",
                    store.display(),
                    routes.join(", ")
                ),
            )
            .unwrap();
            let child = Command::new(bin)
                .arg("-c")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            Server {
                child,
                port,
                http: Some(http),
            }
        })
        .collect();
    for s in &servers {
        wait_listening(s.port);
    }
    servers
}

fn tempdir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tandem-nats-{tag}-"))
        .tempdir()
        .unwrap()
}

fn paper(args: &[&str]) -> Command {
    let mut c = Command::new(PAPER);
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn run_ok(mut c: Command, what: &str) -> String {
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{err}",
        out.status
    );
    err
}

/// Publishes `records` records in `parts` partitions to `stream`, retrying
/// while a cluster elects its JetStream leader.
fn produce(server: &str, stream: &str, parts: u32, records: u64, replicas: usize) {
    let t = Instant::now();
    loop {
        let out = paper(&[
            "--produce",
            &format!("nats://{server}/{stream}"),
            "--partitions",
            &parts.to_string(),
            "--records",
            &records.to_string(),
            "--replicas",
            &replicas.to_string(),
        ])
        .output()
        .unwrap();
        if out.status.success() {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "--produce failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn member(server: &str, out: &str, group: &str, work: &Path, replicas: usize) -> Command {
    let mut c = paper(&[
        "--source",
        &format!("nats://{server}/IN"),
        "--sink",
        &format!("nats://{server}/{out}"),
        "--group",
        group,
        "--checkpoint-store",
        &format!("nats://{server}/CK"),
        "--lease-ms",
        "1000",
        "--checkpoint-interval-ms",
        "200",
        "--replicas",
        &replicas.to_string(),
    ]);
    c.arg("--run-dir").arg(work);
    c
}

/// The stream's lines, sorted.
fn dump(server: &str, stream: &str) -> Vec<String> {
    let client = tandem_nats::Client::connect(server, Duration::from_secs(10)).unwrap();
    let mut out = Vec::new();
    // A cluster that lost a server may still be electing the stream's
    // leader.
    let t = Instant::now();
    while let Err(e) = tandem_nats::stream::dump(&client, stream, &mut out) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "dump of {stream}: {e}"
        );
        out.clear();
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut lines: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

fn assert_same(clean: &[String], faulted: &[String], what: &str) {
    let mut dup = faulted.to_vec();
    dup.dedup();
    assert_eq!(
        dup.len(),
        faulted.len(),
        "{what}: {} duplicate lines",
        faulted.len() - dup.len()
    );
    assert_eq!(
        clean.len(),
        faulted.len(),
        "{what}: {} lines, the clean run {}",
        faulted.len(),
        clean.len()
    );
    assert!(
        clean == faulted,
        "{what}: the lines differ from the clean run's"
    );
}

/// Starts three members of `group`; `fault` is applied to the first one
/// seen running a partition, once it has had time to checkpoint; waits for
/// all, the others having to succeed.
fn group_run(
    server: &str,
    out: &str,
    group: &str,
    work: &Path,
    extra: &[&str],
    fault: impl FnOnce(u32),
) {
    let logs: Vec<PathBuf> = (0..3)
        .map(|i| work.join(format!("{group}-m{i}.err")))
        .collect();
    let mut members: Vec<Child> = logs
        .iter()
        .map(|log| {
            let mut c = member(server, out, group, work, 1);
            c.args(extra);
            c.stderr(std::fs::File::create(log).unwrap());
            c.spawn().unwrap()
        })
        .collect();
    let t = Instant::now();
    let victim = loop {
        let running = logs.iter().position(|l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .contains(": runs p")
        });
        if let Some(i) = running {
            break i;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no member ran a partition"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(700));
    fault(members[victim].id());
    for (i, m) in members.iter_mut().enumerate() {
        let status = m.wait().unwrap();
        let log = std::fs::read_to_string(&logs[i]).unwrap_or_default();
        if i != victim {
            assert!(status.success(), "member {i}: {status}\n{log}");
        }
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// A server with 40 000 records in 4 partitions, and the sorted output of
/// a clean one-member run over them.
fn clean_run(tag: &str) -> Option<(tempfile::TempDir, Server, String, Vec<String>)> {
    let bin = nats_server()?;
    let dir = tempdir(tag);
    let s = start_server(&bin, &dir.path().join("js"));
    let server = format!("127.0.0.1:{}", s.port);
    produce(&server, "IN", 4, 40_000, 1);
    run_ok(
        member(&server, "CLEAN", "clean", dir.path(), 1),
        "the clean member",
    );
    let clean = dump(&server, "CLEAN");
    assert!(clean.len() > 40_000, "{} lines", clean.len());
    Some((dir, s, server, clean))
}

/// The live objects the group's parts left in the checkpoint store, and
/// the messages left in its stream of staged epochs.
fn objects_left(server: &str, group: &str) -> (Vec<String>, u64) {
    let client = tandem_nats::Client::connect(server, Duration::from_secs(10)).unwrap();
    let store = tandem_nats::store::CheckpointStore::open(&client, "CK", 1).unwrap();
    let objects = client
        .block(store.names_under(&format!("{group}/")))
        .unwrap();
    let staged = client.block(async {
        let mut s = client.js().get_stream("CK-staged").await.unwrap();
        s.info().await.unwrap().state.messages
    });
    (objects, staged)
}

#[test]
fn a_member_killed_with_sigkill_changes_nothing_in_the_output() {
    let Some((dir, _s, server, clean)) = clean_run("kill") else {
        return;
    };
    group_run(&server, "KILLED", "killed", dir.path(), &[], |pid| {
        signal(pid, "-KILL")
    });
    assert_same(&clean, &dump(&server, "KILLED"), "a member killed");
    // Finished: no checkpoint, staged epoch or takeover's orphan is left.
    let (left, staged) = objects_left(&server, "killed");
    assert!(left.is_empty(), "left in the store: {left:?}");
    assert_eq!(staged, 0, "staged epochs left behind");
}

/// A part's final commit fails (an injected `commit` fault at the end of
/// its input): the member does not take the part as done — its job fails,
/// the group runs the part again from its last checkpoint — and the
/// output is exactly the clean run's. (A failure the sink's client
/// thread reports only when waited for takes the same path: the engine's
/// `final_commit` test.)
#[test]
fn a_failed_final_commit_is_run_again_and_published_exactly_once() {
    let Some((dir, _s, server, clean)) = clean_run("final-commit") else {
        return;
    };
    let (out, fault) = ("FC", "commit@sink:final");
    let mut m = member(&server, out, "fc", dir.path(), 1);
    m.args(["--fault", fault]);
    let o = m.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{fault}: {}\n{err}", o.status);
    let line: serde_json::Value =
        serde_json::from_slice(o.stdout.trim_ascii()).expect("the member's JSON line");
    assert_eq!(line["faults_fired"], 1, "{fault}: {err}");
    assert!(
        line["given_up"].as_array().is_some_and(|g| !g.is_empty()),
        "{fault}: the failed part is given up and run again: {line}"
    );
    assert_same(&clean, &dump(&server, out), fault);
}

#[test]
fn a_member_stopped_past_the_duplicate_window_publishes_nothing_twice() {
    let Some((dir, _s, server, clean)) = clean_run("stop") else {
        return;
    };
    // The output stream forgets ids after 2 s; the member sleeps 5 s,
    // five lease times: its partitions are taken over meanwhile, and
    // whatever it had committed and not yet published is published by
    // its successor before it wakes.
    group_run(
        &server,
        "STOPPED",
        "stopped",
        dir.path(),
        &["--dup-window-s", "2"],
        |pid| {
            signal(pid, "-STOP");
            std::thread::sleep(Duration::from_secs(5));
            signal(pid, "-CONT");
        },
    );
    assert_same(&clean, &dump(&server, "STOPPED"), "a member stopped");
}

#[test]
fn a_group_rides_out_its_server_killed_and_restarted() {
    let Some(bin) = nats_server() else { return };
    let dir = tempdir("restart");
    let store = dir.path().join("js");
    let s = start_server(&bin, &store);
    let port = s.port;
    let server = format!("127.0.0.1:{port}");
    produce(&server, "IN", 4, 200_000, 1);
    run_ok(
        member(&server, "CLEAN", "clean", dir.path(), 1),
        "the clean member",
    );
    let clean = dump(&server, "CLEAN");
    let mut s = Some(s);
    group_run(&server, "OUT", "restarted", dir.path(), &[], |_| {
        // The server dies mid-run (SIGKILL: no goodbye) and comes back
        // 2 s later on its port with its store.
        drop(s.take());
        std::thread::sleep(Duration::from_secs(2));
        s = Some(start_server_on(&bin, &store, port));
    });
    assert_same(&clean, &dump(&server, "OUT"), "the server restarted");
    drop(s);
}

/// Runs `paper` with `args`; it must fail, saying `says`, before it reads
/// a record.
fn refused(args: &[String], says: &str) {
    let out = Command::new(PAPER).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} was accepted:\n{err}");
    assert!(err.contains(says), "{args:?}: {err}");
    assert!(!err.contains(": runs p"), "{args:?} ran a part:\n{err}");
}

#[test]
fn a_member_started_for_another_job_than_its_groups_is_refused() {
    let Some(bin) = nats_server() else { return };
    let dir = tempdir("identity");
    let s = start_server(&bin, &dir.path().join("js"));
    let server = format!("127.0.0.1:{}", s.port);
    produce(&server, "IN", 2, 2_000, 1);
    produce(&server, "IN2", 2, 2_000, 1);
    let url = |name: &str| format!("nats://{server}/{name}");
    let flags = |source: &str, sink: Option<&str>, store: Option<&str>| {
        let mut v = vec![
            "--source".to_string(),
            url(source),
            "--group".into(),
            "g".into(),
            "--lease-ms".into(),
            "500".into(),
        ];
        match (sink, store) {
            (Some(sink), Some(store)) => v.extend([
                "--sink".into(),
                url(sink),
                "--checkpoint-store".into(),
                url(store),
            ]),
            _ => v.push("--consume-only".into()),
        }
        v
    };
    let first = flags("IN", Some("OUT"), Some("CK"));
    run_ok(
        {
            let mut c = Command::new(PAPER);
            c.args(&first).stdout(Stdio::piped()).stderr(Stdio::piped());
            c
        },
        "the group's first member",
    );
    let differs = "runs another job than this member was started for";
    refused(&flags("IN", None, None), differs);
    refused(&flags("IN2", Some("OUT"), Some("CK")), differs);
    refused(&flags("IN", Some("OUT2"), Some("CK")), differs);
    refused(&flags("IN", Some("OUT"), Some("CK2")), differs);
    // The same job again: the name is spent.
    refused(&first, "has finished");
    let mut again = first.clone();
    again.push("--resume-finished".into());
    let out = Command::new(PAPER).args(&again).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An output stream is one group's: another group, or an input
    // stream, is refused as a sink.
    let mut other = flags("IN", Some("OUT"), Some("CK"));
    other[3] = "h".into();
    refused(&other, "is the output of Tandem group g");
    let mut into_input = flags("IN", Some("IN2"), Some("CK"));
    into_input[3] = "i".into();
    refused(&into_input, "is a Tandem input stream");
    // A flag a member does not read is refused, not ignored.
    let mut with_fault = first.clone();
    with_fault[3] = "j".into();
    with_fault.extend(["--records".into(), "5".into()]);
    refused(&with_fault, "--records is not read by a group member");
}

#[test]
fn a_group_survives_its_busiest_server_killed_in_a_three_server_cluster() {
    let Some(bin) = nats_server() else { return };
    let dir = tempdir("cluster");
    let mut servers = start_cluster(&bin, dir.path());
    let all: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let server = all.join(",");
    // Large enough that the members are busy when the server dies.
    produce(&server, "IN", 4, 1_000_000, 3);
    run_ok(
        member(&server, "CLEAN", "clean", dir.path(), 3),
        "the clean member",
    );
    let clean = dump(&server, "CLEAN");
    let logs: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("c{i}.err")))
        .collect();
    let mut members: Vec<Child> = logs
        .iter()
        .map(|log| {
            let mut c = member(&server, "FAILOVER", "failover", dir.path(), 3);
            c.stderr(std::fs::File::create(log).unwrap());
            c.spawn().unwrap()
        })
        .collect();
    // Every member has joined (a member still joining when the server
    // dies may, on a slow host, find the group finished by the others
    // when it gets through — refused, as a spent group is), and one runs
    // a partition.
    let t = Instant::now();
    let log = |l: &PathBuf| std::fs::read_to_string(l).unwrap_or_default();
    while !(logs.iter().all(|l| log(l).contains(" of group failover"))
        && logs.iter().any(|l| log(l).contains(": runs p")))
    {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "not every member joined, or none ran a partition: {:?}",
            logs.iter()
                .map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    // The server most clients talk to dies.
    let busiest = (0..servers.len())
        .max_by_key(|&i| connections(&servers[i]))
        .unwrap();
    let dead = servers.remove(busiest);
    drop(dead);
    for (i, m) in members.iter_mut().enumerate() {
        let status = m.wait().unwrap();
        assert!(
            status.success(),
            "member {i}: {status}\n{}",
            std::fs::read_to_string(&logs[i]).unwrap_or_default()
        );
    }
    let rest: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    assert_same(
        &clean,
        &dump(&rest.join(","), "FAILOVER"),
        "a server killed",
    );
}
