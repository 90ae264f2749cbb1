//! Asynchronous I/O, typed side outputs and the interval join's late
//! records in one job: clicks enriched by a lookup in a loopback TCP
//! service (`async_map`), bot clicks split to a side output
//! (`OutputTag`), the rest joined with purchases (late clicks to the
//! join's late side output) — the output the same under warm and hot
//! standbys and restart-all with 10 panics as in a clean run; and a
//! request that never returns fails the operator, naming the record.

mod common;

use common::{cores, exact_under_faults, quiet_injected_panics, Faults};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::time::Watermarks;
use tandem::{
    AsyncIo, IterSource, JobBuilder, Output, OutputTag, RuntimeConfig, Sided, TupleId, Two,
};

const MS: u64 = 1_000_000;
const CLICKS: u64 = 3_000;

/// A loopback service: each line `USER` is answered `USER SEGMENT`.
fn serve() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            std::thread::spawn(move || {
                c.set_nodelay(true).unwrap();
                let mut w = c.try_clone().unwrap();
                for line in BufReader::new(c).lines() {
                    let Ok(line) = line else { return };
                    let user: u64 = line.trim().parse().unwrap_or(0);
                    // One write per answer (Nagle would hold a second).
                    let answer = format!("{user} {}\n", segment_of(user));
                    if w.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

fn segment_of(user: u64) -> u64 {
    (user.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) % 5
}

thread_local! {
    /// Each helper thread's connection to the service.
    static CONN: std::cell::RefCell<Option<(BufReader<TcpStream>, TcpStream)>> =
        const { std::cell::RefCell::new(None) };
}

/// Asks the service on `port` for `user`'s segment.
fn lookup(port: u16, user: u64) -> u64 {
    CONN.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_nodelay(true).unwrap();
            *c = Some((BufReader::new(s.try_clone().unwrap()), s));
        }
        let (r, w) = c.as_mut().unwrap();
        w.write_all(format!("{user}\n").as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let mut f = line.split_whitespace().map(|x| x.parse::<u64>().unwrap());
        assert_eq!(f.next(), Some(user));
        f.next().unwrap()
    })
}

/// Click `i`: `(user, i)` at about `i` ms; one in 50 a bot's; one in 37
/// 80 ms late.
fn click(i: u64) -> ((u64, u64), u64) {
    let h = i.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 20;
    let user = if i % 50 == 7 {
        1_000_000 + h % 3
    } else {
        h % 50
    };
    let t = 100 * MS + i * MS + (h % 2) * MS;
    ((user, i), if i % 37 == 5 { t - 80 * MS } else { t })
}

/// Purchase `j`: `(user, j)` at about `3j` ms.
fn purchase(j: u64) -> ((u64, u64), u64) {
    let h = (j ^ 0x55).wrapping_mul(0x94d0_49bb_1331_11eb) >> 24;
    ((h % 50, j), 100 * MS + 3 * j * MS)
}

const BOTS: OutputTag<(u64, u64)> = OutputTag::new("bots");

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Line {
    Bought(u64, u64, u64, u64),
    Bot(u64, u64),
    LateClick(u64),
}

fn run(port: u16, standby: bool, cfg: &RuntimeConfig) -> (Vec<Line>, tandem::JobReport) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let job = JobBuilder::new("enrich");
    job.default_parallelism(2);
    let clicks = job
        .source("clicks", |i| {
            let me = i.instance as u64;
            IterSource((0..CLICKS).filter(move |k| k % 2 == me).map(click))
        })
        .watermarks(Watermarks::bounded(Duration::from_millis(5)).every(8));
    let clicks = if standby { clicks.standby() } else { clicks };
    let sided = clicks
        .async_map(
            "enrich",
            AsyncIo::ordered(8, Duration::from_secs(5)),
            move |(user, i): (u64, u64)| (user, i, lookup(port, user)),
        )
        .flat_map(
            "classify",
            |(user, i, seg): (u64, u64, u64), out: &mut Output<'_, Sided<(u64, u64, u64)>>| {
                if user >= 1_000_000 {
                    out.side(&BOTS, (user, i));
                } else {
                    out.main((user, i, seg));
                }
            },
        );
    let purchases = job
        .source("purchases", |_| IterSource((0..CLICKS / 3).map(purchase)))
        .parallelism(1)
        .watermarks(Watermarks::bounded(Duration::from_millis(5)).every(8));
    let j = sided
        .main()
        .key_by(|c: &(u64, u64, u64)| c.0)
        .interval_join(
            &purchases.key_by(|p: &(u64, u64)| p.0),
            Duration::ZERO,
            Duration::from_millis(30),
        );
    let j = if standby { j.standby() } else { j };
    let joined = j.process("join", |user: &u64, c: &(u64, u64, u64), p: &(u64, u64)| {
        Line::Bought(*user, c.1, c.2, p.1)
    });
    let o = Arc::clone(&out);
    joined
        .results()
        .for_each("bought", move |r| o.lock().unwrap().push(r.value));
    let o = Arc::clone(&out);
    joined
        .late()
        .flat_map("late-click", |t, out: &mut Output<'_, Line>| {
            if let Two::First(c) = t {
                out.emit(Line::LateClick(c.1));
            }
        })
        .for_each("late", move |r| o.lock().unwrap().push(r.value));
    let o = Arc::clone(&out);
    sided.side_output(&BOTS).for_each("bots", move |r| {
        o.lock().unwrap().push(Line::Bot(r.value.0, r.value.1))
    });
    let report = job.build().unwrap().run(cfg).unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    (v, report)
}

