//! A session's tape as a timeline: the `main` lane (what people and the agent said, Bub's own
//! prompts as notes, anchors as markers with their summary) and, on request, the `work` lane
//! (each step's bookkeeping as one line, tool calls with their arguments and results, folded,
//! long ones cut; events and errors) — drawn by [`super::lane`].
//!
//! The tape is read through the same store the agent writes (`tape::open`), from an anchor the
//! reader picks (the whole tape by default), a page of [`PAGE`] entries at a time, newest last,
//! with a link to the older ones. Search is the tape's own (`tape.search`: substring or fuzzy,
//! newest first). The page's script asks `/session/live` for entries newer than the last it
//! has; that answer is empty (204) while the tape's length is unchanged, and holds the line of
//! a step that was running at the page's last entry again, to replace it.

use std::sync::{Arc, Mutex};

use axum::extract::Query;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::auth::Operator;
use super::lane::{self, anchor_name};
use super::page::{self, blocking, encode};
use crate::tape::{Kind, Searched, TapeStore, Window};

/// Entries shown at a time.
pub(crate) const PAGE: usize = 200;
/// The events read back for the step running at a live poll's last entry.
const LOOKBACK: usize = 64;
/// The search hits shown.
const HITS: usize = 50;
/// The anchors the picker offers.
const ANCHORS: usize = 100;

/// Which tape, from where, and how.
#[derive(Deserialize, Default, Clone)]
pub(super) struct View {
    /// The session (`telegram:42`).
    id: Option<String>,
    /// A tape by name, for one whose session is unknown.
    tape: Option<String>,
    /// Show entries from this anchor's id (absent: the whole tape).
    anchor: Option<u64>,
    /// Show the work lane.
    #[serde(default)]
    work: Option<String>,
    /// Search for this.
    q: Option<String>,
    /// Show the page before this entry id.
    before: Option<u64>,
    /// `/session/live`: the last entry id the page has, and the tape's length then.
    after: Option<u64>,
    len: Option<usize>,
}

impl View {
    fn work(&self) -> bool {
        self.work.as_deref().is_some_and(|w| w == "1")
    }

    /// `path` with this view's tape and anchor, `work` and `before` as given.
    fn link(&self, path: &str, work: bool, before: Option<u64>) -> String {
        let mut q = match (&self.id, &self.tape) {
            (Some(id), _) => format!("{path}?id={}", encode(id)),
            (None, Some(tape)) => format!("{path}?tape={}", encode(tape)),
            _ => format!("{path}?"),
        };
        if let Some(anchor) = self.anchor {
            q.push_str(&format!("&anchor={anchor}"));
        }
        if work {
            q.push_str("&work=1");
        }
        if let Some(before) = before {
            q.push_str(&format!("&before={before}"));
        }
        q
    }

    /// What the page calls the tape.
    fn title(&self) -> &str {
        self.id
            .as_deref()
            .or(self.tape.as_deref())
            .unwrap_or("session")
    }
}

/// The tapes read last, kept open (at most [`KEPT`], the most recent first) so that the next
/// request on one — the page's live poll every few seconds — reads only what was appended
/// since: a file tape's index is brought up to date, not rebuilt from the whole file.
#[derive(Default)]
pub(super) struct Tapes(Mutex<Vec<(String, Arc<dyn TapeStore>)>>);

/// The tapes [`Tapes`] keeps.
const KEPT: usize = 8;

impl Tapes {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<(String, Arc<dyn TapeStore>)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The tape of `view`: kept, or opened in the store the agent writes (naming it is file
    /// work: on the blocking pool).
    async fn take(&self, c: &Operator, view: &View) -> anyhow::Result<Arc<dyn TapeStore>> {
        let key = match (&view.id, &view.tape) {
            (Some(id), _) => format!("id:{id}"),
            (None, Some(name)) => format!("tape:{name}"),
            _ => anyhow::bail!("which session? (?id=telegram:42)"),
        };
        let kept = self
            .list()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, t)| t.clone());
        let tape = match kept {
            Some(tape) => tape,
            None => {
                let (c, view) = (c.clone(), view.clone());
                crate::storage::blocking(move || {
                    let (home, db, ws) = (&c.settings.home, c.db.as_ref(), super::workspace(&c));
                    match (&view.id, &view.tape) {
                        (Some(id), _) => {
                            crate::tape::backend::open(home, db, ws, &c.settings.tape_name, id)
                        }
                        (None, name) => {
                            let name = name.as_deref().unwrap_or_default();
                            crate::tape::backend::open_name(home, db, ws, name)
                        }
                    }
                })
                .await?
            }
        };
        let mut list = self.list();
        list.retain(|(k, _)| *k != key);
        list.insert(0, (key, tape.clone()));
        list.truncate(KEPT);
        Ok(tape)
    }
}

