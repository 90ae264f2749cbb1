//! SPSC ring throughput: Tandem's ring against rtrb and crossbeam's
//! `ArrayQueue`, single-item and batched, in one run on the same two cores.
//!
//! Each measurement moves `--messages` 64-byte messages (`[u64; 8]`, the
//! sequence number in word 0) from a producer thread to a consumer thread
//! pinned to separate cores. Both sides busy-spin (`spin_loop`) on full or
//! empty. The consumer checks the sequence order and sums word 7, so no
//! work can be optimised away. The figure is messages / wall time from the
//! start barrier until the consumer has seen the last message; for each
//! implementation the median of `--runs` runs is reported, runs of the
//! different implementations being interleaved.
//!
//! Every flag is checked before any work (an error names the flag):
//! counts and sizes have maxima a real measurement never needs to pass
//! (see each flag's help), the ring must fit the memory this process may
//! still take, and the cores must be ones it may run on. A run is
//! interrupted by `SIGINT`/`SIGTERM` within a chunk of messages
//! ([`CHUNK`]) and exits with 128 + the signal.
//!
//! Every implementation's producer and consumer loop is an
//! `#[inline(always)]` function passed to `measure` as a zero-sized fn item
//! (not a `fn` pointer), so each loop is compiled into its thread's body
//! with the queue handle as a local, as in a real operator loop.
//!
//! ```text
//! cargo run -p tandem-bench --release --bin ring -- --report ring.json
//! ```

use std::{
    ops::Range,
    path::PathBuf,
    process::ExitCode,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Barrier,
    },
    thread,
    time::{Duration, Instant},
};
use tandem_bench::report::median;

use anyhow::{bail, ensure, Result};
use clap::Parser;
use crossbeam_queue::ArrayQueue;
use tandem::queue::spsc;
use tandem::sys::fs::human_bytes;
use tandem_bench::cli::RaiseOnDrop;
use tandem_bench::{cli, outln};

#[path = "ring/loops.rs"]
mod loops;
use loops::*;

/// The most messages a measurement moves: at ~100 M msg/s, some twenty
/// minutes for each implementation and run.
const MAX_MESSAGES: u64 = 100_000_000_000;
/// The largest ring: 2^22 slots, 256 MiB of 64-byte messages — past any
/// cache a core reaches, where the figure is the memory's, not the ring's.
const MAX_CAPACITY: usize = 1 << 22;
/// The most runs per implementation: a median of a thousand is as good
/// as it gets.
const MAX_RUNS: usize = 1000;
/// The producer looks for a signal between chunks of this many messages
/// (a few milliseconds' worth), outside the measured loops.
const CHUNK: u64 = 1 << 20;

/// Throughput of Tandem's SPSC ring vs rtrb and crossbeam ArrayQueue.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Messages per measurement, 1 to 10^11.
    #[arg(long, default_value_t = 50_000_000)]
    messages: u64,
    /// Batch size of the batched modes, 1 to --capacity.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Ring capacity in slots, 2 to 2^22 (4194304: a 256 MiB ring) and as
    /// the memory this process may still take allows.
    #[arg(long, default_value_t = 4096)]
    capacity: usize,
    /// Core the producer is pinned to [default: the first core this
    /// process may run on].
    #[arg(long)]
    producer_core: Option<usize>,
    /// Core the consumer is pinned to [default: the first other core this
    /// process may run on].
    #[arg(long)]
    consumer_core: Option<usize>,
    /// Runs per implementation, 1 to 1000; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Write the medians (msg/s) as JSON to this file.
    #[arg(long, conflicts_with = "only")]
    report: Option<PathBuf>,
    /// Measure only these implementations (e.g. `--only tandem_batched
    /// --only rtrb_batched`); ratios need the rtrb baseline of the mode.
    #[arg(long, value_parser = parse_impl)]
    only: Vec<Impl>,
}

fn parse_impl(s: &str) -> Result<Impl, String> {
    Impl::ALL
        .into_iter()
        .find(|i| i.key() == s)
        .ok_or_else(|| format!("unknown implementation {s:?}"))
}

/// The message: 64 bytes, sequence number in word 0.
type Msg = [u64; 8];

#[inline(always)]
fn msg(seq: u64) -> Msg {
    [seq, 1, 2, 3, 4, 5, 6, seq]
}

