//! [`PgJobStore`]: the jobs in PostgreSQL (`BUB_DATABASE_URL`), shared by every replica.
//!
//! A row of `bub_jobs` per job (its JSON as `jobs.json` would hold it, and its position in the
//! list); `bub_jobs_state` counts the stored changes — the [`Version`]. Every update is one
//! transaction that first locks the counter's row, so updates from any process are applied one
//! after the other and never lose each other's changes (the scheduler's claims among them: a
//! due run is claimed by one replica only). A read is one statement, so it sees one state. A
//! row that cannot run (edited by hand, say) is moved to `bub_jobs_rejected` with its reason,
//! in the transaction that found it.

use std::path::Path;
use std::sync::Arc;

use deadpool_postgres::GenericClient;

use super::{Change, JobStore, Rejected, Version};
use crate::db::{self, Database};
use crate::scheduler::job::Job;

pub(crate) struct PgJobStore {
    db: Arc<Database>,
}

/// The jobs as read: those that can run, and the rows that cannot (id, job text, reason).
struct Read {
    version: i64,
    jobs: Vec<Job>,
    bad: Vec<(String, String, String)>,
}

impl PgJobStore {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        Self { db }
    }
}

/// Reads the counter and every job in one statement (one snapshot).
async fn read(client: &impl GenericClient) -> anyhow::Result<Read> {
    let rows = client
        .query(
            "SELECT s.version, j.id, j.job FROM bub_jobs_state s \
             LEFT JOIN bub_jobs j ON true ORDER BY j.position",
            &[],
        )
        .await?;
    let mut read = Read {
        version: rows.first().map_or(0, |r| r.get(0)),
        jobs: Vec::with_capacity(rows.len()),
        bad: Vec::new(),
    };
    for row in &rows {
        let (Some(id), Some(text)) = (
            row.get::<_, Option<String>>(1),
            row.get::<_, Option<String>>(2),
        ) else {
            continue;
        };
        match Job::from_json(&text) {
            Ok(job) => read.jobs.push(job),
            Err(reason) => read.bad.push((id, text, reason)),
        }
    }
    Ok(read)
}

/// Moves `bad` rows to `bub_jobs_rejected` and counts the change (counter row locked).
async fn set_aside(
    client: &impl GenericClient,
    bad: &[(String, String, String)],
) -> anyhow::Result<()> {
    for (id, job, reason) in bad {
        tracing::error!(job = %id, reason = %reason, "scheduler.store.rejected: set aside");
        client
            .execute(
                "INSERT INTO bub_jobs_rejected (job, reason) VALUES ($1, $2)",
                &[job, reason],
            )
            .await?;
        client
            .execute("DELETE FROM bub_jobs WHERE id = $1", &[id])
            .await?;
    }
    client
        .execute("UPDATE bub_jobs_state SET version = version + 1", &[])
        .await?;
    Ok(())
}

/// Replaces the stored list with `jobs` (a later job with an id already written is dropped).
async fn write(client: &impl GenericClient, jobs: &[Job]) -> anyhow::Result<()> {
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    let positions: Vec<i64> = (0..jobs.len() as i64).collect();
    let texts = jobs
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<Vec<_>, _>>()?;
    client.execute("DELETE FROM bub_jobs", &[]).await?;
    client
        .execute(
            "INSERT INTO bub_jobs (id, position, job) \
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[]) ON CONFLICT (id) DO NOTHING",
            &[&ids, &positions, &texts],
        )
        .await?;
    client
        .execute("UPDATE bub_jobs_state SET version = version + 1", &[])
        .await?;
    Ok(())
}

fn version(n: i64) -> Version {
    Version::counter(n as u64)
}

#[async_trait::async_trait]
impl JobStore for PgJobStore {
    async fn load(&self) -> anyhow::Result<(Vec<Job>, Version)> {
        let mut read = self.read().await?;
        if !read.bad.is_empty() {
            // Rows that cannot run: an update that changes nothing sets them aside.
            self.update(Box::new(|_| {})).await?;
            read = self.read().await?;
        }
        Ok((read.jobs, version(read.version)))
    }

    async fn update(&self, change: Change) -> anyhow::Result<Version> {
        let mut client = db::client(&self.db.pool()).await?;
        let tx = client.transaction().await?;
        tx.execute("SELECT 1 FROM bub_jobs_state FOR UPDATE", &[])
            .await?;
        let Read {
            version: mut after,
            mut jobs,
            bad,
        } = read(&tx).await?;
        if !bad.is_empty() {
            set_aside(&tx, &bad).await?;
            after += 1;
        }
        // Called exactly once when the jobs could be read, not at all otherwise.
        let before = jobs.clone();
        change(&mut jobs);
        if jobs != before {
            write(&tx, &jobs).await?;
            after += 1;
        }
        tx.commit().await?;
        Ok(version(after))
    }

    async fn version(&self) -> anyhow::Result<Version> {
        let client = db::client(&self.db.pool()).await?;
        let row = client
            .query_one("SELECT version FROM bub_jobs_state", &[])
            .await?;
        let n = row.get::<_, i64>(0);
        Ok(version(n))
    }

    async fn rejected(&self) -> anyhow::Result<Vec<Rejected>> {
        let client = db::client(&self.db.pool()).await?;
        let rows = client
            .query(
                "SELECT job, reason, rejected_at FROM bub_jobs_rejected ORDER BY seq",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let text: String = r.get(0);
                Rejected {
                    job: serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
                    reason: r.get(1),
                    rejected_at: r.get(2),
                }
            })
            .collect())
    }

    fn location(&self) -> String {
        format!("PostgreSQL {} (bub_jobs)", self.db.label())
    }

    fn rejected_location(&self) -> String {
        format!("PostgreSQL {} (bub_jobs_rejected)", self.db.label())
    }
}

impl PgJobStore {
    /// The counter and the jobs, as stored now.
    async fn read(&self) -> anyhow::Result<Read> {
        read(&db::client(&self.db.pool()).await?).await
    }
}

/// `bub db import`: adds the jobs of `home`'s `jobs.json` that `database` lacks (by id); returns
/// how many. Importing again adds nothing.
pub async fn import(home: &Path, database: &Arc<Database>) -> anyhow::Result<usize> {
    let (from_file, _) = super::FileJobStore::new(home).load().await?;
    let store = super::open(home, Some(database));
    store
        .change(|jobs| {
            let before = jobs.len();
            for job in from_file {
                if !jobs.iter().any(|j| j.id == job.id) {
                    jobs.push(job);
                }
            }
            jobs.len() - before
        })
        .await
}
