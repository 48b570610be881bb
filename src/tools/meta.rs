//! Tools about the agent itself: `help`, `tools`, `tool.describe`, `usage`, `quit`.

use schemars::JsonSchema;
use serde::Deserialize;

use super::registry::NoArgs;
use super::{Tool, ToolContext, ToolError};

const HELP: &str = "Commands start with ',' at the beginning of a line.
Known names run internal tools; anything else runs in the shell (bash).

  ,help                          this help
  ,tools                         list the tools
  ,tool.describe name=fs.read    show a tool's details (alias ,tool)
  ,tape.info                     tape summary (alias ,tape)
  ,tape.search query=...         search the conversation history
  ,tape.anchors                  list anchors
  ,tape.handoff name=phase-2 summary=...   start a new context phase
  ,tape.reset archive=true       archive the tape and start over
  ,model [provider:model]        show or switch this session's model
  ,usage                         this session's tokens and cost, today and this month
  ,git status                    any other command runs in the shell
  ,quit                          leave

Mention $name (e.g. $fs.read) in a message to show that tool's details to the model.";

#[derive(Deserialize, JsonSchema)]
struct DescribeArgs {
    /// tool name, e.g. fs.read
    name: String,
}

/// `help`, `tools`, `tool.describe`, `usage`, `quit` (`help`, `tools` and `quit` are commands a
/// person types: not offered to the model).
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::new("help", "Show command help", HELP, |_: NoArgs, _| async {
            Ok(HELP.to_string())
        })
        .command_only(),
        Tool::new(
            "tools",
            "List available tools",
            "One line per tool this turn may use: name and description.",
            |_: NoArgs, ctx: ToolContext| async move {
                Ok(ctx
                    .registry()
                    .tools()
                    .filter(|t| ctx.turn.policy.allows(&t.name))
                    .map(|t| format!("{}: {}", t.name, t.description))
                    .collect::<Vec<_>>()
                    .join("\n"))
            },
        )
        .command_only(),
        Tool::new(
            "tool.describe",
            "Show one tool's details",
            "Shows the name, description, detail and argument schema of a tool.",
            |DescribeArgs { name }, ctx: ToolContext| async move {
                let tool = ctx
                    .registry()
                    .get(&name)
                    .ok_or_else(|| ToolError::Unknown(format!("unknown tool: {name}")))?;
                Ok(format!(
                    "name: {}\ndescription: {}\ndetail: {}\nschema: {}",
                    tool.name, tool.description, tool.detail, tool.schema
                ))
            },
        ),
        Tool::new(
            "usage",
            "Show this session's token usage",
            "This session's model calls today and this month: tokens, the share of the input \
             read from the provider's cache, and the cost when the model is priced.",
            |_: NoArgs, ctx: ToolContext| async move {
                let (ledger, session) = (ctx.process.usage.clone(), ctx.session_id().to_owned());
                let totals = tokio::task::spawn_blocking(move || ledger.session_totals(&session))
                    .await
                    .map_err(|e| ToolError::new(e.to_string()))??;
                Ok(crate::usage::session_text(
                    ctx.session_id(),
                    &totals.0,
                    &totals.1,
                ))
            },
        ),
        Tool::new(
            "quit",
            "End the session",
            "Ends the interactive session (acted upon when typed as ,quit).",
            |_: NoArgs, _| async { Ok("exit".to_string()) },
        )
        .command_only(),
    ]
}
