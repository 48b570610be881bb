//! A `bub` process environment for end-to-end tests: a temp BUB_HOME and workspace, the fake
//! model and the fake Telegram, helpers to run or spawn the real binary against them and to read
//! what it left on disk.

use std::path::PathBuf;
use std::process::{ExitStatus, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use super::fake_openai::{self, FakeOpenAi};
use super::fake_telegram::{self, FakeTelegram};
pub use super::wait::WAIT;

/// How long a process may take to exit after SIGTERM (it stops within 10 s).
const STOP_WAIT: Duration = Duration::from_secs(12);

/// A running `bub` process (`message`, `idle`); its stderr (the log) and stdout (what a person
/// reads) are collected as they are written.
pub struct Daemon {
    pub child: tokio::process::Child,
    log: tokio::sync::watch::Receiver<String>,
    out: tokio::sync::watch::Receiver<String>,
    reader: tokio::task::JoinHandle<()>,
}

/// Collects what `pipe` carries, line by line, until it closes.
fn collect(
    pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> (
    tokio::sync::watch::Receiver<String>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, text) = tokio::sync::watch::channel(String::new());
    let reader = tokio::spawn(async move {
        let mut pipe = tokio::io::BufReader::new(pipe);
        let mut line = Vec::new();
        while pipe.read_until(b'\n', &mut line).await.is_ok_and(|n| n > 0) {
            tx.send_modify(|text| text.push_str(&String::from_utf8_lossy(&line)));
            line.clear();
        }
    });
    (text, reader)
}

/// Waits until `text` contains `needle`; fails the test after [`WAIT`], naming `pipe`.
async fn wait_in(text: &tokio::sync::watch::Receiver<String>, pipe: &str, needle: &str) {
    let mut waiting = text.clone();
    let found = tokio::time::timeout(WAIT, waiting.wait_for(|t| t.contains(needle))).await;
    let all = || text.borrow().clone();
    match found.map(|r| r.map(drop)) {
        Ok(Ok(_)) => {}
        Ok(Err(_)) => panic!("{pipe} closed without {needle:?}:\n{}", all()),
        Err(_) => panic!("no {needle:?} within {WAIT:?} on {pipe}:\n{}", all()),
    }
}

impl Daemon {
    /// Starts `cmd` with stdout and stderr collected.
    pub fn spawn(mut cmd: tokio::process::Command) -> Self {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let (log, reader) = collect(child.stderr.take().expect("stderr is piped"));
        // Read until it closes (a full pipe would hold the process); not waited for.
        let (out, _) = collect(child.stdout.take().expect("stdout is piped"));
        Self {
            child,
            log,
            out,
            reader,
        }
    }

    /// What the process has written to stderr so far.
    pub fn log(&self) -> String {
        self.log.borrow().clone()
    }

    /// What the process has written to stdout so far.
    pub fn stdout(&self) -> String {
        self.out.borrow().clone()
    }

    /// Waits until the log contains `needle`; fails the test after [`WAIT`].
    pub async fn wait_for_log(&self, needle: &str) {
        wait_in(&self.log, "stderr", needle).await;
    }

    /// Waits until stdout contains `needle`; fails the test after [`WAIT`].
    pub async fn wait_for_stdout(&self, needle: &str) {
        wait_in(&self.out, "stdout", needle).await;
    }

    /// Sends SIGTERM, waits for the exit status (bounded) and returns everything the daemon
    /// wrote to stderr (its log).
    pub async fn stop_with_log(self) -> (ExitStatus, String) {
        self.signal(libc::SIGTERM);
        self.exit_within(STOP_WAIT).await
    }

    /// Sends SIGTERM and waits for the exit status (bounded).
    pub async fn stop(self) -> ExitStatus {
        self.stop_with_log().await.0
    }

    /// Waits (bounded) for the process to exit by itself; returns its status and log.
    pub async fn exit_with_log(self) -> (ExitStatus, String) {
        self.exit_within(WAIT).await
    }

    /// SIGKILL: the process dies at once, with whatever it had in flight.
    pub async fn kill(self) {
        self.signal(libc::SIGKILL);
        self.exit_within(Duration::from_secs(5)).await;
    }

    fn signal(&self, signal: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(pid, signal) };
    }

    async fn exit_within(mut self, within: Duration) -> (ExitStatus, String) {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the process did not exit within {within:?}"))
            .unwrap();
        // The rest of the log, up to the end of the pipe (bounded: a leftover grandchild could
        // hold it open).
        let _ = tokio::time::timeout(WAIT, &mut self.reader).await;
        (status, self.log())
    }
}

