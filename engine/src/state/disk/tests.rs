//! The disk backend against a model: every key's state, after evictions,
//! captures and restores of whole runs and deltas.

use super::*;
use crate::state::delta::Incremental;
use crate::state::{KeyedState, StateSnapshot};
use proptest::prelude::*;
use std::collections::HashMap;

/// The smallest cache: 2 × `FLUSH_AT` entries, so a few thousand keys
/// evict.
const TINY: usize = 1;

fn base() -> ScratchDir {
    ScratchDir::unique(&std::env::temp_dir(), "disk-test").expect("temp dir")
}

type Store = DiskState<String, (u64, Vec<u32>)>;

fn key(i: u32) -> String {
    format!("key-{i}")
}

/// Applies one record of key `k` to both the store and the model.
fn touch(store: &mut Store, model: &mut HashMap<String, (u64, Vec<u32>)>, k: u32) {
    let s = store.state(&key(k)).expect("state");
    s.0 += 1;
    s.1.push(k);
    let m = model.entry(key(k)).or_default();
    m.0 += 1;
    m.1.push(k);
}

fn everything(store: &mut Store) -> HashMap<String, (u64, Vec<u32>)> {
    let mut all = HashMap::new();
    let mut order = Vec::new();
    store
        .for_each(&mut |k, s| {
            order.push(k.clone());
            assert!(
                all.insert(k.clone(), s.clone()).is_none(),
                "{k} visited twice"
            );
        })
        .expect("for_each");
    // Disk-key order: the stable hash, then the key.
    let hashes: Vec<u64> = order.iter().map(super::super::index::hash_of).collect();
    assert!(hashes.windows(2).all(|w| w[0] <= w[1]), "not in hash order");
    all
}

fn capture(store: &mut Store, checkpoint: u64, base: Option<u64>) -> SnapshotBytes {
    let how = CaptureFor {
        checkpoint,
        base,
        policy: Incremental::default(),
    };
    store
        .capture_for(how)
        .expect("capture")
        .archive()
        .expect("archive")
}

fn entries_of(run: &SnapshotBytes) -> u64 {
    u64::from_le_bytes(run.payload()[24..32].try_into().unwrap())
}

#[test]
fn a_store_smaller_than_its_keys_keeps_every_keys_state() {
    let dir = base();
    let mut store = Store::open(dir.path(), TINY).unwrap();
    let mut model = HashMap::new();
    let mut x = 7u32;
    for _ in 0..30_000 {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        touch(&mut store, &mut model, x % 9_000);
    }
    assert!(
        store.cache.len() <= store.cap,
        "the cache outgrew its bound"
    );
    assert!(model.len() > store.cap, "the test should evict");
    assert_eq!(everything(&mut store), model);
}

#[test]
fn a_chain_of_a_whole_run_and_deltas_restores_the_state_at_its_last_capture() {
    let dir = base();
    let mut store = Store::open(dir.path(), TINY).unwrap();
    let mut model = HashMap::new();
    for k in 0..5_000 {
        touch(&mut store, &mut model, k);
    }
    let whole = capture(&mut store, 1, None);
    assert_eq!(whole.delta_over(), None);
    assert_eq!(entries_of(&whole), 5_000);
    // Checkpoint 1 completed: checkpoint 2 is a delta over it, holding
    // only the keys written since (old ones rewritten, new ones).
    for k in 4_000..6_000 {
        touch(&mut store, &mut model, k);
    }
    let d2 = capture(&mut store, 2, Some(1));
    assert_eq!(d2.delta_over(), Some(1));
    assert_eq!(entries_of(&d2), 2_000);
    for k in (0..300).chain(5_900..6_100) {
        touch(&mut store, &mut model, k);
    }
    let d3 = capture(&mut store, 3, Some(2));
    assert_eq!(d3.delta_over(), Some(2));
    assert_eq!(entries_of(&d3), 500);
    let at_3 = model.clone();
    // Written after the capture: in no archive of it.
    for k in 0..100 {
        touch(&mut store, &mut model, k);
    }
    let mut restored = Store::open(dir.path(), TINY).unwrap();
    restored
        .restore(&[whole.payload(), d2.payload(), d3.payload()], Some(3))
        .unwrap();
    assert_eq!(everything(&mut restored), at_3);
    // The restored store's next checkpoint is a delta over the one it
    // restored, and holds what was written since.
    let mut again = at_3.clone();
    for k in 10..20 {
        touch(&mut restored, &mut again, k);
    }
    let d4 = capture(&mut restored, 4, Some(3));
    assert_eq!(d4.delta_over(), Some(3));
    assert_eq!(entries_of(&d4), 10);
    let mut last = Store::open(dir.path(), TINY).unwrap();
    last.restore(
        &[whole.payload(), d2.payload(), d3.payload(), d4.payload()],
        Some(4),
    )
    .unwrap();
    assert_eq!(everything(&mut last), again);
}

