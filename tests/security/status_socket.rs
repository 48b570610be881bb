//! The daemon's status socket (`BUB_HOME/daemon.sock`) answers only a client that sends the
//! token of `BUB_HOME/daemon.token`: `bub status` does; a raw client without it, with a wrong
//! one, or one that sends nothing gets no snapshot; and a guest's sandboxed command, which
//! cannot read `BUB_HOME`, cannot get the token (where the kernel has Landlock).

use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::bub_env::{Env, WAIT, stdout, texts};
use crate::support::fake_telegram::private_text;

/// Reads the token (if it can) and asks the socket with a blank line and with a wrong token;
/// prints what it got.
const PROBE: &str = r#"
import socket, sys
home = sys.argv[1]
try:
    with open(home + "/daemon.token") as f:
        print("token: read", f.read().strip())
except OSError as e:
    print("token:", e.strerror)
for sent in (b"\n", b"0" * 64 + b"\n"):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(home + "/daemon.sock")
    s.sendall(sent)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    print("reply:", data.decode(errors="replace").strip() or "(nothing)")
"#;

/// What a raw client gets from the socket after sending `sent` (`None`: nothing, the
/// connection left open), bounded.
async fn raw(home: &Path, sent: Option<&str>) -> String {
    let mut stream = tokio::net::UnixStream::connect(home.join("daemon.sock"))
        .await
        .unwrap();
    if let Some(sent) = sent {
        stream.write_all(sent.as_bytes()).await.unwrap();
    }
    let mut reply = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut reply))
        .await
        .expect("the daemon closes the connection")
        .unwrap();
    String::from_utf8_lossy(&reply).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_socket_answers_only_the_holder_of_the_token() {
    let mut env = Env::new().await;
    env.set("BUB_GUEST_TOOLS", "bash");
    // A guest's shell works in its chat's folder.
    let folder = env.workspace.join("chats/telegram-50");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("probe.py"), PROBE).unwrap();
    env.model.push_text("hello");
    let daemon = env.start();
    // A live session for the snapshot to show.
    env.telegram.push_message(private_text(42, 42, "hi"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let shown = env.run(&["status"]).await;
    assert!(shown.status.success(), "{shown:?}");
    assert!(stdout(&shown).contains("telegram:42"), "{}", stdout(&shown));

    let wrong = format!("{}\n", "0".repeat(64));
    for sent in [None, Some("\n"), Some("hello\n"), Some(wrong.as_str())] {
        let reply = raw(&env.home, sent).await;
        assert!(
            !reply.contains("telegram:42") && !reply.contains('{'),
            "no snapshot for {sent:?}: {reply}"
        );
        if sent.is_some() {
            assert!(reply.starts_with("refused"), "{sent:?}: {reply}");
        }
    }
    let token = std::fs::read_to_string(env.home.join("daemon.token")).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(env.home.join("daemon.token"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let reply = raw(&env.home, Some(&token)).await;
    assert!(reply.contains("\"session\":\"telegram:42\""), "{reply}");

    // A guest's sandboxed command: no token, so no snapshot.
    let python = Path::new("/usr/bin/python3");
    if python.exists() {
        let command = format!(",{} probe.py {}", python.display(), env.home.display());
        env.telegram.push_message(private_text(50, 50, &command));
        let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
        let out = &texts(&sent)[1];
        if out.contains("the sandbox is not available on this kernel") {
            eprintln!("Landlock unavailable: the sandboxed probe was refused ({out})");
        } else {
            assert!(out.contains("token: Permission denied"), "{out}");
            assert!(out.contains("reply: refused"), "{out}");
            for leak in [
                "telegram:42",
                "telegram:50",
                "sessions",
                &token.trim()[..16],
            ] {
                assert!(!out.contains(leak), "{leak:?} leaked: {out}");
            }
        }
    } else {
        eprintln!("no /usr/bin/python3: the sandboxed probe was skipped");
    }
    assert!(daemon.stop().await.success());
    assert!(
        !env.home.join("daemon.token").exists(),
        "the token goes with the daemon"
    );
}
