//! The `bash` tool: runs `bash -lc <cmd>` contained ([`super::contain`]: the command and
//! everything it starts, `setsid` included, end together) with a timeout, bounded output
//! capture, and an environment built by [`child_env`]; optionally inside the Landlock sandbox
//! ([`super::sandbox`]), as [`Launch`] says.
//!
//! Invariants:
//! * no process the command started outlives the call: when the shell exits, what it left
//!   running is killed; a timeout or a dropped future (turn cancelled) ends it all;
//! * each output stream keeps at most [`STREAM_CAP`] bytes (head and tail, with a visible note
//!   in between);
//! * Bub's own secrets ([`secret_vars`]: API keys, bot tokens, proxies) never reach a child,
//!   whether inherited from the process environment or listed in the workspace `.env`;
//! * a sandboxed command starts from a cleared environment (PATH, locale, TERM, TZ, `HOME` =
//!   `TMPDIR` = its private directory, `BUB_SESSION_ID`) without the workspace `.env` — a guest
//!   must not get the owner's `GH_TOKEN` — and runs only if the sandbox could be applied
//!   (fail closed: otherwise an error and nothing is started);
//! * through the tool, at most `BUB_MAX_CONCURRENT_COMMANDS` commands run at once in the process
//!   (some slots kept for owners), and no timeout exceeds `BUB_BASH_MAX_TIMEOUT_SECONDS`
//!   ([`CommandLimits`], [`run_limited`]);
//! * a child starts with `SIGXFSZ` at its default action, although Bub itself ignores it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

mod background;
mod limits;

pub use background::Background;
pub(crate) use limits::CommandLimits;

use super::contain::{self, Keeper};
use super::fs::PathUse;
use super::fs::resolve_path;
use super::registry::Reach;
use super::sandbox::{self, Sandbox, Support};
use super::{Tool, ToolContext, ToolError};
use crate::access::Role;
use crate::config::secret_vars;

/// Default `timeout_seconds`.
pub(crate) const DEFAULT_TIMEOUT_SECONDS: u64 = 30;
/// Bytes kept of each of stdout and stderr (half from the head, half from the tail).
pub(crate) const STREAM_CAP: usize = 32 * 1024;
/// How long to wait for the pipes to drain after the group was killed.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

const DETAIL: &str = "Runs `bash -lc <cmd>` and returns its output.
Args:
  cmd: the shell command line (pipes, redirections, && etc. allowed).
  cwd: working directory (default: the workspace; relative paths are joined to it, ~ expanded).
  timeout_seconds: integer >= 1, default 30, at most BUB_BASH_MAX_TIMEOUT_SECONDS (3600 unless
    configured; a larger value is lowered to it, with a note). On timeout the command and every
    process it started are killed and an error with the partial output is returned.
At most BUB_MAX_CONCURRENT_COMMANDS (8 unless configured) commands run at once; more wait their
turn (the timeout starts when the command starts).
Environment: the process environment plus KEY=VAL pairs of <workspace>/.env and BUB_SESSION_ID;
Bub's own API keys and bot tokens are removed.
Sandboxed sessions: only the workspace and $TMPDIR (a fresh directory per call, also $HOME) can
be written; system directories can be read; everything else is denied, and the environment is
minimal (no .env).
Output: stdout, then stderr after a `[stderr]` line; `(no output)` when both are empty. A
non-zero exit is an error `exit=<code>: ...`. Each stream is capped at 32 KiB (head and tail
kept); write large output to a file and read it with fs.read.
The call returns when the shell has exited; whatever it left running (`&`, nohup, setsid) is
killed then.
Long-running commands (a server, a long build): background=true returns an id at once; read
the output with bash.output, stop it with bash.kill (at most 4 per session; they end after
BUB_BASH_MAX_TIMEOUT_SECONDS, or timeout_seconds).
Do not use `sleep` to wait for something to happen later; use schedule.add instead.";

/// Arguments of `bash`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct BashArgs {
    /// shell command line
    pub cmd: String,
    /// working directory (default: workspace)
    pub cwd: Option<String>,
    /// seconds before it is killed (default 30)
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<i64>,
    /// return an id at once (see bash.output)
    pub background: Option<bool>,
}

