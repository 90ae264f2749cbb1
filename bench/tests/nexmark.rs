//! Nexmark: every query's results against results computed here, directly
//! from the generated events (no operator, window or join of the engine's);
//! q5, q7 and q8 under injected faults — restart-all, a standby on the
//! windowed operator, and both — against the clean run; and the binary's
//! flags and report.

mod common;

use common::assert_success;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tandem::{CheckpointConfig, RestartStrategy, RuntimeConfig, StandbyConfig};
use tandem_bench::nexmark::gen::{GenConfig, Tables};
use tandem_bench::nexmark::model::{Auction, Bid, Event, Person};
use tandem_bench::nexmark::queries::{
    self, AuctionPrice, CategoryAvg, Euro, HighestBid, HotItem, NewUser, Options, Query, Row,
    Suggestion,
};

/// 2,000 events per second of event time: 60,000 events span 30 s, so
/// the 10 s windows fire several times and auctions (open ~0.8 s on
/// average) close all along.
fn gen() -> GenConfig {
    GenConfig {
        seed: 7,
        rate: 2_000.0,
        ..GenConfig::default()
    }
}

const EVENTS: u64 = 60_000;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tandem-nexmark-test-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// How a run recovers.
#[derive(Clone, Copy, Debug)]
enum How {
    Clean,
    RestartAll,
    Standby,
    Both,
}

/// The sorted output of `query` over `events` events of `gen`, run as
/// `how` with `faults` (the fault language) aimed at `op`.
fn run(
    query: Query,
    gen: GenConfig,
    events: u64,
    how: How,
    faults: Option<&str>,
    op: &str,
) -> Vec<String> {
    let dir = tempdir(query.name());
    let out = dir.join("out");
    let standby = matches!(how, How::Standby | How::Both).then(|| op.to_string());
    let opts = Options {
        gen,
        events,
        partitions: 2,
        paced: false,
        standby,
        output: Some(out.clone()),
    };
    let tables = Arc::new(Tables::new(gen.seed));
    let (job, _) = queries::build(query, &opts, tables).unwrap();
    let mut cfg = RuntimeConfig::default().cores(2).pin(false);
    if matches!(how, How::RestartAll | How::Both) {
        let mut cp = CheckpointConfig::every(Duration::from_millis(20));
        cp.dir = Some(dir.join("checkpoints"));
        cfg = cfg.checkpoint(cp).restart(RestartStrategy::FixedDelay {
            attempts: 100,
            delay: Duration::ZERO,
        });
    }
    if matches!(how, How::Standby | How::Both) {
        cfg = cfg.standby(StandbyConfig::default());
    }
    let injector = faults.map(|f| {
        let (i, _) = tandem_bench::nexmark::injector(query, f, events, 2).unwrap();
        cfg = std::mem::take(&mut cfg).probes(Arc::new(i.clone()));
        i
    });
    let report = job
        .run(&cfg)
        .unwrap_or_else(|e| panic!("{} {how:?}: {e}", query.name()));
    if let Some(i) = injector {
        assert_eq!(
            i.fired() as usize,
            i.armed(),
            "{} {how:?}: every fault fired: {:?}",
            query.name(),
            i.status()
        );
        assert!(
            !report.recovery.is_empty(),
            "{} {how:?}: recovered",
            query.name()
        );
    }
    let mut lines = queries::committed_lines(&out).unwrap();
    lines.sort_unstable();
    std::fs::remove_dir_all(dir).unwrap();
    lines
}

fn sorted<R: Row>(rows: Vec<R>) -> Vec<String> {
    let mut v: Vec<String> = rows
        .iter()
        .map(|r| {
            let mut s = String::new();
            r.json(&mut s);
            s
        })
        .collect();
    v.sort_unstable();
    v
}

struct Input {
    persons: Vec<Person>,
    auctions: Vec<Auction>,
    bids: Vec<Bid>,
}

