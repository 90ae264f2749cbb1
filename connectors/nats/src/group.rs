//! A group of Tandem processes sharing the partitions of a stream.
//!
//! Processes started with the same group name run [`Group::run`]. Each
//! *part* (one partition: `p0`, `p1`, …) is held through a lease, a key in
//! the key-value bucket `<group>-leases` whose entries expire after the
//! lease time unless renewed:
//!
//! - **claim**: create the key (it must not exist: compare-and-set on
//!   revision 0), then run the part — restored from its newest checkpoint
//!   in the object store — on a thread of its own;
//! - **renew**: every quarter lease, update the key on the revision this
//!   process last wrote. A failed renewal means the lease expired and
//!   someone else may hold it: the part's job is cancelled at once (and
//!   its checkpoint pointer, rewritten by the new owner, fences it anyway);
//! - **finish**: the part's job completed and its output is published: the
//!   part is marked in `<group>-done` and the lease deleted;
//! - **give up**: on shutdown, or when this process holds more than its
//!   share (`⌈parts left / live members⌉`, members counted by their own
//!   expiring keys in `<group>-members`) and at least two more than some
//!   live member (a process joined, or finished its parts): the job is
//!   cancelled and the lease deleted, and the part restarts elsewhere from
//!   its last checkpoint.
//!
//! A process that dies stops renewing: after at most one lease time its
//! keys expire and the others claim its parts at their next tick. The run
//! ends when every part is done.
//!
//! **One job.** The first member records the group's identity (its input,
//! output, checkpoint store, mode and job shape: [`GroupConfig::identity`])
//! in `<group>-job`; a member started with any other is refused before it
//! reads a record, both identities named. A group whose parts are all
//! done is spent: joining it is an error unless
//! [`GroupConfig::resume_finished`].
//!
//! **Outages.** Servers that do not answer (a cluster electing a leader,
//! a server restarting) are waited out for [`GroupConfig::outage`]; a
//! renewal whose reply was lost but which landed is recognised, not taken
//! for a lost lease.

use crate::{nats_err, Client, Error};
use async_nats::jetstream::kv;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How a process takes part in a group.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// The group's name (bucket names are made from it).
    pub name: String,
    /// This process's name in the group (unique: host and PID by default).
    pub member: String,
    /// Parts to share (partitions of the input).
    pub parts: u32,
    /// A lease not renewed for this long expires.
    pub lease: Duration,
    /// Copies of the group's buckets in a cluster.
    pub replicas: usize,
    /// How long servers that do not answer are waited out before this
    /// process gives up ([`crate::DEFAULT_OUTAGE`] by default).
    pub outage: Duration,
    /// What the group runs: every member must name the same (field by
    /// field: input, output, store, mode, job shape …).
    pub identity: BTreeMap<String, String>,
    /// Join a spent group (every part done) without an error: the run
    /// ends at once.
    pub resume_finished: bool,
}

/// One part handed to the run callback.
#[derive(Clone, Debug)]
pub struct Part {
    /// The input partition.
    pub partition: u32,
    /// Its name in keys and objects (`p3`).
    pub name: String,
    /// Set when the part must stop (lease lost, rebalance, shutdown): the
    /// callback cancels its job and returns.
    pub cancelled: Arc<AtomicBool>,
}

/// What happened to the parts this process ran.
#[derive(Clone, Debug, Default)]
pub struct GroupReport {
    /// Parts this process completed.
    pub completed: Vec<String>,
    /// Parts it claimed, in order, with the Unix time in milliseconds.
    pub claimed: Vec<(String, u64)>,
    /// Parts it lost or gave up (name, why).
    pub given_up: Vec<(String, String)>,
}

