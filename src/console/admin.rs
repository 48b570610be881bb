//! The pages that change state, each through the store the operator's command uses: jobs
//! (removed as `bub jobs remove` does), access (pairings approved or rejected, users revoked,
//! `bub access explain`), memory (replaced within its caps, as `bub memory edit`), background
//! commands (ended as `bub status --kill` does). A change answers with a redirect back to its
//! page and a line saying what happened.

use axum::Form;
use axum::extract::Query;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::Console;
use super::auth::Operator;
use super::page::{self, blocking, csrf, encode};
use crate::access::{Role, User, who};
use crate::memory::Scope;

/// What a change says on the page it returns to (`?done=`).
#[derive(Deserialize, Default)]
pub(super) struct Done {
    pub(super) done: Option<String>,
    explain: Option<String>,
    user: Option<String>,
}

pub(super) fn done(path: &str, message: &str) -> Response {
    Redirect::to(&format!("{path}?done={}", encode(message))).into_response()
}

pub(super) fn notice(message: Option<&String>) -> maud::Markup {
    html! { @if let Some(m) = message { p.done role="status" { (m) } } }
}

/// `GET /jobs`.
pub(super) async fn jobs(operator: Operator, Query(q): Query<Done>) -> Response {
    let jobs = operator.jobs.list().await;
    blocking(operator, move |c| {
        let jobs = jobs?;
        let body = html! {
            h1 { "Jobs" }
            (notice(q.done.as_ref()))
            div.scroll { table.jobs {
                thead { tr { th { "Id" } th { "Next run" } th { "Trigger" } th { "Session" } th { "Last" } th { "Creator" } th { "Message" } th {} } }
                tbody { @for job in &jobs {
                    tr {
                        td { code { (job.id) } }
                        td { (job.next_run.map(|t| page::when(&t.to_rfc3339())).unwrap_or_else(|| "-".to_owned())) }
                        td { (job.trigger) }
                        td { a href={ "/session?id=" (encode(&job.session)) } { (job.session) } }
                        td { (job.last_status.as_ref().map(ToString::to_string).unwrap_or_default()) }
                        td { (job.creator.as_ref().map_or_else(|| "unknown".to_owned(), |a| a.describe())) }
                        td.text { (job.message) }
                        td { form method="post" action="/jobs/remove" {
                            (csrf(c)) input type="hidden" name="id" value=(job.id);
                            button.danger type="submit" { "Remove" }
                        } }
                    }
                } }
            } }
            @if jobs.is_empty() { p.hint { "No scheduled jobs." } }
        };
        Ok(page::ok(c, "Jobs", "/jobs", body))
    })
    .await
}

#[derive(Deserialize)]
pub(super) struct JobId {
    id: String,
}

/// `POST /jobs/remove`.
pub(super) async fn remove_job(operator: Operator, Form(form): Form<JobId>) -> Response {
    let removed = operator.jobs.remove(&form.id).await;
    blocking(operator, move |_| {
        let removed = removed?;
        let message = match removed {
            true => format!("Removed job {}.", form.id),
            false => format!("No job {} (removed already?).", form.id),
        };
        Ok(done("/jobs", &message))
    })
    .await
}

#[derive(Deserialize)]
pub(super) struct CommandId {
    id: u64,
}

/// `POST /commands/end`: the daemon ends a background command, whoever started it.
pub(super) async fn end_command(operator: Operator, Form(form): Form<CommandId>) -> Response {
    let ended = match &operator.board {
        Some(board) => board.end_command(form.id),
        None => crate::status::end_command(&operator.settings.home, form.id)
            .await
            .unwrap_or_else(|e| Err(format!("{e:#}"))),
    };
    let message = match ended {
        Ok(ended) => format!("Done: {ended}."),
        Err(why) => format!("Not ended: {why}."),
    };
    done("/status", &message)
}

/// `GET /access`: pending requests, approved users, and `explain` for a chat.
pub(super) async fn access(operator: Operator, Query(q): Query<Done>) -> Response {
    let c = &operator;
    let now = chrono::Utc::now();
    let pending = c.access.pending(now).await;
    let file = c.access.file().await;
    let floods = c.access.flood_notes(now).await;
    let explained = match q.explain.as_deref().filter(|e| !e.trim().is_empty()) {
        Some(chat) => {
            let user = q.user.as_deref().filter(|u| !u.trim().is_empty());
            Some(explain(c, chat.trim(), user).await)
        }
        None => None,
    };
    {
        let body = html! {
            h1 { "Access" }
            (notice(q.done.as_ref()))
            h2 { "Pending pairing requests" }
            @for note in floods { p.error { (note) } }
            @if pending.is_empty() { p.hint { "None. Someone the allow-lists do not admit gets a code when they write to the bot in a private chat." } }
            ul.pending { @for p in &pending {
                li {
                    span { code { (p.code) } " " (p.channel) " user " (who(&p.user_id, p.username.as_deref()))
                        " · expires in " ((p.expires_at() - now).num_minutes().max(0)) " min" }
                    form method="post" action="/access/approve" {
                        (csrf(c)) input type="hidden" name="channel" value=(p.channel);
                        input type="hidden" name="code" value=(p.code);
                        button type="submit" name="role" value="guest" { "Approve as guest" }
                        button type="submit" name="role" value="owner" { "Approve as owner" }
                    }
                    form method="post" action="/access/reject" {
                        (csrf(c)) input type="hidden" name="channel" value=(p.channel);
                        input type="hidden" name="code" value=(p.code);
                        button.danger type="submit" { "Reject" }
                    }
                }
            } }
            h2 { "Approved users" }
            @if file.users.is_empty() { p.hint { "No paired users." } }
            ul.users { @for u in &file.users {
                li {
                    span { (u.channel) " user " (who(&u.user_id, u.username.as_deref())) " · " (u.role)
                        " · approved " (u.approved_at.format("%Y-%m-%d %H:%M UTC")) }
                    form method="post" action="/access/revoke" {
                        (csrf(c)) input type="hidden" name="channel" value=(u.channel);
                        input type="hidden" name="user_id" value=(u.user_id);
                        button.danger type="submit" { "Revoke" }
                    }
                }
            } }
            h2 { "Explain a chat" }
            form.explain method="get" action="/access" {
                input type="text" name="explain" placeholder="telegram:42" value=(q.explain.as_deref().unwrap_or_default());
                input type="text" name="user" placeholder="user id (optional)" value=(q.user.as_deref().unwrap_or_default());
                button type="submit" { "Explain" }
            }
            @if let Some(text) = explained { pre.status { (text) } }
        };
        page::ok(c, "Access", "/access", body)
    }
}

