//! The connector against a real `nats-server` started here: a record is
//! found by its partition number among interleaved partitions, and a
//! source restored at record `n` reads exactly `n..` (event times
//! included) and ends at the partition's end marker — one record a
//! message, and packed several a message, a seek landing inside one.
//!
//! Without `nats-server` on the `PATH` these tests say so and pass,
//! unless `TANDEM_REQUIRE_NATS` is set (as `.ci/run` sets it).

use bytes::Bytes;
use std::time::{Duration, Instant};
use tandem::{Source, SourcePoll};
use tandem_nats::source::JetStreamSource;
use tandem_nats::stream::{ensure_stream, find_record, subject, Producer, StreamSpec};
use tandem_nats::Client;

mod common;
use common::start;

/// Three partitions of uneven sizes, interleaved as a producer of keyed
/// records would write them; payload `"<p>:<n>"`, event time `n * 3`
/// except every fifth record's, which is earlier (out of order); packed
/// into messages of up to `pack` bytes (0: one a message).
fn produce(client: &Client, sizes: [u64; 3], pack: usize) {
    client
        .block(async {
            ensure_stream(client.js(), &StreamSpec::new("IN")).await?;
            let mut p = Producer::new(client, "IN").packed(pack);
            let mut next = [0u64; 3];
            let mut i = 0u64;
            while (0..3).any(|k| next[k] < sizes[k]) {
                let k = (i * 7 % 3) as usize;
                i += 1;
                if next[k] == sizes[k] {
                    continue;
                }
                let payload = Bytes::from(format!("{k}:{}", next[k]));
                p.record(k as u32, next[k], Some(time_of(next[k])), payload)
                    .await?;
                next[k] += 1;
            }
            for (k, &n) in sizes.iter().enumerate() {
                p.end(k as u32, n).await?;
            }
            p.flush().await
        })
        .unwrap();
}

fn time_of(n: u64) -> u64 {
    if n % 5 == 4 {
        n * 3 - 7
    } else {
        n * 3
    }
}

/// One record a message, and up to 40 bytes (about five records) a
/// message.
const PACKINGS: [usize; 2] = [0, 40];

#[test]
fn a_record_is_found_by_its_partition_number_among_interleaved_partitions() {
    for pack in PACKINGS {
        record_found(pack);
    }
}

fn record_found(pack: usize) {
    let Some((_server, addr)) = start(&[]) else {
        return;
    };
    let client = Client::connect(&addr, Duration::from_secs(20)).unwrap();
    let sizes = [300, 50, 1];
    produce(&client, sizes, pack);
    client.block(async {
        let stream = client.js().get_stream("IN").await.unwrap();
        for (p, &size) in sizes.iter().enumerate() {
            let subj = subject("IN", p as u32);
            for n in [0, 1, size / 2, size - 1].into_iter().filter(|&n| n < size) {
                let s = find_record(&stream, &subj, n).await.unwrap().unwrap();
                let m = stream.get_raw_message(s).await.unwrap();
                // The message holding it (packed: among its neighbours).
                let text = String::from_utf8(m.payload.to_vec()).unwrap();
                assert!(
                    text.split('\n').any(|r| r == format!("{p}:{n}")),
                    "record {n} of {p} not in {text:?} (packing {pack})"
                );
                if pack == 0 {
                    assert_eq!(text, format!("{p}:{n}"));
                }
            }
            // The end marker carries the count; past it there is nothing.
            assert!(find_record(&stream, &subj, size).await.unwrap().is_some());
            assert_eq!(find_record(&stream, &subj, size + 1).await.unwrap(), None);
        }
    });
}

#[test]
fn a_source_restored_at_record_n_reads_n_onwards_then_ends() {
    for pack in PACKINGS {
        source_restored(pack);
    }
}

fn source_restored(pack: usize) {
    let Some((_server, addr)) = start(&[]) else {
        return;
    };
    let client = Client::connect(&addr, Duration::from_secs(20)).unwrap();
    produce(&client, [200, 120, 7], pack);
    for (p, from) in [(0u32, 0u64), (0, 137), (0, 138), (1, 119), (2, 7), (2, 3)] {
        let mut src = JetStreamSource::new(&client, "IN", p);
        src.seek(from).unwrap();
        let mut got = Vec::new();
        let t = Instant::now();
        loop {
            match src.poll_next() {
                SourcePoll::Ready { value, event_time } => {
                    assert_eq!(event_time, time_of(from + got.len() as u64));
                    got.push(String::from_utf8(value.to_vec()).unwrap());
                }
                SourcePoll::Pending => {
                    assert!(
                        t.elapsed() < Duration::from_secs(20),
                        "stalled at {}",
                        got.len()
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                SourcePoll::End => break,
            }
        }
        let size = [200u64, 120, 7][p as usize];
        let want: Vec<String> = (from..size).map(|n| format!("{p}:{n}")).collect();
        assert_eq!(got, want, "partition {p} from {from}, packing {pack}");
    }
}

/// Staging an epoch again — what a retry after an outage does — leaves it
/// whole: the second attempt purges the first's chunks, and the server,
/// which still remembers their ids, must not drop the new ones as
/// duplicates (the epoch would read as empty: published, to a successor).
#[test]
fn an_epoch_staged_again_after_a_failed_attempt_is_whole() {
    use tandem_nats::store::{CheckpointStore, STAGE_CHUNK};
    let Some((_server, addr)) = start(&[]) else {
        return;
    };
    let client = Client::connect(&addr, Duration::from_secs(20)).unwrap();
    let store = CheckpointStore::open(&client, "CK", 1).unwrap();
    // Three chunks, the last one short.
    let bytes: Vec<u8> = (0..STAGE_CHUNK * 2 + 1000)
        .map(|i| (i % 251) as u8)
        .collect();
    let key = "g.p0.c00000000000000000007.t";
    client
        .block(async {
            store.stage(key, &bytes).await?;
            store.stage(key, &bytes).await?;
            Ok::<_, tandem_nats::Error>(())
        })
        .unwrap();
    let staged = client.block(store.staged(key)).unwrap();
    assert!(
        staged.as_deref() == Some(&bytes[..]),
        "staged again: {:?} bytes",
        staged.map(|b| b.len())
    );
    client.block(store.unstage(key)).unwrap();
    assert_eq!(client.block(store.staged(key)).unwrap(), None);
}
