//! The `restore` benchmark's job: the records of a run and what each must
//! output ([`Plan`]), its source, keyed operator and checking sink, the
//! injected fault, and the checkpoint store watched for the checkpoint
//! that covers every key.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use super::KEYED;

use anyhow::{Context, Result};
use tandem::{
    checkpoint::{self, FileEntry, Manifest},
    runtime::probe::{ProbeAction, ProbeFactory, RecordProbe},
    KeyedProcess, Output, Record, SeekError, Sink, Source, SourcePoll, TupleId,
};
/// The records of a run, and the output each one must produce.
///
/// Record `seq < keys` inserts key `seq`; record `keys + j` updates key
/// `(mul·r + add) mod keys` with `r = j mod keys` — `mul` is coprime to
/// `keys`, so each pass of `keys` updates hits every key once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) keys: u64,
    pub(crate) mul: u64,
    pub(crate) add: u64,
}

impl Plan {
    pub(crate) fn new(keys: u64) -> Self {
        fn gcd(a: u64, b: u64) -> u64 {
            if b == 0 {
                a
            } else {
                gcd(b, a % b)
            }
        }
        let mut mul = 0x9E37_79B9_7F4A_7C15 % keys;
        while gcd(mul, keys) != 1 {
            mul = (mul + 1) % keys;
        }
        Plan {
            keys,
            mul,
            add: 0x2545_F491_4F6C_DD1D % keys,
        }
    }

    /// The key of record `seq`.
    pub(crate) fn key(&self, seq: u64) -> u64 {
        if seq < self.keys {
            return seq;
        }
        let r = (seq - self.keys) % self.keys;
        ((u128::from(self.mul) * u128::from(r) + u128::from(self.add)) % u128::from(self.keys))
            as u64
    }

    /// The output of record `seq`: its key, the key's count and the sum of
    /// the key's records' sequence numbers so far (wrapping).
    pub(crate) fn expect(&self, seq: u64) -> (u64, u64, u64) {
        let key = self.key(seq);
        if seq < self.keys {
            return (key, 1, seq);
        }
        // Update j = pass·keys + r: the key's updates so far are those of
        // passes 0..=pass at offset r, sequence numbers keys·(p+1) + r.
        let j = seq - self.keys;
        let (pass, r) = (j / self.keys, j % self.keys);
        let n = pass + 1;
        let sum = key
            .wrapping_add(n.wrapping_mul(self.keys.wrapping_add(r)))
            .wrapping_add(self.keys.wrapping_mul(pass.wrapping_mul(n) / 2));
        (key, 1 + n, sum)
    }
}

/// The source's one partition (see the module docs): the inserts as fast
/// as the job takes them, then the updates on a fixed schedule that
/// starts with the first update and is shared by every attempt, so that a
/// restarted attempt replays what it missed at once and then keeps pace.
/// It ends when `stop` is raised (the same records, in the same order, in
/// every attempt: only where it stops depends on the run).
pub(crate) struct Feed {
    pub(crate) plan: Plan,
    pub(crate) next: u64,
    pub(crate) per_record: Duration,
    pub(crate) updates_from: Arc<OnceLock<Instant>>,
    pub(crate) stop: Arc<AtomicBool>,
}

impl Source<(u64, u64)> for Feed {
    fn poll_next(&mut self) -> SourcePoll<(u64, u64)> {
        if self.next >= self.plan.keys {
            if self.stop.load(Ordering::Acquire) {
                return SourcePoll::End;
            }
            let from = *self.updates_from.get_or_init(Instant::now);
            let j = (self.next - self.plan.keys).min(u64::from(u32::MAX)) as u32;
            if from.elapsed() < self.per_record * j {
                return SourcePoll::Pending;
            }
        }
        let seq = self.next;
        self.next += 1;
        SourcePoll::Ready {
            value: (seq, self.plan.key(seq)),
            event_time: seq,
        }
    }

    fn seek(&mut self, next_seq: u64) -> Result<(), SeekError> {
        self.next = next_seq;
        Ok(())
    }

    fn seeks_directly(&self) -> bool {
        true
    }
}

/// Per key: (records, sum of their sequence numbers).
pub(crate) struct Count;

impl KeyedProcess<u64, (u64, u64), (u64, u64, u64, u64)> for Count {
    type State = (u64, u64);

    fn process(
        &mut self,
        key: &u64,
        s: &mut (u64, u64),
        rec: Record<(u64, u64)>,
        out: &mut Output<'_, (u64, u64, u64, u64)>,
    ) {
        let seq = rec.value.0;
        s.0 += 1;
        s.1 = s.1.wrapping_add(seq);
        out.emit((seq, *key, s.0, s.1));
    }
}

/// What the sink instances of every attempt saw.
#[derive(Default)]
pub(crate) struct Seen {
    /// Outputs of the first attempt.
    pub(crate) before: AtomicU64,
    /// Outputs of the attempts after it.
    pub(crate) after: AtomicU64,
    /// The first sequence number a restarted attempt's sink received
    /// (`u64::MAX`: none yet).
    pub(crate) first_after: AtomicU64,
    /// Wrong outputs, and what the first was.
    pub(crate) wrong: AtomicU64,
    pub(crate) first_wrong: Mutex<Option<String>>,
}

