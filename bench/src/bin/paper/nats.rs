//! `paper` over NATS JetStream (see `tandem_nats`): `--produce` publishes
//! the generated records into a partitioned stream; `--source … --group G`
//! runs one member of a group, which shares the partitions with the other
//! members, each partition a job of its own, checkpointed to the object
//! store of `--checkpoint-store` and published exactly once to `--sink`.

use crate::args::Args;
use anyhow::{ensure, Context};
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem::{CheckpointConfig, JobBuilder, JobError, Output, RuntimeConfig};
use tandem_bench::errln;
use tandem_bench::paper::{self, gen, names, Flat, Input, PaperOut};
use tandem_nats::group::{run_cancellable, Group, GroupConfig, Part};
use tandem_nats::sink::{settle, JetStreamSink, SinkTarget};
use tandem_nats::source::JetStreamSource;
use tandem_nats::store::CheckpointStore;
use tandem_nats::stream::{ensure_stream, partitions_of, Producer, StreamSpec};
use tandem_nats::{patiently, Client, NatsUrl};

/// Whether the flags ask for a NATS mode.
pub fn wanted(args: &Args) -> bool {
    args.produce.is_some() || args.source.is_some()
}

pub fn main(args: &Args, m: &clap::ArgMatches) -> anyhow::Result<()> {
    match (&args.produce, &args.source) {
        (Some(url), None) => {
            refuse_unused(m, PRODUCE_FLAGS, "--produce")?;
            produce(args, &url.parse()?)
        }
        (None, Some(url)) => {
            let used = if args.consume_only {
                CONSUME_FLAGS
            } else {
                MEMBER_FLAGS
            };
            refuse_unused(m, used, "a group member (--source)")?;
            member(args, &url.parse()?)
        }
        _ => anyhow::bail!("--produce and --source are two different runs: give one"),
    }
}

/// The flags `--produce` reads.
const PRODUCE_FLAGS: &[&str] = &[
    "produce",
    "partitions",
    "records",
    "seed",
    "malformed_every",
    "replicas",
    "dup_window_s",
    "pack_bytes",
];

/// The flags a member reads.
const MEMBER_FLAGS: &[&str] = &[
    "source",
    "sink",
    "group",
    "checkpoint_store",
    "lease_ms",
    "replicas",
    "dup_window_s",
    "outage_s",
    "resume_finished",
    "checkpoint_interval_ms",
    "run_dir",
    "faults",
];

/// The flags a `--consume-only` member reads.
const CONSUME_FLAGS: &[&str] = &[
    "source",
    "group",
    "consume_only",
    "lease_ms",
    "replicas",
    "outage_s",
    "resume_finished",
];

/// Refuses every flag given on the command line that `mode` does not
/// read: a flag accepted and ignored is a silent surprise.
fn refuse_unused(m: &clap::ArgMatches, used: &[&str], mode: &str) -> anyhow::Result<()> {
    use clap::CommandFactory;
    let cmd = Args::command();
    let ignored: Vec<String> = m
        .ids()
        .map(|id| id.as_str())
        // Arguments only (the derive's group of them is an id too).
        .filter(|id| cmd.get_arguments().any(|a| a.get_id() == *id))
        .filter(|id| !used.contains(id))
        .filter(|id| m.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| format!("--{}", id.replace('_', "-")))
        .collect();
    ensure!(
        ignored.is_empty(),
        "{} {} not read by {mode}: leave {} out",
        ignored.join(", "),
        if ignored.len() == 1 { "is" } else { "are" },
        if ignored.len() == 1 { "it" } else { "them" }
    );
    Ok(())
}

fn connect(server: &str) -> anyhow::Result<Client> {
    Ok(Client::connect(server, Duration::from_secs(10))?)
}

