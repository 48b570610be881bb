//! Files in the fake Telegram: `getFile` and downloads of the files added with
//! [`FakeTelegram::add_file`], and the multipart uploads of `sendPhoto` / `sendDocument` /
//! `sendVoice` / `sendAudio`, answered with a full `Message` carrying the media.
//!
//! teloxide uploads a file as a text field naming it (`document` = `attach://<id>`) plus a file
//! part named `<id>` (a random uuid); a client may also put the file part under the parameter's
//! own name. Either way the recorded body gets the file as `"file": {"field", "filename",
//! "size", "content_type", "param"}`.
//!
//! [`FakeTelegram::add_file`]: super::FakeTelegram::add_file

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::{Value, json};

use super::{
    Shared, error, injected_response, invalid_file_id_body, mark_failed, ok, record, sent_message,
    wire,
};

/// A file `getFile` knows and the download route serves.
pub(super) struct StoredFile {
    path: String,
    bytes: Bytes,
    /// The `file_size` `getFile` reports.
    reported_size: u64,
}

/// Stores a downloadable file under `file_id`; returns its `file_path`.
pub(super) fn store_file(
    shared: &Shared,
    file_id: &str,
    bytes: Bytes,
    reported_size: u64,
) -> String {
    let n = shared.next_file.fetch_add(1, Ordering::SeqCst);
    let path = format!("files/{n}/{file_id}");
    let file = StoredFile {
        path: path.clone(),
        bytes,
        reported_size,
    };
    shared
        .state
        .lock()
        .unwrap()
        .files
        .insert(file_id.to_owned(), file);
    path
}

/// `getFile {file_id}`: the `File` object, or 400 "invalid file_id".
pub(super) fn get_file(shared: &Shared, body: &Value) -> Response {
    let file_id = body
        .get("file_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let state = shared.state.lock().unwrap();
    match state.files.get(file_id) {
        Some(file) => ok(
            json!({"file_id": file_id, "file_unique_id": unique_id(file_id),
            "file_size": file.reported_size, "file_path": file.path}),
        ),
        None => error(400, invalid_file_id_body()),
    }
}

/// `GET /file/bot<token>/<file_path>`: the file's bytes, streamed (teloxide percent-encodes the
/// `/` of the path; axum decodes it). Recorded as a call of method `file` with body
/// `{"file_path": ...}`; faults injected for `file` apply. Unknown paths get 404.
pub(super) async fn download(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    let token = bot.strip_prefix("bot").unwrap_or(&bot);
    let recorded = record(&shared, "file", token, &json!({"file_path": path}));
    if let Some(response) = injected_response(&shared, recorded.injected).await {
        return response;
    }
    let bytes = {
        let state = shared.state.lock().unwrap();
        let file = state.files.values().find(|f| f.path == path);
        file.map(|f| f.bytes.clone())
    };
    match bytes {
        Some(bytes) => wire::streamed(bytes),
        None => {
            mark_failed(&shared, recorded.index);
            error(
                404,
                json!({"ok": false, "error_code": 404, "description": "Not Found"}),
            )
        }
    }
}

/// The recorded body of a multipart call (text fields, plus `file` describing the uploaded
/// file of the method's media parameter) and that file's part.
pub(super) fn form_body(
    method: &str,
    body: &Bytes,
    boundary: &str,
) -> Result<(Value, Option<wire::Part>), String> {
    let parts = wire::parse_multipart(body, boundary)?;
    let mut fields = wire::text_fields(&parts);
    let param = media_param(method);
    // `attach://<part>` names the part; a `file_id` or URL means nothing was uploaded.
    let file_field = match param.map(|p| (p, fields.get(p))) {
        Some((_, Some(Value::String(value)))) => value.strip_prefix("attach://"),
        Some((_, Some(_))) | None => None,
        Some((param, None)) => Some(param),
    };
    let file = file_field.and_then(|name| {
        parts
            .iter()
            .find(|p| p.is_file() && p.name == name)
            .cloned()
    });
    if let Some(file) = &file {
        let mut described = file.describe();
        described["param"] = json!(param);
        fields.insert("file".into(), described);
    }
    Ok((Value::Object(fields), file))
}

/// The media parameter of an upload method (`senddocument` → `document`).
fn media_param(method: &str) -> Option<&'static str> {
    match method {
        "sendphoto" => Some("photo"),
        "senddocument" => Some("document"),
        "sendvoice" => Some("voice"),
        "sendaudio" => Some("audio"),
        _ => None,
    }
}

