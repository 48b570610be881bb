//! End-to-end tests of `bub run` (and the chat binary's non-interactive path): the real binary,
//! the real model client, a fake OpenAI-compatible server on 127.0.0.1, a temporary BUB_HOME and
//! workspace. Assertions are on what crossed the wire, what was printed and what is on disk.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use bub::tape::md5_hex;
use serde_json::{Value, json};
use support::fake_openai::{self, FakeOpenAi};

struct Env {
    _dir: tempfile::TempDir,
    home: PathBuf,
    workspace: PathBuf,
    fake: FakeOpenAi,
    extra: Vec<(String, String)>,
}

impl Env {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let fake = fake_openai::start().await;
        Self {
            _dir: dir,
            home,
            workspace,
            fake,
            extra: Vec::new(),
        }
    }

    fn set(&mut self, key: &str, value: &str) {
        self.extra.push((key.into(), value.into()));
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_bub"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.join("user"))
            .env("BUB_HOME", &self.home)
            .env("BUB_MODEL", "openai:test-model")
            .env("BUB_API_KEY", "sk-test-secret")
            .env("BUB_API_BASE", self.fake.base_url())
            .env("BUB_LOG_LEVEL", "warn")
            .current_dir(&self.workspace)
            .args(args)
            .kill_on_drop(true);
        for (k, v) in &self.extra {
            cmd.env(k, v);
        }
        cmd
    }

    async fn run(&self, args: &[&str]) -> Output {
        let fut = self.command(args).output();
        tokio::time::timeout(Duration::from_secs(60), fut)
            .await
            .expect("bub finished in time")
            .unwrap()
    }

    /// Every entry of every tape under BUB_HOME.
    fn tape_entries(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(self.home.join("tapes")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "jsonl") {
                out.extend(read_jsonl(&path));
            }
        }
        out
    }
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_call_writes_a_file_and_the_answer_is_printed() {
    let env = Env::new().await;
    env.fake.push_tool_calls(&[(
        "fs_write",
        json!({"path": "notes/hello.txt", "content": "hi there\n"}),
    )]);
    env.fake.push_text("Wrote the file.");
    let out = env.run(&["run", "please write hello.txt"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Wrote the file.");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("notes/hello.txt")).unwrap(),
        "hi there\n"
    );

    let requests = env.fake.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first["model"], "test-model");
    let tool_names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        tool_names.contains(&"fs_write") && tool_names.contains(&"bash"),
        "{tool_names:?}"
    );
    let first_msgs = messages(first);
    assert_eq!(first_msgs[0]["role"], "system");
    assert_eq!(
        first_msgs.last().unwrap()["content"],
        "please write hello.txt"
    );

    // The second call carries the tool call, its result, and the follow-up prompt.
    let second = messages(&requests[1]);
    let tool_msg = second
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result sent back");
    assert!(
        tool_msg["content"].as_str().unwrap().starts_with("wrote:"),
        "{tool_msg}"
    );
    assert_eq!(tool_msg["tool_call_id"], "call_1");
    assert_eq!(second.last().unwrap()["content"], "Continue the task.");

    let kinds: Vec<String> = env
        .tape_entries()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    for kind in ["anchor", "message", "tool_call", "tool_result", "event"] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "tape has no {kind}: {kinds:?}"
        );
    }
    let tape_text = env
        .tape_entries()
        .iter()
        .map(|e| e.to_string())
        .collect::<String>();
    assert!(
        !tape_text.contains("sk-test-secret"),
        "the API key must never reach the tape"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_command_falls_back_to_the_model() {
    let env = Env::new().await;
    env.fake
        .push_text("The command failed because the file is missing.");
    let out = env.run(&["run", ",cat does-not-exist.txt"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "The command failed because the file is missing."
    );
    let requests = env.fake.requests();
    assert_eq!(requests.len(), 1);
    let prompt = messages(&requests[0]).last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        prompt.starts_with("<command name=\"bash\" status=\"error\">"),
        "{prompt}"
    );
    assert!(prompt.contains("does-not-exist.txt"), "{prompt}");
    let commands: Vec<Value> = env
        .tape_entries()
        .into_iter()
        .filter(|e| e["payload"]["name"] == "command")
        .collect();
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["payload"]["data"]["status"], "error");
    assert_eq!(commands[0]["payload"]["data"]["origin"], "human");
}