/// `bub access explain CHAT [--user ID]`'s text, or why it cannot be given.
async fn explain(c: &Console, chat: &str, user: Option<&str>) -> String {
    let user = user.map(|id| User {
        id: id.trim(),
        name: None,
        display: None,
    });
    let explained = crate::cli::admin::explanation(&c.settings, &c.access, chat, user);
    explained.await.unwrap_or_else(|e| e.0)
}

#[derive(Deserialize)]
pub(super) struct Decision {
    channel: String,
    #[serde(default)]
    code: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    user_id: String,
}

/// `POST /access/approve`: as `bub pair approve` (effective at once, in every process).
pub(super) async fn approve(operator: Operator, Form(form): Form<Decision>) -> Response {
    let role = match form.role.as_str() {
        "owner" => Role::Owner,
        _ => Role::Guest,
    };
    let now = chrono::Utc::now();
    let approved = operator
        .access
        .approve(&form.channel, &form.code, Some(role), now);
    let message = match approved.await {
        Ok(p) => format!(
            "Approved {} user {} as {}.",
            p.channel,
            who(&p.user_id, p.username.as_deref()),
            p.role
        ),
        Err(e) => format!("Not approved: {e:#}"),
    };
    done("/access", &message)
}

/// `POST /access/reject`.
pub(super) async fn reject(operator: Operator, Form(form): Form<Decision>) -> Response {
    let rejected = operator.access.reject(&form.channel, &form.code).await;
    let message = rejected.map(|rejected| match rejected {
        true => format!("Rejected request {}.", form.code),
        false => format!("No pending request {}.", form.code),
    });
    page::or_error(&operator, message.map(|m| done("/access", &m)))
}

/// `POST /access/revoke`: as `bub pair revoke`.
pub(super) async fn revoke(operator: Operator, Form(form): Form<Decision>) -> Response {
    let revoked = operator.access.revoke(&form.channel, &form.user_id).await;
    let message = revoked.map(|r| {
        let mut message = match r.removed {
            true => format!("Revoked {} user {}.", form.channel, form.user_id),
            false => format!("{} user {} was not paired.", form.channel, form.user_id),
        };
        if let Some(var) = r.still_admitted_by {
            message.push_str(&format!(" They are still admitted by {var}."));
        }
        done("/access", &message)
    });
    page::or_error(&operator, message)
}

/// `GET /memory`: the global memory and each chat's, each with an edit form.
pub(super) async fn memory(operator: Operator, Query(q): Query<Done>) -> Response {
    let c = &operator;
    let mut scopes = vec![Scope::Global];
    scopes.extend(c.memory.chats().await.into_iter().map(Scope::Chat));
    let mut lists = Vec::with_capacity(scopes.len());
    for scope in scopes {
        let entries = c.memory.list(&scope).await;
        lists.push((scope, entries));
    }
    {
        let body = html! {
            h1 { "Memory" }
            (notice(q.done.as_ref()))
            @for (scope, entries) in lists.iter() {
                @let name = match scope { Scope::Global => "global".to_owned(), Scope::Chat(s) => s.clone() };
                section.memory {
                    h2 { (name) } p.hint { (c.memory.describe(scope)) }
                    form method="post" action="/memory/edit" {
                        (csrf(c))
                        @if let Scope::Chat(chat) = scope { input type="hidden" name="chat" value=(chat); }
                        textarea name="text" rows=(entries.len().clamp(3, 20)) {
                            @for e in entries { "- " (e) "\n" }
                        }
                        button type="submit" { "Save" }
                    }
                }
            }
        };
        page::ok(c, "Memory", "/memory", body)
    }
}

#[derive(Deserialize)]
pub(super) struct MemoryEdit {
    /// The chat whose memory this is; the global memory without one.
    chat: Option<String>,
    text: String,
}

/// `POST /memory/edit`: the bullets kept within the caps, as `bub memory edit`.
pub(super) async fn edit_memory(operator: Operator, Form(form): Form<MemoryEdit>) -> Response {
    let scope = form
        .chat
        .filter(|c| !c.is_empty())
        .map_or(Scope::Global, Scope::Chat);
    let name = match &scope {
        Scope::Global => "global".to_owned(),
        Scope::Chat(chat) => chat.clone(),
    };
    let saved = operator.memory.replace(&scope, &form.text).await;
    let page = saved.map(|()| done("/memory", &format!("Saved the {name} memory.")));
    page::or_error(&operator, page)
}