/// `sendPhoto` / `sendDocument` / `sendVoice` / `sendAudio`: a full `Message` with the media
/// (and `caption`). An uploaded file is kept (see `FakeTelegram::uploads`) and registered for
/// `getFile` under the new `file_id`; a file sent by `file_id` keeps that id.
pub(super) fn send_media(
    shared: &Shared,
    method: &str,
    body: &Value,
    upload: Option<wire::Part>,
) -> Response {
    let Some(param) = media_param(method) else {
        return error(
            400,
            json!({"ok": false, "error_code": 400,
            "description": "Bad Request: not a media method"}),
        );
    };
    let id = shared.next_sent_id.fetch_add(1, Ordering::SeqCst);
    let sent_id = body.get(param).and_then(Value::as_str);
    let (file_id, size) = match (&upload, sent_id) {
        (Some(part), _) => {
            let file_id = format!("sent-{param}-{id}");
            let size = part.data.len() as u64;
            store_file(shared, &file_id, part.data.clone(), size);
            let upload = (method.to_owned(), part.data.clone());
            shared.state.lock().unwrap().uploads.push(upload);
            (file_id, size)
        }
        (None, Some(file_id)) if !file_id.starts_with("attach://") => {
            let state = shared.state.lock().unwrap();
            let size = state.files.get(file_id).map_or(0, |f| f.bytes.len() as u64);
            (file_id.to_owned(), size)
        }
        (None, _) => {
            return error(
                400,
                json!({"ok": false, "error_code": 400,
                "description": format!("Bad Request: there is no {param} in the request")}),
            );
        }
    };
    let mut message = sent_message(id, body);
    let obj = message.as_object_mut().expect("message object");
    obj.remove("text");
    if let Some(caption) = body.get("caption") {
        obj.insert("caption".into(), json!(as_text(caption)));
    }
    let meta = media_meta(param, &file_id, size, upload.as_ref());
    obj.insert(param.into(), meta);
    ok(message)
}

/// The media object of a sent message (`photo` is an array of one size).
fn media_meta(param: &str, file_id: &str, size: u64, upload: Option<&wire::Part>) -> Value {
    let mut meta = json!({"file_id": file_id, "file_unique_id": unique_id(file_id),
        "file_size": size});
    let content_type = upload.and_then(|p| p.content_type.clone());
    let file_name = upload
        .and_then(|p| p.filename.clone())
        .filter(|n| !n.is_empty());
    match param {
        "photo" => {
            meta["width"] = json!(800);
            meta["height"] = json!(600);
            return json!([meta]);
        }
        "document" => {
            if let Some(name) = file_name {
                meta["file_name"] = json!(name);
            }
            if let Some(content_type) = content_type {
                meta["mime_type"] = json!(content_type);
            }
        }
        _ => {
            let default_mime = if param == "voice" {
                "audio/ogg"
            } else {
                "audio/mpeg"
            };
            meta["duration"] = json!(1);
            meta["mime_type"] = json!(content_type.as_deref().unwrap_or(default_mime));
            if param == "audio"
                && let Some(name) = file_name
            {
                meta["file_name"] = json!(name);
            }
        }
    }
    meta
}

/// A `file_unique_id` for a `file_id`.
fn unique_id(file_id: &str) -> String {
    format!("u-{file_id}")
}

/// A form value as the text it was sent as (`42` → `"42"`).
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
