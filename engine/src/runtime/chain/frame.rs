//! A backed-up chain's state at a recovery point: one archive for the
//! states of all its operators.
//!
//! A chain of one operator hands over that operator's archive as it is. A
//! longer chain frames its operators' archives, each under its node:
//!
//! ```text
//! "TDMCHAIN" · u32 parts · per part: u64 node · u8 present · u64 len · payload
//! ```
//!
//! (little-endian). The parts are archived one after another, each in the
//! steps its own capture takes, and copied into the frame 16 KiB a step,
//! so a large keyed state anywhere in the chain is archived between the
//! primary's records, as the head's is.
//! A frame that does not parse is an error, never a fresh state.

use crate::checkpoint::{ArchiveSteps, CheckpointError, SnapshotBytes, StateCapture};
use crate::operator::ChainParts;
use std::collections::{HashMap, VecDeque};

const MAGIC: &[u8; 8] = b"TDMCHAIN";

/// What a chain's parts come to: the archive of the only operator of a
/// chain of one (`None`: it has no state); for a longer chain, the frame,
/// built in steps — `None` only when no operator has a state and `frame`
/// is not asked for (a recovery point frames even that: an operator
/// without a state there restores none, not an older one).
pub(crate) fn capture(
    mut parts: ChainParts,
    chain_len: usize,
    frame: bool,
) -> Option<StateCapture> {
    if chain_len == 1 && parts.len() == 1 {
        return parts.pop().and_then(|(_, s)| s);
    }
    if !frame && parts.iter().all(|(_, s)| s.is_none()) {
        return None;
    }
    let mut out = SnapshotBytes::new();
    put(&mut out, MAGIC);
    put(&mut out, &(parts.len() as u32).to_le_bytes());
    let steps = FrameSteps {
        parts: parts.into(),
        copying: None,
        out: Some(out),
    };
    Some(StateCapture::Steps(Box::new(steps)))
}

/// Bytes a step copies of an archived part into the frame.
const COPY: usize = 16 << 10;

fn put(out: &mut SnapshotBytes, bytes: &[u8]) {
    // Writing into a growing buffer cannot fail.
    let _ = rkyv::ser::Writer::<rkyv::rancor::Error>::write(out, bytes);
}

/// Archives the parts in turn, each in its own steps, and copies each into
/// the frame a [`COPY`] at a time: no step holds its core for a whole
/// state's archive or copy.
struct FrameSteps {
    /// Parts not archived yet, in chain order.
    parts: VecDeque<(usize, Option<StateCapture>)>,
    /// An archived part being copied, and how much of it is.
    copying: Option<(SnapshotBytes, usize)>,
    /// The frame so far (`None` once handed out).
    out: Option<SnapshotBytes>,
}

impl ArchiveSteps for FrameSteps {
    fn step(&mut self, entries: usize) -> Result<Option<SnapshotBytes>, CheckpointError> {
        let Some(out) = self.out.as_mut() else {
            return Ok(None);
        };
        loop {
            if let Some((part, at)) = &mut self.copying {
                let end = (*at + COPY).min(part.len());
                put(out, &part.payload()[*at..end]);
                *at = end;
                if end == part.len() {
                    self.copying = None;
                }
                return Ok(None);
            }
            let Some((node, state)) = self.parts.pop_front() else {
                return Ok(self.out.take());
            };
            let archived = match state {
                None => None,
                Some(StateCapture::Bytes(b)) => Some(b),
                Some(StateCapture::Steps(mut s)) => match s.step(entries)? {
                    Some(b) => Some(b),
                    None => {
                        self.parts.push_front((node, Some(StateCapture::Steps(s))));
                        return Ok(None);
                    }
                },
            };
            put(out, &(node as u64).to_le_bytes());
            if let Some(base) = archived.as_ref().and_then(SnapshotBytes::delta_over) {
                // A part that is a delta makes the frame one: its restore
                // reads the chain of frames.
                out.set_delta_over(Some(base));
            }
            match archived {
                Some(b) => {
                    // Room for the part now: grown by doubling instead, the
                    // frame would copy all it holds in one step.
                    out.reserve(1 + 8 + b.len());
                    put(out, &[1]);
                    put(out, &(b.len() as u64).to_le_bytes());
                    self.copying = Some((b, 0));
                }
                None => {
                    put(out, &[0]);
                    put(out, &0u64.to_le_bytes());
                }
            }
        }
    }
}

