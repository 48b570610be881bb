//! Tests of [`Settings::load`]: defaults, source precedence, value parsing, errors naming their
//! variable, `~` expansion and secret redaction. They use temp dirs and an explicit env map,
//! never the process environment.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::*;

/// A user HOME, a workspace and a separate CWD, all in one temp dir.
struct Fixture {
    _dir: TempDir,
    user_home: PathBuf,
    workspace: PathBuf,
    cwd: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (user_home, workspace, cwd) = (root.join("home"), root.join("ws"), root.join("cwd"));
        for path in [&user_home, &workspace, &cwd] {
            fs::create_dir_all(path).unwrap();
        }
        Self {
            _dir: dir,
            user_home,
            workspace,
            cwd,
        }
    }

    /// `~/.bub`, created.
    fn bub_home(&self) -> PathBuf {
        let home = self.user_home.join(".bub");
        fs::create_dir_all(&home).unwrap();
        home
    }

    fn opts(&self, env: &[(&str, &str)]) -> LoadOptions {
        let mut map: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        map.entry("HOME".into())
            .or_insert_with(|| self.user_home.display().to_string());
        LoadOptions {
            workspace: Some(self.workspace.clone()),
            config_file: None,
            env: Some(map),
            cwd: Some(self.cwd.clone()),
            overrides: Overrides::default(),
        }
    }

    fn load(&self, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::load(&self.opts(env))
    }
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
}

/// Loads with one variable set and returns the error, asserting it names `var`.
fn err_for(env: &[(&str, &str)], var: &str) -> ConfigError {
    let err = Fixture::new().load(env).unwrap_err();
    assert_eq!(err.var, var, "{err}");
    assert!(!err.to_string().contains('\n'), "one line: {err}");
    err
}

#[test]
fn defaults_match_the_reference() {
    let fx = Fixture::new();
    let s = fx.load(&[]).unwrap();
    assert_eq!(s.model.to_string(), "openrouter:qwen/qwen3-coder-next");
    assert_eq!(
        (s.provider(), s.model_id()),
        ("openrouter", "qwen/qwen3-coder-next")
    );
    assert_eq!(s.model_base_url(), "https://openrouter.ai/api/v1");
    assert_eq!(s.api_key, None);
    assert_eq!(s.api_base, None);
    assert_eq!(s.max_tokens, 8192);
    assert_eq!(s.model_timeout, Some(std::time::Duration::from_secs(90)));
    assert_eq!(s.system_prompt, "");
    assert_eq!(s.home, fx.user_home.join(".bub"));
    assert_eq!(s.workspace, fx.workspace);
    assert_eq!(s.tape_name, "bub");
    assert_eq!(s.max_steps, 20);
    assert_eq!((s.context_tokens, s.compact_percent), (32_000, 75));
    assert_eq!((s.learn_skills, s.learn_min_steps), (false, 3));
    assert_eq!(s.media.max_bytes, 20 * 1024 * 1024);
    assert_eq!(s.media.vision, crate::config::Vision::Auto);
    assert_eq!(s.media.transcribe_model, None);
    assert!(!s.proactive_response);
    assert_eq!(s.message_delay, std::time::Duration::from_secs(10));
    assert_eq!(s.message_debounce, std::time::Duration::from_secs(1));
    assert_eq!(s.active_time_window, std::time::Duration::from_secs(60));
    assert_eq!(s.ollama_api_key, None);
    assert_eq!(s.ollama_api_base, "https://ollama.com/api");
    assert_eq!(s.log_level, None);
    assert_eq!(s.log_format, LogFormat::Text);
    assert_eq!(s.fs_timeout, std::time::Duration::from_secs(10));
    assert_eq!(s.bash_max_timeout, std::time::Duration::from_secs(3_600));
    assert_eq!(s.max_concurrent_commands, 8);
    let t = &s.channels["telegram"];
    assert!(!t.enabled && t.token.is_none() && t.proxy.is_none());
    assert!(t.allow_from.is_empty() && t.allow_chats.is_empty());
    assert_eq!(t.api_base, "https://api.telegram.org");
    let d = &s.channels["discord"];
    assert!(!d.enabled && d.token.is_none() && d.proxy.is_none());
    assert!(d.allow_from.is_empty() && d.allow_chats.is_empty());
    assert_eq!(d.command_prefix, "!");
    assert_eq!(d.api_base, "https://discord.com");
}

