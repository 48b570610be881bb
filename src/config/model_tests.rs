//! The model settings: prices, API keys and bases of each provider, provider names.

use super::*;

#[test]
fn prices_come_from_the_toml_tables_and_a_higher_file_s_row_wins() {
    let fx = Fixture::new();
    write(
        &fx.bub_home().join("config.toml"),
        "max_steps = 2\n[prices.\"openai:GPT-4.1-mini\"]\ninput = 0.4\noutput = 1.6\n\
         [prices.\"openai:gpt-4o\"]\ninput = 2.5\ncached_input = 1.25\noutput = 10\n",
    );
    let extra = fx.cwd.join("extra.toml");
    write(
        &extra,
        "[prices.\"openai:gpt-4o\"]\ninput = 3\noutput = 12\n",
    );
    let mut opts = fx.opts(&[("BUB_BUDGET_DAILY_TOKENS", "100000")]);
    opts.config_file = Some(extra);
    let s = Settings::load(&opts).unwrap();
    assert_eq!(s.max_steps, 2);
    let mini = s
        .prices
        .of("openai:GPT-4.1-mini")
        .expect("dots and case kept");
    assert_eq!(
        (mini.input, mini.cached_input, mini.output),
        (0.4, 0.4, 1.6)
    );
    let four = s.prices.of("openai:gpt-4o").unwrap();
    assert_eq!(
        (four.input, four.cached_input),
        (3.0, 3.0),
        "the --config row"
    );
    assert_eq!(s.budgets.daily_tokens, Some(100_000));
    assert!(!s.budgets.owners);

    for (row, var) in [
        ("input = -1\noutput = 1", "prices.\"openai:m\".input"),
        ("input = 1", "prices.\"openai:m\".output"),
        (
            "input = 1\noutput = 1\nfree = 1",
            "prices.\"openai:m\".free",
        ),
    ] {
        write(
            &fx.bub_home().join("config.toml"),
            &format!("[prices.\"openai:m\"]\n{row}\n"),
        );
        assert_eq!(fx.load(&[]).unwrap_err().var, var);
    }
    write(
        &fx.bub_home().join("config.toml"),
        "[prices.nomodel]\ninput = 1\noutput = 1\n",
    );
    assert_eq!(fx.load(&[]).unwrap_err().var, "prices.\"nomodel\"");
    write(&fx.bub_home().join("config.toml"), "prices = 3\n");
    assert_eq!(fx.load(&[]).unwrap_err().var, "prices");
    let err = fx.load(&[("BUB_BUDGET_DAILY_USD", "1")]).unwrap_err();
    assert_eq!(err.var, "prices");
    write(&fx.bub_home().join("config.toml"), "");
    let err = fx.load(&[("BUB_BUDGET_DAILY_USD", "1")]).unwrap_err();
    assert_eq!(err.var, "BUB_BUDGET_DAILY_USD");
    assert_eq!(
        fx.load(&[("BUB_BUDGET_DAILY_USD", "-1")]).unwrap_err().var,
        "BUB_BUDGET_DAILY_USD"
    );
}