#[test]
fn a_failed_checkpoints_changes_are_in_the_next_delta_over_the_last_completed_one() {
    let dir = base();
    let mut store = Store::open(dir.path(), TINY).unwrap();
    let mut model = HashMap::new();
    for k in 0..1_000 {
        touch(&mut store, &mut model, k);
    }
    let whole = capture(&mut store, 1, None);
    for k in 0..10 {
        touch(&mut store, &mut model, k);
    }
    // Checkpoint 2 is taken but never completes: 3 applies over 1.
    let _lost = capture(&mut store, 2, Some(1));
    for k in 500..505 {
        touch(&mut store, &mut model, k);
    }
    let d3 = capture(&mut store, 3, Some(1));
    assert_eq!(d3.delta_over(), Some(1));
    assert_eq!(entries_of(&d3), 15);
    let mut restored = Store::open(dir.path(), TINY).unwrap();
    restored
        .restore(&[whole.payload(), d3.payload()], Some(3))
        .unwrap();
    assert_eq!(everything(&mut restored), model);
}

#[test]
fn a_long_chain_is_cut_by_a_whole_run() {
    let dir = base();
    let mut store = Store::open(dir.path(), TINY).unwrap();
    let mut model = HashMap::new();
    touch(&mut store, &mut model, 0);
    let _ = capture(&mut store, 1, None);
    // Deltas larger than the whole run: the next one is whole again.
    for k in 1..100 {
        touch(&mut store, &mut model, k);
    }
    let d2 = capture(&mut store, 2, Some(1));
    assert_eq!(d2.delta_over(), Some(1));
    let w3 = capture(&mut store, 3, Some(2));
    assert_eq!(w3.delta_over(), None, "the deltas outweigh the whole run");
    assert_eq!(entries_of(&w3), 100);
}

#[test]
fn each_backend_refuses_the_others_checkpoint_by_name() {
    let dir = base();
    let mut store = Store::open(dir.path(), TINY).unwrap();
    let mut model = HashMap::new();
    touch(&mut store, &mut model, 1);
    let run = capture(&mut store, 1, None);
    let err = KeyedState::<String, (u64, Vec<u32>)>::restore_chain(&[run.payload()], Some(1))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("disk state backend"), "{err}");
    let mut memory = KeyedState::<String, (u64, Vec<u32>)>::default();
    *memory.get_or_default(&key(1)) = (1, vec![1]);
    let archive = memory.snapshot().unwrap();
    let mut fresh = Store::open(dir.path(), TINY).unwrap();
    let err = fresh.restore(&[archive.payload()], Some(1)).unwrap_err();
    assert!(err.to_string().contains("in-memory backend"), "{err}");
    // One shorter than a run's header is the other backend's too, not a
    // damaged run.
    let mut fresh = Store::open(dir.path(), TINY).unwrap();
    let err = fresh
        .restore(&[&archive.payload()[..8]], Some(1))
        .unwrap_err();
    assert!(err.to_string().contains("in-memory backend"), "{err}");
}

#[test]
fn a_damaged_run_is_an_error_not_a_panic() {
    let dir = base();
    let mut store = Store::open(dir.path(), TINY).unwrap();
    let mut model = HashMap::new();
    for k in 0..50 {
        touch(&mut store, &mut model, k);
    }
    let run = capture(&mut store, 1, None);
    let bytes = run.payload().to_vec();
    // Cut short anywhere, and a count that does not fit.
    for cut in [31, 40, bytes.len() / 2, bytes.len() - 1] {
        let mut fresh = Store::open(dir.path(), TINY).unwrap();
        assert!(
            fresh.restore(&[&bytes[..cut]], None).is_err(),
            "cut at {cut}"
        );
    }
    let mut more = bytes.clone();
    more[24..32].copy_from_slice(&49u64.to_le_bytes());
    let mut fresh = Store::open(dir.path(), TINY).unwrap();
    assert!(fresh.restore(&[&more], None).is_err());
    // Two entries swapped: the keys are out of order.
    let first = 32
        + 8
        + u32::from_le_bytes(bytes[32..36].try_into().unwrap()) as usize
        + u32::from_le_bytes(bytes[36..40].try_into().unwrap()) as usize;
    let second_len = 8
        + u32::from_le_bytes(bytes[first..first + 4].try_into().unwrap()) as usize
        + u32::from_le_bytes(bytes[first + 4..first + 8].try_into().unwrap()) as usize;
    let mut swapped = bytes[..32].to_vec();
    swapped.extend_from_slice(&bytes[first..first + second_len]);
    swapped.extend_from_slice(&bytes[32..first]);
    swapped.extend_from_slice(&bytes[first + second_len..]);
    let mut fresh = Store::open(dir.path(), TINY).unwrap();
    let err = fresh.restore(&[&swapped], None).unwrap_err();
    assert!(err.to_string().contains("ascending"), "{err}");
}

