//! NATS JetStream for Tandem: how a job outgrows one host.
//!
//! Tandem is a single-node engine. Past one machine, the partitions of a
//! replicated JetStream stream are the unit of scale: many Tandem
//! processes (a *group*) share them, each running the partitions it holds
//! a lease on, each checkpointing them to an object store off the host, and
//! a process that dies has its partitions taken over by the others from
//! there. Replication, consensus and retention are the server's; this
//! crate is the bridge:
//!
//! - [`source::JetStreamSource`]: one partition (`STREAM.<p>`) of a stream
//!   as a Tandem source. Its records are numbered by the producer
//!   (`Tandem-Seq`), so a restore from a checkpoint finds its place with a
//!   binary search over the stream and reads on from there.
//! - [`sink::JetStreamSink`]: exactly-once output. Each epoch (the output
//!   between two checkpoint barriers) is staged in a stream of the
//!   checkpoint store and published only once its checkpoint is durable
//!   off the host, each message with a deterministic id and conditional on
//!   the partition's last message; see [`sink`] for why neither a
//!   republish after a takeover nor a fenced member waking late stores a
//!   record twice.
//! - [`store::ObjectStoreReplicator`]: a [`tandem::checkpoint::Replicator`]
//!   that copies every checkpoint into an object-store bucket and moves its
//!   manifest pointer in a key-value bucket by compare-and-set, so that a
//!   fenced (zombie) process can publish neither a checkpoint nor output.
//! - [`group`]: partition leases with expiry, membership and rebalancing.
//!
//! The network client runs on a thread of its own ([`Client`]). Workers
//! meet it through lock-free SPSC rings and never wait on the network.
//! It reads the server only through [`guard`], a loopback relay that
//! bounds what a server (or whatever answers on its port) can make the
//! process hold.
//!
//! Addresses may carry credentials (`nats://user:pass@host:port/NAME`);
//! no message of this crate shows them: every address is shown through
//! [`redacted`] (and [`NatsUrl`]'s `Display` and `Debug`).

pub mod group;
pub mod guard;
pub mod sink;
pub mod source;
pub mod store;
pub mod stream;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Errors of this crate: each says what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An address that is not `nats://HOST:PORT/NAME`.
    #[error("{url}: {why} (expected nats://HOST:PORT/NAME)")]
    Url { url: String, why: &'static str },
    /// The server could not be reached or answered with an error.
    #[error("{what}: {source}")]
    Nats {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Something in a stream or bucket that this crate did not write, or
    /// that breaks what it relies on.
    #[error("{0}")]
    Invalid(String),
    /// A local file.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A server (`HOST:PORT`, no credentials) that could not be reached.
    #[error("nats://{server}: {source}")]
    Unreachable {
        server: String,
        #[source]
        source: std::io::Error,
    },
    /// A server (`HOST:PORT`, no credentials) that sent what no NATS
    /// server sends, or more than [`guard`] lets through.
    #[error("nats://{server}: {violation}")]
    Protocol {
        server: String,
        violation: guard::Violation,
    },
    /// Writing out what was read failed after `lines` lines.
    #[error("writing the output after {lines} lines: {source}")]
    Output {
        lines: u64,
        #[source]
        source: std::io::Error,
    },
}

/// Shorthand: `.map_err(nats_err("what"))` on any async-nats error.
pub(crate) fn nats_err<E: std::error::Error + Send + Sync + 'static>(
    what: impl Into<String>,
) -> impl FnOnce(E) -> Error {
    let what = what.into();
    move |e| Error::Nats {
        what,
        source: Box::new(e),
    }
}

