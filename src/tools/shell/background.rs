//! Background commands: `bash background=true` starts a command that outlives the call (a dev
//! server, a long build) and returns its id at once; `bash.output` reads what it wrote since the
//! last read, `bash.kill` stops it, `,status` lists them.
//!
//! A background command is started exactly like a `bash` call ([`super::prepare`]: the same
//! working directory rules, environment without Bub's secrets, process group, sandbox), so it
//! has the same rights as the turn that started it.
//!
//! Invariants:
//! * at most [`MAX_RUNNING`] run per session, and each holds one of the process's command slots
//!   (`BUB_MAX_CONCURRENT_COMMANDS`) while it runs — when none is free it is refused, not queued;
//! * its output (stdout and stderr, as they come) is kept in a buffer of at most
//!   [`BUFFER_BYTES`]: unread bytes past that are dropped oldest first, and the next read says
//!   how many; one read returns at most [`READ_BYTES`];
//! * it runs at most its `timeout_seconds` (default and maximum `BUB_BASH_MAX_TIMEOUT_SECONDS`),
//!   then its process group is killed — as on `bash.kill`, on `tape.reset` of its session and
//!   when the process stops ([`Background::stop_all`]; dropping it kills them too);
//! * a session keeps at most [`KEPT`] commands: a finished one is forgotten, oldest first, to
//!   make room.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::{BashArgs, CommandLimits, Launch, prepare, spawn};
use crate::tools::{ToolError, sandbox};

/// Running background commands one session may have.
pub(crate) const MAX_RUNNING: usize = 4;
/// Commands (running or finished, not yet forgotten) one session keeps.
const KEPT: usize = 8;
/// Output kept per command, unread.
const BUFFER_BYTES: usize = 64 * 1024;
/// Output one `bash.output` returns at most.
const READ_BYTES: usize = 16 * 1024;

/// The background commands of the process, by session.
#[derive(Default)]
pub struct Background {
    sessions: Mutex<HashMap<String, Vec<Arc<Command>>>>,
    next_id: AtomicU64,
}

/// One background command.
struct Command {
    id: u64,
    cmd: String,
    started: Instant,
    pgid: Option<i32>,
    /// Cancelled to kill it.
    stop: CancellationToken,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    unread: VecDeque<u8>,
    /// Unread bytes dropped since the last read.
    dropped: u64,
    /// How it ended; `None` while it runs.
    ended: Option<String>,
}

impl Command {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn running(&self) -> bool {
        self.state().ended.is_none()
    }

    /// Kills its process group now (also when the runtime is going away) and tells its waiter.
    fn stop(&self) {
        self.stop.cancel();
        kill_group(self.pgid);
    }

    /// `3 running 2m: npm run dev` / `3 exit=0: make`.
    fn line(&self) -> String {
        let state = match &self.state().ended {
            None => format!(
                "running {}",
                crate::time::human_duration(self.started.elapsed())
            ),
            Some(ended) => ended.clone(),
        };
        let cmd: String = self.cmd.chars().take(80).collect();
        format!("{} {state}: {cmd}", self.id)
    }
}

impl Background {
    /// Starts `args.cmd` for `session` in the background; its id, or why not.
    pub(crate) fn start(
        &self,
        session: &str,
        args: &BashArgs,
        launch: Launch<'_>,
        limits: &CommandLimits,
    ) -> Result<String, ToolError> {
        let mut sessions = self.sessions();
        let commands = sessions.entry(session.to_owned()).or_default();
        if commands.iter().filter(|c| c.running()).count() >= MAX_RUNNING {
            return Err(ToolError::Refused(format!(
                "{MAX_RUNNING} background commands run in this session already: stop one with \
                 bash.kill first"
            )));
        }
        let Some(slot) = limits.try_slot_owned() else {
            return Err(ToolError::new(
                "every command slot is taken (BUB_MAX_CONCURRENT_COMMANDS): try again later",
            ));
        };
        let requested = args.timeout_seconds.unwrap_or(i64::MAX);
        let timeout = limits.timeout(requested.max(1));
        let parent: Vec<_> = std::env::vars_os().collect();
        let (mut process, sandbox) = prepare(
            &args.cmd,
            args.cwd.as_deref(),
            launch,
            parent,
            sandbox::available,
        )?;
        process.stdin(std::process::Stdio::null());
        let mut child = spawn(&mut process, sandbox.as_ref())?;
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        let command = Arc::new(Command {
            id: self.next_id.fetch_add(1, Ordering::Relaxed) + 1,
            cmd: args.cmd.clone(),
            started: Instant::now(),
            pgid,
            stop: CancellationToken::new(),
            state: Mutex::default(),
        });
        let readers = [
            tokio::spawn(collect(child.stdout.take(), command.clone())),
            tokio::spawn(collect(child.stderr.take(), command.clone())),
        ];
        let limit = Duration::from_secs(u64::try_from(timeout.seconds).unwrap_or(u64::MAX));
        let watched = command.clone();
        tokio::spawn(async move {
            // Owned until the command ends: its slot, its sandbox's private directory.
            let (_slot, _sandbox) = (slot, sandbox);
            let ended = tokio::select! {
                status = child.wait() => match status {
                    _ if watched.stop.is_cancelled() => "killed".to_owned(),
                    Ok(status) => super::exit_text(status),
                    Err(e) => format!("failed: {e}"),
                },
                _ = tokio::time::sleep(limit) => "killed after its timeout".to_owned(),
                _ = watched.stop.cancelled() => "killed".to_owned(),
            };
            kill_group(pgid);
            let _ = child.wait().await;
            for reader in readers {
                let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
            }
            watched.state().ended = Some(ended);
        });
        let id = command.id;
        if commands.len() >= KEPT
            && let Some(oldest) = commands.iter().position(|c| !c.running())
        {
            commands.remove(oldest);
        }
        commands.push(command);
        let mut out = format!(
            "started background command {id}; read its output with bash.output id={id}, stop it \
             with bash.kill id={id}"
        );
        if let Some(note) = timeout.note.filter(|_| args.timeout_seconds.is_some()) {
            out.push('\n');
            out.push_str(&note);
        }
        Ok(out)
    }

