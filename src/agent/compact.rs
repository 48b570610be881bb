//! Compaction: what Bub does when the context since the last anchor grows too large for the
//! model's window (`BUB_CONTEXT_TOKENS`, compacted at `BUB_COMPACT_PERCENT` of it) or the
//! provider says it is too long.
//!
//! The model summarises the context (goals, decisions, open tasks, facts about the user); the
//! summary becomes a new anchor (`compaction`), and the newest user and assistant messages are
//! carried over verbatim after it, so the next request starts from the summary and the live
//! exchange. When the summary call fails, a summary is built without the model: the last
//! request and answer, the tools used. Compaction never fails a turn.
//!
//! The functions here are pure (no I/O): the model loop calls the model and writes the tape.

use serde_json::Value;

use crate::llm::estimate_tokens as estimate_text;

/// The instruction of the summarising call.
pub(crate) const SUMMARY_PROMPT: &str = "You compact a conversation between a user and an \
assistant (Bub) so it can go on from your summary alone. Write a short Markdown summary with \
these headings: Goals (what the user wants), Decisions (what was settled and why), Open tasks \
(what is left, with the next step), Facts about the user (names, preferences, constraints). \
Keep exact names, paths, numbers and commands. Do not invent anything; leave a heading empty \
when nothing belongs there.";

/// The name of the anchor a compaction writes.
pub(crate) const ANCHOR: &str = "compaction";

/// How many messages are carried over verbatim after a compaction, at most.
pub(crate) const CARRIED: usize = 4;

/// How much of one message the transcript for the summary shows.
const TRANSCRIPT_ITEM_CHARS: usize = 2_000;

/// What the handoff note of an anchor starts with (it is summarised, never carried).
const NOTE_PREFIX: &str = "[context from handoff";

/// A fast token estimate of a request: the system prompt and every message as sent (its JSON
/// text), plus a few tokens of framing per message.
pub(crate) fn estimate(system: &str, messages: &[Value]) -> u64 {
    let body: u64 = messages
        .iter()
        .map(|m| estimate_text(&m.to_string()) + 4)
        .sum();
    estimate_text(system) + 4 + body
}

/// The text of a message's content (`null` and non-strings as empty / JSON).
fn content(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or("?")
}

/// `text` cut to `chars` characters, marked `… [cut]` when it was longer.
pub(crate) fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}… [cut]", &text[..at]),
        None => text.to_owned(),
    }
}

