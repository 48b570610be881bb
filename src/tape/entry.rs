//! One tape entry and the line format it is stored in.
//!
//! Every entry is one JSON object on one line, fields in the fixed order
//! `{"id":…,"kind":…,"payload":…,"meta":…,"date":…}`. Because we always write that order, the
//! index can read an entry's `id` and `kind` from the line prefix without parsing the line
//! (`fast_header`); lines written by anything else fall back to a full parse
//! (`full_header`, `parse_entry`), which validates: `id` an unsigned integer, `kind` a string,
//! `payload` an object, missing/invalid `meta` → `{}`.
//!
//! [`Kind`] is the entry's `kind` field as a type; its names are the ones written on the line
//! ([`Kind::as_str`]). A kind Bub does not write is read as [`Kind::Other`] and kept as
//! written.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// One entry of a tape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TapeEntry {
    /// Per-tape id, assigned on append as the largest id so far + 1 (1 for an empty tape).
    pub id: u64,
    /// What the entry records.
    pub kind: Kind,
    /// Kind-specific object: `{role, content}` for a message, `{name, state}` for an anchor,
    /// `{name, data}` for an event, `{calls}` / `{results}` for tool calls and results.
    pub payload: Value,
    /// Free-form object, e.g. `{"run_id": "…"}`; `{}` when there is none.
    pub meta: Value,
    /// Write time, RFC 3339 UTC with milliseconds (`2026-01-02T03:04:05.678Z`).
    pub date: String,
}

impl TapeEntry {
    /// The `name` of an `anchor` or `event` payload.
    pub fn name(&self) -> Option<&str> {
        self.payload.get("name").and_then(Value::as_str)
    }

    /// Whether this is an `event` entry named `event`.
    pub fn is_event(&self, event: super::Event) -> bool {
        self.kind == Kind::Event && self.name() == Some(event.as_str())
    }

    /// The `state` of an anchor payload (`None` when absent).
    pub(crate) fn state(&self) -> Option<&Value> {
        self.payload.get("state")
    }

    /// The JSON line (with its trailing `\n`) this entry is stored as.
    pub(crate) fn write_line(&self, out: &mut Vec<u8>) {
        serde_json::to_writer(&mut *out, self).expect("serializing a JSON value cannot fail");
        out.push(b'\n');
    }
}

/// The current time in the tape's date format.
pub(crate) fn now_date() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// What an entry records: its `kind` field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `{name, state?}`: where the model's context starts.
    Anchor,
    /// `{name, data}`: something that happened ([`super::Event`] names it).
    Event,
    /// A chat message, `{role, content}`.
    Message,
    /// `{content}`: the system prompt of a model call.
    System,
    /// `{calls}`: the tool calls of a model answer.
    ToolCall,
    /// `{results}`: their results, in the same order.
    ToolResult,
    /// `{kind, message}`: a model call that failed.
    Error,
    /// A kind Bub does not write (another writer's), kept as written.
    Other(Box<str>),
}

impl Kind {
    /// Every kind Bub writes.
    pub(crate) const WRITTEN: [Kind; 7] = [
        Kind::Anchor,
        Kind::Event,
        Kind::Message,
        Kind::System,
        Kind::ToolCall,
        Kind::ToolResult,
        Kind::Error,
    ];

    /// The name on the line.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Anchor => "anchor",
            Self::Event => "event",
            Self::Message => "message",
            Self::System => "system",
            Self::ToolCall => "tool_call",
            Self::ToolResult => "tool_result",
            Self::Error => "error",
            Self::Other(name) => name,
        }
    }

    /// The kind a line names (the bytes between the quotes, unescaped).
    pub(crate) fn from_bytes(kind: &[u8]) -> Self {
        match kind {
            b"anchor" => Self::Anchor,
            b"event" => Self::Event,
            b"message" => Self::Message,
            b"system" => Self::System,
            b"tool_call" => Self::ToolCall,
            b"tool_result" => Self::ToolResult,
            b"error" => Self::Error,
            other => Self::Other(String::from_utf8_lossy(other).into()),
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(Self::from_bytes(name.as_bytes()))
    }
}

