//! The set of dead letters already written — `(operator, tuple ID)` keys —
//! exact, with memory that stays bounded however many there are.
//!
//! A recovery replays records (a restart from a checkpoint, a takeover, a
//! hot standby), and a replayed bad record must not be written twice; so
//! every key written is remembered for the job's life. Held in a hash set,
//! that cost ~83 bytes per dead letter (3 M bad input lines: 250 MiB of
//! engine memory). Here the newest [`MEM_KEYS`] keys live in memory;
//! beyond that they are sorted and spilled to a *run* file beside the
//! dead-letter file (16 bytes a key), as an LSM tree does, and runs are
//! merged when there are more than [`MAX_RUNS`].
//!
//! What stays in memory per run: every [`BLOCK`]-th key (1/512 of the
//! run) and the largest key of each `(operator, partition)` in it. A
//! lookup that misses memory asks each run: a key above its group's
//! largest is not there (the common case — a new bad record usually comes
//! after every earlier one of its partition), else one block of 8 KiB is
//! read and searched. Keys order as `(operator, partition, sequence)`.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Keys held in memory before a spill (about 2 MiB).
pub(crate) const MEM_KEYS: usize = 1 << 16;
/// Keys per block of a run (8 KiB).
pub(crate) const BLOCK: usize = 512;
/// Runs kept before they are merged into one.
pub(crate) const MAX_RUNS: usize = 4;

const KEY: usize = 16;

/// `(operator, partition)` of a key.
fn group(key: u128) -> u128 {
    key >> crate::record::TupleId::SEQ_BITS
}

/// An exact set of keys, bounded in memory (see the module docs).
pub(crate) struct Seen {
    mem: HashSet<u128>,
    runs: Vec<Run>,
    /// Where runs go, and their name's prefix.
    prefix: Option<PathBuf>,
    made: u32,
    mem_keys: usize,
}

/// A sorted file of keys.
struct Run {
    path: PathBuf,
    file: File,
    len: usize,
    /// The first key of every block.
    index: Vec<u128>,
    /// The largest key of each group in the run.
    max: HashMap<u128, u128>,
}

impl Seen {
    /// An empty set; spills go to files named `PREFIX-<n>`, once a prefix is
    /// set ([`Seen::spill_to`]).
    pub(crate) fn new() -> Self {
        Seen::with_capacity(MEM_KEYS)
    }

    fn with_capacity(mem_keys: usize) -> Self {
        Seen {
            mem: HashSet::new(),
            runs: Vec::new(),
            prefix: None,
            made: 0,
            mem_keys,
        }
    }

    /// Where spilled runs go (`PREFIX-1`, `PREFIX-2`, …).
    pub(crate) fn spill_to(&mut self, prefix: PathBuf) {
        self.prefix = Some(prefix);
    }

    /// Adds `key`; `Ok(false)` if it was there already.
    pub(crate) fn insert(&mut self, key: u128) -> io::Result<bool> {
        if self.mem.contains(&key) {
            return Ok(false);
        }
        for r in &self.runs {
            if r.contains(key)? {
                return Ok(false);
            }
        }
        self.mem.insert(key);
        if self.mem.len() >= self.mem_keys && self.prefix.is_some() {
            self.spill()?;
        }
        Ok(true)
    }

    /// Moves the keys in memory to a run (merging every run into one when
    /// there are too many).
    fn spill(&mut self) -> io::Result<()> {
        let mut keys: Vec<u128> = self.mem.drain().collect();
        keys.sort_unstable();
        let path = self.next_path();
        let run = if self.runs.len() < MAX_RUNS {
            Run::write(path, keys.into_iter().map(Ok))?
        } else {
            let old = std::mem::take(&mut self.runs);
            let mut sources: Vec<Box<dyn Iterator<Item = io::Result<u128>>>> =
                vec![Box::new(keys.into_iter().map(Ok))];
            for r in &old {
                sources.push(Box::new(r.keys()?));
            }
            let run = Run::write(path, Merge::new(sources)?)?;
            for r in old {
                let _ = std::fs::remove_file(&r.path);
            }
            run
        };
        self.runs.push(run);
        Ok(())
    }

    fn next_path(&mut self) -> PathBuf {
        self.made += 1;
        let mut p = self
            .prefix
            .clone()
            .expect("spill only with a prefix")
            .into_os_string();
        p.push(format!("-{}", self.made));
        PathBuf::from(p)
    }

    /// Removes the run files (the set forgets what they held).
    pub(crate) fn remove_files(&mut self) {
        for r in self.runs.drain(..) {
            let _ = std::fs::remove_file(&r.path);
        }
    }

    /// Bytes held in memory (keys, indexes, group maxima), roughly.
    #[cfg(test)]
    fn memory_bytes(&self) -> usize {
        self.mem.capacity() * (KEY + 1)
            + self
                .runs
                .iter()
                .map(|r| r.index.capacity() * KEY + r.max.capacity() * (2 * KEY + 1))
                .sum::<usize>()
    }
}