    /// What command `id` of `session` wrote since the last read, and whether it still runs.
    pub(crate) fn output(&self, session: &str, id: i64) -> Result<String, ToolError> {
        let command = self.find(session, id)?;
        let mut state = command.state();
        let n = state.unread.len().min(READ_BYTES);
        let bytes: Vec<u8> = state.unread.drain(..n).collect();
        let mut out = String::new();
        if state.dropped > 0 {
            out.push_str(&format!(
                "[{} earlier bytes were dropped: the buffer keeps {} KiB]\n",
                state.dropped,
                BUFFER_BYTES / 1024
            ));
            state.dropped = 0;
        }
        out.push_str(&String::from_utf8_lossy(&bytes));
        if !state.unread.is_empty() {
            out.push_str(&format!(
                "\n[{} more bytes: read again]",
                state.unread.len()
            ));
        }
        let status = match &state.ended {
            None => "running".to_owned(),
            Some(ended) => ended.clone(),
        };
        Ok(format!("[{id} {status}]\n{}", out.trim_end()))
    }

    /// Kills command `id` of `session` (its process group).
    pub(crate) fn kill(&self, session: &str, id: i64) -> Result<String, ToolError> {
        let command = self.find(session, id)?;
        if !command.running() {
            return Ok(format!("{id} had already ended"));
        }
        command.stop();
        Ok(format!("killed background command {id}"))
    }

    /// `,status` lines of `session`'s commands (none: empty).
    pub(crate) fn describe(&self, session: &str) -> Vec<String> {
        let sessions = self.sessions();
        let commands = sessions.get(session).map(Vec::as_slice).unwrap_or_default();
        commands
            .iter()
            .map(|c| format!("background {}", c.line()))
            .collect()
    }

    /// Kills and forgets every command of `session` (`tape.reset`).
    pub(crate) fn stop_session(&self, session: &str) {
        for command in self.sessions().remove(session).unwrap_or_default() {
            command.stop();
        }
    }

    /// Kills every command (the process stops).
    pub(crate) fn stop_all(&self) {
        for (_, commands) in self.sessions().drain() {
            for command in commands {
                command.stop();
            }
        }
    }

    fn find(&self, session: &str, id: i64) -> Result<Arc<Command>, ToolError> {
        let sessions = self.sessions();
        sessions
            .get(session)
            .and_then(|commands| commands.iter().find(|c| i64::try_from(c.id) == Ok(id)))
            .cloned()
            .ok_or_else(|| {
                ToolError::invalid(format!("no background command {id} in this session"))
            })
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Command>>>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Appends what `pipe` yields to `command`'s buffer, dropping the oldest unread bytes past
/// [`BUFFER_BYTES`].
async fn collect<R: AsyncRead + Unpin>(pipe: Option<R>, command: Arc<Command>) {
    let Some(mut pipe) = pipe else { return };
    let mut buf = vec![0u8; 8192];
    while let Ok(n @ 1..) = pipe.read(&mut buf).await {
        let mut state = command.state();
        state.unread.extend(&buf[..n]);
        let excess = state.unread.len().saturating_sub(BUFFER_BYTES);
        if excess > 0 {
            state.unread.drain(..excess);
            state.dropped += excess as u64;
        }
    }
}

/// SIGKILL to the group (what the shell left behind goes with it).
fn kill_group(pgid: Option<i32>) {
    super::signal_group(pgid, libc::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &str) -> BashArgs {
        BashArgs {
            cmd: cmd.into(),
            cwd: None,
            timeout_seconds: None,
            background: Some(true),
        }
    }

    #[tokio::test]
    async fn output_is_bounded_read_in_parts_and_says_what_was_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let launch = Launch {
            workspace: dir.path(),
            session_id: "s",
            home: &dir.path().join("home"),
            user_home: None,
            sandboxed: false,
            folder: None,
        };
        let (limits, background) = (CommandLimits::new(1, 60), Background::default());
        let cmd = "head -c 200000 /dev/zero | tr '\\0' x; echo; echo end";
        let started = background.start("s", &args(cmd), launch, &limits).unwrap();
        assert!(started.contains("command 1"), "{started}");
        let refused = background.start("s", &args("true"), launch, &limits);
        assert!(
            refused
                .unwrap_err()
                .message()
                .contains("every command slot"),
            "the one slot is the running command's"
        );
        // Nothing is read until it ended (`,status` does not read).
        let ended = async {
            while !background.describe("s")[0].contains("exit=0") {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), ended)
            .await
            .expect("the command ends");
        let first = background.output("s", 1).unwrap();
        assert!(first.starts_with("[1 exit=0]"), "{}", &first[..40]);
        assert!(
            first.contains("earlier bytes were dropped"),
            "{}",
            &first[..200]
        );
        assert!(first.len() < READ_BYTES + 300, "{} bytes", first.len());
        assert!(first.ends_with("more bytes: read again]"));
        let mut rest = String::new();
        for _ in 0..8 {
            rest.push_str(&background.output("s", 1).unwrap());
        }
        assert!(rest.contains("end"), "the last of it is kept");
        assert!(background.output("other", 1).is_err(), "per session");
        assert!(limits.try_slot_owned().is_some(), "the slot is back");
    }
}
