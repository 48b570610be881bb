//! What `bub` checks and reads at start, through the real binary: a missing model key stops
//! the commands that call the model (exit 2, the variable named, nothing written); a `BUB_*`
//! name Bub does not know gets one warning; `~/.bub/config.toml` is read from any directory;
//! `bub help env` and `docs/configuration.md` show the same variables; a bot token of the wrong
//! shape, or one the platform rejects (Telegram's `getMe` 401/404, Discord's 401 or gateway
//! close 4004), stops `bub message` with exit 2 and the variable named, never the token; a
//! typo in `config.toml` is named with the nearest setting.

use crate::support;

use std::path::Path;
use std::process::Output;

use support::bub_env::{Env, assert_exit, stderr, stdout, with_input};
use support::{fake_discord, fake_telegram};

const OPENAI_KEY_VARS: &str = "BUB_API_KEY (or LLM_API_KEY / OPENROUTER_API_KEY): not set";

/// `Env::cli()` without a key, the model a hosted one (so it needs a key).
async fn without_key() -> Env {
    let mut env = Env::cli().await;
    env.set("BUB_API_KEY", "");
    env.set("BUB_API_BASE", "");
    env.set("BUB_MODEL", "openrouter:qwen/qwen3-coder-next");
    env
}

/// `bub ARGS` as a user whose home is `user`, in `cwd`, with nothing but PATH from the test's
/// environment, `input` on stdin.
async fn bub_as(user: &Path, cwd: &Path, args: &[&str], input: &str) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_bub"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", user)
        .env("NO_PROXY", "127.0.0.1")
        .current_dir(cwd)
        .args(args);
    with_input(cmd, input).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_model_key_stops_every_command_that_calls_the_model() {
    let env = without_key().await;
    for args in [
        &["run", "hi"][..],
        &["chat"],
        &["message"],
        &["idle"],
        &["run", ","],
    ] {
        let out = env.run(args).await;
        assert_exit(&out, 2, OPENAI_KEY_VARS);
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.contains("the model openrouter:qwen/qwen3-coder-next needs a key")
                && err.contains(&env.home.join("config.toml").display().to_string()),
            "{args:?}: {err}"
        );
        assert!(stdout(&out).is_empty(), "{args:?}");
    }
    assert!(!env.home.join("tapes").exists(), "nothing was written");
    assert!(
        !env.home.join("daemon.lock").exists(),
        "the daemon did not start"
    );
    assert_eq!(env.model.request_count(), 0);

    // A comma command needs no model.
    let out = env.run(&["run", ",help"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(stdout(&out).contains("Commands start with ','"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fallback_model_without_its_key_is_named() {
    let mut env = without_key().await;
    env.set("BUB_MODEL", "ollama:llama3");
    env.set(
        "BUB_FALLBACK_MODELS",
        "anthropic:claude-sonnet-4-5,openai:gpt-4o-mini",
    );
    let out = env.run(&["run", "hi"]).await;
    assert_exit(
        &out,
        2,
        "BUB_ANTHROPIC_API_KEY (or ANTHROPIC_API_KEY), BUB_API_KEY (or LLM_API_KEY / OPENROUTER_API_KEY): not set",
    );
    let err = stderr(&out);
    assert!(
        err.contains(
            "the models anthropic:claude-sonnet-4-5, openai:gpt-4o-mini need keys; put them in"
        ) && !err.contains("ollama"),
        "{err}"
    );
    assert!(!env.home.join("tapes").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_on_this_machine_needs_no_key() {
    let mut env = Env::cli().await;
    env.set("BUB_API_KEY", "");
    env.model.push_text("hello from llama.cpp");
    let out = env.run(&["run", "hi"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "hello from llama.cpp");
    let recorded = env.model.recorded();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].authorization, None, "no key was sent");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_bub_variable_warns_once_with_a_suggestion() {
    let mut env = Env::cli().await;
    env.set("BUB_TELEGRAM_TOKNE", "123:abc");
    // Known names that are not settings: no warning.
    env.set("BUB_SESSION_ID", "cli");
    env.set("BUB_IDLE_STOP_TIMEOUT", "5");
    // The workspace is the CWD: its .env is read as both; the misspelling is in it too.
    std::fs::write(
        env.workspace.join(".env"),
        "BUB_TELEGRAM_TOKNE=456:def\nBUB_MAX_STEPS=5\n",
    )
    .unwrap();
    let out = env.run(&["run", ",help"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(
        warnings,
        [
            "bub: warning: BUB_TELEGRAM_TOKNE is not a Bub variable (did you mean BUB_TELEGRAM_TOKEN?)"
        ],
        "{err}"
    );
    assert!(
        !err.contains("123:abc") && !err.contains("456:def"),
        "{err}"
    );

    // Only known variables: no warning at all.
    let clean = Env::cli().await;
    let out = clean.run(&["run", ",help"]).await;
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_config_file_is_read_from_any_directory() {
    let env = Env::cli().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (user, elsewhere, work) = (root.join("user"), root.join("elsewhere"), root.join("work"));
    for path in [&user.join(".bub"), &elsewhere, &work] {
        std::fs::create_dir_all(path).unwrap();
    }
    std::fs::write(
        user.join(".bub/config.toml"),
        format!(
            "model = \"openai:from-config\"\napi_key = \"sk-from-config\"\napi_base = \"{}\"\n\
             workspace_path = \"{}\"\n",
            env.model.base_url(),
            work.display()
        ),
    )
    .unwrap();
    let bub = |args: &'static [&'static str]| bub_as(&user, &elsewhere, args, "");
    env.model.push_text("configured");
    let out = bub(&["run", "hi"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "configured");
    let recorded = env.model.recorded();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].body["model"], "from-config");
    assert_eq!(
        recorded[0].authorization.as_deref(),
        Some("Bearer sk-from-config")
    );
    assert!(user.join(".bub/tapes").is_dir(), "the tape is in ~/.bub");

    // BUB_WORKSPACE_PATH in the file is the workspace, whatever the CWD.
    let out = bub(&["run", ",pwd"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), work.display().to_string());
    // -w still wins.
    let w = elsewhere.display().to_string();
    let out = bub_as(&user, &elsewhere, &["-w", &w, "run", ",pwd"], "").await;
    assert_eq!(stdout(&out).trim(), elsewhere.display().to_string());
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_workspace_path_is_a_configuration_error() {
    let mut env = Env::cli().await;
    env.set("BUB_WORKSPACE_PATH", "/nonexistent/bub-work");
    let out = env.run(&["run", ",pwd"]).await;
    assert_exit(
        &out,
        2,
        "BUB_WORKSPACE_PATH: directory does not exist: /nonexistent/bub-work",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn help_shows_commands_and_every_variable() {
    let env = Env::cli().await;
    let out = env.run(&["--help"]).await;
    let help = stdout(&out);
    assert!(help.contains("bub help env"), "{help}");
    assert!(
        !help.contains("re-implementation"),
        "it says what Bub is: {help}"
    );
    // Every `bub help …` the help shows works.
    let examples: Vec<&str> = help
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| quoted.starts_with("bub help "))
        .collect();
    assert!(examples.len() >= 3, "{examples:?}");
    for example in examples {
        let args: Vec<&str> = example.split_whitespace().skip(1).collect();
        let out = env.run(&args).await;
        assert!(out.status.success(), "{example}: {}", stderr(&out));
    }
    let out = env.run(&["help", "run"]).await;
    assert!(out.status.success());
    assert!(stdout(&out).contains("Usage: bub run"), "{}", stdout(&out));
    let out = env.run(&["help", "jobs", "list"]).await;
    assert!(
        stdout(&out).contains("Usage: bub jobs list"),
        "{}",
        stdout(&out)
    );
    assert_exit(&env.run(&["help", "nope"]).await, 2, "no command \"nope\"");

    let out = env.run(&["help", "env"]).await;
    assert!(out.status.success());
    let text = stdout(&out);
    for needle in [
        "BUB_MODEL  [default: openrouter:qwen/qwen3-coder-next]",
        "BUB_TELEGRAM_TOKEN  [default: (none)]",
        "BUB_LOG_FORMAT  [default: text]",
    ] {
        assert!(text.contains(needle), "{needle} in {text}");
    }
}

/// docs/configuration.md holds `bub help env --markdown` between its markers.
#[tokio::test(flavor = "multi_thread")]
async fn the_documented_variables_are_bub_help_env() {
    let env = Env::cli().await;
    let out = env.run(&["help", "env", "--markdown"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let doc = include_str!("../docs/configuration.md");
    let begin = "<!-- begin: bub help env --markdown -->";
    let end = "<!-- end: bub help env --markdown -->";
    let table = doc
        .split_once(begin)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(table, _)| table.trim())
        .expect("the markers in docs/configuration.md");
    assert!(
        table == stdout(&out).trim(),
        "docs/configuration.md is out of date: replace its table with \
         `cargo run -- help env --markdown`"
    );
    assert!(table.contains("| `BUB_DISCORD_ALLOW_CHANNELS` |"));
}

/// `bub message` ran and stopped by itself: its exit code and log.
async fn message_exit(env: &Env) -> (Option<i32>, String) {
    let (status, log) = env.start().exit_with_log().await;
    (status.code(), log)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_telegram_token_telegram_rejects_is_a_configuration_error() {
    let env = Env::new().await;
    // getMe 401 Unauthorized: a token of the right shape that is no bot's.
    env.telegram.accept_only_token("999:other");
    let (code, log) = message_exit(&env).await;
    assert_eq!(code, Some(2), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("bub: ")
            && last.contains("BUB_TELEGRAM_TOKEN")
            && last.contains("rejected the bot token"),
        "{log}"
    );
    assert!(
        !log.contains(fake_telegram::TOKEN),
        "the token never appears: {log}"
    );
    assert_eq!(env.model.request_count(), 0);

    // 404 Not Found: what Telegram answers for a token that is no bot's path.
    let env = Env::new().await;
    let not_found = serde_json::json!({"ok": false, "error_code": 404, "description": "Not Found"});
    env.telegram.fail_next("getMe", 404, not_found);
    let (code, log) = message_exit(&env).await;
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("BUB_TELEGRAM_TOKEN"), "{log}");
    assert!(!log.contains(fake_telegram::TOKEN), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_down_at_start_is_not_a_configuration_error() {
    let env = Env::new().await;
    let down = serde_json::json!({"ok": false, "error_code": 502, "description": "Bad Gateway"});
    env.telegram.fail_next("getMe", 502, down);
    let (code, log) = message_exit(&env).await;
    // Exit 1: a supervisor restarts it (exit 2 would hold it).
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("getMe failed") && !log.contains("BUB_TELEGRAM_TOKEN"),
        "{log}"
    );
}

/// `Env::new()` serving Discord (the fake) instead of Telegram, with a token of the right shape.
async fn on_discord(discord: &fake_discord::FakeDiscord) -> Env {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ENABLED", "false");
    env.set("BUB_DISCORD_ENABLED", "true");
    env.set("BUB_DISCORD_TOKEN", DISCORD_TOKEN);
    env.set("BUB_DISCORD_API_BASE", &discord.api_base());
    env
}

const DISCORD_TOKEN: &str = "MTIzNDU2.GhIjKl.secret-discord-token";

#[tokio::test(flavor = "multi_thread")]
async fn a_discord_token_discord_rejects_is_a_configuration_error() {
    // The gateway closes IDENTIFY with 4004 (authentication failed).
    let discord = fake_discord::start().await;
    discord.reject_identify(true);
    let env = on_discord(&discord).await;
    let (code, log) = message_exit(&env).await;
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("BUB_DISCORD_TOKEN") && log.contains("4004"),
        "{log}"
    );
    assert!(
        !log.contains(DISCORD_TOKEN),
        "the token never appears: {log}"
    );
    assert_eq!(discord.identifies().len(), 1, "the gateway was reached");

    // REST answers 401 first.
    let discord = fake_discord::start().await;
    discord.require_token("MTIz.other.token");
    let env = on_discord(&discord).await;
    let (code, log) = message_exit(&env).await;
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("BUB_DISCORD_TOKEN") && log.contains("401"),
        "{log}"
    );
    assert!(!log.contains(DISCORD_TOKEN), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_of_the_wrong_shape_stops_bub_before_any_request() {
    let discord = fake_discord::start().await;
    for (var, token) in [
        ("BUB_TELEGRAM_TOKEN", "hello"),
        ("BUB_TELEGRAM_TOKEN", "bot123:abc"),
        ("BUB_DISCORD_TOKEN", "hello-secret-token"),
        ("BUB_DISCORD_TOKEN", "a.b"),
    ] {
        let mut env = on_discord(&discord).await;
        let telegram = var == "BUB_TELEGRAM_TOKEN";
        env.set("BUB_TELEGRAM_ENABLED", &telegram.to_string());
        env.set("BUB_DISCORD_ENABLED", &(!telegram).to_string());
        env.set(var, token);
        for args in [
            &["message"][..],
            &["send", "telegram", "42", "hi"],
            &["run", "hi"],
        ] {
            let out = env.run(args).await;
            assert_exit(
                &out,
                2,
                &format!("configuration error: {var}: does not look like a"),
            );
            let err = stderr(&out);
            assert!(
                !err.contains(token),
                "{args:?}: the token is not shown: {err}"
            );
        }
        assert!(
            env.telegram.calls().is_empty(),
            "{token}: no request reached Telegram"
        );
        assert!(
            discord.requests().is_empty(),
            "{token}: no request reached Discord"
        );
        assert!(discord.identifies().is_empty());
        assert_eq!(env.model.request_count(), 0);
    }

    // From config.toml, the file is named.
    let mut env = Env::cli().await;
    std::fs::create_dir_all(&env.home).unwrap();
    let config = env.home.join("config.toml");
    std::fs::write(&config, "telegram_token = \"12345\"\n").unwrap();
    env.set("BUB_LOG_LEVEL", "warn");
    let out = env.run(&["run", ",help"]).await;
    assert_exit(
        &out,
        2,
        "BUB_TELEGRAM_TOKEN: does not look like a telegram bot token",
    );
    assert!(stderr(&out).contains(&config.display().to_string()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_typo_in_config_toml_names_the_nearest_setting() {
    let env = Env::cli().await;
    std::fs::create_dir_all(&env.home).unwrap();
    let config = env.home.join("config.toml");
    std::fs::write(&config, "max_step = 30\n").unwrap();
    let out = env.run(&["run", ",help"]).await;
    assert_exit(
        &out,
        2,
        &format!(
            "configuration error: max_step: unknown setting in {} (did you mean max_steps (BUB_MAX_STEPS)?)",
            config.display()
        ),
    );
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}
