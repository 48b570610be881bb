//! The input router: decides whether a line is a comma command (run it now) or natural language
//! (give it to the model), for human input and for the model's own text.
//!
//! Every executed command is recorded on the tape as a `command` event; a failed human command
//! falls back into the model as an escaped `<command>` block — unless the turn's policy refused
//! it (a guest's `,ls`) or its arguments did not parse (`,fs.read` without `path`): then the
//! refusal, or the error and the tool's usage line, is the answer and the model is not called.

use std::time::Instant;

use serde_json::{Value, json};

use super::commands::{self, CommandKind, ParsedCommand};
use crate::tape::Event;
use crate::tools::{ToolContext, ToolError};

/// Default timeout for a shell command typed by a human (`,cargo build`): long, because Ctrl-C
/// interrupts it. The model's own `bash` calls keep the tool's 30 s default.
const HUMAN_SHELL_TIMEOUT_SECONDS: u64 = 600;

/// Who wrote the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Human,
    Assistant,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Origin::Human => "human",
            Origin::Assistant => "assistant",
        }
    }
}

/// The result of one executed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandOutcome {
    pub name: String,
    pub ok: bool,
    pub output: String,
    /// `,quit` succeeded.
    pub exit: bool,
    /// The failure is the answer and the model is not asked: the turn's policy refused the
    /// command, or its arguments did not parse (the error and the usage line).
    pub answered: bool,
}

impl CommandOutcome {
    pub(crate) fn status(&self) -> &'static str {
        if self.ok { "ok" } else { "error" }
    }

    pub(crate) fn block(&self) -> String {
        commands::command_block(&self.name, self.status(), &self.output)
    }
}

/// How a human input is handled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserRoute {
    pub enter_model: bool,
    pub model_prompt: String,
    pub immediate_output: String,
    pub exit_requested: bool,
}

/// How the model's final text is handled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssistantRoute {
    /// Text shown to the user (commands removed).
    pub visible_text: String,
    /// Command blocks to feed back to the model; empty when no command ran.
    pub next_prompt: String,
    pub exit_requested: bool,
}

/// Routes input for one session.
pub struct Router {
    ctx: ToolContext,
}

impl Router {
    pub fn new(ctx: ToolContext) -> Self {
        Self { ctx }
    }

    /// Routes one human input as a whole (a multi-line input starting with `,` is one command).
    pub async fn route_user(&self, raw: &str) -> UserRoute {
        let text = raw.trim();
        if text.is_empty() {
            return UserRoute::default();
        }
        let Some(cmd) = commands::detect(text, self.ctx.registry()) else {
            return UserRoute {
                enter_model: true,
                model_prompt: text.to_string(),
                ..Default::default()
            };
        };
        let outcome = self.execute(&cmd, Origin::Human).await;
        if outcome.exit {
            return UserRoute {
                exit_requested: true,
                ..Default::default()
            };
        }
        if outcome.ok || outcome.answered {
            return UserRoute {
                immediate_output: outcome.output,
                ..Default::default()
            };
        }
        UserRoute {
            enter_model: true,
            model_prompt: outcome.block(),
            immediate_output: outcome.output,
            exit_requested: false,
        }
    }