fn input(g: GenConfig, events: u64) -> Input {
    let mut i = Input {
        persons: vec![],
        auctions: vec![],
        bids: vec![],
    };
    let tables = Tables::new(g.seed);
    for n in 0..events {
        match g.event(n, &tables) {
            Event::Person(p) => i.persons.push(*p),
            Event::Auction(a) => i.auctions.push(*a),
            Event::Bid(b) => i.bids.push(b),
        }
    }
    i
}

fn expected(q: Query, i: &Input) -> Vec<String> {
    match q {
        Query::Q0 => sorted(i.bids.clone()),
        Query::Q1 => sorted(
            i.bids
                .iter()
                .map(|b| Euro {
                    auction: b.auction,
                    bidder: b.bidder,
                    price_milli: b.price * 908,
                    date_time: b.date_time,
                    extra: b.extra.clone(),
                })
                .collect(),
        ),
        Query::Q2 => sorted(
            i.bids
                .iter()
                .filter(|b| b.auction % 123 == 0)
                .map(|b| AuctionPrice {
                    auction: b.auction,
                    price: b.price,
                })
                .collect(),
        ),
        Query::Q3 => {
            let sellers: HashMap<u64, &Person> = i
                .persons
                .iter()
                .filter(|p| ["OR", "ID", "CA"].contains(&p.state()))
                .map(|p| (p.id, p))
                .collect();
            let rows = i
                .auctions
                .iter()
                .filter(|a| a.category == 10)
                .filter_map(|a| {
                    sellers.get(&a.seller).map(|p| Suggestion {
                        name: p.name.clone(),
                        city: p.city(),
                        state: p.state(),
                        id: a.id,
                    })
                })
                .collect();
            sorted(rows)
        }
        Query::Q4 => {
            let mut bids: HashMap<u64, Vec<&Bid>> = HashMap::new();
            for b in &i.bids {
                bids.entry(b.auction).or_default().push(b);
            }
            // (expires, auction, category, final price) of every auction
            // with a bid between its opening and expiry.
            let mut closed: Vec<(u64, u64, u64, u64)> = i
                .auctions
                .iter()
                .filter_map(|a| {
                    let max = bids
                        .get(&a.id)?
                        .iter()
                        .filter(|b| b.date_time >= a.date_time && b.date_time <= a.expires)
                        .map(|b| b.price)
                        .max()?;
                    Some((a.expires, a.id, a.category, max))
                })
                .collect();
            closed.sort_unstable();
            let mut sums: HashMap<u64, (u64, u64)> = HashMap::new();
            let rows = closed
                .iter()
                .map(|&(_, _, category, price)| {
                    let s = sums.entry(category).or_default();
                    s.0 += price;
                    s.1 += 1;
                    CategoryAvg {
                        category,
                        avg: s.0 / s.1,
                    }
                })
                .collect();
            sorted(rows)
        }
        Query::Q5 => {
            // (window start, auction) → bids, over every 10 s window
            // starting at a multiple of 2 s that holds the bid.
            let mut counts: BTreeMap<u64, HashMap<u64, u64>> = BTreeMap::new();
            for b in &i.bids {
                let first = b.date_time.saturating_sub(9_999).div_ceil(2_000) * 2_000;
                let last = b.date_time / 2_000 * 2_000;
                for start in (first..=last).step_by(2_000) {
                    *counts
                        .entry(start)
                        .or_default()
                        .entry(b.auction)
                        .or_default() += 1;
                }
            }
            let mut rows = vec![];
            for (start, per) in counts {
                let max = per.values().copied().max().unwrap();
                for (&auction, &num) in &per {
                    if num == max {
                        rows.push(HotItem {
                            auction,
                            num,
                            window_start: start,
                            window_end: start + 10_000,
                        });
                    }
                }
            }
            sorted(rows)
        }
        Query::Q7 => {
            let mut max: HashMap<u64, u64> = HashMap::new();
            for b in &i.bids {
                let m = max.entry(b.date_time / 10_000).or_default();
                *m = (*m).max(b.price);
            }
            let rows = i
                .bids
                .iter()
                .filter(|b| max[&(b.date_time / 10_000)] == b.price)
                .map(|b| HighestBid {
                    auction: b.auction,
                    price: b.price,
                    bidder: b.bidder,
                    date_time: b.date_time,
                    extra: b.extra.clone(),
                    window_end: (b.date_time / 10_000 + 1) * 10_000,
                })
                .collect();
            sorted(rows)
        }
        Query::Q8 => {
            let opened: HashSet<(u64, u64)> = i
                .auctions
                .iter()
                .map(|a| (a.seller, a.date_time / 10_000))
                .collect();
            let rows = i
                .persons
                .iter()
                .filter(|p| opened.contains(&(p.id, p.date_time / 10_000)))
                .map(|p| NewUser {
                    id: p.id,
                    name: p.name.clone(),
                    window_start: p.date_time / 10_000 * 10_000,
                })
                .collect();
            sorted(rows)
        }
    }
}

