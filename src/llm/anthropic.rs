//! Anthropic's Messages API (`POST {base}/v1/messages`, `anthropic:<model>`): the request body
//! made of a [`ChatRequest`], the reply and the streamed events decoded into a
//! [`ChatResponse`].
//!
//! The conversation is translated at this edge: the leading system messages become `system`
//! blocks (a system message later in the conversation is user text, where it was said);
//! assistant tool calls `tool_use` blocks; tool results `tool_result` blocks in a user message
//! — consecutive messages of one role are merged, so roles alternate as the API requires;
//! images base64 `image` blocks; OpenAI-shaped tool specs `{name, description, input_schema}`.
//!
//! Prompt caching: `cache_control: {"type": "ephemeral"}` on the last tool, on the last system
//! block, on the last block of the conversation (before a trailing system note: a per-turn
//! note the next request will not repeat) and on the user message before the last assistant
//! message (where the previous request of a tool loop, or the previous turn, ended) — so each
//! request reads the previous one's prefix from the cache and writes its own. Never more than
//! [`MAX_BREAKPOINTS`], the API's limit.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::message::{ChatMessage, Part, Role, push_turn};
use super::sse::{Accumulate, SseEvent};
use super::{ChatRequest, ChatResponse, LlmError, ToolCall, Usage};

/// The `anthropic-version` header sent with every request.
pub(crate) const VERSION: &str = "2023-06-01";
/// The most `cache_control` breakpoints a request may carry.
pub(crate) const MAX_BREAKPOINTS: usize = 4;

/// The request body for `model`.
pub(crate) fn request_body(model: &str, req: &ChatRequest, stream: bool) -> Value {
    let mut system: Vec<Value> = Vec::new();
    let mut messages: Vec<(&str, Vec<Value>)> = Vec::new();
    // The last block not from a system note: (message, block).
    let mut stable_end = None;
    for message in &req.messages {
        match message.role {
            Role::System if messages.is_empty() => system.extend(text_block(&message.text())),
            Role::System => push_turn(&mut messages, "user", content(message)),
            Role::User => push_turn(&mut messages, "user", content(message)),
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&message.text()).into_iter().collect();
                blocks.extend(message.tool_calls.iter().map(tool_use));
                push_turn(&mut messages, "assistant", blocks);
            }
            Role::Tool => push_turn(&mut messages, "user", vec![tool_result(message)]),
        }
        if message.role != Role::System
            && let Some((_, blocks)) = messages.last()
        {
            stable_end = Some((messages.len() - 1, blocks.len().saturating_sub(1)));
        }
    }
    let mut tools: Vec<Value> = req.tools.iter().filter_map(tool_spec).collect();

    // The breakpoints: last tool, system, where the previous request ended (the user message
    // before the last assistant message), the last block before a trailing note.
    let earlier = stable_end.and_then(|(last, _)| {
        let assistant = messages[..last]
            .iter()
            .rposition(|(r, _)| *r == "assistant")?;
        let user = messages[..assistant]
            .iter()
            .rposition(|(r, _)| *r == "user")?;
        Some((user, messages[user].1.len() - 1))
    });
    let mut placed = usize::from(mark(tools.last_mut())) + usize::from(mark(system.last_mut()));
    for (at, block) in [earlier, stable_end].into_iter().flatten() {
        placed += usize::from(mark(messages[at].1.get_mut(block)));
    }
    debug_assert!(placed <= MAX_BREAKPOINTS, "{placed} cache breakpoints");

    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    Value::Object(body)
}

/// Marks a block as a cache breakpoint; whether there was one to mark.
fn mark(block: Option<&mut Value>) -> bool {
    let Some(Value::Object(block)) = block else {
        return false;
    };
    block.insert("cache_control".into(), json!({"type": "ephemeral"}));
    true
}

/// A text block, none for empty text (the API refuses empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// The content blocks of a user message: text and images, in order.
fn content(message: &ChatMessage) -> Vec<Value> {
    message
        .content
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => text_block(text),
            Part::Image { mime, data } => Some(json!({"type": "image",
                "source": {"type": "base64", "media_type": mime, "data": data}})),
        })
        .collect()
}

fn tool_use(call: &ToolCall) -> Value {
    json!({"type": "tool_use", "id": block_id(&call.id), "name": call.name,
        "input": call.arguments_object()})
}

fn tool_result(message: &ChatMessage) -> Value {
    let id = message.tool_call_id.as_deref().unwrap_or_default();
    let mut block = json!({"type": "tool_result", "tool_use_id": block_id(id)});
    let text = message.text();
    if !text.is_empty() {
        block["content"] = json!(text);
    }
    block
}