    /// Routes the model's text line by line: comma commands outside fences run at once; inside
    /// a ``` fence a shell comma command starts a multi-line command that collects the following
    /// fence lines (blank lines kept) until the fence closes. A fence that runs no command stays
    /// visible verbatim (so Markdown code blocks survive); the text around commands stays
    /// visible too.
    pub async fn route_assistant(&self, text: &str) -> AssistantRoute {
        let mut visible: Vec<String> = Vec::new();
        let mut blocks: Vec<String> = Vec::new();
        let mut exit = false;
        // Lines of the open fence (opening line included) and whether it ran a command.
        let mut fence: Option<(Vec<String>, bool)> = None;
        let mut pending: Option<Vec<String>> = None;

        for line in text.lines() {
            let stripped = line.trim();
            if stripped.starts_with("```") {
                match fence.take() {
                    Some((mut lines, ran)) => {
                        if let Some(cmd) = pending.take() {
                            self.run_shell_lines(cmd, &mut blocks, &mut exit).await;
                        } else if !ran {
                            lines.push(line.to_string());
                            visible.extend(lines);
                        }
                    }
                    None => fence = Some((vec![line.to_string()], false)),
                }
                continue;
            }
            let command = if stripped.is_empty() {
                None
            } else {
                commands::detect(stripped, self.ctx.registry())
            };
            if let Some((lines, ran)) = fence.as_mut() {
                match command {
                    Some(cmd) if cmd.kind == CommandKind::Shell => {
                        if let Some(prev) = pending.take() {
                            self.run_shell_lines(prev, &mut blocks, &mut exit).await;
                        }
                        pending = Some(vec![cmd.raw]);
                        *ran = true;
                    }
                    Some(cmd) if pending.is_none() => {
                        self.run_into(&cmd, &mut blocks, &mut exit).await;
                        *ran = true;
                    }
                    _ => match pending.as_mut() {
                        Some(cmd_lines) => cmd_lines.push(line.to_string()),
                        None => lines.push(line.to_string()),
                    },
                }
                continue;
            }
            match command {
                Some(cmd) => self.run_into(&cmd, &mut blocks, &mut exit).await,
                None => visible.push(line.to_string()),
            }
        }
        if let Some(cmd) = pending.take() {
            self.run_shell_lines(cmd, &mut blocks, &mut exit).await;
        } else if let Some((lines, false)) = fence.take() {
            visible.extend(lines);
        }
        AssistantRoute {
            visible_text: collapse_blank_lines(&visible),
            next_prompt: blocks.join("\n"),
            exit_requested: exit,
        }
    }

    /// Runs the collected lines of a fenced multi-line shell command.
    async fn run_shell_lines(&self, lines: Vec<String>, blocks: &mut Vec<String>, exit: &mut bool) {
        let body = lines.join("\n").trim().to_string();
        if body.is_empty() {
            return;
        }
        let name = body
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        let cmd = ParsedCommand {
            kind: CommandKind::Shell,
            name,
            raw: body,
            args: None,
        };
        self.run_into(&cmd, blocks, exit).await;
    }

    async fn run_into(&self, cmd: &ParsedCommand, blocks: &mut Vec<String>, exit: &mut bool) {
        let outcome = self.execute(cmd, Origin::Assistant).await;
        *exit |= outcome.exit;
        blocks.push(outcome.block());
    }

    /// Executes one command and records it on the tape.
    pub(crate) async fn execute(&self, cmd: &ParsedCommand, origin: Origin) -> CommandOutcome {
        let started = Instant::now();
        let outcome = match cmd.kind {
            CommandKind::Shell => self.run_shell(&cmd.raw, origin).await,
            CommandKind::Internal => self.run_internal(cmd).await,
        };
        let event = json!({
            "origin": origin.as_str(),
            "kind": cmd.kind.as_str(),
            "raw": cmd.raw,
            "name": outcome.name,
            "status": outcome.status(),
            "elapsed_ms": started.elapsed().as_millis() as u64,
            "output": outcome.output,
        });
        self.ctx.tape().event(Event::Command, event).await;
        outcome
    }

    async fn run_shell(&self, raw: &str, origin: Origin) -> CommandOutcome {
        let mut args = json!({"cmd": raw});
        if origin == Origin::Human {
            args["timeout_seconds"] = json!(HUMAN_SHELL_TIMEOUT_SECONDS);
        }
        if self.ctx.registry().get("bash").is_none() {
            return CommandOutcome {
                name: "bash".into(),
                ok: false,
                output: "the bash tool is not enabled in this session".into(),
                exit: false,
                answered: false,
            };
        }
        self.run_tool("bash", args).await
    }