/// Consumer-side check: strict order; returns word 7 for the checksum.
#[inline(always)]
fn check(m: &Msg, expected: u64) -> u64 {
    if m[0] != expected {
        panic!("out of order: got {}, expected {expected}", m[0]);
    }
    m[7]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Impl {
    TandemSingle,
    TandemBatched,
    RtrbSingle,
    RtrbBatched,
    ArrayQueueSingle,
    ArrayQueueBatched,
}

impl Impl {
    const ALL: [Impl; 6] = [
        Impl::TandemSingle,
        Impl::TandemBatched,
        Impl::RtrbSingle,
        Impl::RtrbBatched,
        Impl::ArrayQueueSingle,
        Impl::ArrayQueueBatched,
    ];

    fn key(self) -> &'static str {
        match self {
            Impl::TandemSingle => "tandem_single",
            Impl::TandemBatched => "tandem_batched",
            Impl::RtrbSingle => "rtrb_single",
            Impl::RtrbBatched => "rtrb_batched",
            Impl::ArrayQueueSingle => "arrayqueue_single",
            Impl::ArrayQueueBatched => "arrayqueue_batched",
        }
    }

    fn baseline(self) -> Impl {
        match self {
            Impl::TandemSingle | Impl::RtrbSingle | Impl::ArrayQueueSingle => Impl::RtrbSingle,
            _ => Impl::RtrbBatched,
        }
    }
}

/// Where to pin the two threads, if anywhere.
#[derive(Clone, Copy)]
struct Pinning {
    producer: Option<core_affinity::CoreId>,
    consumer: Option<core_affinity::CoreId>,
}

/// The cores the two threads are pinned to: those the flags name (each
/// one this process may run on), else the first two it may run on; none
/// where it may run on one core only (the note says so).
fn pinning(args: &Args) -> Result<(Pinning, Option<String>)> {
    let cores = tandem::sys::affinity::available_cores();
    for (flag, core) in [
        ("--producer-core", args.producer_core),
        ("--consumer-core", args.consumer_core),
    ] {
        if let Some(c) = core {
            ensure!(
                cores.contains(&c),
                "{flag} {c}: not a core this process may run on (it may run on {})",
                core_list(&cores)
            );
        }
    }
    if let (Some(p), Some(c)) = (args.producer_core, args.consumer_core) {
        ensure!(
            p != c,
            "--producer-core and --consumer-core are both {p}: they must differ"
        );
    }
    let other = |than: Option<usize>| cores.iter().copied().find(|&c| Some(c) != than);
    let producer = args.producer_core.or_else(|| other(args.consumer_core));
    let consumer = args.consumer_core.or_else(|| other(producer));
    match (producer, consumer) {
        (Some(p), Some(c)) if p != c => Ok((
            Pinning {
                producer: Some(core_affinity::CoreId { id: p }),
                consumer: Some(core_affinity::CoreId { id: c }),
            },
            None,
        )),
        _ => Ok((
            Pinning {
                producer: None,
                consumer: None,
            },
            Some(format!(
                "note: this process may run on {} core(s) only: running UNPINNED (producer and consumer share a core)",
                cores.len()
            )),
        )),
    }
}

/// Core ids as ranges: `0-3, 8, 10-11`.
fn core_list(cores: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cores[i].to_string()
        } else {
            format!("{}-{}", cores[i], cores[j])
        });
        i = j + 1;
    }
    if parts.is_empty() {
        "no core".into()
    } else {
        format!("core(s) {}", parts.join(", "))
    }
}

/// Bytes one ring of `capacity` slots takes, the largest of the three
/// implementations': Tandem's rounds the capacity up to a power of two,
/// `ArrayQueue` keeps a stamp beside each message.
fn ring_bytes(capacity: usize) -> u64 {
    let msg = std::mem::size_of::<Msg>() as u64;
    let tandem = capacity.next_power_of_two() as u64 * msg;
    let array_queue = capacity as u64 * (msg + std::mem::size_of::<usize>() as u64);
    tandem.max(array_queue)
}