pub struct Env {
    pub _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub workspace: PathBuf,
    pub model: FakeOpenAi,
    pub telegram: FakeTelegram,
    pub vars: Vec<(String, String)>,
}

impl Env {
    /// The environment of `bub message`: the fake model and the fake Telegram, debounce 0,
    /// info logs. Everyone is admitted; the users the tests run comma commands as (1, 7, 9 and
    /// 42) are owners, the rest are guests. Tests of access control set their own lists.
    pub async fn new() -> Self {
        let mut env = Self::cli().await;
        let telegram = env.telegram.api_base();
        for (key, value) in [
            ("BUB_TELEGRAM_ENABLED", "true"),
            ("BUB_TELEGRAM_TOKEN", fake_telegram::TOKEN),
            ("BUB_TELEGRAM_API_BASE", &telegram),
            ("BUB_TELEGRAM_ALLOW_FROM", "*"),
            ("BUB_TELEGRAM_OWNERS", "1,7,9,42"),
            ("BUB_DISCORD_ALLOW_FROM", "*"),
            ("BUB_DISCORD_OWNERS", "42"),
            ("BUB_MESSAGE_DEBOUNCE_SECONDS", "0"),
            ("BUB_MESSAGE_DELAY_SECONDS", "0"),
            ("BUB_LOG_LEVEL", "info"),
        ] {
            env.set(key, value);
        }
        env
    }

