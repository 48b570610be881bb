//! `bub chat`: the interactive terminal, an IM. One session, a line editor with history that
//! stays usable while a turn runs ([`editor`]: lines are read on a thread of their own), a
//! status line (time, mode, model, tape entries, last anchor), Ctrl-X shell mode. Answers,
//! the model's tool calls as they start and end ([`trace`]) and notices print above the prompt
//! ([`screen`]). Lines typed while a turn runs are queued and go to the next turn as one batch,
//! as a Telegram chat's messages do; the chat commands mean what they mean in a chat
//! ([`typed`]; `/stop` and Ctrl-C stop the running turn at once). The loop that decides what
//! runs when is [`conversation`].
//!
//! When stdin is not a terminal, lines are read plainly (no prompt, no editor) so chat can be
//! scripted: one turn per line, in order; the controls work there too.

pub mod admin;
mod conversation;
pub mod db;
mod editor;
pub mod init;
pub mod listing;
pub mod mcp;
mod screen;
pub mod send;
pub mod status;
pub mod trace;
mod typed;

use std::io::IsTerminal;
use std::sync::Arc;

use crate::agent::{AgentRuntime, TurnResult};
use crate::chat::SessionId;

const BOLD_GREEN: &str = "\x1b[1;32m";
const BOLD_RED: &str = "\x1b[1;31m";
const BOLD_BLUE: &str = "\x1b[1;34m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

/// Runs the chat loop until Ctrl-D, end of input or `,quit`.
pub async fn run_chat(agent: Arc<AgentRuntime>, session_id: String) -> anyhow::Result<()> {
    let session_id = SessionId::from(session_id);
    let style = Style {
        color: std::io::stdout().is_terminal(),
    };
    if std::io::stdin().is_terminal() {
        conversation::interactive(agent, session_id, style).await?;
    } else {
        conversation::piped(agent, session_id, style).await?;
    }
    println!("Bye.");
    Ok(())
}

fn print_welcome(agent: &AgentRuntime, style: Style) {
    let s = agent.settings();
    println!("{}", style.paint(BOLD_BLUE, "Bub"));
    println!("workspace: {}", s.workspace.display());
    println!("model: {}", s.model);
    println!(
        "{}",
        style.dim("Commands start with ','. Ctrl-X toggles shell mode, ',help' lists commands, ',debug' shows tool calls in full. Type on while Bub works: lines are queued for the next turn. Ctrl-C stops the running turn, Ctrl-D exits.")
    );
}

async fn status_line(agent: &AgentRuntime, session_id: &SessionId, shell_mode: bool) -> String {
    let time = chrono::Local::now().format("%H:%M");
    let mode = if shell_mode { "shell" } else { "agent" };
    let model = agent.session_model(session_id).await;
    match agent.tape_info(session_id).await {
        Ok(info) => format!(
            "{time}  mode:{mode}  model:{model}  entries:{} anchors:{} last:{}",
            info.entries,
            info.anchors,
            info.last_anchor.as_deref().unwrap_or("-")
        ),
        Err(_) => format!("{time}  mode:{mode}  model:{model}"),
    }
}

/// What to show of a turn's result: the command's output, the error, the answer, each under
/// its label (on a terminal).
fn rendered_result(result: &TurnResult, style: Style) -> String {
    let error = result
        .error
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    let blocks = [
        ("Command", BOLD_GREEN, result.immediate_output.as_str()),
        ("Error", BOLD_RED, error.as_str()),
        ("Assistant", BOLD_BLUE, result.assistant_output.as_str()),
    ];
    let mut shown = Vec::new();
    for (label, color, text) in blocks {
        if text.trim().is_empty() {
            continue;
        }
        if style.color {
            shown.push(style.paint(color, label));
        }
        shown.push(text.trim_end().to_owned());
    }
    shown.join("\n")
}

/// Whether to colour output (stdout is a terminal).
#[derive(Clone, Copy)]
struct Style {
    color: bool,
}

impl Style {
    fn paint(self, color: &str, text: &str) -> String {
        if self.color {
            format!("{color}{text}{RESET}")
        } else {
            text.to_owned()
        }
    }

    fn dim(self, text: &str) -> String {
        self.paint(DIM, text)
    }
}