fn panics() -> Faults {
    let mut f = Vec::new();
    for (op, p, s) in [
        ("enrich", 0, 150),
        ("enrich", 1, 420),
        ("enrich", 0, 800),
        ("enrich", 1, 1_200),
        ("classify", 0, 300),
        ("classify", 1, 650),
        ("classify", 0, 1_050),
        ("join", 0, 500),
        ("join", 2, 400),
        ("join", 1, 900),
    ] {
        f.push((
            op,
            TupleId::new(p, s),
            ProbeAction::Panic("injected".into()),
        ));
    }
    Faults::new(f)
}

#[test]
fn side_outputs_async_lookups_and_late_join_records_are_exact_under_ten_panics() {
    quiet_injected_panics();
    let port = serve();
    let (clean, report) = run(port, false, &RuntimeConfig::default().cores(cores()));
    let count = |f: fn(&Line) -> bool| clean.iter().filter(|l| f(l)).count();
    let bots = count(|l| matches!(l, Line::Bot(..)));
    let late = count(|l| matches!(l, Line::LateClick(..)));
    let bought = count(|l| matches!(l, Line::Bought(..)));
    assert_eq!(
        bots as u64,
        (0..CLICKS).filter(|i| i % 50 == 7).count() as u64
    );
    assert!(late > 20 && bought > 500, "late {late}, bought {bought}");
    // Every pair carries the segment the service gave.
    assert!(clean.iter().all(|l| match l {
        Line::Bought(u, _, seg, _) => *seg == segment_of(*u),
        _ => true,
    }));
    assert_eq!(
        report.operator("classify.bots").unwrap().emitted,
        bots as u64
    );
    assert_eq!(report.operator("enrich").unwrap().emitted, CLICKS);
    exact_under_faults(&clean, panics, 10, |standby, cfg| run(port, standby, cfg));
}

#[test]
fn a_request_that_never_returns_fails_the_operator_naming_the_record() {
    quiet_injected_panics();
    let job = JobBuilder::new("stuck");
    job.source("ids", |_| IterSource((0..10u64).map(|n| (n, n))))
        .async_map(
            "lookup",
            AsyncIo::unordered(2, Duration::from_millis(50)),
            |n: u64| {
                if n == 3 {
                    std::thread::sleep(Duration::from_secs(3));
                }
                n
            },
        )
        .for_each("out", |_| {});
    let e = job
        .build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(1))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lookup") && e.contains("timed out after 50 ms"),
        "{e}"
    );
    assert!(e.contains("0:3"), "the record is named: {e}");
}

/// `.main()` and `.side_output(&TAG)` asked for twice are one stream each
/// (two operators may read it); a tag of another type under the same
/// name is refused at build.
#[test]
fn a_main_or_side_stream_asked_for_twice_is_one_stream() {
    const ODD: OutputTag<u64> = OutputTag::new("odd");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let job = JobBuilder::new("twice");
    let split = job
        .source("n", |_| IterSource((0..10u64).map(|n| (n, n))))
        .flat_map("split", |n: u64, out: &mut Output<'_, Sided<u64>>| {
            if n.is_multiple_of(2) {
                out.main(n);
            } else {
                out.side(&ODD, n);
            }
        });
    for (i, s) in [
        split.main(),
        split.main(),
        split.side_output(&ODD),
        split.side_output(&ODD),
    ]
    .into_iter()
    .enumerate()
    {
        let seen = Arc::clone(&seen);
        s.for_each(&format!("out{i}"), move |r| {
            seen.lock().unwrap().push((i, r.value))
        });
    }
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(1))
        .unwrap();
    let mut got = std::mem::take(&mut *seen.lock().unwrap());
    got.sort();
    let want: Vec<(usize, u64)> = (0..4)
        .flat_map(|i| {
            (0..10u64)
                .filter(move |n| (n % 2 == 1) == (i >= 2))
                .map(move |n| (i, n))
        })
        .collect();
    assert_eq!(got, want);

    const ODD_TEXT: OutputTag<String> = OutputTag::new("odd");
    let job = JobBuilder::new("clash");
    let split = job
        .source("n", |_| IterSource((0..10u64).map(|n| (n, n))))
        .flat_map("split", |n: u64, out: &mut Output<'_, Sided<u64>>| {
            out.main(n)
        });
    split.side_output(&ODD).for_each("a", |_| {});
    split.side_output(&ODD_TEXT).for_each("b", |_| {});
    let e = job.build().err().expect("refused").to_string();
    assert!(e.contains("split.odd"), "{e}");
}
