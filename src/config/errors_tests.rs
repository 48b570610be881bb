//! Configuration errors: each names its variable (and its source), none echoes a secret, and
//! secrets stay out of `Debug`.

use super::*;

#[test]
fn every_error_names_its_variable() {
    err_for(&[("BUB_MAX_TOKENS", "lots")], "BUB_MAX_TOKENS");
    err_for(&[("BUB_MAX_STEPS", "0")], "BUB_MAX_STEPS");
    err_for(&[("BUB_CONTEXT_TOKENS", "100")], "BUB_CONTEXT_TOKENS");
    err_for(&[("BUB_COMPACT_PERCENT", "5")], "BUB_COMPACT_PERCENT");
    err_for(&[("BUB_COMPACT_PERCENT", "101")], "BUB_COMPACT_PERCENT");
    err_for(&[("BUB_LEARN_SKILLS", "sometimes")], "BUB_LEARN_SKILLS");
    err_for(&[("BUB_LEARN_MIN_STEPS", "0")], "BUB_LEARN_MIN_STEPS");
    err_for(&[("BUB_MEDIA_MAX_BYTES", "20MB")], "BUB_MEDIA_MAX_BYTES");
    err_for(&[("BUB_VISION", "maybe")], "BUB_VISION");
    err_for(&[("BUB_STREAM", "yes")], "BUB_STREAM");
    err_for(
        &[("BUB_TRANSCRIBE_API_BASE", "not a url")],
        "BUB_TRANSCRIBE_API_BASE",
    );
    err_for(&[("BUB_TELEGRAM_ENABLED", "maybe")], "BUB_TELEGRAM_ENABLED");
    err_for(
        &[("BUB_DISCORD_ALLOW_FROM", "[\"a\", ")],
        "BUB_DISCORD_ALLOW_FROM",
    );
    err_for(
        &[("BUB_MESSAGE_DELAY_SECONDS", "-1")],
        "BUB_MESSAGE_DELAY_SECONDS",
    );
    err_for(&[("BUB_API_BASE", "localhost:8080")], "BUB_API_BASE");
    err_for(
        &[("BUB_DISCORD_API_BASE", "ftp://x")],
        "BUB_DISCORD_API_BASE",
    );
    err_for(&[("BUB_LOG_LEVEL", "loud")], "BUB_LOG_LEVEL");
    err_for(&[("BUB_LOG_FORMAT", "xml")], "BUB_LOG_FORMAT");
    err_for(&[("BUB_MODEL", "gpt-4o")], "BUB_MODEL");
    err_for(
        &[("BUB_FALLBACK_MODELS", "openai:a,gpt-4o")],
        "BUB_FALLBACK_MODELS",
    );
    let err = err_for(
        &[("BUB_FALLBACK_MODELS", "acme:foo")],
        "BUB_FALLBACK_MODELS",
    );
    assert!(err.message.contains("unknown provider"), "{err}");
    let nine = (0..9).map(|i| format!("openai:m{i}")).collect::<Vec<_>>();
    err_for(
        &[("BUB_FALLBACK_MODELS", &nine.join(","))],
        "BUB_FALLBACK_MODELS",
    );
    let err = err_for(&[("BUB_MODEL", "acme:foo")], "BUB_MODEL");
    assert!(err.message.contains("unknown provider") && err.message.contains("BUB_API_BASE"));
    let err = err_for(&[("BUB_TELEGRAM_ENABLED", "true")], "BUB_TELEGRAM_TOKEN");
    assert!(
        err.message
            .contains("required when BUB_TELEGRAM_ENABLED is true")
    );
    err_for(
        &[("BUB_DISCORD_ENABLED", "1"), ("BUB_DISCORD_TOKEN", "null")],
        "BUB_DISCORD_TOKEN",
    );
    assert!(
        Fixture::new()
            .load(&[
                ("BUB_DISCORD_ENABLED", "on"),
                ("BUB_DISCORD_TOKEN", "a.b.c")
            ])
            .is_ok()
    );
}

#[test]
fn missing_workspace_and_config_file() {
    let fx = Fixture::new();
    let mut opts = fx.opts(&[]);
    opts.workspace = Some(fx.workspace.join("nope"));
    let err = Settings::load(&opts).unwrap_err();
    assert_eq!(err.var, "--workspace");
    assert!(
        err.message.starts_with("directory does not exist: "),
        "{err}"
    );
    let mut opts = fx.opts(&[]);
    opts.config_file = Some(fx.cwd.join("missing.toml"));
    let err = Settings::load(&opts).unwrap_err();
    assert_eq!(err.var, "--config");
    assert!(err.message.contains("missing.toml"));
}

