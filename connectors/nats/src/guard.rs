//! The guard: how much a server can make this process hold.
//!
//! async-nats (0.51, `connection.rs`) reads what a server sends into one
//! buffer and parses it only once a whole operation is there: a control
//! line once its CRLF has arrived, a message once its announced size has.
//! Neither wait has a limit. A "server" that streams bytes without a
//! newline — a wrong port, an HTTP server, a hostile peer — grows that
//! buffer until the process is killed (2.2 GB in ten seconds on loopback
//! before this module), and a 200 MB `INFO` line is held whole. Its
//! `ConnectOptions` offer no bound: `read_buffer_capacity` is only the
//! buffer's first size, `connection_timeout` bounds the handshake's time
//! and not its bytes, and there is no hook for a stream of one's own.
//!
//! So the client never reads from the server itself. [`Guard::start`]
//! opens a relay on loopback (`127.0.0.1`, a port the system picks), a
//! task on the [`crate::Client`]'s runtime; the client connects to the
//! relay, and for each connection it accepts, the relay dials the real
//! server (the servers of a cluster in turn, so the client's reconnects
//! reach the next one) and copies bytes both ways. What the client sends
//! passes as it is. What the server sends is checked by [`Framing`] —
//! just enough of NATS to find where each operation ends — *before* it is
//! passed on:
//!
//! - the first line is `INFO` with a JSON object, which must not ask for
//!   TLS (the relay could not read past a TLS handshake, and the client
//!   would check the certificate against the relay's address: such a
//!   server is refused, by name, rather than connected to unguarded);
//! - every control line starts as one of `INFO`, `MSG`, `HMSG`, `PING`,
//!   `PONG`, `+OK`, `-ERR` (told by its first bytes, so garbage is refused
//!   at once) and ends in CRLF within [`Limits::max_line`] bytes;
//! - a message (`MSG`/`HMSG`) announces at most [`Limits::max_message`]
//!   bytes (headers and payload), and they are followed by CRLF.
//!
//! Anything else is a [`Violation`]: the relay drops both sockets, refuses
//! every later connection (the client's reconnects find nothing), and
//! records it; [`crate::Client::block_checked`] ends the work in progress
//! with it at once, and `Client::connect_guarded` reports it instead of the
//! client's own error (which can only name the relay). A violation is the
//! end of the client: a server that broke framing once is not trusted to
//! frame the next connection.
//!
//! ## What this bounds
//!
//! The client's read buffer holds at most one unfinished operation the
//! relay let through: a control line (64 KiB) or a message (64 MiB, the
//! largest `max_payload` a NATS server accepts). The relay itself holds
//! one read (64 KiB) and one line per connection.
//!
//! Not bounded here: messages the client has parsed and queued for a
//! subscription that has not read them yet (async-nats keeps up to
//! `subscription_capacity`, 64 Ki messages, per subscription). A server
//! that speaks NATS correctly but pushes unasked-for messages to a
//! subscription can still fill that queue.
//!
//! ## What it costs
//!
//! Every byte from the server crosses loopback once more: a read and a
//! write on the client's runtime thread, plus a scan of each control line
//! (payloads are skipped by their length, not scanned, and a line that
//! arrived whole is not copied). Measured once, on a busy 2-core machine:
//! `tandem nats dump` of 500 000 records of 100 bytes from a local
//! `nats-server` 2.9 took a median 2.27 s (8 runs) through the relay and
//! 2.18 s straight to the server — about 5–10 % of a consumer's
//! throughput. So only [`crate::Client::connect_guarded`] takes this path
//! (`tandem nats dump`, pointed at an address a person typed); a group's
//! members ([`crate::Client::connect`]) read from the server directly,
//! unbounded as async-nats is, and follow the cluster's announced servers.
//! Whether a member should pay the relay too is open: its consume path is
//! where a group's throughput is decided.
//!
//! ## Who else can connect
//!
//! The relay listens on loopback only, and for as long as the client
//! lives. Another local process could connect to it and be relayed to the
//! server — with no more reach than it has already (the server sees the
//! same host), and without this client's credentials, which travel in the
//! client's own `CONNECT`, not in the relay.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::Error;

