//! Background commands: `bash background=true` starts a command that outlives the call (a dev
//! server, a long build) and returns its id at once; `bash.output` reads what it wrote since the
//! last read, `bash.kill` stops it, `,status` lists them.
//!
//! A background command is started exactly like a `bash` call ([`super::prepare`]: the same
//! working directory rules, environment without Bub's secrets, containment, sandbox), so it has
//! the same rights as the turn that started it. It belongs to the **person** who started it (the
//! turn's [`Authority`]) in the chat it was started in:
//!
//! * an owner's turn sees, reads and ends any command (by id, from any chat); any other turn
//!   only commands a guest's turn started whose starters include every sender of the turn —
//!   others' commands are not named to it, and `,status` counts them without their command
//!   line ([`Background::describe`]);
//! * `/stop` ends the commands its sender started in the chat, `/new` those they may end
//!   ([`Background::stop_in`]), `tape.reset` every command of the chat, the process's stop all;
//!   the operator lists and ends any (its [`Commands`]: `bub status`, the console).
//!
//! Invariants:
//! * at most [`MAX_RUNNING`] run per chat, and at most `BUB_GUEST_BACKGROUND_COMMANDS` per
//!   guest in all chats; each holds one of the process's command slots while it runs (a guest's
//!   from the guests' share, [`CommandLimits`]) — when none is free it is refused, not queued;
//! * its output (stdout and stderr, as they come) is kept in a buffer of at most
//!   [`BUFFER_BYTES`]: unread bytes past that are dropped oldest first, and the next read says
//!   how many; one read returns at most [`READ_BYTES`];
//! * it runs at most its `timeout_seconds` (default and maximum `BUB_BASH_MAX_TIMEOUT_SECONDS`),
//!   then it and everything it started are killed ([`super::contain`]) — as on `bash.kill`,
//!   `/stop`, `/new`, `tape.reset` and when the process stops ([`Background::stop_all`];
//!   dropping it ends them too);
//! * a chat keeps at most [`KEPT`] commands and the process [`KEPT_ALL`]: a finished one is
//!   forgotten, oldest first, to make room.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::{BashArgs, CommandLimits, Launch, lock, prepare, spawn};
use crate::access::{Authority, Principal, Role};
use crate::chat::SessionId;
use crate::redact::Redactor;
use crate::status::{CommandRow, Commands};
use crate::tools::contain::{self, Keeper};
use crate::tools::{ToolError, sandbox};

/// Running background commands one chat may have.
pub(crate) const MAX_RUNNING: usize = 4;
/// Commands (running or finished, not yet forgotten) one chat keeps.
const KEPT: usize = 8;
/// Commands the process keeps.
const KEPT_ALL: usize = 256;
/// Output kept per command, unread.
const BUFFER_BYTES: usize = 64 * 1024;
/// Output one `bash.output` returns at most.
const READ_BYTES: usize = 16 * 1024;

/// The background commands of the process.
pub struct Background {
    commands: Mutex<VecDeque<Arc<Command>>>,
    next_id: AtomicU64,
    /// `BUB_GUEST_BACKGROUND_COMMANDS`.
    per_guest: usize,
    /// Bub's secrets, kept out of the command lines shown (`,status`, `bub status`, the console).
    redactor: Arc<Redactor>,
}

/// One background command.
struct Command {
    id: u64,
    /// The chat's session it was started in.
    session: SessionId,
    /// Who started it (the turn's authority: its role and senders).
    starter: Authority,
    cmd: String,
    started: Instant,
    keeper: Mutex<Keeper>,
    /// Cancelled to end it.
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
        lock(&self.state)
    }

    /// Runs and was not told to end.
    fn running(&self) -> bool {
        !self.stop.is_cancelled() && self.state().ended.is_none()
    }

    /// Ends it and all it started now (also when the runtime is going away) and tells its
    /// waiter.
    fn stop(&self) {
        self.stop.cancel();
        lock(&self.keeper).end();
    }

    /// Ends it unless it ended already; what happened.
    fn end(&self) -> String {
        if !self.running() {
            return format!("{} had already ended", self.id);
        }
        self.stop();
        format!("killed background command {}", self.id)
    }

    /// Whether `who`'s turn may see, read and end it (see the module docs).
    fn open_to(&self, who: &Authority) -> bool {
        who.role == Role::Owner
            || (self.starter.role == Role::Guest
                && !who.senders.is_empty()
                && who.senders.iter().all(|s| self.among_starters(s)))
    }

    /// Whether `who` started it (`/stop`'s rule): a sender of theirs among its starters, or
    /// both the terminal.
    fn started_by(&self, who: &Authority) -> bool {
        match who.senders.is_empty() {
            true => self.starter.senders.is_empty(),
            false => who.senders.iter().any(|s| self.among_starters(s)),
        }
    }

    /// `sender` is one of the people it was started for (by channel and id: a name may change).
    fn among_starters(&self, sender: &Principal) -> bool {
        let same = |s: &Principal| s.channel == sender.channel && s.id == sender.id;
        self.starter.senders.iter().any(same)
    }

    /// A guest's command that `sender` started.
    fn a_guests_of(&self, sender: &Principal) -> bool {
        self.starter.role == Role::Guest && self.among_starters(sender)
    }

    /// `running 2m`, `ending`, `exit=0`.
    fn how(&self) -> String {
        match &self.state().ended {
            None if self.stop.is_cancelled() => "ending".to_owned(),
            None => format!(
                "running {}",
                crate::time::human_duration(self.started.elapsed())
            ),
            Some(ended) => ended.clone(),
        }
    }

    /// `3 running 2m: npm run dev` / `3 exit=0: make`.
    fn line(&self) -> String {
        let cmd: String = self.cmd.chars().take(80).collect();
        format!("{} {}: {cmd}", self.id, self.how())
    }
}

