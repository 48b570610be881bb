//! The `bash` tool: runs `bash -lc <cmd>` in its own process group with a timeout that kills
//! the whole group, bounded output capture and the workspace `.env` in its environment.
//!
//! Invariants: the spawned process group never outlives the call unless the command finished
//! normally (shell exited and both output pipes closed) — a timeout or a dropped future (turn
//! cancelled) sends `SIGKILL` to the group; each output stream keeps at most [`STREAM_CAP`]
//! bytes (head and tail, with a visible note in between).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

use super::fs::resolve_path;
use super::registry::parse_args;
use super::{Scope, Tool, ToolContext, ToolError};

/// Default `timeout_seconds`.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 30;
/// Bytes kept of each of stdout and stderr (half from the head, half from the tail).
pub const STREAM_CAP: usize = 32 * 1024;
/// How long to wait for the pipes to drain after the group was killed.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

const DETAIL: &str = "Runs `bash -lc <cmd>` and returns its output.
Args:
  cmd: the shell command line (pipes, redirections, && etc. allowed).
  cwd: working directory (default: the workspace; relative paths are joined to it, ~ expanded).
  timeout_seconds: integer >= 1, default 30. On timeout the whole process group is killed and an
    error with the partial output is returned.
Environment: the process environment plus KEY=VAL pairs of <workspace>/.env and BUB_SESSION_ID.
Output: stdout, then stderr after a `[stderr]` line; `(no output)` when both are empty. A
non-zero exit is an error `exit=<code>: ...`. Each stream is capped at 32 KiB (head and tail
kept); write large output to a file and read it with fs.read.
The call returns when the shell has exited and its output is closed: start background processes
with their output redirected (`server > server.log 2>&1 &`).
Do not use `sleep` to wait for something to happen later; use schedule.add instead.";

/// Arguments of `bash`.
#[derive(Debug, Clone, Deserialize)]
pub struct BashArgs {
    pub cmd: String,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub timeout_seconds: Option<i64>,
}

/// `bash`.
pub fn tools() -> Vec<Tool> {
    vec![Tool::new(
        "bash",
        "Run shell command",
        DETAIL,
        json!({
            "type": "object",
            "properties": {
                "cmd": {"type": "string", "description": "shell command line"},
                "cwd": {"type": "string", "description": "working directory (default: workspace)"},
                "timeout_seconds": {"type": "integer", "minimum": 1, "default": DEFAULT_TIMEOUT_SECONDS,
                    "description": "kill the command after this many seconds"},
            },
            "required": ["cmd"],
        }),
        |args, ctx: ToolContext| async move {
            let args: BashArgs = parse_args(args)?;
            run_bash(args, ctx.workspace(), ctx.session_id()).await
        },
    )
    .scoped(Scope::Paths(&["cwd"]))]
}

/// Runs one `bash` call (the tool's logic, independent of the registry).
pub async fn run_bash(
    args: BashArgs,
    workspace: &Path,
    session_id: &str,
) -> Result<String, ToolError> {
    let secs = args
        .timeout_seconds
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS as i64);
    if secs < 1 {
        return Err(ToolError::new(format!(
            "timeout_seconds must be >= 1, got {secs}"
        )));
    }
    let timeout = Duration::from_secs(secs as u64);
    let cwd = resolve_cwd(workspace, args.cwd.as_deref());
    if !cwd.is_dir() {
        return Err(ToolError::new(format!(
            "cwd is not a directory: {}",
            cwd.display()
        )));
    }

    let mut command = tokio::process::Command::new("bash");
    command
        .arg("-lc")
        .arg(&args.cmd)
        .current_dir(&cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .envs(workspace_env(workspace))
        .env("BUB_SESSION_ID", session_id)
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|e| ToolError::new(format!("failed to start bash: {e}")))?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .ok_or_else(|| ToolError::new("failed to start bash: no process id"))?;
    let mut guard = GroupGuard {
        pgid: Some(pgid),
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
            // The shell exited and its output is closed: leave any detached background job alone.
            guard.pgid = None;
            let status = status.map_err(|e| ToolError::new(format!("bash failed: {e}")))?;
            let stdout = take_text(&out);
            let stderr = take_text(&err);
            format_result(status, &stdout, &stderr)
        }
        Err(_) => {
            guard.kill();
            let _ = tokio::time::timeout(DRAIN_GRACE, child.wait()).await;
            let _ = tokio::time::timeout(DRAIN_GRACE, async {
                let _ = (&mut out_task).await;
                let _ = (&mut err_task).await;
            })
            .await;
            let partial = combine(&take_text(&out), &take_text(&err));
            let mut msg =
                format!("timeout: command did not finish within {secs}s (process group killed)");
            if !partial.is_empty() {
                msg.push_str("\npartial output:\n");
                msg.push_str(&partial);
            }
            Err(ToolError(msg))
        }
    }
}

