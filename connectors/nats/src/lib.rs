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
//!   between two checkpoint barriers) is staged in the object store and
//!   published only once its checkpoint is durable off the host, each
//!   message with a deterministic `Nats-Msg-Id`; see [`sink`] for what
//!   makes a republish after a takeover a no-op.
//! - [`store::ObjectStoreReplicator`]: a [`tandem::checkpoint::Replicator`]
//!   that copies every checkpoint into an object-store bucket and moves its
//!   manifest pointer in a key-value bucket by compare-and-set, so that a
//!   fenced (zombie) process can publish neither a checkpoint nor output.
//! - [`group`]: partition leases with expiry, membership and rebalancing.
//!
//! The network client runs on a thread of its own ([`Client`]). Workers
//! meet it through lock-free SPSC rings and never wait on the network.

pub mod group;
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

/// Gets key-value bucket `bucket`, creating it if missing.
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
            allow_direct: true,
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
    let all: Vec<_> = subjects.collect().await;
    for r in all {
        let (subject, _) = r.map_err(nats_err(format!("keys of {bucket}")))?;
        if let Some(k) = subject.strip_prefix(&prefix) {
            keys.push(k.to_string());
        }
    }
    Ok(keys)
}

/// `nats://HOST:PORT/NAME`: a server and the stream or bucket on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsUrl {
    /// `HOST:PORT` (several, comma-separated, for a cluster).
    pub server: String,
    /// The stream or bucket name.
    pub name: String,
}

impl std::str::FromStr for NatsUrl {
    type Err = Error;
    fn from_str(url: &str) -> Result<Self, Error> {
        let bad = |why| Error::Url {
            url: url.to_string(),
            why,
        };
        let rest = url
            .strip_prefix("nats://")
            .ok_or_else(|| bad("not a nats:// address"))?;
        let (server, name) = rest
            .split_once('/')
            .ok_or_else(|| bad("no /NAME after the server"))?;
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
        write!(f, "nats://{}/{}", self.server, self.name)
    }
}

/// A connection to a NATS server and the thread that runs it.
///
/// All network I/O happens on the client's own runtime thread. Control
/// code (a group's coordinator, a producer, a dump) calls [`Client::block`]
/// from an ordinary thread; sources and sinks on pinned workers only touch
/// rings and flags the runtime thread fills, never this call.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    rt: tokio::runtime::Runtime,
    js: async_nats::jetstream::Context,
    server: String,
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
    /// cluster), trying for up to `timeout`.
    pub fn connect(server: &str, timeout: Duration) -> Result<Client, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tandem-nats")
            .enable_all()
            .build()
            .map_err(|source| Error::Io {
                path: "tokio runtime".into(),
                source,
            })?;
        let addrs: Vec<String> = server.split(',').map(|s| format!("nats://{s}")).collect();
        let client = rt.block_on(async {
            let opts = async_nats::ConnectOptions::new()
                .connection_timeout(timeout)
                .request_timeout(Some(Duration::from_secs(5)));
            let addrs: Vec<async_nats::ServerAddr> = addrs
                .iter()
                .map(|a| a.parse())
                .collect::<Result<_, _>>()
                .map_err(nats_err(format!("server address {server}")))?;
            tokio::time::timeout(timeout, opts.connect(addrs))
                .await
                .map_err(|_| {
                    Error::Invalid(format!(
                        "{server}: no NATS server answered within {timeout:?}"
                    ))
                })?
                .map_err(nats_err(format!("connecting to {server}")))
        })?;
        // The context spawns its own tasks: made inside the runtime.
        let js = {
            let _in = rt.enter();
            let mut js = async_nats::jetstream::new(client);
            js.set_timeout(Duration::from_secs(5));
            js
        };
        Ok(Client {
            inner: Arc::new(Inner {
                rt,
                js,
                server: server.to_string(),
            }),
        })
    }

    /// The JetStream context.
    pub fn js(&self) -> &async_nats::jetstream::Context {
        &self.inner.js
    }

    /// `HOST:PORT` as given.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// Runs `f` to completion (control threads only: it blocks).
    pub fn block<F: Future>(&self, f: F) -> F::Output {
        self.inner.rt.block_on(f)
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
}
