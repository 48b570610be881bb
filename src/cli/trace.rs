//! What `bub chat` and `bub run -v` show of the tool calls the model makes while a turn runs: a
//! line when a call starts (`→ bash: echo hi`, `→ fs.read path=README.md`) and one when it ends
//! (`✓ bash 12 ms, 1 line`; a failure `✗ bash 3 ms: exit=1: …` in red), each cut to one row of
//! the terminal. The debug view (`,debug` in the chat) adds the full arguments and the result
//! (cut at [`DEBUG_RESULT_CHARS`]).
//!
//! Everything shown came from the model, which reads chats, or from what its tools read: the
//! runner hands it over redacted ([`crate::tools::ToolEvent`]), and here it is escaped
//! ([`crate::terminal`]) so that it cannot drive the terminal.

use std::io::{IsTerminal, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{BOLD_RED, DIM};
use crate::channels::text::cut;
use crate::terminal::{safe, safe_json, safe_line};
use crate::tools::{ToolEvent, ToolObserver};

/// How much of a result the debug view shows.
pub(crate) const DEBUG_RESULT_CHARS: usize = 2_000;
/// The row width when the output is not a terminal (or its size is unknown).
const DEFAULT_WIDTH: usize = 100;

/// How tool calls are rendered for one output stream.
#[derive(Clone, Copy)]
pub(crate) struct Trace {
    /// The stream's file descriptor: its width is asked for at each line (a resized window).
    fd: RawFd,
    color: bool,
    /// Full arguments and results under each line.
    pub debug: bool,
}

impl Trace {
    /// Lines for standard output (`bub chat`).
    pub(crate) fn stdout(debug: bool) -> Self {
        Self::on(std::io::stdout(), debug)
    }

    /// Lines for standard error (`bub run -v`).
    pub(crate) fn stderr() -> Self {
        Self::on(std::io::stderr(), false)
    }

    fn on(stream: impl AsRawFd + IsTerminal, debug: bool) -> Self {
        let (fd, color) = (stream.as_raw_fd(), stream.is_terminal());
        Self { fd, color, debug }
    }

    /// What to print for `event`: one row, and in the debug view the details below it.
    pub(crate) fn render(&self, event: &ToolEvent<'_>) -> String {
        let width = columns(self.fd).unwrap_or(DEFAULT_WIDTH);
        let row = |text: String| cut(&safe_line(&text), width.max(20));
        let (line, detail) = match *event {
            ToolEvent::Started { tool, arguments } => (
                self.paint(DIM, &row(format!("→ {}", summary(tool, arguments)))),
                self.debug
                    .then(|| safe_json(&pretty(arguments)).into_owned()),
            ),
            ToolEvent::Finished {
                tool,
                elapsed,
                result: Ok(output),
            } => {
                let line = row(format!("✓ {tool} {}, {}", took(elapsed), size(output)));
                (
                    self.paint(DIM, &line),
                    self.debug.then(|| safe(&debug_cut(output)).into_owned()),
                )
            }
            ToolEvent::Finished {
                tool,
                elapsed,
                result: Err(error),
            } => {
                let reason = reason(tool, error);
                let first = reason.lines().next().unwrap_or_default();
                let line = row(format!("✗ {tool} {}: {first}", took(elapsed)));
                (
                    self.paint(BOLD_RED, &line),
                    self.debug.then(|| safe(&debug_cut(error)).into_owned()),
                )
            }
        };
        match detail {
            Some(detail) => format!("{line}\n{}", indent(&detail)),
            None => line,
        }
    }

    fn paint(&self, color: &str, text: &str) -> String {
        super::Style { color: self.color }.paint(color, text)
    }
}

/// `bub run -v`: each call's lines on standard error.
pub fn to_stderr() -> ToolObserver {
    let trace = Trace::stderr();
    Arc::new(move |event| {
        let text = trace.render(event);
        let _ = writeln!(std::io::stderr().lock(), "{text}");
    })
}

/// `bash: <the command's first line>` for a shell command; `fs.read path=README.md` for any
/// other tool (its arguments as `key=value`, strings bare unless they hold spaces or quotes).
fn summary(tool: &str, arguments: &str) -> String {
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(arguments) else {
        return format!("{tool} {}", arguments.trim());
    };
    if tool == "bash"
        && let Some(Value::String(cmd)) = args.get("cmd")
    {
        let mut lines = cmd.trim().lines();
        let first = lines.next().unwrap_or_default();
        let more = if lines.next().is_some() { " …" } else { "" };
        return format!("{tool}: {first}{more}");
    }
    let pairs = args.iter().map(|(key, value)| match value {
        Value::String(s) if !s.is_empty() && !s.contains([' ', '"', '\'', '=']) => {
            format!("{key}={s}")
        }
        other => format!("{key}={other}"),
    });
    std::iter::once(tool.to_owned())
        .chain(pairs)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The arguments as indented JSON (the text as sent when it is not JSON).
fn pretty(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| arguments.to_owned())
}

/// `12 ms` under a second, `2.4 s` after.
fn took(elapsed: Duration) -> String {
    if elapsed < Duration::from_secs(1) {
        format!("{} ms", elapsed.as_millis())
    } else {
        format!("{:.1} s", elapsed.as_secs_f64())
    }
}

/// `1 line`, `40 lines`, `310 lines, 12.5 KB` (bytes from 1 KB on); `no output`.
fn size(output: &str) -> String {
    let lines = output.lines().count();
    let mut text = match lines {
        0 => return "no output".to_owned(),
        1 => "1 line".to_owned(),
        n => format!("{n} lines"),
    };
    if output.len() >= 1000 {
        text.push_str(&format!(", {:.1} KB", output.len() as f64 / 1000.0));
    }
    text
}

/// The error the model is told, without the `error: tool '<tool>' failed:` it starts with (the
/// line names the tool already).
fn reason<'a>(tool: &str, error: &'a str) -> &'a str {
    let error = error.strip_prefix("error: ").unwrap_or(error);
    error
        .strip_prefix(&format!("tool '{tool}' failed: "))
        .unwrap_or(error)
}