struct Held {
    revision: u64,
    cancelled: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

/// A process's membership of a group.
pub struct Group {
    client: Client,
    config: GroupConfig,
    leases: kv::Store,
    members: kv::Store,
    done: kv::Store,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What one tick of the group's loop came to.
enum Step {
    Continue,
    /// Every part is done.
    Done,
    /// A part failed too often: give up.
    Fatal(Error),
}

/// How long a cancelled part's job may take to end before the group goes
/// on without it (its thread is left to end on its own).
const RELEASE_WAIT: Duration = Duration::from_secs(30);

/// Failed runs of one part tolerated, group-wide, before a process gives
/// the whole run up (a part that fails every time would otherwise be
/// passed around forever).
const PART_FAILURES: u32 = 3;

impl Group {
    /// Joins (creating its buckets if needed) the group `config.name`.
    pub fn join(client: &Client, config: GroupConfig) -> Result<Group, Error> {
        if config.lease < Duration::from_millis(200) {
            return Err(Error::Invalid(format!(
                "a lease of {:?} is too short (at least 200 ms)",
                config.lease
            )));
        }
        let js = client.js();
        let bucket = |suffix: &str, max_age: Duration| {
            let name = format!("{}-{suffix}", config.name);
            let replicas = config.replicas;
            async move { crate::key_value(js, &name, max_age, replicas).await }
        };
        let (leases, members, done) = client.block(async {
            Ok::<_, Error>((
                bucket("leases", config.lease).await?,
                bucket("members", config.lease).await?,
                bucket("done", Duration::ZERO).await?,
            ))
        })?;
        let (jobs, done_keys) = client.block(async {
            let jobs = bucket("job", Duration::ZERO).await?;
            let done = crate::live_keys(js, &format!("{}-done", config.name)).await?;
            Ok::<_, Error>((jobs, done))
        })?;
        check_identity(client, &jobs, &config)?;
        if done_keys.len() as u32 >= config.parts && !config.resume_finished {
            return Err(Error::Invalid(format!(
                "group {} has finished: all its {} parts are done (a group's name is spent once it finishes: give a new --group, or --resume-finished to end at once)",
                config.name, config.parts
            )));
        }
        let leases_age = client.block(async {
            let l = leases.clone();
            l.status().await.map(|s| s.max_age())
        });
        if let Ok(age) = leases_age {
            if age != config.lease {
                return Err(Error::Invalid(format!(
                    "group {}'s leases expire after {age:?}, this process was started with a lease of {:?}: every member must use the same",
                    config.name, config.lease
                )));
            }
        }
        Ok(Group {
            client: client.clone(),
            config,
            leases,
            members,
            done,
        })
    }

    /// Whether every part of the group is done (it is spent).
    pub fn finished(&self) -> Result<bool, Error> {
        let done = self.client.block(self.keys("done"))?;
        Ok(done.len() as u32 >= self.config.parts)
    }

    /// The group's configuration.
    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    fn part_name(p: u32) -> String {
        format!("p{p}")
    }

    async fn keys(&self, suffix: &str) -> Result<Vec<String>, Error> {
        crate::live_keys(self.client.js(), &format!("{}-{suffix}", self.config.name)).await
    }

    /// Takes part until every part is done (or `stop` is set): `run_part`
    /// runs one part to its end on a thread of its own, returning early
    /// when the part's `cancelled` is set.
    pub fn run<F>(&self, stop: &AtomicBool, run_part: F) -> Result<GroupReport, Error>
    where
        F: Fn(Part) -> Result<(), String> + Send + Sync + 'static,
    {
        let run_part = Arc::new(run_part);
        let tick = self.config.lease / 4;
        let mut held: BTreeMap<u32, Held> = BTreeMap::new();
        let mut report = GroupReport::default();
        let mut failures: BTreeMap<u32, u32> = BTreeMap::new();
        // Let the members that start together see each other before
        // anyone claims: fewer rebalances at the start.
        let joined = Instant::now();
        let quiet = self.config.lease;
        let me = Bytes::from(self.config.member.clone());
        let mut failing_since: Option<Instant> = None;
        let result = loop {
            let step = self.client.block(async {
                self.renew(&mut held, &mut report).await;
                self.members
                    .put(&self.config.member, me.clone())
                    .await
                    .map_err(nats_err("member heartbeat"))?;
                if let Err(e) = self.reap(&mut held, &mut report, &mut failures).await {
                    return Ok(Step::Fatal(e));
                }
                let done = self.keys("done").await?;
                if done.len() as u32 >= self.config.parts {
                    return Ok::<_, Error>(Step::Done);
                }
                if stop.load(Ordering::Relaxed) || joined.elapsed() < quiet {
                    return Ok(Step::Continue);
                }
                // A member that left deleted its key; the marker stays
                // until it expires, but it is no member.
                let mut live = Vec::new();
                for m in self.keys("members").await? {
                    if matches!(self.members.get(&m).await, Ok(Some(_))) {
                        live.push(m);
                    }
                }
                let holding = self.holdings().await?;
                let left = self.config.parts - done.len() as u32;
                let share = left.div_ceil(live.len().max(1) as u32) as usize;
                // The fewest parts a live member holds: a part is handed
                // over only to even out a difference of two or more, not
                // each time the share shrinks as parts complete.
                let least = live
                    .iter()
                    .map(|m| holding.get(m).copied().unwrap_or(0))
                    .min()
                    .unwrap_or(0);
                while held.len() > share && held.len() >= least + 2 {
                    let (&p, _) = held.iter().next_back().expect("non-empty");
                    let h = held.remove(&p).expect("present");
                    self.release(
                        p,
                        h,
                        "rebalanced: a live member held two fewer",
                        &mut report,
                    )
                    .await;
                }
                if held.len() < share {
                    for p in 0..self.config.parts {
                        if held.len() >= share {
                            break;
                        }
                        let name = Self::part_name(p);
                        if held.contains_key(&p) || done.contains(&name) {
                            continue;
                        }
                        if let Ok(revision) = self.leases.create(&name, me.clone()).await {
                            // Done since the list was read (its finisher
                            // marks it done, then frees its lease): not
                            // run again.
                            if matches!(self.done.get(&name).await, Ok(Some(_))) {
                                let _ = self.leases.delete(&name).await;
                                continue;
                            }
                            let cancelled = Arc::new(AtomicBool::new(false));
                            let part = Part {
                                partition: p,
                                name: name.clone(),
                                cancelled: Arc::clone(&cancelled),
                            };
                            let f = Arc::clone(&run_part);
                            let thread = std::thread::Builder::new()
                                .name(format!("tandem-part-{p}"))
                                .spawn(move || f(part))
                                .map_err(|source| Error::Io {
                                    path: "part thread".into(),
                                    source,
                                })?;
                            report.claimed.push((name, unix_ms()));
                            held.insert(
                                p,
                                Held {
                                    revision,
                                    cancelled,
                                    thread: Some(thread),
                                },
                            );
                        }
                    }
                }
                Ok(Step::Continue)
            });
            match step {
                Ok(Step::Done) => break Ok(()),
                Ok(Step::Fatal(e)) => break Err(e),
                Ok(Step::Continue) if stop.load(Ordering::Relaxed) => break Ok(()),
                Ok(Step::Continue) => failing_since = None,
                // The server may be electing a leader (a cluster lost a
                // node): try again each tick, for a while.
                Err(e) => match failing_since {
                    Some(t) if t.elapsed() > self.config.outage => {
                        break Err(Error::Invalid(format!(
                            "the group's servers did not answer for {:.1} s (the outage bound is {:?}): {e}",
                            t.elapsed().as_secs_f64(),
                            self.config.outage
                        )))
                    }
                    Some(_) => {}
                    None => {
                        eprintln!(
                            "tandem-group: {}: {e}; retrying for up to {:?}",
                            self.config.member, self.config.outage
                        );
                        failing_since = Some(Instant::now());
                    }
                },
            }
            std::thread::sleep(tick);
        };
        // Shutdown (or the end): give every part back.
        self.client.block(async {
            for (p, h) in std::mem::take(&mut held) {
                self.release(p, h, "shutting down", &mut report).await;
            }
            let _ = self.members.delete(&self.config.member).await;
        });
        result.map(|()| report)
    }

