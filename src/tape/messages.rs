//! How tape entries become the model's [`ChatMessage`]s: a `message` from its payload (OpenAI's
//! shape, as the tape keeps it, with its notes), a `tool_call` as an assistant message with its
//! calls, a `tool_result` as one tool message per result (long results cut; a guest's view
//! withholding the tool work of turns that did not run as a guest), and the results a turn never
//! recorded filled in ([`super::context::NO_RESULT`]). The one place message payloads are parsed.

use serde_json::{Value, json};

use super::context::{NO_RESULT, View, WITHHELD};
use super::entry::{Kind, TapeEntry};
use super::output::cut;
use crate::llm::{ChatMessage, Part, Role, ToolCall};

/// In a guest's turn (`guest`), `entry` came from a turn that did not run as a guest (its `role`
/// meta; none on older tapes): its tool arguments and output are an owner's.
fn withheld(entry: &TapeEntry, guest: bool) -> bool {
    guest && entry.meta.get("role").and_then(Value::as_str) != Some("guest")
}

/// Maps entries (those after the last anchor) to chat messages, plus synthetic results for
/// unanswered tool calls.
#[cfg(test)]
pub(crate) fn select_messages(entries: impl IntoIterator<Item = TapeEntry>) -> Vec<ChatMessage> {
    let mut messages = Messages::default();
    entries
        .into_iter()
        .for_each(|e| messages.push(e, View::default()));
    let Messages { mut out, pending } = messages;
    out.extend(pending);
    out
}

/// Chat messages built entry by entry: those final so far, and the calls of the last
/// `tool_call` still waiting for their results.
#[derive(Debug, Default)]
pub(super) struct Messages {
    pub(super) out: Vec<ChatMessage>,
    /// The tool messages answering them until their results come ([`NO_RESULT`]).
    pub(super) pending: Vec<ChatMessage>,
}

impl Messages {
    /// Adds `entry` as `view` shows it: for a guest's turn, the arguments and results of tool
    /// calls of a turn that did not run as a guest are withheld ([`withheld`]); long results
    /// are cut ([`super::output::cut`]).
    pub(super) fn push(&mut self, entry: TapeEntry, view: View) {
        let guest = view.guest;
        let out = &mut self.out;
        match entry.kind {
            Kind::Message => {
                out.append(&mut self.pending);
                out.push(chat_message(&with_notes(entry.payload, &entry.meta)));
            }
            Kind::ToolCall => {
                out.append(&mut self.pending);
                let calls = entry.payload.get("calls").and_then(Value::as_array);
                if let Some(calls) = calls.filter(|c| !c.is_empty()) {
                    let withheld = withheld(&entry, guest);
                    let shown = calls.iter().enumerate().filter_map(|(i, call)| {
                        let mut call = ToolCall::from_openai(i, call)?;
                        if withheld {
                            // The call's name stays (the sequence must be valid), not its
                            // arguments.
                            call.arguments = "{}".to_owned();
                        }
                        Some(call)
                    });
                    out.push(ChatMessage::assistant("", shown.collect()));
                    self.pending = calls.iter().map(unanswered).collect();
                }
            }
            Kind::ToolResult => {
                let results = entry.payload.get("results").and_then(Value::as_array);
                let calls = std::mem::take(&mut self.pending);
                let results = results.map(Vec::as_slice).unwrap_or_default();
                let withheld = withheld(&entry, guest);
                let mut calls = calls.into_iter();
                for result in results {
                    let mut message = calls.next().unwrap_or_else(|| unanswered(&Value::Null));
                    let call_id = message.tool_call_id.as_deref();
                    let content = match withheld {
                        true => WITHHELD.to_owned(),
                        false => cut(result_content(result), view.max_result_chars, call_id),
                    };
                    message.content = vec![Part::Text(content)];
                    out.push(message);
                }
                out.extend(calls);
            }
            _ => {}
        }
    }
}

/// A user message as the model is shown it: the time its turn began on a first line, the
/// notes recorded with it (a working checkpoint, the details a `$hint` asked for) after it —
/// both from the entry's meta, so the tape keeps what the user wrote and the same entry is
/// always rendered to the same bytes.
fn with_notes(mut message: Value, meta: &Value) -> Value {
    let time = meta.get("time").and_then(Value::as_str);
    let notes = meta.get("notes").and_then(Value::as_array);
    if time.is_none() && notes.is_none() {
        return message;
    }
    let Some(text) = message.get("content").and_then(Value::as_str) else {
        return message;
    };
    let mut content = match time {
        Some(time) => format!("{time}\n{text}"),
        None => text.to_owned(),
    };
    for note in notes.into_iter().flatten().filter_map(Value::as_str) {
        content.push_str("\n\n");
        content.push_str(note);
    }
    message["content"] = json!(content);
    message
}

/// The tool message of a recorded `call` (its id and name, as recorded) while it has no result.
fn unanswered(call: &Value) -> ChatMessage {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    ChatMessage {
        tool_call_id: text(call.get("id")),
        name: text(call.pointer("/function/name")),
        ..ChatMessage::new(Role::Tool, NO_RESULT)
    }
}

/// A `message` entry's payload, a chat message in OpenAI's shape: `role` (`developer` reads as
/// system, an unknown role as user); `content` a string or an array of `text` and `image_url`
/// parts (a `data:` URL becomes an image, another URL a text note with it); an assistant's
/// `tool_calls`; a tool's `tool_call_id` and `name`; a user's saved `images`. What is missing
/// reads as empty.
pub(super) fn chat_message(payload: &Value) -> ChatMessage {
    let role = match payload.get("role").and_then(Value::as_str) {
        Some("system" | "developer") => Role::System,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        _ => Role::User,
    };
    let content = match payload.get("content") {
        Some(Value::String(text)) => vec![Part::Text(text.clone())],
        Some(Value::Array(parts)) => parts.iter().filter_map(part).collect(),
        _ => vec![Part::Text(String::new())],
    };
    let calls = payload.get("tool_calls").and_then(Value::as_array);
    let calls = calls.into_iter().flatten().enumerate();
    let text = |key: &str| payload.get(key).and_then(Value::as_str).map(str::to_owned);
    let images = payload.get("images").and_then(Value::as_array);
    ChatMessage {
        role,
        content,
        tool_calls: calls
            .filter_map(|(i, c)| ToolCall::from_openai(i, c))
            .collect(),
        tool_call_id: text("tool_call_id"),
        name: text("name"),
        images: images
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
    }
}

/// One OpenAI content part.
fn part(part: &Value) -> Option<Part> {
    if let Some(text) = part.get("text").and_then(Value::as_str) {
        return Some(Part::Text(text.to_owned()));
    }
    if let Some(text) = part.as_str() {
        return Some(Part::Text(text.to_owned()));
    }
    let url = part.pointer("/image_url/url").and_then(Value::as_str)?;
    Some(Part::image_url(url))
}

/// A string result as is; anything else as JSON text with `", "` and `": "` separators,
/// non-ASCII kept (how results have always been rendered, so the bytes stay the same).
fn result_content(result: &Value) -> String {
    match result {
        Value::String(s) => s.clone(),
        other => python_json(other),
    }
}

fn python_json(value: &Value) -> String {
    let mut out = String::new();
    write_python_json(value, &mut out);
    out
}

fn write_python_json(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push_str(": ");
                write_python_json(v, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}
