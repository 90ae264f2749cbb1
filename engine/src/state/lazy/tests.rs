use super::*;
use crate::checkpoint::format::{file_image, Position, SnapshotHeader, FORMAT_VERSION};
use crate::checkpoint::SnapshotBytes;
use crate::state::delta::chain_tests::listed;
use crate::state::delta::{CaptureFor, Incremental};
use crate::state::StateSnapshot;
use proptest::prelude::*;
use std::path::PathBuf;

type S = KeyedState<u64, Vec<u32>>;

/// `(op, key)`: 0–5 write, 6–7 remove, 8 compact; an even key is
/// looked up through `prefetch` first, as the engine's keyed operator
/// does, an odd one straight through `get_or_default`.
fn apply_op(s: &mut S, op: u8, key: u64) {
    if op < 8 && key.is_multiple_of(2) {
        s.prefetch(&key).unwrap();
    }
    crate::state::delta::chain_tests::apply_op(s, op, key);
}

/// A checkpoint file of `bytes` (with its key index, if it has one).
fn write_file(tag: &str, id: u64, bytes: &SnapshotBytes) -> PathBuf {
    let index = bytes
        .indexer()
        .map(|build| build(bytes.payload()).unwrap())
        .unwrap_or_default();
    let header = SnapshotHeader {
        checkpoint_id: id,
        operator: "keyed".into(),
        instance: 0,
        positions: vec![Position {
            partition: 0,
            next_seq: 1,
        }],
        created_at_ms: 0,
        payload_len: 0,
        payload_checksum: 0,
        index_len: 0,
        version: FORMAT_VERSION,
    };
    let path = std::env::temp_dir().join(format!(
        "tandem-lazy-{tag}-{}-{id}-{:?}.snap",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&path, file_image(header, bytes.payload(), &index)).unwrap();
    path
}

fn policy() -> Incremental {
    Incremental {
        max_deltas: 3,
        max_delta_ratio: 3.0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A state restored lazily from a chain — its whole archive
    /// read through the key index, the deltas over it, the rest
    /// read in steps at any moment — behaves as the same chain
    /// restored eagerly under any writes, removals and compactions
    /// after it: it iterates the same, and its next checkpoint's
    /// bytes are the same.
    #[test]
    fn a_lazily_restored_state_is_indistinguishable_from_an_eager_one(
        rounds in proptest::collection::vec(
            proptest::collection::vec((0u8..9, 0u64..200), 0..120),
            1..6,
        ),
        after in proptest::collection::vec((0u8..9, 0u64..260, 0usize..3), 0..120),
    ) {
        let mut s = S::default();
        s.index_archives();
        let mut done: Vec<(u64, Option<u64>, SnapshotBytes)> = Vec::new();
        for (i, ops) in rounds.iter().enumerate() {
            for &(op, key) in ops {
                apply_op(&mut s, op, key);
            }
            let id = i as u64 + 1;
            let how = CaptureFor { checkpoint: id, base: done.last().map(|d| d.0), policy: policy() };
            let bytes = s.capture_for(how).unwrap().archive().unwrap();
            done.push((id, bytes.delta_over(), bytes));
        }
        let id = done.last().unwrap().0;
        let mut chain = vec![done.len() - 1];
        while let Some(base) = done[*chain.last().unwrap()].1 {
            chain.push(done.iter().position(|d| d.0 == base).unwrap());
        }
        chain.reverse();
        let links: Vec<&[u8]> = chain.iter().map(|&i| done[i].2.payload()).collect();
        let mut eager = S::restore_chain(&links, Some(id)).unwrap();
        let mut files = Vec::new();
        let mut paths = Vec::new();
        for &i in &chain {
            let bytes = &done[i].2;
            prop_assert!(bytes.indexer().is_some(), "an archive carries its indexer");
            let path = write_file("same", done[i].0, bytes);
            files.push(LazySnapshot::open(&path).unwrap().unwrap());
            paths.push(path);
        }
        let mut lazy = S::restore_lazy(&files, Some(id)).unwrap();
        for p in paths {
            std::fs::remove_file(p).unwrap();
        }
        // (`len` of a chain with deltas reads the chain: compared at
        // the end.)
        for &(op, key, steps) in &after {
            apply_op(&mut eager, op, key);
            apply_op(&mut lazy, op, key);
            lazy.restore_steps(steps.saturating_sub(1)).unwrap();
        }
        // Two checkpoints more, the base still being read at the first
        // (a delta needs only what was written: no settling).
        for (n, ops) in [&after[..], &after[after.len() / 2..]].into_iter().enumerate() {
            if n > 0 {
                for &(op, key, steps) in ops.iter().rev() {
                    apply_op(&mut eager, op, key);
                    apply_op(&mut lazy, op, key);
                    lazy.restore_steps(steps.saturating_sub(1)).unwrap();
                }
            }
            let c = id + 1 + n as u64;
            let how = CaptureFor { checkpoint: c, base: Some(c - 1), policy: policy() };
            let a = eager.capture_for(how).unwrap().archive().unwrap();
            let b = lazy.capture_for(how).unwrap().archive().unwrap();
            prop_assert_eq!(a.delta_over(), b.delta_over());
            prop_assert_eq!(a.payload(), b.payload());
        }
        prop_assert_eq!(listed(&mut lazy), listed(&mut eager));
        prop_assert!(!lazy.is_lazy());
        prop_assert_eq!(lazy.len(), eager.len());
    }
}

/// A whole archive of `n` keys `k → [k]` as a checkpoint file.
fn whole_file(tag: &str, n: u64) -> (S, PathBuf) {
    let mut s = S::default();
    s.index_archives();
    for k in 0..n {
        s.get_or_default(&k).push(k as u32);
    }
    let bytes = s.capture().unwrap().archive().unwrap();
    let path = write_file(tag, 1, &bytes);
    (s, path)
}

#[test]
fn a_key_is_read_without_reading_the_rest() {
    let (_, path) = whole_file("touch", 50_000);
    let file = LazySnapshot::open(&path).unwrap().unwrap();
    let s = S::restore_lazy(&[Arc::clone(&file)], None).unwrap();
    s.prefetch(&31_337).unwrap();
    assert_eq!(s.get(&31_337).as_deref(), Some(&vec![31_337]));
    assert_eq!(s.len(), 50_000);
    // A few blocks of the index and the archive, not all of them.
    let blocks = file.layout().blocks;
    let read = (0..blocks)
        .filter(|&b| file.body(b * 65_536..b * 65_536 + 1).is_ok())
        .count();
    assert_eq!(read as u64, blocks, "every block is intact");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_damaged_block_is_an_error_naming_the_file_and_condemns_it() {
    let (_, path) = whole_file("damaged", 20_000);
    let file = LazySnapshot::open(&path).unwrap().unwrap();
    let s = S::restore_lazy(&[Arc::clone(&file)], None).unwrap();
    // Flip a byte of an entry in a block not read yet (block 3: the
    // entries span blocks 1 to 6), on disk, under the map.
    let at = crate::checkpoint::format::HEADER_BLOCK as u64 + 3 * 65_536 + 100;
    drop(file);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[!b[0]], at).unwrap();
    }
    let e = s.settle().unwrap_err().to_string();
    assert!(e.contains("checksum mismatch"), "{e}");
    assert!(e.contains(&*path.to_string_lossy()), "{e}");
    let again = LazySnapshot::open(&path).unwrap_err().to_string();
    assert!(again.contains("found damaged earlier"), "{again}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_index_that_does_not_find_a_key_is_an_error_not_a_fresh_state() {
    // The index of another archive of as many keys: the keys it
    // places are not where this one has them.
    let (_, path) = whole_file("index-a", 3_000);
    let mut other = S::default();
    other.index_archives();
    for k in 0..3_000u64 {
        other.get_or_default(&(k + 1_000_000)).push(0);
    }
    let other = other.capture().unwrap().archive().unwrap();
    let mut mine = S::default();
    mine.index_archives();
    for k in 0..3_000u64 {
        mine.get_or_default(&k).push(k as u32);
    }
    let mine = mine.capture().unwrap().archive().unwrap();
    let index = other.indexer().unwrap()(other.payload()).unwrap();
    let header = SnapshotHeader {
        checkpoint_id: 1,
        operator: "keyed".into(),
        instance: 0,
        positions: Vec::new(),
        created_at_ms: 0,
        payload_len: 0,
        payload_checksum: 0,
        index_len: 0,
        version: FORMAT_VERSION,
    };
    std::fs::write(&path, file_image(header, mine.payload(), &index)).unwrap();
    let file = LazySnapshot::open(&path).unwrap().unwrap();
    let mut s = S::restore_lazy(&[file], None).unwrap();
    s.prefetch(&7).unwrap();
    s.get_or_default(&7).push(1);
    let e = s.settle().unwrap_err().to_string();
    assert!(e.contains("not found through the index"), "{e}");
    std::fs::remove_file(path).unwrap();
}
