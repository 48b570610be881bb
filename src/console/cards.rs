//! The status page: what `bub status` shows, as cards — the daemon, its channels and whether
//! each reaches its platform, the live sessions (running, queued), the jobs due next, today's
//! usage and cost, the recent errors — then the running background commands with a button
//! that ends each, the replicas, and the usage of the last 30 days as a plot.
//!
//! Read from what `bub status` reads, nothing collected for the console alone: the daemon's
//! board ([`crate::status::Snapshot`]: its own in `bub message`, else asked on its socket), the
//! job store, the usage ledger's entries, the replicas' rows.

use std::collections::BTreeMap;

use axum::extract::Query;
use axum::response::Response;
use chrono::{Local, NaiveDate};
use maud::{Markup, html};

use super::auth::Operator;
use super::page::{self, blocking};
use super::sessions::{cost, now, snapshot};
use crate::scheduler::job::Job;
use crate::status::{CommandRow, Snapshot};
use crate::usage::{Totals, thousands};

/// The days the usage plot shows.
const PLOT_DAYS: i64 = 30;
/// The jobs the card lists, due soonest first.
const NEXT_JOBS: usize = 5;
/// The errors the card lists, newest first.
const ERRORS: usize = 5;

/// `GET /status`.
pub(super) async fn status(operator: Operator, Query(q): Query<super::admin::Done>) -> Response {
    let live = snapshot(&operator).await;
    let replicas = match crate::cli::db::replicas(&operator.settings).await {
        Ok(Some(rows)) => Some(crate::cli::db::describe_replicas(&rows)),
        Ok(None) => None,
        Err(e) => Some(format!("replicas unavailable: {e:#}")),
    };
    let entries = crate::usage::entries(&operator.settings).await;
    let jobs = operator.jobs.list().await;
    blocking(operator, move |c| {
        let jobs = jobs?;
        let entries = entries?;
        let today = Local::now().date_naive();
        let mut days: BTreeMap<NaiveDate, Totals> = BTreeMap::new();
        for offset in 0..PLOT_DAYS {
            days.insert(today - chrono::Days::new(offset as u64), Totals::default());
        }
        for entry in &entries {
            if let Some(day) = days.get_mut(&entry.date) {
                day.add(entry, &c.settings.prices);
            }
        }
        let running: Vec<&CommandRow> = live
            .iter()
            .flat_map(|s| &s.commands)
            .filter(|r| r.state.starts_with("running"))
            .collect();
        let body = html! {
            h1 { "Status" }
            (super::admin::notice(q.done.as_ref()))
            div.cards {
                (daemon(live.as_ref()))
                (channels(live.as_ref()))
                (sessions(live.as_ref()))
                (next_jobs(&jobs))
                (usage_today(&days.get(&today).copied().unwrap_or_default()))
                (errors(live.as_ref()))
            }
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
            @if let Some(replicas) = &replicas { h2 { "Replicas" } pre.status { (replicas) } }
            h2 { "Usage, last " (PLOT_DAYS) " days" }
            (plot(&days))
            div.scroll { table.usage {
                thead { tr { th { "Day" } th.num { "Calls" } th.num { "Tokens" } th.num { "Cache hit" } th.num { "Cost" } } }
                tbody { @for (day, t) in days.iter().rev().filter(|(_, t)| t.calls > 0) {
                    tr {
                        td { (day) } td.num { (t.calls) } td.num { (thousands(t.tokens())) }
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

/// What a card without the daemon says.
fn no_daemon() -> Markup {
    html! { p.hint { "No daemon answers for this BUB_HOME (" code { "bub message" } " is not running)." } }
}

fn daemon(live: Option<&Snapshot>) -> Markup {
    html! { section.card.daemon { h2 { "Daemon" } @match live {
        Some(s) => {
            p.big { "up " (crate::time::human_duration(std::time::Duration::from_secs(s.uptime_seconds))) }
            p { "bub " (s.version) " · pid " (s.pid) }
            p { "model " code { (s.model) } }
        }
        None => (no_daemon()),
    } } }
}

fn channels(live: Option<&Snapshot>) -> Markup {
    html! { section.card.channels { h2 { "Channels" } @match live {
        Some(s) if s.channels.is_empty() => p.hint { "No channel: the scheduler alone." },
        Some(s) => ul { @for channel in &s.channels {
            @let up = s.connected.contains(channel);
            li.(if up { "ready" } else { "down" }) {
                span.dot {} (channel) " · " (if up { "connected" } else { "not connected" })
            }
        } },
        None => (no_daemon()),
    } } }
}

fn sessions(live: Option<&Snapshot>) -> Markup {
    let Some(s) = live else {
        return html! { section.card.sessions { h2 { "Sessions" } (no_daemon()) } };
    };
    let running = s.sessions.iter().filter(|r| r.running.is_some()).count();
    let queued: usize = (s.sessions.iter())
        .map(|r| r.queued_messages + r.queued_commands)
        .sum();
    let busy = s
        .sessions
        .iter()
        .filter(|r| r.running.is_some() || r.queued_messages + r.queued_commands > 0);
    html! { section.card.sessions { h2 { "Sessions" }
        p.big { (running) " running · " (queued) " queued" }
        p.hint { (s.sessions.len()) " live" }
        ul { @for row in busy {
            li { a href={ "/session?id=" (page::encode(row.session.as_str())) } { (row.session) } " · " (now(row)) }
        } }
    } }
}

fn next_jobs(jobs: &[Job]) -> Markup {
    let mut due: Vec<&Job> = jobs.iter().filter(|j| j.next_run.is_some()).collect();
    due.sort_by_key(|j| j.next_run);
    html! { section.card.jobs { h2 { "Jobs" }
        p.big { (jobs.len()) " scheduled" }
        @if due.is_empty() { p.hint { "Nothing due." } }
        ul { @for job in due.iter().take(NEXT_JOBS) {
            @let next = job.next_run.map(|t| t.with_timezone(&Local).format("%m-%d %H:%M").to_string());
            li {
                strong { (next.unwrap_or_default()) } " · " (job.session) " · "
                span.args { (page::cut(&job.message, 60).0) }
            }
        } }
        p { a href="/jobs" { "All jobs" } }
    } }
}

fn usage_today(t: &Totals) -> Markup {
    html! { section.card.today { h2 { "Today" }
        p.big { (thousands(t.tokens())) " tokens · " (cost(t)) }
        p { (t.calls) " model call(s)"
            @if let Some(rate) = t.cache_hit_rate() { " · " (format!("{:.0}%", rate * 100.0)) " from cache" } }
    } }
}

fn errors(live: Option<&Snapshot>) -> Markup {
    html! { section.card.errors { h2 { "Recent errors" } @match live {
        Some(s) => {
            @if s.errors.is_empty() { p.big.ok { "None" } }
            ul { @for e in s.errors.iter().take(ERRORS) {
                li {
                    strong { (e.at.with_timezone(&Local).format("%m-%d %H:%M:%S")) } " · " (e.session)
                    div.error { (page::cut(&e.error, 200).0) }
                }
            } }
        }
        None => (no_daemon()),
    } } }
}

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
                    title { (day) ": " (thousands(t.tokens())) " tokens, " (cost(t)) }
                    rect.bar x=(x + 1.0) y=(H - h) width=(step - 2.0) height=(h) {}
                    rect.cached x=(x + 1.0) y=(H - cached) width=(step - 2.0) height=(cached) {}
                }
                @if i % 7 == 0 { text x=(x) y=(H + 15.0) { (day.format("%m-%d")) } }
            }
        }
        p.hint { "Bars: input and output tokens per day; the darker part was read from the provider's cache." }
    }
}
