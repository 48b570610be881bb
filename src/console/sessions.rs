//! The sessions page (every tape of the workspace with its activity, today's tokens and cost,
//! the running turn and queue) and the status page (what `bub status` shows, the running
//! background commands with a button that ends each, and the usage of the last 30 days as a
//! plot).

use std::collections::{BTreeMap, HashMap};

use axum::extract::Query;
use axum::response::Response;
use chrono::NaiveDate;
use maud::{Markup, html};
use serde::Deserialize;

use super::Console;
use super::auth::Operator;
use super::page::{self, blocking};
use crate::status::{CommandRow, SessionRow, Snapshot};
use crate::usage::Totals;

/// The days the usage plot shows.
const PLOT_DAYS: i64 = 30;

/// The running daemon's board: its own in `bub message`, else asked on its socket (`None`
/// when no daemon answers).
async fn snapshot(console: &Console) -> Option<Snapshot> {
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
    blocking(operator, move |c| {
        let tapes = crate::tape::list(&c.settings.home, c.db.as_ref(), super::workspace(c))?;
        let today = per_session_today(c)?;
        let live: HashMap<String, SessionRow> = live
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
fn now(row: &SessionRow) -> String {
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

fn cost(totals: &Totals) -> String {
    if totals.unpriced > 0 && totals.usd == 0.0 {
        "unpriced".to_owned()
    } else {
        format!("${:.4}", totals.usd)
    }
}

/// Today's usage per session.
fn per_session_today(c: &Console) -> anyhow::Result<HashMap<String, Totals>> {
    let today = chrono::Local::now().date_naive();
    let mut sums: HashMap<String, Totals> = HashMap::new();
    for entry in crate::usage::entries(&c.settings)? {
        if entry.date == today {
            sums.entry(entry.session.clone())
                .or_default()
                .add(&entry, &c.settings.prices);
        }
    }
    Ok(sums)
}

/// `GET /status`: the daemon's answer, the jobs and today's usage (as `bub status` prints
/// them), the replicas, and the last 30 days' usage.
pub(super) async fn status(operator: Operator, Query(q): Query<super::admin::Done>) -> Response {
    let live = snapshot(&operator).await;
    let replicas = match crate::cli::db::replicas(&operator.settings).await {
        Ok(Some(rows)) => Some(crate::cli::db::describe_replicas(&rows)),
        Ok(None) => None,
        Err(e) => Some(format!("replicas unavailable: {e:#}")),
    };
    blocking(operator, move |c| {
        let jobs: Vec<String> = c.jobs.list()?.iter().map(|j| j.row(true)).collect();
        let entries = crate::usage::entries(&c.settings)?;
        let today = chrono::Local::now().date_naive();
        let mut days: BTreeMap<NaiveDate, Totals> = BTreeMap::new();
        for offset in 0..PLOT_DAYS {
            days.insert(today - chrono::Days::new(offset as u64), Totals::default());
        }
        for entry in &entries {
            if let Some(day) = days.get_mut(&entry.date) {
                day.add(entry, &c.settings.prices);
            }
        }
        let today_text = days.get(&today).map(Totals::describe).unwrap_or_default();
        let running: Vec<&CommandRow> = live
            .iter()
            .flat_map(|s| &s.commands)
            .filter(|r| r.state.starts_with("running"))
            .collect();
        let body = html! {
            h1 { "Status" }
            (super::admin::notice(q.done.as_ref()))
            @if !running.is_empty() {
                h2 { "Background commands" }
                div.scroll { table.commands {
                    thead { tr { th { "Id" } th { "Session" } th { "Started by" } th { "State" } th { "Command" } th {} } }
                    tbody { @for r in &running {
                        tr {
                            td { (r.id) } td { (r.session) } td { (r.owner) } td { (r.state) } td { code { (r.command) } }
                            td { form method="post" action="/commands/end" {
                                (page::csrf(c)) input type="hidden" name="id" value=(r.id);
                                button.danger type="submit" { "End" }
                            } }
                        }
                    } }
                } }
            }
            @match &live {
                Some(snapshot) => pre.status { (crate::status::render(snapshot, &jobs, &today_text)) },
                None => {
                    p.hint { "No daemon answers for this BUB_HOME (" code { "bub message" } " is not running)." }
                    h2 { "Jobs" }
                    pre.status { @for job in &jobs { (job) "\n" } }
                    h2 { "Today" }
                    pre.status { (today_text) }
                },
            }
            @if let Some(replicas) = &replicas { pre.status { (replicas) } }
            h2 { "Usage, last " (PLOT_DAYS) " days" }
            (plot(&days))
            div.scroll { table.usage {
                thead { tr { th { "Day" } th.num { "Calls" } th.num { "Tokens" } th.num { "Cache hit" } th.num { "Cost" } } }
                tbody { @for (day, t) in days.iter().rev().filter(|(_, t)| t.calls > 0) {
                    tr {
                        td { (day) } td.num { (t.calls) } td.num { (crate::usage::thousands(t.tokens())) }
                        td.num { (t.cache_hit_rate().map(|r| format!("{:.0}%", r * 100.0)).unwrap_or_default()) }
                        td.num { (cost(t)) }
                    }
                } }
            } }
        };
        Ok(page::ok(c, "Status", "/status", body))
    })
    .await
}

/// Tokens per day as bars (the cached share darker), in SVG drawn here: no script, no library.
fn plot(days: &BTreeMap<NaiveDate, Totals>) -> Markup {
    const W: f64 = 600.0;
    const H: f64 = 140.0;
    let most = days.values().map(Totals::tokens).max().unwrap_or(0).max(1) as f64;
    let step = W / days.len().max(1) as f64;
    html! {
        svg.plot viewBox={ "0 0 " (W) " " (H + 20.0) } role="img" aria-label="tokens per day" {
            @for (i, (day, t)) in days.iter().enumerate() {
                @let x = i as f64 * step;
                @let h = t.tokens() as f64 / most * H;
                @let cached = t.cache_read as f64 / most * H;
                g {
                    title { (day) ": " (crate::usage::thousands(t.tokens())) " tokens, " (cost(t)) }
                    rect.bar x=(x + 1.0) y=(H - h) width=(step - 2.0) height=(h) {}
                    rect.cached x=(x + 1.0) y=(H - cached) width=(step - 2.0) height=(cached) {}
                }
                @if i % 7 == 0 { text x=(x) y=(H + 15.0) { (day.format("%m-%d")) } }
            }
        }
        p.hint { "Bars: input and output tokens per day; the darker part was read from the provider's cache." }
    }
}