/// What the `main` lane shows: people, the agent, anchors.
static MAIN: [Kind; 2] = [Kind::Anchor, Kind::Message];
/// With the `work` lane: tool calls and results, events, failed model calls.
static WORK: [Kind; 6] = [
    Kind::Anchor,
    Kind::Message,
    Kind::ToolCall,
    Kind::ToolResult,
    Kind::Event,
    Kind::Error,
];

fn kinds(work: bool) -> &'static [Kind] {
    if work { &WORK } else { &MAIN }
}

/// `GET /session`: the timeline.
pub(super) async fn page(operator: Operator, Query(view): Query<View>) -> Response {
    let rendered = timeline(&operator, view).await;
    page::or_error(&operator, rendered)
}

async fn timeline(c: &Operator, view: View) -> anyhow::Result<Response> {
    if view.id.is_none() && view.tape.is_none() {
        return Ok(page::error(
            c,
            StatusCode::BAD_REQUEST,
            "which session? (?id=telegram:42)",
        ));
    }
    let tape = c.tapes.take(c, &view).await?;
    let anchors = tape.anchors(ANCHORS).await?;
    let len = tape.len().await?;
    let work = view.work();
    let searching = view.q.as_deref().map(str::trim).filter(|q| !q.is_empty());
    let (entries, older, live) = match searching {
        Some(q) => (
            tape.search(q, HITS, Searched::Everything).await?,
            None,
            None,
        ),
        None => {
            let window = Window {
                from: view.anchor.unwrap_or(0),
                before: view.before,
                kinds: kinds(work),
                limit: PAGE + 1,
            };
            let mut lane = tape.window(window).await?;
            let older = (lane.len() > PAGE).then(|| {
                lane.remove(0);
                lane[0].id
            });
            // New entries are fetched only at the newest end of the timeline.
            let last = lane.last().map_or(window.from, |e| e.id);
            (lane, older, view.before.is_none().then_some(last))
        }
    };
    let body = html! {
        h1 { (view.title()) }
        div.tools {
            form.anchor method="get" action="/session" {
                @if let Some(id) = &view.id { input type="hidden" name="id" value=(id); }
                @if let Some(tape) = &view.tape { input type="hidden" name="tape" value=(tape); }
                @if work { input type="hidden" name="work" value="1"; }
                label { "From " select name="anchor" data-autosubmit {
                    option value="" { "the start of the tape" }
                    @for a in anchors.iter().rev() {
                        option value=(a.id) selected[view.anchor == Some(a.id)] {
                            (anchor_name(a)) " · " (page::when(&a.date))
                        }
                    }
                } }
                button type="submit" { "Show" }
            }
            a #work-toggle href=(view.link("/session", !work, None)) {
                @if work { "Hide the work lane" } @else { "Show the work lane" }
            }
            form.search method="get" action="/session" {
                @if let Some(id) = &view.id { input type="hidden" name="id" value=(id); }
                @if let Some(tape) = &view.tape { input type="hidden" name="tape" value=(tape); }
                input #search type="search" name="q" value=(searching.unwrap_or_default()) placeholder="Search this tape";
                button type="submit" { "Search" }
            }
        }
        @if let Some(q) = searching {
            p.hint { (entries.len()) " match(es) for “" (q) "”, newest first. "
                a href=(view.link("/session", work, None)) { "Back to the timeline" } }
        }
        @if let Some(before) = older {
            p.older { a href=(view.link("/session", work, Some(before))) { "Older entries" } }
        }
        ol #timeline data-live=[live.map(|_| view.link("/session/live", work, None))]
            data-after=[live] data-len=[live.map(|_| len)] {
            (lane::draw(c, &entries, view.id.as_deref()))
        }
        @if entries.is_empty() { p.hint { "Nothing to show here." } }
    };
    Ok(page::ok(c, view.title(), "", body))
}

