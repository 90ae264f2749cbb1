//! The HTTP server behind the job's endpoints ([`super::MetricsServer`],
//! [`super::LiveView`]): a single thread, an event loop over non-blocking
//! sockets (`mio`), that no client can make hold more than a bounded
//! amount of memory, file descriptors or time — it runs beside a job,
//! and one request must never cost the job.
//!
//! What it bounds, and how:
//!
//! - **A request's head** (request line and headers) is read into a
//!   buffer of at most [`MAX_HEAD`] bytes and parsed by `httparse`; a
//!   longer head is answered `431` and the connection closed. A malformed
//!   one is answered `400`.
//! - **A body is never read into memory.** Only `GET` and `HEAD` are
//!   answered (anything else `405`), whatever `Content-Length` or
//!   `Transfer-Encoding` says: after the response the connection is shut
//!   for writing and what the client still sends is read and discarded —
//!   at most [`DRAIN_BYTES`], for at most [`DRAIN_TIME`] — so that its
//!   kernel does not reset the connection under the response.
//! - **Time.** A connection has [`HEAD_TIME`] to send its head (slow
//!   senders, idle connections) and [`WRITE_TIME`] to take the response;
//!   then it is closed. Every response says `Connection: close`: no
//!   connection outlives its one request.
//! - **Connections.** At most [`MAX_CONNECTIONS`] are open at once. A new
//!   one beyond that evicts the oldest connection still waiting for its
//!   head (a client that sends its request at once is never the oldest
//!   for long); with none to evict, the new one is closed. When the
//!   process is out of file descriptors, the oldest connection is closed
//!   and accepting is retried shortly after, instead of spinning.
//!
//! The handler runs on the server's thread, one request at a time: an
//! endpoint's answers are computed from figures the job publishes anyway,
//! in well under a millisecond.

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The largest request head read (request line and headers).
pub(crate) const MAX_HEAD: usize = 8 << 10;
/// Connections open at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// How long a connection may take to send its request's head.
pub(crate) const HEAD_TIME: Duration = Duration::from_secs(5);
/// How long a connection may take to read its response.
pub(crate) const WRITE_TIME: Duration = Duration::from_secs(10);
/// How much of what a client sends after its head is read and discarded.
const DRAIN_BYTES: usize = 256 << 10;
/// How long a connection is drained after its response.
const DRAIN_TIME: Duration = Duration::from_secs(1);
/// How long accepting pauses when the process is out of descriptors.
const ACCEPT_PAUSE: Duration = Duration::from_millis(20);

const LISTENER: Token = Token(0);
const WAKE: Token = Token(1);
/// Connection `i` is `Token(FIRST + i)`.
const FIRST: usize = 2;

/// The request methods answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Get,
    Head,
}

/// A request an endpoint answers: a `GET` of `path` (the request target
/// without its query), or a `HEAD`, which the server answers with the
/// `GET`'s headers.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub(crate) path: &'a str,
}

/// An endpoint's answer.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) body: Vec<u8>,
}

impl Response {
    /// `200` with `body` of `content_type`.
    pub(crate) fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status: 200,
            content_type,
            body: body.into(),
        }
    }

    /// A plain-text answer with `status`.
    pub(crate) fn text(status: u16, body: &str) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{body}\n").into_bytes(),
        }
    }

    /// `404`.
    pub(crate) fn not_found() -> Self {
        Response::text(404, "not found")
    }

    /// The bytes on the wire (the body left out for a `HEAD`).
    fn encode(&self, head_only: bool, extra: &str) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n{extra}\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "",
    }
}

