//! A real `nats-server`, started by a test on a free loopback port with a
//! store of its own. Without `nats-server` on the `PATH` a test says so
//! and passes, unless `TANDEM_REQUIRE_NATS` is set (as `.ci/run` sets it).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn nats_server() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain([PathBuf::from("/usr/sbin")])
            .map(|d| d.join("nats-server"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("TANDEM_REQUIRE_NATS").is_none(),
            "nats-server is not installed and TANDEM_REQUIRE_NATS is set"
        );
        eprintln!("SKIPPED: nats-server is not installed (apt-get install nats-server)");
    }
    found
}

/// The server process and its store (removed when dropped).
pub struct Server {
    child: Child,
    _store: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a JetStream server with `extra` flags; the server and its
/// `127.0.0.1:PORT` once it accepts connections.
pub fn start(extra: &[&str]) -> Option<(Server, String)> {
    let bin = nats_server()?;
    // A free port is found by binding port 0 and letting it go: a test
    // beside this one may take the same and start its server there first.
    // Then this server exits (its port is in use) while the port accepts:
    // another port is tried.
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(&bin)
            .args(["-js", "-sd"])
            .arg(dir.path())
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = Server { child, _store: dir };
        let t = Instant::now();
        let mut exited = false;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(10));
            if server.child.try_wait().unwrap().is_some() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Accepting, but perhaps another test's server: ours must live.
        std::thread::sleep(Duration::from_millis(50));
        if exited || server.child.try_wait().unwrap().is_some() {
            continue;
        }
        return Some((server, format!("127.0.0.1:{port}")));
    }
    panic!("nats-server did not start on any of 20 free ports");
}