#[test]
fn every_query_returns_the_results_computed_directly_from_the_events() {
    let input = input(gen(), EVENTS);
    for q in Query::ALL {
        let want = expected(q, &input);
        assert!(!want.is_empty(), "{}: the input makes results", q.name());
        let got = run(q, gen(), EVENTS, How::Clean, None, "");
        if got != want {
            let g: std::collections::BTreeSet<_> = got.iter().collect();
            let w: std::collections::BTreeSet<_> = want.iter().collect();
            eprintln!("DBG {} got {} want {}", q.name(), got.len(), want.len());
            for x in w.difference(&g).take(5) {
                eprintln!("DBG missing {x}");
            }
            for x in g.difference(&w).take(5) {
                eprintln!("DBG extra {x}");
            }
        }
        assert_eq!(got.len(), want.len(), "{}: result count", q.name());
        assert!(got == want, "{}: results differ", q.name());
    }
}

#[test]
fn at_the_suite_rate_the_windowed_queries_still_match() {
    // 10 M events/s: 10,000 events share a millisecond, and the last
    // window holds everything.
    let g = GenConfig {
        seed: 11,
        ..GenConfig::default()
    };
    let input = input(g, 200_000);
    for q in [Query::Q4, Query::Q5, Query::Q7, Query::Q8] {
        let got = run(q, g, 200_000, How::Clean, None, "");
        assert!(got == expected(q, &input), "{}: results differ", q.name());
    }
}

#[test]
fn windowed_queries_are_exact_under_faults_restart_all_standby_and_both() {
    let g = GenConfig {
        seed: 5,
        rate: 10_000.0,
        ..GenConfig::default()
    };
    let events = 200_000;
    for q in [Query::Q5, Query::Q7, Query::Q8] {
        let clean = run(q, g, events, How::Clean, None, "window");
        for how in [How::RestartAll, How::Standby, How::Both] {
            let got = run(q, g, events, how, Some("panic@window:~3"), "window");
            assert_eq!(got.len(), clean.len(), "{} {how:?}", q.name());
            assert!(
                got == clean,
                "{} {how:?}: output differs from the clean run",
                q.name()
            );
        }
    }
}

#[test]
fn the_joins_are_exact_under_faults_with_a_standby_and_with_restart_all() {
    let g = GenConfig {
        seed: 9,
        rate: 10_000.0,
        ..GenConfig::default()
    };
    let events = 200_000;
    for q in [Query::Q3, Query::Q4, Query::Q8] {
        let clean = run(q, g, events, How::Clean, None, "join");
        for how in [How::RestartAll, How::Standby] {
            let got = run(q, g, events, how, Some("panic@join:~3"), "join");
            assert!(
                got == clean,
                "{} {how:?}: output differs from the clean run",
                q.name()
            );
        }
    }
}

