//! `bub chat`: the interactive terminal. One session, a line editor with history, a status line
//! (time, mode, model, tape entries, last anchor), Ctrl-X shell mode, Ctrl-C to interrupt the
//! running turn (the session survives), Ctrl-D to leave. The model's tool calls are shown as they
//! start and end ([`trace`]); `,debug` (answered here, never sent to the model or the shell)
//! shows them in full. When stdin is not a terminal, lines are read plainly (no prompt, no
//! editor) so chat can be scripted.

pub mod admin;
pub mod db;
mod editor;
pub mod init;
pub mod listing;
pub mod mcp;
pub mod status;
pub mod trace;

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use tokio::io::AsyncBufReadExt;

use crate::access::Authority;
use crate::agent::{AgentRuntime, TurnResult};
use crate::chat::SessionId;
use crate::tape::Event;
use crate::tape::md5_hex;
use crate::tools::ToolObserver;
use editor::{LineEditor, Read};
use trace::Trace;

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
        interactive(agent, &session_id, style).await?;
    } else {
        piped(&agent, &session_id, style).await?;
    }
    println!("Bye.");
    Ok(())
}

/// Lines from a pipe or file, one turn each.
async fn piped(agent: &AgentRuntime, session_id: &SessionId, style: Style) -> anyhow::Result<()> {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut debug = false;
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() || toggled_debug(&line, &mut debug, style) {
            continue;
        }
        let Some(result) = turn(agent, session_id, &line, style, debug).await else {
            continue;
        };
        if result.exit_requested {
            break;
        }
    }
    Ok(())
}

async fn interactive(
    agent: Arc<AgentRuntime>,
    session_id: &SessionId,
    style: Style,
) -> anyhow::Result<()> {
    let settings = agent.settings();
    let history = settings.home.join("history").join(format!(
        "{}.history",
        md5_hex(&settings.workspace.to_string_lossy())
    ));
    let mut commands = agent.tool_names();
    commands.sort();
    let mut editor = LineEditor::new(history, commands)?;
    let folder = settings
        .workspace
        .file_name()
        .map_or_else(|| "bub".to_owned(), |n| n.to_string_lossy().into_owned());
    print_welcome(&agent, style);

    let mut shell_mode = false;
    let mut debug = false;
    let mut initial = (String::new(), String::new());
    loop {
        println!(
            "{}",
            style.dim(&status_line(&agent, session_id, shell_mode).await)
        );
        let prompt = format!("{folder} {} ", if shell_mode { "," } else { ">" });
        let (left, right) = std::mem::take(&mut initial);
        let (returned, read) = tokio::task::spawn_blocking(move || {
            let read = editor.read(&prompt, (&left, &right));
            (editor, read)
        })
        .await?;
        editor = returned;
        let line = match read? {
            Read::Line(line) => line,
            Read::Eof => break,
            Read::Interrupted => {
                println!("{}", style.dim("Interrupted. Use ',quit' to exit."));
                continue;
            }
            Read::Toggle(left, right) => {
                shell_mode = !shell_mode;
                initial = (left, right);
                continue;
            }
        };
        let Some(input) = shell_input(line, shell_mode) else {
            continue;
        };
        if toggled_debug(&input, &mut debug, style) {
            continue;
        }
        if let Some(result) = turn(&agent, session_id, &input, style, debug).await
            && result.exit_requested
        {
            break;
        }
    }
    Ok(())
}

/// The input a typed line stands for: in shell mode a line becomes `, <line>` unless it already
/// is a comma command. `None` for a blank line.
fn shell_input(line: String, shell_mode: bool) -> Option<String> {
    if line.trim().is_empty() {
        return None;
    }
    if shell_mode && !line.trim_start().starts_with(',') {
        return Some(format!(", {line}"));
    }
    Some(line)
}

/// `,debug` (the chat's own command): turns the debug view of tool calls on or off. `false`
/// for any other line.
fn toggled_debug(input: &str, debug: &mut bool, style: Style) -> bool {
    if input.trim() != ",debug" {
        return false;
    }
    *debug = !*debug;
    let now = if *debug {
        "Debug view on: tool calls with their full arguments and results."
    } else {
        "Debug view off: one line per tool call."
    };
    println!("{}", style.dim(now));
    true
}

/// Runs one turn and prints its result; `None` when Ctrl-C interrupted it.
async fn turn(
    agent: &AgentRuntime,
    session_id: &SessionId,
    input: &str,
    style: Style,
    debug: bool,
) -> Option<TurnResult> {
    if style.color {
        print!("{}", style.dim(PROCESSING));
        let _ = std::io::stdout().flush();
    }
    let you = Authority::terminal();
    let shown = show_tool_calls(Trace::stdout(debug), style);
    let outcome = tokio::select! {
        result = agent.handle_observed(session_id, input, &you, shown) => Some(result),
        _ = tokio::signal::ctrl_c() => None,
    };
    if style.color {
        print!("\r\x1b[K");
    }
    match outcome {
        Some(result) => {
            print_result(&result, style);
            Some(result)
        }
        None => {
            agent
                .append_event(
                    session_id,
                    Event::TurnInterrupted,
                    serde_json::json!({"by": "Ctrl-C"}),
                )
                .await;
            println!("{}", style.dim("Interrupted. The session is still open."));
            None
        }
    }
}

/// The line shown while a turn runs (on a terminal).
const PROCESSING: &str = "Processing...";

/// Prints each tool call's lines as the turn runs, over the "Processing..." line, which is shown
/// again below them.
fn show_tool_calls(trace: Trace, style: Style) -> ToolObserver {
    Arc::new(move |event| {
        let text = trace.render(event);
        let mut out = std::io::stdout().lock();
        if style.color {
            let _ = write!(out, "\r\x1b[K{text}\n{}", style.dim(PROCESSING));
        } else {
            let _ = writeln!(out, "{text}");
        }
        let _ = out.flush();
    })
}

fn print_welcome(agent: &AgentRuntime, style: Style) {
    let s = agent.settings();
    println!("{}", style.paint(BOLD_BLUE, "Bub"));
    println!("workspace: {}", s.workspace.display());
    println!("model: {}", s.model);
    println!(
        "{}",
        style.dim("Commands start with ','. Ctrl-X toggles shell mode, ',help' lists commands, ',debug' shows tool calls in full, Ctrl-D exits.")
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

fn print_result(result: &TurnResult, style: Style) {
    let blocks = [
        ("Command", BOLD_GREEN, result.immediate_output.as_str()),
        (
            "Error",
            BOLD_RED,
            &result
                .error
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
        ),
        ("Assistant", BOLD_BLUE, result.assistant_output.as_str()),
    ];
    for (label, color, text) in blocks {
        if !text.trim().is_empty() {
            print_block(label, color, text, style);
        }
    }
}

fn print_block(label: &str, color: &str, text: &str, style: Style) {
    if style.color {
        println!("{}", style.paint(color, label));
    }
    println!("{}", text.trim_end());
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

#[cfg(test)]
mod tests {
    use super::shell_input;

    #[test]
    fn shell_mode_prefixes_lines_that_are_not_commands() {
        let input = |line: &str, shell| shell_input(line.to_owned(), shell);
        assert_eq!(input("echo hi", false).as_deref(), Some("echo hi"));
        assert_eq!(input("echo hi", true).as_deref(), Some(", echo hi"));
        for kept in [",help", ",ls -la", ", ls -la"] {
            assert_eq!(input(kept, true).as_deref(), Some(kept));
        }
        assert_eq!(input("   ", true), None);
    }
}
