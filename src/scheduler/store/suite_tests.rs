//! One test suite for every [`JobStore`]: the file and PostgreSQL keep the same promises —
//! stored order, versions that change exactly when the jobs do, no change lost to a concurrent
//! one, and a due run claimed once however many schedulers claim at the same time.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::Utc;

use super::tests::job;
use super::{JobStore, open};
#[cfg(feature = "postgres")]
use crate::db::{Database, cluster};
use crate::scheduler::job::Job;
use crate::scheduler::plan;

fn ids(jobs: &[Job]) -> Vec<&str> {
    jobs.iter().map(|j| j.id.as_str()).collect()
}

async fn suite(store: &Arc<dyn JobStore>) {
    let now = Utc::now();
    let (jobs, empty) = store.load().await.unwrap();
    assert!(jobs.is_empty());
    assert_eq!(store.version().await.unwrap(), empty);
    assert!(store.rejected().await.unwrap().is_empty());

    // A change is stored whole, in order, under a new version.
    let later = now + chrono::Duration::hours(1);
    let (n, added) = store
        .change_versioned(move |jobs| {
            jobs.push(job("later", later));
            jobs.push(job("sooner", now));
            jobs.len()
        })
        .await
        .unwrap();
    assert_eq!(n, 2);
    assert_ne!(added, empty);
    assert_eq!(store.version().await.unwrap(), added);
    let (jobs, read_at) = store.load().await.unwrap();
    assert_eq!(ids(&jobs), ["later", "sooner"]);
    assert_eq!(jobs[0], job("later", later), "read back as written");
    assert_eq!(read_at, added);
    assert_eq!(ids(&store.list().await.unwrap()), ["sooner", "later"]);

    // A change that changes nothing stores nothing.
    let ((), same) = store.change_versioned(|_| ()).await.unwrap();
    assert_eq!(same, added);

    // Concurrent changes from many tasks: none lost.
    let writers: Vec<_> = (0..6)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..8 {
                    let id = format!("t{t}-{i}");
                    store
                        .change(move |jobs| jobs.push(job(&id, later)))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    assert_eq!(store.load().await.unwrap().0.len(), 2 + 6 * 8);
    store.change(|jobs| jobs.clear()).await.unwrap();
    assert!(store.list().await.unwrap().is_empty());

    // 500 runs due at once, claimed by four schedulers at the same time: each exactly once.
    store
        .change(move |jobs| jobs.extend((0..500).map(|i| job(&format!("due-{i}"), now))))
        .await
        .unwrap();
    let claimers: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                for _ in 0..3 {
                    let claims = store
                        .change(move |jobs| plan::claim_due(jobs, now))
                        .await
                        .unwrap();
                    mine.extend(claims.into_iter().map(|c| c.job.id));
                }
                mine
            })
        })
        .collect();
    let mut claimed: Vec<String> = Vec::new();
    for claimer in claimers {
        claimed.extend(claimer.await.unwrap());
    }
    assert_eq!(claimed.len(), 500, "every due run claimed");
    assert_eq!(
        claimed.iter().collect::<HashSet<_>>().len(),
        500,
        "none twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_file_store_passes_the_suite() {
    let home = tempfile::tempdir().unwrap();
    suite(&open(home.path(), None)).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_postgres_store_passes_the_suite_and_sets_aside_a_job_that_cannot_run() {
    let db = Database::shared(&cluster::database()).unwrap();
    db.migrate().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let store = open(home.path(), Some(&db));
    suite(&store).await;
    assert!(
        store.location().contains("bub_jobs"),
        "{}",
        store.location()
    );

    // A row edited by hand into something that cannot run.
    let before = store.version().await.unwrap();
    let client = crate::db::client(&db.pool()).await.unwrap();
    client
        .execute(
            "INSERT INTO bub_jobs (id, position, job) VALUES ('broken', 9999, '{\"id\": \"broken\"}')",
            &[],
        )
        .await
        .unwrap();
    let (jobs, after) = store.load().await.unwrap();
    assert_eq!(jobs.len(), 500, "the others are read");
    assert!(!ids(&jobs).contains(&"broken"));
    assert_ne!(after, before);
    let rejected = store.rejected().await.unwrap();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].id(), Some("broken"));
    assert!(!rejected[0].reason.is_empty());
    assert_eq!(store.load().await.unwrap().0.len(), 500, "set aside once");
}
