//! The usage ledger in the replicas' database (`bub_usage`): a row per call, summed by the
//! database when a budget is checked or a report asked for, so every replica's calls count
//! against the same daily budgets.

use std::path::Path;
use std::sync::Arc;

use chrono::NaiveDate;

use super::{Entry, Purpose, Totals, UsageStore};
use crate::config::Prices;
use crate::db::{Cached, Database};

/// The ledger in the replicas' database.
pub(crate) struct PgUsage {
    pub(super) db: Arc<Database>,
    pub(super) prices: Prices,
}

#[async_trait::async_trait]
impl UsageStore for PgUsage {
    async fn record(&self, _today: NaiveDate, entry: Entry) -> anyhow::Result<()> {
        record(&self.db, entry, None).await.map(drop)
    }

    async fn today(&self, today: NaiveDate, session: &str) -> anyhow::Result<(Totals, Totals)> {
        let (mut all, mut chat) = (Totals::default(), Totals::default());
        for entry in entries(&self.db, today, today, None).await? {
            all.add(&entry, &self.prices);
            if entry.session == session {
                chat.add(&entry, &self.prices);
            }
        }
        Ok((all, chat))
    }

    async fn entries(
        &self,
        since: NaiveDate,
        until: NaiveDate,
        session: Option<&str>,
    ) -> anyhow::Result<Vec<Entry>> {
        entries(&self.db, since, until, session).await
    }
}

/// The columns of an entry, summed over a group.
const SUMS: &str = "sum(input)::bigint, sum(cache_read)::bigint, sum(cache_write)::bigint, \
                    sum(output)::bigint, sum(estimated)::bigint, sum(calls)::bigint";

/// Adds one call's row (`import_key`: an imported line's key, stored once).
pub(super) async fn record(
    db: &Database,
    entry: Entry,
    import_key: Option<String>,
) -> anyhow::Result<bool> {
    let client = crate::db::client(&db.pool()).await?;
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let added = client
        .run(
            "INSERT INTO bub_usage (day, session, purpose, model, input, cache_read, \
                 cache_write, output, estimated, calls, import_key) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (import_key) DO NOTHING",
            &[
                &entry.date,
                &entry.session,
                &purpose_name(entry.purpose),
                &entry.model,
                &n(entry.input),
                &n(entry.cache_read),
                &n(entry.cache_write),
                &n(entry.output),
                &n(entry.estimated),
                &n(entry.calls),
                &import_key,
            ],
        )
        .await?;
    Ok(added == 1)
}

/// The entries from `since` to `until` (inclusive), of `session` or all, summed per day,
/// session, purpose and model.
async fn entries(
    db: &Database,
    since: NaiveDate,
    until: NaiveDate,
    session: Option<&str>,
) -> anyhow::Result<Vec<Entry>> {
    let session = session.map(str::to_owned);
    let client = crate::db::client(&db.pool()).await?;
    let sql = format!(
        "SELECT day, session, purpose, model, {SUMS} FROM bub_usage \
             WHERE day >= $1 AND day <= $2 AND ($3::text IS NULL OR session = $3) \
             GROUP BY day, session, purpose, model ORDER BY day, session, purpose, model"
    );
    let rows = client.rows(&sql, &[&since, &until, &session]).await?;
    let n = |v: i64| u64::try_from(v).unwrap_or_default();
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(Entry {
                date: r.get(0),
                session: r.get(1),
                purpose: purpose_of(r.get(2))?,
                model: r.get(3),
                input: n(r.get(4)),
                cache_read: n(r.get(5)),
                cache_write: n(r.get(6)),
                output: n(r.get(7)),
                estimated: n(r.get(8)),
                calls: n(r.get(9)),
            })
        })
        .collect())
}

fn purpose_name(purpose: Purpose) -> &'static str {
    match purpose {
        Purpose::Step => "step",
        Purpose::Compaction => "compaction",
        Purpose::Learning => "learning",
    }
}

fn purpose_of(name: &str) -> Option<Purpose> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

/// Copies the ledger of `home` into `db` (`bub db import`), summed per day, session, purpose
/// and model; a sum imported before is kept (running it again adds nothing). Returns how many
/// rows were added.
pub(crate) async fn import(home: &Path, db: &Database) -> anyhow::Result<usize> {
    let mut added = 0;
    for ((date, session, purpose, model), entry) in
        super::file::summed(super::read(&home.join(super::FILE))?)
    {
        let key = format!("{date}|{session}|{purpose}|{model}");
        added += usize::from(record(db, entry, Some(key)).await?);
    }
    Ok(added)
}
