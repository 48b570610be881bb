//! Tools about the agent itself: `help`, `tools`, `tool.describe`, `usage`, `quit`.

use schemars::JsonSchema;
use serde::Deserialize;

use super::registry::NoArgs;
use super::{Tool, ToolContext, ToolError};
use crate::chat::CHAT_COMMANDS;

/// How commands work, above the list of the ones the turn may use.
const HELP_INTRO: &str = "Commands start with ',' at the beginning of a line. A tool's name runs \
that tool (,fs.read path=README.md; ,tool.describe fs.read shows its arguments).";

/// `,help`: how commands work, the chat commands ([`CHAT_COMMANDS`]: `/stop` and the rest, the
/// ones backed by a tool only when the policy allows it), then the other commands the turn's
/// policy allows, one line each (name and short description), grouped by the name's prefix
/// (`fs.*`, `tape.*`; names without one first), then how shell commands work — short enough for
/// one chat message.
fn help(ctx: &ToolContext) -> String {
    let policy = &ctx.turn.policy;
    let registry = ctx.registry();
    let chat: Vec<String> = CHAT_COMMANDS
        .iter()
        .filter(|(name, _)| registry.get(name).is_none() || policy.allows(name))
        .map(|(name, about)| format!(",{name} (/{name}) — {about}"))
        .collect();
    let mut groups: Vec<(&str, Vec<String>)> = vec![("chat", chat)];
    let tools = registry.tools();
    let is_chat_command = |name: &str| CHAT_COMMANDS.iter().any(|(n, _)| *n == name);
    let allowed = tools
        .iter()
        .filter(|t| policy.allows(&t.name) && !is_chat_command(&t.name));
    let (plain, dotted): (Vec<_>, Vec<_>) = allowed.partition(|t| !t.name.contains('.'));
    for tool in plain.into_iter().chain(dotted) {
        let group = tool.name.split_once('.').map_or("", |(prefix, _)| prefix);
        let line = format!(",{} — {}", tool.name, tool.description);
        match groups.last_mut() {
            Some((last, lines)) if *last == group => lines.push(line),
            _ => groups.push((group, vec![line])),
        }
    }
    let shell = match ctx.registry().get("bash").is_some() && policy.allows("bash") {
        true => "Anything else runs in the shell: ,git status",
        false => "Shell commands (,git status) are not available to you here.",
    };
    let lists: Vec<String> = groups.into_iter().map(|(_, l)| l.join("\n")).collect();
    format!(
        "{HELP_INTRO}\n{shell}\nAliases: ,tool = ,tool.describe; ,tape = ,tape.info. Mention \
         $name (e.g. $fs.read) in a message to show the model that tool's details.\n\n{}",
        lists.join("\n\n")
    )
}

#[derive(Deserialize, JsonSchema)]
struct DescribeArgs {
    /// tool name, e.g. fs.read
    name: String,
}

/// `help`, `tools`, `tool.describe`, `usage`, `quit` (`help`, `tools` and `quit` are commands a
/// person types: not offered to the model).
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "help",
            "Show command help",
            "How comma commands work, and one line for each command this turn may use.",
            |_: NoArgs, ctx: ToolContext| async move { Ok(help(&ctx)) },
        )
        .command_only(),
        Tool::new(
            "tools",
            "List available tools",
            "One line per tool this turn may use: name and description.",
            |_: NoArgs, ctx: ToolContext| async move {
                Ok(ctx
                    .registry()
                    .tools()
                    .iter()
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
                    .filter(|t| ctx.turn.policy.allows(&t.name))
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
                let totals = ctx.process.usage.session_totals(ctx.session_id()).await?;
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
