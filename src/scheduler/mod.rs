//! The scheduler: jobs the agent created with `schedule.add`, fired as turns in their session.
//!
//! * [`job`] — a job, its trigger and the trigger math;
//! * [`store`] — the [`JobStore`] trait (atomic read-modify-write, a version to notice changes)
//!   and its file implementation, `BUB_HOME/jobs.json` (a job that cannot run is set aside on
//!   its own in `jobs.rejected.json`);
//! * [`plan`] — pure decisions: catch-up, claiming due runs, finishing them;
//! * [`clock`] — the [`Clock`] the scheduler reads the time from (the wall clock, or tokio's
//!   for tests in virtual time);
//! * [`JobRunner`] — what firing a job does, implemented above the scheduler
//!   (`daemon::jobs`: a turn, delivery, a tape record).
//!
//! Invariants: **one scheduler owner per `BUB_HOME`** — many processes (`bub message`, `bub idle`,
//! `bub run`, `bub chat`) may add, list and remove jobs, but only the process holding the
//! exclusive lock on `BUB_HOME/scheduler.lock` fires them; the others wait in standby and take
//! over when the owner exits. The owner notices jobs added by other processes within
//! [`POLL`]. A due time fires at most once (see [`plan`]).

pub(crate) mod clock;
pub mod job;
pub mod plan;
pub mod store;

use std::fs::File;

use crate::db::{Database, SessionLock};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use clock::{Clock, SystemClock, TokioClock};
pub(crate) use job::Job;
use job::RunStatus;
pub use store::{JobStore, Version};

/// How often the owner looks for changes made by other processes (the store's version: a `stat`
/// of `jobs.json`).
pub(crate) const POLL: Duration = Duration::from_secs(1);
/// How often a standby process tries to become the owner.
const OWNER_RETRY: Duration = Duration::from_secs(5);
/// How long running jobs may finish after shutdown is requested.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);
/// Ended runs waiting to be recorded; a run that ends while this many wait holds until the
/// loop records them.
const ENDED_QUEUE: usize = 64;

/// A run that ended: job id and how.
type Ended = (String, RunStatus);

/// What the loop knows of the store: the version it read and the earliest due run in it
/// (`None`: unknown, read it again).
type Known = Option<(Version, Option<DateTime<Utc>>)>;

/// Wakes this process's scheduler at once after a job was added or removed here.
pub(crate) static CHANGED: Notify = Notify::const_new();

/// Executes one claimed run. Returns the run's status (`ok`, or the error).
#[async_trait]
pub trait JobRunner: Send + Sync + 'static {
    async fn run(&self, job: Job, due: DateTime<Utc>) -> Result<(), String>;
}

/// The scheduler of one process.
pub struct Scheduler {
    store: Arc<dyn JobStore>,
    clock: Arc<dyn Clock>,
    owner_lock: OwnerLock,
    catch_up: bool,
    runner: Arc<dyn JobRunner>,
}

/// What makes a process the one scheduler: a file lock in `BUB_HOME`, or the database's lock
/// among replicas.
enum OwnerLock {
    File(PathBuf),
    Database(Arc<Database>),
}

/// The owner lock, held.
enum Owner {
    File(#[allow(dead_code)] File),
    Database(SessionLock),
}

impl Owner {
    /// The lock was lost (the database connection holding it closed).
    fn is_lost(&self) -> bool {
        match self {
            Owner::File(_) => false,
            Owner::Database(lock) => lock.is_lost(),
        }
    }
}

impl Scheduler {
    /// A scheduler over the store of `home` (`BUB_HOME`, [`store::open`]) firing jobs through
    /// `runner`, on the wall clock.
    pub fn new(home: &std::path::Path, catch_up: bool, runner: Arc<dyn JobRunner>) -> Self {
        Self {
            store: store::open(home, None),
            clock: Arc::new(SystemClock),
            owner_lock: OwnerLock::File(home.join("scheduler.lock")),
            catch_up,
            runner,
        }
    }

    /// The same scheduler over the jobs of `database` (`BUB_DATABASE_URL`), owned by one
    /// process among every replica on it (an advisory lock: when the owner dies, another
    /// takes over within [`OWNER_RETRY`]).
    pub fn on_database(mut self, database: Arc<Database>) -> Self {
        self.store = store::in_database(&database);
        self.owner_lock = OwnerLock::Database(database);
        self
    }

