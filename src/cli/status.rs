//! `bub status`: the running daemon's own answer on its socket (sessions, turns, queues,
//! recent errors), with the scheduled jobs, today's usage, the pending pairing requests (read
//! from `access.json`, as `bub pair list` does) and, with a database, the replicas.

use anyhow::Context as _;

use crate::access::{Access, Pending};
use crate::config::Settings;
use crate::storage::PidLock;
use crate::terminal::{safe, safe_line};

use super::admin::print_out;

/// `bub status`: the daemon's own answer on its socket, with the scheduled jobs; exit 1 when
/// no daemon runs (or it does not answer).
pub async fn run(settings: &Settings, json: bool) -> anyhow::Result<()> {
    let home = &settings.home;
    let snapshot = match crate::status::query(home).await {
        Ok(snapshot) => snapshot,
        Err(e) => {
            let lock = home.join(crate::daemon::DAEMON_LOCK);
            return Err(match lock.exists().then(|| PidLock::try_take(&lock)) {
                Some(Ok(PidLock::Taken(pid))) => e.context(format!(
                    "the daemon (pid {}) does not answer",
                    pid.map_or_else(|| "?".to_owned(), |p| p.to_string())
                )),
                _ => anyhow::anyhow!("no daemon is running for BUB_HOME={}", home.display()),
            });
        }
    };
    let today = usage_today(settings).await;
    let replicas = super::db::replicas(settings).await?;
    let pairing = pending_requests(settings).await?;
    if json {
        let mut value = serde_json::to_value(&snapshot)?;
        value["pairing_requests"] = serde_json::to_value(&pairing)?;
        value["usage_today"] = match &today {
            Ok(totals) => serde_json::to_value(totals)?,
            Err(e) => serde_json::Value::String(format!("unavailable: {e}")),
        };
        if let Some(replicas) = replicas {
            value["replicas"] = match replicas {
                Ok(rows) => serde_json::to_value(rows)?,
                Err(e) => serde_json::Value::String(format!("unavailable: {e:#}")),
            };
        }
        let text = serde_json::to_string_pretty(&value)?;
        print_out(&crate::terminal::safe_json(&text));
        return Ok(());
    }
    let store = crate::scheduler::store::open(home, settings.database()?.as_ref());
    let jobs = match store.list().await {
        Ok(jobs) => jobs
            .iter()
            .map(|j| safe_line(&j.row(true)).into())
            .collect(),
        Err(e) => vec![format!("unavailable: {e:#}")],
    };
    let today = match today {
        Ok(totals) => totals.describe(),
        Err(e) => format!("unavailable: {e}"),
    };
    let mut text = crate::status::render(&snapshot, &jobs, &today);
    text.push_str(&describe_pairing(&pairing, chrono::Utc::now()));
    if let Some(replicas) = replicas {
        text.push_str(&super::db::describe_replicas(&replicas));
    }
    print_out(&safe(&text));
    Ok(())
}

/// `bub status --kill ID`: the daemon ends background command `ID`; exit 1 when it cannot.
pub async fn kill(settings: &Settings, id: u64) -> anyhow::Result<std::process::ExitCode> {
    let ended = crate::status::end_command(&settings.home, id)
        .await
        .with_context(|| format!("no daemon answers for BUB_HOME={}", settings.home.display()))?;
    match ended {
        Ok(done) => {
            print_out(&safe_line(&done));
            Ok(std::process::ExitCode::SUCCESS)
        }
        Err(why) => {
            eprintln!("bub: {}", safe_line(&why));
            Ok(std::process::ExitCode::FAILURE)
        }
    }
}

/// The unexpired pairing requests of every channel (`access.json`, on the blocking pool).
async fn pending_requests(settings: &Settings) -> anyhow::Result<Vec<Pending>> {
    let access = Access::new(settings);
    Ok(access.pending(chrono::Utc::now()).await)
}

/// `bub status`'s lines of pending pairing requests (a newline first).
fn describe_pairing(pending: &[Pending], now: chrono::DateTime<chrono::Utc>) -> String {
    if pending.is_empty() {
        return "\npairing requests: none".to_owned();
    }
    let mut text = format!("\npairing requests ({}):", pending.len());
    for p in pending {
        text.push_str(&format!("\n  {}", super::listing::pending_row(p, now)));
    }
    text
}

/// Today's totals of the usage ledger, for `bub status`.
async fn usage_today(settings: &Settings) -> Result<crate::usage::Totals, String> {
    let db = settings.database().map_err(|e| format!("{e:#}"))?;
    let store = crate::usage::open(&settings.home, &settings.prices, db.as_ref());
    let ledger =
        crate::usage::Ledger::new(store, settings.prices.clone(), settings.budgets.clone());
    ledger.today_totals().await.map_err(|e| format!("{e:#}"))
}
