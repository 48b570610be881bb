//! Tape tools: `tape.info`, `tape.search`, `tape.output`, `tape.anchors`, `tape.handoff`,
//! `tape.reset`.
//!
//! Each tool works on the session's tape through its store ([`crate::tape::TapeStore`]: a file's work on
//! the blocking pool — a search over a large tape takes milliseconds).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::registry::NoArgs;
use super::{Tool, ToolContext, ToolError};
use crate::tape::output::byte_at;
use crate::tape::{Searched, SharedTape};

/// How many anchors `tape.anchors` lists.
const ANCHORS_SHOWN: usize = 50;

#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    /// text to look for
    query: String,
    /// maximum number of matches
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1))]
    limit: i64,
}

fn default_limit() -> i64 {
    20
}

#[derive(Deserialize, JsonSchema)]
struct OutputArgs {
    /// id from the cut result's note
    call_id: String,
    /// first character (0-based)
    #[serde(default)]
    #[schemars(range(min = 0))]
    offset: i64,
    /// characters to show
    #[serde(default = "default_output_chars")]
    #[schemars(range(min = 1))]
    limit: i64,
}

fn default_output_chars() -> i64 {
    16_000
}

#[derive(Deserialize, JsonSchema)]
struct HandoffArgs {
    /// anchor name (default: handoff)
    name: Option<String>,
    /// what was done and learned
    summary: Option<String>,
    /// what to do next
    next_steps: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct ResetArgs {
    /// keep the old tape as a .bak file
    #[serde(default)]
    archive: bool,
}

/// `tape.output` output: characters `offset..offset + limit` of a call's whole result, after a
/// line saying which and how to read on. A guest (`guest`) reads only the results of guests'
/// turns, as in its context.
async fn output_text(
    tape: &SharedTape,
    call_id: &str,
    offset: usize,
    limit: usize,
    guest: bool,
) -> anyhow::Result<String> {
    let Some((text, meta)) = tape.output(call_id.trim()).await? else {
        anyhow::bail!("no result of tool call {call_id:?} on this tape");
    };
    if guest && meta["role"] != "guest" {
        anyhow::bail!("the output of a command run for an owner is not shown in a guest's turn");
    }
    let total = text.chars().count();
    let start = byte_at(&text, offset);
    let end = byte_at(&text, offset.saturating_add(limit));
    let shown_end = offset.saturating_add(limit).min(total);
    let more = match shown_end < total {
        true => format!("; more with offset={shown_end}"),
        false => String::new(),
    };
    Ok(format!(
        "[characters {}..{shown_end} of {total}{more}]\n{}",
        offset.min(total),
        &text[start..end]
    ))
}

/// The tape tools.
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "tape.info",
            "Show tape summary",
            "Shows the tape name, the number of entries and anchors, the last anchor, the entries \
             since it (the current context) and the token usage of the last model call.",
            |_: NoArgs, ctx: ToolContext| async move { Ok(ctx.tape().info().await?.to_string()) },
        ),
        Tool::new(
            "tape.search",
            "Search the tape",
            "Searches messages and tool results of the whole tape (not only the current context), \
             newest first; a guest's search covers the messages only. Matches substrings and, \
             for queries of 3+ characters, typos (fuzzy). Output: one `#<id> <kind> <payload>` \
             line per match.",
            |SearchArgs { query, limit }, ctx: ToolContext| async move {
                if limit < 1 {
                    return Err(ToolError::invalid("limit must be at least 1"));
                }
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                let what = ctx.turn.policy.searched();
                let found = ctx.tape().search(&query, limit, what).await?;
                if found.is_empty() {
                    return Ok("(no matches)".to_string());
                }
                let rows = found
                    .iter()
                    .map(|e| format!("#{} {} {}", e.id, e.kind, e.payload));
                Ok(rows.collect::<Vec<_>>().join("\n"))
            },
        ),
        Tool::new(
            "tape.output",
            "Read a long tool result",
            "Shows part of a tool call's whole result, by the call's id: a result longer than \
             BUB_TOOL_RESULT_MAX_CHARS reaches you as its head and tail, with a note naming \
             the call id and where the cut begins.",
            |OutputArgs {
                 call_id,
                 offset,
                 limit,
             },
             ctx: ToolContext| async move {
                if limit < 1 || offset < 0 {
                    return Err(ToolError::invalid("offset ≥ 0 and limit ≥ 1"));
                }
                let (offset, limit) = (offset as usize, limit as usize);
                let guest = ctx.turn.policy.searched() == Searched::Conversation;
                Ok(output_text(ctx.tape(), &call_id, offset, limit, guest).await?)
            },
        ),
        Tool::new(
            "tape.anchors",
            "List tape anchors",
            "Lists the last 50 anchors (handoff points) as `<name> state=<JSON>`, oldest first.",
            |_: NoArgs, ctx: ToolContext| async move {
                let anchors = ctx.tape().anchors(ANCHORS_SHOWN).await?;
                if anchors.is_empty() {
                    return Ok("(no anchors)".to_string());
                }
                let rows = anchors.iter().map(|a| {
                    let state = a.state().cloned().unwrap_or_else(|| json!({}));
                    format!("{} state={}", a.name().unwrap_or("-"), state)
                });
                Ok(rows.collect::<Vec<_>>().join("\n"))
            },
        ),
        Tool::new(
            "tape.handoff",
            "Hand off to a new context phase",
            "Writes an anchor: your context then starts after it, with `summary` and `next_steps` \
             shown first. Use it when the context grows long or a phase of work is done; put \
             everything you still need into the summary.",
            |args: HandoffArgs, ctx: ToolContext| async move {
                let HandoffArgs {
                    name,
                    summary,
                    next_steps,
                } = args;
                let name = name
                    .filter(|n| !n.trim().is_empty())
                    .unwrap_or_else(|| "handoff".into());
                // A guest's summary leads the next context: it says whose words it is.
                let by = crate::memory::Author::of(&ctx.turn.authority);
                let summary = summary.map(|s| by.marked(&s));
                let tape = ctx.tape();
                tape.handoff(&name, summary.as_deref(), next_steps.as_deref())
                    .await?;
                Ok(format!("handoff created: {name}"))
            },
        ),
        Tool::new(
            "tape.reset",
            "Reset the tape",
            "Starts the session's tape afresh (archived as a .bak file with archive=true, else \
             deleted), forgets expanded tool and skill details and stops the session's \
             background commands.",
            |ResetArgs { archive }, ctx: ToolContext| async move {
                let archived = ctx.tape().reset(archive).await?;
                ctx.expanded().clear();
                ctx.process.background.stop_session(&ctx.session.id);
                Ok(archived.map_or_else(|| "ok".to_string(), |p| format!("Archived: {p}")))
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Authority;
    use crate::config::Settings;
    use crate::tape::{Event, Kind, Record};
    use crate::tools::Registry;

    fn context(dir: &std::path::Path) -> ToolContext {
        let settings = Settings::with_defaults(dir.to_path_buf(), dir.to_path_buf());
        let registry = Registry::new(tools(), &[]);
        ToolContext::standalone(settings, registry, "cli:test", Authority::terminal()).unwrap()
    }

    async fn run(
        ctx: &ToolContext,
        name: &str,
        args: serde_json::Value,
    ) -> Result<String, ToolError> {
        ctx.registry().execute(name, args, ctx.clone()).await
    }

    #[tokio::test]
    async fn output_reads_a_calls_whole_result_and_a_guest_only_a_guests() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let tape = ctx.tape();
        for (id, role) in [("c1", "owner"), ("c2", "guest")] {
            let call = json!({"calls": [{"id": id, "type": "function",
                "function": {"name": "bash", "arguments": "{}"}}]});
            let result = json!({"results": [format!("{id}:0123456789")]});
            let records = vec![
                Record::new(Kind::ToolCall, call, json!({"role": role})),
                Record::event(Event::ToolRefused, json!({})),
                Record::new(Kind::ToolResult, result, json!({"role": role})),
            ];
            tape.append(records).await.unwrap();
        }
        let out = output_text(tape, "c1", 3, 4, false).await.unwrap();
        assert_eq!(out, "[characters 3..7 of 13; more with offset=7]\n0123");
        let out = output_text(tape, "c2", 10, 100, true).await.unwrap();
        assert_eq!(out, "[characters 10..13 of 13]\n789");
        let refused = output_text(tape, "c1", 0, 100, true).await.unwrap_err();
        assert!(refused.to_string().contains("not shown in a guest's turn"));
        assert!(output_text(tape, "nope", 0, 1, false).await.is_err());
    }

    #[tokio::test]
    async fn handoff_info_anchors_search() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        ctx.tape().ensure_bootstrap().await.unwrap();
        let msg = json!({"role": "user", "content": "Please review the database migration plan."});
        let msg = Record::new(Kind::Message, msg, json!({}));
        ctx.tape().append(vec![msg]).await.unwrap();
        let out = run(
            &ctx,
            "tape.handoff",
            json!({"summary": "reviewed", "next_steps": "ship"}),
        )
        .await;
        assert_eq!(out.unwrap(), "handoff created: handoff");
        let info = run(&ctx, "tape.info", json!({})).await.unwrap();
        assert!(
            info.contains("entries=5\nanchors=2\nlast_anchor=handoff\nentries_since_last_anchor=1"),
            "{info}"
        );
        let anchors = run(&ctx, "tape.anchors", json!({})).await.unwrap();
        assert_eq!(
            anchors,
            "session/start state={\"owner\":\"human\",\"session\":\"cli:test\"}\nhandoff state={\"summary\":\"reviewed\",\"next_steps\":\"ship\"}"
        );
        let found = run(
            &ctx,
            "tape.search",
            json!({"query": "databse migrtion", "limit": "5"}),
        )
        .await
        .unwrap();
        assert!(
            found.starts_with("#3 message {\"role\":\"user\""),
            "{found}"
        );
        let none = run(&ctx, "tape.search", json!({"query": "kubernetes"}))
            .await
            .unwrap();
        assert_eq!(none, "(no matches)");
        assert!(run(&ctx, "tape.search", json!({})).await.is_err());
    }

    #[tokio::test]
    async fn reset_archives_and_clears_expanded() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        ctx.expanded().tool("fs.read");
        assert_eq!(
            run(&ctx, "tape.anchors", json!({})).await.unwrap(),
            "(no anchors)"
        );
        let command = Record::event(Event::Command, json!(1));
        ctx.tape().append(vec![command]).await.unwrap();
        let out = run(&ctx, "tape.reset", json!({"archive": "true"}))
            .await
            .unwrap();
        let path = out.strip_prefix("Archived: ").expect(&out);
        assert!(std::path::Path::new(path).exists());
        assert_eq!(*ctx.expanded(), Default::default());
        let anchors = run(&ctx, "tape.anchors", json!({})).await.unwrap();
        assert!(
            anchors.starts_with(
                "session/start state={\"owner\":\"human\",\"session\":\"cli:test\",\"archived\":"
            ),
            "{anchors}"
        );
        assert_eq!(run(&ctx, "tape.reset", json!({})).await.unwrap(), "ok");
        assert_eq!(ctx.tape().len().await.unwrap(), 2);
    }
}