fn nexmark(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_nexmark"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_binary_writes_its_report_output_and_input_and_refuses_bad_flags() {
    let dir = tempdir("bin");
    let (report, output, input) = (dir.join("r.json"), dir.join("o.jsonl"), dir.join("i.jsonl"));
    let o = nexmark(&[
        "--query",
        "q7",
        "--events",
        "20000",
        "--rate",
        "1000",
        "--cores",
        "1",
        "--report",
        report.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--dump-input",
        input.to_str().unwrap(),
    ]);
    assert_success(&o, "q7");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    for key in [
        "events",
        "events_per_sec",
        "events_per_sec_per_core",
        "cores",
        "latency_ns",
        "records_out",
        "late_records",
    ] {
        assert!(r.get(key).is_some(), "report has {key}: {r}");
    }
    assert_eq!(r["events"], 20_000);
    assert_eq!(r["late_records"], 0);
    for p in ["p50", "p99", "p999", "max"] {
        assert!(r["latency_ns"].get(p).is_some(), "{p}");
    }
    let rows = common::sorted_lines(&output);
    assert_eq!(rows.len() as u64, r["records_out"].as_u64().unwrap());
    // 20 s of events: two 10 s windows, each with its highest bid.
    assert!(rows.len() >= 2, "{rows:?}");
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&input)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 20_000);
    assert_eq!(events[0]["kind"], "person");
    assert_eq!(events[0]["id"], 1000);
    assert_eq!(events[1]["kind"], "auction");
    assert_eq!(events[4]["kind"], "bid");
    for k in [
        "auction",
        "bidder",
        "price",
        "channel",
        "url",
        "date_time",
        "extra",
    ] {
        assert!(events[4].get(k).is_some(), "bid has {k}");
    }
    assert_eq!(events[1_000]["date_time"], 1_700_000_000_000u64 + 1_000);

    for (bad, says) in [
        (vec!["--query", "q6"], "q6"),
        (
            vec!["--query", "q5", "--standby", "window"],
            "--strategy bqbs",
        ),
        (
            vec!["--query", "q5", "--strategy", "bqbs", "--standby", "join"],
            "no operator `join`",
        ),
        (
            vec!["--query", "q5", "--fault", "panic@max:100"],
            "results of an operator",
        ),
        (vec!["--query", "q5", "--events", "0"], "--events"),
        (vec!["--query", "q5", "--rate", "nan"], "--rate"),
        (vec!["--query", "q5", "--cores", "100000"], "--cores"),
        // A standby's flags without a standby, and bounds.
        (
            vec!["--query", "q5", "--standby-follow"],
            "--standby-follow needs",
        ),
        (
            vec!["--query", "q5", "--standby-delta-ms", "5"],
            "--standby-delta-ms",
        ),
        (
            vec!["--query", "q5", "--standby-mode", "warm"],
            "--standby-mode needs",
        ),
        (
            vec!["--query", "q5", "--heartbeat-timeout-ms", "9"],
            "--heartbeat-timeout-ms needs",
        ),
        (
            vec![
                "--query",
                "q5",
                "--strategy",
                "bqbs",
                "--standby-follow",
                "--standby-delta-ms",
                "0",
            ],
            "--standby-delta-ms 0",
        ),
        (
            vec![
                "--query",
                "q5",
                "--strategy",
                "bqbs",
                "--standby-delta-ms",
                "5",
            ],
            "needs --standby-follow",
        ),
        (
            vec![
                "--query",
                "q5",
                "--strategy",
                "bqbs",
                "--standby-follow",
                "--standby-mode",
                "hot",
            ],
            "--standby-follow needs --standby-mode warm",
        ),
        (
            vec!["--query", "q5", "--events", "-3"],
            "'--events <EVENTS>'",
        ),
    ] {
        let o = nexmark(&bad);
        assert!(!o.status.success(), "{bad:?} was accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{bad:?}: {err}");
        assert!(!err.contains("panicked"), "{bad:?}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
