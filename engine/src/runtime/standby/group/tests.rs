//! A group's unit tests: the end-of-run check, what consumers forget,
//! point fencing, where standbys go.

use super::*;
use crate::runtime::lanes::LaneClock;

fn group(tag: &str) -> (Group, PathBuf) {
    let dir = std::env::temp_dir().join(format!("tandem-group-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = StandbyConfig {
        queue_memory: 64 << 10,
        ..StandbyConfig::default()
    };
    let g = Group::create(
        3,
        0,
        "op".into(),
        vec![(0, 0), (0, 1)],
        vec![(5, 4, 0, 0)],
        0,
        1,
        2,
        &cfg,
        &dir,
        1,
        None,
    )
    .unwrap();
    (g, dir)
}

#[test]
fn the_end_of_run_check_names_the_lane_a_consumer_fell_short_on() {
    let (g, dir) = group("check");
    let names: Vec<Arc<str>> = ["a", "b", "c", "op", "sink"]
        .iter()
        .map(|&n| n.into())
        .collect();
    // Lane 0 ended at position 9, lane 1 at 4.
    g.end_pos[0].store(9, Ordering::Release);
    g.end_pos[1].store(4, Ordering::Release);
    let c = &g.consumers[0];
    c.acked[0].store(10, Ordering::Release);
    c.acked[1].store(5, Ordering::Release);
    c.ended.store(true, Ordering::Release);
    g.check_complete(&names).expect("everything accepted");
    // One input of lane 1 short: the outputs it owed are missing.
    c.acked[1].store(4, Ordering::Release);
    let e = g.check_complete(&names).unwrap_err().to_string();
    assert!(
        e.contains("lane 1") && e.contains("sink[0]") && e.contains("4 of 5"),
        "{e}"
    );
    // The end never reached the consumer.
    c.acked[1].store(5, Ordering::Release);
    c.ended.store(false, Ordering::Release);
    let e = g.check_complete(&names).unwrap_err().to_string();
    assert!(e.contains("never received the end"), "{e}");
    g.remove_files();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_current_primarys_consumers_forget_below_the_point_and_lagging_ones_below_its_start() {
    let (g, dir) = group("floor");
    let a = Alignment::new(2);
    assert!(g.publish_point(1, point(40, &[3, 4], &a), None).unwrap());
    // The first primary's stream starts at 0: its consumers need not
    // remember anything below the point once they are inside it.
    assert_eq!(g.floor_seq(1, true), 40);
    assert_eq!(g.floor_seq(1, false), 0);
    // A takeover: the new primary's stream starts at 40; a consumer
    // still reading epoch 1 keeps from there, and so does one that
    // follows epoch 2 but has not received its resume mark yet.
    assert_eq!(g.live.claim(1, 5), Ok(2));
    g.start_seq.store(40, Ordering::Release);
    assert!(g.publish_point(2, point(90, &[5, 6], &a), None).unwrap());
    assert_eq!(g.floor_seq(2, true), 90);
    assert_eq!(g.floor_seq(2, false), 40);
    assert_eq!(g.floor_seq(1, true), 40);
    g.remove_files();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_fenced_primary_cannot_publish_a_point_and_points_never_go_back() {
    let (g, dir) = group("fence");
    assert_eq!(g.live.claim(1, 5), Ok(2));
    // Epoch 1's primary was fenced by the claim.
    let a = Alignment::new(2);
    assert!(!g.publish_point(1, point(10, &[3, 4], &a), None).unwrap());
    assert_eq!(g.point_seq.load(Ordering::Acquire), 0);
    assert!(g.publish_point(2, point(10, &[3, 4], &a), None).unwrap());
    assert_eq!((g.covered(0), g.covered(1)), (3, 4));
    // Points never go back.
    assert!(!g.publish_point(2, point(9, &[2, 4], &a), None).unwrap());
    g.remove_files();
    std::fs::remove_dir_all(dir).unwrap();
}

/// A stateless point at chunk `seq`, positions `pos`.
fn point(seq: u64, pos: &[u64], a: &Alignment) -> Point {
    Point {
        seq,
        base: 0,
        pos: pos.to_vec(),
        xseq: 0,
        align: a.clone(),
        clock: LaneClock::new(pos.len()),
    }
}

#[test]
fn hot_standbys_go_to_idle_workers_in_turn_and_others_beside_the_next_primary() {
    // Workers 2 and 3 run none of the job's tasks.
    let idle = [2, 3];
    let placed: Vec<usize> = (0..4)
        .map(|turn| standby_worker(turn % 2, 4, &idle, true, turn))
        .collect();
    assert_eq!(placed, [2, 3, 2, 3]);
    // Warm standbys, and hot ones without an idle worker, go beside.
    assert_eq!(standby_worker(1, 4, &idle, false, 0), 2);
    assert_eq!(standby_worker(3, 4, &[], true, 0), 0);
    // Never on the primary's own worker (a primary that took over on an
    // idle one): the other idle worker, else beside.
    assert_eq!(standby_worker(2, 4, &idle, true, 0), 3);
    assert_eq!(standby_worker(2, 4, &[2], true, 5), 3);
    // One worker: the standby shares it.
    assert_eq!(standby_worker(0, 1, &[], true, 0), 0);
}