/// Gets key-value bucket `bucket`, creating it if missing. Its reads go
/// through the stream's leader (no direct gets): what a process wrote and
/// was acknowledged, it reads back.
///
/// Created through its stream, configured as the client would: the
/// client's own `create_key_value` first asks for the account's
/// information, whose 2.9 form it cannot parse.
pub(crate) async fn key_value(
    js: &async_nats::jetstream::Context,
    bucket: &str,
    max_age: Duration,
    replicas: usize,
) -> Result<async_nats::jetstream::kv::Store, Error> {
    use async_nats::jetstream::stream;
    if let Ok(k) = js.get_key_value(bucket).await {
        return Ok(k);
    }
    let created = js
        .create_stream(stream::Config {
            name: format!("KV_{bucket}"),
            subjects: vec![format!("$KV.{bucket}.>")],
            max_messages_per_subject: 1,
            max_age,
            allow_rollup: true,
            deny_delete: true,
            // Reads through the stream's leader: a direct get may be
            // answered by a replica that lags, and a checkpoint pointer
            // read from one goes back (a part restored from an older
            // checkpoint than its output holds: refused by `sink::settle`,
            // and the part fails over and over).
            allow_direct: false,
            num_replicas: replicas.max(1),
            discard: stream::DiscardPolicy::New,
            ..Default::default()
        })
        .await;
    // Another process may have created it meanwhile: look again.
    match js.get_key_value(bucket).await {
        Ok(k) => Ok(k),
        Err(e) => Err(match created {
            Err(c) => nats_err(format!("key-value bucket {bucket}"))(c),
            Ok(_) => nats_err(format!("key-value bucket {bucket}"))(e),
        }),
    }
}

/// The keys of key-value bucket `bucket` that hold a message (a deleted
/// key's marker counts until it expires), in one request: the bucket's
/// stream lists its subjects. (The client's `keys()` creates a consumer a
/// call, which under load stalled a group's heartbeat loop past its lease.)
pub(crate) async fn live_keys(
    js: &async_nats::jetstream::Context,
    bucket: &str,
) -> Result<Vec<String>, Error> {
    use futures_util::StreamExt;
    let stream = js
        .get_stream_no_info(format!("KV_{bucket}"))
        .await
        .map_err(nats_err(format!("key-value bucket {bucket}")))?;
    let prefix = format!("$KV.{bucket}.");
    let subjects = stream
        .info_with_subjects(format!("{prefix}>"))
        .await
        .map_err(nats_err(format!("keys of {bucket}")))?;
    let mut keys = Vec::new();
    // Item by item, ending at the first error: the client's stream must
    // not be polled again once it failed (it panics: "`async fn` resumed
    // after completion").
    let mut subjects = std::pin::pin!(subjects);
    while let Some(r) = subjects.next().await {
        let (subject, _) = r.map_err(nats_err(format!("keys of {bucket}")))?;
        if let Some(k) = subject.strip_prefix(&prefix) {
            keys.push(k.to_string());
        }
    }
    Ok(keys)
}

