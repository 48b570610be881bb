//! The fake's REST side: one axum fallback handler that records every request and answers the
//! routes serenity and the adapter use (see the table in the module docs of `fake_discord`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use super::msg::{bot_user, user};
use super::{BOT_ID, PostedMessage, RecordedRequest, Shared, query_param};

fn json_response(status: u16, body: &Value, headers: &[(String, String)]) -> Response {
    let mut resp = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    for (k, v) in headers {
        resp = resp.header(k.as_str(), v.as_str());
    }
    resp.body(Body::from(body.to_string())).unwrap()
}

fn now_timestamp() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

pub(super) async fn handler(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let query = uri.query().unwrap_or_default().to_owned();
    let body_json = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    let header_list: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let (status, resp) = answer(&shared, &method, &path, &query, &headers, &body_json);
    shared.update(|s| {
        s.requests.push(RecordedRequest {
            method: method.to_string(),
            path,
            query,
            body: body_json,
            headers: header_list,
            status,
            at: Instant::now(),
        })
    });
    resp
}

/// The response (and its status, for the record) to one REST request.
fn answer(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    body: &Value,
) -> (u16, Response) {
    let reply = |status: u16, body: Value| (status, json_response(status, &body, &[]));
    let Some(route) = path.strip_prefix("/api/v10") else {
        return reply(404, json!({"message": "404: Not Found", "code": 0}));
    };
    let parts: Vec<&str> = route.trim_matches('/').split('/').collect();
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    let valid = shared.state().valid_token.clone();
    if let Some(valid) = valid
        && !route.starts_with("/gateway")
        && auth != Some(format!("Bot {valid}").as_str())
    {
        return reply(401, json!({"message": "401: Unauthorized", "code": 0}));
    }
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["gateway"]) => reply(200, json!({"url": shared.ws_url})),
        ("GET", ["gateway", "bot"]) => reply(
            200,
            json!({"url": shared.ws_url, "shards": 1, "session_start_limit":
                   {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}),
        ),
        ("GET", ["users", "@me"]) => reply(200, bot_user()),
        ("POST", ["channels", channel, "messages"]) => post_message(shared, channel, body),
        ("POST", ["channels", channel, "typing"]) => {
            let channel = channel.to_string();
            shared.update(|s| s.typing.push(channel));
            (
                204,
                Response::builder()
                    .status(StatusCode::NO_CONTENT)
                    .body(Body::empty())
                    .unwrap(),
            )
        }
        ("GET", ["channels", channel, "messages"]) => history(shared, channel, query),
        ("GET", ["channels", channel]) => {
            let known = shared.state().channels.get(*channel).cloned();
            let default = json!({"id": channel, "type": 0, "name": format!("channel-{channel}"),
                                 "position": 0, "permission_overwrites": [], "nsfw": false});
            reply(200, known.unwrap_or(default))
        }
        ("GET", ["guilds", guild, "members", member]) => {
            let is_bot = *member == BOT_ID;
            let roles = if is_bot {
                let state = shared.state();
                state.bot_roles.get(*guild).cloned().unwrap_or_default()
            } else {
                Vec::new()
            };
            let user = if is_bot {
                bot_user()
            } else {
                user(member, "member")
            };
            reply(
                200,
                json!({"user": user, "roles": roles, "joined_at": "2024-01-01T00:00:00.000000+00:00",
                       "deaf": false, "mute": false, "flags": 0, "nick": null}),
            )
        }
        _ => reply(404, json!({"message": "404: Not Found", "code": 0})),
    }
}

/// `POST /channels/{id}/messages`: the next fault, or a created message.
fn post_message(shared: &Shared, channel: &str, body: &Value) -> (u16, Response) {
    if let Some(fault) = shared.update(|s| s.faults.pop_front()) {
        return (
            fault.status,
            json_response(fault.status, &fault.body, &fault.headers),
        );
    }
    let id = (shared.next_id.fetch_add(1, Ordering::SeqCst) + 1).to_string();
    let content = body["content"].as_str().unwrap_or_default();
    let mut message = json!({
        "id": id, "channel_id": channel, "author": bot_user(), "content": content,
        "timestamp": now_timestamp(), "edited_timestamp": null, "tts": false,
        "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
        "embeds": [], "pinned": false, "type": 0,
    });
    if let Some(reference) = body.get("message_reference").filter(|r| r.is_object()) {
        message["type"] = json!(19);
        message["message_reference"] = json!({
            "message_id": reference["message_id"], "channel_id": channel,
        });
    }
    let posted = PostedMessage {
        channel_id: channel.to_owned(),
        id,
        body: body.clone(),
        at: Instant::now(),
    };
    shared.update(|s| s.posts.push(posted));
    (200, json_response(200, &message, &[]))
}

/// `GET /channels/{id}/messages?after=&limit=`: the `limit` oldest messages of the channel's
/// history newer than `after` (all when `after` is absent), newest first — Discord's order —
/// or the channel's injected failure.
fn history(shared: &Shared, channel: &str, query: &str) -> (u16, Response) {
    let param = |name: &str| query_param(query, name).and_then(|v| v.parse::<u64>().ok());
    let (after, limit) = (param("after").unwrap_or(0), param("limit").unwrap_or(50));
    let id = |m: &Value| m["id"].as_str().and_then(|id| id.parse::<u64>().ok());
    let state = shared.state();
    if let Some(&status) = state.history_errors.get(channel) {
        let body = match status {
            403 => json!({"message": "Missing Access", "code": 50001}),
            _ => json!({"message": "Unknown Channel", "code": 10003}),
        };
        return (status, json_response(status, &body, &[]));
    }
    let mut page: Vec<Value> = state
        .history
        .get(channel)
        .into_iter()
        .flatten()
        .filter(|m| id(m).is_some_and(|id| id > after))
        .cloned()
        .collect();
    page.sort_by_key(|m| id(m));
    page.truncate(limit.clamp(1, 100) as usize);
    page.reverse();
    (200, json_response(200, &Value::Array(page), &[]))
}
