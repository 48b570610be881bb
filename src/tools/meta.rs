//! Tools about the agent itself: `help`, `tools`, `tool.describe`, `quit`.

use serde::Deserialize;
use serde_json::json;

use super::registry::parse_args;
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
  ,git status                    any other command runs in the shell
  ,quit                          leave

Mention $name (e.g. $fs.read) in a message to show that tool's details to the model.";

#[derive(Deserialize)]
struct DescribeArgs {
    name: String,
}

/// `help`, `tools`, `tool.describe`, `quit`.
pub fn tools() -> Vec<Tool> {
    let empty = json!({"type": "object", "properties": {}});
    vec![
        Tool::new(
            "help",
            "Show command help",
            HELP,
            empty.clone(),
            |_, _| async { Ok(HELP.to_string()) },
        ),
        Tool::new(
            "tools",
            "List available tools",
            "One line per tool this turn may use: name and description.",
            empty.clone(),
            |_, ctx: ToolContext| async move {
                Ok(ctx
                    .registry()
                    .tools()
                    .filter(|t| ctx.turn.policy.allows(&t.name))
                    .map(|t| format!("{}: {}", t.name, t.description))
                    .collect::<Vec<_>>()
                    .join("\n"))
            },
        ),
        Tool::new(
            "tool.describe",
            "Show one tool's details",
            "Shows the name, description, detail and argument schema of a tool.",
            json!({"type": "object", "properties": {"name": {"type": "string", "description": "tool name, e.g. fs.read"}}, "required": ["name"]}),
            |args, ctx: ToolContext| async move {
                let DescribeArgs { name } = parse_args(args)?;
                let tool = ctx
                    .registry()
                    .get(&name)
                    .ok_or_else(|| ToolError::new(format!("unknown tool: {name}")))?;
                Ok(format!(
                    "name: {}\ndescription: {}\ndetail: {}\nschema: {}",
                    tool.name, tool.description, tool.detail, tool.schema
                ))
            },
        ),
        Tool::new(
            "quit",
            "End the session",
            "Ends the interactive session (acted upon when typed as ,quit).",
            empty,
            |_, _| async { Ok("exit".to_string()) },
        ),
    ]
}
