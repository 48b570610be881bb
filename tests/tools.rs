//! Integration tests of the `bash` and `fs.*` tools: the plain tool functions on a temporary
//! workspace, plus a few calls through the built-in registry (argument coercion, wiring).
//!
//! Every test is bounded in time: process death is awaited with a pidfd (a bounded poll of
//! `/proc` where there is none), commands end by the tools' own timeouts, and the calls through
//! the registry are bounded by [`support::wait::WAIT`].

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use bub::access::Authority;
use bub::tools::fs::{self, EditArgs, GlobArgs, GrepArgs, ReadArgs, WriteArgs};
use bub::tools::shell::{BashArgs, Launch, run_bash};
use serde_json::json;
use support::tool_env::ToolEnv;
use support::wait::wait_for_blocking;

#[path = "tools/confined.rs"]
mod confined;

fn bash_args(cmd: &str, timeout: i64) -> BashArgs {
    BashArgs {
        cmd: cmd.to_string(),
        cwd: None,
        timeout_seconds: Some(timeout),
        background: None,
    }
}

/// An unsandboxed launch in `ws` (BUB_HOME is irrelevant without the sandbox).
fn plain<'a>(ws: &'a Path, session_id: &'a str) -> Launch<'a> {
    Launch {
        workspace: ws,
        session_id,
        home: ws,
        user_home: None,
        sandboxed: false,
        folder: None,
    }
}

async fn sh(ws: &Path, cmd: &str) -> Result<String, bub::tools::ToolError> {
    run_bash(bash_args(cmd, 20), plain(ws, "cli:test")).await
}

/// The background process whose pid a command wrote to `dir/pid` has exited (its group was
/// killed).
fn assert_background_killed(dir: &Path) {
    let pid: i32 = std::fs::read_to_string(dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        exits_within(pid, Duration::from_secs(20)),
        "background sleep {pid} still alive"
    );
}

/// Waits (blocking, at most `within`) for process `pid` to exit; true once it has exited
/// (zombies count as exited: they no longer run).
fn exits_within(pid: i32, within: Duration) -> bool {
    // SAFETY: plain syscalls on an integer pid / the fd they return.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            return true; // already gone and reaped
        }
        // No pidfd support: fall back to watching /proc for a bounded time.
        let exited = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => Some(()),
            Ok(stat) => {
                let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
                matches!(state, Some('Z' | 'X')).then_some(())
            }
        };
        return wait_for_blocking(within, exited).is_some();
    }
    let fd = fd as i32;
    let deadline = Instant::now() + within;
    let ready = loop {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        // poll is never restarted after a signal handler ran (SIGCHLD from the killed shell
        // reaches whichever thread of this process it likes): wait again for the time left.
        let interrupted =
            ready < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
        if !interrupted || left.is_zero() {
            break ready;
        }
    };
    unsafe { libc::close(fd) };
    ready == 1
}

// ---------------------------------------------------------------------------------------------
// bash

#[tokio::test]
async fn bash_echo() {
    let ws = tempfile::tempdir().unwrap();
    assert_eq!(sh(ws.path(), "echo hello").await.unwrap(), "hello");
    assert_eq!(sh(ws.path(), "true").await.unwrap(), "(no output)");
}

#[tokio::test]
async fn bash_sees_session_id_and_workspace_env() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join(".env"),
        "BUB_TEST_FROM_DOTENV=\"bar baz\"\n# comment\nOTHER=1\n",
    )
    .unwrap();
    let out = sh(
        ws.path(),
        "echo \"$BUB_SESSION_ID|$BUB_TEST_FROM_DOTENV|$OTHER\"",
    )
    .await
    .unwrap();
    assert_eq!(out, "cli:test|bar baz|1");
    assert!(
        std::env::var("BUB_TEST_FROM_DOTENV").is_err(),
        "process env must stay untouched"
    );
}