    /// Parts held, by member (from the leases' values).
    async fn holdings(&self) -> Result<BTreeMap<String, usize>, Error> {
        let mut by = BTreeMap::new();
        for k in self.keys("leases").await? {
            if let Ok(Some(v)) = self.leases.get(&k).await {
                *by.entry(String::from_utf8_lossy(&v).into_owned())
                    .or_default() += 1;
            }
        }
        Ok(by)
    }

    /// Renews every lease; a part whose renewal fails is cancelled.
    async fn renew(&self, held: &mut BTreeMap<u32, Held>, report: &mut GroupReport) {
        let me = Bytes::from(self.config.member.clone());
        let mut lost = Vec::new();
        // All at once: one round trip, not one a part.
        let renewals = futures_util::future::join_all(held.iter().map(|(&p, h)| {
            let me = me.clone();
            async move {
                (
                    p,
                    self.leases.update(Self::part_name(p), me, h.revision).await,
                )
            }
        }))
        .await;
        for (p, r) in renewals {
            match r {
                Ok(r) => held.get_mut(&p).expect("held").revision = r,
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    // A renewal whose reply was lost may have landed: the
                    // lease is then still this member's, at a later
                    // revision.
                    match self.leases.entry(Self::part_name(p)).await {
                        Ok(Some(e)) if e.operation == kv::Operation::Put && e.value == me => {
                            held.get_mut(&p).expect("held").revision = e.revision
                        }
                        Ok(_) => lost.push(p),
                        Err(_) => {}
                    }
                }
                // The server is unreachable: keep the part; if the lease
                // expires meanwhile, the next renewal finds out.
                Err(_) => {}
            }
        }
        for p in lost {
            let h = held.remove(&p).expect("present");
            h.cancelled.store(true, Ordering::Release);
            eprintln!(
                "tandem-group: {}: lost the lease on p{p} (not renewed in time); its job is cancelled",
                self.config.member
            );
            report
                .given_up
                .push((Self::part_name(p), "lease lost".into()));
            // The job fails its next checkpoint (fenced) if it does not
            // see the flag first; its thread is left to end on its own.
        }
    }

