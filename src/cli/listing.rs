//! What the operator's listing commands print — `bub pair list`, `bub memory list`,
//! `bub jobs list`, `bub usage` — as text. Usernames, memory entries and job messages came from chats, so
//! every row is escaped (`terminal::safe_line`): a guest's text cannot rewrite the screen, set
//! the window title or write the clipboard.

use chrono::{DateTime, NaiveDate, Utc};

use crate::access::{Access, Pending, who};
use crate::config::Settings;
use crate::memory::{Memory, Scope};
use crate::scheduler::store::JobStore;
use crate::terminal::safe_line;

/// `bub pair list`: the flood notes, pending requests and approved users, one row each.
pub async fn pairs(access: &Access, now: DateTime<Utc>) -> String {
    let pending = access.pending(now).await;
    let file = access.file().await;
    let mut out = Vec::new();
    if pending.is_empty() && file.users.is_empty() {
        out.push(
            "No pairing requests and no paired users. Someone the allow-lists do not admit who \
             writes to the bot in a private chat gets a code; approve it with \
             `bub pair approve <channel> <code>`."
                .to_owned(),
        );
    } else if pending.is_empty() {
        out.push("(no pending requests)".to_owned());
    }
    for note in access.flood_notes(now).await {
        out.push(format!("flood    {note}"));
    }
    for p in &pending {
        out.push(format!("pending  {}", pending_row(p, now)));
    }
    for u in &file.users {
        out.push(format!(
            "paired   {} user {} {} (approved {})",
            u.channel,
            who(&u.user_id, u.username.as_deref()),
            u.role,
            u.approved_at.format("%Y-%m-%d %H:%M UTC")
        ));
    }
    rows(out)
}

/// `K7QM2XPA telegram user 77 @ann (expires in 58 min): bub pair approve telegram K7QM2XPA` —
/// a pending request in `bub pair list` and `bub status` (escaped by the caller's `rows`/`safe`).
pub(crate) fn pending_row(p: &Pending, now: DateTime<Utc>) -> String {
    let left = (p.expires_at() - now).num_minutes().max(0);
    format!(
        "{} {} user {} (expires in {left} min): bub pair approve {} {}",
        p.code,
        p.channel,
        who(&p.user_id, p.username.as_deref()),
        p.channel,
        p.code
    )
}

/// `bub memory list`: the global memory, then each chat's, with where they are kept.
pub async fn memory(memory: &Memory) -> String {
    let mut out = vec![format!("global ({})", memory.describe(&Scope::Global))];
    let entries = async |scope: &Scope| {
        let entries = memory.list(scope).await.into_iter();
        entries.map(|e| format!("  - {e}")).collect::<Vec<_>>()
    };
    out.extend(entries(&Scope::Global).await);
    let chats = memory.chats().await;
    if out.len() == 1 && chats.is_empty() {
        let place = memory.describe(&Scope::Global);
        let place = place.strip_suffix("/global.md").unwrap_or(&place);
        return format!(
            "No memory yet. Bub remembers what a message asks it to (`remember: I prefer metric \
             units`) and what the model keeps with its memory.* tools; it is kept in \
             {} (`bub memory edit`).",
            safe_line(place)
        );
    }
    for session in chats {
        let scope = Scope::Chat(session.clone());
        out.push(format!("chat {session} ({})", memory.describe(&scope)));
        out.extend(entries(&scope).await);
    }
    rows(out)
}

/// `bub jobs list`: the jobs, then those set aside with why (loading sets aside jobs that
/// cannot run).
pub async fn jobs(store: &dyn JobStore) -> anyhow::Result<String> {
    let jobs = store.list().await?;
    let mut out = Vec::new();
    if jobs.is_empty() {
        out.push(format!(
            "No scheduled jobs. Ask Bub in a chat (\"every weekday at 9, send me the news\"): \
             the model adds jobs with schedule.add; they are kept in {}.",
            store.location()
        ));
    }
    out.extend(jobs.iter().map(|job| job.row(true)));
    // The error names the rejected file itself.
    for entry in &store.rejected().await? {
        out.push(format!(
            "rejected {} {} (set aside in {})",
            entry.id().unwrap_or("-"),
            entry.reason,
            store.rejected_location()
        ));
    }
    Ok(rows(out))
}

/// The rows, each escaped, one a line.
fn rows(rows: Vec<String>) -> String {
    let escaped: Vec<String> = rows.iter().map(|r| safe_line(r).into_owned()).collect();
    escaped.join("\n")
}

/// `bub usage`: the usage ledger from `since` on (all of it when `None`), per day and session
/// and in all, as a table or (`json`) JSON; session names escaped.
pub async fn usage(
    settings: &Settings,
    since: Option<NaiveDate>,
    json: bool,
) -> anyhow::Result<String> {
    let entries = crate::usage::entries(settings).await?;
    let summary = crate::usage::Summary::of(&entries, since, &settings.prices);
    Ok(match json {
        true => crate::terminal::safe_json(&serde_json::to_string_pretty(&summary)?).into_owned(),
        false => summary.render(),
    })
}

/// `--since`: `7d` (that many days before `today`) or a date, `2026-11-01`.
pub(crate) fn parse_since(text: &str, today: NaiveDate) -> Option<NaiveDate> {
    match text.strip_suffix('d').map(str::parse::<u64>) {
        Some(days) => today.checked_sub_days(chrono::Days::new(days.ok()?)),
        None => NaiveDate::parse_from_str(text, "%Y-%m-%d").ok(),
    }
}