/// Whether `e` is an outage (a timeout, a server or cluster that does not
/// answer yet, a connection being re-made) rather than an answer: what a
/// caller waits out instead of failing. The client's error kinds are
/// erased once boxed, so its messages are read, through the whole chain.
pub fn is_outage(e: &Error) -> bool {
    const OUTAGE: [&str; 11] = [
        "timed out",
        "timeout",
        "no responders",
        "jetstream not available",
        "jetstream not enabled",
        "unavailable",
        "not connected",
        "disconnect",
        "connection",
        "broken pipe",
        "no suitable peers",
    ];
    let mut cur: Option<&(dyn std::error::Error + 'static)> = match e {
        Error::Nats { source, .. } => Some(source.as_ref()),
        // An object read whose chunks stopped coming.
        Error::Io { source, .. } => Some(source),
        _ => return false,
    };
    while let Some(err) = cur {
        let text = err.to_string().to_ascii_lowercase();
        if OUTAGE.iter().any(|w| text.contains(w)) {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Runs `op` until it succeeds, fails with something other than an
/// outage ([`is_outage`]), `give_up` says so (a lease lost, a job
/// cancelled), or outages have lasted `patience`: backing off from 50 ms
/// to 1 s between tries. The first outage is reported on standard error
/// (once), naming `what`.
pub async fn through_outages<T, F, Fut>(
    what: &str,
    patience: Duration,
    give_up: &(dyn Fn() -> bool + Sync),
    mut op: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut backoff = Backoff::new(what, patience);
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let delay = backoff.after(e, give_up())?;
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// [`through_outages`] for a blocking call (a control thread's): `op`
/// is tried again, with backoff, while it fails with an outage, for up to
/// `patience`.
pub fn patiently<T>(
    what: &str,
    patience: Duration,
    mut op: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let mut backoff = Backoff::new(what, patience);
    loop {
        match op() {
            Ok(v) => return Ok(v),
            Err(e) => std::thread::sleep(backoff.after(e, false)?),
        }
    }
}

/// The waits between tries through an outage: from 50 ms, doubling to
/// 1 s, for up to `patience`; the first outage is reported (once).
pub(crate) struct Backoff<'a> {
    what: &'a str,
    patience: Duration,
    started: std::time::Instant,
    delay: Duration,
    told: bool,
}

impl<'a> Backoff<'a> {
    pub(crate) fn new(what: &'a str, patience: Duration) -> Self {
        Backoff {
            what,
            patience,
            started: std::time::Instant::now(),
            delay: Duration::from_millis(50),
            told: false,
        }
    }

    /// After a try that failed with `e`: how long to wait before the
    /// next, or the error to end with (`e` is no outage, `give_up`, or
    /// the outage has lasted `patience`).
    pub(crate) fn after(&mut self, e: Error, give_up: bool) -> Result<Duration, Error> {
        let (what, patience) = (self.what, self.patience);
        if !is_outage(&e) {
            return Err(e);
        }
        if give_up || self.started.elapsed() >= patience {
            return Err(Error::Invalid(format!(
                "{what}: the servers did not answer for {:.1} s (the outage bound is {patience:?}): {e}",
                self.started.elapsed().as_secs_f64()
            )));
        }
        if !self.told {
            eprintln!("tandem-nats: {what}: {e}; retrying for up to {patience:?}");
            self.told = true;
        }
        let d = self.delay;
        self.delay = (d * 2).min(Duration::from_secs(1));
        Ok(d)
    }
}

/// How long a group's members wait out servers that do not answer (a
/// cluster electing a leader, a server restarting) before they fail.
pub const DEFAULT_OUTAGE: Duration = Duration::from_secs(180);

/// `servers` (`[USER[:PASS]@]HOST:PORT`, comma-separated) without their
/// credentials: what any message may show of them.
pub fn redacted(servers: &str) -> String {
    servers
        .split(',')
        .map(|s| s.rsplit_once('@').map_or(s, |(_, host)| host))
        .collect::<Vec<_>>()
        .join(",")
}

/// Splits what follows `nats://` into the servers and the rest (`/NAME`):
/// at the first `/` after the last `@`, so that a password holding a `/`
/// stays in the servers (and out of any message).
fn split_servers(rest: &str) -> (&str, Option<&str>) {
    let from = rest.rfind('@').map_or(0, |at| at + 1);
    match rest[from..].find('/') {
        Some(i) => (&rest[..from + i], Some(&rest[from + i + 1..])),
        None => (rest, None),
    }
}

/// `url` as a message may show it: its servers without their
/// credentials (whatever its scheme: a mistyped one may still hold
/// `user:pass@`).
fn redacted_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let (servers, name) = split_servers(rest);
    let mut shown = scheme.map_or_else(String::new, |s| format!("{s}://"));
    shown.push_str(&redacted(servers));
    if let Some(name) = name {
        shown.push('/');
        shown.push_str(name);
    }
    shown
}

/// `nats://HOST:PORT/NAME`: a server and the stream or bucket on it.
///
/// `server` may hold credentials (`user:pass@host:port`); `Display` and
/// `Debug` leave them out.
#[derive(Clone, PartialEq, Eq)]
pub struct NatsUrl {
    /// `HOST:PORT` (several, comma-separated, for a cluster), each
    /// optionally `USER:PASS@` or `TOKEN@` first.
    pub server: String,
    /// The stream or bucket name.
    pub name: String,
}

impl std::str::FromStr for NatsUrl {
    type Err = Error;
    fn from_str(url: &str) -> Result<Self, Error> {
        let bad = |why| Error::Url {
            url: redacted_url(url),
            why,
        };
        let rest = url
            .strip_prefix("nats://")
            .ok_or_else(|| bad("not a nats:// address"))?;
        let (server, name) = match split_servers(rest) {
            (server, Some(name)) => (server, name),
            (_, None) => return Err(bad("no /NAME after the server")),
        };
        if server.is_empty() {
            return Err(bad("no server"));
        }
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(bad(
                "NAME must be 1–64 letters, digits, '_' or '-' (a stream or bucket name)",
            ));
        }
        Ok(NatsUrl {
            server: server.to_string(),
            name: name.to_string(),
        })
    }
}

impl std::fmt::Display for NatsUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "nats://{}/{}", redacted(&self.server), self.name)
    }
}

