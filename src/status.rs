//! What the running daemon is doing, for `bub status` in a terminal: the live sessions (the
//! running turn and its age, what is queued), the background commands (whose, and what they
//! run), and the last errors chats were told about; `bub status --kill ID` ends a background
//! command (the operator is an owner: any command).
//!
//! The session actors keep a [`Board`] up to date (a few map writes per turn, nothing per idle
//! second); `bub message` serves a [`Snapshot`] of it as one JSON document on
//! `BUB_HOME/daemon.sock` (mode 0600), and `bub status` reads it ([`query`]). Nothing is
//! written to disk while the daemon runs.
//!
//! Only a caller that can read `BUB_HOME` is answered: the daemon writes a random token to
//! `BUB_HOME/daemon.token` (mode 0600) when it binds the socket, and a client sends it as its
//! first line — alone for the snapshot, or followed by ` end ID` to end a background command. The file mode does not stop a process of the same user, but the sandbox does: a
//! sandboxed command cannot read `BUB_HOME`, and Landlock does not cover connecting to a socket,
//! so the token is what keeps it out.
//!
//! Invariants: the board holds one row per live actor (an actor removes its row when it ends)
//! and at most [`MAX_ERRORS`] errors, so it is bounded like the actors; no message text is kept,
//! only what the chat itself was told ("Error: …") or a delivery failure's reason. A connection
//! without the right token gets a one-line refusal and no snapshot; one that sends nothing is
//! closed after [`TOKEN_TIMEOUT`]; at most [`MAX_CONNECTIONS`] are served at once (the others
//! wait to be accepted), so idle connections cannot grow the daemon nor stop it answering.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Local, Utc};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::chat::SessionId;

/// The socket `bub message` answers status requests on, in `BUB_HOME`.
pub(crate) const SOCKET: &str = "daemon.sock";
/// The file holding the token a client must send, in `BUB_HOME`.
pub(crate) const TOKEN: &str = "daemon.token";
/// How long the server waits for a client's token.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(2);
/// The most connections served at once.
const MAX_CONNECTIONS: usize = 8;
/// The longest first line read from a client (a token is 64 characters, `end ID` a few more).
const MAX_TOKEN_LINE: u64 = 128;
/// What a client without the right token gets.
const REFUSAL: &str = "refused: send the token of BUB_HOME/daemon.token first\n";
/// The most recent errors kept.
pub(crate) const MAX_ERRORS: usize = 10;
/// The longest error text kept (characters).
const MAX_ERROR_CHARS: usize = 300;
/// How long a client or the server waits for the other side.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// One live session as the board shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionState {
    /// What the running turn does ("an answer to 2 message(s)") and since when.
    pub running: Option<(std::sync::Arc<str>, Instant)>,
    pub queued_messages: usize,
    pub queued_commands: usize,
}

/// The daemon's live state (see the module docs).
pub struct Board {
    started: Instant,
    started_at: DateTime<Utc>,
    model: String,
    channels: Vec<String>,
    state: Mutex<State>,
    /// The process's background commands, once the daemon shows them.
    commands: std::sync::OnceLock<std::sync::Arc<dyn Commands>>,
}

/// The background commands of the process, as the operator sees and ends them.
pub trait Commands: Send + Sync {
    /// Every command kept, oldest first.
    fn rows(&self) -> Vec<CommandRow>;
    /// Ends command `id` (and all it started), whoever started it; what happened, or why not.
    fn end(&self, id: u64) -> Result<String, String>;
}

/// A background command in the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRow {
    pub id: u64,
    /// The chat's session it runs for.
    pub session: SessionId,
    /// Who started it: `guest (telegram:7)`.
    pub owner: String,
    /// `running 2m`, `exit=0`, `killed`.
    pub state: String,
    pub command: String,
}

#[derive(Default)]
struct State {
    sessions: HashMap<SessionId, SessionState>,
    errors: VecDeque<ErrorRow>,
}

impl Board {
    pub fn new(model: &str, channels: &[&str]) -> Self {
        Self {
            started: Instant::now(),
            started_at: Utc::now(),
            model: model.to_owned(),
            channels: channels.iter().map(|c| (*c).to_owned()).collect(),
            state: Mutex::default(),
            commands: std::sync::OnceLock::new(),
        }
    }

    /// Shows `commands` in the snapshot and lets the operator end them.
    pub fn show_commands(&self, commands: std::sync::Arc<dyn Commands>) {
        let _ = self.commands.set(commands);
    }