#[test]
fn file_errors_name_variable_and_source() {
    let fx = Fixture::new();
    let config = fx.bub_home().join("config.toml");
    write(&config, "max_steps = \"many\"\n");
    let err = fx.load(&[]).unwrap_err();
    assert_eq!(err.var, "BUB_MAX_STEPS");
    assert!(err.message.contains("config.toml"), "{err}");
    write(&config, "max_stepz = 3\n");
    assert_eq!(fx.load(&[]).unwrap_err().var, "max_stepz");
    write(&config, "model = [\"a\"]\n");
    assert_eq!(fx.load(&[]).unwrap_err().var, "BUB_MODEL");
    // An overridden bad value is not an error.
    write(&config, "max_steps = \"many\"\n");
    assert_eq!(fx.load(&[("BUB_MAX_STEPS", "3")]).unwrap().max_steps, 3);
    write(&fx.workspace.join(".env"), "BUB_MAX_TOKENS=zero\n");
    let err = fx.load(&[("BUB_MAX_STEPS", "3")]).unwrap_err();
    assert!(err.message.contains(".env"), "{err}");
}

#[test]
fn syntax_errors_do_not_echo_secrets() {
    let fx = Fixture::new();
    let config = fx.bub_home().join("config.toml");
    write(&config, "api_key = \"sk-secret-123\n");
    let err = fx.load(&[]).unwrap_err();
    assert!(err.var.ends_with("config.toml"), "{err}");
    assert!(
        !err.to_string().contains("sk-secret-123") && !err.to_string().contains('\n'),
        "{err}"
    );
    fs::remove_file(&config).unwrap();
    write(&fx.cwd.join(".env"), "A=1\nBUB_API_KEY='sk-secret-123\n");
    let err = fx.load(&[]).unwrap_err();
    assert!(err.var.ends_with(".env"), "{err}");
    assert!(!err.to_string().contains("sk-secret-123"), "{err}");
    let err = err_for(
        &[("BUB_TELEGRAM_TOKEN", "12:ab cd-secret")],
        "BUB_TELEGRAM_TOKEN",
    );
    assert!(!err.to_string().contains("secret"), "{err}");
    let err = err_for(
        &[("BUB_TELEGRAM_PROXY", "socks9://u:pw-secret@h:1")],
        "BUB_TELEGRAM_PROXY",
    );
    assert!(!err.to_string().contains("pw-secret"), "{err}");
}

#[test]
fn debug_redacts_secrets() {
    let fx = Fixture::new();
    let s = fx
        .load(&[
            ("BUB_API_KEY", "sk-api-secret"),
            ("BUB_OLLAMA_API_KEY", "ollama-secret"),
            ("BUB_TELEGRAM_TOKEN", "123:tg-secret"),
            ("BUB_DISCORD_TOKEN", "discord.tok.secret"),
            (
                "BUB_TELEGRAM_PROXY",
                "http://user:proxy-secret@proxy.local:3128",
            ),
            ("BUB_DISCORD_PROXY", "http://proxy.local:3128"),
        ])
        .unwrap();
    let text = format!("{s:?} {:#?}", s);
    for secret in [
        "sk-api-secret",
        "ollama-secret",
        "tg-secret",
        "discord.tok.secret",
        "proxy-secret",
        "user:",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert!(text.contains("api_key: Some(***)"), "{text}");
    assert!(text.contains("token: Some(***)"), "{text}");
    assert!(text.contains("http://***@proxy.local:3128"), "{text}");
    assert!(text.contains("http://proxy.local:3128"), "{text}");
    assert_eq!(
        s.channels["telegram"].token.as_ref().map(|k| k.expose()),
        Some("123:tg-secret")
    );
}

#[cfg(feature = "postgres")]
#[test]
fn the_database_url_and_the_webhook_secret_are_secrets() {
    let fx = Fixture::new();
    let s = fx
        .load(&[
            ("BUB_DATABASE_URL", "postgres://bub:db-pass-123@db:5432/bub"),
            ("BUB_HTTP_LISTEN", "8080"),
            ("BUB_TELEGRAM_WEBHOOK_URL", "https://bot.example/hook"),
            ("BUB_TELEGRAM_WEBHOOK_SECRET", "hook-secret-456"),
        ])
        .unwrap();
    let secrets = s.secret_values();
    for secret in [
        "db-pass-123",
        "hook-secret-456",
        "postgres://bub:db-pass-123@db:5432/bub",
    ] {
        assert!(secrets.iter().any(|v| v == secret), "{secret}");
    }
    assert_eq!(
        s.channels["telegram"].webhook_url.as_ref().unwrap().path(),
        "/hook"
    );
    for bad in ["mysql://db/bub", "postgres://db:notaport/bub"] {
        err_for(&[("BUB_DATABASE_URL", bad)], "BUB_DATABASE_URL");
    }
    let vars = crate::config::vars::secret_vars().collect::<Vec<_>>();
    assert!(vars.contains(&"BUB_DATABASE_URL") && vars.contains(&"BUB_TELEGRAM_WEBHOOK_SECRET"));
}