impl Run {
    /// Writes sorted, distinct `keys` to a new file at `path`.
    fn write(path: PathBuf, keys: impl Iterator<Item = io::Result<u128>>) -> io::Result<Run> {
        let result = (|| {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)?;
            let mut w = BufWriter::with_capacity(1 << 16, f);
            let (mut len, mut index, mut max) = (0, Vec::new(), HashMap::new());
            for k in keys {
                let k = k?;
                if len % BLOCK == 0 {
                    index.push(k);
                }
                max.insert(group(k), k);
                w.write_all(&k.to_le_bytes())?;
                len += 1;
            }
            let file = w.into_inner().map_err(|e| e.into_error())?;
            Ok(Run {
                path: path.clone(),
                file,
                len,
                index,
                max,
            })
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        result
    }

    fn contains(&self, key: u128) -> io::Result<bool> {
        match self.max.get(&group(key)) {
            Some(&m) if key <= m => {}
            _ => return Ok(false),
        }
        let b = self.index.partition_point(|&k| k <= key);
        if b == 0 {
            return Ok(false);
        }
        let first = (b - 1) * BLOCK;
        let n = BLOCK.min(self.len - first);
        let mut buf = vec![0u8; n * KEY];
        self.file.read_exact_at(&mut buf, (first * KEY) as u64)?;
        let at = |i: usize| u128::from_le_bytes(buf[i * KEY..(i + 1) * KEY].try_into().unwrap());
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match at(mid).cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(true),
            }
        }
        Ok(false)
    }

    /// The run's keys in order, read from its file.
    fn keys(&self) -> io::Result<impl Iterator<Item = io::Result<u128>>> {
        let mut r = BufReader::with_capacity(1 << 16, File::open(&self.path)?);
        let mut left = self.len;
        Ok(std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let mut b = [0u8; KEY];
            Some(r.read_exact(&mut b).map(|()| u128::from_le_bytes(b)))
        }))
    }
}

type Source = Box<dyn Iterator<Item = io::Result<u128>>>;

/// A k-way merge of sorted sources, each key once.
struct Merge {
    sources: Vec<Source>,
    heap: BinaryHeap<std::cmp::Reverse<(u128, usize)>>,
    last: Option<u128>,
}

impl Merge {
    fn new(mut sources: Vec<Source>) -> io::Result<Self> {
        let mut heap = BinaryHeap::new();
        for (i, s) in sources.iter_mut().enumerate() {
            if let Some(k) = s.next() {
                heap.push(std::cmp::Reverse((k?, i)));
            }
        }
        Ok(Merge {
            sources,
            heap,
            last: None,
        })
    }
}

impl Iterator for Merge {
    type Item = io::Result<u128>;

    fn next(&mut self) -> Option<io::Result<u128>> {
        loop {
            let std::cmp::Reverse((k, i)) = self.heap.pop()?;
            match self.sources[i].next() {
                Some(Ok(n)) => self.heap.push(std::cmp::Reverse((n, i))),
                Some(Err(e)) => return Some(Err(e)),
                None => {}
            }
            if self.last != Some(k) {
                self.last = Some(k);
                return Some(Ok(k));
            }
        }
    }
}

/// The prefix of `dir`'s run files for the dead-letter file `name`.
pub(crate) fn prefix(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!(".{name}.seen"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tandem-seen-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn key(op: u32, partition: u32, seq: u64) -> u128 {
        (op as u128) << 64 | crate::record::TupleId::new(partition, seq).0 as u128
    }

    #[test]
    fn three_million_keys_stay_exact_in_a_few_mib() {
        let d = dir("big");
        let mut s = Seen::new();
        s.spill_to(prefix(&d, "dl"));
        for i in 0..3_000_000u64 {
            assert!(s.insert(key(1, (i % 4) as u32, i)).unwrap());
        }
        // A replay of a stretch, in a different order: every key is known.
        for i in (1_000_000..1_050_000u64).rev() {
            assert!(!s.insert(key(1, (i % 4) as u32, i)).unwrap(), "{i}");
        }
        assert!(s.runs.len() <= MAX_RUNS);
        let mem = s.memory_bytes();
        assert!(mem < 4 << 20, "{mem} bytes in memory for 3 M keys");
        s.remove_files();
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        std::fs::remove_dir_all(d).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The set answers exactly as a `HashSet` does, whatever the
        /// order of inserts and however often it spills and merges.
        #[test]
        fn answers_as_a_hash_set_does(
            ops in proptest::collection::vec((0u32..3, 0u32..3, 0u64..400), 1..2000),
            cap in 1usize..64,
        ) {
            let d = dir(&format!("prop-{cap}"));
            let mut s = Seen::with_capacity(cap);
            s.spill_to(prefix(&d, "dl"));
            let mut model = HashSet::new();
            for (op, p, seq) in ops {
                let k = key(op, p, seq);
                prop_assert_eq!(s.insert(k).unwrap(), model.insert(k));
            }
            prop_assert!(s.runs.len() <= MAX_RUNS);
            s.remove_files();
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