/// A result for the debug view: cut at [`DEBUG_RESULT_CHARS`], with a note saying so.
fn debug_cut(text: &str) -> String {
    match text.char_indices().nth(DEBUG_RESULT_CHARS) {
        Some((at, _)) => format!(
            "{}\n… (cut: the first {DEBUG_RESULT_CHARS} of {} characters)",
            &text[..at],
            text.chars().count()
        ),
        None => text.to_owned(),
    }
}

fn indent(text: &str) -> String {
    text.trim_end()
        .lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The columns of the terminal on `fd`; `None` when it is not one.
fn columns(fd: RawFd) -> Option<usize> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we pass, which outlives the call.
    let asked = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) };
    (asked == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(debug: bool) -> Trace {
        // A descriptor that is no terminal: no colour, the default width.
        Trace {
            fd: -1,
            color: false,
            debug,
        }
    }

    #[test]
    fn a_call_is_one_line_when_it_starts_and_one_when_it_ends() {
        let trace = plain(false);
        let started = |tool, arguments| trace.render(&ToolEvent::Started { tool, arguments });
        assert_eq!(
            started("bash", r#"{"cmd":"echo hi\nls"}"#),
            "→ bash: echo hi …"
        );
        assert_eq!(
            started("fs.read", r#"{"path":"README.md","limit":5,"q":"a b"}"#),
            r#"→ fs.read path=README.md limit=5 q="a b""#
        );
        assert_eq!(started("tape.info", "not json"), "→ tape.info not json");
        let long = format!(r#"{{"cmd":"echo {}"}}"#, "x".repeat(300));
        assert_eq!(started("bash", &long).chars().count(), DEFAULT_WIDTH);
        let ended = |result: Result<&str, &str>| {
            trace.render(&ToolEvent::Finished {
                tool: "bash",
                elapsed: Duration::from_millis(12),
                result,
            })
        };
        assert_eq!(ended(Ok("hi\n")), "✓ bash 12 ms, 1 line");
        assert_eq!(
            ended(Ok(&"line\n".repeat(300))),
            "✓ bash 12 ms, 300 lines, 1.5 KB"
        );
        assert_eq!(
            ended(Err("error: tool 'bash' failed: exit=1: no\nmore")),
            "✗ bash 12 ms: exit=1: no"
        );
    }

    #[test]
    fn what_the_model_sent_cannot_drive_the_terminal() {
        let trace = plain(true);
        let shown = trace.render(&ToolEvent::Started {
            tool: "bash",
            arguments: "{\"cmd\":\"echo \u{1b}]52;c;eA==\u{7}\u{202e}\"}",
        });
        assert!(!shown.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{shown}");
        let shown = trace.render(&ToolEvent::Finished {
            tool: "bash",
            elapsed: Duration::ZERO,
            result: Ok("\u{1b}[2J\u{9b}"),
        });
        assert!(!shown.contains(['\u{1b}', '\u{9b}']), "{shown}");
    }

    #[test]
    fn the_debug_view_cuts_long_results_with_a_note() {
        let shown = plain(true).render(&ToolEvent::Finished {
            tool: "fs.read",
            elapsed: Duration::from_millis(1500),
            result: Ok(&"y".repeat(5000)),
        });
        assert!(
            shown.starts_with("✓ fs.read 1.5 s, 1 line, 5.0 KB\n    yyy"),
            "{shown}"
        );
        assert!(
            shown.ends_with("… (cut: the first 2000 of 5000 characters)"),
            "{shown}"
        );
        assert_eq!(shown.matches('y').count(), DEBUG_RESULT_CHARS);
    }
}