#[tokio::test]
async fn bash_runs_in_cwd() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    let args = BashArgs {
        cmd: "pwd".into(),
        cwd: Some("sub".into()),
        timeout_seconds: None,
        background: None,
    };
    let out = run_bash(args, plain(ws.path(), "s")).await.unwrap();
    assert!(out.ends_with("/sub"), "{out}");
    let args = BashArgs {
        cmd: "pwd".into(),
        cwd: Some("missing".into()),
        timeout_seconds: None,
        background: None,
    };
    let err = run_bash(args, plain(ws.path(), "s")).await.unwrap_err();
    assert!(
        err.message().starts_with("cwd is not a directory:"),
        "{err}"
    );
}

#[tokio::test]
async fn bash_keeps_stderr_on_success() {
    let ws = tempfile::tempdir().unwrap();
    let out = sh(ws.path(), "echo out; echo warn >&2").await.unwrap();
    assert_eq!(out, "out\n[stderr]\nwarn");
}

#[tokio::test]
async fn bash_nonzero_exit_is_an_error() {
    let ws = tempfile::tempdir().unwrap();
    let err = sh(ws.path(), "echo oops >&2; exit 3").await.unwrap_err();
    assert_eq!(err.message(), "exit=3: oops");
    let err = sh(ws.path(), "echo partial; exit 1").await.unwrap_err();
    assert_eq!(err.message(), "exit=1: partial");
    let err = sh(ws.path(), "exit 2").await.unwrap_err();
    assert_eq!(err.message(), "exit=2: (no output)");
    let err = sh(ws.path(), "kill -TERM $$").await.unwrap_err();
    assert_eq!(err.message(), "signal=15: (no output)");
}

#[tokio::test]
async fn bash_rejects_zero_timeout() {
    let ws = tempfile::tempdir().unwrap();
    let err = run_bash(bash_args("true", 0), plain(ws.path(), "s"))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("timeout_seconds must be >= 1"),
        "{err}"
    );
}

#[tokio::test]
async fn bash_timeout_kills_the_command_and_what_left_its_group() {
    let ws = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let err = run_bash(
        bash_args("echo started; setsid sleep 30 & echo $! > pid; wait", 2),
        plain(ws.path(), "s"),
    )
    .await
    .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        err.message().starts_with(
            "timeout: command did not finish within 2s (it and all it started were killed)"
        ),
        "{err}"
    );
    assert!(
        err.message().contains("started"),
        "partial output kept: {err}"
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert_background_killed(ws.path());
}

#[tokio::test]
async fn bash_cancellation_kills_the_process_group() {
    let ws = tempfile::tempdir().unwrap();
    let fifo = ws.path().join("pid.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // A detached thread (not spawn_blocking) so a failure can't hang runtime shutdown.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(fifo));
    });
    let mut call = Box::pin(run_bash(
        bash_args("sleep 30 & echo $! > pid.fifo; wait", 20),
        plain(ws.path(), "s"),
    ));
    let pid: i32 = tokio::select! {
        r = &mut call => panic!("bash finished before being cancelled: {r:?}"),
        pid = rx => pid.unwrap().unwrap().trim().parse().unwrap(),
    };
    drop(call); // what a cancelled turn does
    assert!(
        exits_within(pid, Duration::from_secs(20)),
        "background sleep {pid} still alive"
    );
}

#[tokio::test]
async fn bash_huge_output_is_truncated() {
    let ws = tempfile::tempdir().unwrap();
    let out = sh(ws.path(), "yes | head -c 5000000").await.unwrap();
    assert!(out.len() < 40 * 1024, "{} bytes", out.len());
    assert!(out.contains("… [truncated 49"), "{}", &out[..100]);
    assert!(out.starts_with("y\ny\n") && out.ends_with("y\ny"));
}

#[tokio::test]
async fn bash_decodes_invalid_utf8_lossily() {
    let ws = tempfile::tempdir().unwrap();
    // "你好" in GBK.
    let out = sh(ws.path(), r"printf 'gbk:\xc4\xe3\xba\xc3'")
        .await
        .unwrap();
    assert!(out.starts_with("gbk:"), "{out}");
    assert!(out.contains('\u{FFFD}'), "{out}");
}

