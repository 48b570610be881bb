//! Memory tools: `memory.remember`, `memory.forget`, `memory.list`, `memory.search` — the
//! facts and preferences kept across sessions ([`crate::memory`]). `scope` is `chat` (this
//! chat's memory, the default) or `global` (every session's, owners only: the registry refuses
//! it for a confined turn). File work runs on the blocking pool.

use schemars::JsonSchema;
use serde::Deserialize;

use super::registry::NoArgs;
use super::registry::Reach;
use super::{Tool, ToolContext, ToolError};
use crate::memory::{self, Author, Memory};

#[derive(Deserialize, JsonSchema)]
struct RememberArgs {
    /// the fact or preference, one line
    text: String,
    /// chat (default) or global
    scope: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct LessonArgs {
    /// what failed and what fixed it, one line
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct CheckpointArgs {
    /// current goal, key facts, next step (at most 1 KB; empty clears it)
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    /// text to look for
    query: String,
}

/// What `memory.remember` and `memory.forget` reach: with `scope=global`, every session's memory.
fn global(args: &RememberArgs) -> Reach<'_> {
    let global_memory = args.scope.as_deref().map(str::trim) == Some("global");
    Reach {
        global_memory,
        ..Reach::default()
    }
}

/// The memory `scope` names for the session in `ctx` (with `text` checked not to be empty).
fn scope_of(
    ctx: &ToolContext,
    scope: Option<&str>,
    text: &str,
) -> Result<memory::Scope, ToolError> {
    if text.trim().is_empty() {
        return Err(ToolError::invalid("text must not be empty"));
    }
    match scope.map(str::trim).unwrap_or("chat") {
        "" | "chat" => Ok(memory::Scope::Chat(ctx.session_id().to_owned())),
        "global" => Ok(memory::Scope::Global),
        other => Err(ToolError::invalid(format!(
            "scope must be chat or global, got {other:?}"
        ))),
    }
}

/// The scopes a turn in `ctx` may read: its chat's, and the global one for an owner.
fn readable(ctx: &ToolContext) -> Vec<(&'static str, memory::Scope)> {
    let mut scopes = vec![("chat", memory::Scope::Chat(ctx.session_id().to_owned()))];
    if !ctx.turn.policy.own_chat_only() {
        scopes.insert(0, ("global", memory::Scope::Global));
    }
    scopes
}

/// The memory of `ctx`'s `BUB_HOME`, unless memory is turned off.
fn memory_of(ctx: &ToolContext) -> Result<Memory, ToolError> {
    if !ctx.process.memory_enabled {
        return Err(ToolError::new(
            "memory is turned off (BUB_MEMORY_ENABLED=false)",
        ));
    }
    Ok(ctx.process.memory())
}

/// The memory tools.
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::reaching(
            "memory.remember",
            "Remember a fact or preference",
            "Keeps one line (a fact about the user, a preference, a decision) in this chat's \
             memory, or with scope=global in every session's (owners only). It stays across \
             /new, tape.reset and restarts, and is shown in the system prompt. Remembering it \
             again refreshes it; the oldest entries make room when the memory is full.",
            global,
            |RememberArgs { text, scope }, ctx: ToolContext| async move {
                let scope = scope_of(&ctx, scope.as_deref(), &text)?;
                let by = Author::of(&ctx.turn.authority);
                let entry = memory_of(&ctx)?.remember(&scope, &text, &by).await?;
                Ok(format!("remembered: {entry}"))
            },
        ),
        Tool::reaching(
            "memory.forget",
            "Forget remembered entries",
            "Removes the entries of this chat's memory (or with scope=global, every session's; \
             owners only) that contain the text, ignoring case.",
            global,
            |RememberArgs { text, scope }, ctx: ToolContext| async move {
                let scope = scope_of(&ctx, scope.as_deref(), &text)?;
                let by = Author::of(&ctx.turn.authority);
                let gone = memory_of(&ctx)?.forget(&scope, &text, &by).await?;
                Ok(match gone.len() {
                    0 => "nothing matched".to_owned(),
                    n => format!("forgot {n}: {}", gone.join("; ")),
                })
            },
        ),
        Tool::new(
            "memory.list",
            "List what is remembered",
            "Lists the entries of the global memory (owners) and of this chat's memory.",
            |_: NoArgs, ctx: ToolContext| async move {
                let scopes = readable(&ctx);
                Ok(listing(&memory_of(&ctx)?, &scopes, "").await)
            },
        ),
        Tool::new(
            "memory.lesson",
            "Keep a lesson",
            "Keeps what failed and what fixed it (one line) in this chat's memory, as `lesson: …`, \
             so the next session does not repeat the mistake. Bub also keeps one by itself when \
             a tool call fails and a later call of the same tool in the turn works.",
            |LessonArgs { text }, ctx: ToolContext| async move {
                let scope = scope_of(&ctx, None, &text)?;
                let by = Author::of(&ctx.turn.authority);
                let lesson = format!("lesson: {}", text.trim());
                let entry = memory_of(&ctx)?.remember(&scope, &lesson, &by).await?;
                Ok(format!("remembered: {entry}"))
            },
        ),
        Tool::new(
            "memory.checkpoint",
            "Save this session's working checkpoint",
            "Replaces this session's working checkpoint (at most 1 KB: the current goal, key \
             facts, the next step). It is shown at every step, so a long task goes on after the \
             conversation is compacted; empty text clears it.",
            |CheckpointArgs { text }, ctx: ToolContext| async move {
                let session = ctx.session_id().to_owned();
                let by = Author::of(&ctx.turn.authority);
                let memory = memory_of(&ctx)?;
                Ok(match memory.set_checkpoint(&session, &text, &by).await? {
                    kept if kept.is_empty() => "checkpoint cleared".to_owned(),
                    kept => format!("checkpoint saved ({} bytes)", kept.len()),
                })
            },
        ),
        Tool::new(
            "memory.search",
            "Search what is remembered",
            "The remembered entries containing the query (ignoring case).",
            |SearchArgs { query }, ctx: ToolContext| async move {
                let scopes = readable(&ctx);
                Ok(listing(&memory_of(&ctx)?, &scopes, &query).await)
            },
        ),
    ]
}

