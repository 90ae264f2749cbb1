//! Managed broadcast state: rules broadcast to every instance of a
//! two-input function build a state the engine snapshots and restores —
//! the function writes no `snapshot_state` — so a restart from a
//! checkpoint taken after the rules ended, and a standby's takeover, apply
//! the same rules as a clean run.

mod common;

use common::{cores, exact_under_faults, Faults};
use std::sync::{Arc, Mutex};
use tandem::operator::broadcast::{BroadcastProcess, BroadcastState};
use tandem::runtime::probe::ProbeAction;
use tandem::{IterSource, JobBuilder, Output, Record, RuntimeConfig, TupleId};

const RULES: u64 = 20;
const VALUES: u64 = 4_000;

/// Rule `r`: values divisible by `r + 2` get label `r`.
struct Label;

impl BroadcastProcess<u64, u64, (u64, u64)> for Label {
    type State = Vec<u64>;

    fn process_element(
        &mut self,
        rules: &Vec<u64>,
        r: Record<u64>,
        out: &mut Output<'_, (u64, u64)>,
    ) {
        // The highest rule that matches, or none (u64::MAX).
        let label = rules
            .iter()
            .filter(|&&d| r.value.is_multiple_of(d + 2))
            .max()
            .copied()
            .unwrap_or(u64::MAX);
        out.emit((r.value, label));
    }

    fn process_broadcast(
        &mut self,
        rules: &mut Vec<u64>,
        r: Record<u64>,
        _out: &mut Output<'_, (u64, u64)>,
    ) {
        rules.push(r.value);
    }

    fn ready(&self, rules: &Vec<u64>) -> bool {
        rules.len() as u64 == RULES
    }
}

fn run(standby: bool, cfg: &RuntimeConfig) -> (Vec<(u64, u64)>, tandem::JobReport) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let job = JobBuilder::new("labels");
    job.default_parallelism(2);
    let rules = job
        .source("rules", |_| IterSource((0..RULES).map(|r| (r, r))))
        .parallelism(1)
        .broadcast();
    let values = job.source("values", |i| {
        let me = i.instance as u64;
        IterSource((0..VALUES).filter(move |v| v % 2 == me).map(|v| (v, v)))
    });
    let connected = values.connect(&rules);
    let labelled = if standby {
        connected
            .standby()
            .process("label", |_| BroadcastState::new(Label))
    } else {
        connected.process("label", |_| BroadcastState::new(Label))
    };
    let o = Arc::clone(&out);
    labelled.for_each("out", move |r| o.lock().unwrap().push(r.value));
    let report = job.build().unwrap().run(cfg).unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    (v, report)
}

#[test]
fn broadcast_state_is_snapshotted_and_restored_by_the_engine_through_restarts_and_takeovers() {
    let (clean, _) = run(false, &RuntimeConfig::default().cores(cores()));
    assert_eq!(clean.len() as u64, VALUES);
    // Every value labelled by the full rule set. (The rules are source
    // partition 0, the values 1 and 2.)
    for &(v, label) in &clean {
        let want = (0..RULES)
            .filter(|d| v % (d + 2) == 0)
            .max()
            .unwrap_or(u64::MAX);
        assert_eq!(label, want, "value {v}");
    }
    let faults = || {
        Faults::new(
            [(1, 350), (2, 550), (1, 750), (2, 950)]
                .into_iter()
                .map(|(p, s)| {
                    (
                        "label",
                        TupleId::new(p, s),
                        ProbeAction::Panic("injected".into()),
                    )
                })
                .collect(),
        )
    };
    exact_under_faults(&clean, faults, 4, run);
}
