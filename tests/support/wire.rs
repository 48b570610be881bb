//! What the fakes share about bodies on the wire: a small `multipart/form-data` parser (uploads
//! in) and streamed file answers (downloads out).
//!
//! ```ignore
//! if let Some(boundary) = wire::boundary(&headers) {
//!     let parts = wire::parse_multipart(&body, &boundary)?;    // Vec<Part>, in order
//!     let fields = wire::text_fields(&parts);                  // {"chat_id": 42, "caption": "hi"}
//!     let file = parts.iter().find(|p| p.is_file());            // name, filename, data
//! }
//! return wire::streamed(bytes);   // 200, content-length set, written in 64 KiB chunks
//! ```
//!
//! The parser takes what reqwest writes (teloxide, serenity and model clients all use it):
//! CRLF line ends, `Content-Disposition: form-data; name="..."; filename="..."` with
//! backslash-escaped quotes, `name*=utf-8''<percent-encoded>` for names reqwest had to encode,
//! and an optional `Content-Type` per part. It needs the whole body in memory, which is what
//! the fakes have anyway.

use std::convert::Infallible;
use std::fmt;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};

/// The size of the pieces [`streamed`] writes.
pub const CHUNK: usize = 64 * 1024;

/// One part of a `multipart/form-data` body.
#[derive(Clone)]
pub struct Part {
    /// The form field name (`chat_id`, `files[0]`, a teloxide attach id, ...).
    pub name: String,
    /// The `filename` parameter: set (possibly empty) for file parts, `None` for text fields.
    pub filename: Option<String>,
    /// The part's own `Content-Type`, if it has one.
    pub content_type: Option<String>,
    /// The part's bytes.
    pub data: Bytes,
}

impl fmt::Debug for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Part")
            .field("name", &self.name)
            .field("filename", &self.filename)
            .field("content_type", &self.content_type)
            .field("size", &self.data.len())
            .finish()
    }
}

impl Part {
    /// Whether this part is a file (it has a `filename`).
    pub fn is_file(&self) -> bool {
        self.filename.is_some()
    }

    /// The bytes as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }

    /// `{"field", "filename", "size", "content_type"}`: a file part as the fakes record it.
    pub fn describe(&self) -> Value {
        json!({"field": self.name, "filename": self.filename, "size": self.data.len(),
               "content_type": self.content_type})
    }
}

/// The boundary of a `multipart/form-data` request, `None` for any other content type.
pub fn boundary(headers: &HeaderMap) -> Option<String> {
    let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let (essence, params) = content_type.split_once(';')?;
    if !essence.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    header_params(params)
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("boundary"))
        .map(|(_, value)| value)
        .filter(|b| !b.is_empty())
}

/// The parts of a multipart body, in order; an error describes what is malformed.
pub fn parse_multipart(body: &Bytes, boundary: &str) -> Result<Vec<Part>, String> {
    let delimiter = format!("--{boundary}").into_bytes();
    let next_delimiter = format!("\r\n--{boundary}").into_bytes();
    let mut pos = find(body, &delimiter, 0).ok_or("no opening boundary")? + delimiter.len();
    let mut parts = Vec::new();
    loop {
        if body[pos..].starts_with(b"--") {
            return Ok(parts);
        }
        while matches!(body.get(pos), Some(b' ' | b'\t')) {
            pos += 1;
        }
        if !body[pos..].starts_with(b"\r\n") {
            return Err(format!("no CRLF after the boundary at byte {pos}"));
        }
        pos += 2;
        let (headers, data_start) = if body[pos..].starts_with(b"\r\n") {
            (&body[pos..pos], pos + 2)
        } else {
            let end = find(body, b"\r\n\r\n", pos).ok_or("unterminated part headers")?;
            (&body[pos..end], end + 4)
        };
        let data_end = find(body, &next_delimiter, data_start).ok_or("unterminated part")?;
        parts.push(part(headers, body.slice(data_start..data_end))?);
        pos = data_end + next_delimiter.len();
    }
}

/// The text fields of a form as a JSON object, in order. A value that reads as a JSON number,
/// boolean, object or array becomes that (`"42"` → `42`, `{"message_id":5}` → an object);
/// anything else stays a string. File parts are left out.
pub fn text_fields(parts: &[Part]) -> Map<String, Value> {
    parts
        .iter()
        .filter(|p| !p.is_file())
        .map(|p| (p.name.clone(), form_value(&p.text())))
        .collect()
}

/// A text field's value as JSON (see [`text_fields`]).
pub fn form_value(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::Object(_) | Value::Array(_))) => v,
        _ => Value::String(text.to_owned()),
    }
}

/// A 200 answer carrying `bytes` as `application/octet-stream`, with `content-length` set,
/// written in [`CHUNK`]-sized pieces (a large file is not one write).
pub fn streamed(bytes: Bytes) -> Response {
    let len = bytes.len();
    let chunks: Vec<Result<Bytes, Infallible>> = (0..len)
        .step_by(CHUNK)
        .map(|start| Ok(bytes.slice(start..(start + CHUNK).min(len))))
        .collect();
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, len)
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .expect("streamed response")
}

/// One part from its header block and its data.
fn part(headers: &[u8], data: Bytes) -> Result<Part, String> {
    let headers = String::from_utf8_lossy(headers);
    let mut disposition = None;
    let mut content_type = None;
    for line in headers.split("\r\n").filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad part header {line:?}"))?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-disposition" => disposition = Some(value.trim().to_owned()),
            "content-type" => content_type = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let disposition = disposition.ok_or("a part without Content-Disposition")?;
    let (kind, params) = disposition.split_once(';').unwrap_or((&disposition, ""));
    if !kind.trim().eq_ignore_ascii_case("form-data") {
        return Err(format!("not form-data: {disposition:?}"));
    }
    let params = header_params(params);
    let param = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let name = match (param("name"), param("name*")) {
        (Some(name), _) => name,
        (None, Some(encoded)) => decode_ext_value(&encoded),
        (None, None) => return Err(format!("a part without a name: {disposition:?}")),
    };
    Ok(Part {
        name,
        filename: param("filename"),
        content_type,
        data,
    })
}

/// `key=value` pairs after a header's first `;`, separated by `;`; quoted values are
/// unquoted (backslash escapes resolved). Keys are lowercase.
fn header_params(params: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = params.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ';' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            return out;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        }
        value.extend(chars.by_ref().take_while(|c| *c != ';'));
        out.push((key.trim().to_ascii_lowercase(), value.trim_end().to_owned()));
    }
}

/// An RFC 8187 value (`utf-8''files%5B0%5D`) decoded.
fn decode_ext_value(value: &str) -> String {
    let encoded = value.splitn(3, '\'').nth(2).unwrap_or(value);
    percent_encoding::percent_decode_str(encoded)
        .decode_utf8_lossy()
        .into_owned()
}

/// The first position of `needle` in `haystack` at or after `from`.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let last = haystack.len().checked_sub(needle.len())?;
    let mut i = from;
    while i <= last {
        i += haystack[i..=last].iter().position(|&b| b == needle[0])?;
        if haystack[i..].starts_with(needle) {
            return Some(i);
        }
        i += 1;
    }
    None
}