/// The longest control line a server may send, CRLF included.
pub const MAX_LINE: usize = 64 * 1024;
/// The largest message (headers and payload) a server may send: the
/// largest `max_payload` a NATS server can be configured with.
pub const MAX_MESSAGE: u64 = 64 * 1024 * 1024;
/// What the relay reads from the server at a time.
const CHUNK: usize = 64 * 1024;

/// What the server may send (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest control line, CRLF included.
    pub max_line: usize,
    /// The largest message, headers and payload.
    pub max_message: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: MAX_LINE,
            max_message: MAX_MESSAGE,
        }
    }
}

/// `n` bytes in words: `64 KiB`, `64 MiB`, `100 bytes`.
fn size(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// What a server sent that a NATS server does not. Each message ends
/// with what it suggests.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A control line with no CRLF within the limit.
    #[error("the server sent a protocol line over {}: not a NATS server?", size(*.limit as u64))]
    LineTooLong {
        /// [`Limits::max_line`].
        limit: usize,
    },
    /// A line that starts as no NATS operation does (its first bytes,
    /// escaped).
    #[error("the server sent \"{start}\" where a NATS protocol line belongs: not a NATS server?")]
    UnknownOp {
        /// Up to 16 bytes of it, escaped.
        start: String,
    },
    /// The first line was not `INFO`.
    #[error("the server's first line was {op}, not INFO: not a NATS server?")]
    NoInfo {
        /// The operation it sent instead.
        op: &'static str,
    },
    /// `INFO` without a JSON object.
    #[error("the server's INFO is not a JSON object ({why}): not a NATS server?")]
    BadInfo {
        /// What the JSON parser said.
        why: String,
    },
    /// The server requires TLS, which the relay cannot check.
    #[error("the server requires TLS, which Tandem's NATS connection does not support")]
    TlsRequired,
    /// A `MSG` or `HMSG` line that does not parse.
    #[error("the server sent a malformed {op} line ({why})")]
    Malformed {
        /// `MSG` or `HMSG`.
        op: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A message over the limit.
    #[error("the server announced a message of {size} bytes, over the limit of {}", self::size(*.limit))]
    MessageTooLarge {
        /// The size it announced.
        size: u64,
        /// [`Limits::max_message`].
        limit: u64,
    },
    /// A message not followed by CRLF: the framing is lost.
    #[error("the server sent a message not followed by CRLF (its announced size is wrong)")]
    NoTrailer,
}

/// The operations a server sends, as their lines start.
const OPS: [(&[u8], &str); 7] = [
    (b"INFO ", "INFO"),
    (b"MSG ", "MSG"),
    (b"HMSG ", "HMSG"),
    (b"PING", "PING"),
    (b"PONG", "PONG"),
    (b"+OK", "+OK"),
    (b"-ERR", "-ERR"),
];

/// Where the server's byte stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// In a control line (its bytes so far are in `Framing::line`).
    Line,
    /// In a message's bytes: this many are still to come.
    Payload(u64),
    /// After a message: this many bytes of its CRLF seen.
    Trailer(u8),
}

/// The server → client direction, checked as it passes: a pure state
/// machine over the bytes, no I/O (see the [module docs](self)).
#[derive(Debug)]
pub struct Framing {
    limits: Limits,
    state: State,
    /// The control line so far, at most `limits.max_line` bytes.
    line: Vec<u8>,
    /// Whether the first line (`INFO`) has been seen.
    greeted: bool,
}

impl Framing {
    /// At the start of a connection.
    pub fn new(limits: Limits) -> Self {
        Framing {
            limits,
            state: State::Line,
            line: Vec::new(),
            greeted: false,
        }
    }

