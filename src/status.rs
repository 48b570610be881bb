//! What the running daemon is doing, for `bub status` in a terminal: the live sessions (the
//! running turn and its age, what is queued), and the last errors chats were told about.
//!
//! The session actors keep a [`Board`] up to date (a few map writes per turn, nothing per idle
//! second); `bub message` serves a [`Snapshot`] of it as one JSON document to whoever connects
//! to `BUB_HOME/daemon.sock` (mode 0600), and `bub status` reads it ([`query`]). Nothing is
//! written to disk while the daemon runs.
//!
//! Invariants: the board holds one row per live actor (an actor removes its row when it ends)
//! and at most [`MAX_ERRORS`] errors, so it is bounded like the actors; no message text is kept,
//! only what the chat itself was told ("Error: …") or a delivery failure's reason.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Local, Utc};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The socket `bub message` answers status requests on, in `BUB_HOME`.
pub(crate) const SOCKET: &str = "daemon.sock";
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
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, SessionState>,
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
        }
    }

    /// Sets a session's row (an actor after each change of its queue or turn).
    pub(crate) fn set(&self, session: &str, row: SessionState) {
        let mut state = self.state.lock().expect("status board");
        match state.sessions.get_mut(session) {
            Some(old) => *old = row,
            None => {
                state.sessions.insert(session.to_owned(), row);
            }
        }
    }

    /// Removes a session's row (its actor ended).
    pub(crate) fn remove(&self, session: &str) {
        self.state
            .lock()
            .expect("status board")
            .sessions
            .remove(session);
    }

    /// Records an error a session met; the oldest goes beyond [`MAX_ERRORS`].
    pub(crate) fn error(&self, session: &str, error: &str) {
        let mut state = self.state.lock().expect("status board");
        if state.errors.len() == MAX_ERRORS {
            state.errors.pop_front();
        }
        state.errors.push_back(ErrorRow {
            at: Utc::now(),
            session: session.to_owned(),
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
            sessions,
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
    /// The live sessions, by id.
    pub sessions: Vec<SessionRow>,
    /// The last errors, newest first.
    pub errors: Vec<ErrorRow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRow {
    pub session: String,
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
    pub session: String,
    pub error: String,
}

/// The status socket of `home`.
pub(crate) fn socket_path(home: &Path) -> PathBuf {
    home.join(SOCKET)
}

/// Binds the status socket (replacing a stale one: the caller holds the daemon lock, so no
/// other daemon uses it), owner-only.
pub fn bind(home: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let path = socket_path(home);
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)
        .with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("securing {}", path.display()))?;
    Ok(listener)
}

/// Answers every connection with the board's snapshot until `stop`; then removes the socket.
pub async fn serve(
    listener: tokio::net::UnixListener,
    board: std::sync::Arc<Board>,
    stop: CancellationToken,
) {
    let path = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf));
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "status.accept.error");
                    continue;
                }
            },
        };
        let body = serde_json::to_vec(&board.snapshot()).expect("snapshot serializes");
        tokio::spawn(async move {
            let mut stream = stream;
            let written = tokio::time::timeout(IO_TIMEOUT, async {
                stream.write_all(&body).await?;
                stream.shutdown().await
            })
            .await;
            if !matches!(written, Ok(Ok(()))) {
                tracing::debug!("status.write: the client went away");
            }
        });
    }
    if let Some(path) = path {
        let _ = std::fs::remove_file(path);
    }
}

/// Asks the daemon of `home` for its snapshot.
pub async fn query(home: &Path) -> anyhow::Result<Snapshot> {
    let path = socket_path(home);
    let read = async {
        let mut stream = tokio::net::UnixStream::connect(&path).await?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await?;
        anyhow::Ok(body)
    };
    let body = tokio::time::timeout(IO_TIMEOUT, read)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {} s", IO_TIMEOUT.as_secs()))?
        .with_context(|| format!("asking {}", path.display()))?;
    serde_json::from_slice(&body).context("reading the daemon's status")
}

/// The snapshot for a terminal, with `jobs` (rows of `bub jobs list`) added.
pub fn render(s: &Snapshot, jobs: &[String]) -> String {
    let mut lines = vec![
        format!(
            "bub {} · pid {} · up {} (since {})",
            s.version,
            s.pid,
            crate::time::human_duration(Duration::from_secs(s.uptime_seconds)),
            s.started.with_timezone(&Local).format("%Y-%m-%d %H:%M:%S")
        ),
        format!("model: {}", s.model),
        format!("channels: {}", s.channels.join(", ")),
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
        .map(|r| r.session.len())
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
        board.set("telegram:1", row.clone());
        board.set(
            "telegram:2",
            SessionState {
                running: None,
                ..row
            },
        );
        board.remove("telegram:2");
        for i in 0..MAX_ERRORS + 3 {
            board.error("telegram:1", &format!("error {i} {}", "x".repeat(400)));
        }
        let s = board.snapshot();
        assert_eq!(s.sessions.len(), 1);
        assert_eq!(s.sessions[0].running.as_ref().unwrap().what, "a command");
        assert_eq!(s.errors.len(), MAX_ERRORS);
        assert!(s.errors[0].error.starts_with("error 12 "), "newest first");
        assert_eq!(s.errors[0].error.chars().count(), MAX_ERROR_CHARS);
        let text = render(&s, &[]);
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
        board.error("discord:9", "Error: model unreachable");
        let stop = CancellationToken::new();
        let listener = bind(dir.path()).unwrap();
        let server = tokio::spawn(serve(listener, board.clone(), stop.clone()));
        let got = query(dir.path()).await.unwrap();
        assert_eq!(got, board.snapshot().clone_with_uptime(got.uptime_seconds));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(socket_path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        stop.cancel();
        server.await.unwrap();
        assert!(!socket_path(dir.path()).exists(), "removed at the end");
        assert!(query(dir.path()).await.is_err());
    }

    impl Snapshot {
        fn clone_with_uptime(mut self, uptime_seconds: u64) -> Self {
            self.uptime_seconds = uptime_seconds;
            self
        }
    }
}