/// `KEY=VAL` pairs of `<workspace>/.env` (none when the file is missing; bad lines end parsing,
/// keeping the pairs before them). The process environment is not touched.
pub fn workspace_env(workspace: &Path) -> Vec<(String, String)> {
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

/// Kills the process group on drop (timeout or cancellation) and stops the pipe readers.
struct GroupGuard {
    pgid: Option<i32>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: killpg only sends a signal; an already-empty group yields ESRCH.
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
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

fn lock(capture: &Mutex<Capture>) -> std::sync::MutexGuard<'_, Capture> {
    capture
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn take_text(capture: &Mutex<Capture>) -> String {
    lock(capture).text()
}

/// A byte stream capped at `cap` bytes: the first `cap/2` and the last `cap/2` are kept.
#[derive(Debug)]
pub struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    half: usize,
    total: usize,
}

impl Capture {
    /// An empty capture keeping at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            head: Vec::new(),
            tail: Vec::new(),
            half: (cap / 2).max(1),
            total: 0,
        }
    }

    /// Appends `data`, dropping bytes between the head and the tail as needed.
    pub fn push(&mut self, mut data: &[u8]) {
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
    pub fn text(&self) -> String {
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
    let head = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit={code}"),
        (None, Some(sig)) => format!("signal={sig}"),
        (None, None) => "exit=?".to_string(),
    };
    Err(ToolError(format!("{head}: {body}")))
}

/// The directory a `cwd` argument names: the workspace when absent or blank.
fn resolve_cwd(workspace: &Path, cwd: Option<&str>) -> PathBuf {
    match cwd.map(str::trim) {
        Some(c) if !c.is_empty() => resolve_path(workspace, c),
        _ => workspace.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut c = Capture::new(8);
        c.push(b"abcd");
        c.push(b"efghijklmnop");
        c.push(b"qrst");
        assert_eq!(c.text(), "abcd\n… [truncated 12 bytes] …\nqrst");
    }

    #[test]
    fn capture_without_overflow_is_verbatim() {
        let mut c = Capture::new(8);
        c.push(b" ab");
        c.push(b"cdef\n");
        assert_eq!(c.text(), "abcdef");
    }

    #[test]
    fn capture_does_not_split_utf8_at_cut_points() {
        let mut c = Capture::new(6);
        c.push("aé".as_bytes()); // 3 bytes: head full
        c.push(b"xxxxxxxx");
        c.push("é!".as_bytes());
        let text = c.text();
        assert!(text.starts_with("aé\n"), "{text}");
        assert!(text.ends_with("\né!"), "{text}");
        assert!(!text.contains('\u{FFFD}'), "{text}");

        let mut c = Capture::new(4);
        c.push("a€".as_bytes()); // head keeps `a` + 1 byte of `€`
        c.push(b"0123456789");
        assert!(c.text().starts_with("a\n"), "{}", c.text());
    }

    #[test]
    fn result_formatting() {
        let ok = ExitStatus::from_raw(0);
        assert_eq!(format_result(ok, "", "").unwrap(), "(no output)");
        assert_eq!(
            format_result(ok, "out", "warn").unwrap(),
            "out\n[stderr]\nwarn"
        );
        let fail = ExitStatus::from_raw(3 << 8);
        assert_eq!(
            format_result(fail, "", "").unwrap_err().0,
            "exit=3: (no output)"
        );
        assert_eq!(
            format_result(fail, "o", "e").unwrap_err().0,
            "exit=3: e\n[stdout]\no"
        );
        let killed = ExitStatus::from_raw(9);
        assert_eq!(format_result(killed, "o", "").unwrap_err().0, "signal=9: o");
    }
}
