//! Unit tests of background commands: bounded output, and who may see, read and end them.

use super::*;

fn no_secrets() -> Arc<Redactor> {
    Arc::new(Redactor::new(Vec::<String>::new()))
}

fn args(cmd: &str) -> BashArgs {
    BashArgs {
        cmd: cmd.into(),
        cwd: None,
        timeout_seconds: None,
        background: Some(true),
    }
}

fn person(role: Role, id: &str) -> Authority {
    Authority::sender(
        role,
        Principal {
            channel: "telegram".into(),
            id: id.into(),
            name: None,
        },
    )
}

/// A workspace and the launch of commands in it.
struct Rig {
    dir: tempfile::TempDir,
    home: std::path::PathBuf,
}

impl Rig {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        Self { dir, home }
    }

    fn launch(&self) -> Launch<'_> {
        Launch {
            workspace: self.dir.path(),
            session_id: "s",
            home: &self.home,
            user_home: None,
            sandboxed: false,
            folder: None,
        }
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let wait = async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), wait)
        .await
        .unwrap_or_else(|_| panic!("{what}"));
}

#[tokio::test]
async fn output_is_bounded_read_in_parts_and_says_what_was_dropped() {
    let rig = Rig::new();
    let owner = Authority::terminal();
    let (limits, background) = (CommandLimits::new(1, 60), Background::new(1, no_secrets()));
    let cmd = "head -c 200000 /dev/zero | tr '\\0' x; echo; echo end";
    let started = background
        .start(&"s".into(), &owner, &args(cmd), rig.launch(), &limits)
        .unwrap();
    assert!(started.contains("command 1"), "{started}");
    let refused = background.start(&"s".into(), &owner, &args("true"), rig.launch(), &limits);
    assert!(
        refused
            .unwrap_err()
            .message()
            .contains("every command slot"),
        "the one slot is the running command's"
    );
    // Nothing is read until it ended (`,status` does not read).
    until("the command ends", || {
        background.describe(&"s".into(), &owner)[0].contains("exit=0")
    })
    .await;
    let first = background.output(&"s".into(), &owner, 1).unwrap();
    assert!(first.starts_with("[1 exit=0]"), "{}", &first[..40]);
    assert!(
        first.contains("earlier bytes were dropped"),
        "{}",
        &first[..200]
    );
    assert!(first.len() < READ_BYTES + 300, "{} bytes", first.len());
    assert!(first.ends_with("more bytes: read again]"));
    let mut rest = String::new();
    for _ in 0..8 {
        rest.push_str(&background.output(&"s".into(), &owner, 1).unwrap());
    }
    assert!(rest.contains("end"), "the last of it is kept");
    assert!(limits.try_slot(Role::Owner).is_some(), "the slot is back");
}

#[tokio::test]
async fn a_guest_sees_reads_and_ends_only_their_own_commands() {
    let rig = Rig::new();
    let (owner, guest, other) = (
        person(Role::Owner, "1"),
        person(Role::Guest, "7"),
        person(Role::Guest, "8"),
    );
    let (limits, background) = (CommandLimits::new(8, 60), Background::new(1, no_secrets()));
    let secret = "echo owner-secret; sleep 60";
    background
        .start(
            &"group".into(),
            &owner,
            &args(secret),
            rig.launch(),
            &limits,
        )
        .unwrap();
    background
        .start(
            &"group".into(),
            &guest,
            &args("echo mine; sleep 60"),
            rig.launch(),
            &limits,
        )
        .unwrap();

    // The owner's command 1 does not exist for the guests.
    for who in [&guest, &other] {
        let read = background.output(&"group".into(), who, 1).unwrap_err();
        assert!(
            read.message().contains("no background command 1"),
            "{read:?}"
        );
        assert!(background.kill(&"group".into(), who, 1).is_err());
    }
    // A batch of the guest and the owner runs as a guest: still not the owner's.
    let both = Authority::least([&guest, &owner]);
    assert!(background.output(&"group".into(), &both, 1).is_err());
    let status = background.describe(&"group".into(), &guest).join("\n");
    assert!(!status.contains("owner-secret"), "{status}");
    assert!(status.contains("background 2 running"), "{status}");
    assert!(
        status.contains("background: 1 running, started by someone else"),
        "{status}"
    );
    let status = background.describe(&"group".into(), &other).join("\n");
    assert!(!status.contains("echo"), "{status}");
    assert!(
        status.contains("2 running, started by someone else"),
        "{status}"
    );

    // The guest reads their own; the other guest cannot end it; the owner sees everything.
    until("the guest's command to write", || {
        background
            .output(&"group".into(), &guest, 2)
            .unwrap()
            .contains("mine")
            || background.describe(&"group".into(), &owner).len() == 3
    })
    .await;
    assert!(background.kill(&"group".into(), &other, 2).is_err());
    let status = background.describe(&"group".into(), &owner).join("\n");
    assert!(status.contains("owner-secret"), "{status}");
    assert!(status.contains("echo mine"), "{status}");
    // The owner reaches commands of any chat.
    assert!(background.output(&"elsewhere".into(), &owner, 2).is_ok());
    assert!(
        background.output(&"elsewhere".into(), &guest, 2).is_err(),
        "a guest only in its chat"
    );

    // `/stop` by the guest ends theirs only; `/new` by the owner ends the rest.
    assert_eq!(background.stop_in(&"group".into(), &guest, true), 1);
    assert_eq!(background.stop_in(&"group".into(), &guest, false), 0);
    assert_eq!(background.stop_in(&"group".into(), &owner, false), 1);
    until("both end, killed", || {
        background.rows().iter().all(|r| r.state == "killed")
    })
    .await;
}