/// How [`run_bash`] launches a command.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    /// The default working directory; for a sandboxed command also the only directory (besides
    /// its private temporary one) it may write.
    pub workspace: &'a Path,
    /// `BUB_SESSION_ID` in the child's environment.
    pub session_id: &'a str,
    /// `BUB_HOME`: a sandboxed command has no access to it (sandboxing is refused when it cannot
    /// be protected).
    pub home: &'a Path,
    /// The user's home directory, denied like `BUB_HOME` (`None`: `$HOME`).
    pub user_home: Option<&'a Path>,
    /// Run in the Landlock sandbox with the minimal environment.
    pub sandboxed: bool,
    /// A guest's turn: its chat's folder (`chats/<channel>-<chat>/`, absolute), the default
    /// working directory and, sandboxed, the only directory it sees instead of the workspace.
    pub folder: Option<&'a Path>,
}

/// `bash`.
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::reaching(
            "bash",
            "Run shell command",
            DETAIL,
            |a: &BashArgs| Reach::path(a.cwd.as_deref(), PathUse::Write),
            |args: BashArgs, ctx: ToolContext| async move {
                let process = &ctx.process;
                let folder = match ctx.turn.policy.confines_files() {
                    true => Some(guest_folder(&ctx).await?),
                    false => None,
                };
                let launch = Launch {
                    workspace: ctx.workspace(),
                    session_id: ctx.session_id(),
                    home: &process.home,
                    user_home: process.user_home.as_deref(),
                    sandboxed: ctx.turn.policy.sandbox,
                    folder: folder.as_deref(),
                };
                let who = &ctx.turn.authority;
                match args.background.unwrap_or(false) {
                    true => process.background.start(
                        ctx.chat_session(),
                        who,
                        &args,
                        launch,
                        &process.commands,
                    ),
                    false => run_limited(args, launch, &process.commands, who.role).await,
                }
            },
        ),
        Tool::new(
            "bash.output",
            "New output of a background command",
            "The output a `bash background=true` command wrote since the last read (at most 16 \
             KiB; read again for more) and whether it still runs.",
            |IdArgs { id }, ctx: ToolContext| async move {
                let (chat, who) = (ctx.chat_session(), &ctx.turn.authority);
                ctx.process.background.output(chat, who, id)
            },
        ),
        Tool::new(
            "bash.kill",
            "Stop a background command",
            "Kills a `bash background=true` command and every process it started.",
            |IdArgs { id }, ctx: ToolContext| async move {
                let (chat, who) = (ctx.chat_session(), &ctx.turn.authority);
                ctx.process.background.kill(chat, who, id)
            },
        ),
    ]
}

/// Arguments of `bash.output` and `bash.kill`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct IdArgs {
    /// background command id
    id: i64,
}

/// A guest's chat folder in the workspace, created when missing: where its shell works.
async fn guest_folder(ctx: &ToolContext) -> Result<PathBuf, ToolError> {
    let Some(folder) = ctx.session().chat_folder() else {
        return Err(ToolError::new("guests have no shell outside a chat"));
    };
    let folder = ctx.workspace().join(folder);
    tokio::fs::create_dir_all(&folder)
        .await
        .map_err(|e| ToolError::new(format!("{}: {e}", folder.display())))?;
    Ok(folder)
}

/// [`run_bash`] within the process's [`CommandLimits`]: the timeout lowered to the maximum (a
/// note at the end of the output or error says so), and the command started only when a slot
/// is free. The slot is held until the call returns or is dropped (the command ended).
pub(crate) async fn run_limited(
    mut args: BashArgs,
    launch: Launch<'_>,
    limits: &CommandLimits,
    role: Role,
) -> Result<String, ToolError> {
    let timeout = limits.timeout(
        args.timeout_seconds
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS as i64),
    );
    args.timeout_seconds = Some(timeout.seconds);
    let _slot = limits.slot(role).await?;
    let result = run_bash(args, launch).await;
    match timeout.note {
        None => result,
        Some(note) => match result {
            Ok(out) => Ok(format!("{out}\n{note}")),
            Err(e) => Err(e.map_message(|m| format!("{m}\n{note}"))),
        },
    }
}