/// Archives `capture` a few entries at a time while `between` writes to
/// the store after each slice.
fn archive_while(capture: StateCapture, mut between: impl FnMut(usize)) -> SnapshotBytes {
    let StateCapture::Steps(mut steps) = capture else {
        panic!("a disk capture is made in steps");
    };
    for i in 0.. {
        if let Some(b) = steps.step(37).expect("step") {
            return b;
        }
        between(i);
    }
    unreachable!()
}

#[test]
fn an_archive_made_while_the_store_is_written_holds_the_state_at_its_capture() {
    let dir = base();
    let mut store = Store::open(dir.path(), TINY).unwrap();
    let mut model = HashMap::new();
    for k in 0..3_000 {
        touch(&mut store, &mut model, k);
    }
    let at_1 = model.clone();
    let how = |checkpoint, base| CaptureFor {
        checkpoint,
        base,
        policy: Incremental::default(),
    };
    let c1 = store.capture_for(how(1, None)).unwrap();
    // Between slices: old keys rewritten (some already archived, some
    // not), new keys placed; every write goes to the store at once.
    let store = std::cell::RefCell::new(store);
    let model = std::cell::RefCell::new(model);
    let whole = archive_while(c1, |i| {
        let (mut s, mut m) = (store.borrow_mut(), model.borrow_mut());
        for k in (i as u32 * 97 % 3_000..3_000)
            .step_by(211)
            .chain([10_000 + i as u32])
        {
            touch(&mut s, &mut m, k);
        }
        s.flush().unwrap();
    });
    let (mut store, model) = (store.into_inner(), model.into_inner());
    let mut restored = Store::open(dir.path(), TINY).unwrap();
    restored.restore(&[whole.payload()], Some(1)).unwrap();
    assert_eq!(everything(&mut restored), at_1);
    // A delta over it, archived while the same keys are written again.
    let at_2 = model.clone();
    let c2 = store.capture_for(how(2, Some(1))).unwrap();
    let store = std::cell::RefCell::new(store);
    let model = std::cell::RefCell::new(model);
    let delta = archive_while(c2, |i| {
        let (mut s, mut m) = (store.borrow_mut(), model.borrow_mut());
        for k in (i as u32 * 89 % 3_000..3_000)
            .step_by(173)
            .chain([10_000 + i as u32])
        {
            touch(&mut s, &mut m, k);
        }
        s.flush().unwrap();
    });
    assert_eq!(delta.delta_over(), Some(1));
    let mut restored = Store::open(dir.path(), TINY).unwrap();
    restored
        .restore(&[whole.payload(), delta.payload()], Some(2))
        .unwrap();
    assert_eq!(everything(&mut restored), at_2);
    // The pre-images went once the archives ended.
    let mut store = store.into_inner();
    store.flush().unwrap();
    let mut m = model.into_inner();
    touch(&mut store, &mut m, 0);
    store.flush().unwrap();
    assert!(store.archives.is_empty());
    assert_eq!(store.undo.iter().count(), 0, "pre-images left behind");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Any schedule of records and checkpoints (some never completing):
    /// restoring the chain of the last completed checkpoint gives the
    /// state at it.
    #[test]
    fn any_chain_restores_the_state_at_its_checkpoint(
        steps in proptest::collection::vec((0u32..3_000, 1usize..400, any::<bool>()), 1..8),
    ) {
        let dir = base();
        let mut store = Store::open(dir.path(), TINY).unwrap();
        let mut model = HashMap::new();
        // The chains of completed checkpoints, by id.
        let mut chains: HashMap<u64, Vec<Vec<u8>>> = HashMap::new();
        let mut completed: Option<u64> = None;
        let mut at = HashMap::new();
        for (i, (start, n, completes)) in steps.into_iter().enumerate() {
            for k in start..start + n as u32 {
                touch(&mut store, &mut model, k % 3_000);
            }
            let id = i as u64 + 1;
            let run = capture(&mut store, id, completed);
            let mut chain = match run.delta_over() {
                Some(b) => chains[&b].clone(),
                None => Vec::new(),
            };
            chain.push(run.payload().to_vec());
            if completes {
                chains.insert(id, chain);
                completed = Some(id);
                at = model.clone();
            }
        }
        if let Some(id) = completed {
            let links: Vec<&[u8]> = chains[&id].iter().map(|l| l.as_slice()).collect();
            let mut restored = Store::open(dir.path(), TINY).unwrap();
            restored.restore(&links, Some(id)).unwrap();
            prop_assert_eq!(everything(&mut restored), at);
        }
    }
}
