//! A `bub` process environment for end-to-end tests: a temp BUB_HOME and workspace, the fake
//! model and the fake Telegram, and helpers to run or spawn the real binary against them.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use super::fake_openai::{self, FakeOpenAi};
use super::fake_telegram::{self, FakeTelegram};

pub const WAIT: Duration = Duration::from_secs(20);

pub struct Daemon {
    pub child: tokio::process::Child,
}

impl Daemon {
    /// Sends SIGTERM, waits for the exit status (bounded) and returns everything the daemon
    /// wrote to stderr (its log).
    pub async fn stop_with_log(mut self) -> (std::process::ExitStatus, String) {
        use tokio::io::AsyncReadExt;
        let mut stderr = self.child.stderr.take().expect("stderr is piped");
        let log = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        let status = self.stop().await;
        (status, log.await.unwrap())
    }

    /// SIGKILL: the process dies at once, with whatever it had in flight.
    pub async fn kill(mut self) {
        self.child.start_kill().unwrap();
        tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .expect("killed")
            .unwrap();
    }

    /// Sends SIGTERM and waits for the exit status (bounded).
    pub async fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        tokio::time::timeout(Duration::from_secs(12), self.child.wait())
            .await
            .expect("stopped within 10 s of SIGTERM")
            .unwrap()
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
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        let model = fake_openai::start().await;
        let telegram = fake_telegram::start().await;
        let vars = [
            ("BUB_HOME", home.to_string_lossy().to_string()),
            ("BUB_MODEL", "openai:test-model".into()),
            ("BUB_API_KEY", "sk-test-secret".into()),
            ("BUB_API_BASE", model.base_url()),
            ("BUB_TELEGRAM_ENABLED", "true".into()),
            ("BUB_TELEGRAM_TOKEN", fake_telegram::TOKEN.into()),
            ("BUB_TELEGRAM_API_BASE", telegram.api_base()),
            // Everyone is admitted; the users the tests run comma commands as are owners, the
            // rest are guests. Tests of access control set their own lists.
            ("BUB_TELEGRAM_ALLOW_FROM", "*".into()),
            ("BUB_TELEGRAM_OWNERS", "1,7,9,42".into()),
            ("BUB_DISCORD_ALLOW_FROM", "*".into()),
            ("BUB_DISCORD_OWNERS", "42".into()),
            ("BUB_MESSAGE_DEBOUNCE_SECONDS", "0".into()),
            ("BUB_MESSAGE_DELAY_SECONDS", "0".into()),
            ("BUB_LOG_LEVEL", "info".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Self {
            _dir: dir,
            home,
            workspace,
            model,
            telegram,
            vars,
        }
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.vars.push((key.into(), value.into()));
    }

    /// `bub message` with the environment.
    pub fn start(&self) -> Daemon {
        self.spawn(&["message"])
    }

    /// The `bub` binary with this environment, in the workspace (stdout discarded, stderr piped).
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_bub"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.join("user"))
            .env("NO_PROXY", "127.0.0.1")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.workspace)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Starts a long-running `bub` command (`message`, `idle`).
    pub fn spawn(&self, args: &[&str]) -> Daemon {
        let mut cmd = self.command(args);
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        Daemon {
            child: cmd.spawn().unwrap(),
        }
    }

    /// Runs a `bub` command to completion (bounded) and returns its output.
    pub async fn run(&self, args: &[&str]) -> std::process::Output {
        let out = self.command(args).output();
        tokio::time::timeout(WAIT, out)
            .await
            .expect("bub finished in time")
            .unwrap()
    }

    /// The last user message of every model request.
    pub fn model_prompts(&self) -> Vec<String> {
        self.model
            .requests()
            .iter()
            .map(|r| {
                let messages = r["messages"].as_array().unwrap();
                messages.last().unwrap()["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }
}

pub fn texts(calls: &[super::fake_telegram::Call]) -> Vec<String> {
    calls
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect()
}
