//! Decoding of complete (non-streamed) OpenAI chat completions and of provider error bodies
//! (OpenAI's, Anthropic's and Gemini's all carry `error.message`).
//!
//! Providers differ in small ways: `content` may be `null`, a string or an array of text parts;
//! `arguments` is normally a JSON-encoded string but some servers send an object; some return
//! `{"error": {...}}` with status 200. Everything here is pure so it is tested without a server.

use serde_json::Value;

use super::{ChatResponse, LlmError, ToolCall};

/// How much of a non-JSON error body is quoted in an error message.
const BODY_SNIPPET_CHARS: usize = 300;

/// Decodes a 2xx chat-completion body.
pub(crate) fn parse_completion(body: &str) -> Result<ChatResponse, LlmError> {
    let json: Value = serde_json::from_str(body).map_err(|e| {
        LlmError::InvalidResponse(format!("malformed JSON ({e}): {}", snippet(body, 120)))
    })?;
    if let Some(err) = error_object(&json) {
        return Err(err);
    }
    let choice = json
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| LlmError::InvalidResponse("response has no choices".into()))?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| LlmError::InvalidResponse("choice has no message".into()))?;

    let tool_calls = match message.get("tool_calls") {
        Some(Value::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(i, c)| parse_tool_call(i, c))
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    Ok(ChatResponse {
        content: content_text(message.get("content")),
        tool_calls,
        usage: json.get("usage").and_then(super::Usage::from_openai),
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// One entry of `message.tool_calls`.
fn parse_tool_call(index: usize, call: &Value) -> Result<ToolCall, LlmError> {
    ToolCall::from_openai(index, call)
        .ok_or_else(|| LlmError::InvalidResponse(format!("tool call {index} has no function name")))
}

/// `arguments` as raw JSON text: a string is kept verbatim, an object is serialised, absent is
/// `{}`.
pub(crate) fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => "{}".to_owned(),
        Some(other) => other.to_string(),
    }
}

/// `content` as text: a string, or the concatenated `text` of an array of parts; empty → `None`.
pub(crate) fn content_text(content: Option<&Value>) -> Option<String> {
    let text = match content? {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.as_str()))
            .collect(),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

/// An `{"error": {...}}` object inside a 2xx body (or a stream chunk), as an [`LlmError::Http`].
/// The status is the error's numeric `code` when it looks like an HTTP status, else 502.
pub(crate) fn error_object(json: &Value) -> Option<LlmError> {
    let err = json.get("error").filter(|e| !e.is_null())?;
    if json
        .get("choices")
        .is_some_and(|c| c.as_array().is_some_and(|a| !a.is_empty()))
    {
        return None;
    }
    let status = err
        .get("code")
        .and_then(|c| {
            c.as_u64()
                .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
        })
        .filter(|c| (400..600).contains(c))
        .map_or(502, |c| c as u16);
    let message = match err {
        Value::String(s) => s.clone(),
        _ => err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("unknown error")
            .to_owned(),
    };
    Some(LlmError::Http { status, message })
}

/// The human message of an error response: `error.message` (or a string `error` / `message`)
/// when the body is JSON, else the first 300 characters of the body.
pub(crate) fn error_message(body: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        let from_json = match json.get("error") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(err) => err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned),
            None => json
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        if let Some(m) = from_json.filter(|m| !m.trim().is_empty()) {
            return m;
        }
    }
    let text = snippet(body.trim(), BODY_SNIPPET_CHARS);
    if text.is_empty() {
        "(empty body)".to_owned()
    } else {
        text
    }
}

/// A `Retry-After` value in seconds (fractions allowed); HTTP dates and junk are ignored.
pub(crate) fn parse_retry_after(value: &str) -> Option<f64> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
}

/// The first `max` characters of `s`, with `…` when cut.
fn snippet(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_reply() {
        let body = json!({"choices":[{"index":0,"finish_reason":"stop",
            "message":{"role":"assistant","content":"hi"}}],
            "usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}});
        let r = parse_completion(&body.to_string()).unwrap();
        assert_eq!(r.content.as_deref(), Some("hi"));
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(r.usage.unwrap().total(), 2);
    }

    #[test]
    fn tool_calls_keep_raw_arguments_and_text() {
        let body = json!({"choices":[{"finish_reason":"tool_calls","message":{
            "role":"assistant","content":"let me look",
            "tool_calls":[
              {"id":"call_9","type":"function","function":{"name":"get_time","arguments":"{\"tz\": \"UTC\"}"}},
              {"type":"function","function":{"name":"ls","arguments":{"path":"."}}}]}}]});
        let r = parse_completion(&body.to_string()).unwrap();
        assert_eq!(r.content.as_deref(), Some("let me look"));
        assert_eq!(r.tool_calls[0].id, "call_9");
        assert_eq!(r.tool_calls[0].arguments, "{\"tz\": \"UTC\"}");
        assert_eq!(r.tool_calls[1].id, "call_1");
        assert_eq!(r.tool_calls[1].arguments, "{\"path\":\".\"}");
        assert!(r.usage.is_none());
    }

    #[test]
    fn null_and_array_content() {
        let null = json!({"choices":[{"message":{"role":"assistant","content":null}}]});
        assert_eq!(parse_completion(&null.to_string()).unwrap().content, None);
        let parts = json!({"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]});
        assert_eq!(
            parse_completion(&parts.to_string())
                .unwrap()
                .content
                .as_deref(),
            Some("ab")
        );
    }

    #[test]
    fn malformed_and_empty_bodies_are_invalid() {
        assert!(matches!(
            parse_completion("{not json"),
            Err(LlmError::InvalidResponse(_))
        ));
        let none = json!({"choices":[]}).to_string();
        assert_eq!(
            parse_completion(&none),
            Err(LlmError::InvalidResponse("response has no choices".into()))
        );
    }

    #[test]
    fn error_object_in_a_200_body() {
        let body = json!({"error":{"code":429,"message":"slow down"}}).to_string();
        assert_eq!(
            parse_completion(&body),
            Err(LlmError::Http {
                status: 429,
                message: "slow down".into()
            })
        );
        let body = json!({"error":{"code":"server_error","message":"boom"}}).to_string();
        assert_eq!(
            parse_completion(&body),
            Err(LlmError::Http {
                status: 502,
                message: "boom".into()
            })
        );
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(r#"{"error":{"message":"bad model","type":"x"}}"#),
            "bad model"
        );
        assert_eq!(error_message(r#"{"error":"nope"}"#), "nope");
        assert_eq!(
            error_message("<html>gateway</html>"),
            "<html>gateway</html>"
        );
        assert_eq!(error_message(""), "(empty body)");
        let long = "é".repeat(400);
        assert_eq!(error_message(&long).chars().count(), 301);
    }

    #[test]
    fn retry_after_values() {
        assert_eq!(parse_retry_after("0.05"), Some(0.05));
        assert_eq!(parse_retry_after(" 2 "), Some(2.0));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }
}