#[tokio::test(flavor = "multi_thread")]
async fn comma_command_runs_without_the_model() {
    let env = Env::new().await;
    let out = env.run(&["run", ",help"]).await;
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("Commands start with ','"),
        "{}",
        stdout(&out)
    );
    let out = env.run(&["run", ",echo shell works"]).await;
    assert_eq!(stdout(&out).trim(), "shell works");
    assert!(
        env.fake.requests().is_empty(),
        "no model call for comma commands"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn history_survives_a_new_process() {
    let env = Env::new().await;
    env.fake.push_text("Nice to meet you, Ann.");
    assert!(env.run(&["run", "my name is Ann"]).await.status.success());
    env.fake.push_text("Your name is Ann.");
    let out = env.run(&["run", "what is my name?"]).await;
    assert_eq!(stdout(&out).trim(), "Your name is Ann.");
    let requests = env.fake.requests();
    let contents: Vec<String> = messages(&requests[1])
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    let pos = |s: &str| {
        contents
            .iter()
            .position(|c| c == s)
            .unwrap_or_else(|| panic!("{s} missing: {contents:?}"))
    };
    assert!(pos("my name is Ann") < pos("Nice to meet you, Ann."));
    assert!(pos("Nice to meet you, Ann.") < pos("what is my name?"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_have_separate_histories() {
    let env = Env::new().await;
    env.fake.push_text("noted A");
    env.run(&["run", "--session-id", "a", "secret A"]).await;
    env.fake.push_text("noted B");
    env.run(&["run", "--session-id", "b", "hello B"]).await;
    let requests = env.fake.requests();
    let second = serde_json::to_string(&messages(&requests[1])).unwrap();
    assert!(
        !second.contains("secret A"),
        "session b must not see session a: {second}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn model_failure_exits_non_zero_and_is_recorded() {
    let env = Env::new().await;
    env.fake.push_raw(
        400,
        r#"{"error":{"message":"model not found: test-model"}}"#.into(),
        vec![],
    );
    let out = env.run(&["run", "hello"]).await;
    assert_eq!(out.status.code(), Some(1), "stdout: {}", stdout(&out));
    assert!(
        stderr(&out).contains("Error:") && stderr(&out).contains("model not found"),
        "{}",
        stderr(&out)
    );
    let entries = env.tape_entries();
    assert!(
        entries.iter().any(|e| e["kind"] == "error"),
        "error recorded on the tape"
    );
    assert!(
        entries
            .iter()
            .any(|e| e["kind"] == "message" && e["payload"]["content"] == "hello"),
        "the user's input is kept even though the call failed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_the_tape_cannot_record_fails_the_turn_before_the_model() {
    let env = Env::new().await;
    env.fake.push_text("First answer.");
    assert!(env.run(&["run", "hello"]).await.status.success());
    let tapes: Vec<PathBuf> = std::fs::read_dir(env.home.join("tapes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    let [tape] = tapes.as_slice() else {
        panic!("one tape: {tapes:?}")
    };
    let size = std::fs::metadata(tape).unwrap().len();
    // RLIMIT_FSIZE at the tape's length: every append fails with EFBIG, even for root (chmod
    // would not stop root). Without SIGXFSZ ignored, the signal would kill bub instead.
    let mut cmd = env.command(&["run", "are you there?"]);
    // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: size,
                rlim_max: size,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("bub finished in time")
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.lines().any(|l| l
            == "Error: could not record your message on the tape: File too large (os error 27)"),
        "{err}"
    );
    assert_eq!(env.fake.requests().len(), 1, "the model was not called");
    assert_eq!(std::fs::metadata(tape).unwrap().len(), size);
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_api_key_is_a_clear_turn_error() {
    let mut env = Env::new().await;
    env.set("BUB_MODEL", "openrouter:some/model");
    env.set("BUB_API_KEY", "");
    env.set("BUB_API_BASE", "https://openrouter.invalid/api/v1");
    let out = env.run(&["run", "hello"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).to_lowercase().contains("api key"),
        "{}",
        stderr(&out)
    );
    // Comma commands still work without a key.
    let out = env.run(&["run", ",echo ok"]).await;
    assert_eq!(stdout(&out).trim(), "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn configuration_error_exits_2_naming_the_variable() {
    let mut env = Env::new().await;
    env.set("BUB_MAX_STEPS", "lots");
    let out = env.run(&["run", "hello"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("BUB_MAX_STEPS"), "{}", stderr(&out));
    assert!(env.fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_duration_beyond_its_maximum_exits_2_naming_the_variable() {
    for (var, value) in [
        ("BUB_SESSION_IDLE_SECONDS", "1e20"),
        ("BUB_MESSAGE_DEBOUNCE_SECONDS", "1e19"),
    ] {
        let mut env = Env::new().await;
        env.set(var, value);
        let out = env.run(&["run", "hi"]).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(err.contains(var) && err.contains("at most"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(env.fake.requests().is_empty());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_tool_arguments_and_unknown_tools_reach_the_model_as_errors() {
    let env = Env::new().await;
    env.fake.push_raw(
        200,
        json!({"id":"x","object":"chat.completion","created":1,"model":"test-model","choices":[{"index":0,
            "finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"c1","type":"function","function":{"name":"fs_read","arguments":"{not json"}},
                {"id":"c2","type":"function","function":{"name":"no_such_tool","arguments":"{}"}}]}}]})
        .to_string(),
        vec![("content-type".into(), "application/json".into())],
    );
    env.fake.push_text("recovered");
    let out = env.run(&["run", "go"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "recovered");
    let second = messages(&env.fake.requests()[1]);
    let tools: Vec<String> = second
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tools.len(), 2, "{second:?}");
    assert!(tools[0].contains("not valid JSON"), "{}", tools[0]);
    assert!(
        tools[1].contains("unknown tool 'no_such_tool'"),
        "{}",
        tools[1]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finishing_on_the_last_step_is_not_an_error() {
    let mut env = Env::new().await;
    env.set("BUB_MAX_STEPS", "1");
    env.fake.push_text("done in one");
    let out = env.run(&["run", "quick"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "done in one");
}

#[tokio::test(flavor = "multi_thread")]
async fn step_bound_stops_an_endless_tool_loop() {
    let mut env = Env::new().await;
    env.set("BUB_MAX_STEPS", "2");
    env.fake.push_tool_calls(&[("tape_info", json!({}))]);
    env.fake.push_tool_calls(&[("tape_info", json!({}))]);
    let out = env.run(&["run", "loop"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("max_steps_reached=2"),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.fake.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn assistant_comma_command_output_is_fed_back() {
    let env = Env::new().await;
    env.fake.push_text("Let me check.\n,echo from-assistant");
    env.fake.push_text("The output was from-assistant.");
    let out = env.run(&["run", "check"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // The visible texts of both steps, joined by a blank line (reference: "v1\n\nv2").
    assert_eq!(
        stdout(&out).trim(),
        "Let me check.\n\nThe output was from-assistant."
    );
    let second = messages(&env.fake.requests()[1]);
    let prompt = second.last().unwrap()["content"].as_str().unwrap();
    assert_eq!(
        prompt,
        "<command name=\"bash\" status=\"ok\">\nfrom-assistant\n</command>"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_flag_restricts_the_offered_tools() {
    let env = Env::new().await;
    env.fake.push_text("ok");
    let out = env
        .run(&["run", "--tools", "fs.read, tape_info", "hi"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let names: Vec<String> = env.fake.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["fs_read", "tape_info"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn handoff_summary_is_carried_into_the_next_context() {
    let env = Env::new().await;
    env.fake.push_text("first answer");
    env.run(&["run", "old topic"]).await;
    let out = env
        .run(&[
            "run",
            ",tape.handoff name=phase-2 summary='we chose sqlite'",
        ])
        .await;
    assert!(
        stdout(&out).contains("handoff created: phase-2"),
        "{}",
        stdout(&out)
    );
    env.fake.push_text("ok");
    env.run(&["run", "new topic"]).await;
    let last = serde_json::to_string(&messages(env.fake.requests().last().unwrap())).unwrap();
    assert!(last.contains("we chose sqlite"), "summary missing: {last}");
    assert!(
        !last.contains("old topic"),
        "history before the anchor must leave the context: {last}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_reads_piped_input_and_quits() {
    let env = Env::new().await;
    let mut cmd = env.command(&["chat"]);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b",echo chat-works\n,quit\n").await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("chat-works"), "{text}");
    assert!(text.contains("Bye."), "{text}");
    assert!(env.fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn model_timeout_is_a_clear_error_on_stderr_and_tape() {
    let mut env = Env::new().await;
    env.set("BUB_MODEL_TIMEOUT_SECONDS", "0.2");
    env.fake.set_latency(Duration::from_secs(5));
    let out = env.run(&["run", "are you there?"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("model_timeout: no response within 0.2s"),
        "{}",
        stderr(&out)
    );
    let entries = env.tape_entries();
    let error = entries
        .iter()
        .find(|e| e["kind"] == "error")
        .expect("error on the tape");
    assert!(error.to_string().contains("model_timeout"), "{error}");
    assert!(
        entries
            .iter()
            .any(|e| e["payload"]["content"] == "are you there?")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn session_id_comes_from_the_environment_unless_given() {
    let mut env = Env::new().await;
    env.set("BUB_SESSION_ID", "parent-session");
    env.run(&["run", ",echo one"]).await;
    env.run(&["run", "--session-id", "child", ",echo two"])
        .await;
    let tapes = |session: &str| {
        let name = format!("bub%3A{}.jsonl", &md5_hex(session)[..16]);
        std::fs::read_dir(env.home.join("tapes"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().ends_with(&name))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .unwrap_or_default()
    };
    assert!(tapes("parent-session").contains("echo one"));
    assert!(!tapes("parent-session").contains("echo two"));
    assert!(tapes("child").contains("echo two"));
}

#[tokio::test(flavor = "multi_thread")]
async fn workspace_flag_expands_the_home_directory() {
    let env = Env::new().await;
    let project = env.home.join("user").join("project");
    std::fs::create_dir_all(&project).unwrap();
    let out = env.run(&["run", "-w", "~/project", ",pwd"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        project.canonicalize().unwrap().to_string_lossy()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_subcommand_and_missing_workspace_fail_clearly() {
    let env = Env::new().await;
    let out = env.run(&["telegram"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unrecognized subcommand 'telegram'"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["run", "-w", "/definitely/missing", "hi"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--workspace") && stderr(&out).contains("does not exist"),
        "{}",
        stderr(&out)
    );
    // `bub send` without a token: a configuration error naming the variable.
    let out = env.run(&["send", "telegram", "1", "hi"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("BUB_TELEGRAM_TOKEN"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["message"]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "no channel enabled is a configuration error"
    );
    assert!(
        stderr(&out).contains("BUB_TELEGRAM_ENABLED"),
        "{}",
        stderr(&out)
    );
    let mut env = env;
    env.set("BUB_DISCORD_ENABLED", "true");
    let out = env.run(&["message"]).await;
    assert_eq!(out.status.code(), Some(2), "enabled without token");
    assert!(
        stderr(&out).contains("BUB_DISCORD_TOKEN"),
        "{}",
        stderr(&out)
    );
}

/// The pids of `pid`'s child processes (from `/proc`).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_interrupts_the_turn_kills_its_command_and_is_recorded() {
    let env = Env::new().await;
    let mut child = env
        .command(&["run", ",bash cmd='sleep 30'"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    // The shell command is running once bub has a child process.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let shell = loop {
        if let Some(&shell) = children(pid).first() {
            break shell;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("bub stops after SIGINT")
        .unwrap();
    assert_eq!(status.code(), Some(130));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{shell}")).exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shell command was killed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let interrupted: Vec<Value> = env
        .tape_entries()
        .into_iter()
        .filter(|e| e["payload"]["name"] == "turn.interrupted")
        .collect();
    assert_eq!(interrupted.len(), 1);
    assert_eq!(interrupted[0]["payload"]["data"]["by"], "SIGINT");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_records_its_steps_in_order() {
    let env = Env::new().await;
    env.fake.push_text("Hello back.");
    let out = env.run(&["run", "hello"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let steps: Vec<String> = env
        .tape_entries()
        .iter()
        .map(|e| {
            let kind = e["kind"].as_str().unwrap();
            match kind {
                "event" | "anchor" => format!("{kind} {}", e["payload"]["name"].as_str().unwrap()),
                "message" => format!("{kind} {}", e["payload"]["role"].as_str().unwrap()),
                _ => kind.to_owned(),
            }
        })
        .collect();
    assert_eq!(
        steps,
        [
            "anchor session/start",
            "event handoff",
            "event loop.step.start",
            "system",
            "message user",
            "event run",
            "message assistant",
            "event loop.step.finish",
            "event loop.result",
        ]
    );
    let messages = messages(&env.fake.requests()[0]);
    assert_eq!(messages.last().unwrap()["content"], "hello");
}