/// Runs one `bash` call (the tool's logic, independent of the registry and its limits).
pub async fn run_bash(args: BashArgs, launch: Launch<'_>) -> Result<String, ToolError> {
    let parent_env: Vec<_> = std::env::vars_os().collect();
    run_bash_with(args, launch, parent_env, sandbox::available).await
}

/// [`run_bash`] with the parent environment and the Landlock probe (consulted only for a
/// sandboxed command) given, for tests.
async fn run_bash_with(
    args: BashArgs,
    launch: Launch<'_>,
    parent_env: impl IntoIterator<Item = (OsString, OsString)>,
    support: impl FnOnce() -> Support,
) -> Result<String, ToolError> {
    let secs = args
        .timeout_seconds
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS as i64);
    if secs < 1 {
        return Err(ToolError::invalid(format!(
            "timeout_seconds must be >= 1, got {secs}"
        )));
    }
    let timeout = Duration::from_secs(secs as u64);
    let (mut command, sandbox) =
        prepare(&args.cmd, args.cwd.as_deref(), launch, parent_env, support)?;
    let mut child = spawn(&mut command, sandbox.as_ref())?;
    let mut guard = Running {
        keeper: Keeper::of(&child),
        tasks: Vec::new(),
    };

    let out = Arc::new(Mutex::new(Capture::new(STREAM_CAP)));
    let err = Arc::new(Mutex::new(Capture::new(STREAM_CAP)));
    let mut out_task = spawn_reader(child.stdout.take(), Arc::clone(&out));
    let mut err_task = spawn_reader(child.stderr.take(), Arc::clone(&err));
    guard.tasks.push(out_task.abort_handle());
    guard.tasks.push(err_task.abort_handle());

    let finished = tokio::time::timeout(timeout, async {
        let status = child.wait().await;
        let _ = (&mut out_task).await;
        let _ = (&mut err_task).await;
        status
    })
    .await;

    match finished {
        Ok(status) => {
            // The shell exited and what it left running was killed.
            guard.keeper.reaped();
            let status = status.map_err(|e| ToolError::new(format!("bash failed: {e}")))?;
            let stdout = lock(&out).text();
            let stderr = lock(&err).text();
            format_result(status, &stdout, &stderr)
        }
        Err(_) => {
            guard.keeper.end();
            if let Ok(Ok(_)) = tokio::time::timeout(DRAIN_GRACE, child.wait()).await {
                guard.keeper.reaped();
            }
            let _ = tokio::time::timeout(DRAIN_GRACE, async {
                let _ = (&mut out_task).await;
                let _ = (&mut err_task).await;
            })
            .await;
            let partial = combine(&lock(&out).text(), &lock(&err).text());
            let mut msg = format!(
                "timeout: command did not finish within {secs}s (it and all it started were killed)"
            );
            if !partial.is_empty() {
                msg.push_str("\npartial output:\n");
                msg.push_str(&partial);
            }
            Err(ToolError::Failed(msg))
        }
    }
}

/// The `bash -lc cmd` command of `launch`: its working directory checked (`cwd` relative to the
/// workspace, default the workspace or the guest's folder), its environment built
/// ([`child_env`]), contained, in its own process group, piped, and — sandboxed — confined to a sandbox
/// that must live until the command has been spawned (it owns the private directory).
pub(super) fn prepare(
    cmd: &str,
    cwd: Option<&str>,
    launch: Launch<'_>,
    parent_env: impl IntoIterator<Item = (OsString, OsString)>,
    support: impl FnOnce() -> Support,
) -> Result<(tokio::process::Command, Option<Sandbox>), ToolError> {
    let workspace = launch.workspace;
    let root = launch.folder.unwrap_or(workspace);
    let cwd = match cwd.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) => resolve_path(workspace, c),
        None => root.to_path_buf(),
    };
    if !cwd.is_dir() {
        return Err(ToolError::new(format!(
            "cwd is not a directory: {}",
            cwd.display()
        )));
    }
    // Kept alive until the call returns: it owns the private directory.
    let sandbox = if launch.sandboxed {
        let sandbox = Sandbox::new(support(), root, launch.home, launch.user_home)
            .map_err(|e| ToolError::new(e.to_string()))?;
        let inside = cwd
            .canonicalize()
            .is_ok_and(|c| c.starts_with(sandbox.workspace()));
        if !inside {
            let place = match launch.folder {
                Some(_) => "this chat's folder",
                None => "the workspace",
            };
            return Err(ToolError::new(format!(
                "cwd {} is outside {place} ({}), where sandboxed commands run; the command was \
                 not run",
                cwd.display(),
                root.display()
            )));
        }
        Some(sandbox)
    } else {
        None
    };
    let env = child_env(
        parent_env,
        workspace,
        launch.session_id,
        sandbox.as_ref().map(Sandbox::tmp_dir),
    );

    let mut command = tokio::process::Command::new("bash");
    command
        .arg("-lc")
        .arg(cmd)
        .current_dir(&cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .envs(env)
        .process_group(0);
    contain::keep(&mut command);
    // SAFETY: `signal` is async-signal-safe and the closure allocates nothing. Bub ignores
    // SIGXFSZ (a file over RLIMIT_FSIZE is an error, not death) and an ignored signal stays
    // ignored across exec: the child gets the default action back.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
            Ok(())
        });
    }
    if let Some(sandbox) = &sandbox {
        sandbox.confine(&mut command);
    }
    Ok((command, sandbox))
}