#[tokio::test]
async fn bash_never_passes_bub_secrets_from_the_workspace_env() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join(".env"),
        "GH_TOKEN=gh-visible\nBUB_TELEGRAM_TOKEN=tg-secret\nBUB_API_KEY=api-secret\n\
         OPENROUTER_API_KEY=or-secret\nBUB_DISCORD_PROXY=http://u:p@proxy\n",
    )
    .unwrap();
    let out = sh(ws.path(), "printenv").await.unwrap();
    assert!(out.contains("GH_TOKEN=gh-visible"), "{out}");
    for secret in ["tg-secret", "api-secret", "or-secret", "u:p@proxy"] {
        assert!(!out.contains(secret), "{secret} leaked: {out}");
    }
    for var in bub::config::secret_vars() {
        assert!(!out.contains(&format!("{var}=")), "{var} leaked: {out}");
    }
}

// ---------------------------------------------------------------------------------------------
// fs.read / fs.write / fs.edit

fn read_args(path: &str, offset: Option<i64>, limit: Option<i64>) -> ReadArgs {
    ReadArgs {
        path: path.into(),
        offset,
        limit,
    }
}

#[tokio::test]
async fn read_offset_limit_keeps_line_endings() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("f.txt"), "l0\nl1\r\nl2\nl3\n").unwrap();
    let read = |o, l| fs::read(read_args("f.txt", o, l), ws.path());
    assert_eq!(read(None, None).await.unwrap(), "l0\nl1\r\nl2\nl3\n");
    assert_eq!(read(Some(1), Some(2)).await.unwrap(), "l1\r\nl2\n");
    assert_eq!(read(Some(3), Some(10)).await.unwrap(), "l3\n");
    assert_eq!(read(Some(9), None).await.unwrap(), "");
    assert!(
        read(Some(-1), None)
            .await
            .unwrap_err()
            .to_string()
            .contains("offset must be >= 0")
    );
    assert!(
        read(None, Some(0))
            .await
            .unwrap_err()
            .to_string()
            .contains("limit must be >= 1")
    );

    std::fs::write(ws.path().join("g.txt"), "a\nb").unwrap();
    let out = fs::read(read_args("g.txt", Some(1), None), ws.path())
        .await
        .unwrap();
    assert_eq!(out, "b");
}

#[tokio::test]
async fn read_refuses_binary_and_reports_missing() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("bin"), [0x7f, b'E', b'L', b'F', 0, 1, 2]).unwrap();
    let err = fs::read(read_args("bin", None, None), ws.path())
        .await
        .unwrap_err();
    let bin = ws.path().join("bin");
    assert_eq!(
        err.message(),
        format!("binary file: {} (7 bytes); not shown", bin.display())
    );
    std::fs::write(ws.path().join("gbk"), b"\xc4\xe3\xba\xc3\n").unwrap();
    let err = fs::read(read_args("gbk", None, None), ws.path())
        .await
        .unwrap_err();
    assert!(err.message().starts_with("binary file:"), "{err}");
    let err = fs::read(read_args("nope.txt", None, None), ws.path())
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        format!("file not found: {}", ws.path().join("nope.txt").display())
    );
}

#[tokio::test]
async fn read_caps_huge_files_with_a_note() {
    let ws = tempfile::tempdir().unwrap();
    let line = format!("{}\n", "x".repeat(99)); // 100 bytes
    std::fs::write(ws.path().join("big.txt"), line.repeat(10_000)).unwrap();
    let out = fs::read(read_args("big.txt", None, None), ws.path())
        .await
        .unwrap();
    assert!(out.len() <= fs::READ_CAP + 200, "{}", out.len());
    assert!(
        out.ends_with("continue with offset=2621]"),
        "{}",
        &out[out.len() - 100..]
    );
    let rest = fs::read(read_args("big.txt", Some(9_999), None), ws.path())
        .await
        .unwrap();
    assert_eq!(rest, line);
}

