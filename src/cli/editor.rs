//! The line editor of `bub chat`: rustyline with per-workspace history, `,command` completion
//! and Ctrl-X as the agent/shell mode toggle (which keeps what was typed so far).
//!
//! It reads on a thread of its own for the whole chat ([`LineEditor::read_lines`]), so the
//! prompt stays usable while a turn runs: each line is handed on as what it stands for
//! ([`Typed`]), and output reaches the terminal above the prompt through the editor's external
//! printer ([`LineEditor::printer`]). The terminal is in raw mode while the editor reads, so
//! Ctrl-C arrives here as a key ([`Input::Interrupt`]), not as a signal.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::Validator;
use rustyline::{
    Cmd, ConditionalEventHandler, Context, Editor, Event, EventContext, EventHandler,
    ExternalPrinter, Helper, KeyEvent, RepeatCount,
};

use super::typed::{Typed, shell_input};

/// What the person at the terminal did, for the chat loop.
#[derive(Debug)]
pub(crate) enum Input {
    /// A line, classified.
    Line(Typed),
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-X switched the mode (to shell mode when `true`).
    Mode(bool),
}

/// The typed text and cursor position captured when Ctrl-X was pressed.
type Pending = Arc<Mutex<Option<(String, usize)>>>;

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

    /// Writes text above the prompt while [`LineEditor::read_lines`] reads (and plainly between
    /// two lines); `None` when stdin or stdout is not a terminal.
    pub(crate) fn printer(&mut self) -> Option<impl FnMut(String) + Send + 'static> {
        let mut printer = self.editor.create_external_printer().ok()?;
        Some(move |text: String| {
            if let Err(e) = printer.print(format!("{text}\n")) {
                tracing::warn!(error = %e, "chat.print.error");
            }
        })
    }

    /// Reads lines with the prompt `<folder> > ` (`<folder> , ` in shell mode) until Ctrl-D,
    /// `,quit` (handed on, then no more reading) or the receiver is gone, handing each on to
    /// `tx` (blocking: run it on a thread of its own).
    pub(crate) fn read_lines(mut self, folder: &str, tx: tokio::sync::mpsc::Sender<Input>) {
        let mut shell = false;
        let mut initial = (String::new(), String::new());
        loop {
            let prompt = format!("{folder} {} ", if shell { "," } else { ">" });
            let (left, right) = std::mem::take(&mut initial);
            let input = match self.editor.readline_with_initial(&prompt, (&left, &right)) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        if let Err(e) = self.editor.add_history_entry(line.as_str()) {
                            tracing::error!(error = %e, "chat.read.error");
                            break;
                        }
                        if let Err(e) = self.editor.append_history(&self.history) {
                            tracing::warn!(error = %e, "chat.history.write.error");
                        }
                    }
                    match shell_input(line, shell).and_then(|l| Typed::parse(&l)) {
                        Some(typed) => Input::Line(typed),
                        None => continue,
                    }
                }
                // Ctrl-X (it left the prompt): toggle the mode and prompt again with the text
                // typed so far (before, after the cursor); else Ctrl-C.
                Err(ReadlineError::Interrupted) => {
                    match self.pending.lock().expect("pending lock").take() {
                        Some((line, pos)) => {
                            let pos = pos.min(line.len());
                            initial = (line[..pos].to_owned(), line[pos..].to_owned());
                            shell = !shell;
                            Input::Mode(shell)
                        }
                        None => Input::Interrupt,
                    }
                }
                // Ctrl-D on an empty line.
                Err(ReadlineError::Eof) => break,
                Err(e) => {
                    tracing::error!(error = %e, "chat.read.error");
                    break;
                }
            };
            let quit = matches!(input, Input::Line(Typed::Quit));
            if tx.blocking_send(input).is_err() || quit {
                break;
            }
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
