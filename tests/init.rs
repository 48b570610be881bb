//! `bub init` leaves a working setup: under a pseudo-terminal (expectrl, as a person types it)
//! it refuses an empty key for a hosted provider, hides what is typed for the key and the
//! token, tests the key with one request to the fake model and the token with `getMe` on the
//! fake Telegram, creates the workspace and writes `workspace_path`; the file it writes is what
//! `bub run` then uses. Through stdin: an unknown provider's server needs no key, a rejected key
//! is asked again, an unreachable Telegram is "not checked", a missing required key writes
//! nothing. Every wait is bounded by [`WAIT`].

use crate::support;

use std::path::PathBuf;
use std::process::Output;

use expectrl::{Eof, Expect, Session};

use support::bub_env::{Env, stderr, stdout, with_input};
use support::fake_telegram;
use support::wait::WAIT;

/// A user with a fresh home (no `BUB_HOME`: `~/.bub`) and a directory elsewhere to run from;
/// `vars` are the rest of the environment (the fakes' base URLs).
struct User {
    _dir: tempfile::TempDir,
    home: PathBuf,
    elsewhere: PathBuf,
    vars: Vec<(String, String)>,
}

impl User {
    fn new(vars: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (home, elsewhere) = (root.join("user"), root.join("elsewhere"));
        for path in [&home, &elsewhere] {
            std::fs::create_dir_all(path).unwrap();
        }
        let vars = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self {
            _dir: dir,
            home,
            elsewhere,
            vars,
        }
    }

    fn config(&self) -> PathBuf {
        self.home.join(".bub/config.toml")
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bub"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("NO_PROXY", "127.0.0.1")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.elsewhere)
            .args(args);
        cmd
    }

    /// `bub ARGS` with `input` on stdin (then closed), bounded.
    async fn run(&self, args: &[&str], input: &str) -> Output {
        with_input(self.command(args).into(), input).await
    }
}

/// `bub init` on a pseudo-terminal and what it printed so far.
struct Terminal {
    session: expectrl::session::OsSession,
    screen: String,
}

impl Terminal {
    fn start(user: &User) -> Self {
        let mut cmd = user.command(&["init"]);
        cmd.env("TERM", "xterm");
        let mut session = Session::spawn(cmd).expect("bub init on a pty");
        session.set_expect_timeout(Some(WAIT));
        Self {
            session,
            screen: String::new(),
        }
    }

    /// Waits (at most [`WAIT`]) for `needle` after the previous match; returns what came since.
    fn expect(&mut self, needle: &str) -> String {
        let found = self.session.expect(needle).unwrap_or_else(|e| {
            panic!(
                "{needle:?} not shown within {WAIT:?} ({e}); the screen:\n{}",
                self.screen
            )
        });
        let seen = String::from_utf8_lossy(found.as_bytes()).into_owned();
        self.screen.push_str(&seen);
        seen
    }

    fn answer(&mut self, question: &str, line: &str) {
        self.expect(question);
        self.session.send_line(line).unwrap();
    }

    /// The rest of the screen up to the end of the process.
    fn finish(mut self) -> String {
        if let Ok(rest) = self.session.expect(Eof) {
            self.screen
                .push_str(&String::from_utf8_lossy(rest.before()));
        }
        self.screen
    }
}

const KEY: &str = "sk-or-test-key-0123456789";