    /// Ends background command `id` (`bub status --kill`, the console).
    pub(crate) fn end_command(&self, id: u64) -> Result<String, String> {
        match self.commands.get() {
            Some(commands) => commands.end(id),
            None => Err("this process runs no background commands".to_owned()),
        }
    }

    /// Sets a session's row (an actor after each change of its queue or turn).
    pub(crate) fn set(&self, session: &SessionId, row: SessionState) {
        let mut state = self.state.lock().expect("status board");
        match state.sessions.get_mut(session) {
            Some(old) => *old = row,
            None => {
                state.sessions.insert(session.clone(), row);
            }
        }
    }

    /// Removes a session's row (its actor ended).
    pub(crate) fn remove(&self, session: &SessionId) {
        self.state
            .lock()
            .expect("status board")
            .sessions
            .remove(session);
    }

    /// Records an error a session met; the oldest goes beyond [`MAX_ERRORS`].
    pub(crate) fn error(&self, session: &SessionId, error: &str) {
        let mut state = self.state.lock().expect("status board");
        if state.errors.len() == MAX_ERRORS {
            state.errors.pop_front();
        }
        state.errors.push_back(ErrorRow {
            at: Utc::now(),
            session: session.clone(),
            error: error.chars().take(MAX_ERROR_CHARS).collect(),
        });
    }

    /// The board as `bub status` receives it.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let state = self.state.lock().expect("status board");
        let mut sessions: Vec<SessionRow> = state
            .sessions
            .iter()
            .map(|(id, s)| SessionRow {
                session: id.clone(),
                running: s.running.as_ref().map(|(what, since)| Running {
                    what: what.to_string(),
                    seconds: now.saturating_duration_since(*since).as_secs(),
                }),
                queued_messages: s.queued_messages,
                queued_commands: s.queued_commands,
            })
            .collect();
        sessions.sort_by(|a, b| a.session.cmp(&b.session));
        Snapshot {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started: self.started_at,
            uptime_seconds: now.saturating_duration_since(self.started).as_secs(),
            model: self.model.clone(),
            channels: self.channels.clone(),
            connected: (self.channels.iter())
                .filter(|c| crate::metrics::is_connected(c))
                .cloned()
                .collect(),
            sessions,
            commands: self.commands.get().map(|c| c.rows()).unwrap_or_default(),
            errors: state.errors.iter().rev().cloned().collect(),
        }
    }
}

/// What `bub status` receives: one JSON document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    pub version: String,
    pub started: DateTime<Utc>,
    pub uptime_seconds: u64,
    pub model: String,
    pub channels: Vec<String>,
    /// The channels that reached their platform last time they tried (Telegram's last poll
    /// answered, Discord's gateway connected): what `/readyz` checks.
    #[serde(default)]
    pub connected: Vec<String>,
    /// The live sessions, by id.
    pub sessions: Vec<SessionRow>,
    /// The background commands kept, oldest first.
    #[serde(default)]
    pub commands: Vec<CommandRow>,
    /// The last errors, newest first.
    pub errors: Vec<ErrorRow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRow {
    pub session: SessionId,
    pub running: Option<Running>,
    pub queued_messages: usize,
    pub queued_commands: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    pub what: String,
    pub seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRow {
    pub at: DateTime<Utc>,
    pub session: SessionId,
    pub error: String,
}

/// The status socket of `home`.
pub(crate) fn socket_path(home: &Path) -> PathBuf {
    home.join(SOCKET)
}

/// The bound status socket and the token its clients must send.
pub struct Listener {
    socket: tokio::net::UnixListener,
    socket_path: PathBuf,
    token: String,
    token_path: PathBuf,
}

/// Writes a fresh token to `BUB_HOME/daemon.token` (mode 0600, replaced atomically) and binds
/// the status socket (replacing a stale one: the caller holds the daemon lock, so no other
/// daemon uses it), owner-only. The token is written first, so a client never finds the socket
/// with an old token.
pub fn bind(home: &Path) -> anyhow::Result<Listener> {
    use std::os::unix::fs::PermissionsExt;
    let token = new_token();
    let token_path = home.join(TOKEN);
    crate::storage::write_atomic(&token_path, token.as_bytes(), Some(0o600))?;
    let socket_path = socket_path(home);
    let _ = std::fs::remove_file(&socket_path);
    let socket = tokio::net::UnixListener::bind(&socket_path)
        .with_context(|| format!("binding {}", socket_path.display()))?;
    std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("securing {}", socket_path.display()))?;
    Ok(Listener {
        socket,
        socket_path,
        token,
        token_path,
    })
}

