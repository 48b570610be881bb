//! What a model call is made of, besides the loop that makes it: the system prompt of a step,
//! the notes a prompt carries (the working checkpoint; whether the context shows a note
//! already), and a message sequence every OpenAI-compatible provider accepts.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use super::prompt::{self, PromptParts};
use crate::llm::{ChatMessage, Role};
use crate::skills::Discovery;
use crate::tools::ToolContext;

/// The `<memory>` block of `ctx`'s system prompt (empty when memory is off).
pub(crate) async fn memory_block(ctx: &ToolContext) -> String {
    let process = &ctx.process;
    match process.memory_enabled {
        true => {
            let memory = process.memory();
            let with_global = !ctx.turn.policy.own_chat_only();
            memory.prompt_block(ctx.session_id(), with_global).await
        }
        false => String::new(),
    }
}

/// The system prompt of a step in `ctx`'s session: `base` (`BUB_SYSTEM_PROMPT`) first,
/// showing `skills` and `memory` ([`memory_block`]).
pub(crate) fn system_prompt(
    ctx: &ToolContext,
    base: &str,
    skills: &Discovery,
    memory: &str,
) -> String {
    let process = &ctx.process;
    let mcp = crate::tools::mcp::prompt_block(&process.mcp.catalog(), &ctx.turn.policy);
    prompt::system_prompt(&PromptParts {
        base,
        workspace: ctx.workspace(),
        policy: &ctx.turn.policy,
        skills,
        mcp: &mcp,
        memory,
    })
}

/// The session's working checkpoint note, when memory is on and there is one.
pub(crate) async fn checkpoint_note(ctx: &ToolContext) -> Option<String> {
    let process = &ctx.process;
    match process.memory_enabled {
        true => process.memory().checkpoint_note(ctx.session_id()).await,
        false => None,
    }
}

/// Whether a user message of `context` holds `note` already.
pub(crate) fn noted(context: &[ChatMessage], note: &str) -> bool {
    context
        .iter()
        .any(|m| m.role == Role::User && m.text().contains(note))
}

/// A hash of a prompt text, to tell whether it changed.
pub(crate) fn stable_hash(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// Keeps the message sequence valid for every provider: an assistant message's tool calls must
/// be answered by tool messages with matching ids (a crash between call and result leaves them
/// unanswered), and a tool message needs a preceding call (a handoff made by a tool puts the
/// anchor between the call and its result).
pub(crate) fn sanitize_context(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    let mut messages = messages.into_iter().peekable();
    while let Some(message) = messages.next() {
        if message.role == Role::Tool {
            continue; // orphan result: its call is not in the context
        }
        if message.role != Role::Assistant || message.tool_calls.is_empty() {
            out.push(message);
            continue;
        }
        let mut results = Vec::new();
        while let Some(result) = messages.next_if(|m| m.role == Role::Tool) {
            results.push(result);
        }
        let answered = |id: &String| results.iter().any(|r| r.tool_call_id.as_ref() == Some(id));
        if message.tool_calls.iter().all(|c| answered(&c.id)) {
            out.push(message);
            out.extend(results);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    #[test]
    fn sanitize_drops_unanswered_calls_and_orphan_results() {
        let call = |id: &str| {
            let call = ToolCall {
                id: id.into(),
                name: "x".into(),
                arguments: "{}".into(),
                thought_signature: None,
            };
            ChatMessage::assistant("", vec![call])
        };
        let result = |id: &str| ChatMessage::tool_result(id, "x", "ok");
        let user = ChatMessage::user("hi");
        let mut orphan = ChatMessage::tool_result("", "", "{\"status\": \"ok\"}");
        (orphan.tool_call_id, orphan.name) = (None, None);
        let msgs = vec![
            result("orphan"),
            user.clone(),
            call("a"),
            result("a"),
            call("b"),
            user.clone(),
            orphan,
        ];
        let clean = sanitize_context(msgs);
        assert_eq!(clean, vec![user.clone(), call("a"), result("a"), user]);
    }
}
