//! The conversation of a model call, typed: [`ChatMessage`]s with a role, text and image parts,
//! the assistant's tool calls and tool results. The agent holds its context in this form from
//! the tape to the provider; every provider translates it at its edge (`openai`, `anthropic`,
//! `gemini`); nothing else in Bub depends on a provider's wire format.
//!
//! [`OpenAiShape`] writes a message as an OpenAI chat message object: on the OpenAI wire, or as
//! the tape records it ([`ChatMessage::to_record`]: with the saved images' paths and Gemini's
//! `thought_signature` of a call, so they come back with the message). The tape reads its lines
//! back itself (`tape::context`); [`ToolCall::to_record`] is the form a call is recorded in.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
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

impl Role {
    /// The role's name in OpenAI's shape.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
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

impl Part {
    /// The part of an image at `url`: a `data:<mime>;base64,<data>` URL is the image, another
    /// URL a text note with it.
    pub(crate) fn image_url(url: &str) -> Part {
        let data = url.strip_prefix("data:").and_then(|u| u.split_once(','));
        match data.and_then(|(head, data)| Some((head.strip_suffix(";base64")?, data))) {
            Some((mime, data)) => Part::Image {
                mime: mime.to_owned(),
                data: data.to_owned(),
            },
            None => Part::Text(format!("[image: {url}]")),
        }
    }
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
    /// A user message: the images it brought, saved in the workspace (relative paths). Not
    /// sent as they are: the model loop shows the newest ones to a vision model as
    /// [`Part::Image`]s (`media::image::attach`) and clears the field before the call.
    pub images: Vec<String>,
}

impl ChatMessage {
    pub(crate) fn new(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![Part::Text(text.into())],
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            images: Vec::new(),
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
    pub(crate) fn has_images(&self) -> bool {
        self.content.iter().any(|p| matches!(p, Part::Image { .. }))
    }

    /// The message as the tape records it: OpenAI's shape, plus `images` and calls' signatures.
    pub fn to_record(&self) -> Value {
        serde_json::to_value(OpenAiShape {
            message: self,
            record: true,
        })
        .unwrap_or_default()
    }
}

/// A message written as an OpenAI chat message object: `role`; `content` a string unless it
/// carries images (then an array of `text` and `image_url` parts with `data:` URLs); an
/// assistant's `tool_calls`; a tool result's `tool_call_id` and `name`. As a `record` (the
/// tape's form) it also keeps a user message's `images` after its content and each call's
/// `thought_signature`; on the wire it never does.
pub(crate) struct OpenAiShape<'a> {
    pub message: &'a ChatMessage,
    pub record: bool,
}

impl Serialize for OpenAiShape<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = self.message;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("role", m.role.as_str())?;
        if m.has_images() {
            map.serialize_entry("content", &Parts(&m.content))?;
        } else {
            map.serialize_entry("content", &m.text())?;
        }
        if self.record && !m.images.is_empty() {
            map.serialize_entry("images", &m.images)?;
        }
        if !m.tool_calls.is_empty() {
            let calls = Calls(&m.tool_calls, self.record);
            map.serialize_entry("tool_calls", &calls)?;
        }
        if let Some(id) = &m.tool_call_id {
            map.serialize_entry("tool_call_id", id)?;
        }
        if let Some(name) = &m.name {
            map.serialize_entry("name", name)?;
        }
        map.end()
    }
}

struct Parts<'a>(&'a [Part]);

impl Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for part in self.0 {
            match part {
                Part::Text(text) => {
                    seq.serialize_element(&json!({"type": "text", "text": text}))?
                }
                Part::Image { mime, data } => {
                    let url = format!("data:{mime};base64,{data}");
                    seq.serialize_element(&json!({"type": "image_url", "image_url": {"url": url}}))?
                }
            }
        }
        seq.end()
    }
}

/// The calls of an assistant message; as records (with their signatures) or for the wire.
struct Calls<'a>(&'a [ToolCall], bool);

impl Serialize for Calls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for call in self.0 {
            match self.1 {
                true => seq.serialize_element(&call.to_record())?,
                false => seq.serialize_element(&json!({"id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments}}))?,
            }
        }
        seq.end()
    }
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

    /// Messages written as the tape records them and as the OpenAI wire carries them: the same
    /// bytes, but the images' paths and the calls' signatures only on the tape.
    #[test]
    fn records_and_the_wire_write_the_same_openai_shape() {
        let call = ToolCall {
            id: "c1".into(),
            name: "fs_read".into(),
            arguments: "{\"path\":\"a\"}".into(),
            thought_signature: Some("sig".into()),
        };
        let image = ("image/jpeg".into(), "AA==".into());
        let mut user = ChatMessage::user_with_images("this?", vec![image]);
        user.images = vec!["a.jpg".into()];
        let wire = |m: &ChatMessage| {
            serde_json::to_value(OpenAiShape {
                message: m,
                record: false,
            })
            .unwrap()
        };
        let parts = json!([{"type": "text", "text": "this?"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AA=="}}]);
        assert_eq!(
            user.to_record().to_string(),
            json!({"role": "user", "content": parts, "images": ["a.jpg"]}).to_string()
        );
        assert_eq!(wire(&user), json!({"role": "user", "content": parts}));
        let assistant = ChatMessage::assistant("", vec![call.clone()]);
        assert_eq!(
            assistant.to_record(),
            json!({"role": "assistant", "content": "", "tool_calls": [call.to_record()]})
        );
        let mut unsigned = call.to_record();
        unsigned
            .as_object_mut()
            .unwrap()
            .remove("thought_signature");
        assert_eq!(
            wire(&assistant).to_string(),
            json!({"role": "assistant", "content": "", "tool_calls": [unsigned]}).to_string()
        );
        let tool = ChatMessage::tool_result("c1", "fs_read", "x");
        assert_eq!(
            wire(&tool).to_string(),
            r#"{"role":"tool","content":"x","tool_call_id":"c1","name":"fs_read"}"#
        );
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
