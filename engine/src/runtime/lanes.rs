//! Event time over the lanes of one input, as a value: each lane's
//! watermark, which lanes are idle, and the input's combined watermark.
//!
//! A watermark `w` on a lane says that no record with an event time below
//! `w` follows on that lane, except late ones (see [`crate::time`]). An
//! input's watermark is the minimum over its lanes that have neither ended
//! nor gone idle; it only moves forward. A lane goes idle when its
//! producer says so (its source had nothing for the idle timeout) and is
//! active again with its next record or watermark.
//!
//! Three readers keep one, as they keep barrier alignment
//! ([`super::align`]): a task's ring input, a consumer's input from standby
//! groups, and a standby group's primary over its buffer queues — which
//! keeps it in its recovery points, so a new primary knows each lane's
//! watermark at the point.
//!
//! Besides the combined watermark, the reader tells the operators it feeds
//! the watermark *of the lane each record came on* (`TaskCtx::lane_wm`):
//! an event-time operator orders and judges its records by it, which
//! makes what it does independent of how its lanes happened to interleave.

/// The event time of one input's lanes (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LaneClock {
    /// Per lane: its newest watermark (0: none yet).
    wm: Vec<u64>,
    /// Per lane: idle since its last record or watermark.
    idle: Vec<bool>,
    /// Per lane: ended (its watermark is past every event time).
    ended: Vec<bool>,
    /// The combined watermark forwarded last.
    out: u64,
    /// Every live lane was idle when last forwarded.
    out_idle: bool,
    /// The operator's processing time as its determinant log has it (the
    /// sum of the ticks so far, in ms on the job's clock; see
    /// `standby::detlog`): kept by a standby group's incarnation and in its
    /// recovery points beside the lanes' event time.
    pub(crate) ptime_ms: u64,
}

/// What the reader forwards after a lane's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Forward {
    Nothing,
    /// The input's watermark advanced to this.
    Watermark(u64),
    /// Every lane still live is idle.
    Idle,
    /// Every lane still live is idle, and the input's watermark advanced
    /// to the largest of its lanes' (see [`LaneClock`]).
    IdleAt(u64),
}

impl LaneClock {
    pub(crate) fn new(lanes: usize) -> Self {
        LaneClock {
            wm: vec![0; lanes],
            idle: vec![false; lanes],
            ended: vec![false; lanes],
            out: 0,
            out_idle: false,
            ptime_ms: 0,
        }
    }

    /// Lane `lane`'s watermark.
    #[inline]
    pub(crate) fn lane(&self, lane: usize) -> u64 {
        self.wm[lane]
    }

    /// The combined watermark forwarded last.
    #[cfg(test)]
    pub(crate) fn current(&self) -> u64 {
        self.out
    }

    /// A record arrived on `lane`: an idle lane is active again (its
    /// watermark holds the input back from now on).
    #[inline]
    pub(crate) fn on_data(&mut self, lane: usize) {
        if self.idle[lane] {
            self.idle[lane] = false;
            self.out_idle = false;
        }
    }

    /// Lane `lane` delivered watermark `wm` (watermarks never go back: an
    /// older one, as a new primary's replay repeats it, changes nothing).
    pub(crate) fn on_watermark(&mut self, lane: usize, wm: u64) -> Forward {
        self.on_data(lane);
        if wm <= self.wm[lane] {
            return Forward::Nothing;
        }
        self.wm[lane] = wm;
        self.combine()
    }

    /// Lane `lane`'s producer went idle.
    pub(crate) fn on_idle(&mut self, lane: usize) -> Forward {
        self.idle[lane] = true;
        self.combine()
    }

    /// Lane `lane` ended.
    pub(crate) fn on_end(&mut self, lane: usize) -> Forward {
        self.ended[lane] = true;
        self.combine()
    }

    fn combine(&mut self) -> Forward {
        let live = (0..self.wm.len()).filter(|&l| !self.ended[l]);
        let mut min = None::<u64>;
        let mut any = false;
        for l in live {
            any = true;
            if !self.idle[l] {
                min = Some(min.map_or(self.wm[l], |m| m.min(self.wm[l])));
            }
        }
        match min {
            Some(m) if m > self.out => {
                self.out = m;
                self.out_idle = false;
                Forward::Watermark(m)
            }
            Some(_) => Forward::Nothing,
            // Every live lane is idle: the input is, and — as Flink's
            // watermark valve does — its watermark is the largest of its
            // lanes' (an ended lane's is past every event time): nothing
            // holds it back until a lane speaks again.
            None if any && !self.out_idle => {
                self.out_idle = true;
                let max = (0..self.wm.len())
                    .map(|l| if self.ended[l] { u64::MAX } else { self.wm[l] })
                    .max()
                    .unwrap_or(0);
                if max > self.out {
                    self.out = max;
                    Forward::IdleAt(max)
                } else {
                    Forward::Idle
                }
            }
            None => Forward::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_watermark_is_the_minimum_over_live_lanes() {
        let mut c = LaneClock::new(2);
        assert_eq!(c.on_watermark(0, 10), Forward::Nothing);
        assert_eq!(c.on_watermark(1, 5), Forward::Watermark(5));
        assert_eq!(c.on_watermark(1, 20), Forward::Watermark(10));
        assert_eq!(c.on_watermark(1, 15), Forward::Nothing, "never back");
        assert_eq!(c.on_end(0), Forward::Watermark(20));
        assert_eq!(c.lane(1), 20);
    }

    #[test]
    fn an_idle_lane_does_not_hold_the_watermark_back_until_it_speaks_again() {
        let mut c = LaneClock::new(2);
        c.on_watermark(0, 100);
        assert_eq!(c.current(), 0);
        assert_eq!(c.on_idle(1), Forward::Watermark(100));
        assert_eq!(c.on_watermark(0, 200), Forward::Watermark(200));
        // Back with an older watermark: it holds the input from now on,
        // which never goes back.
        assert_eq!(c.on_watermark(1, 50), Forward::Nothing);
        assert_eq!(c.on_watermark(0, 300), Forward::Nothing);
        assert_eq!(c.on_watermark(1, 250), Forward::Watermark(250));
    }

    #[test]
    fn an_input_whose_lanes_are_all_idle_is_idle_once_at_their_largest_watermark() {
        let mut c = LaneClock::new(2);
        assert_eq!(c.on_idle(0), Forward::Nothing);
        assert_eq!(c.on_idle(1), Forward::Idle);
        assert_eq!(c.on_idle(1), Forward::Nothing);
        c.on_data(0);
        assert_eq!(c.on_idle(0), Forward::Idle);
        let mut c = LaneClock::new(3);
        c.on_watermark(0, 10);
        c.on_watermark(1, 30);
        c.on_watermark(2, 20);
        assert_eq!(c.on_idle(1), Forward::Nothing);
        assert_eq!(c.on_idle(2), Forward::Nothing);
        assert_eq!(c.on_idle(0), Forward::IdleAt(30));
        let mut c = LaneClock::new(2);
        c.on_watermark(0, 10);
        c.on_end(1);
        assert_eq!(
            c.on_idle(0),
            Forward::IdleAt(u64::MAX),
            "an ended lane is past every time"
        );
    }
}
