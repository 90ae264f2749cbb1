//! The generator against the reference's definitions.

use super::*;

/// Seed 1's tables, made once.
fn tables() -> &'static Tables {
    static T: std::sync::OnceLock<Tables> = std::sync::OnceLock::new();
    T.get_or_init(|| Tables::new(1))
}

fn events(cfg: &GenConfig, n: u64) -> Vec<Event> {
    (0..n).map(|i| cfg.event(i, tables())).collect()
}

#[test]
fn of_every_fifty_events_one_is_a_person_three_auctions_and_forty_six_bids() {
    let cfg = GenConfig::default();
    for (i, e) in events(&cfg, 5_000).iter().enumerate() {
        let kind = match e {
            Event::Person(_) => Kind::Person,
            Event::Auction(_) => Kind::Auction,
            Event::Bid(_) => Kind::Bid,
        };
        assert_eq!(kind, Kind::of(i as u64), "event {i}");
        let r = i as u64 % 50;
        let expect = if r == 0 {
            Kind::Person
        } else if r < 4 {
            Kind::Auction
        } else {
            Kind::Bid
        };
        assert_eq!(kind, expect, "event {i}");
    }
    for kind in [Kind::Person, Kind::Auction, Kind::Bid] {
        for i in 0..500 {
            assert_eq!(Kind::of(kind.event(i)), kind);
        }
        for n in [0, 1, 4, 49, 50, 51, 99, 1234] {
            let counted = (0..n).filter(|&e| Kind::of(e) == kind).count() as u64;
            assert_eq!(kind.count(n), counted, "{kind:?} in {n}");
        }
    }
}

#[test]
fn person_and_auction_ids_count_from_1000_one_per_event_of_their_kind() {
    let cfg = GenConfig::default();
    let (mut persons, mut auctions) = (0, 0);
    for e in events(&cfg, 10_000) {
        match e {
            Event::Person(p) => {
                assert_eq!(p.id, FIRST_PERSON_ID + persons);
                persons += 1;
            }
            Event::Auction(a) => {
                assert_eq!(a.id, FIRST_AUCTION_ID + auctions);
                assert!((10..15).contains(&a.category), "{}", a.category);
                assert!(a.reserve > a.initial_bid);
                assert!(a.expires > a.date_time);
                // The seller: a person that exists or one of 10 ahead.
                assert!(
                    a.seller >= FIRST_PERSON_ID && a.seller < FIRST_PERSON_ID + persons + ID_LEAD
                );
                auctions += 1;
            }
            Event::Bid(b) => {
                assert!(b.auction >= FIRST_AUCTION_ID);
                assert!(b.auction < FIRST_AUCTION_ID + auctions + ID_LEAD, "{b:?}");
                assert!(b.bidder >= FIRST_PERSON_ID);
                assert!(
                    b.bidder < FIRST_PERSON_ID + persons.max(2) + ID_LEAD,
                    "{b:?}"
                );
                assert!((1..=100_000_000).contains(&b.price));
            }
        }
    }
    assert_eq!((persons, auctions), (200, 600));
}

#[test]
fn hot_auctions_bidders_and_sellers_take_their_shares() {
    let cfg = GenConfig::default();
    let n = 200_000;
    let (mut bids, mut hot_auction, mut hot_bidder) = (0u64, 0u64, 0u64);
    let (mut auctions, mut hot_seller) = (0u64, 0u64);
    for i in 0..n {
        match cfg.event(i, tables()) {
            Event::Bid(b) => {
                bids += 1;
                let hot = (last_base0_auction_id(i) as u64 / 100) * 100 + FIRST_AUCTION_ID;
                hot_auction += u64::from(b.auction == hot);
                let hot = (last_base0_person_id(i) / 100) * 100 + 1 + FIRST_PERSON_ID;
                hot_bidder += u64::from(b.bidder == hot);
            }
            Event::Auction(a) => {
                auctions += 1;
                let hot = (last_base0_person_id(i) / 100) * 100 + FIRST_PERSON_ID;
                hot_seller += u64::from(a.seller == hot);
            }
            Event::Person(_) => {}
        }
    }
    let share = |k: u64, of: u64| k as f64 / of as f64;
    // 1 - 1/ratio, plus the odd random pick that lands on the hot one.
    assert!(
        (0.49..0.53).contains(&share(hot_auction, bids)),
        "{}",
        share(hot_auction, bids)
    );
    assert!(
        (0.74..0.77).contains(&share(hot_bidder, bids)),
        "{}",
        share(hot_bidder, bids)
    );
    assert!(
        (0.73..0.78).contains(&share(hot_seller, auctions)),
        "{}",
        share(hot_seller, auctions)
    );
}

#[test]
fn persons_auctions_and_bids_average_200_500_and_100_bytes() {
    let cfg = GenConfig::default();
    let (mut sizes, mut counts) = ([0u64; 3], [0u64; 3]);
    for e in events(&cfg, 100_000) {
        let (k, size) = match &e {
            Event::Person(p) => (
                0,
                8 + p.name.len()
                    + p.email_address.len()
                    + p.credit_card.len()
                    + p.city().len()
                    + p.state().len()
                    + p.extra.len(),
            ),
            Event::Auction(a) => (
                1,
                8 + a.item_name.len() + a.description.len() + 40 + a.extra.len(),
            ),
            Event::Bid(b) => (2, 32 + b.extra.len()),
        };
        sizes[k] += size as u64;
        counts[k] += 1;
    }
    for (k, want) in [(0, 200.0), (1, 500.0), (2, 100.0)] {
        let avg = sizes[k] as f64 / counts[k] as f64;
        assert!(
            (avg - want).abs() < want * 0.02,
            "kind {k}: {avg} bytes on average"
        );
    }
}

