//! Gemini's `generateContent` API (`gemini:<model>`): `POST
//! {base}/v1beta/models/{model}:generateContent`, streamed by `:streamGenerateContent?alt=sse`.
//! The request body made of a [`ChatRequest`], the reply and the streamed chunks decoded into a
//! [`ChatResponse`].
//!
//! The conversation is translated at this edge: the leading system messages become
//! `systemInstruction` (a later one is user text, where it was said); the assistant's role is
//! `model`, its calls `functionCall` parts carrying the `thoughtSignature` Gemini gave them
//! (kept on [`ToolCall`], so on the tape); tool results `functionResponse` parts named after
//! their tool, in a user turn; images `inlineData`; consecutive messages of one role merged.
//! Tool specs become `functionDeclarations` whose parameters keep only the schema subset
//! Gemini accepts ([`schema`]). Gemini gives calls no id: each gets a unique `call_…` id.
//! Caching is Gemini's own (implicit, on a repeated prefix); its reads are reported in
//! `usageMetadata.cachedContentTokenCount`.

use serde_json::{Map, Value, json};

use super::message::{ChatMessage, Part, Role, push_turn};
use super::sse::{Accumulate, SseEvent};
use super::{ChatRequest, ChatResponse, LlmError, ToolCall, Usage};

/// The schema keywords Gemini's `Schema` (an OpenAPI 3.0 subset) accepts; others
/// (`$schema`, `additionalProperties`, `title`, `default`, `$ref`, `oneOf`, ...) are dropped.
const SCHEMA_KEYS: &[&str] = &[
    "type",
    "format",
    "description",
    "nullable",
    "enum",
    "items",
    "properties",
    "required",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
];
/// The `format`s Gemini accepts (`uint32`, `uri`, ... are dropped).
const FORMATS: &[&str] = &["enum", "date-time", "int32", "int64", "float", "double"];

/// The request body.
pub(crate) fn request_body(req: &ChatRequest) -> Value {
    let mut system: Vec<Value> = Vec::new();
    let mut contents: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in &req.messages {
        match message.role {
            Role::System if contents.is_empty() => system.extend(text_part(&message.text())),
            Role::System | Role::User => push_turn(&mut contents, "user", parts(message)),
            Role::Assistant => {
                let mut parts: Vec<Value> = text_part(&message.text()).into_iter().collect();
                parts.extend(message.tool_calls.iter().map(function_call));
                push_turn(&mut contents, "model", parts);
            }
            Role::Tool => push_turn(&mut contents, "user", vec![function_response(message)]),
        }
    }
    let mut body = Map::new();
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": system}));
    }
    let contents: Vec<Value> = contents
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect();
    body.insert("contents".into(), Value::Array(contents));
    let declarations: Vec<Value> = req.tools.iter().filter_map(declaration).collect();
    if !declarations.is_empty() {
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations}]),
        );
    }
    body.insert(
        "generationConfig".into(),
        json!({"maxOutputTokens": req.max_tokens}),
    );
    Value::Object(body)
}

fn text_part(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"text": text}))
}

/// A user message's text and images, in order.
fn parts(message: &ChatMessage) -> Vec<Value> {
    message
        .content
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => text_part(text),
            Part::Image { mime, data } => {
                Some(json!({"inlineData": {"mimeType": mime, "data": data}}))
            }
        })
        .collect()
}

fn function_call(call: &ToolCall) -> Value {
    let mut part = json!({"functionCall": {"name": call.name, "args": call.arguments_object()}});
    if let Some(signature) = &call.thought_signature {
        part["thoughtSignature"] = json!(signature);
    }
    part
}

fn function_response(message: &ChatMessage) -> Value {
    json!({"functionResponse": {"name": message.name.as_deref().unwrap_or_default(),
        "response": {"output": message.text()}}})
}