impl Background {
    /// Background commands with at most `per_guest` running for one guest, whose command lines
    /// are shown through `redactor`.
    pub(crate) fn new(per_guest: usize, redactor: Arc<Redactor>) -> Self {
        Self {
            commands: Mutex::default(),
            next_id: AtomicU64::new(0),
            per_guest,
            redactor,
        }
    }

    /// Starts `args.cmd` in the background for `who` in `session`; its id, or why not.
    pub(crate) fn start(
        &self,
        session: &SessionId,
        who: &Authority,
        args: &BashArgs,
        launch: Launch<'_>,
        limits: &CommandLimits,
    ) -> Result<String, ToolError> {
        let mut commands = self.commands();
        let running = |c: &&Arc<Command>| c.running();
        let here = commands
            .iter()
            .filter(running)
            .filter(|c| &c.session == session)
            .count();
        if here >= MAX_RUNNING {
            return Err(ToolError::Refused(format!(
                "{MAX_RUNNING} background commands run in this chat already: stop one with \
                 bash.kill first"
            )));
        }
        if who.role == Role::Guest {
            let scoped = !launch.sandboxed || sandbox::scopes_signals();
            if let Err(why) = contained(contain::support(), scoped) {
                return Err(ToolError::Refused(format!(
                    "guests get no background commands here: {why}"
                )));
            }
            let theirs = |s: &Principal| {
                let mine = commands.iter().filter(|c| c.running() && c.a_guests_of(s));
                mine.count()
            };
            if who.senders.iter().any(|s| theirs(s) >= self.per_guest) {
                return Err(ToolError::Refused(format!(
                    "a guest may have {} background command(s) running \
                     (BUB_GUEST_BACKGROUND_COMMANDS): stop yours with bash.kill first",
                    self.per_guest
                )));
            }
        }
        let Some(slot) = limits.try_slot(who.role) else {
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
        let command = Arc::new(Command {
            id: self.next_id.fetch_add(1, Ordering::Relaxed) + 1,
            session: session.clone(),
            starter: who.clone(),
            cmd: self.redactor.redact(&args.cmd).into_owned(),
            started: Instant::now(),
            keeper: Mutex::new(Keeper::of(&child)),
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
            let exited = tokio::select! {
                status = child.wait() => Ok(status),
                _ = tokio::time::sleep(limit) => Err("killed after its timeout"),
                _ = watched.stop.cancelled() => Err("killed"),
            };
            let ended = match exited {
                Ok(status) => {
                    // Waited for: its pid may be another process's now.
                    lock(&watched.keeper).reaped();
                    match status {
                        _ if watched.stop.is_cancelled() => "killed".to_owned(),
                        Ok(status) => super::exit_text(status),
                        Err(e) => format!("failed: {e}"),
                    }
                }
                Err(killed) => {
                    lock(&watched.keeper).end();
                    if child.wait().await.is_ok() {
                        lock(&watched.keeper).reaped();
                    }
                    killed.to_owned()
                }
            };
            for reader in readers {
                let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
            }
            watched.state().ended = Some(ended);
        });
        let id = command.id;
        forget_to_fit(&mut commands, session);
        commands.push_back(command);
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

    /// What command `id` wrote since the last read, and whether it still runs — when `who`
    /// may read it from `session`.
    pub(crate) fn output(
        &self,
        session: &SessionId,
        who: &Authority,
        id: i64,
    ) -> Result<String, ToolError> {
        let command = self.find(session, who, id)?;
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
            None if command.stop.is_cancelled() => "ending".to_owned(),
            None => "running".to_owned(),
            Some(ended) => ended.clone(),
        };
        Ok(format!("[{id} {status}]\n{}", out.trim_end()))
    }

    /// Ends command `id` (and all it started) when `who` may end it from `session`.
    pub(crate) fn kill(
        &self,
        session: &SessionId,
        who: &Authority,
        id: i64,
    ) -> Result<String, ToolError> {
        Ok(self.find(session, who, id)?.end())
    }

    /// `,status` lines of `session`'s commands for `who`: theirs in full, the others' running
    /// ones only counted (none: empty).
    pub(crate) fn describe(&self, session: &SessionId, who: &Authority) -> Vec<String> {
        let commands = self.commands();
        let here = commands.iter().filter(|c| &c.session == session);
        let mut lines: Vec<String> = here
            .clone()
            .filter(|c| c.open_to(who))
            .map(|c| format!("background {}", c.line()))
            .collect();
        let others = here.filter(|c| !c.open_to(who) && c.running()).count();
        if others > 0 {
            lines.push(format!(
                "background: {others} running, started by someone else"
            ));
        }
        lines
    }

    /// Ends the running commands of `session` that `who` started (`/stop`: `own`), or that
    /// they may end (`/new`); how many.
    pub(crate) fn stop_in(&self, session: &SessionId, who: &Authority, own: bool) -> usize {
        let commands = self.commands();
        let ended = commands.iter().filter(|c| {
            &c.session == session
                && c.running()
                && match own {
                    true => c.started_by(who),
                    false => c.open_to(who),
                }
        });
        ended.map(|c| c.stop()).count()
    }

    /// Ends and forgets every command of `session` (`tape.reset`).
    pub(crate) fn stop_session(&self, session: &SessionId) {
        self.commands().retain(|c| {
            let other = &c.session != session;
            if !other {
                c.stop();
            }
            other
        });
    }

    /// Ends every command (the process stops).
    pub(crate) fn stop_all(&self) {
        for command in self.commands().drain(..) {
            command.stop();
        }
    }

    /// Command `id` if `who` may touch it from `session` (an owner's turn from any chat);
    /// others' commands are reported missing, as if they did not exist.
    fn find(
        &self,
        session: &SessionId,
        who: &Authority,
        id: i64,
    ) -> Result<Arc<Command>, ToolError> {
        let commands = self.commands();
        commands
            .iter()
            .find(|c| {
                i64::try_from(c.id) == Ok(id)
                    && (&c.session == session || who.role == Role::Owner)
                    && c.open_to(who)
            })
            .cloned()
            .ok_or_else(|| {
                ToolError::invalid(format!("no background command {id} of yours in this chat"))
            })
    }

    fn commands(&self) -> MutexGuard<'_, VecDeque<Arc<Command>>> {
        lock(&self.commands)
    }
}

