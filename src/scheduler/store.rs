//! Where the jobs are kept: the async [`JobStore`] trait every part of the program uses (the
//! scheduler's loop, the `schedule.*` tools, `bub jobs`, `bub status`, the chat's `,status`),
//! and [`open`], the one place a store is chosen.
//!
//! * [`file`](mod@file) — the default: `BUB_HOME/jobs.json` (locked read-modify-write, atomic
//!   replace; a job that cannot run is set aside on its own in `jobs.rejected.json`);
//! * `pg` — with `BUB_DATABASE_URL`: a row per job, every change a transaction holding the
//!   change counter's row, so replicas share one list.
//!
//! A store is a list of [`Job`]s that many processes share. What it promises (see each method):
//! an update is an atomic read-modify-write, so concurrent writers never lose each other's
//! changes; a [`Version`] names a state of the jobs, so a reader can tell cheaply whether anyone
//! changed them since it last read; a job that cannot run is set aside ([`Rejected`]) rather than
//! costing the others. Everything above the store holds an `Arc<dyn JobStore>` and nothing else
//! of it, so another store (a database shared by several machines) is a new implementation and
//! a change to [`open`], not to its users.

pub(crate) mod file;
#[cfg(feature = "postgres")]
mod pg;
#[cfg(feature = "postgres")]
pub use pg::import;
#[cfg(test)]
mod suite_tests;

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::job::Job;
use crate::db::Database;
use crate::storage::Stamp;
pub(crate) use file::FileJobStore;

/// The store of `home` (`BUB_HOME`): the jobs file there, or the jobs in `database` when there
/// is one (`BUB_DATABASE_URL`). Every process that reads or changes jobs opens its store here
/// (cheap; holds no open file, makes no connection).
pub fn open(home: &Path, database: Option<&Arc<Database>>) -> Arc<dyn JobStore> {
    match database {
        Some(db) => in_database(db),
        None => Arc::new(FileJobStore::new(home)),
    }
}

/// The jobs kept in `database`.
pub(crate) fn in_database(database: &Arc<Database>) -> Arc<dyn JobStore> {
    #[cfg(not(feature = "postgres"))]
    match **database {}
    #[cfg(feature = "postgres")]
    Arc::new(pg::PgJobStore::new(database.clone()))
}

/// A change of the jobs ([`JobStore::update`]).
pub(crate) type Change = Box<dyn FnOnce(&mut Vec<Job>) + Send>;

/// The shared list of jobs. Safe to use from many tasks and processes at once; the file
/// store's work runs on the blocking pool.
#[async_trait::async_trait]
pub trait JobStore: Send + Sync {
    /// The jobs that can run, in stored order, and the version they were read at. The list is
    /// one consistent state: an update running at the same time is seen whole or not at all.
    /// Reading may set aside jobs that cannot run ([`JobStore::rejected`]); they are not in
    /// the list.
    async fn load(&self) -> anyhow::Result<(Vec<Job>, Version)>;

    /// Reads the jobs, applies `change` to them and stores the result, atomically: no other
    /// update is applied between the read and the store (an exclusive lock for the file; a
    /// transaction in a database), so concurrent updates, from any process, never lose each
    /// other's changes. `change` is called exactly once when the jobs could be read, and not at
    /// all when that failed. When `change` leaves the jobs as they were, nothing is written.
    /// Returns the version the update left. On an error the change is not stored: the jobs are
    /// as they were before.
    async fn update(&self, change: Change) -> anyhow::Result<Version>;

    /// The version of the jobs as stored now: equal to the version an earlier
    /// [`load`](JobStore::load) or [`update`](JobStore::update) returned when nobody changed the
    /// jobs since, different when anyone did. Cheap (the file store: one `stat`): the
    /// scheduler's loop calls it about once a second to notice changes made by other processes.
    async fn version(&self) -> anyhow::Result<Version>;

    /// The jobs set aside so far because they cannot run, oldest first, each with its reason.
    async fn rejected(&self) -> anyhow::Result<Vec<Rejected>>;

    /// Where the jobs are kept, for messages (the file store: the path of `jobs.json`).
    fn location(&self) -> String;

    /// Where jobs that cannot run are set aside, for messages (the file store: the path of
    /// `jobs.rejected.json`).
    fn rejected_location(&self) -> String;
}