/// An OpenAI `{"type": "function", "function": {...}}` spec as a function declaration.
fn declaration(spec: &Value) -> Option<Value> {
    let function = spec.get("function")?;
    let mut declaration = json!({
        "name": function.get("name")?,
        "description": function.get("description").cloned().unwrap_or(json!("")),
    });
    let parameters = function.get("parameters").map(schema);
    // A function without parameters leaves them out: Gemini refuses an empty object schema.
    if let Some(parameters) = parameters.filter(|p| p.get("properties").is_some()) {
        declaration["parameters"] = parameters;
    }
    Some(declaration)
}

/// A JSON schema reduced to what Gemini accepts: [`SCHEMA_KEYS`] only, recursively; a type
/// list with `null` (`["string", "null"]`) becomes the type and `nullable`; an object's empty
/// `properties` are left out (Gemini refuses them).
pub(crate) fn schema(schema: &Value) -> Value {
    let Some(fields) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in fields {
        if !SCHEMA_KEYS.contains(&key.as_str()) {
            continue;
        }
        let value = match key.as_str() {
            "type" => match value {
                Value::Array(types) => {
                    if types.iter().any(|t| t == "null") {
                        out.insert("nullable".into(), json!(true));
                    }
                    match types.iter().find(|t| *t != "null") {
                        Some(t) => t.clone(),
                        None => continue,
                    }
                }
                other => other.clone(),
            },
            "format" if !value.as_str().is_some_and(|f| FORMATS.contains(&f)) => continue,
            "properties" => {
                let Some(properties) = value.as_object().filter(|p| !p.is_empty()) else {
                    continue;
                };
                Value::Object(
                    properties
                        .iter()
                        .map(|(name, s)| (name.clone(), self::schema(s)))
                        .collect(),
                )
            }
            "items" => self::schema(value),
            "anyOf" => Value::Array(
                value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(self::schema)
                    .collect(),
            ),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    if !out.contains_key("properties") {
        out.remove("required");
    }
    Value::Object(out)
}

/// What one reply (or one streamed chunk) holds.
struct Chunk {
    text: String,
    calls: Vec<ToolCall>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
}

/// Reads a `GenerateContentResponse`: the first candidate's parts (thought summaries skipped),
/// its `finishReason`, the `usageMetadata`. A prompt blocked before any candidate is an error.
fn chunk(json: &Value) -> Result<Chunk, LlmError> {
    if let Some(err) = super::response::error_object(json) {
        return Err(err);
    }
    let candidate = json
        .get("candidates")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    if candidate.is_none()
        && let Some(reason) = json
            .pointer("/promptFeedback/blockReason")
            .and_then(Value::as_str)
    {
        return Err(LlmError::Http {
            status: 400,
            message: format!("the prompt was blocked ({reason})"),
        });
    }
    let candidate = candidate.unwrap_or(&Value::Null);
    let mut text = String::new();
    let mut calls = Vec::new();
    let parts = candidate
        .pointer("/content/parts")
        .and_then(Value::as_array);
    for part in parts.into_iter().flatten() {
        if let Some(call) = part.get("functionCall") {
            calls.push(ToolCall {
                id: call
                    .get("id")
                    .and_then(Value::as_str)
                    .map_or_else(new_call_id, str::to_owned),
                name: call["name"].as_str().unwrap_or_default().to_owned(),
                arguments: call.get("args").map_or("{}".into(), Value::to_string),
                thought_signature: part
                    .get("thoughtSignature")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            });
        } else if part.get("thought").and_then(Value::as_bool) != Some(true)
            && let Some(t) = part.get("text").and_then(Value::as_str)
        {
            text.push_str(t);
        }
    }
    let finish_reason = candidate
        .get("finishReason")
        .and_then(Value::as_str)
        .map(|reason| match reason {
            "STOP" if !calls.is_empty() => "tool_calls".to_owned(),
            "STOP" => "stop".to_owned(),
            "MAX_TOKENS" => "length".to_owned(),
            other => other.to_ascii_lowercase(),
        });
    Ok(Chunk {
        text,
        calls,
        usage: json.get("usageMetadata").and_then(Usage::from_gemini),
        finish_reason,
    })
}

/// A unique id for a call Gemini gave none (the tape pairs calls and results by id).
fn new_call_id() -> String {
    let suffix: String = std::iter::repeat_with(fastrand::alphanumeric)
        .take(12)
        .collect();
    format!("call_{suffix}")
}

/// Decodes a 2xx `generateContent` reply.
pub(crate) fn parse_response(body: &str) -> Result<ChatResponse, LlmError> {
    let json: Value = serde_json::from_str(body)
        .map_err(|e| LlmError::InvalidResponse(format!("malformed JSON ({e})")))?;
    let chunk = chunk(&json)?;
    Ok(ChatResponse {
        content: (!chunk.text.is_empty()).then_some(chunk.text),
        tool_calls: chunk.calls,
        usage: chunk.usage,
        finish_reason: chunk.finish_reason,
    })
}

/// Folds the streamed chunks (each a `GenerateContentResponse`: text pieces, whole function
/// calls, the usage so far) into a [`ChatResponse`]. The stream ends with the connection; a
/// `finishReason` makes it complete.
#[derive(Debug, Default)]
pub(crate) struct Accumulator {
    text: String,
    calls: Vec<ToolCall>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
}

impl Accumulate for Accumulator {
    fn event(&mut self, event: &SseEvent) -> Result<String, LlmError> {
        let Some(json) = event.json()? else {
            return Ok(String::new());
        };
        let chunk = chunk(&json)?;
        self.text.push_str(&chunk.text);
        self.calls.extend(chunk.calls);
        self.usage = chunk.usage.or(self.usage);
        if chunk.finish_reason.is_some() {
            self.finish_reason = chunk.finish_reason;
        }
        Ok(chunk.text)
    }

    fn is_done(&self) -> bool {
        false
    }

    fn is_complete(&self) -> bool {
        self.finish_reason.is_some()
    }

    fn finish(self: Box<Self>) -> ChatResponse {
        let finish_reason = match self.finish_reason.as_deref() {
            Some("stop") if !self.calls.is_empty() => Some("tool_calls".to_owned()),
            _ => self.finish_reason,
        };
        ChatResponse {
            content: (!self.text.is_empty()).then_some(self.text),
            tool_calls: self.calls,
            usage: self.usage,
            finish_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_keep_the_subset_gemini_accepts() {
        let raw = json!({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Args",
            "type": "object", "additionalProperties": false, "required": ["path"],
            "properties": {
                "path": {"type": "string", "description": "file", "format": "uri"},
                "limit": {"type": ["integer", "null"], "format": "uint32", "minimum": 0, "default": null},
                "tags": {"type": "array", "items": {"type": "string", "title": "t"}},
                "opts": {"type": "object", "properties": {}, "required": []}}});
        assert_eq!(
            schema(&raw),
            json!({"type": "object", "required": ["path"], "properties": {
                "path": {"type": "string", "description": "file"},
                "limit": {"nullable": true, "type": "integer", "minimum": 0},
                "tags": {"type": "array", "items": {"type": "string"}},
                "opts": {"type": "object"}}})
        );
        let none = json!({"type": "function", "function": {"name": "t", "description": "d",
            "parameters": {"type": "object", "properties": {}}}});
        assert_eq!(declaration(&none).unwrap().get("parameters"), None);
    }

    #[test]
    fn calls_get_unique_ids_and_keep_their_signature() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "thinking…", "thought": true},
            {"functionCall": {"name": "fs_read", "args": {"path": "a"}}, "thoughtSignature": "c2ln"},
            {"functionCall": {"name": "fs_read", "args": {"path": "b"}}}]},
            "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 50, "cachedContentTokenCount": 40, "candidatesTokenCount": 3}});
        let r = parse_response(&body.to_string()).unwrap();
        assert_eq!(r.content, None);
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
        assert_eq!(r.tool_calls[0].thought_signature.as_deref(), Some("c2ln"));
        assert_eq!(r.tool_calls[1].arguments, "{\"path\":\"b\"}");
        assert_eq!(r.usage.map(|u| u.cache_read), Some(40));
        let blocked = json!({"promptFeedback": {"blockReason": "SAFETY"}});
        assert!(parse_response(&blocked.to_string()).is_err());
    }
}
