//! Which restore point a job resumes from when it is given a directory
//! (`RuntimeConfig::restore_from(DIR)`, `paper --from-savepoint DIR`).
//!
//! A checkpoint directory holds retained checkpoints (`manifest-<id>.json`)
//! and savepoints (`sp-<id>/`), numbered by one counter: a later id is a
//! later state of the job. The rule:
//!
//! - the **newest** restore point whose files verify is taken, checkpoint
//!   or savepoint alike;
//! - a newer **checkpoint** that does not verify is passed over (and
//!   reported): the older point is a consistent state, and a
//!   transactional sink retracts what was committed past it;
//! - a newer **savepoint** that does not verify is never passed over: a
//!   savepoint is what a user stopped a job with, and the point before it
//!   would replay output the stopped job already committed. The job is
//!   refused, naming both, for the user to pick one by its path;
//! - ids and creation times that **disagree** across the two kinds (the
//!   directory was assembled from copies, or holds two jobs' points) make
//!   the choice ambiguous: refused, naming both.
//!
//! Nothing here reads a file: the caller lists and loads the manifests
//! ([`Candidate`]s) and verifies the one this module asks about
//! ([`choose`] takes a verifier), so every branch is a unit test.

/// A restore point found in a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// A savepoint (else a checkpoint).
    pub savepoint: bool,
    /// Its id.
    pub id: u64,
    /// When it was written, milliseconds since the Unix epoch (`None`: its
    /// manifest could not be read; the verifier says why).
    pub created_at_ms: Option<u64>,
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.savepoint {
            false => write!(f, "checkpoint {}", self.id),
            true => write!(f, "savepoint {}", self.id),
        }
    }
}

/// What [`choose`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Choice {
    /// Restore `candidates[index]`; `skipped`: the newer ones passed over,
    /// each with why.
    Take {
        /// Its index in the candidates.
        index: usize,
        /// Newer checkpoints that did not verify.
        skipped: Vec<String>,
    },
    /// No candidate verifies (`skipped`: each and why; empty when there
    /// was none).
    Nothing {
        /// Every candidate, and why it was not taken.
        skipped: Vec<String>,
    },
    /// Taking any would be a guess: why, naming the points.
    Refuse(String),
}

/// Chooses among `candidates` (any order) by the [module's rule](self);
/// `verify(i)` checks candidate `i`'s files (`Err`: why not), and is asked
/// newest first, only as far as needed.
pub fn choose(
    candidates: &[Candidate],
    mut verify: impl FnMut(usize) -> Result<(), String>,
) -> Choice {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(candidates[i].id));
    let mut skipped = Vec::new();
    let mut newer_savepoint: Option<(usize, String)> = None;
    for &i in &order {
        let c = &candidates[i];
        match verify(i) {
            Err(why) => {
                if c.savepoint && newer_savepoint.is_none() {
                    newer_savepoint = Some((i, why.clone()));
                }
                skipped.push(format!("{c}: {why}"));
            }
            Ok(()) => {
                if let Some((s, why)) = newer_savepoint {
                    return Choice::Refuse(format!(
                        "{} is the newest savepoint here but does not verify ({why}); {c} is \
                         older and would replay output the job stopped at {} had already \
                         committed: name the restore point to take by its path",
                        candidates[s], candidates[s]
                    ));
                }
                if let Some(r) = disagreeing(candidates, i) {
                    return Choice::Refuse(r);
                }
                return Choice::Take { index: i, skipped };
            }
        }
    }
    Choice::Nothing { skipped }
}

