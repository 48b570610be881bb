//! The scheduler: jobs the agent created with `schedule.add`, fired as turns in their session.
//!
//! * [`job`] — a job, its trigger and the trigger math;
//! * [`store`] — `BUB_HOME/jobs.json` (locked read-modify-write, atomic replace);
//! * [`plan`] — pure decisions: catch-up, claiming due runs, finishing them;
//! * [`fire`] — what a fired job does in this process: a turn, delivery, a tape record.
//!
//! Invariants: **one scheduler owner per `BUB_HOME`** — many processes (`bub message`, `bub idle`,
//! `bub run`, `bub chat`) may add, list and remove jobs, but only the process holding the
//! exclusive lock on `BUB_HOME/scheduler.lock` fires them; the others wait in standby and take
//! over when the owner exits. The owner notices jobs added by other processes within
//! [`POLL`]. A due time fires at most once (see [`plan`]).

pub mod fire;
pub mod job;
pub mod plan;
pub mod store;

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use job::{Job, Trigger};
pub use store::JobStore;

/// How often the owner looks for changes made by other processes (a `stat` of `jobs.json`).
pub const POLL: Duration = Duration::from_secs(1);
/// How often a standby process tries to become the owner.
const OWNER_RETRY: Duration = Duration::from_secs(5);
/// How long running jobs may finish after shutdown is requested.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);

/// Wakes this process's scheduler at once after a job was added or removed here.
pub static CHANGED: Notify = Notify::const_new();

/// Executes one claimed run. Returns the run's status (`ok`, or the error).
#[async_trait]
pub trait JobRunner: Send + Sync + 'static {
    async fn run(&self, job: Job, due: DateTime<Utc>) -> Result<(), String>;
}

/// The scheduler of one process.
pub struct Scheduler {
    store: JobStore,
    owner_lock: PathBuf,
    catch_up: bool,
    runner: Arc<dyn JobRunner>,
}

impl Scheduler {
    /// A scheduler over `home` (`BUB_HOME`) firing jobs through `runner`.
    pub fn new(home: &std::path::Path, catch_up: bool, runner: Arc<dyn JobRunner>) -> Self {
        Self {
            store: JobStore::new(home),
            owner_lock: home.join("scheduler.lock"),
            catch_up,
            runner,
        }
    }

    /// Runs until `shutdown`: waits to become the owner, then fires due jobs. Jobs still running
    /// at shutdown get a few seconds to finish.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let Some(_owner) = self.become_owner(&shutdown).await? else {
            return Ok(());
        };
        tracing::info!(store = %self.store.path().display(), "scheduler.owner");
        let now = Utc::now();
        let catch_up = self.catch_up;
        for note in self
            .store
            .update(|jobs| plan::recover(jobs, now, catch_up))?
        {
            tracing::warn!("scheduler.recover: {note}");
        }
        let running = TaskTracker::new();
        let mut stamp = None;
        let mut next = None;
        loop {
            let current = self.store.stamp();
            if current != stamp || stamp.is_none() {
                match self.store.load() {
                    Ok(jobs) => {
                        next = plan::next_due(&jobs);
                        stamp = current;
                    }
                    Err(e) => tracing::error!(error = %format!("{e:#}"), "scheduler.load.error"),
                }
            }
            let now = Utc::now();
            if next.is_some_and(|due| due <= now) {
                match self.store.update(|jobs| plan::claim_due(jobs, now)) {
                    Ok(claims) => {
                        for claim in claims {
                            running.spawn(self.fire(claim));
                        }
                    }
                    Err(e) => tracing::error!(error = %format!("{e:#}"), "scheduler.claim.error"),
                }
                stamp = None;
                continue;
            }
            let wait = next
                .and_then(|due| (due - now).to_std().ok())
                .map_or(POLL, |until_due| until_due.min(POLL));
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                () = CHANGED.notified() => stamp = None,
            }
        }
        running.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, running.wait())
            .await
            .is_err()
        {
            tracing::warn!("scheduler.shutdown: scheduled runs still running were stopped");
        }
        Ok(())
    }

    /// Takes the owner lock, retrying until it is free or `shutdown`; `None` on shutdown.
    async fn become_owner(&self, shutdown: &CancellationToken) -> anyhow::Result<Option<File>> {
        if let Some(dir) = self.owner_lock.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.owner_lock)?;
        let mut announced = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Some(file)),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if !announced {
                        tracing::info!(
                            "scheduler.standby: another process on this BUB_HOME runs the jobs"
                        );
                        announced = true;
                    }
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
            }
            tokio::select! {
                () = shutdown.cancelled() => return Ok(None),
                () = tokio::time::sleep(OWNER_RETRY) => {}
            }
        }
    }

    /// One claimed run: execute it, then record its status.
    fn fire(&self, claim: plan::Claim) -> impl Future<Output = ()> + Send + 'static {
        let runner = self.runner.clone();
        let store = self.store.clone();
        async move {
            let id = claim.job.id.clone();
            let late_ms = (Utc::now() - claim.due).num_milliseconds();
            tracing::info!(job = %id, session = %claim.job.session, late_ms, "scheduler.fire");
            let status = match runner.run(claim.job, claim.due).await {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("error: {e}"),
            };
            tracing::info!(job = %id, status = %status, "scheduler.done");
            if let Err(e) = store.update(|jobs| plan::finish(jobs, &id, &status)) {
                tracing::error!(job = %id, error = %format!("{e:#}"), "scheduler.finish.error");
            }
            CHANGED.notify_one();
        }
    }
}
