//! Where `bub chat` prints while its line editor reads: every piece of output — answers,
//! tool-call lines, notices (`queued: 2`), the status line — goes through one ordered, bounded
//! queue ([`Printer`]) to one thread that writes it above the prompt (rustyline's external
//! printer: the prompt and what is being typed are drawn again below it), or plainly to
//! standard output when there is no editor (piped input, or stdout not a terminal).
//!
//! One writer keeps the order of what was printed and keeps a turn (and its tool observer, a
//! synchronous callback) from ever writing to the terminal while the editor draws it.

use std::io::Write;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

/// How many pieces of output may wait for the terminal; past it a printer waits.
const QUEUED_OUTPUT: usize = 1024;

enum Piece {
    Text(String),
    Close,
}

/// Prints on the chat's screen (cheap to clone: the tool observer holds one).
#[derive(Clone)]
pub(crate) struct Printer(SyncSender<Piece>);

impl Printer {
    /// Prints `text` as whole lines (a newline is added).
    pub(crate) fn line(&self, text: impl Into<String>) {
        // Closed: the chat has ended, nothing reads the screen any more.
        let _ = self.0.send(Piece::Text(text.into()));
    }
}

/// The thread that writes the screen.
pub(crate) struct Screen {
    printer: Printer,
    thread: JoinHandle<()>,
}

impl Screen {
    /// Starts the writer; `write` puts one piece of text (without its final newline) on the
    /// terminal.
    pub(crate) fn start(mut write: impl FnMut(String) + Send + 'static) -> Self {
        let (tx, rx) = sync_channel(QUEUED_OUTPUT);
        let thread = std::thread::spawn(move || {
            while let Ok(Piece::Text(text)) = rx.recv() {
                write(text);
            }
        });
        Self {
            printer: Printer(tx),
            thread,
        }
    }

    /// A writer to standard output.
    pub(crate) fn stdout() -> Self {
        Self::start(|text| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{text}");
            let _ = out.flush();
        })
    }

    pub(crate) fn printer(&self) -> Printer {
        self.printer.clone()
    }

    /// Writes what was printed before this call, then stops the writer; later prints are
    /// dropped.
    pub(crate) fn close(self) {
        let _ = self.printer.0.send(Piece::Close);
        let _ = self.thread.join();
    }
}
