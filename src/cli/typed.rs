//! What a line typed in `bub chat` stands for ([`Typed`]): the chat commands mean what they mean
//! in Telegram and Discord — `,stop`, `,new`, `,status`, `,usage`, `,model` and their slash forms
//! (`/stop`, … as [`crate::chat::slash_command`] reads them) — plus the terminal's own `,debug`
//! and `,quit`. A control never reaches the shell or the model; other comma commands run as
//! their own turn (a tool, else the shell); anything else is words for the model.

use crate::chat::{Content, Control};

/// One typed line, classified (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Typed {
    /// Words for the model: batched with the other lines typed while a turn runs.
    Words(String),
    /// A comma command (`,help`, `,usage`, `,model gpt-4o`, `,git status`): a turn of its own.
    Command(String),
    /// `,stop`: stops the running turn at once (the queue stays).
    Stop,
    /// `,status`: answered at once, beside a running turn.
    Status,
    /// `,new`: a fresh context, queued like a command.
    New,
    /// `,debug`: the debug view of tool calls on or off (the terminal's own).
    Debug,
    /// `,quit`: leave (after the running turn).
    Quit,
}

impl Typed {
    /// What `line` stands for; `None` for a blank line.
    pub(crate) fn parse(line: &str) -> Option<Typed> {
        if line.trim().is_empty() {
            return None;
        }
        let content = crate::chat::slash_command(line).unwrap_or_else(|| Content::of(line));
        Some(match content {
            Content::Text(words) => Typed::Words(words),
            Content::Control(Control::Stop) => Typed::Stop,
            Content::Control(Control::Status) => Typed::Status,
            Content::Control(Control::New) => Typed::New,
            // As in a chat: the `usage` tool, run as a command.
            Content::Control(Control::Usage) => Typed::Command(",usage".to_owned()),
            Content::Command(command) if command == ",debug" => Typed::Debug,
            Content::Command(command) if command == ",quit" => Typed::Quit,
            Content::Command(command) => Typed::Command(command),
        })
    }

    /// `,help`: its answer gets the terminal's own commands ([`TERMINAL_HELP`]) below it.
    pub(crate) fn is_help(command: &str) -> bool {
        command.trim() == ",help"
    }
}

/// The input a typed line stands for: in shell mode a line becomes `, <line>` unless it already
/// is a comma command. `None` for a blank line.
pub(crate) fn shell_input(line: String, shell_mode: bool) -> Option<String> {
    if line.trim().is_empty() {
        return None;
    }
    if shell_mode && !line.trim_start().starts_with(',') {
        return Some(format!(", {line}"));
    }
    Some(line)
}

/// What `,help` adds in the terminal: the commands and keys only `bub chat` has.
pub(crate) const TERMINAL_HELP: &str = "In this terminal:
,debug — Show tool calls with their full arguments and results (again: one line each)
,quit — Leave after the running turn (Ctrl-D too); lines still queued are not sent
Ctrl-X — Toggle shell mode (each line runs as a comma command)
Ctrl-C — Stop the running turn (the lines queued meanwhile still run)
Lines typed while a turn runs are queued and sent together as the next turn; commands typed meanwhile run first, as in a chat.";

#[cfg(test)]
mod tests {
    use super::{Typed, shell_input};

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

    #[test]
    fn chat_commands_mean_what_they_mean_in_a_chat() {
        let parse = |line: &str| Typed::parse(line).unwrap();
        for (line, typed) in [
            (",stop", Typed::Stop),
            ("/stop", Typed::Stop),
            (" ,STOP ", Typed::Stop),
            (",status", Typed::Status),
            ("/status", Typed::Status),
            (",new", Typed::New),
            ("/new", Typed::New),
            (",usage", Typed::Command(",usage".into())),
            ("/usage", Typed::Command(",usage".into())),
            ("/model", Typed::Command(",model".into())),
            (
                "/model openai:gpt-4o",
                Typed::Command(",model openai:gpt-4o".into()),
            ),
            (",model", Typed::Command(",model".into())),
            (",debug", Typed::Debug),
            (",quit", Typed::Quit),
            (", git status", Typed::Command(", git status".into())),
            ("/usr/bin is full", Typed::Words("/usr/bin is full".into())),
            ("stop", Typed::Words("stop".into())),
        ] {
            assert_eq!(parse(line), typed, "{line}");
        }
        assert_eq!(Typed::parse("  "), None);
    }
}
