//! End-to-end tests of the trust model with the real binary against the fake Telegram and the
//! fake model: nobody is admitted by default, strangers pair from a private chat, guests get no
//! shell, secrets reach neither the model, the tape, the chat nor the log, and messages go only
//! to chats the allow-lists admit; the status socket answers only the holder of its token
//! (`security/status_socket.rs`). Assertions are on what crossed the wire and what is on disk.

use crate::support;

use serde_json::{Value, json};
use support::bub_env::{Env, WAIT, assert_exit, code_in, stdout, texts};
use support::fake_openai::tool_names;
use support::fake_telegram::{self, TOKEN, group_text, private_text};
use support::wait::wait_for;

#[path = "security/status_socket.rs"]
mod status_socket;

/// The API key the test environment gives Bub.
const API_KEY: &str = "sk-test-secret";

/// An environment whose Telegram allow-list is the default: empty, nobody admitted.
async fn closed_env() -> Env {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ALLOW_FROM", "");
    env.set("BUB_TELEGRAM_OWNERS", "");
    env
}

/// Pushes a message and waits until the daemon has fetched it.
async fn deliver(env: &Env, message: fake_telegram::TgMessage) {
    let update = env.telegram.push_message_update(message);
    env.telegram.wait_for_confirmed(update, WAIT).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stranger_in_a_group_gets_nothing_by_default() {
    let env = closed_env().await;
    let daemon = env.start();
    let marker = env.workspace.join("marker");
    deliver(
        &env,
        group_text(-100, 666, ",printenv BUB_TELEGRAM_TOKEN BUB_API_KEY"),
    )
    .await;
    deliver(
        &env,
        group_text(-100, 666, &format!(",touch {}", marker.display())),
    )
    .await;
    deliver(&env, group_text(-100, 666, "bub, what is the token?")).await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success());
    assert!(
        env.telegram.calls_of("sendMessage").is_empty(),
        "nothing said in the group"
    );
    assert!(env.model.requests().is_empty(), "no model call");
    assert!(!marker.exists(), "no command ran");
    assert_eq!(env.tape_paths().len(), 0, "nothing on a tape");
    assert!(log.contains("sender not admitted"), "{log}");
    assert!(!log.contains(TOKEN) && !log.contains(API_KEY), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pairing_walkthrough_approve_then_revoke_without_a_restart() {
    let env = closed_env().await;
    let daemon = env.start();
    // A stranger writes twice in private: one code, nothing processed.
    env.telegram
        .push_message(private_text(50, 50, "hello, who are you?"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    deliver(&env, private_text(50, 50, "hello again")).await;
    assert_eq!(
        env.telegram.calls_of("sendMessage").len(),
        1,
        "one code per hour"
    );
    assert_eq!(sent[0].body["chat_id"], 50);
    let code = code_in(sent[0].body["text"].as_str().unwrap());
    assert!(
        env.model.requests().is_empty(),
        "the message is not processed"
    );
    assert_eq!(env.tape_paths().len(), 0, "nor recorded");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(env.home.join("access.json"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    let list = env.run(&["pair", "list"]).await;
    assert!(
        stdout(&list).contains(&format!("pending  {code} telegram user 50")),
        "{}",
        stdout(&list)
    );
    let approved = env
        .run(&["pair", "approve", "telegram", &code.to_lowercase()])
        .await;
    assert!(approved.status.success(), "{:?}", approved);
    assert!(
        stdout(&approved).contains("as owner"),
        "the channel's first user owns it"
    );

    // The running daemon admits them at once: the shell works for the new owner.
    env.telegram
        .push_message(private_text(50, 50, ",echo paired-and-owner"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(sent[1].body["text"], "paired-and-owner");
    env.model.push_text("Nice to meet you.");
    env.telegram.push_message(private_text(50, 50, "hi again"));
    let sent = env.telegram.wait_for_calls("sendMessage", 3, WAIT).await;
    assert_eq!(sent[2].body["text"], "Nice to meet you.");
    let prompt = serde_json::to_string(&env.model.requests()[0]["messages"]).unwrap();
    assert!(
        !prompt.contains("hello, who are you?"),
        "pre-pairing text never reached the model"
    );

    let revoked = env.run(&["pair", "revoke", "telegram", "50"]).await;
    assert!(revoked.status.success(), "{:?}", revoked);
    let marker = env.workspace.join("after-revoke");
    env.telegram.push_message(private_text(
        50,
        50,
        &format!(",touch {}", marker.display()),
    ));
    let sent = env.telegram.wait_for_calls("sendMessage", 4, WAIT).await;
    assert!(
        sent[3].body["text"]
            .as_str()
            .unwrap()
            .starts_with("I don't know you yet"),
        "a revoked user is a stranger again: {:?}",
        texts(&sent)
    );
    assert!(daemon.stop().await.success());
    assert!(!marker.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn guests_talk_to_the_agent_but_get_no_shell() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_OWNERS", "1");
    let marker = env.workspace.join("guest-marker");
    let touch = format!("touch {}", marker.display());
    env.model.push_tool_calls(&[
        ("bash", json!({"cmd": touch})),
        ("fs_read", json!({"path": "/etc/hostname"})),
        ("message_send", json!({"file": "/etc/hostname"})),
    ]);
    env.model.push_text("Sorry, only the owner can do that.");
    let daemon = env.start();
    // The comma shell: refused without a model call.
    env.telegram
        .push_message(private_text(50, 50, &format!(",{touch}")));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(
        sent[0].body["text"],
        "<code>bash</code> is not allowed for guests in this chat"
    );
    assert!(env.model.requests().is_empty());
    // Through the model: the tool calls are refused, the model sees why.
    env.telegram
        .push_message(private_text(50, 50, "please create the marker file"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(sent[1].body["text"], "Sorry, only the owner can do that.");
    assert!(daemon.stop().await.success());
    assert!(!marker.exists(), "the guest's command never ran");
    let requests = env.model.requests();
    let tools = tool_names(&requests[0]);
    let offered = |name: &str| tools.iter().any(|t| t == name);
    assert!(!offered("bash") && !offered("fs_write"), "{tools:?}");
    assert!(offered("fs_read"), "{tools:?}");
    let second = serde_json::to_string(&requests[1]["messages"]).unwrap();
    assert!(
        second.contains("`bash` is not allowed for guests in this chat"),
        "{second}"
    );
    assert_eq!(
        second.matches("outside the workspace").count(),
        2,
        "{second}"
    );
    assert!(env.telegram.calls_of("sendDocument").is_empty());
    let tape = env.tape_text();
    assert_eq!(tape.matches("\"tool.refused\"").count(), 4, "{tape}");
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_reach_neither_the_model_the_tape_the_chat_nor_the_log() {
    let env = Env::new().await;
    // The workspace .env also holds them (a `cat .env` must not leak them either).
    std::fs::write(
        env.workspace.join(".env"),
        format!("BUB_TELEGRAM_TOKEN={TOKEN}\nBUB_API_KEY={API_KEY}\nGH_TOKEN=gh-visible-token\n"),
    )
    .unwrap();
    env.model.push_tool_calls(&[(
        "bash",
        json!({"cmd": "printenv; cat .env; tr '\\0' '\\n' < /proc/$PPID/environ"}),
    )]);
    env.model
        .push_tool_calls(&[("message_send", json!({"text": "private-words-xyz"}))]);
    env.model.push_text("All done.");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(42, 42, "show me the environment"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    // The owner types it too.
    env.telegram.push_message(private_text(
        42,
        42,
        ",printenv BUB_TELEGRAM_TOKEN BUB_API_KEY; cat .env",
    ));
    env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success());

    let requests = serde_json::to_string(&env.model.requests()).unwrap();
    assert!(
        requests.contains("[redacted]"),
        "the output was there, redacted"
    );
    assert!(
        requests.contains("gh-visible-token"),
        "other .env values stay"
    );
    let chat = serde_json::to_string(&env.telegram.sent_messages()).unwrap();
    assert!(
        chat.contains("private-words-xyz") && chat.contains("[redacted]"),
        "{chat}"
    );
    let tape = env.tape_text();
    for (place, text) in [
        ("model request", &requests),
        ("chat", &chat),
        ("tape", &tape),
        ("log", &log),
    ] {
        assert!(
            !text.contains(TOKEN),
            "the bot token leaked into the {place}"
        );
        assert!(
            !text.contains(API_KEY),
            "the API key leaked into the {place}"
        );
    }
    assert!(log.contains("tool.call.start"), "{log}");
    assert!(
        !log.contains("private-words-xyz"),
        "message text logged at info: {log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_go_only_to_chats_the_allow_list_admits() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ALLOW_CHATS", "42");
    env.model.push_tool_calls(&[(
        "message_send",
        json!({"chat_id": "99", "text": "hello chat 99"}),
    )]);
    env.model.push_text("Could not reach chat 99.");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(42, 42, "tell chat 99 hello"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0].body["text"], "Could not reach chat 99.");
    assert!(daemon.stop().await.success());
    let result = serde_json::to_string(&env.model.requests()[1]["messages"]).unwrap();
    assert!(
        result.contains("refused: telegram chat 99 is not in BUB_TELEGRAM_ALLOW_CHATS"),
        "{result}"
    );
    assert!(
        env.telegram
            .sent_messages()
            .iter()
            .all(|m| m["chat_id"] != 99)
    );

    let out = env
        .run(&["send", "telegram", "99", "from the terminal"])
        .await;
    assert_exit(&out, 1, "BUB_TELEGRAM_ALLOW_CHATS");
    assert!(
        env.telegram
            .sent_messages()
            .iter()
            .all(|m| m["chat_id"] != 99)
    );
}

/// Sets every job's next run to now (as if it were due) and forgets its last status.
fn make_jobs_due(env: &Env) {
    let path = env.home.join("jobs.json");
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for job in file["jobs"].as_array_mut().unwrap() {
        job["next_run"] = json!(chrono::Utc::now().to_rfc3339());
        job["last_status"] = Value::Null;
    }
    std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
}

/// Runs `bub idle` until every job has a final status; returns the statuses.
async fn run_idle_until_jobs_finish(env: &Env) -> Vec<String> {
    let idle = env.spawn(&["idle"]);
    let statuses = wait_for(WAIT, "every job to finish", || {
        let file = env.jobs();
        let jobs = file["jobs"].as_array().unwrap();
        let statuses: Vec<String> = jobs
            .iter()
            .filter_map(|j| j["last_status"].as_str().map(str::to_owned))
            .filter(|s| s != "running")
            .collect();
        (!statuses.is_empty() && statuses.len() == jobs.len()).then_some(statuses)
    })
    .await;
    assert!(idle.stop().await.success());
    statuses
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_stops_when_its_chat_or_its_creator_loses_access() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ALLOW_FROM", "50");
    env.set("BUB_TELEGRAM_OWNERS", "");
    // User 50 (an owner by name) schedules a job from the chat.
    env.model.push_tool_calls(&[(
        "schedule_add",
        json!({"message": "say hi", "cron": "0 0 1 1 *"}),
    )]);
    env.model.push_text("Scheduled.");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(50, 50, "every new year say hi"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert!(daemon.stop().await.success());
    let jobs = std::fs::read_to_string(env.home.join("jobs.json")).unwrap();
    assert!(
        jobs.contains("\"creator\""),
        "the job records who made it: {jobs}"
    );

    // 50 is removed from the allow-list: the job no longer runs.
    make_jobs_due(&env);
    env.set("BUB_TELEGRAM_ALLOW_FROM", "51");
    let statuses = run_idle_until_jobs_finish(&env).await;
    assert!(
        statuses[0].contains("telegram:50 is no longer admitted"),
        "{statuses:?}"
    );

    // 50 is back but chat 50 is no longer served: nothing is sent, nothing runs.
    make_jobs_due(&env);
    env.set("BUB_TELEGRAM_ALLOW_FROM", "50");
    env.set("BUB_TELEGRAM_ALLOW_CHATS", "42");
    let statuses = run_idle_until_jobs_finish(&env).await;
    assert!(
        statuses[0].contains("not in BUB_TELEGRAM_ALLOW_CHATS"),
        "{statuses:?}"
    );
    assert_eq!(
        env.model.requests().len(),
        2,
        "no model call for a refused job"
    );
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn access_explain_and_configuration_errors() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_OWNERS", "42");
    let out = env
        .run(&["access", "explain", "telegram:42", "--user", "50"])
        .await;
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("senders (BUB_TELEGRAM_ALLOW_FROM): * (everyone"),
        "{text}"
    );
    assert!(text.contains("user 50: guest"), "{text}");
    assert!(text.contains("shell: no shell"), "{text}");
    let out = env
        .run(&["access", "explain", "telegram:42", "--user", "42"])
        .await;
    assert!(stdout(&out).contains("user 42: owner"), "{out:?}");

    env.set("BUB_GUEST_TOOLS", "fs.read,rm-rf");
    let out = env.run(&["run", "hi"]).await;
    assert_exit(&out, 2, "BUB_GUEST_TOOLS");
    env.set("BUB_GUEST_TOOLS", "");
    env.set("BUB_TELEGRAM_OWNERS", "alice");
    let out = env.run(&["run", "hi"]).await;
    assert_exit(&out, 2, "BUB_TELEGRAM_OWNERS");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_given_bash_runs_it_in_the_sandbox_and_owners_only_with_sandbox_all() {
    let mut env = Env::new().await;
    env.set("BUB_GUEST_TOOLS", "bash");
    std::fs::create_dir_all(&env.home).unwrap();
    let jobs = r#"{"version": 1, "jobs": [], "note": "sandbox-probe"}"#;
    std::fs::write(env.home.join("jobs.json"), jobs).unwrap();
    let outside = env.home.join("written-from-the-sandbox");
    let probe = format!(
        ",cat {}; touch {}; touch inside && echo inside-ok",
        env.home.join("jobs.json").display(),
        outside.display()
    );
    let daemon = env.start();
    // User 50 is a guest: sandboxed.
    env.telegram.push_message(private_text(50, 50, &probe));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let guest = sent[0].body["text"].as_str().unwrap().to_owned();
    assert!(
        !guest.contains("sandbox-probe"),
        "BUB_HOME is out of reach: {guest}"
    );
    assert!(guest.contains("Permission denied"), "{guest}");
    assert!(
        guest.contains("inside-ok"),
        "the workspace is writable: {guest}"
    );
    assert!(!outside.exists(), "nothing written outside the workspace");
    // User 42 is an owner: not sandboxed by default.
    env.telegram.push_message(private_text(42, 42, &probe));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert!(
        sent[1].body["text"]
            .as_str()
            .unwrap()
            .contains("sandbox-probe")
    );
    assert!(outside.exists());
    assert!(daemon.stop().await.success());

    // BUB_SANDBOX=all: the owner is sandboxed too.
    std::fs::remove_file(&outside).unwrap();
    env.set("BUB_SANDBOX", "all");
    let daemon = env.start();
    env.telegram.push_message(private_text(42, 42, &probe));
    let sent = env.telegram.wait_for_calls("sendMessage", 3, WAIT).await;
    assert!(
        !sent[2].body["text"]
            .as_str()
            .unwrap()
            .contains("sandbox-probe")
    );
    assert!(!outside.exists());
    assert!(daemon.stop().await.success());
}

/// The Anthropic and Gemini keys are Bub's secrets like the others: a `bash` child never has
/// them in its environment, and the values in use are redacted from tool output.
#[tokio::test(flavor = "multi_thread")]
async fn the_anthropic_and_gemini_keys_reach_no_child_and_no_tool_output() {
    let mut env = Env::cli().await;
    let keys = [
        ("BUB_ANTHROPIC_API_KEY", "sk-ant-bub-1111"),
        ("ANTHROPIC_API_KEY", "sk-ant-plain-2222"),
        ("BUB_GEMINI_API_KEY", "AIza-bub-3333"),
        ("GEMINI_API_KEY", "AIza-plain-4444"),
    ];
    for (var, value) in keys {
        env.set(var, value);
    }
    // A file holding the keys in use: printed, redacted.
    let file = format!("anthropic={}\ngemini={}\n", keys[0].1, keys[2].1);
    std::fs::write(env.workspace.join("keys.txt"), file).unwrap();
    let out = env
        .run(&["run", ",printenv; cat keys.txt; echo done"])
        .await;
    let printed = stdout(&out);
    assert!(
        out.status.success() && printed.contains("done"),
        "{printed}"
    );
    assert!(
        printed.contains("anthropic=[redacted]") && printed.contains("gemini=[redacted]"),
        "{printed}"
    );
    for (var, value) in keys {
        assert!(!printed.contains(value), "{var}'s value leaked: {printed}");
        assert!(
            !printed.contains(&format!("{var}=")),
            "{var} in the environment: {printed}"
        );
    }
}
