//! `bub db`: the PostgreSQL database of `BUB_DATABASE_URL` — apply the schema's migrations,
//! show where the schema stands.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;

use super::admin::UsageError;
use crate::config::{ConfigError, Settings};
use crate::db::{Database, NewerSchema};

#[derive(Subcommand, Debug)]
pub enum DbAction {
    /// Apply the migrations the database lacks (every command that uses the database also
    /// does this at start).
    Migrate,
    /// The schema's version, the migrations applied (and when) and those pending.
    Status,
}

/// Runs `action` on the database of `settings`.
pub fn run(settings: &Settings, action: &DbAction) -> anyhow::Result<ExitCode> {
    let db = open(settings)?.ok_or_else(|| {
        UsageError(
            "BUB_DATABASE_URL is not set: without it Bub keeps its state in files under \
             BUB_HOME, and there is no database to manage"
                .into(),
        )
    })?;
    match action {
        DbAction::Migrate => {
            let applied = migrate(&db)?;
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
        DbAction::Status => {
            let status = db.schema_status()?;
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

/// The database of `settings`, when `BUB_DATABASE_URL` names one (no connection yet).
pub fn open(settings: &Settings) -> anyhow::Result<Option<Arc<Database>>> {
    settings
        .database_url
        .as_ref()
        .map(|url| Database::shared(url.expose()))
        .transpose()
}

/// Applies pending migrations; a schema newer than this binary's is a configuration error
/// (exit 2), naming the variable.
pub fn migrate(db: &Database) -> anyhow::Result<Vec<i32>> {
    db.migrate().map_err(|e| match e.downcast::<NewerSchema>() {
        Ok(newer) => ConfigError::new("BUB_DATABASE_URL", newer.to_string()).into(),
        Err(e) => e.context(format!("BUB_DATABASE_URL: database {}", db.label())),
    })
}