impl std::fmt::Debug for NatsUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsUrl")
            .field("server", &redacted(&self.server))
            .field("name", &self.name)
            .finish()
    }
}

/// What the client authenticates with: from the servers' `USER:PASS@` or
/// `TOKEN@`. No `Debug`: it must not be printed.
#[derive(Clone, PartialEq, Eq)]
enum Credentials {
    UserPass(String, String),
    Token(String),
}

/// Servers parsed: `HOST:PORT` each and the credentials they named.
struct Servers {
    hosts: Vec<String>,
    credentials: Option<Credentials>,
}

impl Servers {
    /// `servers`: `[USER[:PASS]@]HOST[:PORT]`, comma-separated (port
    /// 4222 when none is given; credentials percent-decoded, and the same
    /// for every server that names any).
    fn parse(servers: &str) -> Result<Servers, Error> {
        let bad = |why| Error::Url {
            url: format!("nats://{}", redacted(servers)),
            why,
        };
        let mut hosts = Vec::new();
        let mut credentials = None;
        for part in servers.split(',') {
            let (user, host) = match part.rsplit_once('@') {
                Some((user, host)) => (Some(user), host),
                None => (None, part),
            };
            if host.is_empty() {
                return Err(bad("a server with no HOST"));
            }
            // `HOST` alone, or `[V6]` alone: the usual port.
            let bare = host.ends_with(']') || !host.contains(':');
            hosts.push(if bare {
                format!("{host}:4222")
            } else {
                host.to_string()
            });
            let named = match user {
                None => continue,
                Some(u) => match u.split_once(':') {
                    Some((user, pass)) => Credentials::UserPass(decode(user), decode(pass)),
                    None => Credentials::Token(decode(u)),
                },
            };
            match &credentials {
                Some(c) if *c != named => {
                    return Err(bad("the servers name different credentials"))
                }
                _ => credentials = Some(named),
            }
        }
        Ok(Servers { hosts, credentials })
    }
}

/// `s` with its `%XX` escapes decoded (as a URL's user information is
/// written); a `%` not followed by two hex digits is kept.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The client's runtime: one thread of its own.
fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tandem-nats")
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            path: "tokio runtime".into(),
            source,
        })
}

/// The connection's options: timeouts, and the servers' credentials.
fn options(servers: &Servers, timeout: Duration) -> async_nats::ConnectOptions {
    let opts = async_nats::ConnectOptions::new()
        .connection_timeout(timeout)
        .request_timeout(Some(Duration::from_secs(5)));
    match &servers.credentials {
        Some(Credentials::UserPass(u, p)) => opts.user_and_password(u.clone(), p.clone()),
        Some(Credentials::Token(t)) => opts.token(t.clone()),
        None => opts,
    }
}

/// A connection to a NATS server and the thread that runs it.
///
/// All network I/O happens on the client's own runtime thread. Control
/// code (a group's coordinator, a producer, a dump) calls [`Client::block`]
/// (or [`Client::block_checked`]) from an ordinary thread; sources and
/// sinks on pinned workers only touch rings and flags the runtime thread
/// fills, never this call.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    rt: tokio::runtime::Runtime,
    js: async_nats::jetstream::Context,
    /// The servers, without credentials.
    server: String,
    /// The relay that bounds what the server sends
    /// ([`Client::connect_guarded`]).
    guard: Option<guard::Guard>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.inner.server)
            .finish()
    }
}