#[tokio::test(flavor = "multi_thread")]
async fn init_on_a_terminal_checks_the_key_and_token_and_leaves_a_working_setup() {
    let env = Env::cli().await;
    let model = env.model.base_url();
    let telegram = env.telegram.api_base();
    // The fakes stand in for openrouter.ai and api.telegram.org, as the environment's base
    // URLs do for `bub run`.
    let user = User::new(&[
        ("BUB_API_BASE", &model),
        ("BUB_TELEGRAM_API_BASE", &telegram),
    ]);
    env.model.push_text("OK");
    let term = Terminal::start(&user);
    let screen = tokio::task::spawn_blocking(move || {
        let mut t = term;
        t.answer("Model, as provider:model", "openrouter:test-model");
        // A hosted provider: Enter is refused, the key asked again.
        t.answer("API key for openrouter (required): ", "");
        t.expect("openrouter needs a key");
        t.answer("API key for openrouter (required): ", KEY);
        t.answer(
            &format!("Test openrouter:test-model now with one short request to {model}? [Y/n] "),
            "",
        );
        t.expect("The model answered: OK");
        t.answer("Telegram bot token from @BotFather: ", "hello");
        t.expect("does not look like a telegram bot token");
        t.answer("Telegram bot token from @BotFather: ", fake_telegram::TOKEN);
        t.answer("Check the token with Telegram (getMe)? [Y/n] ", "y");
        t.expect(&format!(
            "Telegram knows this bot as @{}.",
            fake_telegram::BOT_USERNAME
        ));
        t.answer("Workspace, the folder Bub works in [~/bub-work]: ", "");
        t.expect("Next:");
        t.expect("bub chat");
        t.expect("bub message");
        t.finish()
    })
    .await
    .unwrap();
    assert!(
        !screen.contains(KEY) && !screen.contains(fake_telegram::TOKEN),
        "the key and the token are not echoed: {screen}"
    );

    // The key crossed the wire once, in a tiny request; the token once, in getMe.
    let recorded = env.model.recorded();
    assert_eq!(recorded.len(), 1, "one request");
    assert_eq!(
        recorded[0].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(recorded[0].body["model"], "test-model");
    assert!(recorded[0].body["max_tokens"].as_u64().unwrap() <= 16);
    let get_me = env.telegram.calls_of("getMe");
    assert_eq!(get_me.len(), 1);
    assert_eq!(get_me[0].token, fake_telegram::TOKEN);

    let workspace = user.home.join("bub-work");
    assert!(workspace.is_dir(), "the workspace was created");
    let text = std::fs::read_to_string(user.config()).unwrap();
    for line in [
        "model = \"openrouter:test-model\"".to_owned(),
        format!("api_key = \"{KEY}\""),
        "telegram_enabled = true".to_owned(),
        format!("telegram_token = \"{}\"", fake_telegram::TOKEN),
        format!("workspace_path = \"{}\"", workspace.display()),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in {text}");
    }

    // What `bub run` does with it, from another directory: the key, the model, the workspace.
    env.model.push_text("hello from init");
    let out = user.run(&["run", "hi"], "").await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "hello from init");
    let recorded = env.model.recorded();
    assert_eq!(recorded[1].body["model"], "test-model");
    assert_eq!(
        recorded[1].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    let out = user.run(&["run", ",pwd"], "").await;
    assert_eq!(stdout(&out).trim(), workspace.display().to_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn init_through_stdin_asks_again_and_is_honest_offline() {
    let env = Env::cli().await;
    let model = env.model.base_url();
    // Nothing listens there: Telegram cannot be reached.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let user = User::new(&[("BUB_TELEGRAM_API_BASE", &closed)]);
    let file = user.config();
    let work = user.home.join("projects/bub");

    // An unknown provider is asked for its server; on this machine it needs no key. A bad
    // model is asked again; the check can be declined; Telegram is not reachable.
    let answers = format!(
        "nocolon\nlocal:test-model\n{model}\n\nn\n{}\n\n~/projects/bub\n",
        fake_telegram::TOKEN
    );
    let out = user.run(&["init"], &answers).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let said = stdout(&out);
    assert_eq!(
        said.matches("invalid model \"nocolon\"").count(),
        1,
        "{said}"
    );
    assert!(said.contains("Model not checked."), "{said}");
    assert!(
        said.contains("Could not reach Telegram, not checked"),
        "{said}"
    );
    assert!(
        said.contains("bub chat") && said.contains("bub message"),
        "{said}"
    );
    assert_eq!(env.model.request_count(), 0, "the check was declined");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("model = \"local:test-model\"")
            && text.contains(&format!("api_base = \"{model}\""))
            && !text.contains("api_key")
            && text.contains(&format!("workspace_path = \"{}\"", work.display())),
        "{text}"
    );
    assert!(work.is_dir());
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    // Never replaced without a yes.
    let out = user.run(&["init"], "\nopenai:gpt-4o-mini\n").await;
    assert!(stdout(&out).contains("Left as it is."), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

    // A key the provider rejects is asked again (the fake stands in for api.openai.com).
    let user = User::new(&[("BUB_API_BASE", &model)]);
    env.model.push_raw(
        401,
        r#"{"error":{"message":"Incorrect API key provided"}}"#.into(),
        vec![],
    );
    env.model.push_text("OK");
    let answers = "openai:gpt-test\nsk-wrong-key-000\n\nsk-right-key-111\n\n\n\n";
    let out = user.run(&["init"], answers).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("The key was not accepted"), "{said}");
    assert!(said.contains("The model answered: OK"), "{said}");
    assert!(
        !said.contains("sk-wrong") && !said.contains("sk-right"),
        "{said}"
    );
    let text = std::fs::read_to_string(user.config()).unwrap();
    assert!(
        text.contains("api_key = \"sk-right-key-111\"") && !text.contains("sk-wrong"),
        "{text}"
    );
    // No token: the second command is a question, not the daemon.
    assert!(said.contains("bub run \"hello\""), "{said}");

    // A hosted provider without a key at the end of the input: nothing is written.
    let user = User::new(&[]);
    let out = user.run(&["init"], "anthropic:claude-test\n").await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("without an API key for anthropic: nothing was written"),
        "{}",
        stderr(&out)
    );
    assert!(!user.config().exists());
}