    /// Checks `bytes`, the next the server sent. After an error the
    /// connection is done: the state is not meant to go on.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), Violation> {
        while !bytes.is_empty() {
            match self.state {
                State::Payload(left) => {
                    let n = left.min(bytes.len() as u64);
                    bytes = &bytes[n as usize..];
                    self.state = if n == left {
                        State::Trailer(0)
                    } else {
                        State::Payload(left - n)
                    };
                }
                State::Trailer(seen) => {
                    if bytes[0] != b"\r\n"[seen as usize] {
                        return Err(Violation::NoTrailer);
                    }
                    bytes = &bytes[1..];
                    self.state = if seen == 1 {
                        State::Line
                    } else {
                        State::Trailer(1)
                    };
                }
                State::Line => bytes = self.line_bytes(bytes)?,
            }
        }
        Ok(())
    }

    /// Takes control-line bytes from `bytes` up to the end of the line (or
    /// of `bytes`); returns the rest.
    fn line_bytes<'b>(&mut self, bytes: &'b [u8]) -> Result<&'b [u8], Violation> {
        let room = self.limits.max_line - self.line.len();
        // The line ends at the first CRLF, as the client reads it; a bare
        // LF is part of the line.
        let mut from = 0;
        let end = loop {
            match bytes[from..].iter().position(|&b| b == b'\n') {
                None => break None,
                Some(i) => {
                    let i = from + i;
                    let cr = match i {
                        0 => self.line.last() == Some(&b'\r'),
                        i => bytes[i - 1] == b'\r',
                    };
                    if cr {
                        break Some(i);
                    }
                    from = i + 1;
                }
            }
        };
        let take = end.map_or(bytes.len(), |i| i + 1);
        if take > room {
            // The start says more than the length: garbage is told as such.
            self.line.extend_from_slice(&bytes[..room.min(8)]);
            check_start(&self.line)?;
            return Err(Violation::LineTooLong {
                limit: self.limits.max_line,
            });
        }
        if end.is_some() && self.line.is_empty() {
            // The whole line is in `bytes` (the usual case): not copied.
            check_start(&bytes[..take])?;
            self.line_done(&bytes[..take - 2])?;
            return Ok(&bytes[take..]);
        }
        self.line.extend_from_slice(&bytes[..take]);
        check_start(&self.line)?;
        if end.is_some() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line[..line.len() - 2])?;
            // Keep the allocation (cleared) for the next line.
            self.line = line;
            self.line.clear();
        }
        Ok(&bytes[take..])
    }

    /// A whole control line (without its CRLF).
    fn line_done(&mut self, line: &[u8]) -> Result<(), Violation> {
        let (prefix, op) = OPS
            .iter()
            .find(|(p, _)| line.starts_with(p))
            .copied()
            .ok_or_else(|| Violation::UnknownOp {
                start: line[..line.len().min(16)].escape_ascii().to_string(),
            })?;
        let greeting = !self.greeted;
        if greeting && op != "INFO" {
            return Err(Violation::NoInfo { op });
        }
        let args = &line[prefix.len()..];
        match op {
            "INFO" => {
                let info: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(args)
                    .map_err(|e| Violation::BadInfo { why: e.to_string() })?;
                if greeting && info.get("tls_required") == Some(&serde_json::Value::Bool(true)) {
                    return Err(Violation::TlsRequired);
                }
                self.greeted = true;
            }
            "MSG" => self.message(msg_size(args)?)?,
            "HMSG" => self.message(hmsg_size(args)?)?,
            _ => {}
        }
        Ok(())
    }

    /// A message of `size` bytes follows.
    fn message(&mut self, size: u64) -> Result<(), Violation> {
        if size > self.limits.max_message {
            return Err(Violation::MessageTooLarge {
                size,
                limit: self.limits.max_message,
            });
        }
        self.state = if size == 0 {
            State::Trailer(0)
        } else {
            State::Payload(size)
        };
        Ok(())
    }
}

