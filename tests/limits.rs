//! Bounded tools, through the built-in registry: `fs.*` refuse FIFOs, sockets and devices
//! before opening them (a FIFO would block open() forever), and `bash` obeys the process's
//! command limits (`BUB_MAX_CONCURRENT_COMMANDS`, `BUB_BASH_MAX_TIMEOUT_SECONDS`).
//!
//! Every test is bounded by [`support::wait::WAIT`]; commands are synchronised through FIFOs the test opens
//! (an open for writing returns once the command has opened its end), never by sleeping.

use crate::support;

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bub::access::Authority;
use bub::config::Settings;
use serde_json::json;
use support::tool_env::{ToolEnv, guest};
use support::wait::bounded;

/// A workspace and a tool context on it for `who`, with `adjust` applied to the settings.
fn fixture(who: Authority, adjust: impl FnOnce(&mut Settings)) -> ToolEnv {
    ToolEnv::new("cli:limits", who, adjust)
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a plain syscall on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// The refusal of `fs.*` for the FIFO `path`.
fn fifo_refusal(path: &Path) -> String {
    format!(
        "{} is a FIFO (named pipe), not a regular file; fs tools only read and write regular files",
        path.display()
    )
}

#[tokio::test]
async fn fs_tools_refuse_a_fifo_at_once_and_the_chat_goes_on() {
    let fx = fixture(Authority::terminal(), |_| {});
    let fifo = fx.ws.join("pipe");
    mkfifo(&fifo);
    let err = fx.error("fs.read", json!({"path": "pipe"})).await;
    assert_eq!(err, fifo_refusal(&fifo));
    let args = json!({"path": "pipe", "old": "a", "new": "b"});
    let err = fx.error("fs.edit", args).await;
    assert_eq!(err, fifo_refusal(&fifo));
    let args = json!({"path": "pipe", "content": "x"});
    let err = fx.error("fs.write", args).await;
    assert_eq!(err, fifo_refusal(&fifo));
    // The next calls work; searches skip the FIFO.
    let args = json!({"path": "a.txt", "content": "needle\n"});
    fx.call("fs.write", args).await.unwrap();
    let out = fx.call("fs.grep", json!({"pattern": "needle"})).await;
    assert_eq!(out.unwrap(), "a.txt:1: needle");
    let out = fx.call("fs.glob", json!({"pattern": "*"})).await;
    assert_eq!(out.unwrap(), "a.txt");
    let out = fx.call("fs.read", json!({"path": "a.txt"})).await;
    assert_eq!(out.unwrap(), "needle\n");
}

#[tokio::test]
async fn a_guest_reading_a_fifo_is_refused_after_the_path_check() {
    let fx = fixture(guest(), |_| {});
    let fifo = fx.ws.join("pipe");
    mkfifo(&fifo);
    let err = fx.error("fs.read", json!({"path": "pipe"})).await;
    assert_eq!(err, fifo_refusal(&fifo));
    let err = fx.error("fs.read", json!({"path": "/etc/hostname"})).await;
    assert!(err.contains("outside the workspace"), "{err}");
}

#[tokio::test]
async fn fs_read_refuses_sockets_and_devices() {
    let fx = fixture(Authority::terminal(), |_| {});
    let socket = fx.ws.join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let err = fx.error("fs.read", json!({"path": "sock"})).await;
    assert!(
        err.ends_with(
            "sock is a socket, not a regular file; fs tools only read and write regular files"
        ),
        "{err}"
    );
    let err = fx.error("fs.read", json!({"path": "/dev/zero"})).await;
    assert!(
        err.starts_with("/dev/zero is a device, not a regular file"),
        "{err}"
    );
    let err = fx
        .error("fs.write", json!({"path": "/dev/null", "content": "x"}))
        .await;
    assert!(err.starts_with("/dev/null is a device"), "{err}");
}

/// Opens `fifo` for writing on a plain thread (not the blocking pool, so a failing test cannot
/// hang the runtime's shutdown) and sends `(tag, the open end)` once a command has opened it
/// for reading.
fn open_gate(fifo: PathBuf, tag: usize, tx: tokio::sync::mpsc::UnboundedSender<(usize, File)>) {
    std::thread::spawn(move || {
        let file = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
        let _ = tx.send((tag, file));
    });
}

#[tokio::test]
async fn bash_commands_beyond_the_limit_wait_their_turn() {
    let fx = fixture(Authority::terminal(), |s| s.max_concurrent_commands = 1);
    let limits = fx.ctx.process.commands.clone();
    // Each command logs its start, waits on its own gate, logs its end.
    let (tx, mut opened) = tokio::sync::mpsc::unbounded_channel();
    for n in [1, 2] {
        let gate = fx.ws.join(format!("gate-{n}"));
        mkfifo(&gate);
        open_gate(gate, n, tx.clone());
    }
    let command = |n: usize| {
        let cmd = format!("echo start-{n} >> log; read x < gate-{n}; echo end-{n} >> log");
        fx.call("bash", json!({"cmd": cmd, "timeout_seconds": 20}))
    };
    let control = async {
        // One command runs (it opened its gate); the other waits for the slot.
        let (first, mut gate) = opened.recv().await.unwrap();
        assert_eq!((limits.running(), limits.waiting()), (1, 1));
        gate.write_all(b"go\n").unwrap();
        drop(gate);
        // The second starts only once the first has ended.
        let (second, mut gate) = opened.recv().await.unwrap();
        assert_ne!(first, second);
        assert_eq!((limits.running(), limits.waiting()), (1, 0));
        gate.write_all(b"go\n").unwrap();
        drop(gate);
        (first, second)
    };
    let work = async { tokio::join!(command(1), command(2), control) };
    let (a, b, (first, second)) = bounded(work).await;
    assert_eq!(
        (a.unwrap(), b.unwrap()),
        ("(no output)".into(), "(no output)".into())
    );
    let log = std::fs::read_to_string(fx.ws.join("log")).unwrap();
    assert_eq!(
        log,
        format!("start-{first}\nend-{first}\nstart-{second}\nend-{second}\n"),
        "the second command started before the first ended"
    );
    assert_eq!((limits.running(), limits.waiting()), (0, 0));
}

#[tokio::test]
async fn a_cancelled_command_frees_its_slot() {
    let fx = fixture(Authority::terminal(), |s| s.max_concurrent_commands = 1);
    mkfifo(&fx.ws.join("gate"));
    let (tx, mut opened) = tokio::sync::mpsc::unbounded_channel();
    open_gate(fx.ws.join("gate"), 0, tx);
    let mut blocked = Box::pin(fx.call("bash", json!({"cmd": "read x < gate"})));
    let _gate = tokio::select! {
        r = &mut blocked => panic!("the command ended before it was cancelled: {r:?}"),
        gate = opened.recv() => gate.unwrap(),
    };
    assert_eq!(fx.ctx.process.commands.running(), 1);
    drop(blocked); // what a cancelled turn does: the group is killed, the slot freed
    assert_eq!(fx.ctx.process.commands.running(), 0);
    assert_eq!(
        fx.call("bash", json!({"cmd": "echo next"})).await.unwrap(),
        "next"
    );
}

#[tokio::test]
async fn bash_timeouts_over_the_maximum_are_lowered_with_a_note() {
    let fx = fixture(Authority::terminal(), |s| {
        s.bash_max_timeout = Duration::from_secs(1)
    });
    let note = "[note: timeout_seconds=600 is over the maximum of 1 \
                (BUB_BASH_MAX_TIMEOUT_SECONDS); 1 was used]";
    let out = fx
        .call("bash", json!({"cmd": "echo hi", "timeout_seconds": 600}))
        .await
        .unwrap();
    assert_eq!(out, format!("hi\n{note}"));
    // The lowered timeout is the one applied: a FIFO nobody writes to never ends the read.
    mkfifo(&fx.ws.join("never"));
    let err = fx
        .error(
            "bash",
            json!({"cmd": "read x < never", "timeout_seconds": 600}),
        )
        .await;
    assert!(
        err.starts_with(
            "timeout: command did not finish within 1s (it and all it started were killed)"
        ),
        "{err}"
    );
    assert!(err.ends_with(note), "{err}");
    // Within the maximum: no note.
    let out = fx
        .call("bash", json!({"cmd": "echo ok", "timeout_seconds": 1}))
        .await;
    assert_eq!(out.unwrap(), "ok");
}