/// Spawns a [`prepare`]d command; the error says whether the sandbox was in the way.
pub(super) fn spawn(
    command: &mut tokio::process::Command,
    sandbox: Option<&Sandbox>,
) -> Result<tokio::process::Child, ToolError> {
    command.spawn().map_err(|e| match sandbox {
        Some(_) => ToolError::new(format!(
            "failed to start bash in the sandbox: {e}; the command was not run"
        )),
        None => ToolError::new(format!("failed to start bash: {e}")),
    })
}

/// Variables a sandboxed command inherits (besides `LC_*`).
const SANDBOX_KEPT_VARS: &[&str] = &["PATH", "LANG", "LANGUAGE", "TERM", "TZ"];
/// `PATH` of a sandboxed command when the process has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The complete environment of a `bash` child, from the parent's environment `parent`.
///
/// Unsandboxed (`sandbox_tmp` is `None`): `parent`, then the pairs of `<workspace>/.env`
/// (overriding), then `BUB_SESSION_ID`; [`secret_vars`] are removed from both sources.
/// Sandboxed: only `PATH` (a default when unset), `LANG`, `LANGUAGE`, `LC_*`, `TERM` and `TZ`
/// of `parent`, `HOME` and `TMPDIR` set to `sandbox_tmp`, and `BUB_SESSION_ID`; the workspace
/// `.env` is not read.
pub(crate) fn child_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    workspace: &Path,
    session_id: &str,
    sandbox_tmp: Option<&Path>,
) -> Vec<(OsString, OsString)> {
    let is_secret = |key: &OsString| secret_vars().any(|s| key == s);
    let mut env: BTreeMap<OsString, OsString> = BTreeMap::new();
    match sandbox_tmp {
        None => {
            env.extend(parent.into_iter().filter(|(k, _)| !is_secret(k)));
            env.extend(
                workspace_env(workspace)
                    .into_iter()
                    .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                    .filter(|(k, _)| !is_secret(k)),
            );
        }
        Some(tmp) => {
            env.extend(parent.into_iter().filter(|(k, _)| {
                SANDBOX_KEPT_VARS.iter().any(|kept| k == *kept)
                    || k.to_str().is_some_and(|k| k.starts_with("LC_"))
            }));
            env.entry("PATH".into())
                .or_insert_with(|| DEFAULT_PATH.into());
            env.insert("HOME".into(), tmp.into());
            env.insert("TMPDIR".into(), tmp.into());
        }
    }
    env.insert("BUB_SESSION_ID".into(), session_id.into());
    env.into_iter().collect()
}

/// `KEY=VAL` pairs of `<workspace>/.env` (none when the file is missing; bad lines end parsing,
/// keeping the pairs before them). The process environment is not touched.
pub(crate) fn workspace_env(workspace: &Path) -> Vec<(String, String)> {
    let path = workspace.join(".env");
    let Ok(iter) = dotenvy::from_path_iter(&path) else {
        return Vec::new();
    };
    let mut pairs = Vec::new();
    for item in iter {
        match item {
            Ok(pair) => pairs.push(pair),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "bash: .env parse error");
                break;
            }
        }
    }
    pairs
}