/// Whether `line` (so far) starts as an operation does.
fn check_start(line: &[u8]) -> Result<(), Violation> {
    let s = &line[..line.len().min(5)];
    if OPS
        .iter()
        .any(|(op, _)| op.starts_with(s) || s.starts_with(op))
    {
        return Ok(());
    }
    Err(Violation::UnknownOp {
        start: line[..line.len().min(16)].escape_ascii().to_string(),
    })
}

/// A size argument: digits only (as `usize::from_str` takes them, less
/// the sign it would also take).
fn number(op: &'static str, s: &[u8]) -> Result<u64, Violation> {
    let malformed = |why| Violation::Malformed { op, why };
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return Err(malformed("its size is not a number"));
    }
    std::str::from_utf8(s)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(malformed("its size is not a number"))
}

/// The last `N` words of `args` (split at the bytes `sep` picks, empty
/// words skipped), and how many there are in all.
fn last_words<const N: usize>(args: &[u8], sep: impl Fn(&u8) -> bool) -> ([&[u8]; N], usize) {
    let mut last = [&args[..0]; N];
    let mut count = 0;
    for w in args.rsplit(sep).filter(|w| !w.is_empty()) {
        if count < N {
            last[N - 1 - count] = w;
        }
        count += 1;
    }
    (last, count)
}

/// `MSG <subject> <sid> [reply-to] <#bytes>`: the size. Split on spaces
/// as the client splits it, so that both read the same size.
fn msg_size(args: &[u8]) -> Result<u64, Violation> {
    match last_words::<1>(args, |&b| b == b' ') {
        ([size], 3 | 4) => number("MSG", size),
        _ => Err(Violation::Malformed {
            op: "MSG",
            why: "it has the wrong number of arguments",
        }),
    }
}

/// `HMSG <subject> <sid> [reply-to] <#header bytes> <#total bytes>`: the
/// total. Split on whitespace as the client splits it.
fn hmsg_size(args: &[u8]) -> Result<u64, Violation> {
    match last_words::<2>(args, u8::is_ascii_whitespace) {
        ([header, total], 4 | 5) => {
            let header = number("HMSG", header)?;
            let total = number("HMSG", total)?;
            if header > total {
                return Err(Violation::Malformed {
                    op: "HMSG",
                    why: "its header is larger than the whole message",
                });
            }
            Ok(total)
        }
        _ => Err(Violation::Malformed {
            op: "HMSG",
            why: "it has the wrong number of arguments",
        }),
    }
}

/// A violation and the server (`HOST:PORT`) that committed it.
#[derive(Clone, Debug)]
struct Violated {
    server: String,
    violation: Violation,
}

impl From<Violated> for Error {
    fn from(v: Violated) -> Error {
        Error::Protocol {
            server: v.server,
            violation: v.violation,
        }
    }
}

/// What the relay task and the client share.
#[derive(Debug)]
struct Shared {
    /// `HOST:PORT` of each server, no credentials.
    servers: Vec<String>,
    limits: Limits,
    /// How long a dial of the server may take.
    dial_timeout: Duration,
    /// Set once, by the first violation.
    violated: watch::Sender<Option<Violated>>,
    /// Why the last dial failed, until someone asks.
    unreachable: Mutex<Option<Error>>,
}

/// The relay between the client and the server (see the [module
/// docs](self)); it runs until the runtime it was started on ends.
#[derive(Debug)]
pub struct Guard {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Guard {
    /// Opens the relay to `servers` (`HOST:PORT` each, no credentials):
    /// binds its loopback port and starts accepting. Call inside the
    /// runtime that is to run it.
    pub async fn start(
        servers: Vec<String>,
        limits: Limits,
        dial_timeout: Duration,
    ) -> Result<Guard, Error> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|source| Error::Io {
                path: "the NATS relay's loopback port".into(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Io {
            path: "the NATS relay's loopback port".into(),
            source,
        })?;
        let shared = Arc::new(Shared {
            servers,
            limits,
            dial_timeout,
            violated: watch::channel(None).0,
            unreachable: Mutex::new(None),
        });
        tokio::spawn(serve(listener, shared.clone()));
        Ok(Guard { addr, shared })
    }

