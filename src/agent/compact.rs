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

use crate::llm::estimate_tokens as estimate_text;
use crate::llm::message::OpenAiShape;
use crate::llm::{ChatMessage, Role};

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

/// A fast token estimate of a request: the system prompt and every message as the tape keeps it
/// (its JSON text), plus a few tokens of framing per message.
pub(crate) fn estimate(system: &str, messages: &[ChatMessage]) -> u64 {
    let body: u64 = messages.iter().map(|m| message_tokens(m) + 4).sum();
    estimate_text(system) + 4 + body
}

/// [`estimate_text`] of a message's record (its JSON text).
fn message_tokens(message: &ChatMessage) -> u64 {
    let record = OpenAiShape {
        message,
        record: true,
    };
    estimate_text(&serde_json::to_string(&record).unwrap_or_default())
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
pub(crate) fn transcript(messages: &[ChatMessage], max_bytes: usize) -> String {
    let mut blocks: Vec<String> = Vec::new();
    let mut bytes = 0;
    for message in messages.iter().rev() {
        let block = match message.tool_calls.as_slice() {
            [] => format!(
                "{}: {}",
                message.role.as_str(),
                cut(&message.text(), TRANSCRIPT_ITEM_CHARS)
            ),
            calls => calls
                .iter()
                .map(|c| {
                    let args = cut(&c.arguments, TRANSCRIPT_ITEM_CHARS / 4);
                    format!("assistant called {}({args})", c.name)
                })
                .collect::<Vec<_>>()
                .join("\n"),
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
pub(crate) fn fallback_summary(messages: &[ChatMessage]) -> String {
    let last = |wanted: Role| {
        messages
            .iter()
            .rev()
            .filter(|m| m.role == wanted && m.tool_calls.is_empty())
            .map(ChatMessage::text)
            .find(|c| !c.trim().is_empty() && !c.starts_with(NOTE_PREFIX))
    };
    let mut tools: Vec<&str> = Vec::new();
    for call in messages.iter().flat_map(|m| &m.tool_calls) {
        if !tools.contains(&call.name.as_str()) {
            tools.push(&call.name);
        }
    }
    let mut out = String::from("(summary written without the model: its summarising call failed)");
    if let Some(request) = last(Role::User) {
        out.push_str(&format!("\nLast request: {}", cut(&request, 500)));
    }
    if let Some(answer) = last(Role::Assistant) {
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
pub(crate) fn carried(messages: &[ChatMessage], max_tokens: u64) -> Vec<ChatMessage> {
    let mut out = Vec::new();
    let mut tokens = 0;
    for message in messages.iter().rev() {
        if out.len() == CARRIED {
            break;
        }
        let plain = matches!(message.role, Role::User | Role::Assistant)
            && message.tool_calls.is_empty()
            && !message.has_images();
        if !plain || message.text().starts_with(NOTE_PREFIX) {
            continue;
        }
        let cost = message_tokens(message);
        let first_user = out.is_empty() && message.role == Role::User;
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
    use crate::llm::ToolCall;

    fn msg(role: Role, text: &str) -> ChatMessage {
        ChatMessage::new(role, text)
    }

    fn tool(text: &str) -> ChatMessage {
        ChatMessage::tool_result("c", "fs_read", text)
    }

    #[test]
    fn estimates_count_ascii_by_four_and_other_characters_one_each() {
        assert_eq!(estimate_text(""), 0);
        assert_eq!(estimate_text("abcdefgh"), 2);
        assert_eq!(estimate_text("你好"), 2);
        let small = estimate("sys", &[msg(Role::User, "hi")]);
        let large = estimate("sys", &[msg(Role::User, &"word ".repeat(1000))]);
        assert!(large > small + 1000, "{small} {large}");
    }

    #[test]
    fn the_transcript_keeps_the_newest_part() {
        let messages: Vec<ChatMessage> = (0..100)
            .map(|i| msg(Role::User, &format!("message number {i}")))
            .collect();
        let text = transcript(&messages, 400);
        assert!(text.len() <= 500, "{}", text.len());
        assert!(text.contains("message number 99"));
        assert!(!text.contains("message number 1\n"));
        assert!(text.starts_with("[earlier messages left out]"), "{text}");
    }

    #[test]
    fn the_fallback_names_the_last_exchange_and_the_tools() {
        let call = ToolCall {
            id: "c".into(),
            name: "fs_read".into(),
            arguments: "{}".into(),
            thought_signature: None,
        };
        let messages = [
            msg(Role::User, "[context from handoff 'x']\nsummary: old"),
            msg(Role::User, "read the notes"),
            ChatMessage::assistant("", vec![call]),
            tool("notes"),
            msg(Role::Assistant, "They say hi."),
        ];
        let text = fallback_summary(&messages);
        assert!(text.contains("Last request: read the notes"), "{text}");
        assert!(text.contains("Last answer: They say hi."), "{text}");
        assert!(text.contains("Tools used: fs_read"), "{text}");
    }

    #[test]
    fn carried_messages_are_the_newest_plain_ones_and_always_the_request() {
        let messages = [
            msg(Role::User, "[context from handoff 'x']\nsummary: old"),
            msg(Role::User, "one"),
            msg(Role::Assistant, "two"),
            tool("out"),
            msg(Role::User, "three"),
            msg(Role::Assistant, "four"),
            msg(Role::User, "five"),
        ];
        let kept = carried(&messages, 1_000);
        let texts: Vec<String> = kept.iter().map(ChatMessage::text).collect();
        assert_eq!(texts, ["two", "three", "four", "five"]);
        let big = msg(Role::User, &"x".repeat(40_000));
        assert_eq!(carried(&[msg(Role::User, "a"), big.clone()], 10), [big]);
    }
}