/// `--produce`: the generated records, partitioned by user ID, and an end
/// marker per partition.
fn produce(args: &Args, url: &NatsUrl) -> anyhow::Result<()> {
    ensure!(
        (1..=1024).contains(&args.partitions),
        "--partitions must be 1 to 1024"
    );
    let available = tandem::sys::affinity::available_cores().len();
    let t = Instant::now();
    let input = Input::generate(args.records, args.seed, args.malformed_every, available);
    errln!(
        "generated {} records in {:.2} s",
        input.len(),
        t.elapsed().as_secs_f64()
    );
    let client = connect(&url.server)?;
    let mut spec = StreamSpec::new(&url.name);
    spec.replicas = args.replicas;
    spec.duplicate_window = Duration::from_secs(args.dup_window_s);
    spec.purpose = Some(INPUT_PURPOSE.into());
    let parts = args.partitions;
    let t = Instant::now();
    let published = client.block(async {
        let mut stream = ensure_stream(client.js(), &spec).await?;
        let held = stream
            .info()
            .await
            .map_err(|e| anyhow::anyhow!("stream {}: {e}", url.name))?
            .state
            .messages;
        ensure!(
            held == 0,
            "stream {} already holds {held} messages: produce into a new stream (partition numbering starts at 0)",
            url.name
        );
        let mut producer = Producer::new(&client, &url.name).packed(args.pack_bytes as usize);
        let mut next = vec![0u64; parts as usize];
        for n in 0..input.len() {
            let line = input.line(n);
            // A malformed record has no user: it goes by its number (and
            // is dead-lettered by whichever member reads it).
            let p = match paper::parse(line) {
                Ok(f) => f.user_id % parts,
                Err(_) => (n % parts as u64) as u32,
            };
            let seq = &mut next[p as usize];
            producer
                .record(
                    p,
                    *seq,
                    Some(gen::event_time(input.seed(), n)),
                    Bytes::copy_from_slice(line),
                )
                .await?;
            *seq += 1;
            if n % 65536 == 0 && tandem_bench::cli::interrupted() {
                anyhow::bail!("interrupted after {n} records: the stream is incomplete (no end markers)");
            }
        }
        for (p, &n) in next.iter().enumerate() {
            producer.end(p as u32, n).await?;
        }
        producer.flush().await?;
        Ok(next)
    })?;
    let secs = t.elapsed().as_secs_f64();
    errln!(
        "published {} records to {} partitions of {} in {secs:.2} s ({:.0} records/s); per partition: {published:?}",
        input.len(),
        parts,
        url,
        input.len() as f64 / secs
    );
    Ok(())
}

/// What an input stream says of itself (its description).
const INPUT_PURPOSE: &str = "a Tandem input stream (partitions of records numbered by Tandem-Seq)";

/// What a group's output stream says of itself.
fn output_purpose(group: &str) -> String {
    format!("the output of Tandem group {group}")
}

/// What every part's run needs.
struct Member {
    /// Records in and out (sources, sinks, staged epochs).
    client: Client,
    /// The checkpoint store on the data connection (staged epochs).
    staging: Option<CheckpointStore>,
    name: String,
    group: String,
    input: String,
    output: Option<String>,
    store: Option<CheckpointStore>,
    work: PathBuf,
    /// `--run-dir`: where dead-lettered records are kept.
    keep: Option<PathBuf>,
    checkpoint_ms: u64,
    /// How long outages are waited out.
    outage: Duration,
    /// `--fault`: commit faults, each fired once in any part's job.
    faults: Option<tandem_fault_inject::FaultInjector>,
    consumed: AtomicU64,
    emitted: AtomicU64,
}

fn member_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    format!("{host}-{}", std::process::id())
}

