//! Unit tests of the `bash` tool: the child's environment, secrets, the sandbox, capture.
use super::*;

fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

fn env_map(env: Vec<(OsString, OsString)>) -> BTreeMap<String, String> {
    env.into_iter()
        .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
        .collect()
}

/// A parent environment carrying Bub's secrets and an ordinary variable.
fn parent_with_secrets() -> Vec<(OsString, OsString)> {
    let mut parent = os(&[
        ("BUB_TELEGRAM_TOKEN", "tg-secret"),
        ("BUB_API_KEY", "api-secret"),
        ("LLM_API_KEY", "llm-secret"),
        ("BUB_OLLAMA_API_KEY", "ollama-secret"),
        ("BUB_TELEGRAM_PROXY", "http://u:proxy-secret@p"),
        ("KEEP_ME", "1"),
        ("LC_ALL", "C.UTF-8"),
    ]);
    parent.push(("PATH".into(), std::env::var_os("PATH").unwrap_or_default()));
    parent
}

/// A workspace whose `.env` holds GH_TOKEN and more secrets.
fn workspace_with_dotenv() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join(".env"),
        "GH_TOKEN=gh-visible\nBUB_DISCORD_TOKEN=dc-secret\nOPENROUTER_API_KEY=or-secret\n\
         KEEP_ME=from-dotenv\n",
    )
    .unwrap();
    ws
}

#[test]
fn child_env_drops_secrets_from_both_sources() {
    let ws = workspace_with_dotenv();
    let env = env_map(child_env(parent_with_secrets(), ws.path(), "cli:x", None));
    for var in secret_vars() {
        assert!(!env.contains_key(var), "{var} passed: {env:?}");
    }
    assert_eq!(env["GH_TOKEN"], "gh-visible");
    assert_eq!(env["KEEP_ME"], "from-dotenv", ".env overrides the process");
    assert_eq!(env["LC_ALL"], "C.UTF-8");
    assert_eq!(env["BUB_SESSION_ID"], "cli:x");
}

#[test]
fn sandboxed_child_env_is_a_safe_set_without_dotenv() {
    let ws = workspace_with_dotenv();
    let tmp = Path::new("/tmp/bub-sandbox-x");
    let mut parent = parent_with_secrets();
    parent.push(("TERM".into(), "xterm".into()));
    let env = env_map(child_env(parent, ws.path(), "telegram:1", Some(tmp)));
    let names: Vec<&str> = env.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["BUB_SESSION_ID", "HOME", "LC_ALL", "PATH", "TERM", "TMPDIR"]
    );
    assert_eq!(env["HOME"], "/tmp/bub-sandbox-x");
    assert_eq!(env["TMPDIR"], "/tmp/bub-sandbox-x");

    let env = env_map(child_env(Vec::new(), ws.path(), "s", Some(tmp)));
    assert_eq!(env["PATH"], DEFAULT_PATH);
}

fn launch(ws: &Path, sandboxed: bool) -> Launch<'_> {
    Launch {
        workspace: ws,
        session_id: "cli:env",
        home: Path::new("/nonexistent/bub-home"),
        user_home: Some(Path::new("/nonexistent/user")),
        sandboxed,
        folder: None,
    }
}

fn args(cmd: &str) -> BashArgs {
    BashArgs {
        cmd: cmd.into(),
        cwd: None,
        timeout_seconds: Some(20),
        background: None,
    }
}

#[tokio::test]
async fn secrets_never_reach_a_child() {
    let ws = workspace_with_dotenv();
    let out = run_bash_with(
        args("printenv"),
        launch(ws.path(), false),
        parent_with_secrets(),
        || panic!("probed without the sandbox"),
    )
    .await
    .unwrap();
    assert!(out.contains("GH_TOKEN=gh-visible"), "{out}");
    assert!(out.contains("KEEP_ME=from-dotenv"), "{out}");
    assert!(!out.contains("secret"), "{out}");

    let result = run_bash_with(
        args("printenv"),
        launch(ws.path(), true),
        parent_with_secrets(),
        sandbox::available,
    )
    .await;
    if !sandbox::available().is_available() {
        assert!(
            result
                .unwrap_err()
                .message()
                .contains("the command was not run")
        );
        return;
    }
    let out = result.unwrap();
    assert!(!out.contains("GH_TOKEN"), "{out}");
    assert!(!out.contains("KEEP_ME"), "{out}");
    assert!(!out.contains("secret"), "{out}");
    assert!(out.contains("BUB_SESSION_ID=cli:env"), "{out}");
}

#[tokio::test]
async fn without_landlock_sandboxed_commands_fail_closed() {
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("marker");
    for support in [Support::NotBuilt, Support::TooOld { abi: 2 }] {
        let err = run_bash_with(
            args("touch marker"),
            launch(ws.path(), true),
            Vec::new(),
            || support,
        )
        .await
        .unwrap_err();
        assert!(
            err.message()
                .starts_with("the sandbox is not available on this kernel (Landlock"),
            "{err}"
        );
        assert!(
            err.message().ends_with("; the command was not run"),
            "{err}"
        );
        assert!(!marker.exists(), "the command ran: {err}");
    }
    // The same command runs unsandboxed (the marker check above is meaningful).
    run_bash_with(
        args("touch marker"),
        launch(ws.path(), false),
        Vec::new(),
        || Support::NotBuilt,
    )
    .await
    .unwrap();
    assert!(marker.exists());
}

#[tokio::test]
async fn sandboxed_cwd_must_be_inside_the_workspace() {
    if !sandbox::available().is_available() {
        return; // refused earlier, for the kernel: covered above
    }
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let mut a = args("touch marker");
    a.cwd = Some(root.path().display().to_string());
    let err = run_bash_with(a, launch(&ws, true), Vec::new(), sandbox::available)
        .await
        .unwrap_err();
    assert!(err.message().contains("is outside the workspace"), "{err}");
    assert!(!root.path().join("marker").exists());
}

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
        format_result(fail, "", "").unwrap_err().to_string(),
        "exit=3: (no output)"
    );
    assert_eq!(
        format_result(fail, "o", "e").unwrap_err().to_string(),
        "exit=3: e\n[stdout]\no"
    );
    let killed = ExitStatus::from_raw(9);
    assert_eq!(
        format_result(killed, "o", "").unwrap_err().to_string(),
        "signal=9: o"
    );
}