#[tokio::test]
async fn a_guest_runs_one_command_in_all_chats_and_owners_keep_their_slots() {
    let rig = Rig::new();
    let (owner, guest, other) = (
        person(Role::Owner, "1"),
        person(Role::Guest, "7"),
        person(Role::Guest, "8"),
    );
    let (limits, background) = (CommandLimits::new(2, 60), Background::new(1, no_secrets()));
    background
        .start(
            &"a".into(),
            &guest,
            &args("sleep 60"),
            rig.launch(),
            &limits,
        )
        .unwrap();
    let second = background
        .start(
            &"b".into(),
            &guest,
            &args("sleep 60"),
            rig.launch(),
            &limits,
        )
        .unwrap_err();
    assert!(
        second.message().contains("BUB_GUEST_BACKGROUND_COMMANDS"),
        "{second:?}"
    );
    // Another guest finds the guests' share (1 of 2) taken; the owner gets the last slot.
    let third = background
        .start(
            &"b".into(),
            &other,
            &args("sleep 60"),
            rig.launch(),
            &limits,
        )
        .unwrap_err();
    assert!(third.message().contains("every command slot"), "{third:?}");
    background
        .start(
            &"b".into(),
            &owner,
            &args("sleep 60"),
            rig.launch(),
            &limits,
        )
        .unwrap();
    // The operator ends any command.
    let rows = background.rows();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].owner, "guest (telegram:7)");
    assert_eq!(
        background.end(rows[0].id),
        Ok("killed background command 1".into())
    );
    assert!(background.end(99).is_err());
    until("the guest's slot to come back", || {
        background
            .start(&"a".into(), &other, &args("true"), rig.launch(), &limits)
            .is_ok()
    })
    .await;
}

#[test]
fn guests_get_background_commands_only_where_they_stay_contained() {
    assert_eq!(contained(Ok(()), true), Ok(()));
    assert!(
        contained(Ok(()), false)
            .unwrap_err()
            .contains("scope signals")
    );
    assert_eq!(contained(Err("no /proc"), true), Err("no /proc"));
}

#[tokio::test]
async fn a_secret_of_bubs_is_never_shown_in_a_command_line() {
    let rig = Rig::new();
    let owner = Authority::terminal();
    let redactor = Arc::new(Redactor::new(["sk-live-1234"]));
    let (limits, background) = (CommandLimits::new(1, 60), Background::new(1, redactor));
    let cmd = "curl -H 'Authorization: Bearer sk-live-1234' localhost; sleep 60";
    background
        .start(&"s".into(), &owner, &args(cmd), rig.launch(), &limits)
        .unwrap();
    let shown = [
        background.describe(&"s".into(), &owner).join("\n"),
        background.rows()[0].command.clone(),
    ];
    for text in shown {
        assert!(!text.contains("sk-live-1234"), "{text}");
        assert!(text.contains("[redacted]"), "{text}");
    }
    background.stop_all();
}
