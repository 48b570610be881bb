//! MCP servers as tools, through the `bub` binary and the fake MCP server (stdio and
//! streamable HTTP): tools listed one line each, called by the model through `mcp_call` and
//! by a person as comma commands; a crashed server started again, a hung call timed out while
//! the turn goes on; guests given only what `BUB_GUEST_TOOLS` lists; no secret in a server's
//! environment; the prompt's cost and byte-stability with 40 tools; `bub mcp`.

use serde_json::{Value, json};

use crate::support::bub_env::{Env, stderr, stdout};
use crate::support::fake_mcp::{self, HttpServer, SOON};
use crate::support::fake_openai::{offered_functions, tool_results};
use crate::support::fake_telegram::private_text;
use crate::support::wait::{WAIT, wait_until};

/// An `Env` for `bub run` whose `mcp.json` has the fake as stdio server `fake` (`extra`: its
/// arguments); the log path.
async fn with_fake(extra: &[&str]) -> (Env, std::path::PathBuf) {
    let env = Env::cli().await;
    let log = env.home.join("fake.log");
    fake_mcp::write_config(&env.home, json!({"fake": fake_mcp::stdio(&log, extra)}));
    (env, log)
}

fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().cloned().unwrap_or_default()
}

fn system(request: &Value) -> String {
    messages(request)[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn the_model_calls_an_mcp_tool_listed_as_one_line_and_the_server_stops_with_bub() {
    let (env, log) = with_fake(&[]).await;
    env.model.push_tool_calls(&[(
        "mcp_call",
        json!({"name": "mcp.fake.echo", "arguments": {"text": "hi"}}),
    )]);
    env.model.push_text("done");
    let out = env.run(&["run", "say hi through the fake"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "done");

    let requests = env.model.requests();
    let first = &requests[0];
    let functions = offered_functions(first);
    assert!(functions.contains(&"mcp_call".to_owned()), "{functions:?}");
    assert!(
        !functions.iter().any(|f| f.starts_with("mcp_fake")),
        "no function per MCP tool: {functions:?}"
    );
    let prompt = system(first);
    assert!(
        prompt.contains("- mcp.fake.echo: Echo the given text back."),
        "{prompt}"
    );
    assert!(
        !prompt.contains("what to echo"),
        "argument schemas are shown only when asked"
    );
    assert_eq!(tool_results(&requests[1]), ["echo: hi"]);
    assert_eq!(
        fake_mcp::calls(&log),
        [("echo".to_owned(), json!({"text": "hi"}))]
    );
    // `bub run` stopped the server it started.
    let pids = fake_mcp::pids(&log);
    assert_eq!(pids.len(), 1, "one server process: {pids:?}");
    wait_until(SOON, "the server to exit", || !fake_mcp::alive(pids[0])).await;
}

#[tokio::test]
async fn what_a_server_left_in_a_session_of_its_own_stops_with_bub() {
    let (env, log) = with_fake(&["--escape", "7601"]).await;
    let out = env.run(&["run", ",mcp.fake.echo text=hi"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let escaped = fake_mcp::pids_of(&log, "escaped");
    assert_eq!(escaped.len(), 1, "{escaped:?}");
    assert!(
        !fake_mcp::alive(fake_mcp::pids(&log)[0]),
        "the server stopped"
    );
    assert!(
        !fake_mcp::alive(escaped[0]),
        "the server's setsid helper outlived `bub run`"
    );
}

#[tokio::test]
async fn asking_for_a_tool_shows_its_arguments_after_the_conversation() {
    let (env, _log) = with_fake(&[]).await;
    env.model.push_text("I see its arguments");
    env.model.push_text("again");
    let out = env.run(&["run", "what does $mcp.fake.add take?"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = env.run(&["run", "thanks"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let requests = env.model.requests();
    let last = messages(&requests[0]).last().cloned().unwrap();
    let shown = last["content"].as_str().unwrap_or_default();
    assert!(
        shown.contains("mcp.fake.add") && shown.contains("\"required\":[\"a\",\"b\"]"),
        "the schema is a note with the prompt: {shown}"
    );
    assert_eq!(
        system(&requests[0]),
        system(&requests[1]),
        "asking did not change the system prompt"
    );
}

#[tokio::test]
async fn a_comma_command_runs_an_mcp_tool_over_streamable_http() {
    let env = Env::cli().await;
    let server = HttpServer::start(&env.home.parent().unwrap().join("ws"), &[]).await;
    let entry = json!({"url": server.url, "headers": {"X-Team": "blue"}});
    fake_mcp::write_config(&env.home, json!({"web": entry}));
    let out = env.run(&["run", ",mcp.web.add a=2 b=3"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "5");
    let out = env
        .run(&["run", r#",mcp.web.echo text="hello there""#])
        .await;
    assert_eq!(stdout(&out).trim(), "echo: hello there");
    assert_eq!(env.model.request_count(), 0, "commands call no model");
    let calls = fake_mcp::calls(&server.log);
    assert_eq!(calls[0], ("add".to_owned(), json!({"a": 2, "b": 3})));
    let headers: Vec<Value> = fake_mcp::log(&server.log)
        .into_iter()
        .filter_map(|l| l.get("headers").cloned())
        .collect();
    assert!(headers.iter().all(|h| h["x-team"] == "blue"), "{headers:?}");
    // An unknown tool is a failed command: its error is the answer.
    env.model.push_text("there is no such tool");
    let out = env.run(&["run", ",mcp.web.nope"]).await;
    assert_eq!(stdout(&out).trim(), "there is no such tool");
    let told = env.model.requests()[0]["messages"].to_string();
    assert!(told.contains("unknown tool: mcp.web.nope"), "{told}");
}

#[tokio::test]
async fn a_crashed_server_is_started_again_and_a_hung_call_fails_while_the_turn_goes_on() {
    let (mut env, log) = with_fake(&[]).await;
    env.set("BUB_MCP_TIMEOUT_SECONDS", "1");
    let call =
        |name: &str, arguments: Value| ("mcp_call", json!({"name": name, "arguments": arguments}));
    env.model
        .push_tool_calls(&[call("mcp.fake.crash", json!({}))]);
    env.model
        .push_tool_calls(&[call("mcp.fake.echo", json!({"text": "again"}))]);
    env.model
        .push_tool_calls(&[call("mcp.fake.sleep", json!({"seconds": 30}))]);
    env.model
        .push_tool_calls(&[call("mcp.fake.fail", json!({}))]);
    env.model.push_text("finished anyway");
    let out = env.run(&["run", "try the fake"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "finished anyway");
    let results = tool_results(env.model.requests().last().unwrap());
    assert!(results[0].contains("the server stopped"), "{results:?}");
    assert_eq!(results[1], "echo: again", "started again");
    assert!(results[2].contains("no answer within 1s"), "{results:?}");
    assert!(results[3].contains("it failed on purpose"), "{results:?}");
    assert_eq!(fake_mcp::pids(&log).len(), 2, "one restart");
}

#[tokio::test]
async fn a_stdio_server_gets_only_its_own_variables_and_runs_in_the_workspace() {
    let (mut env, log) = with_fake(&[]).await;
    let mut entry = fake_mcp::stdio(&log, &[]);
    entry["env"] = json!({"NOTES_TOKEN": "tok-notes-123456"});
    fake_mcp::write_config(&env.home, json!({"fake": entry}));
    env.set("OPENAI_API_KEY", "sk-openai-secret-1");
    env.set("BUB_TELEGRAM_TOKEN", "123456:telegram-secret");
    let show = |name: &str| format!(",mcp.fake.env name={name}");
    for (name, expected) in [
        ("BUB_API_KEY", "<unset>"),
        ("OPENAI_API_KEY", "<unset>"),
        ("BUB_TELEGRAM_TOKEN", "<unset>"),
        ("BUB_HOME", "<unset>"),
        // The server's own secret reaches it, and is redacted from what it returns.
        ("NOTES_TOKEN", "[redacted]"),
    ] {
        let out = env.run(&["run", &show(name)]).await;
        assert_eq!(stdout(&out).trim(), expected, "{name}: {}", stderr(&out));
    }
    let out = env.run(&["run", &show("PATH")]).await;
    assert!(stdout(&out).contains("/usr/bin"), "{}", stdout(&out));
    let out = env.run(&["run", ",mcp.fake.cwd"]).await;
    let workspace = env.workspace.canonicalize().unwrap();
    assert_eq!(stdout(&out).trim(), workspace.display().to_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_gets_only_the_mcp_tools_bub_guest_tools_lists() {
    let mut env = Env::new().await;
    let log = env.home.join("fake.log");
    fake_mcp::write_config(&env.home, json!({"fake": fake_mcp::stdio(&log, &[])}));
    env.set("BUB_GUEST_TOOLS", "fs.read,mcp.fake.echo");
    let call =
        |name: &str, arguments: Value| ("mcp_call", json!({"name": name, "arguments": arguments}));
    env.model.push_tool_calls(&[
        call("mcp.fake.env", json!({"name": "PATH"})),
        call("mcp.fake.echo", json!({"text": "guest"})),
    ]);
    env.model.push_text("ok");
    let daemon = env.start();
    // User 5 is a guest (the owners are 1, 7, 9 and 42).
    env.telegram
        .push_message(private_text(5, 5, "use the fake"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert!(daemon.stop().await.success());
    let requests = env.model.requests();
    let prompt = system(&requests[0]);
    assert!(prompt.contains("mcp.fake.echo"), "{prompt}");
    assert!(!prompt.contains("mcp.fake.env"), "not listed for a guest");
    let results = tool_results(&requests[1]);
    assert!(results[0].contains("not allowed"), "{results:?}");
    assert_eq!(results[1], "echo: guest");
    assert_eq!(
        fake_mcp::calls(&log),
        [("echo".to_owned(), json!({"text": "guest"}))],
        "the refused call never reached the server"
    );
    assert!(env.tape_text().contains("tool.refused"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_without_mcp_tools_starts_no_server_and_cannot_call_one() {
    let env = Env::new().await;
    let log = env.home.join("fake.log");
    fake_mcp::write_config(&env.home, json!({"fake": fake_mcp::stdio(&log, &[])}));
    env.model.push_text("hello guest");
    let daemon = env.start();
    env.telegram.push_message(private_text(5, 5, "hi"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    env.telegram
        .push_message(private_text(5, 5, ",mcp.fake.echo text=x"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    let refusal = sent[1].body["text"].as_str().unwrap_or_default();
    assert!(refusal.contains("not allowed"), "{refusal}");
    assert!(daemon.stop().await.success());
    let request = &env.model.requests()[0];
    assert!(!offered_functions(request).contains(&"mcp_call".to_owned()));
    assert!(!system(request).contains("mcp_tools"));
    assert!(fake_mcp::pids(&log).is_empty(), "no server started");
}

/// The estimated tokens of what a request sends besides the conversation (system prompt and
/// tool specs), as Bub estimates them.
fn fixed_tokens(request: &Value) -> usize {
    (system(request).len() + request["tools"].to_string().len()).div_ceil(4)
}

#[tokio::test]
async fn forty_mcp_tools_cost_under_1500_tokens_and_the_prompt_stays_byte_stable() {
    // The fake's 9 tools and 31 more.
    let (env, _log) = with_fake(&["--tools", "31"]).await;
    env.model.push_text("one");
    env.model.push_text("two");
    for message in ["first", "second"] {
        let out = env.run(&["run", message]).await;
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let plain = Env::cli().await;
    plain.model.push_text("one");
    assert!(plain.run(&["run", "first"]).await.status.success());

    let requests = env.model.requests();
    let listed = system(&requests[0]).matches("\n- mcp.fake.").count();
    assert_eq!(listed, 40, "{}", system(&requests[0]));
    assert_eq!(system(&requests[0]), system(&requests[1]), "byte-stable");
    assert_eq!(requests[0]["tools"], requests[1]["tools"], "byte-stable");
    let added = fixed_tokens(&requests[0]) - fixed_tokens(&plain.model.requests()[0]);
    eprintln!("40 MCP tools add {added} tokens to a request");
    assert!(added <= 1_500, "40 MCP tools add {added} tokens");
}

#[tokio::test]
async fn bub_mcp_adds_lists_tests_and_removes_servers() {
    let env = Env::cli().await;
    let log = env.home.join("fake.log");
    let script = fake_mcp::script();
    let log_arg = log.display().to_string();
    let out = env
        .run(&[
            "mcp", "add", "good", "--", "python3", &script, "--log", &log_arg,
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = env
        .run(&["mcp", "add", "gone", "--", "/nonexistent/server"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = env.run(&["mcp", "list"]).await;
    let listed = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(listed.contains("good  python3"), "{listed}");
    assert!(
        listed.contains("ok: 9 tools: add, crash, cwd, echo"),
        "{listed}"
    );
    assert!(
        listed.contains("gone  /nonexistent/server\n  error:"),
        "{listed}"
    );
    let out = env.run(&["mcp", "test", "good"]).await;
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("  mcp.good.echo\n"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        env.run(&["mcp", "test", "gone"]).await.status.code(),
        Some(1)
    );
    assert_eq!(
        env.run(&["mcp", "test", "nope"]).await.status.code(),
        Some(1)
    );
    let out = env.run(&["mcp", "remove", "gone"]).await;
    assert!(out.status.success());
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(env.home.join("mcp.json")).unwrap()).unwrap();
    assert_eq!(
        file["mcpServers"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["good"]
    );
    // Every process `bub mcp` started is gone.
    for pid in fake_mcp::pids(&log) {
        wait_until(SOON, "the server to exit", || !fake_mcp::alive(pid)).await;
    }
}

#[tokio::test]
async fn a_bad_entry_is_named_and_the_other_servers_still_work() {
    let (env, log) = with_fake(&[]).await;
    let servers = json!({"fake": fake_mcp::stdio(&log, &[]), "broken": {"command": 5}});
    fake_mcp::write_config(&env.home, servers);
    let out = env.run(&["mcp", "list"]).await;
    let listed = stdout(&out);
    assert!(
        listed.contains("broken  \n  error: mcp.json: `command` must be a string"),
        "{listed}"
    );
    let out = env.run(&["run", ",mcp.fake.echo text=still"]).await;
    assert_eq!(stdout(&out).trim(), "echo: still");
    std::fs::write(env.home.join("mcp.json"), "{not json").unwrap();
    let out = env.run(&["run", "hi"]).await;
    assert_eq!(out.status.code(), Some(2), "a broken file stops Bub");
    assert!(stderr(&out).contains("mcp.json"), "{}", stderr(&out));
}

#[tokio::test]
async fn a_sandboxed_server_runs_confined_or_not_at_all() {
    let env = Env::cli().await;
    // The sandbox lets the server read the workspace and the system, nothing else.
    let script = env.workspace.join("server.py");
    std::fs::copy(fake_mcp::script(), &script).unwrap();
    let entry = json!({"command": "python3", "args": [script], "sandbox": true});
    fake_mcp::write_config(&env.home, json!({"boxed": entry}));
    let out = env.run(&["run", ",mcp.boxed.env name=HOME"]).await;
    let printed = stdout(&out);
    if bub::tools::sandbox::available().is_available() {
        assert!(
            printed.trim().contains("bub-sandbox-"),
            "HOME is the sandbox's own directory: {printed} {}",
            stderr(&out)
        );
    } else {
        let told = env.model.requests()[0]["messages"].to_string();
        assert!(told.contains("not available"), "fail closed: {told}");
    }
}

#[tokio::test]
async fn a_failing_servers_stderr_is_shown_without_its_secret() {
    let env = Env::cli().await;
    let code = "import os, sys; sys.stderr.write('bad token ' + os.environ['NOTES_TOKEN'] + '\\n'); sys.exit(1)";
    let entry = json!({"command": "python3", "args": ["-c", code], "env": {"NOTES_TOKEN": "tok-notes-123456"}});
    fake_mcp::write_config(&env.home, json!({"notes": entry}));
    let out = env.run(&["mcp", "test", "notes"]).await;
    assert_eq!(out.status.code(), Some(1));
    let shown = stdout(&out) + &stderr(&out);
    assert!(shown.contains("bad token [redacted]"), "{shown}");
    assert!(!shown.contains("tok-notes-123456"), "{shown}");
}
