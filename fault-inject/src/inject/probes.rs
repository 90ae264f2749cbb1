//! The probes the injector plugs into the engine's seams: one per operator
//! instance (record faults), one for checkpoint storage, and the factory
//! the runtime asks for them.

use super::*;

/// The probe of one operator instance.
struct OperatorFaults {
    inner: Arc<Inner>,
    operator: String,
    instance: usize,
    mine: Vec<usize>,
    /// A slow fault in progress: its delay and the records left.
    slow: Option<(Duration, u64)>,
}

impl OperatorFaults {
    fn hits(&self, i: usize, id: TupleId) -> bool {
        let a = &self.inner.faults[i];
        if a.fired.load(Ordering::Relaxed) {
            return false;
        }
        match &a.target {
            Target::Tuple(t) => *t == id,
            Target::After(d) => self.inner.elapsed() >= *d,
            Target::Next { prev, burst } => {
                // Never on a record an earlier part of the burst fired on
                // (a replay brings those back): the parts up to `prev`.
                self.inner.faults[*prev].fired.load(Ordering::SeqCst)
                    && (burst.start..=*prev)
                        .all(|b| self.inner.faults[b].fired_on.load(Ordering::SeqCst) != id.0)
            }
            _ => false,
        }
    }

    fn act(&mut self, i: usize, id: TupleId) -> ProbeAction {
        let a = &self.inner.faults[i];
        let msg = format!("injected fault {}", a.label());
        let mut detail = None;
        let action = match a.spec.kind {
            FaultKind::Panic => ProbeAction::Panic(msg),
            FaultKind::Stall { millis: Some(ms) } => ProbeAction::Stall(Duration::from_millis(ms)),
            FaultKind::Stall { millis: None } => ProbeAction::StallForever,
            FaultKind::Slow { micros, records } => {
                let d = Duration::from_micros(micros);
                self.slow = Some((d, records.saturating_sub(1)));
                ProbeAction::Delay(d)
            }
            FaultKind::Cut => ProbeAction::CutInput,
            FaultKind::Mute { millis } => ProbeAction::MuteHeartbeat(Duration::from_millis(millis)),
            FaultKind::Standby { phase } => {
                self.inner
                    .standbys
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((self.operator.clone(), self.instance, phase, i));
                ProbeAction::Panic(msg)
            }
            FaultKind::CorruptQueue { damage } => {
                let files = self
                    .inner
                    .queues
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&(self.operator.clone(), self.instance))
                    .cloned()
                    .unwrap_or_default();
                let done = files
                    .iter()
                    .find_map(|f| damage::queue_entry(f, id.0, damage).transpose());
                detail = Some(match done {
                    Some(Ok(what)) => what,
                    Some(Err(e)) => format!("damaging the buffer queue failed: {e}"),
                    None => "no buffer queue holds the record".to_string(),
                });
                ProbeAction::Panic(format!("{msg}: {}", detail.as_deref().unwrap_or_default()))
            }
            // The engine kills the process running the operator (its
            // child under process isolation), once the firing is noted.
            FaultKind::Process { death } => ProbeAction::Die(death, msg),
            // Not record faults: never armed on a record.
            FaultKind::Commit
            | FaultKind::IoError { .. }
            | FaultKind::Crash
            | FaultKind::CorruptSnapshot { .. } => ProbeAction::Continue,
        };
        self.inner
            .note(i, Some(self.instance), FiredOn::Record(id), detail);
        action
    }
}

impl RecordProbe for OperatorFaults {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        if let Some((d, left)) = &mut self.slow {
            if *left > 0 {
                *left -= 1;
                return ProbeAction::Delay(*d);
            }
            self.slow = None;
        }
        for k in 0..self.mine.len() {
            let i = self.mine[k];
            if self.hits(i, id) && self.inner.faults[i].claim(id.0) {
                return self.act(i, id);
            }
        }
        ProbeAction::Continue
    }
}

/// The snapshot store's probe.
struct StorageFaults(Arc<Inner>);

impl StorageProbe for StorageFaults {
    fn write(&self, checkpoint: u64, _path: &Path) -> Option<std::io::Error> {
        self.io(checkpoint, IoStep::Write)
    }

    fn fsync(&self, checkpoint: u64, _path: &Path) -> Option<std::io::Error> {
        self.io(checkpoint, IoStep::Fsync)
    }

