//! The fake's REST side: one axum fallback handler that records every request and answers the
//! routes serenity and the adapter use (see the table in the module docs of `fake_discord`),
//! and the attachment "CDN" on the same port.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

use super::msg::{bot_user, user};
use super::{BOT_ID, PostedMessage, RecordedRequest, Shared, query_param};
use crate::support::wire;

/// What is percent-encoded in attachment URLs: all but RFC 3986's unreserved characters.
const FILENAME_ENCODE_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

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
    let (body_json, files) = match wire::boundary(&headers) {
        Some(boundary) => multipart_body(&body, &boundary),
        None => (json_body(&body), Vec::new()),
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
    let request = Request {
        method: &method,
        path: &path,
        query: &query,
        headers: &headers,
        body: &body_json,
    };
    let (status, resp) = answer(&shared, request, files);
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

/// A JSON request body: `Null` when empty, a JSON string with the raw text when not JSON.
fn json_body(body: &Bytes) -> Value {
    if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    }
}

/// A multipart body as recorded, and its file parts: the `payload_json` object (else an
/// object of the text fields) with the other text fields and `attachments_uploaded` added.
fn multipart_body(body: &Bytes, boundary: &str) -> (Value, Vec<wire::Part>) {
    let parts = match wire::parse_multipart(body, boundary) {
        Ok(parts) => parts,
        Err(e) => {
            return (
                Value::String(format!("malformed multipart: {e}")),
                Vec::new(),
            );
        }
    };
    let mut fields = wire::text_fields(&parts);
    let mut recorded = match fields.remove("payload_json") {
        Some(Value::Object(payload)) => payload,
        Some(other) => serde_json::Map::from_iter([("payload_json".to_owned(), other)]),
        None => serde_json::Map::new(),
    };
    recorded.extend(fields);
    let files: Vec<wire::Part> = parts.into_iter().filter(wire::Part::is_file).collect();
    let uploaded = files.iter().map(wire::Part::describe).collect();
    recorded.insert("attachments_uploaded".into(), Value::Array(uploaded));
    (Value::Object(recorded), files)
}

/// What [`answer`] looks at of a request.
struct Request<'a> {
    method: &'a Method,
    path: &'a str,
    query: &'a str,
    headers: &'a HeaderMap,
    body: &'a Value,
}

/// The response (and its status, for the record) to one REST request; `files` are the file
/// parts of a multipart request.
fn answer(shared: &Shared, request: Request<'_>, files: Vec<wire::Part>) -> (u16, Response) {
    let Request {
        method,
        path,
        query,
        headers,
        body,
    } = request;
    let reply = |status: u16, body: Value| (status, json_response(status, &body, &[]));
    if method == Method::GET && path.starts_with("/attachments/") {
        return attachment(shared, path);
    }
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
        ("POST", ["users", "@me", "channels"]) => {
            let recipient = body["recipient_id"].as_str().unwrap_or_default();
            let id = super::dm_channel(recipient);
            reply(
                200,
                json!({"id": id, "type": 1, "recipients": [user(recipient, "member")]}),
            )
        }
        ("POST", ["channels", channel, "messages"]) => post_message(shared, channel, body, files),
        ("PATCH", ["channels", channel, "messages", message]) => {
            edit_message(shared, channel, message, body)
        }
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

/// `GET /attachments/...`: the stored bytes, streamed, or 404.
fn attachment(shared: &Shared, path: &str) -> (u16, Response) {
    match shared.state().attachments.get(path).cloned() {
        Some(bytes) => (200, wire::streamed(bytes)),
        None => {
            let body = json!({"message": "404: Not Found", "code": 0});
            (404, json_response(404, &body, &[]))
        }
    }
}

/// Stores `bytes` as an attachment of `channel`; returns its id and its URL on the fake.
pub(super) fn store_attachment(
    shared: &Shared,
    channel: &str,
    filename: &str,
    bytes: Bytes,
) -> (String, String) {
    let id = (shared.next_attachment.fetch_add(1, Ordering::SeqCst) + 1).to_string();
    let encoded = utf8_percent_encode(filename, FILENAME_ENCODE_SET);
    let path = format!("/attachments/{channel}/{id}/{encoded}");
    let url = format!("{}{path}", shared.rest_base);
    shared.update(|s| s.attachments.insert(path, bytes));
    (id, url)
}

/// The attachment objects of a created message: each uploaded file stored (downloadable at
/// its `url`) and kept for `FakeDiscord::uploaded_files`.
fn uploaded_attachments(shared: &Shared, channel: &str, files: Vec<wire::Part>) -> Vec<Value> {
    let mut attachments = Vec::new();
    for file in files {
        let filename = file.filename.clone().unwrap_or_default();
        let (id, url) = store_attachment(shared, channel, &filename, file.data.clone());
        let mut attachment = json!({"id": id, "filename": filename, "size": file.data.len(),
                                    "url": url, "proxy_url": url});
        if let Some(content_type) = &file.content_type {
            attachment["content_type"] = json!(content_type);
        }
        shared.update(|s| s.uploads.push((filename, file.data)));
        attachments.push(attachment);
    }
    attachments
}

/// `POST /channels/{id}/messages`: the next fault, or a created message (with the uploaded
/// `files` as its attachments).
fn post_message(
    shared: &Shared,
    channel: &str,
    body: &Value,
    files: Vec<wire::Part>,
) -> (u16, Response) {
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
        "mention_everyone": false, "mentions": [], "mention_roles": [],
        "attachments": uploaded_attachments(shared, channel, files),
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

/// `PATCH /channels/{id}/messages/{message}`: the next fault, or the message with its new
/// `content` (requests are recorded like every other: `requests_to("PATCH", ...)`).
fn edit_message(shared: &Shared, channel: &str, message: &str, body: &Value) -> (u16, Response) {
    if let Some(fault) = shared.update(|s| s.faults.pop_front()) {
        return (
            fault.status,
            json_response(fault.status, &fault.body, &fault.headers),
        );
    }
    let edited = json!({
        "id": message, "channel_id": channel, "author": bot_user(),
        "content": body["content"].as_str().unwrap_or_default(),
        "timestamp": now_timestamp(), "edited_timestamp": now_timestamp(), "tts": false,
        "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
        "embeds": [], "pinned": false, "type": 0,
    });
    (200, json_response(200, &edited, &[]))
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