impl Client {
    /// Connects to `server` (`HOST:PORT`, several comma-separated for a
    /// cluster, each optionally `USER:PASS@` or `TOKEN@` first), trying
    /// for up to `timeout`, directly: the client follows the cluster's
    /// other servers as they are announced, and what a server sends is
    /// read as async-nats reads it — without a bound on a protocol line.
    /// This is the group's path (sources, sinks, checkpoints), whose
    /// throughput a relay would cost 5–10 %; a tool pointed at an address
    /// a person typed uses [`Client::connect_guarded`].
    pub fn connect(server: &str, timeout: Duration) -> Result<Client, Error> {
        let servers = Servers::parse(server)?;
        let shown = redacted(server);
        let rt = runtime()?;
        let client = rt.block_on(async {
            let opts = options(&servers, timeout);
            let addrs: Vec<async_nats::ServerAddr> = servers
                .hosts
                .iter()
                .map(|h| format!("nats://{h}").parse())
                .collect::<Result<_, _>>()
                .map_err(nats_err(format!("server address nats://{shown}")))?;
            tokio::time::timeout(timeout, opts.connect(addrs))
                .await
                .map_err(|_| {
                    Error::Invalid(format!(
                        "nats://{shown}: no NATS server answered within {timeout:?}"
                    ))
                })?
                .map_err(nats_err(format!("connecting to nats://{shown}")))
        })?;
        Ok(Client::with(rt, client, shown, None))
    }