const ID_PREFIX: &[u8] = b"{\"id\":";
const KIND_PREFIX: &[u8] = b",\"kind\":\"";
const PAYLOAD_PREFIX: &[u8] = b",\"payload\":";

/// Reads `id` and `kind` from a line in our own field order, without parsing it. Returns the
/// byte position where the payload value starts. `None` when the line is not in that exact
/// shape (or obviously incomplete: it must end with `}`), in which case callers fall back to
/// [`full_header`].
pub(crate) fn fast_header(line: &[u8]) -> Option<(u64, Kind, usize)> {
    if line.last() != Some(&b'}') {
        return None;
    }
    let rest = line.strip_prefix(ID_PREFIX)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let mut id: u64 = 0;
    for &d in &rest[..digits] {
        id = id.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    let rest = rest[digits..].strip_prefix(KIND_PREFIX)?;
    let kind_len = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest[kind_len] != b'"' {
        return None;
    }
    let kind = Kind::from_bytes(&rest[..kind_len]);
    let rest = rest[kind_len + 1..].strip_prefix(PAYLOAD_PREFIX)?;
    if rest.first() != Some(&b'{') {
        return None;
    }
    Some((id, kind, line.len() - rest.len()))
}

/// Parses and validates a line fully; `(id, kind)` of a valid entry.
pub(crate) fn full_header(line: &[u8]) -> Option<(u64, Kind)> {
    let entry = parse_entry(line)?;
    Some((entry.id, entry.kind))
}

/// Parses one line into an entry, or `None` when it is not a valid entry (invalid JSON, `id`
/// not an unsigned integer, `kind` not a string, `payload` not an object). A missing or
/// non-object `meta` becomes `{}`; a missing `date` is derived from a `timestamp` (Unix
/// seconds, as older tapes have it) when present, else empty.
pub(crate) fn parse_entry(line: &[u8]) -> Option<TapeEntry> {
    let Value::Object(mut obj) = serde_json::from_slice::<Value>(line).ok()? else {
        return None;
    };
    let id = obj.get("id")?.as_u64()?;
    let Value::String(kind) = obj.remove("kind")? else {
        return None;
    };
    let kind = Kind::from_bytes(kind.as_bytes());
    let payload = obj.remove("payload")?;
    if !payload.is_object() {
        return None;
    }
    let meta = match obj.remove("meta") {
        Some(m @ Value::Object(_)) => m,
        _ => Value::Object(Map::new()),
    };
    let date = match obj.get("date") {
        Some(Value::String(d)) => d.clone(),
        _ => obj
            .get("timestamp")
            .and_then(Value::as_f64)
            .and_then(|ts| chrono::DateTime::from_timestamp_millis((ts * 1000.0) as i64))
            .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default(),
    };
    Some(TapeEntry {
        id,
        kind,
        payload,
        meta,
        date,
    })
}

/// Byte ranges of the raw `payload` and `meta` JSON values in a line of our own field order
/// (for search, which must not parse every line). `None` when the line has another shape.
pub(crate) fn payload_meta_spans(
    line: &[u8],
) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let (_, _, payload_start) = fast_header(line)?;
    let payload_end = value_end(line, payload_start)?;
    let meta_start = payload_end + line[payload_end..].strip_prefix(b",\"meta\":").map(|_| 8)?;
    let meta_end = value_end(line, meta_start)?;
    Some((payload_start..payload_end, meta_start..meta_end))
}

