//! Which faults the paper pipeline recovers from, by configuration: what a
//! random schedule (`paper --fault-schedule random:…`, the `chaos` binary)
//! may draw so that the faulted run must end with exactly the clean output.

use super::names;
use tandem_fault_inject::{Space, CHECKPOINT};

/// How a run of the pipeline is protected.
#[derive(Clone, Debug, Default)]
pub struct Protection {
    /// Operators with a standby.
    pub standby: Vec<String>,
    /// Process isolation: each backed-up operator's incarnations run in a
    /// child process (and head their own chains), so a standby survives
    /// its primary's process dying.
    pub process: bool,
    /// Checkpoints run, and a failure restarts from the last complete one.
    pub checkpoints: bool,
    /// A restart strategy that restarts (not `none`): stalls are detected.
    pub restarts: bool,
    /// The output is written by the two-phase-commit sink (commits happen).
    pub transactional: bool,
    /// Checkpoint ids to expect over the run (at least 1 when
    /// `checkpoints`).
    pub checkpoints_expected: u64,
    /// Cores the job runs on (a standby on the only core cannot watch a
    /// primary that holds it).
    pub cores: usize,
    /// The chain backed up with `flatmap` replays the source (standbys
    /// run, `flatmap` has one, and the source is not copied into a buffer
    /// queue): a fault in the source is one of the chain's, and the chain
    /// has no queue to damage.
    pub replays_source: bool,
    /// Operators no fault can be injected into: under process isolation,
    /// those chained after a backed-up chain's head run in the head's child
    /// process, where records are not probed.
    pub unprobed: Vec<String>,
}

impl Protection {
    /// Whether `op` has a standby.
    pub fn backed_up(&self, op: &str) -> bool {
        self.standby.iter().any(|s| s == op)
    }

    /// Whether a stall of `op` that never ends is detected (and ended).
    pub fn stall_detected(&self, op: &str) -> bool {
        (self.backed_up(op) && self.cores > 1) || (self.checkpoints && self.restarts)
    }

    /// The faults a run of `records` records recovers from, exactly:
    /// - on every processing operator, slow records, missed heartbeats and
    ///   stalls that end (nothing to recover: the output must not change);
    /// - panics and cut inputs where a standby or a restart answers them;
    /// - stalls that never end where something detects them;
    /// - faulty standbys on backed-up operators, and damaged buffer-queue
    ///   entries where a restart can replace the group's queues (a chain
    ///   that replays its source has none);
    /// - panics and cut inputs of the source where a chain replays it;
    /// - with checkpoints, panics of the source, snapshot I/O errors,
    ///   crashes around a publication, damaged snapshots, and failed
    ///   commits of a transactional output.
    pub fn space(&self, records: u64) -> Space {
        let mut s = Space::new(records);
        for op in [names::FLATMAP, names::FILTER, names::MAP, names::KEYED] {
            if self.unprobed.iter().any(|u| u == op) {
                continue;
            }
            let backed = self.backed_up(op);
            for k in ["slow", "mute", "stall"] {
                s = s.allow(k, op);
            }
            if backed || (self.checkpoints && self.restarts) {
                s = s.allow("panic", op).allow("cut", op);
            }
            if self.stall_detected(op) {
                s = s.allow("stall-forever", op);
            }
            if backed {
                s = s.allow("standby", op);
                if self.process {
                    s = s.allow("kill", op).allow("abort", op).allow("segv", op);
                }
                let queued =
                    !(self.replays_source && [names::FLATMAP, names::FILTER].contains(&op));
                if self.checkpoints && self.restarts && queued {
                    s = s.allow("corrupt", op);
                }
            }
        }
        if self.replays_source {
            s = s.allow("panic", names::SOURCE).allow("cut", names::SOURCE);
        }
        if !(self.checkpoints && self.restarts) {
            // Two stalls that never end, at once, may hold every core, and
            // with them the standbys that would take over: only a restart
            // recovers from that (without one the job fails, saying so).
            s = s.once("stall-forever");
        }
        if self.checkpoints && self.restarts {
            s = s
                .allow("panic", names::SOURCE)
                .allow("ioerror", CHECKPOINT)
                .allow("crash", CHECKPOINT)
                .allow("corrupt", CHECKPOINT)
                .checkpoints(self.checkpoints_expected.max(1));
            if self.transactional {
                s = s.allow("commit", names::SINK);
            }
        }
        s
    }
}
