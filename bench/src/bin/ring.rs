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
//! Every implementation's producer and consumer loop is an
//! `#[inline(always)]` function passed to `measure` as a zero-sized fn item
//! (not a `fn` pointer), so each loop is compiled into its thread's body
//! with the queue handle as a local, as in a real operator loop.
//!
//! ```text
//! cargo run -p tandem-bench --release --bin ring -- --report ring.json
//! ```

use std::{
    hint::spin_loop,
    path::PathBuf,
    sync::{Arc, Barrier},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use clap::Parser;
use crossbeam_queue::ArrayQueue;
use tandem::queue::spsc;

/// Throughput of Tandem's SPSC ring vs rtrb and crossbeam ArrayQueue.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Messages per measurement.
    #[arg(long, default_value_t = 50_000_000)]
    messages: u64,
    /// Batch size of the batched modes.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Ring capacity (slots).
    #[arg(long, default_value_t = 4096)]
    capacity: usize,
    /// Core the producer is pinned to.
    #[arg(long, default_value_t = 0)]
    producer_core: usize,
    /// Core the consumer is pinned to.
    #[arg(long, default_value_t = 1)]
    consumer_core: usize,
    /// Runs per implementation; the median is reported.
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

fn pinning(args: &Args) -> Result<Pinning> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    if cores.len() < 2 {
        println!(
            "note: {} core(s) available: running UNPINNED (producer and consumer share a core)",
            cores.len()
        );
        return Ok(Pinning {
            producer: None,
            consumer: None,
        });
    }
    if args.producer_core == args.consumer_core {
        bail!("--producer-core and --consumer-core must differ");
    }
    let find = |id: usize| {
        cores
            .iter()
            .copied()
            .find(|c| c.id == id)
            .with_context(|| format!("core {id} not available (have {cores:?})"))
    };
    Ok(Pinning {
        producer: Some(find(args.producer_core)?),
        consumer: Some(find(args.consumer_core)?),
    })
}

/// Runs `produce` and `consume` on their cores and returns the wall time
/// from the start barrier to the consumer's last message.
///
/// Generic over the loop bodies (not `fn` pointers) so that each
/// implementation's loop is compiled and inlined on its own.
fn measure<P, C>(
    pin: Pinning,
    (p, c): (P, C),
    produce: impl FnOnce(P, u64, usize) + Send + 'static,
    consume: impl FnOnce(C, u64, usize) -> u64 + Send + 'static,
    messages: u64,
    batch: usize,
) -> Duration
where
    P: Send + 'static,
    C: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(2));
    let b = barrier.clone();
    let producer = thread::spawn(move || {
        if let Some(core) = pin.producer {
            core_affinity::set_for_current(core);
        }
        b.wait();
        produce(p, messages, batch);
    });
    let consumer = thread::spawn(move || {
        if let Some(core) = pin.consumer {
            core_affinity::set_for_current(core);
        }
        barrier.wait();
        let start = Instant::now();
        let sum = consume(c, messages, batch);
        let elapsed = start.elapsed();
        // 0 + 1 + ... + (messages - 1), wrapping like the consumer's sum.
        let expected = if messages.is_multiple_of(2) {
            (messages / 2).wrapping_mul(messages.wrapping_sub(1))
        } else {
            messages.wrapping_mul((messages - 1) / 2)
        };
        assert_eq!(sum, expected, "checksum mismatch");
        elapsed
    });
    producer.join().expect("producer panicked");
    consumer.join().expect("consumer panicked")
}

// ---- tandem ---------------------------------------------------------------

fn tandem_single_produce(mut tx: spsc::Producer<Msg>, n: u64, _: usize) {
    for seq in 0..n {
        let mut m = msg(seq);
        while let Err(spsc::Full(back)) = tx.push(m) {
            m = back;
            spin_loop();
        }
    }
}

fn tandem_single_consume(mut rx: spsc::Consumer<Msg>, n: u64, _: usize) -> u64 {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        match rx.pop() {
            Some(m) => {
                sum = sum.wrapping_add(check(&m, seq));
                seq += 1;
            }
            None => spin_loop(),
        }
    }
    sum
}

#[inline(always)]
fn tandem_batched_produce(mut tx: spsc::Producer<Msg>, n: u64, batch: usize) {
    let mut seq = 0;
    while seq < n {
        let end = n.min(seq + batch as u64);
        while seq < end {
            match tx.stage(msg(seq)) {
                Ok(()) => seq += 1,
                Err(_) => {
                    // Full: publish what we have so the consumer can drain.
                    tx.commit();
                    spin_loop();
                }
            }
        }
        tx.commit();
    }
}

fn tandem_batched_consume(mut rx: spsc::Consumer<Msg>, n: u64, batch: usize) -> u64 {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        let got = rx.pop_batch(batch, |m| {
            sum = sum.wrapping_add(check(&m, seq));
            seq += 1;
        });
        if got == 0 {
            spin_loop();
        }
    }
    sum
}

// ---- rtrb -----------------------------------------------------------------

fn rtrb_single_produce(mut tx: rtrb::Producer<Msg>, n: u64, _: usize) {
    for seq in 0..n {
        let mut m = msg(seq);
        while let Err(rtrb::PushError::Full(back)) = tx.push(m) {
            m = back;
            spin_loop();
        }
    }
}

fn rtrb_single_consume(mut rx: rtrb::Consumer<Msg>, n: u64, _: usize) -> u64 {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        match rx.pop() {
            Ok(m) => {
                sum = sum.wrapping_add(check(&m, seq));
                seq += 1;
            }
            Err(_) => spin_loop(),
        }
    }
    sum
}