/// A running server: its thread ends when it is dropped.
pub(crate) struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Listens on `addr` and answers each request with `handler`, on a
    /// thread named `name`.
    pub(crate) fn start(
        addr: impl ToSocketAddrs,
        name: &str,
        handler: impl Fn(&Request<'_>) -> Response + Send + 'static,
    ) -> io::Result<Server> {
        let std_listener = std::net::TcpListener::bind(addr)?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let mut listener = TcpListener::from_std(std_listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let stop = Arc::new(AtomicBool::new(false));
        let mut event_loop = Loop {
            poll,
            listener,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            accept_again_at: None,
            stop: Arc::clone(&stop),
            handler: Box::new(handler),
        };
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || event_loop.run())?;
        Ok(Server {
            addr,
            stop,
            waker,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // A failed wake leaves the loop to see `stop` at its next timeout
        // (at most a second).
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where a connection is in its one exchange.
enum Phase {
    /// Reading the request's head into `buf`.
    Head,
    /// Writing `out` from `written`.
    Write { out: Vec<u8>, written: usize },
    /// Shut for writing; discarding what the client still sends.
    Drain { discarded: usize },
}

struct Conn {
    stream: TcpStream,
    phase: Phase,
    buf: Vec<u8>,
    accepted: Instant,
    /// When the current phase must be over.
    deadline: Instant,
}

type Handler = Box<dyn Fn(&Request<'_>) -> Response + Send>;

struct Loop {
    poll: Poll,
    listener: TcpListener,
    /// Connection slots (`None`: free), indexed by token − [`FIRST`].
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    open: usize,
    /// Accepting paused (out of descriptors) until then.
    accept_again_at: Option<Instant>,
    stop: Arc<AtomicBool>,
    handler: Handler,
}

/// What to do with a connection after an event.
enum Next {
    Keep,
    Close,
}

impl Loop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let now = Instant::now();
            let wait = self
                .next_deadline()
                .map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now))
                .min(Duration::from_secs(1));
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // The poller itself failed: nothing can be served.
                eprintln!("tandem: an HTTP endpoint stops: {e}");
                return;
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKE => {}
                    LISTENER => self.accept(),
                    Token(t) => {
                        let i = t - FIRST;
                        let next = match self.conns.get_mut(i).and_then(Option::as_mut) {
                            Some(c) => step(c, &*self.handler),
                            None => continue,
                        };
                        if let Next::Close = next {
                            self.close(i);
                        }
                    }
                }
            }
            if self.accept_again_at.is_some_and(|t| Instant::now() >= t) {
                self.accept_again_at = None;
                self.accept();
            }
            self.expire(Instant::now());
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.conns
            .iter()
            .flatten()
            .map(|c| c.deadline)
            .chain(self.accept_again_at)
            .min()
    }

    /// Accepts until the backlog is empty (the poller reports edges).
    fn accept(&mut self) {
        if self.accept_again_at.is_some() {
            return;
        }
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_out_of_descriptors(&e) => {
                    // Make room, and try again shortly (no new edge may
                    // come for the connections already waiting).
                    if let Some(i) = self.oldest(|_| true) {
                        self.close(i);
                    }
                    self.accept_again_at = Some(Instant::now() + ACCEPT_PAUSE);
                    return;
                }
                // A connection reset before it was accepted, and the like.
                Err(_) => continue,
            }
        }
    }

    fn admit(&mut self, mut stream: TcpStream) {
        if self.open >= MAX_CONNECTIONS {
            match self.oldest(|c| matches!(c.phase, Phase::Head)) {
                Some(i) => self.close(i),
                // Every slot is answering: the newcomer waits for none.
                None => return,
            }
        }
        let i = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let token = Token(FIRST + i);
        if self
            .poll
            .registry()
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            self.free.push(i);
            return;
        }
        let now = Instant::now();
        self.conns[i] = Some(Conn {
            stream,
            phase: Phase::Head,
            buf: Vec::new(),
            accepted: now,
            deadline: now + HEAD_TIME,
        });
        self.open += 1;
    }

    /// The oldest open connection `which` accepts.
    fn oldest(&self, which: impl Fn(&Conn) -> bool) -> Option<usize> {
        self.conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().filter(|c| which(c)).map(|c| (i, c.accepted)))
            .min_by_key(|&(_, t)| t)
            .map(|(i, _)| i)
    }

    fn close(&mut self, i: usize) {
        if let Some(mut c) = self.conns[i].take() {
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.free.push(i);
            self.open -= 1;
        }
    }

    /// Closes every connection past its phase's deadline.
    fn expire(&mut self, now: Instant) {
        let late: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.as_ref().is_some_and(|c| c.deadline <= now))
            .map(|(i, _)| i)
            .collect();
        for i in late {
            self.close(i);
        }
    }
}

fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
        || e.kind() == io::ErrorKind::OutOfMemory
}