/// Checks every flag before any work; the error names the flag.
fn check_args(args: &Args) -> Result<()> {
    ensure!(
        (1..=MAX_MESSAGES).contains(&args.messages),
        "--messages {}: 1 to {MAX_MESSAGES}",
        args.messages
    );
    ensure!(
        (1..=MAX_RUNS).contains(&args.runs),
        "--runs {}: 1 to {MAX_RUNS}",
        args.runs
    );
    ensure!(
        (2..=MAX_CAPACITY).contains(&args.capacity),
        "--capacity {}: 2 to {MAX_CAPACITY} slots",
        args.capacity
    );
    ensure!(
        (1..=args.capacity).contains(&args.batch),
        "--batch {}: 1 to --capacity ({})",
        args.batch,
        args.capacity
    );
    let need = ring_bytes(args.capacity);
    if let Some(free) = tandem::sys::limits::available_memory() {
        ensure!(
            need <= free,
            "--capacity {}: a ring of that many 64-byte messages takes {}, more than the {} this process may still take",
            args.capacity,
            human_bytes(need),
            human_bytes(free)
        );
    }
    if let Some(r) = &args.report {
        tandem_bench::paths::output_file("--report", r)?;
    }
    Ok(())
}

/// Runs `produce` and `consume` on their cores and returns the wall time
/// from the start barrier to the consumer's last message; `None` if the
/// run was interrupted by a signal.
///
/// Generic over the loop bodies (not `fn` pointers) so that each
/// implementation's loop is compiled and inlined on its own. The producer
/// moves the messages in chunks of [`CHUNK`], looking for a signal between
/// them and wherever it spins on a full ring. A side that stops early
/// (interrupted, or panicked) raises `stop`, which the other reads only
/// where it spins on a full or empty ring: the measured path is
/// unchanged, and neither side waits for a gone one.
fn measure<P, C>(
    pin: Pinning,
    (p, c): (P, C),
    produce: impl Fn(&mut P, Range<u64>, usize, &AtomicBool) -> bool + Send + 'static,
    consume: impl FnOnce(C, u64, usize, &AtomicBool) -> (u64, u64) + Send + 'static,
    messages: u64,
    batch: usize,
) -> Result<Option<Duration>>
where
    P: Send + 'static,
    C: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(2));
    let stop = Arc::new(AtomicBool::new(false));
    let (b, stop_p) = (barrier.clone(), stop.clone());
    let producer = thread::spawn(move || {
        let mut raised = RaiseOnDrop::armed(&stop_p);
        if let Some(core) = pin.producer {
            core_affinity::set_for_current(core);
        }
        b.wait();
        let mut p = p;
        let mut start = 0;
        while start < messages {
            if cli::interrupted() {
                return;
            }
            let end = messages.min(start + CHUNK);
            if !produce(&mut p, start..end, batch, &stop_p) {
                return;
            }
            start = end;
        }
        raised.disarm();
    });
    let consumer = thread::spawn(move || {
        let mut raised = RaiseOnDrop::armed(&stop);
        if let Some(core) = pin.consumer {
            core_affinity::set_for_current(core);
        }
        barrier.wait();
        let start = Instant::now();
        let (sum, seen) = consume(c, messages, batch, &stop);
        let elapsed = start.elapsed();
        if seen == messages {
            raised.disarm();
        }
        (sum, seen, elapsed)
    });
    let produced = producer.join();
    let consumed = consumer.join();
    produced.map_err(|e| anyhow::anyhow!("the producer panicked: {}", panic_text(&*e)))?;
    let (sum, seen, elapsed) =
        consumed.map_err(|e| anyhow::anyhow!("the consumer panicked: {}", panic_text(&*e)))?;
    if seen < messages {
        return Ok(None);
    }
    // 0 + 1 + ... + (messages - 1), wrapping like the consumer's sum.
    let expected = if messages.is_multiple_of(2) {
        (messages / 2).wrapping_mul(messages.wrapping_sub(1))
    } else {
        messages.wrapping_mul((messages - 1) / 2)
    };
    ensure!(
        sum == expected,
        "checksum mismatch: {sum}, expected {expected}"
    );
    Ok(Some(elapsed))
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Whether to stop waiting: the other side has gone, or a signal came
/// (read only where a side spins on a full or empty ring).
#[inline(always)]
fn gone(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed) || cli::interrupted()
}

