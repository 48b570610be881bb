//! The schema: versioned migrations compiled into the binary, applied in order at start.
//!
//! `bub_migrations` records each version applied. [`migrate`] runs in one transaction under an
//! advisory lock, so replicas starting together apply each migration once and a failed one
//! leaves nothing half done; running it again applies nothing. A database whose schema is newer
//! than this binary knows is refused ([`NewerSchema`]): an older replica must not write into a
//! layout it does not understand.

use deadpool_postgres::GenericClient;

use super::Database;

/// The migrations, in order: version, name, SQL. A released migration is never edited; a
/// change is a new one.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "tapes", include_str!("migrations/0001_tapes.sql")),
    (2, "jobs", include_str!("migrations/0002_jobs.sql")),
    (3, "replicas", include_str!("migrations/0003_replicas.sql")),
    (4, "inbox", include_str!("migrations/0004_inbox.sql")),
    (
        5,
        "documents",
        include_str!("migrations/0005_documents.sql"),
    ),
    (6, "usage", include_str!("migrations/0006_usage.sql")),
    (
        7,
        "tape events",
        include_str!("migrations/0007_tape_events.sql"),
    ),
];

/// The advisory lock key under which migrations run ("bub" in ASCII, then 1).
const LOCK: i64 = 0x0062_7562_0000_0001;

/// The database's schema is newer than this binary's.
#[derive(Debug, thiserror::Error)]
#[error(
    "the database's schema is at version {found}, newer than this bub knows (up to {known}): \
     upgrade bub (every replica runs the same version)"
)]
pub struct NewerSchema {
    pub found: i32,
    pub known: i32,
}

/// What `bub db status` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaStatus {
    /// The versions applied, with their names and when.
    pub applied: Vec<(i32, String, String)>,
    /// The versions this binary would apply.
    pub pending: Vec<(i32, &'static str)>,
    /// The newest version this binary knows.
    pub known: i32,
}

impl SchemaStatus {
    /// The version the database is at (0: none applied).
    pub fn version(&self) -> i32 {
        self.applied.iter().map(|a| a.0).max().unwrap_or(0)
    }
}

/// The newest version this binary knows.
pub fn known() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS bub_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

impl Database {
    /// Applies the migrations the database lacks; returns their versions (empty: it was up to
    /// date). A [`NewerSchema`] error when the database is ahead of this binary.
    pub async fn migrate(&self) -> anyhow::Result<Vec<i32>> {
        let mut client = super::client(&self.pool).await?;
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
            .await?;
        tx.batch_execute(CREATE_TABLE).await?;
        let current = version(&tx).await?;
        if current > known() {
            return Err(NewerSchema {
                found: current,
                known: known(),
            }
            .into());
        }
        let mut applied = Vec::new();
        for (version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
            tx.batch_execute(sql)
                .await
                .map_err(|e| anyhow::anyhow!("migration {version} ({name}) failed: {e}"))?;
            tx.execute(
                "INSERT INTO bub_migrations (version, name) VALUES ($1, $2)",
                &[version, name],
            )
            .await?;
            applied.push(*version);
        }
        tx.commit().await?;
        Ok(applied)
    }

    /// What is applied and what is pending, without changing anything.
    pub(crate) async fn schema_status(&self) -> anyhow::Result<SchemaStatus> {
        let client = super::client(&self.pool).await?;
        let exists: bool = client
            .query_one("SELECT to_regclass('bub_migrations') IS NOT NULL", &[])
            .await?
            .get(0);
        let mut applied = Vec::new();
        if exists {
            let rows = client
                .query(
                    "SELECT version, name, to_char(applied_at AT TIME ZONE 'UTC', \
                         'YYYY-MM-DD HH24:MI:SS') FROM bub_migrations ORDER BY version",
                    &[],
                )
                .await?;
            applied = rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect();
        }
        let current = applied.iter().map(|a: &(i32, String, String)| a.0).max();
        let pending = MIGRATIONS
            .iter()
            .filter(|m| Some(m.0) > current)
            .map(|m| (m.0, m.1))
            .collect();
        Ok(SchemaStatus {
            applied,
            pending,
            known: known(),
        })
    }
}

async fn version(client: &impl GenericClient) -> anyhow::Result<i32> {
    let row = client
        .query_one("SELECT coalesce(max(version), 0) FROM bub_migrations", &[])
        .await?;
    Ok(row.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::cluster;

    #[tokio::test]
    async fn migrations_apply_once_and_a_newer_schema_is_refused() {
        let url = cluster::database();
        let db = Database::shared(&url).unwrap();
        let before = db.schema_status().await.unwrap();
        assert_eq!(before.version(), 0);
        assert_eq!(before.pending.len(), MIGRATIONS.len());

        // Two replicas starting together: each migration is applied once.
        let (a, b) = tokio::join!(db.migrate(), db.migrate());
        let (a, b) = (a.unwrap(), b.unwrap());
        let all: Vec<i32> = MIGRATIONS.iter().map(|m| m.0).collect();
        assert!(
            (a == all && b.is_empty()) || (b == all && a.is_empty()),
            "{a:?} {b:?}"
        );
        assert!(db.migrate().await.unwrap().is_empty(), "idempotent");
        let after = db.schema_status().await.unwrap();
        assert_eq!(after.version(), known());
        assert!(after.pending.is_empty());

        let client = crate::db::client(&db.pool()).await.unwrap();
        let sql = "INSERT INTO bub_migrations (version, name) VALUES ($1, 'from the future')";
        client.execute(sql, &[&(known() + 1)]).await.unwrap();
        let err = db.migrate().await.unwrap_err();
        let newer = err
            .downcast_ref::<NewerSchema>()
            .expect("a NewerSchema error");
        assert_eq!((newer.found, newer.known), (known() + 1, known()));
    }

    /// A database at version 6 with events on its tapes: migration 7 gives each `event` row
    /// the name its payload starts with, and none to a payload written otherwise.
    #[tokio::test]
    async fn the_event_column_is_filled_for_the_entries_written_before() {
        let db = Database::shared(&cluster::database()).unwrap();
        let client = crate::db::client(&db.pool()).await.unwrap();
        let names = async {
            client.batch_execute(CREATE_TABLE).await?;
            for (version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 <= 6) {
                client.batch_execute(sql).await?;
                let add = "INSERT INTO bub_migrations (version, name) VALUES ($1, $2)";
                client.execute(add, &[version, name]).await?;
            }
            client
                .batch_execute(
                    r#"INSERT INTO bub_tapes (workspace, name) VALUES ('w', 'bub:1');
                        INSERT INTO bub_tape_entries (tape, id, kind, date, payload, meta)
                        SELECT id, n, kind, 'd', payload, '{}' FROM bub_tapes, (VALUES
                            (1, 'event', '{"name":"run","data":{"usage":{"total_tokens":5}}}'),
                            (2, 'event', '{"name":"messages.left_out","data":{}}'),
                            (3, 'event', '{"data":{},"name":"run"}'),
                            (4, 'message', '{"name":"run"}')) AS e (n, kind, payload);"#,
                )
                .await?;
            anyhow::Ok(())
        }
        .await;
        names.unwrap();
        assert_eq!(db.migrate().await.unwrap(), [7]);
        let sql = "SELECT id, event FROM bub_tape_entries ORDER BY id";
        let rows = client.query(sql, &[]).await.unwrap();
        let events: Vec<(i64, Option<String>)> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let named = |n: &str| Some(n.to_owned());
        assert_eq!(
            events,
            [
                (1, named("run")),
                (2, named("messages.left_out")),
                (3, None),
                (4, None)
            ]
        );
    }
}