    /// Connects to `server` (`HOST:PORT`, several comma-separated for a
    /// cluster, each optionally `USER:PASS@` or `TOKEN@` first), trying
    /// for up to `timeout`, through a [`guard`]: what the server sends is
    /// bounded ([`guard::Limits::default`]), and a server that breaks the
    /// bounds (or does not speak NATS) is an [`Error::Protocol`].
    pub fn connect_guarded(server: &str, timeout: Duration) -> Result<Client, Error> {
        let servers = Servers::parse(server)?;
        let shown = redacted(server);
        let rt = runtime()?;
        let (client, guard) = rt.block_on(async {
            let guard =
                guard::Guard::start(servers.hosts.clone(), guard::Limits::default(), timeout)
                    .await?;
            // A server's INFO names the cluster's other members: the
            // client must not dial them past the guard.
            let opts = options(&servers, timeout).ignore_discovered_servers();
            let relay: async_nats::ServerAddr = format!("nats://{}", guard.addr())
                .parse()
                .map_err(nats_err("the NATS relay's address"))?;
            let connected = tokio::select! {
                r = tokio::time::timeout(timeout, opts.connect(relay)) => r,
                e = guard.violated() => return Err(e),
            };
            // The client's own errors can only name the relay: the
            // guard's say what the server did.
            let client = match connected {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    return Err(guard
                        .explain()
                        .unwrap_or_else(|| nats_err(format!("connecting to nats://{shown}"))(e)))
                }
                Err(_) => {
                    return Err(guard.explain().unwrap_or_else(|| {
                        Error::Invalid(format!(
                            "nats://{shown}: no NATS server answered within {timeout:?}"
                        ))
                    }))
                }
            };
            Ok((client, guard))
        })?;
        Ok(Client::with(rt, client, shown, Some(guard)))
    }

    /// The client around a connection made on `rt`.
    fn with(
        rt: tokio::runtime::Runtime,
        client: async_nats::Client,
        server: String,
        guard: Option<guard::Guard>,
    ) -> Client {
        // The context spawns its own tasks: made inside the runtime.
        let js = {
            let _in = rt.enter();
            let mut js = async_nats::jetstream::new(client);
            js.set_timeout(Duration::from_secs(5));
            js
        };
        Client {
            inner: Arc::new(Inner {
                rt,
                js,
                server,
                guard,
            }),
        }
    }

    /// The JetStream context.
    pub fn js(&self) -> &async_nats::jetstream::Context {
        &self.inner.js
    }

    /// `HOST:PORT` as given, without credentials.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The server's violation of the [`guard`]'s limits, once there has
    /// been one (the client is then done: its connection is closed and
    /// no other is made).
    pub fn failure(&self) -> Option<Error> {
        self.inner.guard.as_ref().and_then(guard::Guard::failure)
    }

    /// Runs `f` to completion (control threads only: it blocks).
    pub fn block<F: Future>(&self, f: F) -> F::Output {
        self.inner.rt.block_on(f)
    }

    /// Runs `f` as [`Client::block`] does, but ends it with the server's
    /// violation as soon as there is one (rather than when a request
    /// times out), and reports the violation, not the error it caused,
    /// if `f` fails after one.
    pub fn block_checked<T, F>(&self, f: F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let Some(guard) = &self.inner.guard else {
            return self.inner.rt.block_on(f);
        };
        self.inner.rt.block_on(async {
            tokio::select! {
                r = f => r.map_err(|e| guard.failure().unwrap_or(e)),
                e = guard.violated() => Err(e),
            }
        })
    }

    /// Runs `f` on the client's thread in the background.
    pub fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.rt.spawn(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_server_and_a_stream() {
        let u: NatsUrl = "nats://127.0.0.1:4222/IN".parse().unwrap();
        assert_eq!(u.server, "127.0.0.1:4222");
        assert_eq!(u.name, "IN");
        assert_eq!(u.to_string(), "nats://127.0.0.1:4222/IN");
        let c: NatsUrl = "nats://a:1,b:2/x-y_z".parse().unwrap();
        assert_eq!(c.server, "a:1,b:2");
        for bad in [
            "http://a:1/IN",
            "nats://a:1",
            "nats:///IN",
            "nats://a:1/",
            "nats://a:1/I.N",
            "nats://a:1/I N",
        ] {
            assert!(bad.parse::<NatsUrl>().is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_never_show_in_a_url_or_its_errors() {
        let u: NatsUrl = "nats://user:s3cret@a:1,user:s3cret@b:2/IN".parse().unwrap();
        assert_eq!(u.server, "user:s3cret@a:1,user:s3cret@b:2");
        assert_eq!(u.to_string(), "nats://a:1,b:2/IN");
        assert!(!format!("{u:?}").contains("s3cret"), "{u:?}");
        // A password holding '/' or '@' stays a password.
        let u: NatsUrl = "nats://user:s3/c@ret@a:1/IN".parse().unwrap();
        assert_eq!(
            (u.server.as_str(), u.name.as_str()),
            ("user:s3/c@ret@a:1", "IN")
        );
        assert_eq!(u.to_string(), "nats://a:1/IN");
        for bad in [
            "nats://user:s3cret@a:1",
            "nats://user:s3cret@a:1/I.N",
            "http://user:s3cret@a:1/IN",
            "user:s3cret@a:1",
        ] {
            let e = bad.parse::<NatsUrl>().unwrap_err().to_string();
            assert!(!e.contains("s3"), "{bad}: {e}");
        }
        let e = Servers::parse("u:s3cret@a:1,u:other@b:2").err().unwrap();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = Servers::parse("u:s3cret@").err().unwrap();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn servers_take_the_usual_port_and_decoded_credentials() {
        let s = Servers::parse("a,b:5,[::1],[::1]:6").unwrap();
        assert_eq!(s.hosts, ["a:4222", "b:5", "[::1]:4222", "[::1]:6"]);
        assert!(s.credentials.is_none());
        let s = Servers::parse("us%40r:p%3Ass%zz@a:1,b:2").unwrap();
        assert!(
            s.credentials == Some(Credentials::UserPass("us@r".into(), "p:ss%zz".into())),
            "decoded"
        );
        let s = Servers::parse("tok@a:1").unwrap();
        assert!(s.credentials == Some(Credentials::Token("tok".into())));
        assert_eq!(redacted("u:p@a:1,b:2,t@c:3"), "a:1,b:2,c:3");
    }
}