/// The end (exclusive) of the JSON value starting at `start`, found by a string-aware bracket
/// scan (no validation beyond balance).
fn value_end(line: &[u8], start: usize) -> Option<usize> {
    let first = *line.get(start)?;
    if first != b'{' && first != b'[' {
        if first == b'"' {
            return string_end(line, start);
        }
        let len = line[start..]
            .iter()
            .position(|&b| matches!(b, b',' | b'}' | b']'))?;
        return Some(start + len);
    }
    let mut depth = 0usize;
    let mut i = start;
    while i < line.len() {
        match line[i] {
            b'"' => {
                i = string_end(line, i)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The end (exclusive, after the closing quote) of the JSON string starting at `start`.
fn string_end(line: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < line.len() {
        match line[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(e: &TapeEntry) -> Vec<u8> {
        let mut out = Vec::new();
        e.write_line(&mut out);
        out.pop();
        out
    }

    fn sample() -> TapeEntry {
        TapeEntry {
            id: 42,
            kind: Kind::Message,
            payload: json!({"role":"user","content":"a \"quoted\" {brace} [x]"}),
            meta: json!({"run_id":"r1","nested":{"a":[1,2]}}),
            date: now_date(),
        }
    }

    #[test]
    fn serializes_fields_in_fixed_order() {
        let e = sample();
        let text = String::from_utf8(line(&e)).unwrap();
        assert!(
            text.starts_with(r#"{"id":42,"kind":"message","payload":{"role":"user""#),
            "{text}"
        );
        let meta_at = text.find(r#","meta":"#).unwrap();
        let date_at = text.find(r#","date":""#).unwrap();
        assert!(meta_at < date_at);
        assert_eq!(parse_entry(text.as_bytes()).unwrap(), e);
    }

    #[test]
    fn fast_header_reads_prefix_and_rejects_other_shapes() {
        let l = line(&sample());
        let (id, kind, _) = fast_header(&l).unwrap();
        assert_eq!((id, kind), (42, Kind::Message));
        assert!(fast_header(&l[..l.len() - 3]).is_none(), "torn line");
        assert!(fast_header(br#"{"kind":"message","id":1,"payload":{}}"#).is_none());
        assert!(fast_header(br#"{"id":1,"kind":"event","payload":"x"}"#).is_none());
        assert!(fast_header(br#"{"id":99999999999999999999,"kind":"a","payload":{}}"#).is_none());
    }

    #[test]
    fn full_parse_validates_fields() {
        assert!(parse_entry(br#"{"id":"1","kind":"event","payload":{}}"#).is_none());
        assert!(parse_entry(br#"{"id":1,"kind":3,"payload":{}}"#).is_none());
        assert!(parse_entry(br#"{"id":1,"kind":"event","payload":[]}"#).is_none());
        assert!(parse_entry(b"not json").is_none());
        let e = parse_entry(br#"{"kind":"event","id":7,"payload":{},"meta":5,"timestamp":1.5}"#)
            .unwrap();
        assert_eq!(e.meta, json!({}));
        assert_eq!(e.date, "1970-01-01T00:00:01.500Z");
    }

    #[test]
    fn every_kind_keeps_its_name_and_other_writers_kinds_are_kept() {
        for kind in Kind::WRITTEN {
            assert_eq!(Kind::from_bytes(kind.as_str().as_bytes()), kind);
        }
        let line = br#"{"id":3,"kind":"reasoning","payload":{},"meta":{},"date":"d"}"#;
        let (id, kind, _) = fast_header(line).unwrap();
        assert_eq!((id, &kind), (3, &Kind::Other("reasoning".into())));
        let entry = parse_entry(line).unwrap();
        assert_eq!(entry.kind, kind);
        let mut written = Vec::new();
        entry.write_line(&mut written);
        assert_eq!(
            &written[..written.len() - 1],
            line,
            "written back as it was"
        );
    }

    #[test]
    fn spans_cover_payload_and_meta_exactly() {
        let e = sample();
        let l = line(&e);
        let (p, m) = payload_meta_spans(&l).unwrap();
        assert_eq!(&l[p], serde_json::to_string(&e.payload).unwrap().as_bytes());
        assert_eq!(&l[m], serde_json::to_string(&e.meta).unwrap().as_bytes());
    }
}