/// A call id as the API accepts it (`[a-zA-Z0-9_-]+`): ids another provider made may have
/// other characters.
fn block_id(id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c,
            _ => '_',
        })
        .collect();
    if id.is_empty() { "call".into() } else { id }
}

/// An OpenAI `{"type": "function", "function": {...}}` spec as an Anthropic tool.
fn tool_spec(spec: &Value) -> Option<Value> {
    let function = spec.get("function")?;
    let schema = function
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    let mut tool = json!({"name": function.get("name")?});
    if let Some(description) = function.get("description") {
        tool["description"] = description.clone();
    }
    tool["input_schema"] = schema;
    Some(tool)
}

/// Decodes a 2xx reply (`{"type": "message", "content": [...], ...}`).
pub(crate) fn parse_message(body: &str) -> Result<ChatResponse, LlmError> {
    let json: Value = serde_json::from_str(body)
        .map_err(|e| LlmError::InvalidResponse(format!("malformed JSON ({e})")))?;
    if let Some(err) = error(&json) {
        return Err(err);
    }
    let blocks = json
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| LlmError::InvalidResponse("the message has no content".into()))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block["id"].as_str().unwrap_or_default().to_owned(),
                name: block["name"].as_str().unwrap_or_default().to_owned(),
                arguments: block.get("input").map_or("{}".into(), Value::to_string),
                thought_signature: None,
            }),
            _ => {} // thinking, redacted_thinking, ...
        }
    }
    Ok(ChatResponse {
        content: (!text.is_empty()).then_some(text),
        tool_calls,
        usage: json.get("usage").and_then(Usage::from_anthropic),
        finish_reason: json
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(finish_reason),
    })
}

/// A stop reason in the OpenAI words the rest of Bub knows.
fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        other => other,
    }
    .to_owned()
}

/// An `{"type": "error", "error": {"type", "message"}}` object (a 200 body or a stream event)
/// as an [`LlmError::Http`] with the status the error type stands for.
fn error(json: &Value) -> Option<LlmError> {
    if json.get("type").and_then(Value::as_str) != Some("error") {
        return None;
    }
    let err = json.get("error").unwrap_or(&Value::Null);
    let status = match err.get("type").and_then(Value::as_str).unwrap_or_default() {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "overloaded_error" => 529,
        _ => 502,
    };
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("unknown error")
        .to_owned();
    Some(LlmError::Http { status, message })
}

/// A `tool_use` block being streamed.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    input: String,
}

/// Folds the streamed events (`message_start`, `content_block_start` / `_delta`,
/// `message_delta`, `message_stop`, `error`; `ping` ignored) into a [`ChatResponse`].
#[derive(Debug, Default)]
pub(crate) struct Accumulator {
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<Usage>,
    stop_reason: Option<String>,
    done: bool,
}

impl Accumulate for Accumulator {
    fn event(&mut self, event: &SseEvent) -> Result<String, LlmError> {
        let Some(json) = event.json()? else {
            return Ok(String::new());
        };
        if let Some(err) = error(&json) {
            return Err(err);
        }
        let index = json.get("index").and_then(Value::as_u64).unwrap_or(0);
        let mut usage = |u: Option<&Value>| {
            if let Some(u) = u.and_then(Usage::from_anthropic) {
                self.usage = Some(self.usage.map_or(u, |seen| seen.merge(u)));
            }
        };
        match json.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message_start" => usage(json.pointer("/message/usage")),
            "message_delta" => {
                usage(json.get("usage"));
                if let Some(reason) = json.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
            }
            "message_stop" => self.done = true,
            "content_block_start" => {
                let block = json.get("content_block").unwrap_or(&Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let call = PartialCall {
                            id: block["id"].as_str().unwrap_or_default().to_owned(),
                            name: block["name"].as_str().unwrap_or_default().to_owned(),
                            input: String::new(),
                        };
                        self.calls.insert(index, call);
                    }
                    Some("text") => return Ok(self.push_text(block["text"].as_str())),
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = json.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => return Ok(self.push_text(delta["text"].as_str())),
                    Some("input_json_delta") => {
                        let piece = delta["partial_json"].as_str().unwrap_or_default();
                        self.calls.entry(index).or_default().input.push_str(piece);
                    }
                    _ => {} // thinking_delta, signature_delta, ...
                }
            }
            _ => {} // ping, content_block_stop, unknown events
        }
        Ok(String::new())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn is_complete(&self) -> bool {
        self.done || self.stop_reason.is_some()
    }

    fn finish(self: Box<Self>) -> ChatResponse {
        let tool_calls = self
            .calls
            .into_values()
            .filter(|c| !c.name.is_empty())
            .map(|c| ToolCall {
                id: c.id,
                name: c.name,
                arguments: if c.input.trim().is_empty() {
                    "{}".into()
                } else {
                    c.input
                },
                thought_signature: None,
            })
            .collect();
        ChatResponse {
            content: (!self.text.is_empty()).then_some(self.text),
            tool_calls,
            usage: self.usage,
            finish_reason: self.stop_reason.as_deref().map(finish_reason),
        }
    }
}

