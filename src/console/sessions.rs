//! The sessions page: every tape of the workspace with its activity, today's tokens and cost,
//! the running turn and queue.

use std::collections::HashMap;

use axum::extract::Query;
use axum::response::Response;
use maud::html;
use serde::Deserialize;

use super::Console;
use super::auth::Operator;
use super::page::{self, blocking};
use crate::chat::SessionId;
use crate::status::{SessionRow, Snapshot};
use crate::usage::Totals;

/// The running daemon's board: its own in `bub message`, else asked on its socket (`None`
/// when no daemon answers).
pub(super) async fn snapshot(console: &Console) -> Option<Snapshot> {
    match &console.board {
        Some(board) => Some(board.snapshot()),
        None => crate::status::query(&console.settings.home).await.ok(),
    }
}

#[derive(Deserialize, Default)]
pub(super) struct Filter {
    #[serde(default)]
    q: String,
}

/// `GET /`: the sessions, newest first, filtered by `q` (a part of the session id).
pub(super) async fn list(operator: Operator, Query(filter): Query<Filter>) -> Response {
    let live = snapshot(&operator).await;
    let today = per_session_today(&operator).await;
    let workspace = super::workspace(&operator);
    let tapes = crate::tape::list(&operator.settings.home, operator.db.as_ref(), workspace).await;
    blocking(operator, move |c| {
        let tapes = tapes?;
        let today = today?;
        let live: HashMap<SessionId, SessionRow> = live
            .map(|s| s.sessions.into_iter().map(|r| (r.session.clone(), r)).collect())
            .unwrap_or_default();
        let needle = filter.q.trim().to_lowercase();
        let shown = tapes.iter().filter(|t| {
            let name = t.session.as_deref().unwrap_or(&t.name);
            needle.is_empty() || name.to_lowercase().contains(&needle)
        });
        let body = html! {
            h1 { "Sessions" }
            form.filter method="get" action="/" {
                input type="search" name="q" value=(filter.q) placeholder="telegram:, discord:, cli…";
                button type="submit" { "Filter" }
            }
            div.scroll { table.sessions {
                thead { tr {
                    th { "Session" } th { "Last activity" } th.num { "Entries" }
                    th.num { "Tokens today" } th.num { "Cost today" } th { "Now" }
                } }
                tbody {
                    @for tape in shown {
                        @let session = tape.session.as_deref();
                        @let totals = session.and_then(|s| today.get(s));
                        tr {
                            td { @match session {
                                Some(s) => a href={ "/session?id=" (page::encode(s)) } { (s) },
                                None => a href={ "/session?tape=" (page::encode(&tape.name)) } { (tape.name) " (session unknown)" },
                            } }
                            td { (tape.last.as_deref().map(page::when).unwrap_or_default()) }
                            td.num { (tape.entries) }
                            td.num { (totals.map(|t| crate::usage::thousands(t.tokens())).unwrap_or_default()) }
                            td.num { (totals.map(cost).unwrap_or_default()) }
                            td { (session.and_then(|s| live.get(s)).map(now).unwrap_or_default()) }
                        }
                    }
                }
            } }
            @if tapes.is_empty() { p.hint { "No session has a tape in this workspace yet." } }
        };
        Ok(page::ok(c, "Sessions", "/", body))
    })
    .await
}

/// What a live session is doing: its running turn and its queue.
pub(super) fn now(row: &SessionRow) -> String {
    let running = row
        .running
        .as_ref()
        .map(|r| format!("{} ({} s)", r.what, r.seconds));
    let queued = (row.queued_messages + row.queued_commands > 0).then(|| {
        format!(
            "queued: {} message(s), {} command(s)",
            row.queued_messages, row.queued_commands
        )
    });
    let parts: Vec<String> = running.into_iter().chain(queued).collect();
    if parts.is_empty() {
        "idle".to_owned()
    } else {
        parts.join("; ")
    }
}

pub(super) fn cost(totals: &Totals) -> String {
    if totals.unpriced > 0 && totals.usd == 0.0 {
        "unpriced".to_owned()
    } else {
        format!("${:.4}", totals.usd)
    }
}

/// Today's usage per session.
async fn per_session_today(c: &Console) -> anyhow::Result<HashMap<String, Totals>> {
    let today = chrono::Local::now().date_naive();
    let mut sums: HashMap<String, Totals> = HashMap::new();
    for entry in crate::usage::entries(&c.settings).await? {
        if entry.date == today {
            sums.entry(entry.session.clone())
                .or_default()
                .add(&entry, &c.settings.prices);
        }
    }
    Ok(sums)
}