#[tokio::test]
async fn write_creates_parent_dirs() {
    let ws = tempfile::tempdir().unwrap();
    let args = WriteArgs {
        path: "a/b/c.txt".into(),
        content: "héllo\n".into(),
    };
    let out = fs::write(args, ws.path()).await.unwrap();
    let path = ws.path().join("a/b/c.txt");
    assert_eq!(out, format!("wrote: {} (7 bytes)", path.display()));
    assert_eq!(std::fs::read_to_string(path).unwrap(), "héllo\n");
}

fn edit_args(old: &str, new: &str, start_line: Option<i64>, replace_all: Option<bool>) -> EditArgs {
    EditArgs {
        path: "e.txt".into(),
        old: old.into(),
        new: new.into(),
        start_line,
        replace_all,
    }
}

#[tokio::test]
async fn edit_replaces_exactly_without_stray_newlines() {
    let ws = tempfile::tempdir().unwrap();
    let path = ws.path().join("e.txt");
    let content = || std::fs::read_to_string(&path).unwrap();

    std::fs::write(&path, "x = 1\ny = 1\nz = 1\n").unwrap();
    let out = fs::edit(edit_args("x = 1", "x = 9", None, None), ws.path())
        .await
        .unwrap();
    assert_eq!(out, format!("edited: {}", path.display()));
    assert_eq!(
        content(),
        "x = 9\ny = 1\nz = 1\n",
        "no newline added at start, none lost at end"
    );

    // start_line narrows the search to lines 2.. (0-based).
    fs::edit(edit_args("= 1", "= 7", Some(2), None), ws.path())
        .await
        .unwrap();
    assert_eq!(content(), "x = 9\ny = 1\nz = 7\n");

    std::fs::write(&path, "a\nb").unwrap();
    fs::edit(edit_args("b", "c", Some(1), None), ws.path())
        .await
        .unwrap();
    assert_eq!(content(), "a\nc", "no trailing newline added");
}

#[tokio::test]
async fn edit_errors_and_replace_all() {
    let ws = tempfile::tempdir().unwrap();
    let path = ws.path().join("e.txt");
    std::fs::write(&path, "foo\nfoo\nbar\n").unwrap();

    let err = fs::edit(edit_args("foo", "x", None, None), ws.path())
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        format!(
            "'foo' occurs 2 times in {}; add context or set replace_all=true",
            path.display()
        )
    );
    let err = fs::edit(edit_args("foo", "x", Some(2), None), ws.path())
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        format!("'foo' not found in {} from line 2", path.display())
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "foo\nfoo\nbar\n",
        "file untouched"
    );

    let out = fs::edit(edit_args("foo", "x", None, Some(true)), ws.path())
        .await
        .unwrap();
    assert_eq!(out, format!("edited: {} (2 replacements)", path.display()));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\nx\nbar\n");

    let args = EditArgs {
        path: "missing.txt".into(),
        ..edit_args("a", "b", None, None)
    };
    let err = fs::edit(args, ws.path()).await.unwrap_err();
    assert_eq!(
        err.message(),
        format!(
            "file not found: {}",
            ws.path().join("missing.txt").display()
        )
    );
}

// ---------------------------------------------------------------------------------------------
// fs.glob / fs.grep

