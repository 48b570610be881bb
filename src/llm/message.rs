//! The conversation of a model call, typed: [`ChatMessage`]s with a role, text and image parts,
//! the assistant's tool calls and tool results. Every provider translates it at its edge
//! (`openai`, `anthropic`, `gemini`); nothing else in Bub depends on a provider's wire format.
//!
//! The agent keeps its conversation on the tape in OpenAI's shape, so [`ChatMessage::from_openai`]
//! is the one conversion from that shape; [`ToolCall::to_record`] is the form a call is written
//! to the tape in (Gemini's `thought_signature` included, so it comes back with the call).

use serde_json::{Value, json};

use super::ToolCall;

/// Who speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool's result, answering one call of the assistant message before it.
    Tool,
}

/// A piece of a message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    /// An inline image: its MIME type (`image/jpeg`) and its bytes in base64.
    Image {
        mime: String,
        data: String,
    },
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    /// Text and images, in order (a tool result is one text part).
    pub content: Vec<Part>,
    /// The calls an assistant message asks for.
    pub tool_calls: Vec<ToolCall>,
    /// A tool result: the id of the call it answers.
    pub tool_call_id: Option<String>,
    /// A tool result: the name of the tool, as offered to the model (`fs_read`).
    pub name: Option<String>,
}

impl ChatMessage {
    fn new(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![Part::Text(text.into())],
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, text)
    }

    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, text)
    }

    /// A user message with `text` and images `(mime, base64 data)` after it.
    pub fn user_with_images(text: impl Into<String>, images: Vec<(String, String)>) -> Self {
        let mut message = Self::user(text);
        let images = images
            .into_iter()
            .map(|(mime, data)| Part::Image { mime, data });
        message.content.extend(images);
        message
    }

    /// An assistant message: its text (possibly empty) and the calls it asks for.
    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls,
            ..Self::new(Role::Assistant, text)
        }
    }

    /// The result of call `call_id` of tool `name`.
    pub fn tool_result(
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            name: Some(name.into()),
            ..Self::new(Role::Tool, content)
        }
    }

    /// The text parts, joined.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                Part::Image { .. } => None,
            })
            .collect()
    }

    /// Whether any part is an image.
    pub fn has_images(&self) -> bool {
        self.content.iter().any(|p| matches!(p, Part::Image { .. }))
    }

    /// The images, as `(mime, base64 data)`.
    pub fn images(&self) -> impl Iterator<Item = (&str, &str)> {
        self.content.iter().filter_map(|p| match p {
            Part::Image { mime, data } => Some((mime.as_str(), data.as_str())),
            Part::Text(_) => None,
        })
    }

    /// A message in OpenAI's chat shape, as the tape keeps them: `role`; `content` a string or
    /// an array of `text` and `image_url` parts (a `data:` URL becomes an image; another URL a
    /// text note with it); an assistant's `tool_calls`; a tool's `tool_call_id` and `name`.
    /// An unknown role reads as `user`; what is missing reads as empty.
    pub fn from_openai(message: &Value) -> Self {
        let role = match message.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => Role::System,
            Some("assistant") => Role::Assistant,
            Some("tool") => Role::Tool,
            _ => Role::User,
        };
        let content = match message.get("content") {
            Some(Value::String(text)) => vec![Part::Text(text.clone())],
            Some(Value::Array(parts)) => parts.iter().filter_map(part_from_openai).collect(),
            _ => vec![Part::Text(String::new())],
        };
        let tool_calls = match message.get("tool_calls") {
            Some(Value::Array(calls)) => calls
                .iter()
                .enumerate()
                .filter_map(|(i, c)| ToolCall::from_openai(i, c))
                .collect(),
            _ => Vec::new(),
        };
        let text = |key: &str| message.get(key).and_then(Value::as_str).map(str::to_owned);
        Self {
            role,
            content,
            tool_calls,
            tool_call_id: text("tool_call_id"),
            name: text("name"),
        }
    }
}