/// Conveniences over the object-safe methods, for every store.
impl dyn JobStore + '_ {
    /// All jobs that can run, sorted by next run (jobs that will not run again last, ties by
    /// creation time).
    pub async fn list(&self) -> anyhow::Result<Vec<Job>> {
        let mut jobs = self.load().await?.0;
        jobs.sort_by_key(|j| (j.next_run.is_none(), j.next_run, j.created));
        Ok(jobs)
    }

    /// Removes job `id` (of any session), as `bub jobs remove` does; whether there was one.
    pub async fn remove(&self, id: &str) -> anyhow::Result<bool> {
        let id = id.to_owned();
        self.change(move |jobs| {
            let before = jobs.len();
            jobs.retain(|j| j.id != id);
            jobs.len() < before
        })
        .await
    }

    /// [`JobStore::update`] with a change that returns a value: returns that value.
    pub async fn change<R: Send + 'static>(
        &self,
        change: impl FnOnce(&mut Vec<Job>) -> R + Send + 'static,
    ) -> anyhow::Result<R> {
        Ok(self.change_versioned(change).await?.0)
    }

    /// [`JobStore::update`] with a change that returns a value: returns that value and the
    /// version the update left.
    pub(crate) async fn change_versioned<R: Send + 'static>(
        &self,
        change: impl FnOnce(&mut Vec<Job>) -> R + Send + 'static,
    ) -> anyhow::Result<(R, Version)> {
        let result = Arc::new(std::sync::Mutex::new(None));
        let slot = result.clone();
        let version = self
            .update(Box::new(move |jobs| {
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(change(jobs));
            }))
            .await?;
        let result = result.lock().unwrap_or_else(|e| e.into_inner()).take();
        let result = result
            .with_context(|| format!("{}: the store did not apply the change", self.location()))?;
        Ok((result, version))
    }
}

/// One state of the stored jobs, as the store tells it: two versions are equal when no change
/// was stored between the reads that returned them. Only compared, never looked into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(Repr);

/// What a [`Version`] is made of, by kind of store.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Repr {
    /// The file store: the identity of `jobs.json` (modification time, size, inode; `None` when
    /// there is no file). Every write replaces the file, so it changes with every write.
    File(Option<Stamp>),
    /// A store that counts the changes it stores (a database's change counter).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Counter(u64),
}

impl Version {
    /// The version of a store that counts its changes: `changes` stored so far. The count must
    /// grow with every stored change (by any process) and never go back.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn counter(changes: u64) -> Self {
        Self(Repr::Counter(changes))
    }

    /// The version of the file store whose file has identity `stamp`.
    fn file(stamp: Option<Stamp>) -> Self {
        Self(Repr::File(stamp))
    }
}

/// A job taken out of the store because it cannot run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejected {
    /// The job exactly as it was stored.
    pub job: serde_json::Value,
    /// Why it cannot run (`trigger.at: "tomorrow" is not an RFC 3339 time …`).
    pub reason: String,
    /// When it was set aside.
    pub rejected_at: DateTime<Utc>,
}

impl Rejected {
    /// The job's id, when it has a non-empty string one.
    pub fn id(&self) -> Option<&str> {
        self.job
            .get("id")?
            .as_str()
            .filter(|id| !id.trim().is_empty())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::scheduler::job::Trigger;

    /// A store in memory: the trait alone is enough to build one.
    #[derive(Default)]
    struct Memory {
        /// The jobs and the number of changes stored.
        state: Mutex<(Vec<Job>, u64)>,
    }

    #[async_trait::async_trait]
    impl JobStore for Memory {
        async fn load(&self) -> anyhow::Result<(Vec<Job>, Version)> {
            let state = self.state.lock().unwrap();
            Ok((state.0.clone(), Version::counter(state.1)))
        }

        async fn update(&self, change: Change) -> anyhow::Result<Version> {
            let mut state = self.state.lock().unwrap();
            let before = state.0.clone();
            change(&mut state.0);
            if state.0 != before {
                state.1 += 1;
            }
            Ok(Version::counter(state.1))
        }

        async fn version(&self) -> anyhow::Result<Version> {
            Ok(Version::counter(self.state.lock().unwrap().1))
        }

        async fn rejected(&self) -> anyhow::Result<Vec<Rejected>> {
            Ok(Vec::new())
        }

        fn location(&self) -> String {
            "memory".into()
        }

        fn rejected_location(&self) -> String {
            "memory".into()
        }
    }

    /// A one-shot job due at `at`.
    pub(super) fn job(id: &str, at: DateTime<Utc>) -> Job {
        Job {
            id: id.into(),
            session: "cli".into(),
            message: "m".into(),
            workspace: "/ws".into(),
            trigger: Trigger::Once { at },
            created: at,
            next_run: Some(at),
            last_run: None,
            last_status: None,
            creator: None,
        }
    }

    #[tokio::test]
    async fn the_conveniences_work_over_any_store() {
        let store: Arc<dyn JobStore> = Arc::new(Memory::default());
        let empty = store.version().await.unwrap();
        let now = Utc::now();
        let added = store
            .change(move |jobs| {
                jobs.push(job("later", now + chrono::Duration::hours(1)));
                jobs.push(job("sooner", now));
                jobs.len()
            })
            .await
            .unwrap();
        assert_eq!(added, 2, "the change's own result");
        let ((), after) = store.change_versioned(|_| ()).await.unwrap();
        assert_ne!(after, empty, "a stored change is a new version");
        assert_eq!(
            store.version().await.unwrap(),
            after,
            "an update that changes nothing"
        );
        let ids = |jobs: Vec<Job>| jobs.into_iter().map(|j| j.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.load().await.unwrap().0),
            ["later", "sooner"],
            "stored order"
        );
        assert_eq!(
            ids(store.list().await.unwrap()),
            ["sooner", "later"],
            "by next run"
        );
    }
}