fn tree(ws: &Path) {
    for (p, c) in [
        ("src/a.rs", "fn main() {}\n// Hello world\n"),
        ("src/b/c.rs", "// hello there\n"),
        ("src/notes.md", "hello docs\n"),
        ("target/x.rs", "hello ignored\n"),
        (".hidden/h.rs", "hello hidden\n"),
        (".gitignore", "target/\n"),
    ] {
        let path = ws.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
    std::fs::write(ws.join("src/blob.bin"), b"hello\0binary").unwrap();
}

fn glob_args(pattern: &str, path: Option<&str>) -> GlobArgs {
    GlobArgs {
        pattern: pattern.into(),
        path: path.map(Into::into),
    }
}

#[tokio::test]
async fn glob_respects_gitignore_and_hidden() {
    let ws = tempfile::tempdir().unwrap();
    tree(ws.path());
    let glob = |p, base| fs::glob(glob_args(p, base), ws.path());
    assert_eq!(glob("**/*.rs", None).await.unwrap(), "src/a.rs\nsrc/b/c.rs");
    assert_eq!(glob("*.rs", None).await.unwrap(), "src/a.rs\nsrc/b/c.rs");
    assert_eq!(glob("src/*.rs", None).await.unwrap(), "src/a.rs");
    assert_eq!(glob("*.rs", Some("src/b")).await.unwrap(), "src/b/c.rs");
    assert_eq!(glob("*.py", None).await.unwrap(), "(no matches)");
    assert!(
        glob("*.rs", Some("nope"))
            .await
            .unwrap_err()
            .to_string()
            .starts_with("path not found:")
    );
}

#[tokio::test]
async fn glob_caps_the_listing() {
    let ws = tempfile::tempdir().unwrap();
    for i in 0..520 {
        std::fs::write(ws.path().join(format!("f{i:03}.txt")), "").unwrap();
    }
    let out = fs::glob(glob_args("*.txt", None), ws.path()).await.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 501);
    assert_eq!(lines[0], "f000.txt");
    assert!(
        lines[500].contains("20 more matches not shown"),
        "{}",
        lines[500]
    );
}

fn grep_args(pattern: &str, path: Option<&str>, glob: Option<&str>, ic: bool) -> GrepArgs {
    GrepArgs {
        pattern: pattern.into(),
        path: path.map(Into::into),
        glob: glob.map(Into::into),
        ignore_case: Some(ic),
    }
}

#[tokio::test]
async fn grep_matches_with_filters() {
    let ws = tempfile::tempdir().unwrap();
    tree(ws.path());
    let grep = |p, path, g, ic| fs::grep(grep_args(p, path, g, ic), ws.path());
    assert_eq!(
        grep("hello", None, None, false).await.unwrap(),
        "src/b/c.rs:1: // hello there\nsrc/notes.md:1: hello docs"
    );
    assert_eq!(
        grep("hello", None, Some("*.rs"), true).await.unwrap(),
        "src/a.rs:2: // Hello world\nsrc/b/c.rs:1: // hello there"
    );
    assert_eq!(
        grep("hello", Some("src/notes.md"), None, false)
            .await
            .unwrap(),
        "src/notes.md:1: hello docs"
    );
    assert_eq!(
        grep("nothing-like-this", None, None, false).await.unwrap(),
        "(no matches)"
    );
    let err = grep("(unclosed", None, None, false).await.unwrap_err();
    assert!(err.message().starts_with("invalid regex:"), "{err}");
}

#[tokio::test]
async fn grep_caps_matches() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("many.txt"), "match\n".repeat(250)).unwrap();
    let out = fs::grep(grep_args("match", None, None, false), ws.path())
        .await
        .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 201);
    assert_eq!(lines[199], "many.txt:200: match");
    assert!(
        lines[200].contains("stopped after 200 matches"),
        "{}",
        lines[200]
    );
}

// ---------------------------------------------------------------------------------------------
// Through the registry

#[tokio::test]
async fn tools_are_registered_and_callable() {
    let tools = ToolEnv::new("cli:reg", Authority::terminal(), |_| {});
    for name in [
        "bash", "fs.read", "fs.write", "fs.edit", "fs.glob", "fs.grep",
    ] {
        assert!(
            tools.ctx.registry().get(name).is_some(),
            "{name} registered"
        );
    }
    let args = json!({"cmd": "echo $BUB_SESSION_ID", "timeout_seconds": "5"});
    assert_eq!(tools.call("bash", args).await.unwrap(), "cli:reg");
    let args = json!({"path": "n.txt", "content": "1\n2\n3\n"});
    tools.call("fs_write", args).await.unwrap();
    let args = json!({"path": "n.txt", "offset": "1", "limit": 1});
    assert_eq!(tools.call("fs_read", args).await.unwrap(), "2\n");
    let err = tools.call("fs.edit", json!({"path": "n.txt", "old": "2"}));
    assert_eq!(
        err.await.unwrap_err().to_string(),
        "missing required argument: new"
    );
}