#[test]
fn with_defaults_agrees_with_load() {
    let fx = Fixture::new();
    let loaded = fx.load(&[]).unwrap();
    let mut built = Settings::with_defaults(loaded.home.clone(), loaded.workspace.clone());
    built.user_home = loaded.user_home.clone(); // from HOME, not a setting
    assert_eq!(format!("{loaded:?}"), format!("{built:?}"));
}

#[test]
fn precedence_toml_then_workspace_env_then_cwd_env_then_environment() {
    let fx = Fixture::new();
    write(
        &fx.bub_home().join("config.toml"),
        "max_steps = 2\nmax_tokens = 2\ntape_name = \"toml\"\nsystem_prompt = \"from toml\"\n",
    );
    write(
        &fx.workspace.join(".env"),
        "BUB_MAX_STEPS=3\nBUB_MAX_TOKENS=3\nBUB_TAPE_NAME=ws\n",
    );
    write(&fx.cwd.join(".env"), "BUB_MAX_STEPS=4\nBUB_MAX_TOKENS=4\n");
    let s = fx.load(&[("BUB_MAX_STEPS", "5")]).unwrap();
    assert_eq!(s.max_steps, 5);
    assert_eq!(s.max_tokens, 4);
    assert_eq!(s.tape_name, "ws");
    assert_eq!(s.system_prompt, "from toml");
}

#[test]
fn the_model_says_where_it_was_set() {
    let fx = Fixture::new();
    assert_eq!(fx.load(&[]).unwrap().model_from, "the default");
    write(
        &fx.bub_home().join("config.toml"),
        "model = \"openai:gpt-4o\"\n",
    );
    let s = fx.load(&[]).unwrap();
    assert_eq!(
        (s.model.to_string(), s.model_from.as_str()),
        ("openai:gpt-4o".to_owned(), "BUB_MODEL in config.toml")
    );
    let s = fx.load(&[("BUB_MODEL", "openai:gpt-5")]).unwrap();
    assert_eq!(s.model_from, "BUB_MODEL");
}

#[test]
fn config_flag_overrides_home_config_but_not_dotenv() {
    let fx = Fixture::new();
    write(
        &fx.bub_home().join("config.toml"),
        "max_steps = 2\nmax_tokens = 2\ntape_name = \"home\"\n",
    );
    let extra = fx.cwd.join("extra.toml");
    write(&extra, "BUB_MAX_STEPS = 7\nmax_tokens = 7\n");
    write(&fx.cwd.join(".env"), "BUB_MAX_TOKENS=8\n");
    let mut opts = fx.opts(&[]);
    opts.config_file = Some(PathBuf::from("extra.toml")); // relative to cwd
    let s = Settings::load(&opts).unwrap();
    assert_eq!((s.max_steps, s.max_tokens), (7, 8));
    assert_eq!(s.tape_name, "home");
}

#[test]
fn bub_home_from_dotenv_and_tilde_expansion() {
    let fx = Fixture::new();
    let other = fx.user_home.join("data");
    fs::create_dir_all(&other).unwrap();
    write(&other.join("config.toml"), "tape_name = \"other\"\n");
    write(&fx.workspace.join(".env"), "BUB_HOME=~/data\n");
    let s = fx.load(&[]).unwrap();
    assert_eq!(s.home, other);
    assert_eq!(s.tape_name, "other");
    // A home that does not exist yet is still expanded and made absolute.
    let s = fx.load(&[("BUB_HOME", "~/not-yet")]).unwrap();
    assert_eq!(s.home, fx.user_home.join("not-yet"));
    let s = fx.load(&[("BUB_HOME", "rel")]).unwrap();
    assert_eq!(s.home, fx.cwd.join("rel"));
    // BUB_HOME/config.toml cannot move BUB_HOME.
    fs::remove_file(fx.workspace.join(".env")).unwrap();
    write(
        &fx.bub_home().join("config.toml"),
        "home = \"/elsewhere\"\n",
    );
    assert_eq!(fx.load(&[]).unwrap_err().var, "BUB_HOME");
}

#[test]
fn workspace_tilde_and_relative() {
    let fx = Fixture::new();
    fs::create_dir_all(fx.user_home.join("proj")).unwrap();
    let mut opts = fx.opts(&[]);
    opts.workspace = Some(PathBuf::from("~/proj"));
    assert_eq!(
        Settings::load(&opts).unwrap().workspace,
        fx.user_home.join("proj")
    );
    opts.workspace = Some(PathBuf::from("../ws"));
    assert_eq!(Settings::load(&opts).unwrap().workspace, fx.workspace);
    opts.workspace = None;
    assert_eq!(Settings::load(&opts).unwrap().workspace, fx.cwd);
}