/// Whether a guest's command stays contained: the keeper can find what it starts (`support`)
/// and the command cannot kill its keeper (`scoped`: unsandboxed, or Landlock scopes its
/// signals); else why not.
fn contained(support: Result<(), &'static str>, scoped: bool) -> Result<(), &'static str> {
    support?;
    match scoped {
        true => Ok(()),
        false => Err("the kernel's Landlock does not scope signals (Linux 6.12+)"),
    }
}

/// Makes room for one more command of `session`: forgets its oldest finished one when it keeps
/// [`KEPT`], and the process's oldest finished one when it keeps [`KEPT_ALL`].
fn forget_to_fit(commands: &mut VecDeque<Arc<Command>>, session: &SessionId) {
    let mine = commands.iter().filter(|c| &c.session == session).count();
    if mine >= KEPT
        && let Some(oldest) = commands
            .iter()
            .position(|c| &c.session == session && !c.running())
    {
        commands.remove(oldest);
    }
    if commands.len() >= KEPT_ALL
        && let Some(oldest) = commands.iter().position(|c| !c.running())
    {
        commands.remove(oldest);
    }
}

/// The operator's view (`bub status`, the console): every command, and any ended.
impl Commands for Background {
    fn rows(&self) -> Vec<CommandRow> {
        self.commands()
            .iter()
            .map(|c| CommandRow {
                id: c.id,
                session: c.session.clone(),
                owner: c.starter.describe(),
                state: c.how(),
                command: c.cmd.clone(),
            })
            .collect()
    }

    fn end(&self, id: u64) -> Result<String, String> {
        let command = self.commands().iter().find(|c| c.id == id).cloned();
        command
            .map(|c| c.end())
            .ok_or_else(|| format!("no background command {id}"))
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

#[cfg(test)]
mod tests;