    /// Runs a tool through the registry (policy, redaction) as a command.
    async fn run_tool(&self, name: &str, args: Value) -> CommandOutcome {
        let registry = self.ctx.registry();
        let (ok, output, answered) = match registry.execute(name, args, self.ctx.clone()).await {
            Ok(out) => (true, out, false),
            Err(e) => (false, e.to_string(), matches!(e, ToolError::Refused(_))),
        };
        CommandOutcome {
            name: name.to_owned(),
            ok,
            output,
            exit: false,
            answered,
        }
    }

    /// Runs a tool's command. Arguments that do not parse (unbalanced quotes, a word or key the
    /// tool does not take, a missing or mistyped value) are answered with the error and the
    /// tool's usage line, before the tool runs — unless the policy refuses the tool anyway
    /// (then the refusal is the answer, as for any call).
    async fn run_internal(&self, cmd: &ParsedCommand) -> CommandOutcome {
        let name = cmd.name.clone();
        if name.starts_with("mcp.") && self.ctx.registry().get(&name).is_none() {
            // The first use of an MCP tool starts its server — for a turn that may use one.
            let policy = &self.ctx.turn.policy;
            if crate::tools::mcp::allowed_by(policy) {
                self.ctx.process.mcp.prepare().await;
            }
            if self.ctx.registry().get(&name).is_none() {
                let refused = !policy.allows(&name);
                let output = match refused {
                    true => policy.refusal(&name),
                    false => format!("unknown tool: {name}"),
                };
                return CommandOutcome {
                    name,
                    ok: false,
                    output,
                    exit: false,
                    answered: refused,
                };
            }
        }
        let parsed = match &cmd.args {
            None => Err(ToolError::invalid("unbalanced quotes")),
            Some(words) => self.command_args(&name, words),
        };
        let args = match parsed {
            Ok(args) => args,
            Err(e) if self.ctx.turn.policy.allows(&name) => {
                let usage = self.ctx.registry().get(&name).map(|t| t.usage());
                return CommandOutcome {
                    name: name.clone(),
                    ok: false,
                    output: format!(
                        "could not parse arguments of ,{name}: {e}\nusage: {}",
                        usage.unwrap_or_default()
                    ),
                    exit: false,
                    answered: true,
                };
            }
            // Refused by the policy in `run_tool`, before anything about the tool is shown.
            Err(_) => Value::Null,
        };
        let mut outcome = self.run_tool(&name, args).await;
        outcome.exit = outcome.ok && name == "quit" && outcome.output == "exit";
        outcome
    }

    /// A command's words as the tool's arguments: `key=value` pairs, and a first bare word for
    /// the tools that take one (`,tool.describe fs.read`), parsed as the tool's.
    fn command_args(&self, name: &str, words: &[String]) -> Result<Value, ToolError> {
        let (mut kwargs, positional) = commands::parse_kv(words);
        let mut positional = positional.into_iter();
        let key = match name {
            "tool.describe" | "tape.handoff" => Some("name"),
            "tape.search" => Some("query"),
            "model" => Some("model"),
            _ => None,
        };
        if let Some(key) = key.filter(|k| !kwargs.contains_key(*k))
            && let Some(first) = positional.next()
        {
            kwargs.insert(key.to_owned(), Value::String(first));
        }
        if let Some(word) = positional.next() {
            return Err(ToolError::invalid(format!("unexpected argument: {word}")));
        }
        let tool = self.ctx.registry().get(name);
        let tool = tool.ok_or_else(|| ToolError::Unknown(format!("unknown tool: {name}")))?;
        tool.parse_command(kwargs)
    }
}

/// Joins visible lines, trimming the ends and collapsing runs of blank lines left where
/// commands were removed.
fn collapse_blank_lines(lines: &[String]) -> String {
    let mut out: Vec<&str> = Vec::new();
    for line in lines {
        if line.trim().is_empty() && out.last().is_none_or(|l| l.trim().is_empty()) {
            continue;
        }
        out.push(line);
    }
    out.join("\n").trim().to_string()
}