/// Why taking `candidates[taken]`, the newest by id, would be a guess: a
/// point of the other kind written after it.
fn disagreeing(candidates: &[Candidate], taken: usize) -> Option<String> {
    let t = &candidates[taken];
    let at = t.created_at_ms?;
    candidates
        .iter()
        .filter(|c| c.savepoint != t.savepoint && c.id < t.id)
        .filter(|c| c.created_at_ms.is_some_and(|m| m > at))
        .max_by_key(|c| c.created_at_ms)
        .map(|c| {
            format!(
                "{t} is the newest by id but {c} was written after it: the directory holds \
                 restore points of more than one run, and which one continues the job is \
                 ambiguous — name the restore point to take by its path"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECKPOINT: bool = false;
    const SAVEPOINT: bool = true;

    fn c(savepoint: bool, id: u64, at: u64) -> Candidate {
        Candidate {
            savepoint,
            id,
            created_at_ms: Some(at),
        }
    }

    fn all_valid(_: usize) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn the_newest_savepoint_is_taken_over_an_older_checkpoint() {
        // The directory: chk-1, then the stop savepoint sp-3.
        let v = [c(CHECKPOINT, 1, 100), c(SAVEPOINT, 3, 300)];
        assert_eq!(
            choose(&v, all_valid),
            Choice::Take {
                index: 1,
                skipped: vec![]
            }
        );
    }

    #[test]
    fn a_checkpoint_newer_than_a_savepoint_is_taken() {
        // A savepoint taken while the job ran on: its later checkpoints
        // are its later state.
        let v = [
            c(SAVEPOINT, 2, 200),
            c(CHECKPOINT, 5, 500),
            c(CHECKPOINT, 4, 400),
        ];
        assert_eq!(
            choose(&v, all_valid),
            Choice::Take {
                index: 1,
                skipped: vec![]
            }
        );
    }

    #[test]
    fn a_damaged_newer_checkpoint_is_passed_over_and_reported() {
        let v = [c(CHECKPOINT, 6, 600), c(CHECKPOINT, 7, 700)];
        let got = choose(&v, |i| if i == 1 { Err("bad".into()) } else { Ok(()) });
        assert_eq!(
            got,
            Choice::Take {
                index: 0,
                skipped: vec!["checkpoint 7: bad".into()]
            }
        );
    }

    #[test]
    fn a_damaged_newest_savepoint_is_never_passed_over() {
        let v = [c(CHECKPOINT, 1, 100), c(SAVEPOINT, 3, 300)];
        let got = choose(&v, |i| {
            if i == 1 {
                Err("truncated".into())
            } else {
                Ok(())
            }
        });
        let Choice::Refuse(why) = got else {
            panic!("{got:?}")
        };
        assert!(
            why.contains("savepoint 3")
                && why.contains("checkpoint 1")
                && why.contains("truncated"),
            "{why}"
        );
    }

    #[test]
    fn an_unreadable_savepoint_manifest_is_never_passed_over() {
        let v = [
            c(CHECKPOINT, 1, 100),
            Candidate {
                savepoint: SAVEPOINT,
                id: 3,
                created_at_ms: None,
            },
        ];
        let got = choose(&v, |i| match v[i].created_at_ms {
            None => Err("no permission".into()),
            Some(_) => Ok(()),
        });
        assert!(matches!(got, Choice::Refuse(_)), "{got:?}");
    }

    #[test]
    fn ids_and_times_that_disagree_across_kinds_are_refused_as_ambiguous() {
        // sp-2 written after chk-9: two runs' points in one directory.
        let v = [c(CHECKPOINT, 9, 100), c(SAVEPOINT, 2, 900)];
        let Choice::Refuse(why) = choose(&v, all_valid) else {
            panic!()
        };
        assert!(
            why.contains("ambiguous") && why.contains("savepoint 2"),
            "{why}"
        );
    }

    #[test]
    fn nothing_that_verifies_lists_every_point_and_why() {
        let v = [c(CHECKPOINT, 1, 100), c(CHECKPOINT, 2, 200)];
        assert_eq!(
            choose(&v, |_| Err("gone".into())),
            Choice::Nothing {
                skipped: vec!["checkpoint 2: gone".into(), "checkpoint 1: gone".into()]
            }
        );
        assert_eq!(choose(&[], all_valid), Choice::Nothing { skipped: vec![] });
    }

    #[test]
    fn verification_stops_at_the_first_point_taken() {
        let v = [
            c(CHECKPOINT, 1, 100),
            c(CHECKPOINT, 2, 200),
            c(CHECKPOINT, 3, 300),
        ];
        let mut asked = Vec::new();
        let _ = choose(&v, |i| {
            asked.push(v[i].id);
            Ok(())
        });
        assert_eq!(asked, [3]);
    }
}