#[test]
fn event_times_advance_by_the_rate_in_floating_point() {
    let cfg = GenConfig::default(); // 10 M/s: 0.1 µs apart
    assert_eq!(cfg.timestamp_ms(0), DEFAULT_BASE_TIME_MS);
    assert_eq!(cfg.timestamp_ms(9_999), DEFAULT_BASE_TIME_MS);
    assert_eq!(cfg.timestamp_ms(10_000), DEFAULT_BASE_TIME_MS + 1);
    assert_eq!(cfg.timestamp_ms(10_000_000), DEFAULT_BASE_TIME_MS + 1_000);
    let slow = GenConfig {
        rate: 1_000.0,
        ..cfg
    };
    assert_eq!(slow.timestamp_ms(7), DEFAULT_BASE_TIME_MS + 7);
    let times: Vec<u64> = (0..1_000)
        .map(|n| cfg.event(n * 997, tables()).date_time())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "monotonic");
}

#[test]
fn prices_follow_ten_to_the_six_u_times_100() {
    let cfg = GenConfig::default();
    let prices: Vec<u64> = (0..100_000)
        .filter_map(|n| match cfg.event(n, tables()) {
            Event::Bid(b) => Some(b.price),
            _ => None,
        })
        .collect();
    // log10(price / 100) is uniform on [0, 6): each decade holds a sixth.
    for d in 0..6 {
        let (lo, hi) = (100 * 10u64.pow(d), 100 * 10u64.pow(d + 1));
        let share =
            prices.iter().filter(|&&p| p >= lo && p < hi).count() as f64 / prices.len() as f64;
        assert!((share - 1.0 / 6.0).abs() < 0.01, "decade {d}: {share}");
    }
}

#[test]
fn the_same_seed_generates_the_same_events_and_another_seed_others() {
    let a = GenConfig::default();
    let b = GenConfig { seed: 2, ..a };
    for n in [0, 1, 5, 777, 123_456] {
        assert_eq!(
            a.event(n, &Tables::new(a.seed)),
            a.event(n, &Tables::new(a.seed))
        );
        assert_ne!(
            a.event(n, &Tables::new(a.seed)),
            b.event(n, &Tables::new(b.seed))
        );
    }
    assert_eq!(Tables::new(1).channel(9), Tables::new(1).channel(9));
}

/// The bids among the first `n` events of seed `seed`, in order.
fn bids(seed: u64, n: u64) -> Vec<(u64, Bid)> {
    let cfg = GenConfig {
        seed,
        ..GenConfig::default()
    };
    (0..n)
        .filter_map(|i| match cfg.event(i, tables()) {
            Event::Bid(b) => Some((i, b)),
            _ => None,
        })
        .collect()
}

#[test]
fn consecutive_bids_draw_independently_at_small_seeds() {
    for seed in [0, 1, 2] {
        let b = bids(seed, 400_000);
        // Log-prices of bid k and bid k + 1: uncorrelated.
        let x: Vec<f64> = b.iter().map(|(_, b)| (b.price as f64).ln()).collect();
        let (a, c) = (&x[..x.len() - 1], &x[1..]);
        let n = a.len() as f64;
        let (ma, mc) = (a.iter().sum::<f64>() / n, c.iter().sum::<f64>() / n);
        let cov: f64 = a
            .iter()
            .zip(c)
            .map(|(p, q)| (p - ma) * (q - mc))
            .sum::<f64>()
            / n;
        let sd = |v: &[f64], m: f64| (v.iter().map(|p| (p - m).powi(2)).sum::<f64>() / n).sqrt();
        let r = cov / (sd(a, ma) * sd(c, mc));
        assert!(r.abs() < 0.01, "seed {seed}: correlation {r}");
        // Whether bid k + 2 goes to the hot auction does not depend on
        // bid k's picks: about half of the bids do, after any bid.
        let hot = |i: u64, b: &Bid| {
            b.auction == (last_base0_auction_id(i) as u64 / 100) * 100 + FIRST_AUCTION_ID
        };
        let hot_bidder = |i: u64, b: &Bid| {
            b.bidder == (last_base0_person_id(i) / 100) * 100 + 1 + FIRST_PERSON_ID
        };
        let (mut after_cold, mut hot_after_cold) = (0u64, 0u64);
        for w in b.windows(3) {
            let ((i, first), (k, third)) = (&w[0], &w[2]);
            if !hot(*i, first) && !hot_bidder(*i, first) {
                after_cold += 1;
                hot_after_cold += u64::from(hot(*k, third));
            }
        }
        let p = hot_after_cold as f64 / after_cold as f64;
        assert!(
            (0.47..0.55).contains(&p),
            "seed {seed}: P(hot | cold before) = {p}"
        );
    }
}