/// One measurement of `which`; `None` if interrupted.
fn run_once(which: Impl, pin: Pinning, args: &Args) -> Result<Option<Duration>> {
    let (n, b, cap) = (args.messages, args.batch, args.capacity);
    match which {
        Impl::TandemSingle => measure(
            pin,
            spsc::channel(cap),
            tandem_single_produce,
            tandem_single_consume,
            n,
            b,
        ),
        Impl::TandemBatched => measure(
            pin,
            spsc::channel(cap),
            tandem_batched_produce,
            tandem_batched_consume,
            n,
            b,
        ),
        Impl::RtrbSingle => measure(
            pin,
            rtrb::RingBuffer::new(cap),
            rtrb_single_produce,
            rtrb_single_consume,
            n,
            b,
        ),
        Impl::RtrbBatched => measure(
            pin,
            rtrb::RingBuffer::new(cap),
            rtrb_batched_produce,
            rtrb_batched_consume,
            n,
            b,
        ),
        Impl::ArrayQueueSingle => {
            let q = Arc::new(ArrayQueue::new(cap));
            measure(
                pin,
                (q.clone(), q),
                aq_single_produce,
                aq_single_consume,
                n,
                b,
            )
        }
        Impl::ArrayQueueBatched => {
            let q = Arc::new(ArrayQueue::new(cap));
            measure(
                pin,
                (q.clone(), q),
                aq_batched_produce,
                aq_batched_consume,
                n,
                b,
            )
        }
    }
}

fn main() -> ExitCode {
    cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        run(&args)?;
        Ok(ExitCode::SUCCESS)
    })
}

fn run(args: &Args) -> Result<()> {
    check_args(args)?;
    let (pin, note) = pinning(args)?;
    if let Some(note) = note {
        outln!("{note}")?;
    }
    outln!(
        "ring bench: {} messages of {} bytes, capacity {}, batch {}, {} runs (median reported), \
         producer core {}, consumer core {}",
        args.messages,
        std::mem::size_of::<Msg>(),
        args.capacity,
        args.batch,
        args.runs,
        pin.producer.map_or("unpinned".into(), |c| c.id.to_string()),
        pin.consumer.map_or("unpinned".into(), |c| c.id.to_string()),
    )?;
    outln!("note: ArrayQueue has no batch API; arrayqueue_batched loops {} single pushes/pops per round", args.batch)?;

    let selected: Vec<Impl> = if args.only.is_empty() {
        Impl::ALL.to_vec()
    } else {
        args.only.clone()
    };
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); Impl::ALL.len()];
    for run in 0..args.runs {
        for (i, which) in Impl::ALL.into_iter().enumerate() {
            if !selected.contains(&which) {
                continue;
            }
            let Some(elapsed) = run_once(which, pin, args)? else {
                bail!("interrupted");
            };
            let rate = args.messages as f64 / elapsed.as_secs_f64().max(1e-9);
            outln!(
                "  run {}: {:<20} {:>8.2} M msg/s",
                run + 1,
                which.key(),
                rate / 1e6
            )?;
            rates[i].push(rate);
        }
    }

    let medians: Vec<f64> = rates
        .into_iter()
        .map(|r| if r.is_empty() { f64::NAN } else { median(r) })
        .collect();
    let of = |which: Impl| medians[Impl::ALL.iter().position(|&w| w == which).unwrap()];
    outln!()?;
    outln!(
        "{:<20} {:>14} {:>16}",
        "impl",
        "msg/s (median)",
        "vs rtrb (same mode)"
    )?;
    for which in selected.iter().copied() {
        outln!(
            "{:<20} {:>14.0} {:>16.2}",
            which.key(),
            of(which),
            of(which) / of(which.baseline())
        )?;
    }
    outln!()?;
    for (ours, theirs) in [
        (Impl::TandemSingle, Impl::RtrbSingle),
        (Impl::TandemBatched, Impl::RtrbBatched),
    ] {
        let ratio = of(ours) / of(theirs);
        outln!(
            "{}/{} = {:.2} (bar >= 0.90) {}",
            ours.key(),
            theirs.key(),
            ratio,
            if ratio >= 0.90 { "ok" } else { "BELOW BAR" }
        )?;
    }

    if let Some(path) = &args.report {
        let mut report = serde_json::Map::new();
        for which in Impl::ALL {
            report.insert(which.key().into(), of(which).into());
        }
        report.insert("messages".into(), args.messages.into());
        report.insert("batch".into(), args.batch.into());
        report.insert("capacity".into(), args.capacity.into());
        report.insert("runs".into(), args.runs.into());
        tandem_bench::report::write_json("--report", path, &serde_json::Value::Object(report))?;
        tandem_bench::errln!("report written to {}", path.display());
    }
    Ok(())
}