    /// The address the client connects to: `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The violation, once there has been one.
    pub fn failure(&self) -> Option<Error> {
        self.shared.violated.borrow().clone().map(Error::from)
    }

    /// What explains a failed connect best: the violation, else why the
    /// last dial of the server failed (taken: asked once).
    pub fn explain(&self) -> Option<Error> {
        self.failure().or_else(|| {
            self.shared
                .unreachable
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
        })
    }

    /// Ends when the server has broken the limits, with the violation;
    /// never otherwise.
    pub async fn violated(&self) -> Error {
        let mut rx = self.shared.violated.subscribe();
        let seen = rx.wait_for(Option::is_some).await.map(|v| v.clone());
        match seen {
            Ok(v) => v.map_or_else(unreachable_violation, Error::from),
            // The sender lives in `self.shared`: never dropped while we wait.
            Err(_) => std::future::pending().await,
        }
    }
}

/// `wait_for(Option::is_some)` returned `None`: cannot happen; an error
/// all the same rather than a panic.
fn unreachable_violation() -> Error {
    Error::Invalid("the NATS relay reported a violation it did not record".into())
}

/// Accepts the client's connections until a violation.
async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut violated = shared.violated.subscribe();
    let mut next = 0usize;
    loop {
        let client = tokio::select! {
            _ = violated.wait_for(Option::is_some) => return,
            accepted = listener.accept() => accepted,
        };
        match client {
            Ok((client, _)) => {
                tokio::spawn(relay(client, shared.clone(), next));
                next = next.wrapping_add(1);
            }
            // Out of descriptors, say: the client's reconnect tries again.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Dials the servers in turn from `first`; the first that answers.
async fn dial(shared: &Shared, first: usize) -> Result<(TcpStream, String), Error> {
    let n = shared.servers.len();
    let mut last = None;
    for k in 0..n {
        let server = &shared.servers[(first + k) % n];
        let r =
            tokio::time::timeout(shared.dial_timeout, TcpStream::connect(server.as_str())).await;
        let source = match r {
            Ok(Ok(s)) => return Ok((s, server.clone())),
            Ok(Err(e)) => e,
            Err(_) => std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {:?}", shared.dial_timeout),
            ),
        };
        last = Some(Error::Unreachable {
            server: server.clone(),
            source,
        });
    }
    Err(last.unwrap_or_else(|| Error::Invalid("no NATS server to connect to".into())))
}

/// One connection of the client's, relayed to a server.
async fn relay(client: TcpStream, shared: Arc<Shared>, first: usize) {
    let (server, name) = match dial(&shared, first).await {
        Ok(s) => s,
        Err(e) => {
            // Recorded before `client` closes: the client's error follows.
            *shared.unreachable.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            return;
        }
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (mut from_server, mut to_server) = server.into_split();
    let (mut from_client, mut to_client) = client.into_split();
    let up = async {
        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
        let _ = to_server.shutdown().await;
    };
    let down = async {
        let mut framing = Framing::new(shared.limits);
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match from_server.read(&mut buf).await {
                Ok(0) | Err(_) => break Ok(()),
                Ok(n) => n,
            };
            framing.feed(&buf[..n])?;
            if to_client.write_all(&buf[..n]).await.is_err() {
                break Ok(());
            }
        }
    };
    let ended: Result<(), Violation> = tokio::select! {
        () = up => Ok(()),
        r = down => r,
    };
    if let Err(violation) = ended {
        // Recorded before the sockets close: the client's error follows.
        shared.violated.send_if_modified(|v| {
            if v.is_some() {
                return false;
            }
            *v = Some(Violated {
                server: name,
                violation,
            });
            true
        });
    }
}

#[cfg(test)]
mod tests;
