//! The measured loops, one producer and one consumer per implementation
//! and mode (single messages, batches): each compiled on its own so that
//! its ring operations are inlined into it.

use super::{check, gone, msg, Msg};
use crossbeam_queue::ArrayQueue;
use std::hint::spin_loop;
use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tandem::queue::spsc;

// ---- tandem ---------------------------------------------------------------

pub(super) fn tandem_single_produce(
    tx: &mut spsc::Producer<Msg>,
    seqs: Range<u64>,
    _: usize,
    stop: &AtomicBool,
) -> bool {
    for seq in seqs {
        let mut m = msg(seq);
        while let Err(spsc::Full(back)) = tx.push(m) {
            if gone(stop) {
                return false;
            }
            m = back;
            spin_loop();
        }
    }
    true
}

pub(super) fn tandem_single_consume(
    mut rx: spsc::Consumer<Msg>,
    n: u64,
    _: usize,
    stop: &AtomicBool,
) -> (u64, u64) {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        match rx.pop() {
            Some(m) => {
                sum = sum.wrapping_add(check(&m, seq));
                seq += 1;
            }
            None if gone(stop) => break,
            None => spin_loop(),
        }
    }
    (sum, seq)
}

#[inline(always)]
pub(super) fn tandem_batched_produce(
    tx: &mut spsc::Producer<Msg>,
    seqs: Range<u64>,
    batch: usize,
    stop: &AtomicBool,
) -> bool {
    let (mut seq, n) = (seqs.start, seqs.end);
    while seq < n {
        let end = n.min(seq + batch as u64);
        while seq < end {
            match tx.stage(msg(seq)) {
                Ok(()) => seq += 1,
                Err(_) => {
                    // Full: publish what we have so the consumer can drain.
                    tx.commit();
                    if gone(stop) {
                        return false;
                    }
                    spin_loop();
                }
            }
        }
        tx.commit();
    }
    true
}

pub(super) fn tandem_batched_consume(
    mut rx: spsc::Consumer<Msg>,
    n: u64,
    batch: usize,
    stop: &AtomicBool,
) -> (u64, u64) {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        let got = rx.pop_batch(batch, |m| {
            sum = sum.wrapping_add(check(&m, seq));
            seq += 1;
        });
        if got == 0 {
            if gone(stop) {
                break;
            }
            spin_loop();
        }
    }
    (sum, seq)
}

// ---- rtrb -----------------------------------------------------------------

pub(super) fn rtrb_single_produce(
    tx: &mut rtrb::Producer<Msg>,
    seqs: Range<u64>,
    _: usize,
    stop: &AtomicBool,
) -> bool {
    for seq in seqs {
        let mut m = msg(seq);
        while let Err(rtrb::PushError::Full(back)) = tx.push(m) {
            if gone(stop) {
                return false;
            }
            m = back;
            spin_loop();
        }
    }
    true
}

pub(super) fn rtrb_single_consume(
    mut rx: rtrb::Consumer<Msg>,
    n: u64,
    _: usize,
    stop: &AtomicBool,
) -> (u64, u64) {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        match rx.pop() {
            Ok(m) => {
                sum = sum.wrapping_add(check(&m, seq));
                seq += 1;
            }
            Err(_) if gone(stop) => break,
            Err(_) => spin_loop(),
        }
    }
    (sum, seq)
}

pub(super) fn rtrb_batched_produce(
    tx: &mut rtrb::Producer<Msg>,
    seqs: Range<u64>,
    batch: usize,
    stop: &AtomicBool,
) -> bool {
    let (mut seq, n) = (seqs.start, seqs.end);
    while seq < n {
        let want = (n - seq).min(batch as u64) as usize;
        let chunk = match tx.write_chunk_uninit(want) {
            Ok(chunk) => chunk,
            Err(rtrb::chunks::ChunkError::TooFewSlots(0)) => {
                if gone(stop) {
                    return false;
                }
                spin_loop();
                continue;
            }
            Err(rtrb::chunks::ChunkError::TooFewSlots(k)) => {
                tx.write_chunk_uninit(k).expect("k slots are free")
            }
        };
        seq += chunk.fill_from_iter((seq..).map(msg)) as u64;
    }
    true
}

pub(super) fn rtrb_batched_consume(
    mut rx: rtrb::Consumer<Msg>,
    n: u64,
    batch: usize,
    stop: &AtomicBool,
) -> (u64, u64) {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        let chunk = match rx.read_chunk(batch) {
            Ok(chunk) => chunk,
            Err(rtrb::chunks::ChunkError::TooFewSlots(0)) => {
                if gone(stop) {
                    break;
                }
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
    (sum, seq)
}

// ---- crossbeam ArrayQueue ---------------------------------------------------

pub(super) fn aq_single_produce(
    q: &mut Arc<ArrayQueue<Msg>>,
    seqs: Range<u64>,
    _: usize,
    stop: &AtomicBool,
) -> bool {
    for seq in seqs {
        let mut m = msg(seq);
        while let Err(back) = q.push(m) {
            if gone(stop) {
                return false;
            }
            m = back;
            spin_loop();
        }
    }
    true
}

pub(super) fn aq_single_consume(
    q: Arc<ArrayQueue<Msg>>,
    n: u64,
    _: usize,
    stop: &AtomicBool,
) -> (u64, u64) {
    let mut sum = 0u64;
    let mut seq = 0;
    while seq < n {
        match q.pop() {
            Some(m) => {
                sum = sum.wrapping_add(check(&m, seq));
                seq += 1;
            }
            None if gone(stop) => break,
            None => spin_loop(),
        }
    }
    (sum, seq)
}

/// `ArrayQueue` has no batch API: a "batch" is a loop of `batch` pushes.
pub(super) fn aq_batched_produce(
    q: &mut Arc<ArrayQueue<Msg>>,
    seqs: Range<u64>,
    batch: usize,
    stop: &AtomicBool,
) -> bool {
    let (mut seq, n) = (seqs.start, seqs.end);
    while seq < n {
        let end = n.min(seq + batch as u64);
        while seq < end {
            match q.push(msg(seq)) {
                Ok(()) => seq += 1,
                Err(_) if gone(stop) => return false,
                Err(_) => spin_loop(),
            }
        }
    }
    true
}

/// `ArrayQueue` has no batch API: a "batch" is up to `batch` pops in a row.
pub(super) fn aq_batched_consume(
    q: Arc<ArrayQueue<Msg>>,
    n: u64,
    batch: usize,
    stop: &AtomicBool,
) -> (u64, u64) {
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
            if gone(stop) {
                break;
            }
            spin_loop();
        }
    }
    (sum, seq)
}
