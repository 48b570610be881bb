//! The OpenAI-compatible wire format of a request (`POST {base}/chat/completions`): the body,
//! with the typed messages written as OpenAI message objects. Replies are decoded by
//! [`super::response`] and [`super::sse`].
//!
//! The bytes are those Bub sent before messages were typed: a message's `content` is a string
//! unless it carries images (then an array of `text` and `image_url` parts with `data:` URLs);
//! an assistant's `tool_calls` follow its content; a tool result carries `tool_call_id` and
//! `name`. A Gemini `thought_signature` kept with a call is not sent here.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::message::{ChatMessage, Part, Role};
use super::{ChatRequest, ToolCall};

/// The JSON body of a chat completion request (a borrowed view, serialized once per call).
#[derive(Serialize)]
pub(crate) struct RequestBody<'a> {
    model: &'a str,
    messages: Messages<'a>,
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    tools: &'a [Value],
    max_tokens: u32,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl<'a> RequestBody<'a> {
    /// The body of `req` for `model`; a streamed call asks for the usage in the stream.
    pub(crate) fn new(model: &'a str, req: &'a ChatRequest, stream: bool) -> Self {
        Self {
            model,
            messages: Messages(&req.messages),
            tools: &req.tools,
            max_tokens: req.max_tokens,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }
}

struct Messages<'a>(&'a [ChatMessage]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for message in self.0 {
            seq.serialize_element(&Message(message))?;
        }
        seq.end()
    }
}

struct Message<'a>(&'a ChatMessage);

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let mut map = s.serialize_map(None)?;
        let role = match m.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        map.serialize_entry("role", role)?;
        if m.has_images() {
            map.serialize_entry("content", &Parts(&m.content))?;
        } else {
            map.serialize_entry("content", &m.text())?;
        }
        if !m.tool_calls.is_empty() {
            map.serialize_entry("tool_calls", &Calls(&m.tool_calls))?;
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
                    seq.serialize_element(&serde_json::json!({"type": "text", "text": text}))?
                }
                Part::Image { mime, data } => {
                    let url = format!("data:{mime};base64,{data}");
                    seq.serialize_element(
                        &serde_json::json!({"type": "image_url", "image_url": {"url": url}}),
                    )?
                }
            }
        }
        seq.end()
    }
}

struct Calls<'a>(&'a [ToolCall]);

impl Serialize for Calls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for call in self.0 {
            seq.serialize_element(&serde_json::json!({"id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": call.arguments}}))?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Tape messages written back are the same JSON (the bytes Bub sent before typing).
    #[test]
    fn tape_messages_round_trip_byte_for_byte() {
        let messages = [
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "hi"}),
            json!({"role": "user", "content": [{"type": "text", "text": "this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AA=="}}]}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "fs_read", "arguments": "{\"path\":\"a\"}"}}]}),
            json!({"role": "tool", "content": "text", "tool_call_id": "c1", "name": "fs_read"}),
            json!({"role": "assistant", "content": "done"}),
        ];
        for message in messages {
            let typed = ChatMessage::from_openai(&message);
            let written = serde_json::to_string(&Message(&typed)).unwrap();
            assert_eq!(written, message.to_string());
        }
        let mut call = json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "x", "arguments": "{}"}}]});
        let typed = ChatMessage::from_openai(&call);
        call["tool_calls"][0]["thought_signature"] = json!("sig");
        let signed = ChatMessage::from_openai(&call);
        assert_eq!(
            serde_json::to_string(&Message(&signed)).unwrap(),
            serde_json::to_string(&Message(&typed)).unwrap(),
            "no signature on the OpenAI wire"
        );
    }
}