/// `GET /session/live?…&after=ID&len=N`: the entries after `ID` as list items (with the new
/// last id and length in `x-after` / `x-len`); 204 while the tape's length is `N`, 205 (the
/// page reloads) when the tape was reset or more arrived than a page.
pub(super) async fn live(operator: Operator, Query(view): Query<View>) -> Response {
    let rendered = since(&operator, view).await;
    page::or_error(&operator, rendered)
}

async fn since(c: &Operator, view: View) -> anyhow::Result<Response> {
    let tape = c.tapes.take(c, &view).await?;
    let len = tape.len().await?;
    let after = view.after.unwrap_or(0);
    if view.len == Some(len) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    // Ids follow positions: a tape shorter than before was reset.
    if view.len.is_some_and(|n| len < n) || (len as u64) < after {
        return Ok(StatusCode::RESET_CONTENT.into_response());
    }
    let window = Window {
        from: after.saturating_add(1),
        before: None,
        kinds: kinds(view.work()),
        limit: PAGE,
    };
    let fresh = tape.window(window).await?;
    if fresh.len() == PAGE {
        return Ok(StatusCode::RESET_CONTENT.into_response());
    }
    let last = fresh.last().map_or(after, |e| e.id);
    // The step running at the page's last entry: its line is drawn again, with what the
    // step did since.
    let mut entries = Vec::new();
    if view.work() && !fresh.is_empty() {
        let events = Window {
            from: view.anchor.unwrap_or(0),
            before: Some(after.saturating_add(1)),
            kinds: &[Kind::Event],
            limit: LOOKBACK,
        };
        if let Some(start) = lane::running_step(&tape.window(events).await?) {
            let step = Window {
                from: start,
                before: Some(after.saturating_add(1)),
                kinds: kinds(true),
                limit: PAGE,
            };
            entries = tape.window(step).await?;
        }
    }
    entries.extend(fresh);
    let body = lane::draw_since(c, &entries, after, view.id.as_deref());
    let mut response = page::fragment(c, body);
    let headers = response.headers_mut();
    headers.insert("x-after", HeaderValue::from(last));
    headers.insert("x-len", HeaderValue::from(len));
    Ok(response)
}

/// A file of a chat's folder: the name (no folder, nothing hidden or secret) and the session.
#[derive(Deserialize)]
pub(super) struct FileQuery {
    id: String,
    name: String,
}

/// The largest file the console serves.
const MAX_FILE: u64 = 50 * 1024 * 1024;

/// `GET /file?id=SESSION&name=NAME`: a file saved for a chat, from its folder
/// (`chats/<channel>-<chat>/` of the workspace) only — an image shown, anything else
/// downloaded; a path, a hidden or secret name, or a link out of the folder is 404.
pub(super) async fn file(operator: Operator, Query(q): Query<FileQuery>) -> Response {
    blocking(operator, move |c| {
        let not_found = || page::error(c, StatusCode::NOT_FOUND, "no such file");
        let plain = !q.name.contains(['/', '\\']) && !q.name.starts_with('.');
        let folder = crate::chat::SessionId::from(q.id.as_str()).chat_folder();
        let (Some(folder), true) = (folder, plain) else {
            return Ok(not_found());
        };
        if crate::access::files::is_secret_name(q.name.as_ref()) {
            return Ok(not_found());
        }
        let folder = super::workspace(c).join(folder);
        let (Ok(folder), Ok(path)) = (folder.canonicalize(), folder.join(&q.name).canonicalize())
        else {
            return Ok(not_found());
        };
        let meta = std::fs::metadata(&path)?;
        if !path.starts_with(&folder) || !meta.is_file() || meta.len() > MAX_FILE {
            return Ok(not_found());
        }
        let bytes = std::fs::read(&path)?;
        let ext = path.extension().and_then(|e| e.to_str());
        let image = match ext.map(str::to_ascii_lowercase).as_deref() {
            Some("jpg" | "jpeg") => Some("image/jpeg"),
            Some("png") => Some("image/png"),
            Some("gif") => Some("image/gif"),
            Some("webp") => Some("image/webp"),
            _ => None,
        };
        let mut response = bytes.into_response();
        let headers = response.headers_mut();
        let kind = image.unwrap_or("application/octet-stream");
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
        if image.is_none() {
            let attachment = HeaderValue::from_static("attachment");
            headers.insert(header::CONTENT_DISPOSITION, attachment);
        }
        Ok(response)
    })
    .await
}
