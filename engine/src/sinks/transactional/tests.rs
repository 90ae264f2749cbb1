use super::*;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tandem-2pc-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    fs::create_dir_all(&d).unwrap();
    d
}

fn committed_text(dir: &Path) -> String {
    TransactionalFile::committed_files(dir)
        .unwrap()
        .iter()
        .map(|p| fs::read_to_string(p).unwrap())
        .collect()
}

fn restored(checkpoint: u64, finished: bool) -> Option<Restored> {
    Some(Restored {
        checkpoint,
        finished,
        adopted: Vec::new(),
    })
}

#[test]
fn output_is_visible_only_after_its_checkpoint_completes() {
    let dir = tempdir("visible");
    let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
    let mut c = s.committer();
    s.write(b"a\n").unwrap();
    s.pre_commit(1).unwrap();
    s.write(b"b\n").unwrap();
    assert_eq!(committed_text(&dir), "", "nothing before completion");
    c.commit(1).unwrap();
    assert_eq!(committed_text(&dir), "a\n");
    s.pre_commit(2).unwrap();
    c.commit(2).unwrap();
    assert_eq!(committed_text(&dir), "a\nb\n");
    c.commit(3).unwrap(); // nothing staged under 3: not an error
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn recovery_commits_the_restored_epoch_and_drops_the_rest() {
    let dir = tempdir("recover");
    let mut s = TransactionalFile::open(&dir, 3, 0, None).unwrap();
    s.write(b"e1\n").unwrap();
    s.pre_commit(1).unwrap();
    s.write(b"e2\n").unwrap();
    s.pre_commit(2).unwrap();
    s.write(b"e3-partial\n").unwrap();
    s.current.as_mut().unwrap().flush().unwrap();
    // Crash: checkpoint 1 completed — so its epoch was prepared
    // (durable) before it was published — but its commit never ran;
    // 2 did not complete.
    let c = s.committer();
    c.prepare(1).unwrap();
    c.prepare(2).unwrap();
    drop(s);
    TransactionalFile::open(&dir, 3, 1, restored(1, false)).unwrap();
    assert_eq!(committed_text(&dir), "e1\n");
    let left: Vec<_> = fs::read_dir(dir.join(".staged"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["part-3.attempt-1"], "attempt 0's files are gone");
    assert!(
        fs::read_dir(stage_dir(&dir, 3, 1))
            .unwrap()
            .next()
            .is_none(),
        "the new attempt's staging directory starts empty"
    );
    fs::remove_dir_all(dir).unwrap();
}

/// Restored at fewer instances, the new instance 0 settles old instance
/// 2's output as instance 2 would have: its epoch of the checkpoint
/// committed, the one past it dropped — none lost, none twice.
#[test]
fn an_instance_restored_at_fewer_instances_settles_the_output_of_those_gone() {
    let dir = tempdir("adopt");
    let mut s = TransactionalFile::open(&dir, 2, 0, None).unwrap();
    let mut c = s.committer();
    for (e, text) in [(1, &b"e1\n"[..]), (2, b"e2\n"), (3, b"e3\n")] {
        s.write(text).unwrap();
        s.pre_commit(e).unwrap();
        c.prepare(e).unwrap();
    }
    c.commit(1).unwrap();
    drop(s);
    // Checkpoint 2 completed, its commit never ran; 3 did not complete.
    let r = Restored {
        checkpoint: 2,
        finished: false,
        adopted: vec![(2, false)],
    };
    TransactionalFile::open(&dir, 0, 0, Some(r)).unwrap();
    assert_eq!(committed_text(&dir), "e1\ne2\n");
    let left: Vec<_> = fs::read_dir(dir.join(".staged"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        ["part-0.attempt-0"],
        "instance 2's staging is settled"
    );
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn recovery_also_commits_an_abandoned_epoch_before_the_restored_one() {
    let dir = tempdir("recover-abandoned");
    let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
    let c = s.committer();
    for (e, text) in [(1, &b"e1\n"[..]), (2, b"e2\n"), (3, b"e3\n")] {
        s.write(text).unwrap();
        s.pre_commit(e).unwrap();
        c.prepare(e).unwrap();
    }
    drop(s);
    // Checkpoint 1 was abandoned, 2 completed (crash before its commit),
    // 3 never completed.
    TransactionalFile::open(&dir, 0, 1, restored(2, false)).unwrap();
    assert_eq!(committed_text(&dir), "e1\ne2\n");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_final_epoch_survives_only_for_an_instance_restored_as_finished() {
    for finished in [false, true] {
        let dir = tempdir("final");
        let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        s.write(b"tail\n").unwrap();
        s.pre_commit(FINAL_EPOCH).unwrap();
        s.committer().prepare(FINAL_EPOCH).unwrap();
        drop(s);
        TransactionalFile::open(&dir, 0, 1, restored(4, finished)).unwrap();
        let expect = if finished { "tail\n" } else { "" };
        assert_eq!(committed_text(&dir), expect, "finished: {finished}");
        fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn a_completed_checkpoint_commits_the_epochs_of_abandoned_ones_before_it() {
    let dir = tempdir("abandoned");
    let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
    let mut c = s.committer();
    s.write(b"e1\n").unwrap();
    s.pre_commit(1).unwrap(); // checkpoint 1 times out
    s.write(b"e2\n").unwrap();
    s.pre_commit(2).unwrap();
    c.commit(2).unwrap();
    assert_eq!(committed_text(&dir), "e1\ne2\n");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn at_job_end_every_epoch_of_the_run_is_committed() {
    let dir = tempdir("final-all");
    let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
    let mut c = s.committer();
    s.write(b"e1\n").unwrap();
    s.pre_commit(1).unwrap();
    c.commit(1).unwrap();
    // Checkpoint 2's barrier passed, but the input ended before it
    // completed: its epoch still belongs to the output.
    s.write(b"e2\n").unwrap();
    s.pre_commit(2).unwrap();
    s.write(b"tail\n").unwrap();
    s.pre_commit(FINAL_EPOCH).unwrap();
    c.commit_final().unwrap();
    assert_eq!(committed_text(&dir), "e1\ne2\ntail\n");
    fs::remove_dir_all(dir).unwrap();
}

/// The CI failure of stop 34: the input ended right after a barrier, so
/// the final commit named an epoch with no output while the epoch
/// before it was still on the sync thread; the commit skipped it as
/// "nothing staged", and a whole instance's output was lost.
#[test]
fn a_commit_waits_for_every_earlier_epoch_still_on_the_sync_thread() {
    for round in 0..20 {
        let dir = tempdir("wait-earlier");
        let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        let mut c = s.committer();
        s.write(b"e1\n").unwrap();
        s.pre_commit(1).unwrap();
        s.write(b"e2\n").unwrap();
        s.pre_commit(2).unwrap();
        s.pre_commit(FINAL_EPOCH).unwrap(); // no output after 2
        if round % 2 == 0 {
            c.commit_final().unwrap();
        } else {
            // Checkpoints 1 and 2 were abandoned; 3 (no output) completed.
            c.commit(3).unwrap();
        }
        assert_eq!(committed_text(&dir), "e1\ne2\n", "round {round}");
        fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn a_checkpoint_is_prepared_only_once_every_epoch_before_it_is_staged() {
    for _ in 0..20 {
        let dir = tempdir("prepared");
        let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        let mut c = s.committer();
        s.write(b"e1\n").unwrap();
        s.pre_commit(1).unwrap();
        // Checkpoint 2 saw no output at this sink.
        let ready = c.prepared(2).unwrap();
        let staged = stage_dir(&dir, 0, 0).join(epoch_name(1)).exists();
        assert!(!ready || staged, "prepared(2) before epoch 1 was staged");
        c.prepare(2).unwrap();
        assert!(c.prepared(2).unwrap());
        assert!(stage_dir(&dir, 0, 0).join(epoch_name(1)).exists());
        drop(s);
        fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn a_late_writer_of_a_stopped_attempt_cannot_touch_the_new_one() {
    let dir = tempdir("fence");
    let mut old = TransactionalFile::open(&dir, 0, 0, None).unwrap();
    old.write(b"old\n").unwrap();
    let mut new = TransactionalFile::open(&dir, 0, 1, None).unwrap();
    new.write(b"new\n").unwrap();
    // The stalled writer wakes and pre-commits an id of its attempt:
    // its in-progress file is gone (the new attempt cleared it).
    assert!(old.pre_commit(7).is_err());
    new.pre_commit(9).unwrap();
    let mut c = new.committer();
    c.commit(9).unwrap();
    assert_eq!(committed_text(&dir), "new\n");
    fs::remove_dir_all(dir).unwrap();
}

/// Without the fence, an epoch a stopped attempt staged after the next
/// attempt opened sat in `.staged` until a later recovery restored a
/// checkpoint past its id — and committed it, a second copy of output
/// the restored job had produced again.
#[test]
fn a_stopped_attempt_cannot_stage_an_epoch_a_later_recovery_would_commit() {
    let dir = tempdir("fence-late");
    let mut old = TransactionalFile::open(&dir, 0, 0, None).unwrap();
    let mut new = TransactionalFile::open(&dir, 0, 1, None).unwrap();
    // The stopped attempt goes on after the new one opened: a new
    // epoch, staged under checkpoint 7.
    let late = old
        .write(b"late\n")
        .and_then(|()| old.pre_commit(7))
        .and_then(|()| old.committer().prepare(7));
    assert!(late.is_err(), "the stopped attempt staged an epoch");
    new.write(b"new\n").unwrap();
    new.pre_commit(9).unwrap();
    new.committer().commit(9).unwrap();
    drop((old, new));
    // Attempt 2 restores checkpoint 9, which covers id 7.
    TransactionalFile::open(&dir, 0, 2, restored(9, false)).unwrap();
    assert_eq!(committed_text(&dir), "new\n");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn settle_returns_once_the_sync_thread_is_done_and_the_run_leaves_no_staging_directory() {
    let dir = tempdir("settle");
    let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
    let mut c = s.committer();
    for e in 1..=5 {
        s.write(format!("e{e}\n").as_bytes()).unwrap();
        s.pre_commit(e).unwrap();
    }
    drop(s);
    c.settle().unwrap();
    // Everything handed over is staged: nothing moves any more.
    assert_eq!(fs::read_dir(stage_dir(&dir, 0, 0)).unwrap().count(), 5);
    c.commit_final().unwrap();
    assert_eq!(committed_text(&dir), "e1\ne2\ne3\ne4\ne5\n");
    assert!(!stage_dir(&dir, 0, 0).exists());
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn instances_recover_independently() {
    let dir = tempdir("instances");
    let mut a = TransactionalFile::open(&dir, 0, 0, None).unwrap();
    let mut b = TransactionalFile::open(&dir, 1, 0, None).unwrap();
    a.write(b"a1\n").unwrap();
    b.write(b"b1\n").unwrap();
    a.pre_commit(1).unwrap();
    b.pre_commit(1).unwrap();
    a.committer().prepare(1).unwrap();
    b.committer().prepare(1).unwrap();
    drop((a, b));
    TransactionalFile::open(&dir, 0, 1, restored(1, false)).unwrap();
    // Instance 1 not reopened yet: its epoch stays staged.
    assert_eq!(committed_text(&dir), "a1\n");
    TransactionalFile::open(&dir, 1, 1, restored(1, false)).unwrap();
    assert_eq!(committed_text(&dir), "a1\nb1\n");
    fs::remove_dir_all(dir).unwrap();
}
