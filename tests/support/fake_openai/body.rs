//! The bodies of the fake's chat completions: what a request offers and says (tools, the last
//! user text, images) and the completions and server-sent events it answers with.

use serde_json::{Value, json};

use super::super::wire::split_chars;

/// The names of the tools a chat-completions request offers, in order.
pub fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .expect("the request offers tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The text of the last `user` message of a chat-completions request (empty when none); when
/// its `content` is an array of parts, their `text` parts joined with newlines.
pub fn last_user_text(request: &Value) -> String {
    let content = request["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| &m["content"]);
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

/// The `image_url.url`s of all `image_url` content parts of a chat-completions request's
/// messages, in order (`data:image/jpeg;base64,...` for inline images).
pub fn image_urls(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().into_iter().flatten();
    let parts = messages.filter_map(|m| m["content"].as_array()).flatten();
    parts
        .filter(|p| p["type"] == "image_url")
        .map(|p| {
            let url = &p["image_url"]["url"];
            url.as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

/// The words of `text` that are `prefix` followed by at least one digit and then only digits
/// and `-` (`m12-3`), in order of appearance. Words are split at anything but ASCII letters,
/// digits, `-` and `_`.
pub fn tokens(text: &str, prefix: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .filter(|word| {
            word.strip_prefix(prefix).is_some_and(|rest| {
                rest.starts_with(|c: char| c.is_ascii_digit())
                    && rest.chars().all(|c| c.is_ascii_digit() || c == '-')
            })
        })
        .map(str::to_owned)
        .collect()
}

/// The assistant message for text and/or calls.
pub(super) fn message(text: Option<&str>, calls: &[(String, String, Value)]) -> Value {
    let mut msg = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
            })
            .collect();
        msg["tool_calls"] = Value::Array(calls);
    }
    msg
}

/// Why the reply ended: `length` when its text was cut at the request's `max_tokens`.
pub(super) fn finish_reason(calls: &[(String, String, Value)], cut: bool) -> &'static str {
    match (cut, calls.is_empty()) {
        (true, _) => "length",
        (false, true) => "stop",
        (false, false) => "tool_calls",
    }
}

/// `text` cut as a model stops at `max_tokens` (4 bytes a token, as [`super::usage`] counts);
/// whether it was cut.
pub(super) fn cut_at(text: &mut String, max_tokens: Option<u64>) -> bool {
    let Some(limit) = max_tokens.and_then(|t| usize::try_from(t.saturating_mul(4)).ok()) else {
        return false;
    };
    if text.len() <= limit {
        return false;
    }
    let at = (0..=limit)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    text.truncate(at);
    true
}

/// A non-streamed `chat.completion`.
pub(super) fn completion(
    model: &str,
    text: Option<&str>,
    calls: &[(String, String, Value)],
    usage: Value,
    cut: bool,
) -> Value {
    json!({
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "finish_reason": finish_reason(calls, cut), "message": message(text, calls)}],
        "usage": usage,
    })
}

/// The `data:` payloads of a streamed reply, `[DONE]` included.
pub(super) fn sse_events(
    model: &str,
    text: Option<&str>,
    calls: &[(String, String, Value)],
    usage: Option<Value>,
    cut: bool,
) -> Vec<String> {
    let chunk = |choices: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000,
               "model": model, "choices": choices})
    };
    let delta = |delta: Value, finish: Value| {
        chunk(json!([{"index": 0, "delta": delta, "finish_reason": finish}]))
    };
    let mut events = vec![delta(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for piece in split_chars(text.unwrap_or(""), 3) {
        events.push(delta(json!({"content": piece}), Value::Null));
    }
    for (index, (id, name, args)) in calls.iter().enumerate() {
        let first = json!({"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}});
        events.push(delta(json!({"tool_calls": [first]}), Value::Null));
        for piece in split_chars(&args.to_string(), 2) {
            let frag = json!({"index": index, "function": {"arguments": piece}});
            events.push(delta(json!({"tool_calls": [frag]}), Value::Null));
        }
    }
    events.push(delta(json!({}), json!(finish_reason(calls, cut))));
    if let Some(usage) = usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage;
        events.push(last);
    }
    let mut out: Vec<String> = events.iter().map(Value::to_string).collect();
    out.push("[DONE]".to_owned());
    out
}
