//! The guard's framing and relay, on bytes cut every way.

use super::*;

const INFO: &[u8] = b"INFO {\"server_id\":\"x\",\"max_payload\":1048576}\r\n";

fn small() -> Limits {
    Limits {
        max_line: 64,
        max_message: 100,
    }
}

/// Feeds `parts` one after the other; the first error.
fn feed(limits: Limits, parts: &[&[u8]]) -> Result<(), Violation> {
    let mut f = Framing::new(limits);
    parts.iter().try_for_each(|p| f.feed(p))
}

/// Feeds `bytes` one byte at a time, then whole: both must find the
/// same kind of violation (garbage quotes as much as it has seen).
fn both_ways(limits: Limits, bytes: &[u8]) -> Result<(), Violation> {
    let mut f = Framing::new(limits);
    let bytewise = bytes
        .iter()
        .try_for_each(|b| f.feed(std::slice::from_ref(b)));
    let whole = feed(limits, &[bytes]);
    let kind = |r: &Result<(), Violation>| r.as_ref().err().map(std::mem::discriminant);
    assert_eq!(kind(&bytewise), kind(&whole), "{}", bytes.escape_ascii());
    whole
}

#[test]
fn a_real_servers_traffic_passes_however_it_is_cut() {
    let mut s = INFO.to_vec();
    s.extend_from_slice(b"+OK\r\nPING\r\nPONG\r\n");
    s.extend_from_slice(b"MSG a.b 1 5\r\nhello\r\n");
    s.extend_from_slice(b"MSG a.b 1 _INBOX.x 0\r\n\r\n");
    s.extend_from_slice(b"HMSG a 2 r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n");
    s.extend_from_slice(b"MSG a 1 4\r\n\r\n\r\n\r\n");
    s.extend_from_slice(b"-ERR 'Unknown Protocol Operation'\r\n");
    s.extend_from_slice(INFO);
    assert_eq!(both_ways(Limits::default(), &s), Ok(()));
}

#[test]
fn bytes_without_a_newline_are_refused_once_past_the_line_limit() {
    // Garbage is told by its first bytes …
    let e = both_ways(small(), &[b'x'; 200]).unwrap_err();
    assert!(matches!(e, Violation::UnknownOp { .. }), "{e}");
    // … a line that starts as INFO by its length.
    let mut long = b"INFO {".to_vec();
    long.resize(200, b'a');
    assert_eq!(
        both_ways(small(), &long),
        Err(Violation::LineTooLong { limit: 64 })
    );
    // Exactly at the limit passes; one more byte does not.
    let mut at = b"PING".to_vec();
    at.resize(62, b' ');
    at.extend_from_slice(b"\r\n");
    assert_eq!(at.len(), 64);
    assert_eq!(feed(small(), &[b"INFO {}\r\n", &at]), Ok(()));
    let mut over = at.clone();
    over.insert(4, b' ');
    assert!(feed(small(), &[b"INFO {}\r\n", &over]).is_err());
}

#[test]
fn a_bare_line_feed_does_not_end_a_line_as_the_client_reads_it() {
    let mut s = b"INFO {}\r\nPING".to_vec();
    s.extend_from_slice(&[b'\n'; 100]);
    assert_eq!(
        both_ways(small(), &s),
        Err(Violation::LineTooLong { limit: 64 })
    );
}

#[test]
fn valid_info_then_endless_garbage_is_refused() {
    let e = feed(small(), &[b"INFO {}\r\n", &[0xffu8; 1000]]).unwrap_err();
    assert!(matches!(e, Violation::UnknownOp { .. }), "{e}");
    assert!(e.to_string().contains("\\xff"), "{e}");
}

#[test]
fn the_first_line_must_be_an_info_with_a_json_object_and_no_tls() {
    assert_eq!(
        feed(small(), &[b"PING\r\n"]),
        Err(Violation::NoInfo { op: "PING" })
    );
    assert!(matches!(
        feed(small(), &[b"INFO nope\r\n"]),
        Err(Violation::BadInfo { .. })
    ));
    assert!(matches!(
        feed(small(), &[b"INFO [1]\r\n"]),
        Err(Violation::BadInfo { .. })
    ));
    assert_eq!(
        feed(small(), &[b"INFO {\"tls_required\":true}\r\n"]),
        Err(Violation::TlsRequired)
    );
    assert_eq!(
        feed(small(), &[b"INFO {\"tls_required\":false}\r\n"]),
        Ok(())
    );
    let e = feed(small(), &[b"HTTP/1.1 400 Bad Request\r\n"]).unwrap_err();
    assert!(e.to_string().contains("HTTP/"), "{e}");
}

#[test]
fn a_message_over_the_limit_is_refused_before_its_bytes() {
    assert_eq!(
        feed(small(), &[b"INFO {}\r\nMSG a 1 101\r\n"]),
        Err(Violation::MessageTooLarge {
            size: 101,
            limit: 100
        })
    );
    assert_eq!(
        feed(small(), &[b"INFO {}\r\nHMSG a 1 10 101\r\n"]),
        Err(Violation::MessageTooLarge {
            size: 101,
            limit: 100
        })
    );
    let mut at = b"INFO {}\r\nMSG a 1 100\r\n".to_vec();
    at.extend_from_slice(&[b'x'; 100]);
    at.extend_from_slice(b"\r\n");
    assert_eq!(both_ways(small(), &at), Ok(()));
    assert_eq!(
        feed(
            Limits::default(),
            &[b"INFO {}\r\nMSG a 1 99999999999999999999\r\n"]
        ),
        Err(Violation::Malformed {
            op: "MSG",
            why: "its size is not a number"
        })
    );
}

#[test]
fn malformed_message_lines_and_lost_framing_are_refused() {
    for bad in [
        &b"MSG a\r\n"[..],
        b"MSG a 1 2 3 4\r\n",
        b"MSG a 1 -5\r\n",
        b"MSG a 1 +5\r\n",
        b"HMSG a 1 5\r\n",
        b"HMSG a 1 6 5\r\n",
    ] {
        let r = feed(small(), &[b"INFO {}\r\n", bad]);
        assert!(
            matches!(r, Err(Violation::Malformed { .. })),
            "{}: {r:?}",
            bad.escape_ascii()
        );
    }
    assert_eq!(
        feed(small(), &[b"INFO {}\r\nMSG a 1 2\r\nhiXX"]),
        Err(Violation::NoTrailer)
    );
}

#[test]
fn violations_read_as_sentences_with_sizes_in_units() {
    assert_eq!(
        Violation::LineTooLong { limit: MAX_LINE }.to_string(),
        "the server sent a protocol line over 64 KiB: not a NATS server?"
    );
    assert_eq!(
        Violation::MessageTooLarge {
            size: 1 << 30,
            limit: MAX_MESSAGE
        }
        .to_string(),
        "the server announced a message of 1073741824 bytes, over the limit of 64 MiB"
    );
}
