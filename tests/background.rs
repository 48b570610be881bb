//! Background commands in a running daemon, as an owner drives them from Telegram:
//! `bash background=true` answers at once with an id, `bash.output` shows what it wrote,
//! `,status` lists it, `bash.kill` stops it, a session runs at most four, and `tape.reset` and
//! the daemon's stop kill the rest. `people.rs`: whose they are; `escape.rs`: no process a
//! command starts outlives it.

use std::path::Path;

use crate::support::bub_env::Env;
use crate::support::fake_mcp::{SOON, alive};
use crate::support::wait::{WAIT, wait_for, wait_until};

#[path = "background/escape.rs"]
mod escape;
#[path = "background/people.rs"]
mod people;

/// Sends `text` as the owner (user 42) and returns the answer (the `n`th message sent).
async fn ask(env: &Env, n: usize, text: &str) -> String {
    env.say(42, 42, text, n).await
}

/// How background command `id` ended, once it has (as `bub status` reports it: its state
/// is neither `running` nor `ending`).
pub(crate) async fn ended(env: &Env, id: u64) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let out = env.run(&["status", "--json"]).await;
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows = status["commands"].as_array().cloned().unwrap_or_default();
        let state = rows
            .iter()
            .find(|c| c["id"] == id)
            .map(|c| c["state"].clone());
        if let Some(state) = state.as_ref().and_then(|s| s.as_str())
            && !state.starts_with("running")
            && state != "ending"
        {
            return state.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "command {id} did not end: {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The pid a command wrote to `file` in the workspace, once it has.
async fn pid_in(workspace: &Path, file: &str) -> i32 {
    let path = workspace.join(file);
    wait_for(WAIT, file, || {
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn background_commands_are_read_listed_killed_and_bounded() {
    let env = Env::new().await;
    let daemon = env.start();
    let started = ask(
        &env,
        1,
        r#",bash cmd="echo $$ > one.pid; echo hello from one; sleep 60" background=true"#,
    )
    .await;
    assert!(
        started.contains("started background command 1"),
        "{started}"
    );
    let one = pid_in(&env.workspace, "one.pid").await;
    let output = ask(&env, 2, ",bash.output id=1").await;
    assert!(output.contains("[1 running]"), "{output}");
    assert!(output.contains("hello from one"), "{output}");
    let status = ask(&env, 3, ",status").await;
    assert!(status.contains("background 1 running"), "{status}");

    let killed = ask(&env, 4, ",bash.kill id=1").await;
    assert!(killed.contains("killed background command 1"), "{killed}");
    wait_until(SOON, "the killed command to exit", || !alive(one)).await;
    assert_eq!(ended(&env, 1).await, "killed");
    let output = ask(&env, 5, ",bash.output id=1").await;
    assert!(output.starts_with("[1 killed]"), "{output}");

    // Four run at once in a session; a fifth is refused.
    for i in 0..4 {
        let cmd = format!(r#",bash cmd="echo $$ > bg{i}.pid; sleep 60" background=true"#);
        let answer = ask(&env, 6 + i, &cmd).await;
        assert!(answer.contains("started background command"), "{answer}");
    }
    let refused = ask(&env, 10, r#",bash cmd="sleep 60" background=true"#).await;
    assert!(refused.contains("4 background commands run"), "{refused}");
    let mut pids = Vec::new();
    for i in 0..4 {
        pids.push(pid_in(&env.workspace, &format!("bg{i}.pid")).await);
    }
    // `tape.reset` stops them all.
    ask(&env, 11, ",tape.reset").await;
    for pid in pids {
        wait_until(SOON, "a reset session's command to exit", || !alive(pid)).await;
    }
    // So does the daemon's stop.
    let last = ask(
        &env,
        12,
        r#",bash cmd="echo $$ > last.pid; sleep 60" background=true"#,
    )
    .await;
    assert!(last.contains("started"), "{last}");
    let last = pid_in(&env.workspace, "last.pid").await;
    assert!(daemon.stop().await.success());
    wait_until(SOON, "the daemon's command to exit", || !alive(last)).await;
}
