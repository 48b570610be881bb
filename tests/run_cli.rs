//! End-to-end tests of `bub run` (and the chat binary's non-interactive path): the real binary,
//! the real model client, a fake OpenAI-compatible server on 127.0.0.1, a temporary BUB_HOME and
//! workspace. Assertions are on what crossed the wire, what was printed and what is on disk.

use crate::support;

use std::time::Duration;

use bub::tape::md5_hex;
use serde_json::{Value, json};
use support::bub_env::{Env, assert_exit, limit_file_size, stderr, stdout};
use support::fake_openai::tool_names;
use support::prompt_cache::said;
use support::wait::{WAIT, bounded, wait_for, wait_until};

fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().cloned().unwrap_or_default()
}

/// The fake model's next answer is a 400 (`model not found: test-model`).
fn refuse_the_model(env: &Env) {
    env.model.push_raw(
        400,
        r#"{"error":{"message":"model not found: test-model"}}"#.into(),
        vec![],
    );
}

/// A remote OpenAI-compatible server and no key for it.
fn without_a_key(env: &mut Env) {
    env.set("BUB_MODEL", "openrouter:some/model");
    env.set("BUB_API_KEY", "");
    env.set("BUB_API_BASE", "https://openrouter.invalid/api/v1");
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_call_writes_a_file_and_the_answer_is_printed() {
    let env = Env::cli().await;
    env.model.push_tool_calls(&[(
        "fs_write",
        json!({"path": "notes/hello.txt", "content": "hi there\n"}),
    )]);
    env.model.push_text("Wrote the file.");
    let out = env.run(&["run", "please write hello.txt"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Wrote the file.");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("notes/hello.txt")).unwrap(),
        "hi there\n"
    );

    let requests = env.model.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first["model"], "test-model");
    let names = tool_names(first);
    assert!(
        names.iter().any(|n| n == "fs_write") && names.iter().any(|n| n == "bash"),
        "{names:?}"
    );
    for command in ["help", "tools", "quit"] {
        assert!(
            !names.iter().any(|n| n == command),
            "a person's command offered: {names:?}"
        );
    }
    let first_msgs = messages(first);
    assert_eq!(first_msgs[0]["role"], "system");
    assert_eq!(
        said(first_msgs.last().unwrap()["content"].as_str().unwrap()),
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
    assert!(
        !env.tape_text().contains("sk-test-secret"),
        "the API key must never reach the tape"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_command_falls_back_to_the_model() {
    let env = Env::cli().await;
    env.model
        .push_text("The command failed because the file is missing.");
    let out = env.run(&["run", ",cat does-not-exist.txt"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "The command failed because the file is missing."
    );
    let prompts = env.model_prompts();
    assert_eq!(prompts.len(), 1);
    let prompt = &prompts[0];
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

/// When the model a failed command is handed to cannot answer (no key, an error), the user
/// still sees the command's own error, then the model's.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_commands_error_is_shown_when_the_model_cannot_answer() {
    let mut env = Env::cli().await;
    refuse_the_model(&env);
    let out = env.run(&["run", ",cat does-not-exist.txt"]).await;
    assert_exit(&out, 1, "model not found");
    assert!(
        stdout(&out).contains("does-not-exist.txt: No such file or directory"),
        "stdout: {}",
        stdout(&out)
    );
    // No key for a remote server: the command runs, the model is never reached.
    without_a_key(&mut env);
    let out = env.run(&["run", ",cat also-missing.txt"]).await;
    assert_exit(&out, 1, "no API key for provider openrouter");
    assert!(
        stdout(&out).contains("also-missing.txt: No such file or directory"),
        "stdout: {}",
        stdout(&out)
    );
    assert_eq!(
        env.model.requests().len(),
        1,
        "only the first run asked the model"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn comma_command_runs_without_the_model() {
    let env = Env::cli().await;
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
        env.model.requests().is_empty(),
        "no model call for comma commands"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn history_survives_a_new_process() {
    let env = Env::cli().await;
    env.model.push_text("Nice to meet you, Ann.");
    assert!(env.run(&["run", "my name is Ann"]).await.status.success());
    env.model.push_text("Your name is Ann.");
    let out = env.run(&["run", "what is my name?"]).await;
    assert_eq!(stdout(&out).trim(), "Your name is Ann.");
    let requests = env.model.requests();
    let contents: Vec<String> = messages(&requests[1])
        .iter()
        .map(|m| said(m["content"].as_str().unwrap_or_default()))
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
    let env = Env::cli().await;
    env.model.push_text("noted A");
    env.run(&["run", "--session-id", "a", "secret A"]).await;
    env.model.push_text("noted B");
    env.run(&["run", "--session-id", "b", "hello B"]).await;
    let requests = env.model.requests();
    let second = serde_json::to_string(&messages(&requests[1])).unwrap();
    assert!(
        !second.contains("secret A"),
        "session b must not see session a: {second}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn model_failure_exits_non_zero_and_is_recorded() {
    let env = Env::cli().await;
    refuse_the_model(&env);
    let out = env.run(&["run", "hello"]).await;
    assert_exit(&out, 1, "model not found");
    assert!(stderr(&out).contains("Error:"), "{}", stderr(&out));
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
    let env = Env::cli().await;
    env.model.push_text("First answer.");
    assert!(env.run(&["run", "hello"]).await.status.success());
    let tapes = env.tape_paths();
    let [tape] = tapes.as_slice() else {
        panic!("one tape: {tapes:?}")
    };
    let size = std::fs::metadata(tape).unwrap().len();
    // RLIMIT_FSIZE at the tape's length: every append fails with EFBIG, even for root (chmod
    // would not stop root).
    let mut cmd = env.command(&["run", "are you there?"]);
    limit_file_size(&mut cmd, size);
    let out = bounded(cmd.output()).await.unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.lines().any(|l| l
            == "Error: could not record your message on the tape: File too large (os error 27)"),
        "{err}"
    );
    assert_eq!(env.model.requests().len(), 1, "the model was not called");
    assert_eq!(std::fs::metadata(tape).unwrap().len(), size);
}

/// A base URL override on another host still needs a key (only local servers do without), and
/// the start-up check says so before any turn; comma commands still work without one.
#[tokio::test(flavor = "multi_thread")]
async fn a_remote_server_without_a_key_is_refused_at_start() {
    let mut env = Env::cli().await;
    without_a_key(&mut env);
    let out = env.run(&["run", "hello"]).await;
    assert_exit(
        &out,
        2,
        "BUB_API_KEY (or LLM_API_KEY / OPENROUTER_API_KEY): not set",
    );
    assert!(env.tape_paths().is_empty());
    // Comma commands still work without a key.
    let out = env.run(&["run", ",echo ok"]).await;
    assert_eq!(stdout(&out).trim(), "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn configuration_error_exits_2_naming_the_variable() {
    let mut env = Env::cli().await;
    env.set("BUB_MAX_STEPS", "lots");
    let out = env.run(&["run", "hello"]).await;
    assert_exit(&out, 2, "BUB_MAX_STEPS");
    assert!(env.model.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_duration_beyond_its_maximum_exits_2_naming_the_variable() {
    for (var, value) in [
        ("BUB_SESSION_IDLE_SECONDS", "1e20"),
        ("BUB_MESSAGE_DEBOUNCE_SECONDS", "1e19"),
    ] {
        let mut env = Env::cli().await;
        env.set(var, value);
        let out = env.run(&["run", "hi"]).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(err.contains(var) && err.contains("at most"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(env.model.requests().is_empty());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_tool_arguments_and_unknown_tools_reach_the_model_as_errors() {
    let env = Env::cli().await;
    env.model.push_raw(
        200,
        json!({"id":"x","object":"chat.completion","created":1,"model":"test-model","choices":[{"index":0,
            "finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"c1","type":"function","function":{"name":"fs_read","arguments":"{not json"}},
                {"id":"c2","type":"function","function":{"name":"no_such_tool","arguments":"{}"}}]}}]})
        .to_string(),
        vec![("content-type".into(), "application/json".into())],
    );
    env.model.push_text("recovered");
    let out = env.run(&["run", "go"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "recovered");
    let second = messages(&env.model.requests()[1]);
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
async fn an_answer_or_a_tool_call_cut_at_the_output_limit_is_never_taken_as_complete() {
    let mut env = Env::cli().await;
    let long = "All work and no play makes Jack a dull boy. ".repeat(40);
    // The default leaves room for a long answer: nothing is cut.
    env.model.push_text(long.clone());
    let out = env.run(&["run", "write a lot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), long.trim());
    assert_eq!(env.model.requests()[0]["max_tokens"], 8192);

    env.set("BUB_MAX_TOKENS", "50");
    // A file's content cut half-way: the call is refused, not written.
    env.model.push_raw(
        200,
        json!({"id":"x","object":"chat.completion","created":1,"model":"test-model","choices":[{"index":0,
            "finish_reason":"length","message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"c1","type":"function","function":{"name":"fs_write",
                 "arguments":"{\"path\": \"big.txt\", \"content\": \"All work and"}}]}}]})
        .to_string(),
        vec![("content-type".into(), "application/json".into())],
    );
    env.model.push_text(long.clone());
    let out = env.run(&["run", "write it to big.txt"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let requests = env.model.requests();
    assert_eq!(requests[1]["max_tokens"], 50);
    let result = messages(&requests[2])
        .into_iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    let result = result["content"].as_str().unwrap();
    assert!(
        result.contains("cut off at the output limit of 50 tokens"),
        "{result}"
    );
    assert!(!env.workspace.join("big.txt").exists());
    // The fake stopped the answer at 50 tokens: the user is told.
    let printed = stdout(&out);
    assert!(
        printed.starts_with("All work and no play") && printed.len() < 400,
        "{printed}"
    );
    assert!(
        printed.trim_end().ends_with(
            "[Cut off: the answer reached the output limit of 50 tokens (BUB_MAX_TOKENS).]"
        ),
        "{printed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finishing_on_the_last_step_is_not_an_error() {
    let mut env = Env::cli().await;
    env.set("BUB_MAX_STEPS", "1");
    env.model.push_text("done in one");
    let out = env.run(&["run", "quick"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "done in one");
}

#[tokio::test(flavor = "multi_thread")]
async fn step_bound_stops_an_endless_tool_loop() {
    let mut env = Env::cli().await;
    env.set("BUB_MAX_STEPS", "2");
    env.model.push_tool_calls(&[("tape_info", json!({}))]);
    env.model.push_tool_calls(&[("tape_info", json!({}))]);
    let out = env.run(&["run", "loop"]).await;
    assert_exit(&out, 1, "max_steps_reached=2");
    assert_eq!(env.model.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn assistant_comma_command_output_is_fed_back() {
    let env = Env::cli().await;
    env.model.push_text("Let me check.\n,echo from-assistant");
    env.model.push_text("The output was from-assistant.");
    let out = env.run(&["run", "check"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // The visible texts of both steps, joined by a blank line (reference: "v1\n\nv2").
    assert_eq!(
        stdout(&out).trim(),
        "Let me check.\n\nThe output was from-assistant."
    );
    let second = messages(&env.model.requests()[1]);
    let prompt = second.last().unwrap()["content"].as_str().unwrap();
    assert_eq!(
        prompt,
        "<command name=\"bash\" status=\"ok\">\nfrom-assistant\n</command>"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_flag_restricts_the_offered_tools() {
    let env = Env::cli().await;
    env.model.push_text("ok");
    let out = env
        .run(&["run", "--tools", "fs.read, tape_info", "hi"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        tool_names(&env.model.requests()[0]),
        ["fs_read", "tape_info"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn handoff_summary_is_carried_into_the_next_context() {
    let env = Env::cli().await;
    env.model.push_text("first answer");
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
    env.model.push_text("ok");
    env.run(&["run", "new topic"]).await;
    let last = serde_json::to_string(&messages(env.model.requests().last().unwrap())).unwrap();
    assert!(last.contains("we chose sqlite"), "summary missing: {last}");
    assert!(
        !last.contains("old topic"),
        "history before the anchor must leave the context: {last}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_reads_piped_input_and_quits() {
    let env = Env::cli().await;
    let out = env
        .run_with_input(&["chat"], ",echo chat-works\n,quit\n")
        .await;
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("chat-works"), "{text}");
    assert!(text.contains("Bye."), "{text}");
    assert!(env.model.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn model_timeout_is_a_clear_error_on_stderr_and_tape() {
    let mut env = Env::cli().await;
    env.set("BUB_MODEL_TIMEOUT_SECONDS", "0.2");
    env.model.set_latency(Duration::from_secs(5));
    let out = env.run(&["run", "are you there?"]).await;
    assert_exit(&out, 1, "model_timeout: no response within 0.2s");
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
    let mut env = Env::cli().await;
    env.set("BUB_SESSION_ID", "parent-session");
    env.run(&["run", ",echo one"]).await;
    env.run(&["run", "--session-id", "child", ",echo two"])
        .await;
    let tapes = |session: &str| {
        let name = format!("bub%3A{}.jsonl", &md5_hex(session)[..16]);
        env.tape_paths()
            .into_iter()
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
    let env = Env::cli().await;
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
    let env = Env::cli().await;
    let out = env.run(&["telegram"]).await;
    assert_exit(&out, 2, "unrecognized subcommand 'telegram'");
    let out = env.run(&["run", "-w", "/definitely/missing", "hi"]).await;
    assert_exit(&out, 2, "does not exist");
    assert!(stderr(&out).contains("--workspace"), "{}", stderr(&out));
    // `bub send` without a token: a configuration error naming the variable.
    let out = env.run(&["send", "telegram", "1", "hi"]).await;
    assert_exit(&out, 2, "BUB_TELEGRAM_TOKEN");
    // No channel enabled is a configuration error.
    let out = env.run(&["message"]).await;
    assert_exit(&out, 2, "BUB_TELEGRAM_ENABLED");
    // Enabled without a token.
    let mut env = env;
    env.set("BUB_DISCORD_ENABLED", "true");
    let out = env.run(&["message"]).await;
    assert_exit(&out, 2, "BUB_DISCORD_TOKEN");
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
    let env = Env::cli().await;
    let mut child = env
        .command(&["run", ",bash cmd='sleep 30'"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    // The shell command is running once bub has a child process.
    let shell = wait_for(WAIT, "the command to start", || {
        children(pid).first().copied()
    })
    .await;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = bounded(child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(130));
    wait_until(WAIT, "the shell command to be killed", || {
        !std::path::Path::new(&format!("/proc/{shell}")).exists()
    })
    .await;
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
    let env = Env::cli().await;
    env.model.push_text("Hello back.");
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
    let messages = messages(&env.model.requests()[0]);
    assert_eq!(
        said(messages.last().unwrap()["content"].as_str().unwrap()),
        "hello"
    );
}

/// A mistyped comma command (no `path`, a key the tool does not take, a word where a
/// `key=value` belongs, a bad number) is answered with the error and the tool's usage line, is
/// recorded on the tape, and costs no model call.
#[tokio::test]
async fn a_mistyped_comma_command_gets_its_usage_line_and_no_model_call() {
    let env = Env::cli().await;
    let usage = "usage: ,fs.read path=PATH [offset=N] [limit=N]";
    for (typed, error) in [
        (",fs.read", "missing required argument: path"),
        (",fs.read path=a.txt lenght=3", "unknown argument: lenght"),
        (",fs.read a.txt", "unexpected argument: a.txt"),
        (
            ",fs.read path=a.txt limit=many",
            "argument limit: expected integer",
        ),
    ] {
        let out = env.run(&["run", typed]).await;
        assert!(out.status.success(), "{typed}: {}", stderr(&out));
        let printed = stdout(&out);
        assert!(
            printed.contains(&format!("could not parse arguments of ,fs.read: {error}"))
                && printed.contains(usage),
            "{typed}: {printed}"
        );
    }
    assert_eq!(env.model.request_count(), 0, "no model call for a typo");
    let recorded: Vec<Value> = env
        .tape_entries()
        .into_iter()
        .filter(|e| e["kind"] == "event" && e["payload"]["name"] == "command")
        .map(|e| e["payload"]["data"].clone())
        .collect();
    assert_eq!(recorded.len(), 4, "{recorded:?}");
    assert!(
        recorded
            .iter()
            .all(|c| c["status"] == "error"
                && c["output"].as_str().unwrap_or_default().ends_with(usage)),
        "{recorded:?}"
    );

    // A tool that runs and fails still goes to the model, as before.
    env.model.push_text("There is no such file.");
    let out = env.run(&["run", ",fs.read path=missing.txt"]).await;
    assert!(
        stdout(&out).contains("There is no such file."),
        "{}",
        stdout(&out)
    );
    assert_eq!(env.model.request_count(), 1);
}

/// On an empty `BUB_HOME` the listings say what is missing and how it comes, not a bare header.
#[tokio::test]
async fn listings_of_an_empty_home_say_how_things_get_there() {
    let env = Env::cli().await;
    for (args, expected) in [
        (
            &["memory", "list"][..],
            "No memory yet. Bub remembers what a message asks it to",
        ),
        (&["jobs", "list"], "No scheduled jobs. Ask Bub in a chat"),
        (
            &["pair", "list"],
            "No pairing requests and no paired users.",
        ),
        (&["usage"], "no model calls recorded yet:"),
    ] {
        let out = env.run(args).await;
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let printed = stdout(&out);
        assert!(printed.starts_with(expected), "{args:?}: {printed}");
        assert_eq!(printed.trim().lines().count(), 1, "{args:?}: {printed}");
    }
}

/// The model provider out of reach: the error names the host and port and whether a proxy
/// (from the environment's rules) was used, without the proxy's credentials.
#[tokio::test]
async fn an_unreachable_model_provider_is_named_with_its_proxy() {
    let mut env = Env::cli().await;
    let closed = || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let port = closed();
    env.set("BUB_API_BASE", &format!("http://127.0.0.1:{port}/v1"));
    let out = env.run(&["run", "hi"]).await;
    assert_exit(
        &out,
        1,
        &format!("cannot reach 127.0.0.1:{port} (no proxy): connection refused"),
    );

    let proxy = closed();
    env.set("BUB_API_BASE", "http://model.invalid:8080/v1");
    env.set(
        "HTTP_PROXY",
        &format!("http://user:secret@127.0.0.1:{proxy}"),
    );
    env.set("NO_PROXY", "");
    let out = env.run(&["run", "hi"]).await;
    assert_exit(
        &out,
        1,
        &format!(
            "cannot reach model.invalid:8080 (via proxy http://127.0.0.1:{proxy}): \
             connection refused"
        ),
    );
    assert!(!stderr(&out).contains("secret"), "{}", stderr(&out));
}
