//! The line editor of `bub chat`: rustyline with per-workspace history, `,command` completion
//! and Ctrl-X as the agent/shell mode toggle (which keeps what was typed so far).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::Validator;
use rustyline::{
    Cmd, ConditionalEventHandler, Context, Editor, Event, EventContext, EventHandler, Helper,
    KeyEvent, RepeatCount,
};

/// The typed text and cursor position captured when Ctrl-X was pressed.
type Pending = Arc<Mutex<Option<(String, usize)>>>;

/// What one prompt produced.
pub(crate) enum Read {
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    /// Ctrl-D on an empty line.
    Eof,
    /// Ctrl-X: toggle the mode and prompt again with this text (before, after the cursor).
    Toggle(String, String),
}

/// A rustyline editor plus the history file it appends to.
pub(crate) struct LineEditor {
    editor: Editor<CommandHelper, FileHistory>,
    history: PathBuf,
    pending: Pending,
}

impl LineEditor {
    /// Opens the editor and loads `history` (a missing file is an empty history).
    pub(crate) fn new(history: PathBuf, commands: Vec<String>) -> anyhow::Result<Self> {
        let mut editor = Editor::<CommandHelper, FileHistory>::new()?;
        editor.set_helper(Some(CommandHelper { commands }));
        let pending: Pending = Arc::default();
        editor.bind_sequence(
            KeyEvent::ctrl('X'),
            EventHandler::Conditional(Box::new(ToggleShell {
                pending: pending.clone(),
            })),
        );
        if let Some(dir) = history.parent() {
            crate::storage::create_private_dir(dir)?;
        }
        if history.exists() {
            editor.load_history(&history)?;
        }
        Ok(Self {
            editor,
            history,
            pending,
        })
    }

    /// Reads one line (blocking: call it from `spawn_blocking`).
    pub(crate) fn read(&mut self, prompt: &str, initial: (&str, &str)) -> anyhow::Result<Read> {
        match self.editor.readline_with_initial(prompt, initial) {
            Ok(line) => {
                if !line.trim().is_empty() {
                    self.editor.add_history_entry(line.as_str())?;
                    if let Err(e) = self.editor.append_history(&self.history) {
                        tracing::warn!(error = %e, "chat.history.write.error");
                    }
                }
                Ok(Read::Line(line))
            }
            Err(ReadlineError::Interrupted) => {
                match self.pending.lock().expect("pending lock").take() {
                    Some((line, pos)) => {
                        let pos = pos.min(line.len());
                        Ok(Read::Toggle(line[..pos].to_owned(), line[pos..].to_owned()))
                    }
                    None => Ok(Read::Interrupted),
                }
            }
            Err(ReadlineError::Eof) => Ok(Read::Eof),
            Err(e) => Err(e.into()),
        }
    }
}

/// Ctrl-X: remember the line and leave the prompt, so the caller can re-prompt in the new mode.
struct ToggleShell {
    pending: Pending,
}

impl ConditionalEventHandler for ToggleShell {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        *self.pending.lock().expect("pending lock") = Some((ctx.line().to_owned(), ctx.pos()));
        Some(Cmd::Interrupt)
    }
}

/// Completes `,<command>` at the start of the line.
struct CommandHelper {
    commands: Vec<String>,
}

impl Completer for CommandHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        Ok(complete_command(&self.commands, &line[..pos]))
    }
}

/// The completion of `typed` (the text before the cursor): `,fs.r` → `,fs.read`.
fn complete_command(commands: &[String], typed: &str) -> (usize, Vec<Pair>) {
    let start = typed.len() - typed.trim_start().len();
    let word = &typed[start..];
    let Some(prefix) = word.strip_prefix(',') else {
        return (0, Vec::new());
    };
    if prefix.contains(char::is_whitespace) {
        return (0, Vec::new());
    }
    let candidates = commands
        .iter()
        .filter(|c| c.starts_with(prefix))
        .map(|c| Pair {
            display: c.clone(),
            replacement: format!(",{c} "),
        })
        .collect();
    (start, candidates)
}

impl Hinter for CommandHelper {
    type Hint = String;
}
impl Highlighter for CommandHelper {}
impl Validator for CommandHelper {}
impl Helper for CommandHelper {}

#[cfg(test)]
mod tests {
    use super::complete_command;

    #[test]
    fn completes_comma_commands_at_the_start_only() {
        let commands = vec![
            "fs.read".to_owned(),
            "fs.write".to_owned(),
            "help".to_owned(),
        ];
        let (start, pairs) = complete_command(&commands, "  ,fs.");
        assert_eq!(start, 2);
        let names: Vec<_> = pairs.iter().map(|p| p.replacement.as_str()).collect();
        assert_eq!(names, [",fs.read ", ",fs.write "]);
        assert!(complete_command(&commands, "hello ,fs").1.is_empty());
        assert!(complete_command(&commands, ",fs.read pa").1.is_empty());
    }
}