/// Splits a chain's archive into its operators' states, by node: for a
/// chain of one (`head` alone), the archive is the head's.
pub(crate) fn split(archive: Vec<u8>, chain: &[usize]) -> Result<HashMap<usize, Vec<u8>>, String> {
    if chain.len() == 1 {
        return Ok(HashMap::from([(chain[0], archive)]));
    }
    let bad = |what: &str| format!("a backed-up chain's state: {what}");
    let mut rest = archive
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| bad("no frame"))?;
    let mut take = |n: usize| -> Result<&[u8], String> {
        if rest.len() < n {
            return Err(bad("cut short"));
        }
        let (a, b) = rest.split_at(n);
        rest = b;
        Ok(a)
    };
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    if count > chain.len() {
        return Err(bad(&format!(
            "{count} parts for a chain of {}",
            chain.len()
        )));
    }
    let mut states = HashMap::new();
    for _ in 0..count {
        let node = u64_of(take(8)?) as usize;
        let present = take(1)?[0];
        let len = u64_of(take(8)?);
        if !chain.contains(&node) || states.contains_key(&node) {
            return Err(bad(&format!(
                "node {node} is not once in the chain {chain:?}"
            )));
        }
        let len = usize::try_from(len).map_err(|_| bad("a part longer than memory"))?;
        let payload = take(len)?;
        match present {
            1 => {
                states.insert(node, payload.to_vec());
            }
            0 if len == 0 => {}
            _ => return Err(bad(&format!("part of node {node} has flag {present}"))),
        }
    }
    if !rest.is_empty() {
        return Err(bad(&format!("{} bytes after the last part", rest.len())));
    }
    Ok(states)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(b: &[u8]) -> Option<StateCapture> {
        Some(StateCapture::Bytes(SnapshotBytes::from_payload(b)))
    }

    #[test]
    fn a_large_part_is_copied_into_the_frame_a_slice_at_a_time() {
        let big = vec![7u8; 5 * COPY + 3];
        let c = capture(vec![(1, bytes(&big)), (2, bytes(b"y"))], 2, true);
        let Some(StateCapture::Steps(mut s)) = c else {
            panic!("a frame is built in steps")
        };
        let mut steps = 0;
        let a = loop {
            steps += 1;
            if let Some(a) = s.step(16).unwrap() {
                break a;
            }
        };
        assert!(
            steps >= 7,
            "{steps} steps: six copies of the big part, one of the small"
        );
        let states = split(a.payload().to_vec(), &[1, 2]).unwrap();
        assert_eq!(states[&1], big);
        assert_eq!(states[&2], b"y");
    }

    /// A capture archived in `n` steps.
    struct Slow(usize, Vec<u8>);
    impl ArchiveSteps for Slow {
        fn step(&mut self, _: usize) -> Result<Option<SnapshotBytes>, CheckpointError> {
            if self.0 == 0 {
                return Ok(Some(SnapshotBytes::from_payload(&self.1)));
            }
            self.0 -= 1;
            Ok(None)
        }
    }

    #[test]
    fn a_chain_of_one_hands_over_its_operators_archive_unframed() {
        let c = capture(vec![(3, bytes(b"abc"))], 1, true);
        let a = c.unwrap().archive().unwrap();
        assert_eq!(a.payload(), b"abc");
        let s = split(a.payload().to_vec(), &[3]).unwrap();
        assert_eq!(s[&3], b"abc");
    }

    #[test]
    fn a_stateless_chain_has_no_capture() {
        assert!(capture(vec![(1, None), (2, None)], 2, false).is_none());
        // At a recovery point: a frame with no state in it.
        let a = capture(vec![(1, None), (2, None)], 2, true)
            .unwrap()
            .archive()
            .unwrap();
        assert!(split(a.payload().to_vec(), &[1, 2]).unwrap().is_empty());
    }

    #[test]
    fn a_longer_chain_frames_each_state_under_its_node_after_every_step() {
        let slow = Some(StateCapture::Steps(Box::new(Slow(3, b"keyed".to_vec()))));
        let c = capture(vec![(1, bytes(b"x")), (2, None), (4, slow)], 3, false);
        let Some(StateCapture::Steps(mut s)) = c else {
            panic!("a frame is built in steps")
        };
        let mut steps = 0;
        let a = loop {
            steps += 1;
            if let Some(a) = s.step(1).unwrap() {
                break a;
            }
        };
        assert!(steps >= 4, "at least one step per step of the slow part");
        assert!(s.step(1).unwrap().is_none(), "Some exactly once");
        let states = split(a.payload().to_vec(), &[1, 2, 4]).unwrap();
        assert_eq!(states.len(), 2);
        assert_eq!(states[&1], b"x");
        assert_eq!(states[&4], b"keyed");
    }

    #[test]
    fn a_damaged_frame_is_an_error_never_a_fresh_state() {
        let c = capture(vec![(1, bytes(b"state")), (2, None)], 2, true);
        let a = c.unwrap().archive().unwrap().payload().to_vec();
        assert!(split(a.clone(), &[1, 2]).is_ok());
        assert!(split(a[..a.len() - 1].to_vec(), &[1, 2]).is_err());
        assert!(split(b"TDMCHAIX".to_vec(), &[1, 2]).is_err());
        assert!(
            split(a.clone(), &[7, 2]).is_err(),
            "a node not in the chain"
        );
        let mut extra = a;
        extra.push(0);
        assert!(split(extra, &[1, 2]).is_err());
    }
}