#[test]
fn api_key_order_urls_and_providers() {
    let fx = Fixture::new();
    write(
        &fx.cwd.join(".env"),
        "OPENROUTER_API_KEY=k3\nLLM_API_KEY=k2\n",
    );
    assert_eq!(
        fx.load(&[]).unwrap().api_key.as_ref().map(|k| k.expose()),
        Some("k2")
    );
    assert_eq!(
        fx.load(&[("BUB_API_KEY", "k1")])
            .unwrap()
            .api_key
            .as_ref()
            .map(|k| k.expose()),
        Some("k1")
    );
    assert_eq!(
        fx.load(&[("LLM_API_KEY", "")])
            .unwrap()
            .api_key
            .as_ref()
            .map(|k| k.expose()),
        Some("k3")
    );

    let s = fx
        .load(&[
            ("BUB_MODEL", "local:my-model"),
            ("BUB_API_BASE", "http://127.0.0.1:8080/v1/"),
        ])
        .unwrap();
    assert_eq!((s.provider(), s.model_id()), ("local", "my-model"));
    assert_eq!(s.model_base_url(), "http://127.0.0.1:8080/v1");
    let s = fx
        .load(&[
            ("BUB_MODEL", "Ollama:llama3:8b"),
            ("BUB_TELEGRAM_API_BASE", "http://127.0.0.1:9/"),
        ])
        .unwrap();
    assert_eq!(s.model_id(), "llama3:8b");
    assert_eq!(s.model_base_url(), "http://localhost:11434/v1");
    assert_eq!(s.channels["telegram"].api_base, "http://127.0.0.1:9");

    let s = fx
        .load(&[(
            "BUB_FALLBACK_MODELS",
            "openai:gpt-4o-mini, ollama:llama3:8b,openai:gpt-4o-mini",
        )])
        .unwrap();
    let shown: Vec<String> = s.fallback_models.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["openai:gpt-4o-mini", "ollama:llama3:8b"]);
    let s = fx
        .load(&[("BUB_FALLBACK_MODELS", r#"["deepseek:deepseek-chat"]"#)])
        .unwrap();
    assert_eq!(s.fallback_models[0].to_string(), "deepseek:deepseek-chat");
    assert!(fx.load(&[]).unwrap().fallback_models.is_empty());

    let with_model = |model: &str| {
        let mut opts = fx.opts(&[]);
        opts.overrides.model = Some(model.into());
        Settings::load(&opts)
    };
    let s = with_model("openai:gpt-4o").unwrap();
    assert_eq!(s.model_base_url(), "https://api.openai.com/v1");
    assert_eq!(with_model("bogus").unwrap_err().var, "--model");
}

#[test]
fn anthropic_and_gemini_keys_and_bases() {
    let fx = Fixture::new();
    write(
        &fx.cwd.join(".env"),
        "ANTHROPIC_API_KEY=ant-2\nGEMINI_API_KEY=gem-2\nBUB_API_KEY=oa\n",
    );
    let s = fx
        .load(&[
            ("BUB_ANTHROPIC_API_KEY", "ant-1"),
            ("BUB_MODEL", "anthropic:claude-sonnet-4-5"),
            ("BUB_API_BASE", "http://127.0.0.1:8080/v1"),
        ])
        .unwrap();
    let expose = |k: Option<&Secret>| k.map(|k| k.expose().to_owned());
    assert_eq!(expose(s.api_key_for(&s.model)).as_deref(), Some("ant-1"));
    // BUB_API_BASE is for OpenAI-compatible providers only.
    assert_eq!(s.model_base_url(), "https://api.anthropic.com");
    let gemini = Model {
        provider: "gemini".into(),
        id: "gemini-2.5-flash".into(),
    };
    assert_eq!(expose(s.api_key_for(&gemini)).as_deref(), Some("gem-2"));
    assert_eq!(
        s.base_url_for(&gemini),
        "https://generativelanguage.googleapis.com"
    );
    let openai = Model {
        provider: "openai".into(),
        id: "gpt".into(),
    };
    assert_eq!(expose(s.api_key_for(&openai)).as_deref(), Some("oa"));
    assert_eq!(s.base_url_for(&openai), "http://127.0.0.1:8080/v1");
    let secrets = s.secret_values();
    assert!(secrets.contains(&"ant-1".to_owned()) && secrets.contains(&"gem-2".to_owned()));
    let shown = format!("{s:?}");
    assert!(
        !shown.contains("ant-1") && !shown.contains("gem-2"),
        "{shown}"
    );

    let s = fx
        .load(&[
            ("BUB_MODEL", "gemini:gemini-2.5-flash"),
            ("BUB_GEMINI_API_BASE", "http://127.0.0.1:9/"),
            (
                "BUB_ANTHROPIC_API_BASE",
                "https://user:base-secret@proxy.example",
            ),
        ])
        .unwrap();
    assert_eq!(s.model_base_url(), "http://127.0.0.1:9");
    assert!(s.secret_values().contains(&"base-secret".to_owned()));
    for var in ["BUB_ANTHROPIC_API_BASE", "BUB_GEMINI_API_BASE"] {
        err_for(&[(var, "api.example.com")], var);
    }
    for var in ["BUB_ANTHROPIC_API_KEY", "GEMINI_API_KEY"] {
        assert!(secret_vars().any(|s| s == var));
    }
}