    /// The environment of `bub run`: the fake model, no channel configured (the fake Telegram
    /// runs, nothing points at it), warnings only on stderr.
    pub async fn cli() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        let model = fake_openai::start().await;
        let telegram = fake_telegram::start().await;
        let mut env = Self {
            vars: Vec::new(),
            _dir: dir,
            home,
            workspace,
            model,
            telegram,
        };
        let (home, model) = (env.home.display().to_string(), env.model.base_url());
        env.set("BUB_HOME", &home);
        env.set("BUB_MODEL", "openai:test-model");
        env.set("BUB_API_KEY", "sk-test-secret");
        env.set("BUB_API_BASE", &model);
        env.set("BUB_LOG_LEVEL", "warn");
        env
    }

    /// Sets a variable for the commands made from now on (over an earlier value).
    pub fn set(&mut self, key: &str, value: &str) {
        self.vars.push((key.into(), value.into()));
    }

    /// `bub message` with the environment.
    pub fn start(&self) -> Daemon {
        self.spawn(&["message"])
    }

    /// The `bub` binary with this environment, in the workspace, stdin closed: a blocking
    /// command (e.g. for a poll); [`Self::command`] for tokio.
    pub fn std_command(&self, args: &[&str]) -> std::process::Command {
        // `BUB_BENCH_BINARY`: another `bub` (a release build), for the measurements.
        let binary = std::env::var_os("BUB_BENCH_BINARY");
        let binary = binary
            .as_deref()
            .unwrap_or(env!("CARGO_BIN_EXE_bub").as_ref());
        let mut cmd = std::process::Command::new(binary);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.join("user"))
            .env("NO_PROXY", "127.0.0.1")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.workspace)
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// [`Self::std_command`] for tokio, killed when dropped.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::from(self.std_command(args));
        cmd.kill_on_drop(true);
        cmd
    }

    /// Starts a long-running `bub` command (`message`, `idle`).
    pub fn spawn(&self, args: &[&str]) -> Daemon {
        Daemon::spawn(self.command(args))
    }

    /// Runs a `bub` command to completion (bounded) and returns its output.
    pub async fn run(&self, args: &[&str]) -> Output {
        let out = self.command(args).output();
        tokio::time::timeout(WAIT, out)
            .await
            .expect("bub finished in time")
            .unwrap()
    }

    /// Runs a `bub` command with `input` on its stdin (then closed), bounded.
    pub async fn run_with_input(&self, args: &[&str], input: &str) -> Output {
        with_input(self.command(args), input).await
    }

    /// The last message of every model request; of a user message what was written (without
    /// the time and the notes Bub adds: [`super::prompt_cache::said`]).
    pub fn model_prompts(&self) -> Vec<String> {
        self.model
            .requests()
            .iter()
            .map(|r| {
                let messages = r["messages"].as_array().unwrap();
                let content = messages.last().unwrap()["content"].as_str();
                super::prompt_cache::said(content.unwrap_or_default())
            })
            .collect()
    }

    /// `user` says `text` in Telegram chat `chat` (a group when negative); the answer: the
    /// `n`th message the bot sent (1-based), once it was sent.
    pub async fn say(&self, chat: i64, user: i64, text: &str, n: usize) -> String {
        let message = match chat < 0 {
            true => fake_telegram::group_text(chat, user, text),
            false => fake_telegram::private_text(chat, user, text),
        };
        self.telegram.push_message(message);
        let sent = self.telegram.wait_for_calls("sendMessage", n, WAIT).await;
        texts(&sent)[n - 1].clone()
    }

    /// The texts Bub sent to Telegram chat `chat`, in order.
    pub fn sent_to(&self, chat: i64) -> Vec<String> {
        let calls = self.telegram.calls_of("sendMessage");
        let to = calls.iter().filter(|c| c.body["chat_id"] == chat);
        texts(&to.cloned().collect::<Vec<_>>())
    }

    /// Waits (bounded) until Telegram chat `chat` got `n` messages; returns all it got.
    pub async fn wait_for_sent_to(&self, chat: i64, n: usize) -> Vec<String> {
        let what = format!("{n} message(s) to chat {chat}");
        super::wait::wait_until(WAIT, &what, || self.sent_to(chat).len() >= n).await;
        self.sent_to(chat)
    }

    /// Waits (bounded) until `text` is in the fake Telegram chat: sent, or a live message
    /// edited to it.
    pub async fn wait_for_chat_text(&self, text: &str) {
        super::wait::wait_until(super::wait::WAIT, &format!("{text:?} in the chat"), || {
            let calls = [
                self.telegram.calls_of("sendMessage"),
                self.telegram.calls_of("editMessageText"),
            ];
            calls.iter().flatten().any(|c| c.body["text"] == text)
        })
        .await;
    }

    /// The files in BUB_HOME's `tapes/`, sorted (none before the first tape).
    pub fn tape_paths(&self) -> Vec<PathBuf> {
        let Ok(dir) = std::fs::read_dir(self.home.join("tapes")) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = dir.map(|e| e.unwrap().path()).collect();
        paths.sort();
        paths
    }

    /// Every tape, joined (bytes that are not UTF-8, as a write cut short leaves them,
    /// replaced).
    pub fn tape_text(&self) -> String {
        let read =
            |path: &PathBuf| String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
        self.tape_paths().iter().map(read).collect()
    }

    /// Every entry of every tape (each line must be JSON: read when no process writes).
    pub fn tape_entries(&self) -> Vec<Value> {
        self.tape_text()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// The inbox journal, `inbox.jsonl` (empty before the first message; bytes that are not
    /// UTF-8 replaced).
    pub fn inbox_text(&self) -> String {
        let journal = std::fs::read(self.home.join("inbox.jsonl")).unwrap_or_default();
        String::from_utf8_lossy(&journal).into_owned()
    }

    /// `jobs.json` (`{"jobs": []}` before the first job).
    pub fn jobs(&self) -> Value {
        let text = std::fs::read_to_string(self.home.join("jobs.json")).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(json!({"jobs": []}))
    }
}

/// The 8-character code in a pairing message.
pub fn code_in(text: &str) -> String {
    text.split_whitespace()
        .find(|w| {
            w.len() == 8
                && w.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        })
        .unwrap_or_else(|| panic!("no code in {text:?}"))
        .to_owned()
}

/// The texts of Telegram send calls.
pub fn texts(calls: &[super::fake_telegram::Call]) -> Vec<String> {
    calls
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// What a finished command printed on stdout.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a finished command printed on stderr.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that a finished command exited with `code` and has `needle` on stderr.
pub fn assert_exit(out: &Output, code: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "no {needle:?} in stderr: {err}");
}

/// Makes the process `cmd` starts unable to grow a file beyond `bytes`: such writes fail with
/// `EFBIG`, even for root (`bub` ignores `SIGXFSZ`, which would kill it otherwise). Only the
/// soft limit is set, so it can be raised again (`prlimit`).
pub fn limit_file_size(cmd: &mut tokio::process::Command, bytes: u64) {
    // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs `cmd` with `input` on its stdin (then closed) and its output collected; fails the test
/// after [`WAIT`].
pub async fn with_input(mut cmd: tokio::process::Command, input: &str) -> Output {
    use tokio::io::AsyncWriteExt;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("bub finished in time")
        .unwrap()
}