    /// The same scheduler reading the time from `clock` (due jobs, catch-up, lateness). Its
    /// waits are tokio timers, so a clock that follows tokio's ([`TokioClock`]) runs the whole
    /// loop in tokio's time, paused or not.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Runs until `shutdown`: waits to become the owner, then fires due jobs. Jobs still running
    /// at shutdown get a few seconds to finish.
    ///
    /// File work runs on the blocking pool; finished runs are reported back to this loop and
    /// recorded in batches, so a burst of runs costs a few writes of `jobs.json`, not one each.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        while let Some(owner) = self.become_owner(&shutdown).await? {
            self.serve(&owner, &shutdown).await?;
            if shutdown.is_cancelled() {
                break;
            }
            tracing::warn!(
                "scheduler.owner.lost: the database connection holding the lock closed; standing by"
            );
        }
        Ok(())
    }

    /// Fires due jobs while this process is the owner: until `shutdown`, or until `owner` is
    /// lost.
    async fn serve(&self, owner: &Owner, shutdown: &CancellationToken) -> anyhow::Result<()> {
        tracing::info!(store = %self.store.location(), "scheduler.owner");
        let (now, catch_up) = (self.clock.now(), self.catch_up);
        let notes = self
            .store
            .change(move |jobs| plan::recover(jobs, now, catch_up))
            .await?;
        for note in notes {
            tracing::warn!("scheduler.recover: {note}");
        }
        let (done_tx, mut done_rx) = mpsc::channel::<Ended>(ENDED_QUEUE);
        let running = TaskTracker::new();
        let mut known: Known = None;
        let mut ended = Vec::new();
        while !owner.is_lost() {
            while let Ok(done) = done_rx.try_recv() {
                ended.push(done);
            }
            known = self.refresh(known, std::mem::take(&mut ended)).await;
            let next = known.as_ref().and_then(|(_, next)| *next);
            let now = self.clock.now();
            if next.is_some_and(|due| due <= now) {
                let (claims, after) = self.claim(now).await;
                known = after;
                for claim in claims {
                    running.spawn(fire(
                        self.runner.clone(),
                        self.clock.clone(),
                        claim,
                        done_tx.clone(),
                    ));
                }
                continue;
            }
            let wait = next
                .and_then(|due| (due - now).to_std().ok())
                .map_or(POLL, |until_due| until_due.min(POLL));
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                () = CHANGED.notified() => known = None,
                Some(done) = done_rx.recv() => ended.push(done),
            }
        }
        running.close();
        // The runs' ends are read while they finish: none waits on a full queue.
        let mut batch = ended;
        let finished = async {
            let all_done = running.wait();
            tokio::pin!(all_done);
            loop {
                tokio::select! {
                    () = &mut all_done => break,
                    Some(done) = done_rx.recv() => batch.push(done),
                }
            }
        };
        if tokio::time::timeout(SHUTDOWN_GRACE, finished)
            .await
            .is_err()
        {
            tracing::warn!("scheduler.shutdown: scheduled runs still running were stopped");
        }
        while let Ok(done) = done_rx.try_recv() {
            batch.push(done);
        }
        if !batch.is_empty() {
            self.store
                .change(move |jobs| plan::finish(jobs, &batch))
                .await?;
        }
        Ok(())
    }

    /// Records ended runs, or re-reads the store when another process changed it.
    async fn refresh(&self, known: Known, ended: Vec<Ended>) -> Known {
        // Unknown, or another version now (or none can be told): read again.
        let changed = match &known {
            None => true,
            Some((read, _)) => self.store.version().await.ok().as_ref() != Some(read),
        };
        let result = if !ended.is_empty() {
            self.store
                .change_versioned(move |jobs| {
                    plan::finish(jobs, &ended);
                    plan::next_due(jobs)
                })
                .await
                .map(|(next, version)| (version, next))
        } else if changed {
            self.store
                .load()
                .await
                .map(|(jobs, version)| (version, plan::next_due(&jobs)))
        } else {
            return known;
        };
        result
            .inspect_err(|e| tracing::error!(error = %format!("{e:#}"), "scheduler.store.error"))
            .ok()
    }

    /// Claims the runs due at `now` (one write for all of them).
    async fn claim(&self, now: DateTime<Utc>) -> (Vec<plan::Claim>, Known) {
        let claimed = self
            .store
            .change_versioned(move |jobs| (plan::claim_due(jobs, now), plan::next_due(jobs)))
            .await;
        match claimed {
            Ok(((claims, next), version)) => (claims, Some((version, next))),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "scheduler.claim.error");
                // Not a tight retry loop while the disk is full, say.
                tokio::time::sleep(POLL).await;
                (Vec::new(), None)
            }
        }
    }

    /// Takes the owner lock, retrying until it is free or `shutdown`; `None` on shutdown.
    async fn become_owner(&self, shutdown: &CancellationToken) -> anyhow::Result<Option<Owner>> {
        let mut announced = false;
        loop {
            if let Some(owner) = self.owner_lock.try_take().await? {
                return Ok(Some(owner));
            }
            if !announced {
                tracing::info!("scheduler.standby: another process runs the jobs");
                announced = true;
            }
            tokio::select! {
                () = shutdown.cancelled() => return Ok(None),
                () = tokio::time::sleep(OWNER_RETRY) => {}
            }
        }
    }
}

impl OwnerLock {
    /// Takes the lock if it is free. A database that cannot be reached is only logged (the
    /// next try may reach it); a lock file that cannot be opened is an error.
    async fn try_take(&self) -> anyhow::Result<Option<Owner>> {
        match self {
            OwnerLock::File(path) => {
                if let Some(dir) = path.parent() {
                    crate::storage::create_private_dir(dir)?;
                }
                let file = crate::storage::private_file()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(path)?;
                match file.try_lock() {
                    Ok(()) => Ok(Some(Owner::File(file))),
                    Err(std::fs::TryLockError::WouldBlock) => Ok(None),
                    Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
                }
            }
            OwnerLock::Database(db) => match db.try_lock(crate::db::SCHEDULER_LOCK).await {
                Ok(lock) => Ok(lock.map(Owner::Database)),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "scheduler.owner.error: retrying");
                    Ok(None)
                }
            },
        }
    }
}

/// One claimed run: execute it and report its status to the owner loop. `late_ms` in the log
/// is measured on `clock`.
async fn fire(
    runner: Arc<dyn JobRunner>,
    clock: Arc<dyn Clock>,
    claim: plan::Claim,
    done: mpsc::Sender<Ended>,
) {
    let id = claim.job.id.clone();
    let late_ms = (clock.now() - claim.due).num_milliseconds();
    tracing::info!(job = %id, session = %claim.job.session, late_ms, "scheduler.fire");
    let status = match runner.run(claim.job, claim.due).await {
        Ok(()) => RunStatus::Ok,
        Err(e) => RunStatus::Error(e),
    };
    tracing::info!(job = %id, status = %status, "scheduler.done");
    let _ = done.send((id, status)).await;
}