/// 64 hex digits from the OS CSPRNG (two v4 UUIDs: 244 random bits, as pairing codes get theirs).
pub(crate) fn new_token() -> String {
    let part = || uuid::Uuid::new_v4().simple().to_string();
    part() + &part()
}

/// Whether `given` is `token`, compared without stopping at the first difference, so the time
/// taken tells nothing about how much of a guess was right (every token and secret Bub checks).
pub(crate) fn same_token(given: &[u8], token: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(given, token).into()
}

/// Answers every connection that sends the token with the board's snapshot until `stop`; then
/// removes the socket and the token file.
pub async fn serve(listener: Listener, board: std::sync::Arc<Board>, stop: CancellationToken) {
    let token: std::sync::Arc<str> = listener.token.into();
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A slot first: with every slot taken, new connections wait in the kernel's backlog.
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = async {
                let slot = slots.clone().acquire_owned().await;
                (slot, listener.socket.accept().await)
            } => accepted,
        };
        let (Ok(slot), accepted) = accepted else {
            break;
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "status.accept.error");
                continue;
            }
        };
        let (board, token) = (board.clone(), token.clone());
        tokio::spawn(async move {
            answer(stream, &board, &token).await;
            drop(slot);
        });
    }
    let _ = std::fs::remove_file(&listener.socket_path);
    let _ = std::fs::remove_file(&listener.token_path);
}