fn rtrb_batched_produce(mut tx: rtrb::Producer<Msg>, n: u64, batch: usize) {
    let mut seq = 0;
    while seq < n {
        let want = (n - seq).min(batch as u64) as usize;
        let chunk = match tx.write_chunk_uninit(want) {
            Ok(chunk) => chunk,
            Err(rtrb::chunks::ChunkError::TooFewSlots(0)) => {
                spin_loop();
                continue;
            }
            Err(rtrb::chunks::ChunkError::TooFewSlots(k)) => {
                tx.write_chunk_uninit(k).expect("k slots are free")
            }
        };
        seq += chunk.fill_from_iter((seq..).map(msg)) as u64;
    }
}

fn rtrb_batched_consume(mut rx: rtrb::Consumer<Msg>, n: u64, batch: usize) -> u64 {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        let chunk = match rx.read_chunk(batch) {
            Ok(chunk) => chunk,
            Err(rtrb::chunks::ChunkError::TooFewSlots(0)) => {
                spin_loop();
                continue;
            }
            Err(rtrb::chunks::ChunkError::TooFewSlots(k)) => {
                rx.read_chunk(k).expect("k items are there")
            }
        };
        for m in chunk {
            sum = sum.wrapping_add(check(&m, seq));
            seq += 1;
        }
    }
    sum
}

// ---- crossbeam ArrayQueue ---------------------------------------------------

fn aq_single_produce(q: Arc<ArrayQueue<Msg>>, n: u64, _: usize) {
    for seq in 0..n {
        let mut m = msg(seq);
        while let Err(back) = q.push(m) {
            m = back;
            spin_loop();
        }
    }
}

fn aq_single_consume(q: Arc<ArrayQueue<Msg>>, n: u64, _: usize) -> u64 {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        match q.pop() {
            Some(m) => {
                sum = sum.wrapping_add(check(&m, seq));
                seq += 1;
            }
            None => spin_loop(),
        }
    }
    sum
}

/// `ArrayQueue` has no batch API: a "batch" is a loop of `batch` pushes.
fn aq_batched_produce(q: Arc<ArrayQueue<Msg>>, n: u64, batch: usize) {
    let mut seq = 0;
    while seq < n {
        let end = n.min(seq + batch as u64);
        while seq < end {
            match q.push(msg(seq)) {
                Ok(()) => seq += 1,
                Err(_) => spin_loop(),
            }
        }
    }
}

/// `ArrayQueue` has no batch API: a "batch" is up to `batch` pops in a row.
fn aq_batched_consume(q: Arc<ArrayQueue<Msg>>, n: u64, batch: usize) -> u64 {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        let mut got = 0;
        while got < batch && seq < n {
            match q.pop() {
                Some(m) => {
                    sum = sum.wrapping_add(check(&m, seq));
                    seq += 1;
                    got += 1;
                }
                None => break,
            }
        }
        if got == 0 {
            spin_loop();
        }
    }
    sum
}

fn run_once(which: Impl, pin: Pinning, args: &Args) -> Duration {
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

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[mid]
    } else {
        (xs[mid - 1] + xs[mid]) / 2.0
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.messages == 0 || args.batch == 0 || args.runs == 0 {
        bail!("--messages, --batch and --runs must be positive");
    }
    if args.capacity < 2 || args.batch > args.capacity {
        bail!("--capacity must be >= 2 and >= --batch");
    }
    let pin = pinning(&args)?;
    println!(
        "ring bench: {} messages of {} bytes, capacity {}, batch {}, {} runs (median reported), \
         producer core {}, consumer core {}",
        args.messages,
        std::mem::size_of::<Msg>(),
        args.capacity,
        args.batch,
        args.runs,
        pin.producer.map_or("unpinned".into(), |c| c.id.to_string()),
        pin.consumer.map_or("unpinned".into(), |c| c.id.to_string()),
    );
    println!("note: ArrayQueue has no batch API; arrayqueue_batched loops {} single pushes/pops per round", args.batch);

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
            let elapsed = run_once(which, pin, &args);
            let rate = args.messages as f64 / elapsed.as_secs_f64();
            println!(
                "  run {}: {:<20} {:>8.2} M msg/s",
                run + 1,
                which.key(),
                rate / 1e6
            );
            rates[i].push(rate);
        }
    }

    let medians: Vec<f64> = rates
        .into_iter()
        .map(|r| if r.is_empty() { f64::NAN } else { median(r) })
        .collect();
    let of = |which: Impl| medians[Impl::ALL.iter().position(|&w| w == which).unwrap()];
    println!();
    println!(
        "{:<20} {:>14} {:>16}",
        "impl", "msg/s (median)", "vs rtrb (same mode)"
    );
    for which in selected.iter().copied() {
        println!(
            "{:<20} {:>14.0} {:>16.2}",
            which.key(),
            of(which),
            of(which) / of(which.baseline())
        );
    }
    println!();
    for (ours, theirs) in [
        (Impl::TandemSingle, Impl::RtrbSingle),
        (Impl::TandemBatched, Impl::RtrbBatched),
    ] {
        let ratio = of(ours) / of(theirs);
        println!(
            "{}/{} = {:.2} (bar >= 0.90) {}",
            ours.key(),
            theirs.key(),
            ratio,
            if ratio >= 0.90 { "ok" } else { "BELOW BAR" }
        );
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
        let json = serde_json::to_string_pretty(&serde_json::Value::Object(report))?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(())
}
