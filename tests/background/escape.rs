//! No process outlives the command that started it, `setsid` included: a guest's commands
//! (sandboxed, as guests' are) leave processes behind in every way a shell can — `setsid`, a
//! double fork, `nohup … &`, `setsid -f` — and after the command returns, times out, is killed
//! with `bash.kill`, is stopped with `/stop`, its chat is reset and the daemon stops, none of
//! them is left in `/proc`; nor can a command kill its keeper to orphan them.

use crate::support::bub_env::Env;
use crate::support::fake_mcp::SOON;
use crate::support::fake_telegram::private_text;
use crate::support::wait::{WAIT, wait_until};

/// The ways out of a command's process group, each a `sleep MARKERn` (n = 1..4).
fn escapes(marker: &str) -> String {
    format!(
        "setsid sleep {marker}1 & ( ( sleep {marker}2 & ) & ); \
         nohup sleep {marker}3 >/dev/null 2>&1 & setsid -f sleep {marker}4"
    )
}

/// The `sleep` processes whose argument starts with `marker` (zombies are not counted).
fn left(marker: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let mut args = cmdline.split(|b| *b == 0);
            let program = args.next().unwrap_or_default();
            let is_sleep = program == b"sleep" || program.ends_with(b"/sleep");
            is_sleep
                && args
                    .next()
                    .is_some_and(|a| a.starts_with(marker.as_bytes()))
                && crate::support::fake_mcp::alive(*pid)
        })
        .collect()
}

async fn all_running(marker: &str) {
    wait_until(WAIT, "the command's four escapes to run", || {
        left(marker).len() == 4
    })
    .await;
}

async fn none_left(marker: &str, after: &str) {
    let what = format!("no process of {marker} after {after}");
    wait_until(SOON, &what, || left(marker).is_empty()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_a_command_started_outlives_it() {
    let mut env = Env::new().await;
    env.set("BUB_GUEST_TOOLS", "bash,bash.output,bash.kill");
    let daemon = env.start();

    // The command returns: what it left goes with it.
    let cmd = format!(r#",bash cmd="{}; echo started""#, escapes("711"));
    assert_eq!(env.say(50, 50, &cmd, 1).await, "started");
    none_left("711", "the command returned").await;

    // Killing its keeper (its parent) to orphan what it started: the sandbox does not let it.
    let cmd = r#",bash cmd="setsid sleep 7171 & kill -KILL $PPID; echo kill=$?""#;
    let answer = env.say(50, 50, cmd, 2).await;
    assert!(answer.contains("kill=1"), "{answer}");
    none_left("717", "a kill of the keeper").await;

    // A timeout.
    let cmd = format!(
        r#",bash cmd="{}; sleep 100" timeout_seconds=2"#,
        escapes("712")
    );
    let timeout = env.say(50, 50, &cmd, 3).await;
    assert!(
        timeout.contains("timeout: command did not finish"),
        "{timeout}"
    );
    none_left("712", "the timeout").await;

    // bash.kill of a background command.
    let cmd = format!(
        r#",bash cmd="{}; sleep 100" background=true"#,
        escapes("713")
    );
    assert!(
        env.say(50, 50, &cmd, 4)
            .await
            .contains("started background command 1")
    );
    all_running("713").await;
    assert!(
        env.say(50, 50, ",bash.kill id=1", 5)
            .await
            .contains("killed")
    );
    none_left("713", "bash.kill").await;

    // `/stop` of the turn running the command.
    let cmd = format!(r#",bash cmd="{}; sleep 100""#, escapes("714"));
    env.telegram.push_message(private_text(50, 50, &cmd));
    all_running("714").await;
    assert_eq!(env.say(50, 50, "/stop", 6).await, "Stopped.");
    none_left("714", "/stop").await;

    // `tape.reset` of the owner's chat.
    let cmd = format!(
        r#",bash cmd="{}; sleep 100" background=true"#,
        escapes("715")
    );
    assert!(
        env.say(42, 42, &cmd, 7)
            .await
            .contains("started background command")
    );
    all_running("715").await;
    env.say(42, 42, ",tape.reset", 8).await;
    none_left("715", "tape.reset").await;

    // The daemon's stop.
    let cmd = format!(
        r#",bash cmd="{}; sleep 100" background=true"#,
        escapes("716")
    );
    assert!(
        env.say(50, 50, &cmd, 9)
            .await
            .contains("started background command")
    );
    all_running("716").await;
    assert!(daemon.stop().await.success());
    none_left("716", "the daemon stopped").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_outlives_a_daemon_killed_with_sigkill() {
    let mut env = Env::new().await;
    env.set("BUB_GUEST_TOOLS", "bash,bash.output,bash.kill");
    let daemon = env.start();
    let cmd = format!(
        r#",bash cmd="{}; sleep 100" background=true"#,
        escapes("718")
    );
    assert!(
        env.say(50, 50, &cmd, 1)
            .await
            .contains("started background command")
    );
    all_running("718").await;
    // No stop of Bub's ends them: their keeper sees its parent gone (within a second).
    daemon.kill().await;
    none_left("718", "the daemon was killed").await;
}