/// One connection: its first line must be the token (then the snapshot) or the token and
/// `end ID` (then `ok: …` or `error: …`); else a refusal.
async fn answer(mut stream: tokio::net::UnixStream, board: &Board, token: &str) {
    let mut line = Vec::new();
    let read = {
        let mut first = tokio::io::BufReader::new(&mut stream).take(MAX_TOKEN_LINE);
        tokio::time::timeout(TOKEN_TIMEOUT, first.read_until(b'\n', &mut line)).await
    };
    let mut words = line.trim_ascii().split(|b| *b == b' ');
    let given = words.next().unwrap_or_default();
    let request: Vec<&[u8]> = words.filter(|w| !w.is_empty()).collect();
    let body = match read {
        Ok(Ok(_)) if same_token(given, token.as_bytes()) => match request.as_slice() {
            [] => serde_json::to_vec(&board.snapshot()).expect("snapshot serializes"),
            [b"end", id] => {
                let id = std::str::from_utf8(id).ok().and_then(|id| id.parse().ok());
                let ended = id.map_or_else(
                    || Err("not a command id".to_owned()),
                    |id| board.end_command(id),
                );
                match ended {
                    Ok(done) => format!("ok: {done}\n").into_bytes(),
                    Err(why) => format!("error: {why}\n").into_bytes(),
                }
            }
            _ => b"error: unknown request\n".to_vec(),
        },
        Ok(_) => {
            // Not a warning: a sandboxed loop could write one per connection.
            tracing::debug!("status.refused: a client without the token");
            REFUSAL.as_bytes().to_vec()
        }
        Err(_) => {
            tracing::debug!("status.timeout: a client sent nothing");
            return;
        }
    };
    let written = tokio::time::timeout(IO_TIMEOUT, async {
        stream.write_all(&body).await?;
        stream.shutdown().await
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        tracing::debug!("status.write: the client went away");
    }
}

/// Asks the daemon of `home` for its snapshot, with the token from `BUB_HOME/daemon.token`.
pub async fn query(home: &Path) -> anyhow::Result<Snapshot> {
    let body = ask(home, "").await?;
    serde_json::from_slice(&body).context("reading the daemon's status")
}

/// Asks the daemon of `home` to end background command `id`: what it did, or why not (`Err`).
pub(crate) async fn end_command(home: &Path, id: u64) -> anyhow::Result<Result<String, String>> {
    let body = ask(home, &format!(" end {id}")).await?;
    let text = String::from_utf8_lossy(&body).trim().to_owned();
    Ok(match text.strip_prefix("ok: ") {
        Some(done) => Ok(done.to_owned()),
        None => Err(text.strip_prefix("error: ").unwrap_or(&text).to_owned()),
    })
}

/// Sends the token and `request` (empty: the snapshot) on the socket of `home`; the answer.
async fn ask(home: &Path, request: &str) -> anyhow::Result<Vec<u8>> {
    let path = socket_path(home);
    let token_path = home.join(TOKEN);
    let token = tokio::fs::read_to_string(&token_path)
        .await
        .with_context(|| format!("reading {}", token_path.display()))?;
    let read = async {
        let mut stream = tokio::net::UnixStream::connect(&path).await?;
        stream
            .write_all(format!("{}{request}\n", token.trim()).as_bytes())
            .await?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await?;
        anyhow::Ok(body)
    };
    let body = tokio::time::timeout(IO_TIMEOUT, read)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {} s", IO_TIMEOUT.as_secs()))?
        .with_context(|| format!("asking {}", path.display()))?;
    if body.starts_with(b"refused") {
        anyhow::bail!(
            "the daemon refused the request: its token is not the one in {}",
            token_path.display()
        );
    }
    Ok(body)
}

/// Each channel with its state: `telegram (connected)`, `discord (not connected)`.
pub fn channels(s: &Snapshot) -> Vec<String> {
    s.channels
        .iter()
        .map(|c| match s.connected.contains(c) {
            true => format!("{c} (connected)"),
            false => format!("{c} (not connected)"),
        })
        .collect()
}

/// The snapshot for a terminal, with today's usage (`bub usage`'s totals) and `jobs` (rows of
/// `bub jobs list`) added.
pub fn render(s: &Snapshot, jobs: &[String], usage_today: &str) -> String {
    let mut lines = vec![
        format!(
            "bub {} · pid {} · up {} (since {})",
            s.version,
            s.pid,
            crate::time::human_duration(Duration::from_secs(s.uptime_seconds)),
            s.started.with_timezone(&Local).format("%Y-%m-%d %H:%M:%S")
        ),
        format!("model: {}", s.model),
        format!("channels: {}", channels(s).join(", ")),
        format!("usage today: {usage_today}"),
    ];
    let running = s.sessions.iter().filter(|r| r.running.is_some()).count();
    let queued: usize = s
        .sessions
        .iter()
        .map(|r| r.queued_messages + r.queued_commands)
        .sum();
    lines.push(format!(
        "sessions: {} live, {running} running, {queued} queued",
        s.sessions.len()
    ));
    let width = s
        .sessions
        .iter()
        .map(|r| r.session.as_str().len())
        .max()
        .unwrap_or(0);
    for row in &s.sessions {
        let doing = match &row.running {
            Some(r) => format!("running {} for {} s", r.what, r.seconds),
            None => "idle".to_owned(),
        };
        let queue = match (row.queued_messages, row.queued_commands) {
            (0, 0) => String::new(),
            (m, c) => format!(" · queued {m} message(s), {c} command(s)"),
        };
        lines.push(format!("  {:width$}  {doing}{queue}", row.session));
    }
    if !s.commands.is_empty() {
        lines.push(format!(
            "background commands ({}; end one with bub status --kill ID):",
            s.commands.len()
        ));
        for c in &s.commands {
            let cmd: String = c.command.chars().take(100).collect();
            let cmd = crate::terminal::safe_line(&cmd);
            lines.push(format!(
                "  {} {}  {} · {}: {cmd}",
                c.id, c.state, c.session, c.owner
            ));
        }
    }
    if jobs.is_empty() {
        lines.push("jobs: none".to_owned());
    } else {
        lines.push(format!("jobs ({}):", jobs.len()));
        lines.extend(jobs.iter().map(|j| format!("  {j}")));
    }
    if s.errors.is_empty() {
        lines.push("errors: none".to_owned());
    } else {
        lines.push("last errors (newest first):".to_owned());
        for e in &s.errors {
            let at = e.at.with_timezone(&Local).format("%m-%d %H:%M:%S");
            lines.push(format!("  {at}  {}  {}", e.session, e.error));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_board_keeps_live_sessions_and_the_last_errors() {
        let board = Board::new("openai:m", &["telegram"]);
        let row = SessionState {
            running: Some(("a command".into(), Instant::now())),
            queued_messages: 2,
            queued_commands: 1,
        };
        board.set(&"telegram:1".into(), row.clone());
        board.set(
            &"telegram:2".into(),
            SessionState {
                running: None,
                ..row
            },
        );
        board.remove(&"telegram:2".into());
        for i in 0..MAX_ERRORS + 3 {
            board.error(
                &"telegram:1".into(),
                &format!("error {i} {}", "x".repeat(400)),
            );
        }
        let s = board.snapshot();
        assert_eq!(s.sessions.len(), 1);
        assert_eq!(s.sessions[0].running.as_ref().unwrap().what, "a command");
        assert_eq!(s.errors.len(), MAX_ERRORS);
        assert!(s.errors[0].error.starts_with("error 12 "), "newest first");
        assert_eq!(s.errors[0].error.chars().count(), MAX_ERROR_CHARS);
        let text = render(&s, &[], "no model calls");
        assert!(
            text.contains("sessions: 1 live, 1 running, 3 queued"),
            "{text}"
        );
        assert!(
            text.contains(
                "telegram:1  running a command for 0 s · queued 2 message(s), 1 command(s)"
            ),
            "{text}"
        );
        assert!(text.contains("jobs: none"), "{text}");
    }

    #[tokio::test]
    async fn a_client_reads_the_snapshot_over_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let board = std::sync::Arc::new(Board::new("openai:m", &["discord"]));
        board.error(&"discord:9".into(), "Error: model unreachable");
        let stop = CancellationToken::new();
        let listener = bind(dir.path()).unwrap();
        let server = tokio::spawn(serve(listener, board.clone(), stop.clone()));
        let got = query(dir.path()).await.unwrap();
        assert_eq!(got, board.snapshot().clone_with_uptime(got.uptime_seconds));
        use std::os::unix::fs::PermissionsExt;
        let token = dir.path().join(TOKEN);
        for path in [socket_path(dir.path()), token.clone()] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{path:?}");
        }
        assert_eq!(std::fs::read_to_string(&token).unwrap().trim().len(), 64);
        stop.cancel();
        server.await.unwrap();
        assert!(!socket_path(dir.path()).exists(), "removed at the end");
        assert!(!token.exists(), "removed at the end");
        assert!(query(dir.path()).await.is_err());
    }

    /// What a raw client gets for `sent` (nothing sent: `None`), bounded; a reset connection (the
    /// server closed it with bytes unread) ends what it got.
    async fn raw(home: &Path, sent: Option<&str>) -> String {
        let stream = tokio::net::UnixStream::connect(socket_path(home))
            .await
            .unwrap();
        read_answer(stream, sent).await
    }

    async fn read_answer(mut stream: tokio::net::UnixStream, sent: Option<&str>) -> String {
        if let Some(sent) = sent {
            stream.write_all(sent.as_bytes()).await.unwrap();
        }
        let mut body = Vec::new();
        let read = stream.read_to_end(&mut body);
        let _ = tokio::time::timeout(TOKEN_TIMEOUT + IO_TIMEOUT, read)
            .await
            .expect("the server closes the connection");
        String::from_utf8(body).unwrap()
    }

    #[tokio::test]
    async fn only_a_client_with_the_token_gets_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let board = std::sync::Arc::new(Board::new("openai:m", &["telegram"]));
        board.error(&"telegram:42".into(), "Error: secret-session-detail");
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(bind(dir.path()).unwrap(), board, stop.clone()));
        let wrong = "0".repeat(64);
        let long = "a".repeat(10_000);
        for sent in ["\n", "hello\n", &format!("{wrong}\n")] {
            let got = raw(dir.path(), Some(sent)).await;
            assert_eq!(got, REFUSAL, "{sent:?}");
        }
        let got = raw(dir.path(), Some(&long)).await;
        assert!(
            !got.contains("telegram:42"),
            "only the first 128 bytes are read: {got}"
        );
        // Connections that send nothing fill every slot, and are closed after the timeout;
        // then the owner's `bub status` is answered.
        let mut silent = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            let stream = tokio::net::UnixStream::connect(socket_path(dir.path()));
            silent.push(tokio::spawn(read_answer(stream.await.unwrap(), None)));
        }
        let got = query(dir.path()).await.unwrap();
        assert_eq!(got.errors[0].session, "telegram:42");
        for client in silent {
            assert_eq!(client.await.unwrap(), "", "a silent client gets nothing");
        }
        // A token that is not the daemon's: a clear error.
        std::fs::write(dir.path().join(TOKEN), &wrong).unwrap();
        let err = query(dir.path()).await.unwrap_err();
        assert!(format!("{err:#}").contains("the daemon refused"), "{err:#}");
        stop.cancel();
        server.await.unwrap();
    }

    #[test]
    fn tokens_are_random_and_compared_whole() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert!(
            a.len() == 64 && a.chars().all(|c| c.is_ascii_hexdigit()),
            "{a}"
        );
        assert!(same_token(a.as_bytes(), a.as_bytes()));
        assert!(!same_token(a.as_bytes(), b.as_bytes()));
        assert!(!same_token(&a.as_bytes()[..63], a.as_bytes()));
        assert!(!same_token(b"", a.as_bytes()));
    }

    impl Snapshot {
        fn clone_with_uptime(mut self, uptime_seconds: u64) -> Self {
            self.uptime_seconds = uptime_seconds;
            self
        }
    }
}
