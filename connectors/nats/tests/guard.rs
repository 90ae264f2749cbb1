//! The client's guard against servers that are not what they claim
//! (`tandem_nats::guard`), at the connector's own interface:
//!
//! - a peer that answers with garbage, or asks for TLS, is refused at
//!   `Client::connect_guarded` with what it did, naming it without credentials;
//! - a server that frames the handshake correctly and then breaks the
//!   limits ends the work in progress at once ([`Client::block_checked`]),
//!   well before any request times out, and is not connected to again;
//! - a real `nats-server` that requires a user and password is reached
//!   with the ones in the address (async-nats ignores an address's
//!   credentials itself), and a wrong password shows in no error.
//!
//! The last test needs `nats-server` on the `PATH`; without it, it says so
//! and passes, unless `TANDEM_REQUIRE_NATS` is set.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_nats::guard::Violation;
use tandem_nats::{Client, Error};

mod common;

/// A fake server on loopback: `serve` runs for each connection (in a
/// thread of its own); the count of connections accepted.
fn fake(serve: fn(TcpStream)) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || serve(c));
        }
    });
    (port, accepted)
}

/// Reads from `c` until `needle` has arrived (or the peer goes).
fn read_until(c: &mut TcpStream, needle: &[u8]) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(needle.len()).any(|w| w == needle) {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    true
}

const INFO: &[u8] = b"INFO {\"server_id\":\"fake\",\"version\":\"2.10.0\",\"max_payload\":1048576,\"headers\":true,\"proto\":1,\"jetstream\":true}\r\n";

#[test]
fn a_peer_that_answers_with_garbage_is_refused_at_connect() {
    let (port, _) = fake(|mut c| {
        let chunk = [b'<'; 65536];
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until && c.write_all(&chunk).is_ok() {}
    });
    let t = Instant::now();
    let e = Client::connect_guarded(
        &format!("user:secret@127.0.0.1:{port}"),
        Duration::from_secs(5),
    )
    .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    match &e {
        Error::Protocol {
            server,
            violation: Violation::UnknownOp { start },
        } => {
            assert_eq!(server, &format!("127.0.0.1:{port}"));
            assert!(start.starts_with("<<<<"), "{start}");
        }
        e => panic!("not a protocol error: {e}"),
    }
    assert!(!e.to_string().contains("secret"), "{e}");
    assert!(e.to_string().ends_with("not a NATS server?"), "{e}");
}

#[test]
fn a_server_that_requires_tls_is_refused_by_name() {
    let (port, _) = fake(|mut c| {
        let _ = c.write_all(b"INFO {\"server_id\":\"x\",\"tls_required\":true}\r\n");
        let _ = c.read(&mut [0u8; 1]);
    });
    let e =
        Client::connect_guarded(&format!("127.0.0.1:{port}"), Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Protocol {
                violation: Violation::TlsRequired,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_server_that_turns_hostile_after_the_handshake_ends_the_work_at_once() {
    let (port, accepted) = fake(|mut c| {
        let _ = c.write_all(INFO);
        if !read_until(&mut c, b"PING\r\n") {
            return;
        }
        let _ = c.write_all(b"PONG\r\n");
        // The first request (a JetStream API call): answered with a
        // message larger than any server sends, never with its bytes.
        if read_until(&mut c, b"$JS.API") {
            let _ = c.write_all(b"MSG _INBOX.x 1 2000000000\r\n");
            let _ = c.write_all(&[0u8; 65536]);
        }
        let _ = c.read(&mut [0u8; 1]);
    });
    let client =
        Client::connect_guarded(&format!("127.0.0.1:{port}"), Duration::from_secs(5)).unwrap();
    assert!(client.failure().is_none());
    let t = Instant::now();
    let r = client.block_checked(async {
        client
            .js()
            .get_stream("S")
            .await
            .map(|_| ())
            .map_err(|e| Error::Invalid(e.to_string()))
    });
    let took = t.elapsed();
    // Well before the request's own 5 s timeout.
    assert!(took < Duration::from_secs(2), "{took:?}");
    match r {
        Err(Error::Protocol {
            violation: Violation::MessageTooLarge { size, .. },
            ..
        }) => assert_eq!(size, 2_000_000_000),
        Err(e) => panic!("not the violation: {e}"),
        Ok(()) => panic!("a hostile server's answer was taken"),
    }
    assert!(client.failure().is_some());
    // The client's reconnects find no relay: the server sees no other
    // connection.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

// ---- Against a real nats-server --------------------------------------

#[test]
fn a_server_that_requires_a_password_is_reached_with_the_addresss_own() {
    let Some((_server, addr)) = common::start(&["--user", "tandem", "--pass", "s3cr/t@x"]) else {
        return;
    };
    let port = addr.rsplit_once(':').unwrap().1;
    // '/' and '@' in the password, percent-encoded as in a URL: through
    // the guard and directly.
    let direct = Client::connect(
        &format!("tandem:s3cr%2Ft%40x@127.0.0.1:{port}"),
        Duration::from_secs(5),
    )
    .unwrap();
    direct
        .block(tandem_nats::stream::ensure_stream(
            direct.js(),
            &tandem_nats::stream::StreamSpec::new("S"),
        ))
        .unwrap();
    let client = Client::connect_guarded(
        &format!("tandem:s3cr%2Ft%40x@127.0.0.1:{port}"),
        Duration::from_secs(5),
    )
    .unwrap();
    client
        .block_checked(async {
            tandem_nats::stream::ensure_stream(
                client.js(),
                &tandem_nats::stream::StreamSpec::new("S"),
            )
            .await
            .map(|_| ())
        })
        .unwrap();
    assert_eq!(client.server(), format!("127.0.0.1:{port}"));
    let e = Client::connect(
        &format!("tandem:wrongpassword@127.0.0.1:{port}"),
        Duration::from_secs(5),
    )
    .unwrap_err();
    let shown = tandem::error::report(&e);
    assert!(shown.contains("uthorization"), "{shown}");
    assert!(!shown.contains("wrongpassword"), "{shown}");
}