/// `<scope>: <entry>` per entry of `scopes` containing `query` (all when empty).
async fn listing(memory: &Memory, scopes: &[(&str, memory::Scope)], query: &str) -> String {
    let needle = query.trim().to_lowercase();
    let mut rows: Vec<String> = Vec::new();
    for (name, scope) in scopes {
        let entries = memory.list(scope).await.into_iter();
        let found = entries.filter(|e| e.to_lowercase().contains(&needle));
        rows.extend(found.map(|e| format!("{name}: {e}")));
    }
    if rows.is_empty() {
        "(nothing remembered)".to_owned()
    } else {
        rows.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::access::{Authority, Role};
    use crate::config::Settings;

    #[tokio::test]
    async fn a_guest_writes_only_its_chat_memory_and_reads_no_global_one() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings::with_defaults(dir.path().join("home"), dir.path().to_owned());
        let memory = Memory::new(&settings.home);
        memory
            .remember(&memory::Scope::Global, "owner secret", &Author::Owner)
            .await
            .unwrap();
        let mut guest = Authority::terminal();
        guest.role = Role::Guest;
        let registry = crate::tools::builtin_registry(&[]);
        let ctx = ToolContext::standalone(settings, registry, "telegram:7", guest).unwrap();
        let call = |args: serde_json::Value, name: &'static str| {
            let ctx = ctx.clone();
            async move { ctx.registry().execute(name, args, ctx.clone()).await }
        };
        let refused = call(json!({"text": "x", "scope": "global"}), "memory.remember").await;
        assert!(matches!(refused, Err(ToolError::Refused(_))), "{refused:?}");
        let kept = call(json!({"text": "likes tea"}), "memory.remember").await;
        assert_eq!(kept.unwrap(), "remembered: [guest] likes tea");
        let listed = call(json!({}), "memory.list").await.unwrap();
        assert_eq!(listed, "chat: [guest] likes tea");
        assert_eq!(memory.list(&memory::Scope::Global).await, ["owner secret"]);
    }
}