/// One OpenAI content part.
fn part_from_openai(part: &Value) -> Option<Part> {
    if let Some(text) = part.get("text").and_then(Value::as_str) {
        return Some(Part::Text(text.to_owned()));
    }
    if let Some(text) = part.as_str() {
        return Some(Part::Text(text.to_owned()));
    }
    let url = part.pointer("/image_url/url").and_then(Value::as_str)?;
    Some(match parse_data_url(url) {
        Some((mime, data)) => Part::Image {
            mime: mime.to_owned(),
            data: data.to_owned(),
        },
        None => Part::Text(format!("[image: {url}]")),
    })
}

/// Adds `items` (blocks or parts) as a turn of `role`, merged into the last turn when it has
/// that role: the Anthropic and Gemini APIs want the roles to alternate.
pub(crate) fn push_turn<'a>(
    turns: &mut Vec<(&'a str, Vec<Value>)>,
    role: &'a str,
    items: Vec<Value>,
) {
    if items.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some((last, have)) if *last == role => have.extend(items),
        _ => turns.push((role, items)),
    }
}

/// `data:<mime>;base64,<data>` → `(mime, data)`.
pub(crate) fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let (head, data) = url.strip_prefix("data:")?.split_once(',')?;
    let mime = head.strip_suffix(";base64")?;
    Some((mime, data))
}

impl ToolCall {
    /// One entry of an OpenAI `tool_calls` array (the `index`-th): `None` without a function
    /// name. A missing id becomes `call_<index>`; `arguments` are kept as raw text.
    pub(crate) fn from_openai(index: usize, call: &Value) -> Option<Self> {
        let function = call.get("function").unwrap_or(&Value::Null);
        let name = function.get("name").and_then(Value::as_str)?;
        if name.is_empty() {
            return None;
        }
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map_or_else(|| format!("call_{index}"), str::to_owned);
        Some(Self {
            id,
            name: name.to_owned(),
            arguments: super::response::arguments_text(function.get("arguments")),
            thought_signature: call
                .get("thought_signature")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// The call as the tape records it: OpenAI's shape, plus `thought_signature` when the
    /// provider gave one.
    pub fn to_record(&self) -> Value {
        let mut call = json!({"id": self.id, "type": "function",
            "function": {"name": self.name, "arguments": self.arguments}});
        if let Some(signature) = &self.thought_signature {
            call["thought_signature"] = json!(signature);
        }
        call
    }

    /// The arguments as a JSON object (`{}` when they are not one: the tool's result says
    /// what was wrong with them).
    pub(crate) fn arguments_object(&self) -> Value {
        match serde_json::from_str::<Value>(&self.arguments) {
            Ok(args @ Value::Object(_)) => args,
            _ => json!({}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_messages_read_into_the_typed_model() {
        let user = ChatMessage::from_openai(&json!({"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]}));
        assert_eq!(
            user.content,
            [
                Part::Text("look".into()),
                Part::Image {
                    mime: "image/png".into(),
                    data: "AAAA".into()
                },
                Part::Text("[image: https://x/cat.png]".into()),
            ]
        );
        let call = json!({"id": "c1", "type": "function", "thought_signature": "sig",
            "function": {"name": "fs_read", "arguments": "{\"path\":\"a\"}"}});
        let assistant = ChatMessage::from_openai(
            &json!({"role": "assistant", "content": "", "tool_calls": [call]}),
        );
        assert_eq!(assistant.role, Role::Assistant);
        assert_eq!(
            assistant.tool_calls[0].thought_signature.as_deref(),
            Some("sig")
        );
        assert_eq!(assistant.tool_calls[0].to_record(), call);
        let tool = ChatMessage::from_openai(
            &json!({"role": "tool", "content": "x", "tool_call_id": "c1", "name": "fs_read"}),
        );
        assert_eq!(tool, ChatMessage::tool_result("c1", "fs_read", "x"));
    }

    #[test]
    fn arguments_that_are_not_an_object_read_as_empty() {
        let mut call = ToolCall {
            id: "c".into(),
            name: "n".into(),
            arguments: "{\"a\":1}".into(),
            thought_signature: None,
        };
        assert_eq!(call.arguments_object(), json!({"a": 1}));
        call.arguments = "[1".into();
        assert_eq!(call.arguments_object(), json!({}));
        assert_eq!(call.to_record().get("thought_signature"), None);
    }
}