impl Seen {
    pub(crate) fn wrong(&self, what: String) {
        if self.wrong.fetch_add(1, Ordering::AcqRel) == 0 {
            *self.first_wrong.lock().unwrap_or_else(|p| p.into_inner()) = Some(what);
        }
    }
}

/// The sink: checks each output against [`Plan::expect`], and that an
/// attempt's outputs follow one another.
pub(crate) struct Check {
    pub(crate) plan: Plan,
    pub(crate) attempt: u32,
    pub(crate) next: Option<u64>,
    pub(crate) seen: Arc<Seen>,
}

impl Sink<(u64, u64, u64, u64)> for Check {
    fn write(&mut self, rec: Record<(u64, u64, u64, u64)>) -> std::io::Result<()> {
        let (seq, key, count, sum) = rec.value;
        match self.next {
            None if self.attempt == 0 && seq != 0 => self.seen.wrong(format!(
                "attempt 0's first output is of record {seq}, not 0"
            )),
            None if self.attempt > 0 => {
                let _ = self.seen.first_after.compare_exchange(
                    u64::MAX,
                    seq,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
            Some(n) if n != seq => self.seen.wrong(format!(
                "attempt {}: the output of record {seq} came after that of {}",
                self.attempt,
                n - 1
            )),
            _ => {}
        }
        self.next = Some(seq + 1);
        let want = self.plan.expect(seq);
        if (key, count, sum) != want {
            self.seen.wrong(format!(
                "attempt {}: record {seq} gave key {key} count {count} sum {sum}, \
                 expected key {} count {} sum {}",
                self.attempt, want.0, want.1, want.2
            ));
        }
        let n = if self.attempt == 0 {
            &self.seen.before
        } else {
            &self.seen.after
        };
        n.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

/// The fault: once armed, the next record of `count` panics.
pub(crate) struct Fault {
    pub(crate) armed: Arc<AtomicBool>,
    pub(crate) fired: Arc<Mutex<Option<TupleId>>>,
}

impl ProbeFactory for Fault {
    fn probe(&self, operator: &str, _instance: usize) -> Option<Box<dyn RecordProbe>> {
        (operator == KEYED).then(|| {
            Box::new(FaultProbe {
                armed: Arc::clone(&self.armed),
                fired: Arc::clone(&self.fired),
            }) as Box<dyn RecordProbe>
        })
    }
}

pub(crate) struct FaultProbe {
    pub(crate) armed: Arc<AtomicBool>,
    pub(crate) fired: Arc<Mutex<Option<TupleId>>>,
}

impl RecordProbe for FaultProbe {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        if self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::AcqRel) {
            *self.fired.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
            // `injected fault` first: the panic hook knows it by that.
            return ProbeAction::Panic(format!("injected fault in `{KEYED}` (restore bench)"));
        }
        ProbeAction::Continue
    }
}

/// What a published checkpoint holds of `count`: its position and sizes.
#[derive(Clone, Debug)]
pub(crate) struct Covered {
    /// The source position it covers (the source's snapshot holds it:
    /// the checkpoint is one cut, `count`'s state is at that position).
    pub(crate) position: u64,
    /// Payload bytes the restore of `count` reads, and of the last whole
    /// archive among them; files read, their bytes on disk.
    pub(crate) restore_bytes: u64,
    pub(crate) whole_bytes: u64,
    pub(crate) files: usize,
    pub(crate) file_bytes: u64,
    /// Payload bytes of every file of the checkpoint.
    pub(crate) checkpoint_bytes: u64,
}

impl Covered {
    pub(crate) fn of(m: &Manifest) -> Option<Covered> {
        let e: &FileEntry = m.files.iter().find(|f| f.operator == KEYED)?;
        let whole_bytes = e.chain.first().map_or(e.payload_len, |l| l.payload_len);
        Some(Covered {
            position: m
                .files
                .iter()
                .flat_map(|f| f.positions.iter().map(|p| p.next_seq))
                .max()
                .unwrap_or(0),
            restore_bytes: e.restore_bytes(),
            whole_bytes,
            files: 1 + e.chain.len(),
            file_bytes: e.chain.iter().map(|l| l.file_len).sum::<u64>() + e.file_len,
            checkpoint_bytes: m.payload_bytes(),
        })
    }
}

/// The checkpoints published in a store directory, read once each.
pub(crate) struct Store {
    pub(crate) dir: PathBuf,
    pub(crate) seen: std::collections::BTreeMap<u64, Covered>,
}

impl Store {
    /// Reads the manifests published since the last look. One that
    /// retention removed meanwhile is passed over.
    pub(crate) fn look(&mut self) -> Result<()> {
        let list = match checkpoint::list(&self.dir) {
            Ok(l) => l,
            // Not made yet: nothing published.
            Err(_) if !self.dir.exists() => return Ok(()),
            Err(e) => return Err(e).context("listing the checkpoints"),
        };
        for l in list {
            if self.seen.contains_key(&l.id) || l.kind != checkpoint::SnapshotKind::Checkpoint {
                continue;
            }
            if let Ok(m) = l.load() {
                if let Some(c) = Covered::of(&m) {
                    self.seen.insert(l.id, c);
                }
            }
        }
        Ok(())
    }

    /// The newest checkpoint that covers every key's insert.
    pub(crate) fn covering(&self, keys: u64) -> Option<(u64, &Covered)> {
        self.seen
            .iter()
            .rev()
            .find(|(_, c)| c.position >= keys)
            .map(|(id, c)| (*id, c))
    }
}