    /// Collects parts whose run ended: done, or failed and given back.
    async fn reap(
        &self,
        held: &mut BTreeMap<u32, Held>,
        report: &mut GroupReport,
        failures: &mut BTreeMap<u32, u32>,
    ) -> Result<(), Error> {
        let ended: Vec<u32> = held
            .iter()
            .filter(|(_, h)| h.thread.as_ref().is_some_and(|t| t.is_finished()))
            .map(|(&p, _)| p)
            .collect();
        for p in ended {
            let mut h = held.remove(&p).expect("present");
            let name = Self::part_name(p);
            let r = h
                .thread
                .take()
                .expect("checked")
                .join()
                .unwrap_or_else(|_| Err("the part's thread panicked".into()));
            match r {
                Ok(()) => {
                    // Retried through a leader election; a part whose end
                    // cannot be recorded is run again by someone (its
                    // pointer says it finished: only its staged output is
                    // republished, under the same ids).
                    let t = Instant::now();
                    while let Err(e) = self
                        .done
                        .put(&name, Bytes::from(self.config.member.clone()))
                        .await
                    {
                        if t.elapsed() > self.config.outage {
                            return Err(nats_err(format!("marking {name} done"))(e));
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    let _ = self.leases.delete(&name).await;
                    report.completed.push(name);
                }
                Err(e) => {
                    eprintln!("tandem-group: {}: {name} failed: {e}", self.config.member);
                    let n = failures.entry(p).or_default();
                    *n += 1;
                    let _ = self.leases.delete(&name).await;
                    report.given_up.push((name.clone(), e.clone()));
                    if *n >= PART_FAILURES {
                        return Err(Error::Invalid(format!(
                            "{name} failed {n} times here; the last: {e}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Cancels a part's job, waits for it, and deletes the lease.
    async fn release(&self, p: u32, mut h: Held, why: &str, report: &mut GroupReport) {
        h.cancelled.store(true, Ordering::Release);
        if let Some(t) = h.thread.take() {
            // The part's thread ends promptly once cancelled; one that
            // does not (a call that hangs) is left behind, said so.
            let joined =
                tokio::time::timeout(RELEASE_WAIT, tokio::task::spawn_blocking(move || t.join()))
                    .await;
            if joined.is_err() {
                eprintln!(
                    "tandem-group: {}: p{p}'s job did not end within {RELEASE_WAIT:?} of being cancelled; going on without it",
                    self.config.member
                );
            }
        }
        let name = Self::part_name(p);
        let _ = self.leases.delete(&name).await;
        report.given_up.push((name, why.to_string()));
    }
}

/// Records the group's identity (the first member), or checks this
/// member's against it.
fn check_identity(client: &Client, jobs: &kv::Store, config: &GroupConfig) -> Result<(), Error> {
    let mine = serde_json::to_vec(&config.identity).expect("serializes");
    let recorded = client.block(async {
        let t = Instant::now();
        loop {
            if jobs
                .create("identity", Bytes::from(mine.clone()))
                .await
                .is_ok()
            {
                return Ok(None);
            }
            let got = jobs
                .get("identity")
                .await
                .map_err(nats_err(format!("group {}'s identity", config.name)));
            match got {
                Ok(Some(v)) => return Ok(Some(v)),
                // Created meanwhile, or not answering yet: again.
                Ok(None) if t.elapsed() < config.outage => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(e) if crate::is_outage(&e) && t.elapsed() < config.outage => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Ok(None) => {
                    return Err(Error::Invalid(format!(
                        "group {}: its identity could not be recorded",
                        config.name
                    )))
                }
                Err(e) => return Err(e),
            }
        }
    })?;
    let Some(theirs) = recorded else {
        return Ok(());
    };
    let theirs: BTreeMap<String, String> = serde_json::from_slice(&theirs).map_err(|e| {
        Error::Invalid(format!(
            "{}-job/identity is not a group identity: {e}",
            config.name
        ))
    })?;
    if theirs == config.identity {
        return Ok(());
    }
    let keys: std::collections::BTreeSet<&String> =
        theirs.keys().chain(config.identity.keys()).collect();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| theirs.get(*k) != config.identity.get(*k))
        .map(|k| {
            format!(
                "{k}: the group's {}, this member's {}",
                theirs.get(k).map_or("(none)", String::as_str),
                config.identity.get(k).map_or("(none)", String::as_str)
            )
        })
        .collect();
    Err(Error::Invalid(format!(
        "group {} runs another job than this member was started for ({}): every member of a group must run the same job; give the same flags, or another --group",
        config.name,
        differ.join("; ")
    )))
}

/// Waits for `handle`'s job, cancelling it when `cancelled` is set.
pub fn run_cancellable(
    handle: tandem::JobHandle,
    cancelled: &AtomicBool,
) -> Result<tandem::JobReport, tandem::JobError> {
    while !handle.is_finished() {
        if cancelled.load(Ordering::Acquire) {
            handle.cancel();
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    handle.join()
}