#[test]
fn lists_json_comma_and_toml_arrays() {
    let fx = Fixture::new();
    let s = fx
        .load(&[
            ("BUB_TELEGRAM_ALLOW_FROM", r#"["123", "alice", 456]"#),
            ("BUB_TELEGRAM_ALLOW_CHATS", " -100, 200 ,"),
            ("BUB_DISCORD_ALLOW_FROM", "bob"),
        ])
        .unwrap();
    assert_eq!(s.channels["telegram"].allow_from, ["123", "alice", "456"]);
    assert_eq!(s.channels["telegram"].allow_chats, ["-100", "200"]);
    assert_eq!(s.channels["discord"].allow_from, ["bob"]);
    write(
        &fx.bub_home().join("config.toml"),
        "telegram_allow_from = [\"1\", \"alice\", 2]\ndiscord_allow_channels = \"9, 10\"\n",
    );
    let s = fx.load(&[]).unwrap();
    assert_eq!(s.channels["telegram"].allow_from, ["1", "alice", "2"]);
    assert_eq!(s.channels["discord"].allow_chats, ["9", "10"]);
}

#[test]
fn durations_timeouts_and_booleans() {
    let fx = Fixture::new();
    let s = fx
        .load(&[
            ("BUB_MESSAGE_DELAY_SECONDS", "0"),
            ("BUB_MESSAGE_DEBOUNCE_SECONDS", "0.2"),
            ("BUB_ACTIVE_TIME_WINDOW_SECONDS", "1.5"),
            ("BUB_MODEL_TIMEOUT_SECONDS", "null"),
            ("BUB_PROACTIVE_RESPONSE", "YES"),
        ])
        .unwrap();
    assert_eq!(s.message_delay, std::time::Duration::ZERO);
    assert_eq!(s.message_debounce, std::time::Duration::from_millis(200));
    assert_eq!(s.active_time_window, std::time::Duration::from_millis(1500));
    assert_eq!(s.model_timeout, None);
    assert!(s.proactive_response);
    assert_eq!(
        fx.load(&[("BUB_MODEL_TIMEOUT_SECONDS", "0")])
            .unwrap()
            .model_timeout,
        None
    );
    assert_eq!(
        fx.load(&[("BUB_MODEL_TIMEOUT_SECONDS", "2.5")])
            .unwrap()
            .model_timeout,
        Some(std::time::Duration::from_millis(2500))
    );
    write(
        &fx.bub_home().join("config.toml"),
        "message_debounce_seconds = 0.25\nproactive_response = true\n",
    );
    let s = fx.load(&[]).unwrap();
    assert_eq!(s.message_debounce, std::time::Duration::from_millis(250));
    assert!(s.proactive_response);
}

#[test]
fn every_duration_has_a_maximum() {
    let bounds = [
        (
            "BUB_MESSAGE_DELAY_SECONDS",
            MAX_MESSAGE_DELAY_SECONDS,
            3_600.0,
        ),
        (
            "BUB_MESSAGE_DEBOUNCE_SECONDS",
            MAX_MESSAGE_DEBOUNCE_SECONDS,
            3_600.0,
        ),
        (
            "BUB_ACTIVE_TIME_WINDOW_SECONDS",
            MAX_ACTIVE_TIME_WINDOW_SECONDS,
            86_400.0,
        ),
        (
            "BUB_MAX_WAIT_SECONDS",
            MAX_MESSAGE_DEBOUNCE_SECONDS,
            3_600.0,
        ),
        (
            "BUB_SESSION_IDLE_SECONDS",
            MAX_SESSION_IDLE_SECONDS,
            2_592_000.0,
        ),
        (
            "BUB_MODEL_TIMEOUT_SECONDS",
            MAX_MODEL_TIMEOUT_SECONDS,
            86_400.0,
        ),
        ("BUB_FS_TIMEOUT_SECONDS", MAX_FS_TIMEOUT_SECONDS, 3_600.0),
    ];
    let fx = Fixture::new();
    for (var, max, documented) in bounds {
        assert_eq!(max, documented, "{var}");
        // The maximum itself is accepted.
        fx.load(&[(var, &max.to_string())])
            .unwrap_or_else(|e| panic!("{var}={max}: {e}"));
        for too_big in [format!("{}", max + 0.5), "1e19".into(), "1e20".into()] {
            let err = err_for(&[(var, &too_big)], var);
            assert!(
                err.message.contains(&format!("at most {max} seconds")),
                "{var}={too_big}: {err}"
            );
        }
    }
    // From a TOML file too (a float there, not a string).
    let fx = Fixture::new();
    write(
        &fx.bub_home().join("config.toml"),
        "session_idle_seconds = 1e20\n",
    );
    let err = fx.load(&[]).unwrap_err();
    assert_eq!(err.var, "BUB_SESSION_IDLE_SECONDS", "{err}");
}

#[test]
fn command_limits_and_fs_timeout() {
    let fx = Fixture::new();
    let s = fx
        .load(&[
            ("BUB_FS_TIMEOUT_SECONDS", "0.5"),
            ("BUB_BASH_MAX_TIMEOUT_SECONDS", "60"),
            ("BUB_MAX_CONCURRENT_COMMANDS", "1"),
        ])
        .unwrap();
    assert_eq!(s.fs_timeout, std::time::Duration::from_millis(500));
    assert_eq!(s.bash_max_timeout, std::time::Duration::from_secs(60));
    assert_eq!(s.max_concurrent_commands, 1);
    // The documented maxima are accepted, one more is not.
    assert_eq!(MAX_BASH_MAX_TIMEOUT_SECONDS, 86_400);
    assert_eq!(MAX_MAX_CONCURRENT_COMMANDS, 1_024);
    let s = fx
        .load(&[
            ("BUB_BASH_MAX_TIMEOUT_SECONDS", "86400"),
            ("BUB_MAX_CONCURRENT_COMMANDS", "1024"),
        ])
        .unwrap();
    assert_eq!(
        (s.bash_max_timeout, s.max_concurrent_commands),
        (std::time::Duration::from_secs(86_400), 1_024)
    );
    let var = "BUB_BASH_MAX_TIMEOUT_SECONDS";
    let err = err_for(&[(var, "86401")], var);
    assert_eq!(err.message, "must be at most 86400, got 86401");
    for bad in ["0", "-1", "1.5", "lots"] {
        err_for(&[(var, bad)], var);
    }
    let var = "BUB_MAX_CONCURRENT_COMMANDS";
    let err = err_for(&[(var, "1025")], var);
    assert_eq!(err.message, "must be at most 1024, got 1025");
    let err = err_for(&[(var, "0")], var);
    assert_eq!(err.message, "must be >= 1, got 0");
    let var = "BUB_FS_TIMEOUT_SECONDS";
    let err = err_for(&[(var, "0")], var);
    assert!(err.message.contains("more than 0 seconds"), "{err}");
    err_for(&[(var, "-2")], var);
    // From a TOML file (integers there, not strings).
    write(
        &fx.bub_home().join("config.toml"),
        "bash_max_timeout_seconds = 120\nmax_concurrent_commands = 2\nfs_timeout_seconds = 3\n",
    );
    let s = fx.load(&[]).unwrap();
    assert_eq!(s.bash_max_timeout, std::time::Duration::from_secs(120));
    assert_eq!(s.max_concurrent_commands, 2);
    assert_eq!(s.fs_timeout, std::time::Duration::from_secs(3));
}

/// The command line is above every source; `bub run`'s log level only fills an unset
/// `BUB_LOG_LEVEL`.
#[test]
fn command_line_overrides_are_above_every_source() {
    let fx = Fixture::new();
    write(
        &fx.bub_home().join("config.toml"),
        "BUB_MODEL = \"openai:gpt-4o\"\nBUB_MAX_TOKENS = 10\n",
    );
    let env = [
        ("BUB_MODEL", "deepseek:deepseek-chat"),
        ("BUB_MAX_TOKENS", "20"),
    ];
    let load = |overrides: Overrides, env: &[(&str, &str)]| {
        Settings::load(&LoadOptions {
            overrides,
            ..fx.opts(env)
        })
    };
    let s = load(Overrides::default(), &env).unwrap();
    assert_eq!(
        (s.model.to_string(), s.max_tokens),
        ("deepseek:deepseek-chat".into(), 20)
    );
    assert!(s.allowed_skills.is_empty());
    assert_eq!(s.log_level, None);

    let s = load(
        Overrides {
            model: Some("ollama:llama3:8b".into()),
            max_tokens: Some(30),
            skills: vec!["deploy".into()],
            log_level: Some("warn".into()),
        },
        &env,
    )
    .unwrap();
    assert_eq!(
        (s.model.to_string(), s.max_tokens),
        ("ollama:llama3:8b".into(), 30)
    );
    assert_eq!(s.allowed_skills, ["deploy"]);
    assert_eq!(s.log_level.as_deref(), Some("warn"));

    let quiet = Overrides {
        log_level: Some("warn".into()),
        ..Overrides::default()
    };
    let s = load(quiet, &[("BUB_LOG_LEVEL", "DEBUG")]).unwrap();
    assert_eq!(s.log_level.as_deref(), Some("debug"));

    let zero = Overrides {
        max_tokens: Some(0),
        ..Overrides::default()
    };
    assert_eq!(load(zero, &[]).unwrap_err().var, "--max-tokens");
}

#[test]
fn env_names_are_case_insensitive_and_blank_means_default() {
    let fx = Fixture::new();
    write(&fx.cwd.join(".env"), "BUB_MAX_STEPS=9\n");
    let s = fx
        .load(&[("bub_max_tokens", "77"), ("BUB_MAX_STEPS", " ")])
        .unwrap();
    assert_eq!((s.max_tokens, s.max_steps), (77, 20));
    let s = fx
        .load(&[("bub_max_tokens", "1"), ("BUB_MAX_TOKENS", "2")])
        .unwrap();
    assert_eq!(s.max_tokens, 2);
}

#[test]
fn example_config_lists_every_key_and_loads() {
    let example = include_str!("../../config/bub.example.toml");
    let mut keys: Vec<String> = example
        .lines()
        .filter_map(|line| line.strip_prefix("# "))
        .filter(|rest| {
            rest.split_once(" = ").is_some_and(|(key, _)| {
                !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            })
        })
        .map(str::to_owned)
        .collect();
    for var in vars::VARS.iter().map(|v| v.name) {
        let key = var.strip_prefix("BUB_").unwrap_or(var).to_ascii_lowercase();
        assert!(
            keys.iter()
                .any(|line| line.starts_with(&format!("{key} = "))),
            "{key} missing from the example"
        );
    }
    // A build without PostgreSQL refuses a database (`a_part_this_build_lacks_…`).
    keys.retain(|key| cfg!(feature = "postgres") || !key.starts_with("database_url = "));
    // The price table, after the keys (a TOML table ends the top level).
    let prices: Vec<&str> = example
        .lines()
        .skip_while(|line| !line.starts_with("# [prices."))
        .filter_map(|line| line.strip_prefix("# "))
        .collect();
    let fx = Fixture::new();
    let file = fx.cwd.join("example.toml");
    write(
        &file,
        &format!("{}\n{}", keys.join("\n"), prices.join("\n")),
    );
    let mut opts = fx.opts(&[]);
    opts.config_file = Some(file);
    let s = Settings::load(&opts).unwrap();
    assert_eq!(s.channels["telegram"].allow_from, ["123456789", "alice"]);
    assert_eq!(
        s.channels["discord"].allow_chats,
        ["111111111111111111", "222222222222222222"]
    );
    assert_eq!(s.home, fx.user_home.join(".bub"));
    assert_eq!(
        s.prices.of(&s.model.to_string()).map(|p| p.output),
        Some(1.2)
    );
}

#[path = "model_tests.rs"]
mod model;

#[path = "errors_tests.rs"]
mod errors;

#[test]
fn the_heartbeat_needs_a_chat_and_sane_minutes() {
    let fx = Fixture::new();
    let s = fx.load(&[]).unwrap();
    assert!(
        s.heartbeat_every.is_zero() && !s.heartbeat_owner,
        "off, as a guest"
    );
    let on = [
        ("BUB_HEARTBEAT_MINUTES", "0.5"),
        ("BUB_HEARTBEAT_CHAT", "telegram:42"),
        ("BUB_HEARTBEAT_ROLE", "owner"),
    ];
    let s = fx.load(&on).unwrap();
    assert_eq!(s.heartbeat_every, Duration::from_secs(30));
    assert_eq!(s.heartbeat_chat.as_deref(), Some("telegram:42"));
    assert!(s.heartbeat_owner);
    err_for(&[("BUB_HEARTBEAT_MINUTES", "30")], "BUB_HEARTBEAT_CHAT");
    for minutes in ["-1", "NaN", "20000", "soon"] {
        err_for(
            &[("BUB_HEARTBEAT_MINUTES", minutes)],
            "BUB_HEARTBEAT_MINUTES",
        );
    }
    for chat in ["42", "matrix:42", "telegram:"] {
        err_for(&[("BUB_HEARTBEAT_CHAT", chat)], "BUB_HEARTBEAT_CHAT");
    }
    err_for(&[("BUB_HEARTBEAT_ROLE", "admin")], "BUB_HEARTBEAT_ROLE");
}

#[test]
fn mcp_and_subagent_settings_are_bounded() {
    let fx = Fixture::new();
    let s = fx.load(&[]).unwrap();
    assert_eq!(
        (s.mcp_timeout, s.max_subagents),
        (std::time::Duration::from_secs(60), 4)
    );
    let s = fx
        .load(&[
            ("BUB_MCP_TIMEOUT_SECONDS", "2.5"),
            ("BUB_MAX_SUBAGENTS", "0"),
        ])
        .unwrap();
    assert_eq!(s.mcp_timeout, std::time::Duration::from_millis(2500));
    assert_eq!(s.max_subagents, 0, "0: no subagents");
    for bad in ["0", "3601", "soon"] {
        err_for(
            &[("BUB_MCP_TIMEOUT_SECONDS", bad)],
            "BUB_MCP_TIMEOUT_SECONDS",
        );
    }
    err_for(&[("BUB_MAX_SUBAGENTS", "65")], "BUB_MAX_SUBAGENTS");
    assert_eq!(s.guest_background_commands, 1);
    let s = fx.load(&[("BUB_GUEST_BACKGROUND_COMMANDS", "0")]).unwrap();
    assert_eq!(s.guest_background_commands, 0, "0: none");
    err_for(
        &[("BUB_GUEST_BACKGROUND_COMMANDS", "5")],
        "BUB_GUEST_BACKGROUND_COMMANDS",
    );
}

#[test]
fn the_http_listener_is_off_or_on_loopback_unless_an_address_says_otherwise() {
    let fx = Fixture::new();
    assert_eq!(fx.load(&[]).unwrap().http_listen, None);
    for (value, expected) in [
        ("8080", "127.0.0.1:8080"),
        ("localhost:9100", "127.0.0.1:9100"),
        ("0.0.0.0:8080", "0.0.0.0:8080"),
        ("[::1]:8080", "[::1]:8080"),
    ] {
        let s = fx.load(&[("BUB_HTTP_LISTEN", value)]).unwrap();
        assert_eq!(s.http_listen.unwrap().to_string(), expected, "{value}");
    }
    for bad in ["example.com:80", "http://0.0.0.0:8080", "70000"] {
        err_for(&[("BUB_HTTP_LISTEN", bad)], "BUB_HTTP_LISTEN");
    }
}

/// The console, MCP servers and a database turned on in a build without their feature stop
/// the start, naming what turned them on and the feature; with it, they load.
#[test]
fn a_part_this_build_lacks_is_a_configuration_error() {
    let console = Fixture::new().load(&[("BUB_CONSOLE", "true")]);
    match cfg!(feature = "console") {
        true => assert!(console.unwrap().console.enabled),
        false => {
            let err = console.unwrap_err();
            assert_eq!(err.var, "BUB_CONSOLE");
            assert!(err.message.contains("`console` feature"), "{err}");
        }
    }
    let fx = Fixture::new();
    let servers = r#"{"mcpServers": {"notes": {"command": "true"}}}"#;
    write(&fx.bub_home().join("mcp.json"), servers);
    let mcp = fx.load(&[]);
    match cfg!(feature = "mcp") {
        true => assert!(mcp.unwrap().mcp_servers.entries.contains_key("notes")),
        false => {
            let err = mcp.unwrap_err();
            assert!(err.var.ends_with("mcp.json"), "{err}");
            assert!(err.message.contains("`mcp` feature"), "{err}");
        }
    }
    let url = "postgres://bub:pw@db/bub";
    let db = Fixture::new().load(&[("BUB_DATABASE_URL", url)]);
    match cfg!(feature = "postgres") {
        true => assert!(db.unwrap().database_url.is_some()),
        false => {
            let err = db.unwrap_err();
            assert_eq!(err.var, "BUB_DATABASE_URL");
            assert!(err.message.contains("no PostgreSQL support"), "{err}");
            assert!(err.message.contains("`postgres` feature"), "{err}");
        }
    }
}