/// `--source`: one member of `--group`, until every partition is done.
fn member(args: &Args, input: &NatsUrl) -> anyhow::Result<()> {
    let group = args
        .group
        .clone()
        .context("--source needs --group NAME (the members that share the partitions)")?;
    ensure!(
        !group.is_empty()
            && group
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
        "--group must be letters, digits, '_' or '-'"
    );
    let consume_only = args.consume_only;
    let (output, store_url) = if consume_only {
        (None, None)
    } else {
        let out: NatsUrl = args
            .sink
            .as_deref()
            .context("--source needs --sink nats://HOST:PORT/STREAM (or --consume-only)")?
            .parse()?;
        let store: NatsUrl = args
            .checkpoint_store
            .as_deref()
            .context(
                "--source needs --checkpoint-store nats://HOST:PORT/BUCKET (or --consume-only)",
            )?
            .parse()?;
        ensure!(
            out.name != input.name || out.server != input.server,
            "--sink and --source name the same stream"
        );
        (Some(out), Some(store))
    };
    let client = connect(&input.server)?;
    // Every call before the first claim waits out a cluster that does not
    // answer yet (a leader election), as the parts' calls do.
    let outage = Duration::from_secs(args.outage_s);
    let parts = patiently("reading the input stream", outage, || {
        client.block(async {
            let mut s = client.js().get_stream(&input.name).await.map_err(|e| {
                tandem_nats::Error::Nats {
                    what: format!("stream {input}"),
                    source: Box::new(e),
                }
            })?;
            partitions_of(&mut s).await
        })
    })
    .with_context(|| format!("stream {input} (publish it with --produce)"))?;
    ensure!(parts > 0, "stream {input} holds no partition");
    // A second connection for the group's control traffic: a lease renewal
    // must not wait behind megabytes of output on the data connection.
    let control = connect(&input.server)?;
    let (store, staging) = match &store_url {
        Some(u) => {
            let open = |c: &Client| {
                patiently(&format!("checkpoint store {u}"), outage, || {
                    CheckpointStore::open(c, &u.name, args.replicas)
                })
            };
            (Some(open(&control)?), Some(open(&client)?))
        }
        None => (None, None),
    };
    if let Some(out) = &output {
        let mut spec = StreamSpec::new(&out.name);
        spec.replicas = args.replicas;
        spec.duplicate_window = Duration::from_secs(args.dup_window_s);
        // One group's output: no other group, and no producer, writes
        // into it (see tandem_nats::sink).
        spec.purpose = Some(output_purpose(&group));
        patiently(&format!("--sink {out}"), outage, || {
            client.block(ensure_stream(client.js(), &spec)).map(drop)
        })
        .with_context(|| format!("--sink {out}"))?;
    }
    // What every member of the group must run alike: streams and buckets
    // by name (members may reach a cluster through different servers).
    let mut identity = std::collections::BTreeMap::new();
    identity.insert("input".to_string(), input.name.clone());
    identity.insert("partitions".to_string(), parts.to_string());
    identity.insert(
        "mode".to_string(),
        if consume_only {
            "consume-only"
        } else {
            "pipeline"
        }
        .to_string(),
    );
    if let Some(out) = &output {
        identity.insert("output".to_string(), out.name.clone());
    }
    if let Some(store) = &store_url {
        identity.insert("checkpoint store".to_string(), store.name.clone());
    }
    identity.insert("job".to_string(), JOB_SHAPE.to_string());
    let scratch = tandem::sys::scratch::ScratchDir::unique(
        args.run_dir.as_deref().unwrap_or(&std::env::temp_dir()),
        "nats-member",
    )
    .context("a work directory for the member's checkpoints")?;
    let faults = member_faults(&args.faults)?;
    let name = member_name();
    let lease = Duration::from_millis(args.lease_ms);
    let config = GroupConfig {
        name: group.clone(),
        member: name.clone(),
        parts,
        lease,
        replicas: args.replicas,
        outage,
        identity,
        resume_finished: args.resume_finished,
    };
    let g = patiently(&format!("joining group {group}"), outage, || {
        Group::join(&control, config.clone())
    })?;
    if patiently("reading the group's progress", outage, || g.finished())? {
        errln!("group {group} has finished: nothing to run (--resume-finished)");
    }
    let m = Arc::new(Member {
        client: client.clone(),
        staging,
        name: name.clone(),
        group: group.clone(),
        input: input.name.clone(),
        output: output.map(|o| o.name),
        store,
        work: scratch.path().to_path_buf(),
        keep: args.run_dir.clone(),
        checkpoint_ms: args.checkpoint_interval_ms.unwrap_or(1000),
        outage,
        faults,
        consumed: AtomicU64::new(0),
        emitted: AtomicU64::new(0),
    });
    errln!(
        "member {name} of group {group}: {parts} partitions of {input}, lease {} ms{}",
        args.lease_ms,
        if consume_only {
            ", consume only".to_string()
        } else {
            format!(", checkpoints every {} ms", m.checkpoint_ms)
        }
    );
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if tandem_bench::cli::interrupted() {
                    stop.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let t = Instant::now();
    let started_ms = unix_ms();
    let mm = Arc::clone(&m);
    let report = g.run(&stop, move |part| run_part(&mm, part, consume_only));
    let interrupted = stop.swap(true, Ordering::Relaxed);
    let _ = watcher.join();
    let report = report?;
    let secs = t.elapsed().as_secs_f64();
    let consumed = m.consumed.load(Ordering::Relaxed);
    // From this member's first claim on: the run without the start's
    // quiet lease time (members wait one lease to see each other).
    let running = report
        .claimed
        .iter()
        .map(|(_, ms)| *ms)
        .min()
        .map(|first| secs - first.saturating_sub(started_ms) as f64 / 1e3);
    let line = serde_json::json!({
        "member": name,
        "group": group,
        "seconds": secs,
        "records": consumed,
        "records_per_sec": consumed as f64 / secs,
        "seconds_running": running,
        "records_per_sec_running": running.map(|r| consumed as f64 / r.max(1e-9)),
        "output": m.emitted.load(Ordering::Relaxed),
        "faults_fired": m.faults.as_ref().map_or(0, |f| f.fired()),
        "completed": report.completed,
        "claimed": report
            .claimed
            .iter()
            .map(|(p, ms)| serde_json::json!({"part": p, "unix_ms": ms}))
            .collect::<Vec<_>>(),
        "given_up": report
            .given_up
            .iter()
            .map(|(p, why)| serde_json::json!({"part": p, "why": why}))
            .collect::<Vec<_>>(),
    });
    println!("{line}");
    ensure!(
        !interrupted,
        "interrupted: this member's partitions were given back to the group"
    );
    Ok(())
}

/// A member's `--fault`s: commit faults of the sink (a part's job has no
/// input record numbering the member knows of), armed once for the whole
/// run — each fires in the first part's job that reaches it.
fn member_faults(
    faults: &[tandem_fault_inject::FaultSpec],
) -> anyhow::Result<Option<tandem_fault_inject::FaultInjector>> {
    if faults.is_empty() {
        return Ok(None);
    }
    for f in faults {
        ensure!(
            f.kind == tandem_fault_inject::FaultKind::Commit && f.target == names::SINK,
            "--fault {f}: a group member takes commit faults of `{}` only (commit@{}:N or commit@{}:final)",
            names::SINK,
            names::SINK,
            names::SINK
        );
    }
    let schedule = tandem_fault_inject::Schedule {
        faults: faults.to_vec(),
    };
    Ok(Some(
        tandem_fault_inject::FaultInjector::builder(&schedule).build()?,
    ))
}

/// The job each part runs, as every member must: its operators in order
/// (a member of another version of this program differs here).
const JOB_SHAPE: &str =
    "paper v2: source(1) > flatmap > count > pipeline(filter, map, keyed) > emitted > sink(1)";

fn encode(o: &PaperOut, buf: &mut Vec<u8>) {
    paper::write_line(buf, o);
    if buf.last() == Some(&b'\n') {
        buf.pop();
    }
}

fn parse_into(bytes: Bytes, out: &mut Output<'_, Flat>) {
    match paper::parse(&bytes) {
        Ok(flat) => out.emit(flat),
        Err(e) => out.dead_letter(format_args!("invalid answer record: {e}"), &bytes),
    }
}

/// Runs one part to its end (or until it is cancelled).
fn run_part(m: &Member, part: Part, consume_only: bool) -> Result<(), String> {
    let t0 = Instant::now();
    let dir = m.work.join(format!("{}-{}", part.name, rand_tag()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let r = run_part_in(m, &part, consume_only, &dir, t0);
    keep_dead_letters(m, &part, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// The records the part's job dead-lettered (invalid input) outlive its
/// scratch directory: moved into `--run-dir`, or at least counted.
fn keep_dead_letters(m: &Member, part: &Part, dir: &Path) {
    let file = dir.join("dead-letters.jsonl");
    let Ok(text) = std::fs::read_to_string(&file) else {
        return;
    };
    let n = text.lines().count();
    match &m.keep {
        Some(keep) => {
            let to = keep.join(format!(
                "dead-letters-{}-{}-{}.jsonl",
                m.group,
                part.name,
                rand_tag()
            ));
            match std::fs::rename(&file, &to) {
                Ok(()) => errln!(
                    "{}: {n} dead-lettered records of {} kept in {}",
                    m.name,
                    part.name,
                    to.display()
                ),
                Err(e) => errln!(
                    "{}: {n} dead-lettered records of {} lost: {}: {e}",
                    m.name,
                    part.name,
                    to.display()
                ),
            }
        }
        None => errln!(
            "{}: {n} records of {} were dead-lettered (give --run-dir to keep them)",
            m.name,
            part.name
        ),
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn rand_tag() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn run_part_in(
    m: &Member,
    part: &Part,
    consume_only: bool,
    dir: &Path,
    t0: Instant,
) -> Result<(), String> {
    let job = JobBuilder::new("paper");
    let (client, stream, p) = (m.client.clone(), m.input.clone(), part.partition);
    let outage = m.outage;
    let source = job
        .source(names::SOURCE, move |_| {
            JetStreamSource::new(&client, &stream, p).patience(outage)
        })
        .parallelism(1);
    let mut config = RuntimeConfig::default().cores(1).pin(false).run_dir(dir);
    config.spin = Duration::ZERO;
    config.yield_for = Duration::ZERO;
    let mut restored = None;
    if consume_only {
        let counted = Arc::new(AtomicU64::new(0));
        let c = Arc::clone(&counted);
        source.for_each("count", move |_| {
            c.fetch_add(1, Ordering::Relaxed);
        });
        let r = run(job, &config, part);
        m.consumed
            .fetch_add(counted.load(Ordering::Relaxed), Ordering::Relaxed);
        return r;
    }
    let store = m.store.as_ref().expect("a store unless consume-only");
    let cancelled = || part.cancelled.load(Ordering::Acquire);
    let claim = store
        .claim(&m.group, &part.name, &m.name, m.outage, &cancelled)
        .map_err(|e| e.to_string())?;
    let pointer = store.replicator(&m.group, &part.name, claim.clone(), m.outage);
    let target = SinkTarget {
        client: m.client.clone(),
        store: m.staging.clone().expect("a store unless consume-only"),
        stream: m.output.clone().expect("an output unless consume-only"),
        job: m.group.clone(),
        part: part.name.clone(),
        partition: p,
        pointer: Arc::clone(&pointer),
        batch_bytes: 32 << 10,
        patience: m.outage,
    };
    let finished = settle(&target, &claim.pointer).map_err(|e| e.to_string())?;
    if finished {
        errln!(
            "{}: {} had finished under its previous owner: its staged output is published",
            m.name,
            part.name
        );
        return Ok(());
    }
    if let Some(k) = claim.pointer.checkpoint {
        let names = store
            .download(&m.group, &part.name, k, dir, m.outage, &cancelled)
            .map_err(|e| e.to_string())?;
        pointer.adopt(k, names);
        config = config.restore_from(dir);
        restored = Some(k);
    }
    errln!(
        "{}: runs {} from {} (ready in {} ms)",
        m.name,
        part.name,
        restored.map_or("the start".to_string(), |k| format!("checkpoint {k}")),
        t0.elapsed().as_millis()
    );
    let parsed = source.flat_map(names::FLATMAP, parse_into);
    let levels = paper::levels(&job);
    let emitted = Arc::new(AtomicU64::new(0));
    let e = Arc::clone(&emitted);
    let consumed = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&consumed);
    let counted = parsed.map("count", move |f: Flat| {
        c.fetch_add(1, Ordering::Relaxed);
        f
    });
    paper::pipeline(&counted, &levels, &|_| false)
        .map("emitted", move |o: PaperOut| {
            e.fetch_add(1, Ordering::Relaxed);
            o
        })
        .sink(names::SINK, move |info| {
            JetStreamSink::new(
                target.clone(),
                info.restored.as_ref().map(|r| r.checkpoint),
                encode,
            )
        });
    let mut ck = CheckpointConfig::every(Duration::from_millis(m.checkpoint_ms)).replicate(pointer);
    ck.dir = Some(dir.to_path_buf());
    if let Some(f) = &m.faults {
        config = config.probes(Arc::new(f.clone()));
    }
    // A checkpoint the servers cannot take during an outage fails and the
    // next one tries again; the job waits the outage out (its source and
    // sink bound it), it does not fail for it.
    ck.tolerable_failures = u32::MAX;
    config = config.checkpoint(ck);
    let r = run(job, &config, part);
    m.consumed
        .fetch_add(consumed.load(Ordering::Relaxed), Ordering::Relaxed);
    m.emitted
        .fetch_add(emitted.load(Ordering::Relaxed), Ordering::Relaxed);
    r
}

/// Runs a part's job to its end, or until the part is cancelled.
fn run(job: JobBuilder, config: &RuntimeConfig, part: &Part) -> Result<(), String> {
    let handle = job
        .build()
        .map_err(|e| e.to_string())?
        .start(config)
        .map_err(|e| e.to_string())?;
    match run_cancellable(handle, &part.cancelled) {
        Ok(_) => Ok(()),
        Err(JobError::Cancelled) => Err("cancelled".into()),
        Err(e) => Err(e.to_string()),
    }
}
