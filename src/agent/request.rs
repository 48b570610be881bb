//! What a model call is made of, besides the loop that makes it: the system prompt of a step,
//! the notes a prompt carries (the working checkpoint; whether the context shows a note
//! already), and a message sequence every OpenAI-compatible provider accepts.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use super::prompt::{self, PromptParts};
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
pub(crate) fn noted(context: &[Value], note: &str) -> bool {
    context
        .iter()
        .any(|m| m["role"] == "user" && m["content"].as_str().is_some_and(|c| c.contains(note)))
}

/// A hash of a prompt text, to tell whether it changed.
pub(crate) fn stable_hash(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// Keeps the message sequence valid for OpenAI-compatible providers: an assistant message's
/// `tool_calls` must be answered by `tool` messages with matching ids (a crash between call and
/// result leaves them unanswered), and a `tool` message needs a preceding call (a handoff made by
/// a tool puts the anchor between the call and its result).
pub(crate) fn sanitize_context(messages: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let msg = &messages[i];
        let role = msg.get("role").and_then(Value::as_str).unwrap_or_default();
        if role == "tool" {
            i += 1; // orphan result: its call is not in the context
            continue;
        }
        let ids: Vec<&str> = msg
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| c.get("id").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        if role != "assistant" || ids.is_empty() {
            out.push(msg.clone());
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < messages.len() && messages[j].get("role").and_then(Value::as_str) == Some("tool")
        {
            j += 1;
        }
        let answered: Vec<&str> = messages[i + 1..j]
            .iter()
            .filter_map(|m| m.get("tool_call_id").and_then(Value::as_str))
            .collect();
        if ids.iter().all(|id| answered.contains(id)) {
            out.extend(messages[i..j].iter().cloned());
        }
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sanitize_drops_unanswered_calls_and_orphan_results() {
        let call = |id: &str| json!({"role":"assistant","content":"","tool_calls":[{"id":id,"type":"function","function":{"name":"x","arguments":"{}"}}]});
        let result = |id: &str| json!({"role":"tool","content":"ok","tool_call_id":id,"name":"x"});
        let user = json!({"role":"user","content":"hi"});
        let msgs = vec![
            result("orphan"),
            user.clone(),
            call("a"),
            result("a"),
            call("b"),
            user.clone(),
            json!({"role":"tool","content":"{\"status\": \"ok\"}"}),
        ];
        let clean = sanitize_context(msgs);
        assert_eq!(clean, vec![user.clone(), call("a"), result("a"), user]);
    }
}