    fn before_publish(&self, checkpoint: u64) -> StorageAction {
        match self
            .0
            .checkpoint_fault(checkpoint, |f| f.kind == FaultKind::Crash)
        {
            Some(i) => {
                self.0.note(i, None, FiredOn::Checkpoint(checkpoint), None);
                StorageAction::Crash
            }
            None => StorageAction::Continue,
        }
    }

    fn published(&self, manifest: &Manifest) -> StorageAction {
        let Some(i) = self.0.checkpoint_fault(manifest.id, |f| {
            matches!(f.kind, FaultKind::CorruptSnapshot { .. })
        }) else {
            return StorageAction::Continue;
        };
        let FaultKind::CorruptSnapshot { damage } = self.0.faults[i].spec.kind else {
            unreachable!("picked above")
        };
        let what = damage::snapshot(manifest, damage)
            .unwrap_or_else(|e| format!("damaging checkpoint {} failed: {e}", manifest.id));
        self.0
            .note(i, None, FiredOn::Checkpoint(manifest.id), Some(what));
        StorageAction::Crash
    }
}

impl StorageFaults {
    fn io(&self, checkpoint: u64, step: IoStep) -> Option<std::io::Error> {
        let i = self.0.checkpoint_fault(
            checkpoint,
            |f| matches!(f.kind, FaultKind::IoError { step: s, .. } if s == step),
        )?;
        let FaultKind::IoError { errno, .. } = self.0.faults[i].spec.kind else {
            unreachable!("picked above")
        };
        self.0.note(i, None, FiredOn::Checkpoint(checkpoint), None);
        Some(std::io::Error::from_raw_os_error(errno.raw()))
    }
}

impl ProbeFactory for FaultInjector {
    fn probe(&self, operator: &str, instance: usize) -> Option<Box<dyn RecordProbe>> {
        self.inner.start.get_or_init(Instant::now);
        let mine: Vec<usize> = self
            .inner
            .faults
            .iter()
            .enumerate()
            .filter(|(_, f)| f.spec.target == operator && !f.spec.kind.by_checkpoint())
            .map(|(i, _)| i)
            .collect();
        (!mine.is_empty()).then(|| {
            Box::new(OperatorFaults {
                inner: Arc::clone(&self.inner),
                operator: operator.to_string(),
                instance,
                mine,
                slow: None,
            }) as Box<dyn RecordProbe>
        })
    }

    fn takeover(&self, operator: &str, instance: usize, stage: TakeoverStage) -> ProbeAction {
        let mut armed = self
            .inner
            .standbys
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let phase = match stage {
            TakeoverStage::Claiming => StandbyPhase::Before,
            TakeoverStage::Replaying => StandbyPhase::During,
            // A stage this injector does not know: no fault is armed there.
            _ => return ProbeAction::Continue,
        };
        let Some(k) = armed
            .iter()
            .position(|(o, i, p, _)| o == operator && *i == instance && *p == phase)
        else {
            return ProbeAction::Continue;
        };
        let (_, _, _, f) = armed.remove(k);
        ProbeAction::Panic(format!(
            "injected fault {}: the standby fails {} its takeover",
            self.inner.faults[f].label(),
            match phase {
                StandbyPhase::Before => "before",
                StandbyPhase::During => "during",
            }
        ))
    }

    fn storage(&self) -> Option<Arc<dyn StorageProbe>> {
        self.inner
            .faults
            .iter()
            .any(|f| f.spec.kind.on_checkpoint())
            .then(|| Arc::new(StorageFaults(Arc::clone(&self.inner))) as Arc<dyn StorageProbe>)
    }

    fn commit(&self, operator: &str, instance: usize, checkpoint: u64) -> std::io::Result<()> {
        let Some(i) = self.inner.checkpoint_fault(checkpoint, |f| {
            f.kind == FaultKind::Commit && f.target == operator
        }) else {
            return Ok(());
        };
        self.inner
            .note(i, Some(instance), FiredOn::Checkpoint(checkpoint), None);
        Err(std::io::Error::other(format!(
            "injected fault {}",
            self.inner.faults[i].label()
        )))
    }

    fn standby_files(&self, operator: &str, instance: usize, queues: &[PathBuf]) {
        self.inner
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((operator.to_string(), instance), queues.to_vec());
    }
}
