//! `bub chat` on a pseudo-terminal (expectrl: the real binary, its screen as a user's terminal
//! gets it), and that screen as text ([`rendered`]). Every wait is bounded by [`WAIT`].

use expectrl::{Eof, Expect, Regex, Session};

use super::bub_env::Env;
use super::wait::WAIT;

/// `bub chat` on a pseudo-terminal, and everything it printed so far.
pub struct Chat {
    session: expectrl::session::OsSession,
    /// The raw bytes read so far (escape sequences included).
    pub screen: String,
}

impl Chat {
    /// Starts `bub chat` in `env` and waits for its first prompt (`ws > `).
    pub fn start(env: &Env) -> Self {
        let mut cmd = env.std_command(&["chat"]);
        // The pty is the terminal: stdin, stdout and stderr are its slave side.
        cmd.env("TERM", "xterm")
            .stdin(std::process::Stdio::inherit());
        let mut session = Session::spawn(cmd).expect("bub chat on a pty");
        session.set_expect_timeout(Some(WAIT));
        let mut chat = Self {
            session,
            screen: String::new(),
        };
        chat.expect("ws > ");
        chat
    }

    /// Waits (at most [`WAIT`]) for `needle` after what was matched before: successive calls
    /// check the order of what was printed. Returns what came since the last match, up to and
    /// including this one.
    pub fn expect(&mut self, needle: &str) -> String {
        self.expect_with(needle, needle)
    }

    pub fn expect_regex(&mut self, pattern: &str) -> String {
        self.expect_with(Regex(pattern), pattern)
    }

    fn expect_with(&mut self, needle: impl expectrl::Needle, what: &str) -> String {
        let found = match self.session.expect(needle) {
            Ok(found) => found,
            Err(e) => {
                let rest = self
                    .session
                    .check(Regex("(?s).+"))
                    .map(|f| String::from_utf8_lossy(f.as_bytes()).into_owned())
                    .unwrap_or_default();
                panic!(
                    "{what:?} not shown within {WAIT:?} ({e}); the screen:\n{}\n-- not matched yet:\n{rest}",
                    self.screen
                )
            }
        };
        let seen = String::from_utf8_lossy(found.as_bytes()).into_owned();
        self.screen.push_str(&seen);
        seen
    }

    /// Types `line` and Enter as a terminal delivers them: the text as a paste (bracketed, as
    /// terminals send pastes), then Enter once the editor shows the text. (Keys coming in one
    /// burst without brackets are not a person typing: rustyline's reader then waits for the
    /// next key before it handles the ones it has read.)
    pub fn type_line(&mut self, line: &str) {
        self.key(&format!("\x1b[200~{line}\x1b[201~"));
        self.expect(line);
        self.key("\r");
    }

    /// Sends `keys` as they are (`"\x03"`: Ctrl-C; `"\x04"`: Ctrl-D).
    pub fn key(&mut self, keys: &str) {
        self.session.send(keys).unwrap();
    }

    /// `,quit`, then the rest of the screen up to the end of the process.
    pub fn quit(mut self) -> String {
        self.type_line(",quit");
        self.expect("Bye.");
        let rest = self.session.expect(Eof).map(|f| f.before().to_vec());
        if let Ok(rest) = rest {
            self.screen.push_str(&String::from_utf8_lossy(&rest));
        }
        self.screen
    }
}

/// Runs a blocking pty conversation off the runtime the fake servers run on.
pub async fn on_pty<T: Send + 'static>(talk: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(talk).await.unwrap()
}

/// The lines a terminal shows for `raw`: carriage returns, line feeds, "erase to the end of
/// the line" and "cursor forward" applied; colours and other sequences dropped.
pub fn rendered(raw: &str) -> Vec<String> {
    let mut lines: Vec<Vec<char>> = vec![Vec::new()];
    let mut col = 0;
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        let line = lines.last_mut().unwrap();
        match c {
            '\r' => col = 0,
            '\n' => {
                lines.push(Vec::new());
                col = 0;
            }
            '\x1b' if chars.peek() == Some(&'[') => {
                chars.next();
                let mut arg = String::new();
                let mut end = ' ';
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() || c == '~' {
                        end = c;
                        break;
                    }
                    arg.push(c);
                }
                match end {
                    'K' => line.truncate(col),
                    'C' => col += arg.parse::<usize>().unwrap_or(1),
                    _ => {}
                }
            }
            '\x1b' => {
                // OSC and other escapes: up to BEL or ST.
                for c in chars.by_ref() {
                    if c == '\x07' || c == '\\' {
                        break;
                    }
                }
            }
            c if c.is_control() => {}
            c => {
                while line.len() < col {
                    line.push(' ');
                }
                if col < line.len() {
                    line[col] = c;
                } else {
                    line.push(c);
                }
                col += 1;
            }
        }
    }
    lines
        .into_iter()
        .map(|l| l.into_iter().collect::<String>().trim_end().to_owned())
        .collect()
}