/// Advances connection `c` as far as its socket allows.
fn step(c: &mut Conn, handler: &dyn Fn(&Request<'_>) -> Response) -> Next {
    loop {
        match &mut c.phase {
            Phase::Head => {
                let ended = match read_head(c) {
                    Ok(ended) => ended,
                    Err(()) => return Next::Close,
                };
                let out = match parse(&c.buf, handler) {
                    Parsed::Answer(out) => out,
                    Parsed::Partial if c.buf.len() >= MAX_HEAD => {
                        Response::text(431, "request head too large").encode(false, "")
                    }
                    // Closed before a whole head: nothing to answer.
                    Parsed::Partial if ended => return Next::Close,
                    Parsed::Partial => return Next::Keep,
                };
                c.phase = Phase::Write { out, written: 0 };
                c.deadline = Instant::now() + WRITE_TIME;
            }
            Phase::Write { out, written } => {
                while *written < out.len() {
                    match c.stream.write(&out[*written..]) {
                        Ok(0) => return Next::Close,
                        Ok(n) => *written += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::Keep,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => return Next::Close,
                    }
                }
                if c.stream.shutdown(Shutdown::Write).is_err() {
                    return Next::Close;
                }
                c.phase = Phase::Drain { discarded: 0 };
                c.deadline = Instant::now() + DRAIN_TIME;
                c.buf = Vec::new();
            }
            Phase::Drain { discarded } => {
                let mut sink = [0u8; 4096];
                loop {
                    match c.stream.read(&mut sink) {
                        Ok(0) => return Next::Close,
                        Ok(n) => {
                            *discarded += n;
                            if *discarded >= DRAIN_BYTES {
                                return Next::Close;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::Keep,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => return Next::Close,
                    }
                }
            }
        }
    }
}

/// Reads what the socket holds into the head buffer, up to [`MAX_HEAD`]
/// bytes, stopping as soon as a head is whole: `Ok(true)` when the client
/// closed its side (nothing more will come), `Err` when the socket failed.
fn read_head(c: &mut Conn) -> Result<bool, ()> {
    let mut chunk = [0u8; 2048];
    loop {
        let room = MAX_HEAD.saturating_sub(c.buf.len());
        if room == 0 {
            return Ok(false);
        }
        let want = room.min(chunk.len());
        match c.stream.read(&mut chunk[..want]) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                c.buf.extend_from_slice(&chunk[..n]);
                if c.buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
}

enum Parsed {
    /// Not a whole head yet.
    Partial,
    /// The bytes to send.
    Answer(Vec<u8>),
}

/// Parses a request head and answers it.
fn parse(buf: &[u8], handler: &dyn Fn(&Request<'_>) -> Response) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Parsed::Partial,
        Ok(httparse::Status::Complete(_)) => {
            let method = match req.method {
                Some("GET") => Method::Get,
                Some("HEAD") => Method::Head,
                _ => {
                    return Parsed::Answer(
                        Response::text(405, "only GET and HEAD are answered here")
                            .encode(false, "Allow: GET, HEAD\r\n"),
                    )
                }
            };
            let target = req.path.unwrap_or("/");
            let path = target.split(['?', '#']).next().unwrap_or("");
            let response = handler(&Request { path });
            Parsed::Answer(response.encode(method == Method::Head, ""))
        }
        Err(httparse::Error::TooManyHeaders) => {
            Parsed::Answer(Response::text(431, "too many request headers").encode(false, ""))
        }
        Err(e) => {
            Parsed::Answer(Response::text(400, &format!("bad request: {e}")).encode(false, ""))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream as StdStream;

    fn server() -> Server {
        Server::start("127.0.0.1:0", "test-http", |r| match r.path {
            "/" => Response::ok("text/plain", "root"),
            _ => Response::not_found(),
        })
        .unwrap()
    }

    fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
        let mut s = StdStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(bytes);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn a_get_is_answered_and_the_connection_closed() {
        let s = server();
        let r = exchange(s.addr(), b"GET /?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains("Connection: close") && r.ends_with("\r\n\r\nroot"),
            "{r}"
        );
        let r = exchange(s.addr(), b"GET /nope HTTP/1.0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    }

    #[test]
    fn a_head_gets_the_headers_of_a_get_and_no_body() {
        let s = server();
        let r = exchange(s.addr(), b"HEAD / HTTP/1.1\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200") && r.contains("Content-Length: 4"),
            "{r}"
        );
        assert!(r.ends_with("\r\n\r\n"), "{r}");
    }

    #[test]
    fn a_huge_or_negative_or_chunked_body_is_never_read_and_costs_nothing() {
        let s = server();
        for head in [
            "POST / HTTP/1.1\r\nContent-Length: 1000000000000\r\n\r\nzz",
            "POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffff\r\n",
            "GET / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
        ] {
            let r = exchange(s.addr(), head.as_bytes());
            assert!(
                r.starts_with("HTTP/1.1 405")
                    || r.starts_with("HTTP/1.1 200")
                    || r.starts_with("HTTP/1.1 400"),
                "{head:?}: {r}"
            );
        }
    }

    #[test]
    fn a_head_too_large_or_malformed_is_refused() {
        let s = server();
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_HEAD * 4));
        assert!(exchange(s.addr(), &big).starts_with("HTTP/1.1 431"));
        assert!(exchange(s.addr(), b"\x00\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
        let many: String = (0..100).map(|i| format!("H{i}: v\r\n")).collect();
        let r = exchange(s.addr(), format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes());
        assert!(r.starts_with("HTTP/1.1 431"), "{r}");
    }

    #[test]
    fn idle_connections_beyond_the_limit_do_not_keep_a_request_out() {
        let s = server();
        let idle: Vec<StdStream> = (0..MAX_CONNECTIONS + 50)
            .filter_map(|_| StdStream::connect(s.addr()).ok())
            .collect();
        assert!(idle.len() > MAX_CONNECTIONS);
        let r = exchange(s.addr(), b"GET / HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        drop(idle);
    }

    #[test]
    fn a_slow_sender_is_answered_when_its_head_is_whole() {
        let s = server();
        let mut c = StdStream::connect(s.addr()).unwrap();
        for b in b"GET / HTTP/1.1\r\n\r\n" {
            c.write_all(&[*b]).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    }
}