impl Accumulator {
    fn push_text(&mut self, text: Option<&str>) -> String {
        let text = text.unwrap_or_default();
        self.text.push_str(text);
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "fs_read".into(),
            arguments: "{\"path\":\"a\"}".into(),
            thought_signature: None,
        }
    }

    fn breakpoints(body: &Value) -> usize {
        body.to_string().matches("\"cache_control\"").count()
    }

    #[test]
    fn roles_alternate_and_tool_results_share_a_user_message() {
        let req = ChatRequest {
            messages: vec![
                ChatMessage::system("sys"),
                ChatMessage::user("read a and b"),
                ChatMessage::assistant("", vec![call("c1"), call("c.2")]),
                ChatMessage::tool_result("c1", "fs_read", "A"),
                ChatMessage::tool_result("c.2", "fs_read", ""),
                ChatMessage::system("a note"),
            ],
            tools: Vec::new().into(),
            max_tokens: 9,
        };
        let body = request_body("m", &req, false);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][1]["id"], "c_2");
        let last = &messages[2]["content"];
        assert_eq!(last[0]["tool_use_id"], "c1");
        assert_eq!(
            last[1],
            json!({"type": "tool_result", "tool_use_id": "c_2",
                "cache_control": {"type": "ephemeral"}})
        );
        assert_eq!(last[2], json!({"type": "text", "text": "a note"}));
        assert_eq!(body["system"][0]["text"], "sys");
        assert_eq!(body.get("stream"), None);
    }

    #[test]
    fn never_more_than_four_breakpoints() {
        let tools: Vec<Value> = (0..3)
            .map(|i| {
                json!({"type": "function", "function": {"name": format!("t{i}"),
                "description": "d", "parameters": {"type": "object"}}})
            })
            .collect();
        let mut messages = vec![ChatMessage::system("s"), ChatMessage::user("u")];
        for i in 0..10 {
            let id = format!("c{i}");
            messages.push(ChatMessage::assistant("", vec![call(&id)]));
            messages.push(ChatMessage::tool_result(&id, "fs_read", "r"));
            let req = ChatRequest {
                messages: messages.clone(),
                tools: tools.clone().into(),
                max_tokens: 1,
            };
            let body = request_body("m", &req, true);
            assert_eq!(breakpoints(&body), MAX_BREAKPOINTS);
        }
        let one = ChatRequest {
            messages: vec![ChatMessage::user("u")],
            ..ChatRequest::default()
        };
        assert_eq!(breakpoints(&request_body("m", &one, false)), 1);
    }

    #[test]
    fn stream_events_fold_into_a_response() {
        let mut acc: Box<dyn Accumulate> = Box::new(Accumulator::default());
        let events = [
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 5,
                "cache_read_input_tokens": 100, "cache_creation_input_tokens": 0, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use",
                "id": "toolu_1", "name": "fs_read", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "th\":\"a\"}"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
            json!({"type": "message_stop"}),
        ];
        let mut text = String::new();
        for data in events {
            let event = SseEvent {
                event: None,
                data: data.to_string(),
            };
            text.push_str(&acc.event(&event).unwrap());
        }
        assert!(acc.is_done());
        let r = acc.finish();
        assert_eq!(text, "Hi");
        assert_eq!(r.tool_calls[0].arguments, "{\"path\":\"a\"}");
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        let u = r.usage.unwrap();
        assert_eq!((u.input, u.cache_read, u.output), (105, 100, 12));
    }

    #[test]
    fn error_types_map_to_statuses() {
        let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        let e = error(&overloaded).unwrap();
        assert!(e.is_temporary());
        assert_eq!(
            e,
            LlmError::Http {
                status: 529,
                message: "Overloaded".into()
            }
        );
    }
}
