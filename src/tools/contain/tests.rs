//! Unit tests of containment: what a command leaves running ends with it, whatever it did to
//! leave its process group; its exit status passes through the keeper.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use super::*;

/// Long enough for any step here; a hung keeper fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(20);

/// Escapes from the command's process group, each printing the pid that escaped before the
/// script goes on (the detached ones through `| cat`, which ends once they printed: the
/// command may exit at once without ending one before it printed).
const ESCAPES: &str = "setsid sleep 1001 & echo $!
( ( sleep 1002 >/dev/null & echo $! ) & ) | cat
nohup sleep 1003 >/dev/null 2>&1 & echo $!
setsid -f sh -c 'echo $$; exec sleep 1004 >/dev/null' | cat
(set -m; sleep 1005 & echo $!)
";

fn contained(script: &str) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut command = tokio::process::Command::new("bash");
    command
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0);
    keep(&mut command);
    let mut child = command.spawn().expect("spawn");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// The pids of the first `n` lines.
async fn pids(lines: &mut Lines<BufReader<ChildStdout>>, n: usize) -> Vec<pid_t> {
    let mut pids = Vec::new();
    while pids.len() < n {
        let line = tokio::time::timeout(BOUND, lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("a pid line");
        pids.push(line.trim().parse().expect("a pid"));
    }
    pids
}

fn alive(pid: pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z')))
}

async fn ended(child: &mut Child) -> ExitStatus {
    tokio::time::timeout(BOUND, child.wait())
        .await
        .expect("the keeper ends in time")
        .unwrap()
}

#[test]
fn containment_is_supported_here() {
    assert_eq!(support(), Ok(()));
}

#[tokio::test]
async fn what_a_command_leaves_running_ends_when_it_exits() {
    let (mut child, mut lines) = contained(&format!("{ESCAPES}exit 3"));
    let escaped = pids(&mut lines, 5).await;
    assert!(escaped.iter().all(|&p| p > 0));
    // Its output closes: the escapes held it and are gone.
    let rest = tokio::time::timeout(BOUND, lines.next_line()).await;
    assert!(matches!(rest, Ok(Ok(None))), "{rest:?}");
    assert_eq!(
        ended(&mut child).await.code(),
        Some(3),
        "the command's code"
    );
    for pid in escaped {
        assert!(!alive(pid), "process {pid} outlived its command");
    }
}

#[tokio::test]
async fn an_ended_command_takes_everything_it_started() {
    let (mut child, mut lines) = contained(&format!("{ESCAPES}sleep 1000"));
    let escaped = pids(&mut lines, 5).await;
    assert!(escaped.iter().all(|&p| alive(p)), "they run until ended");
    let mut keeper = Keeper::of(&child);
    keeper.end();
    let status = ended(&mut child).await;
    keeper.reaped();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    for pid in escaped {
        assert!(!alive(pid), "process {pid} outlived its command");
    }
}

#[tokio::test]
async fn a_dropped_keeper_ends_its_command() {
    let (mut child, mut lines) = contained("setsid sleep 1006 & echo $!; sleep 1000");
    let escaped = pids(&mut lines, 1).await;
    drop(Keeper::of(&child));
    ended(&mut child).await;
    assert!(!alive(escaped[0]));
}

#[tokio::test]
async fn asking_sends_the_command_a_term_signal() {
    let (mut child, mut lines) =
        contained("trap 'echo asked; exit 4' TERM; echo 1; sleep 1000 & wait");
    pids(&mut lines, 1).await;
    let mut keeper = Keeper::of(&child);
    keeper.ask();
    let line = tokio::time::timeout(BOUND, lines.next_line()).await;
    assert_eq!(line.unwrap().unwrap().as_deref(), Some("asked"));
    assert_eq!(ended(&mut child).await.code(), Some(4));
    keeper.reaped();
}

#[tokio::test]
async fn a_command_that_cannot_start_is_an_error_of_spawn() {
    let mut command = tokio::process::Command::new("/nonexistent/bub-command");
    keep(&mut command);
    let error = command.spawn().expect_err("no such program");
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound, "{error}");
}

#[test]
fn the_parent_is_read_from_proc() {
    let me = std::process::id() as pid_t;
    // SAFETY: reads /proc only.
    let parent = unsafe { parent_of(me) };
    assert_eq!(parent, Some(std::os::unix::process::parent_id() as pid_t));
    let mut buf = [0u8; 12];
    assert_eq!(c_digits(40213, &mut buf), b"40213\0");
    assert_eq!(leading_number(b"17 rest", b' '), Some(17));
    assert_eq!(leading_number(b"self\0", 0), None);
    assert_eq!(leading_number(b"0\0", 0), None);
}
