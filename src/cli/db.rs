//! `bub db`: the PostgreSQL database of `BUB_DATABASE_URL` — apply the schema's migrations,
//! show where the schema stands.

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;

use crate::config::Settings;
use crate::db::Database;
#[cfg(feature = "postgres")]
use {super::admin::UsageError, crate::config::ConfigError, crate::db::NewerSchema};

#[derive(Subcommand, Debug)]
pub enum DbAction {
    /// Apply the migrations the database lacks (every command that keeps state also does
    /// this at start).
    Migrate,
    /// The schema's version, the migrations applied (and when) and those pending.
    Status,
    /// Copy this BUB_HOME's tapes (archives too), scheduled jobs, pairings, memory and usage
    /// into the database: what it lacks is added, what it has is kept, so running it again
    /// adds nothing.
    Import,
}

/// Runs `action` on the database of `settings`: a configuration error in a build without it.
#[cfg(not(feature = "postgres"))]
pub async fn run(_: &Settings, _: &DbAction) -> anyhow::Result<ExitCode> {
    Err(crate::config::no_postgres().into())
}

/// Runs `action` on the database of `settings`.
#[cfg(feature = "postgres")]
pub async fn run(settings: &Settings, action: &DbAction) -> anyhow::Result<ExitCode> {
    let db = settings.database()?.ok_or_else(|| {
        UsageError(
            "BUB_DATABASE_URL is not set: without it Bub keeps its state in files under \
             BUB_HOME, and there is no database to manage"
                .into(),
        )
    })?;
    match action {
        DbAction::Migrate => {
            let applied = migrate(&db).await?;
            match applied.as_slice() {
                [] => println!(
                    "{}: up to date (schema version {})",
                    db.label(),
                    crate::db::migrate::known()
                ),
                versions => println!(
                    "{}: applied {} (schema version {})",
                    db.label(),
                    versions
                        .iter()
                        .map(|v| format!("#{v}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    crate::db::migrate::known()
                ),
            }
        }
        DbAction::Import => {
            migrate(&db).await?;
            let tapes = crate::tape::import::import_home(&db, &settings.home).await?;
            let added: usize = tapes.iter().map(|t| t.added).sum();
            let entries: usize = tapes.iter().map(|t| t.entries).sum();
            let jobs = crate::scheduler::store::import(&settings.home, &db).await?;
            let documents = crate::document::import(&settings.home, &db).await?;
            let usage = crate::usage::import(&settings.home, &db).await?;
            println!(
                "{}: {} tapes ({entries} entries, {added} added), {jobs} jobs added, \
                 {documents} documents added (pairings, memory), {usage} usage rows added",
                db.label(),
                tapes.len()
            );
            println!(
                "stop `bub message` before importing: work it left in its inbox ({}) is resumed \
                 only from there",
                settings.home.join("inbox.jsonl").display()
            );
        }
        DbAction::Status => {
            let status = db.schema_status().await?;
            println!(
                "{}: schema version {} (this bub knows up to {})",
                db.label(),
                status.version(),
                status.known
            );
            for (version, name, at) in &status.applied {
                println!("  applied  #{version} {name}  {at} UTC");
            }
            for (version, name) in &status.pending {
                println!("  pending  #{version} {name}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `serve` (`bub message`, `bub idle`) as a replica of `role` on `db`, when there is one:
/// its row is kept fresh while it serves and removed when it stops.
pub async fn serving(
    db: Option<Arc<Database>>,
    role: &str,
    serve: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let replica = match &db {
        Some(db) => Some(db.join(role).await?),
        None => None,
    };
    let served = serve.await;
    if let Some(replica) = replica {
        replica.leave().await;
    }
    served
}

/// The replicas on the database of `settings` (`None` without one).
pub async fn replicas(
    settings: &Settings,
) -> anyhow::Result<Option<anyhow::Result<Vec<crate::db::ReplicaRow>>>> {
    Ok(match settings.database()? {
        Some(db) => Some(db.replicas().await),
        None => None,
    })
}

/// `bub status`'s replica lines.
pub(crate) fn describe_replicas(replicas: &anyhow::Result<Vec<crate::db::ReplicaRow>>) -> String {
    match replicas {
        Ok(rows) => {
            let mut text = format!("\nreplicas ({}):\n", rows.len());
            for row in rows {
                text.push_str(&format!("  {}\n", row.describe()));
            }
            text
        }
        Err(e) => format!("\nreplicas: unavailable ({e:#})\n"),
    }
}

/// Applies pending migrations; a schema newer than this binary's is a configuration error
/// (exit 2), naming the variable.
pub async fn migrate(db: &Database) -> anyhow::Result<Vec<i32>> {
    #[cfg(not(feature = "postgres"))]
    match *db {}
    #[cfg(feature = "postgres")]
    {
        let migrated = db.migrate().await;
        migrated.map_err(|e| match e.downcast::<NewerSchema>() {
            Ok(newer) => ConfigError::new("BUB_DATABASE_URL", newer.to_string()).into(),
            Err(e) => e.context(format!("BUB_DATABASE_URL: database {}", db.label())),
        })
    }
}
