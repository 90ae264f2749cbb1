//! Checkpoint barrier alignment over the lanes of one input, as a value:
//! which barrier is being aligned, which lanes delivered it, which barrier
//! was forwarded last.
//!
//! Three readers align barriers: a task's ring input
//! ([`super::channel::RingInput`]), a consumer's input from standby groups
//! (`standby::fenced`), and a standby group's primary over its buffer
//! queues (`standby::incarnation`). The last one also keeps the alignment
//! in its recovery points — a new primary that starts from a point taken
//! while a barrier was aligning must know which lanes had delivered it —
//! so the state is a plain value it can copy.
//!
//! Rules: when lane `i` delivers barrier `n`, the barrier is forwarded once
//! every lane has delivered `n` or ended. In exactly-once mode lane `i` is
//! not read meanwhile ([`Alignment::holds`]): its records after the barrier
//! belong to the next checkpoint. A newer barrier abandons an older one
//! still aligning (the coordinator gave up on it: a source may skip it). A
//! barrier at or below the last forwarded one is stale — a standby group's
//! new primary repeats the barriers of the chunks it replays — and changes
//! nothing.

/// How long an input's barrier alignments take, from the first lane's
/// barrier to the one that completes it (engine ns), for the alignment
/// time a task publishes ([`super::task::TaskCtx::aligned`]). Apart from
/// [`Alignment`], which recovery points copy: a time is not state.
#[derive(Debug, Default)]
pub(crate) struct AlignTimer {
    /// The barrier being aligned and when its first lane delivered it.
    started: Option<(u64, u64)>,
}

impl AlignTimer {
    /// A lane delivered barrier `id` at `now`, before `a` is told: a
    /// barrier newer than every one `a` knows starts the clock.
    pub(crate) fn on_barrier(&mut self, a: &Alignment, id: u64, now: u64) {
        if id > a.forwarded() && id > a.aligning() {
            self.started = Some((id, now));
        }
    }

    /// `a` forwarded barrier `id` at `now`: how long its alignment took
    /// (`None` for one whose start this timer did not see).
    pub(crate) fn forwarded(&mut self, id: u64, now: u64) -> Option<u64> {
        match self.started {
            Some((i, t)) if i == id => {
                self.started = None;
                Some(now.saturating_sub(t))
            }
            _ => None,
        }
    }
}

/// The alignment of one input's lanes (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Alignment {
    /// The barrier being aligned (0: none).
    aligning: u64,
    /// Per lane: delivered the barrier being aligned.
    seen: Vec<bool>,
    /// The newest barrier forwarded.
    forwarded: u64,
}

impl Alignment {
    pub(crate) fn new(lanes: usize) -> Self {
        Alignment {
            aligning: 0,
            seen: vec![false; lanes],
            forwarded: 0,
        }
    }

    /// Lane `lane` delivered barrier `id`; `ended` says which lanes have
    /// ended. Returns the barrier to forward, if the alignment completed.
    pub(crate) fn on_barrier(&mut self, lane: usize, id: u64, ended: &[bool]) -> Option<u64> {
        if id <= self.forwarded || id < self.aligning {
            return None; // stale: an abandoned or already forwarded one
        }
        if id > self.aligning {
            self.aligning = id;
            self.seen.fill(false);
        }
        self.seen[lane] = true;
        self.try_complete(ended)
    }

    /// A lane ended: the barrier being aligned no longer waits for it.
    /// Returns the barrier to forward, if the alignment completed.
    pub(crate) fn try_complete(&mut self, ended: &[bool]) -> Option<u64> {
        if self.aligning == 0 || !self.seen.iter().zip(ended).all(|(s, e)| *s || *e) {
            return None;
        }
        let id = std::mem::replace(&mut self.aligning, 0);
        self.forwarded = id;
        self.seen.fill(false);
        Some(id)
    }

    /// Whether lane `lane` delivered the barrier being aligned (in
    /// exactly-once mode it is not read until the alignment completes).
    #[inline]
    pub(crate) fn holds(&self, lane: usize) -> bool {
        self.aligning != 0 && self.seen[lane]
    }

    /// The barrier being aligned (0: none).
    pub(crate) fn aligning(&self) -> u64 {
        self.aligning
    }

    /// The newest barrier forwarded (0: none).
    pub(crate) fn forwarded(&self) -> u64 {
        self.forwarded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_barrier_is_forwarded_once_every_lane_delivered_it_or_ended() {
        let mut a = Alignment::new(3);
        let mut ended = [false; 3];
        assert_eq!(a.on_barrier(0, 1, &ended), None);
        assert!(a.holds(0) && !a.holds(1));
        assert_eq!(a.on_barrier(1, 1, &ended), None);
        ended[2] = true;
        assert_eq!(a.try_complete(&ended), Some(1));
        assert!(!a.holds(0) && a.aligning() == 0);
    }

    #[test]
    fn repeated_and_older_barriers_change_nothing() {
        let mut a = Alignment::new(2);
        let ended = [false; 2];
        a.on_barrier(0, 1, &ended);
        assert_eq!(a.on_barrier(1, 1, &ended), Some(1));
        // A new primary's replay repeats barrier 1 on both lanes.
        assert_eq!(a.on_barrier(0, 1, &ended), None);
        assert_eq!(a.on_barrier(1, 1, &ended), None);
        assert!(!a.holds(0) && !a.holds(1));
        // The same lane delivering the barrier being aligned twice.
        a.on_barrier(0, 2, &ended);
        let before = a.clone();
        assert_eq!(a.on_barrier(0, 2, &ended), None);
        assert_eq!(a, before);
    }

    #[test]
    fn the_timer_runs_from_the_first_lanes_barrier_to_the_last() {
        let mut a = Alignment::new(2);
        let mut t = AlignTimer::default();
        let ended = [false; 2];
        t.on_barrier(&a, 1, 100);
        assert_eq!(a.on_barrier(0, 1, &ended), None);
        // The second lane's barrier does not restart the clock.
        t.on_barrier(&a, 1, 150);
        assert_eq!(a.on_barrier(1, 1, &ended), Some(1));
        assert_eq!(t.forwarded(1, 170), Some(70));
        // A repeated (stale) barrier starts nothing.
        t.on_barrier(&a, 1, 200);
        assert_eq!(t.forwarded(1, 210), None);
    }

    #[test]
    fn a_newer_barrier_abandons_the_one_aligning() {
        let mut a = Alignment::new(2);
        let ended = [false; 2];
        a.on_barrier(0, 3, &ended);
        assert_eq!(a.on_barrier(1, 4, &ended), None);
        assert!(!a.holds(0) && a.holds(1) && a.aligning() == 4);
        // The abandoned one arriving late on lane 1 is stale.
        assert_eq!(a.on_barrier(1, 3, &ended), None);
        assert_eq!(a.on_barrier(0, 4, &ended), Some(4));
    }
}