/// A running call: ends the command (unless it was reaped) and stops the pipe readers when
/// dropped (timeout or cancellation).
struct Running {
    keeper: Keeper,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn spawn_reader<R>(reader: Option<R>, capture: Arc<Mutex<Capture>>) -> JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let Some(mut reader) = reader else { return };
        let mut buf = vec![0u8; 8192];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => lock(&capture).push(&buf[..n]),
            }
        }
    })
}

/// `mutex` locked, also when a panic poisoned it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A byte stream capped at `cap` bytes: the first `cap/2` and the last `cap/2` are kept.
#[derive(Debug)]
pub(crate) struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    half: usize,
    total: usize,
}

impl Capture {
    /// An empty capture keeping at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            head: Vec::new(),
            tail: Vec::new(),
            half: (cap / 2).max(1),
            total: 0,
        }
    }

    /// Appends `data`, dropping bytes between the head and the tail as needed.
    pub(crate) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len();
        if self.head.len() < self.half {
            let n = (self.half - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() {
            return;
        }
        self.tail.extend_from_slice(data);
        if self.tail.len() > 2 * self.half {
            let excess = self.tail.len() - self.half;
            self.tail.drain(..excess);
        }
    }

    /// Lossy UTF-8 text, trimmed, with `… [truncated N bytes] …` where bytes were dropped.
    pub(crate) fn text(&self) -> String {
        let kept_tail = self.tail.len().min(self.half);
        let tail = &self.tail[self.tail.len() - kept_tail..];
        let dropped = self.total - self.head.len() - kept_tail;
        if dropped == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(tail);
            return String::from_utf8_lossy(&all).trim().to_string();
        }
        let head = trim_incomplete_end(&self.head);
        let tail = trim_incomplete_start(tail);
        let dropped = self.total - head.len() - tail.len();
        format!(
            "{}\n… [truncated {dropped} bytes] …\n{}",
            String::from_utf8_lossy(head).trim_start(),
            String::from_utf8_lossy(tail).trim_end()
        )
        .trim()
        .to_string()
    }
}

/// Drops a UTF-8 sequence cut off at the end of `b`.
fn trim_incomplete_end(b: &[u8]) -> &[u8] {
    let start = b.len().saturating_sub(3);
    for i in (start..b.len()).rev() {
        let byte = b[i];
        if byte & 0xC0 == 0x80 {
            continue; // continuation byte: keep looking for the lead byte
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return b,
        };
        return if b.len() - i < need { &b[..i] } else { b };
    }
    b
}

/// Drops continuation bytes at the start of `b` (the rest of a sequence cut off before it).
fn trim_incomplete_start(b: &[u8]) -> &[u8] {
    let skip = b.iter().take(3).take_while(|&&c| c & 0xC0 == 0x80).count();
    &b[skip..]
}

/// `stdout`, then stderr under a `[stderr]` line.
fn combine(stdout: &str, stderr: &str) -> String {
    match (stdout.is_empty(), stderr.is_empty()) {
        (_, true) => stdout.to_string(),
        (true, false) => format!("[stderr]\n{stderr}"),
        (false, false) => format!("{stdout}\n[stderr]\n{stderr}"),
    }
}

fn format_result(status: ExitStatus, stdout: &str, stderr: &str) -> Result<String, ToolError> {
    if status.success() {
        let out = combine(stdout, stderr);
        return Ok(if out.is_empty() {
            "(no output)".to_string()
        } else {
            out
        });
    }
    let body = match (stderr.is_empty(), stdout.is_empty()) {
        (false, false) => format!("{stderr}\n[stdout]\n{stdout}"),
        (false, true) => stderr.to_string(),
        (true, false) => stdout.to_string(),
        (true, true) => "(no output)".to_string(),
    };
    Err(ToolError::Failed(format!("{}: {body}", exit_text(status))))
}

/// `exit=CODE`, `signal=N`.
fn exit_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit={code}"),
        (None, Some(sig)) => format!("signal={sig}"),
        (None, None) => "exit=?".to_string(),
    }
}

#[cfg(test)]
mod tests;