/// The conversation as text for the summarising call: one block per message (long ones cut),
/// only the newest part when the whole is longer than `max_bytes`.
pub(crate) fn transcript(messages: &[Value], max_bytes: usize) -> String {
    let mut blocks: Vec<String> = Vec::new();
    let mut bytes = 0;
    for message in messages.iter().rev() {
        let block = match message.get("tool_calls").and_then(Value::as_array) {
            Some(calls) => calls
                .iter()
                .map(|c| {
                    let f = &c["function"];
                    let args = f["arguments"].as_str().unwrap_or_default();
                    format!(
                        "assistant called {}({})",
                        f["name"].as_str().unwrap_or("?"),
                        cut(args, TRANSCRIPT_ITEM_CHARS / 4)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"),
            None => format!(
                "{}: {}",
                role(message),
                cut(&content(message), TRANSCRIPT_ITEM_CHARS)
            ),
        };
        if bytes + block.len() > max_bytes && !blocks.is_empty() {
            blocks.push("[earlier messages left out]".to_owned());
            break;
        }
        bytes += block.len() + 2;
        blocks.push(block);
    }
    blocks.reverse();
    blocks.join("\n\n")
}

/// A summary built without the model: the last request and answer, the tools used, and what
/// is still open.
pub(crate) fn fallback_summary(messages: &[Value]) -> String {
    let last = |wanted: &str| {
        messages
            .iter()
            .rev()
            .filter(|m| role(m) == wanted && m.get("tool_calls").is_none())
            .map(content)
            .find(|c| !c.trim().is_empty() && !c.starts_with(NOTE_PREFIX))
    };
    let mut tools: Vec<String> = Vec::new();
    for call in messages
        .iter()
        .filter_map(|m| m.get("tool_calls").and_then(Value::as_array))
        .flatten()
    {
        if let Some(name) = call["function"]["name"].as_str()
            && !tools.iter().any(|t| t == name)
        {
            tools.push(name.to_owned());
        }
    }
    let mut out = String::from("(summary written without the model: its summarising call failed)");
    if let Some(request) = last("user") {
        out.push_str(&format!("\nLast request: {}", cut(&request, 500)));
    }
    if let Some(answer) = last("assistant") {
        out.push_str(&format!("\nLast answer: {}", cut(&answer, 500)));
    }
    if !tools.is_empty() {
        out.push_str(&format!("\nTools used: {}", tools.join(", ")));
    }
    out.push_str("\nOpen tasks: the last request, unless the last answer settled it.");
    out
}

/// The newest user and assistant messages (plain text, not tool traffic, not a handoff note),
/// oldest first: at most [`CARRIED`], within `max_tokens` — but always the last user message,
/// the request the turn is answering.
pub(crate) fn carried(messages: &[Value], max_tokens: u64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut tokens = 0;
    for message in messages.iter().rev() {
        if out.len() == CARRIED {
            break;
        }
        let plain = matches!(role(message), "user" | "assistant")
            && message.get("tool_calls").is_none()
            && message.get("content").is_some_and(Value::is_string);
        if !plain || content(message).starts_with(NOTE_PREFIX) {
            continue;
        }
        let cost = estimate_text(&message.to_string());
        let first_user = out.is_empty() && role(message) == "user";
        if tokens + cost > max_tokens && !first_user {
            break;
        }
        tokens += cost;
        out.push(message.clone());
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(role: &str, text: &str) -> Value {
        json!({"role": role, "content": text})
    }

    #[test]
    fn estimates_count_ascii_by_four_and_other_characters_one_each() {
        assert_eq!(estimate_text(""), 0);
        assert_eq!(estimate_text("abcdefgh"), 2);
        assert_eq!(estimate_text("你好"), 2);
        let small = estimate("sys", &[msg("user", "hi")]);
        let large = estimate("sys", &[msg("user", &"word ".repeat(1000))]);
        assert!(large > small + 1000, "{small} {large}");
    }

    #[test]
    fn the_transcript_keeps_the_newest_part() {
        let messages: Vec<Value> = (0..100)
            .map(|i| msg("user", &format!("message number {i}")))
            .collect();
        let text = transcript(&messages, 400);
        assert!(text.len() <= 500, "{}", text.len());
        assert!(text.contains("message number 99"));
        assert!(!text.contains("message number 1\n"));
        assert!(text.starts_with("[earlier messages left out]"), "{text}");
    }

    #[test]
    fn the_fallback_names_the_last_exchange_and_the_tools() {
        let call = json!({"id": "c", "type": "function", "function": {"name": "fs_read", "arguments": "{}"}});
        let messages = [
            msg("user", "[context from handoff 'x']\nsummary: old"),
            msg("user", "read the notes"),
            json!({"role": "assistant", "content": "", "tool_calls": [call]}),
            json!({"role": "tool", "content": "notes", "tool_call_id": "c"}),
            msg("assistant", "They say hi."),
        ];
        let text = fallback_summary(&messages);
        assert!(text.contains("Last request: read the notes"), "{text}");
        assert!(text.contains("Last answer: They say hi."), "{text}");
        assert!(text.contains("Tools used: fs_read"), "{text}");
    }

    #[test]
    fn carried_messages_are_the_newest_plain_ones_and_always_the_request() {
        let messages = [
            msg("user", "[context from handoff 'x']\nsummary: old"),
            msg("user", "one"),
            msg("assistant", "two"),
            json!({"role": "tool", "content": "out", "tool_call_id": "c"}),
            msg("user", "three"),
            msg("assistant", "four"),
            msg("user", "five"),
        ];
        let kept = carried(&messages, 1_000);
        let texts: Vec<String> = kept.iter().map(content).collect();
        assert_eq!(texts, ["two", "three", "four", "five"]);
        let big = msg("user", &"x".repeat(40_000));
        assert_eq!(carried(&[msg("user", "a"), big.clone()], 10), [big]);
    }
}
