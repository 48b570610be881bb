//! The gate's decisions against a temp `BUB_HOME`: chat lists, admission, pairing.

use std::path::Path;

use super::*;
use crate::access::pairing::MAX_PENDING;
use crate::config::Settings;

fn gate(home: &Path, f: impl FnOnce(&mut Settings)) -> Gate {
    let mut s = Settings::with_defaults(home.to_path_buf(), home.to_path_buf());
    f(&mut s);
    Gate::new(Arc::new(Access::new(&s)))
}

fn user(id: &str) -> User<'_> {
    User {
        id,
        ..User::default()
    }
}

fn named<'a>(id: &'a str, name: &'a str) -> User<'a> {
    User {
        id,
        name: Some(name),
        display: None,
    }
}

fn private(id: &str) -> Chat<'_> {
    Chat {
        id,
        kind: ChatKind::Private,
    }
}

fn group(id: &str) -> Chat<'_> {
    Chat {
        id,
        kind: ChatKind::Group,
    }
}

/// The text of a pairing decision, or a panic naming what it was.
fn code_text(decision: Decision) -> String {
    match decision {
        Decision::Pair(text) => text,
        other => panic!("expected a pairing code, got {other:?}"),
    }
}

const STRANGER: Decision = Decision::Drop(Dropped::Sender);

#[tokio::test]
async fn an_empty_list_admits_nobody_and_groups_never_pair() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), |_| {});
    assert_eq!(
        gate.decide("telegram", group("-100"), user("42")).await,
        STRANGER
    );
    assert!(
        !dir.path().join("access.json").exists(),
        "a stranger in a group asks for nothing"
    );
    let text = code_text(gate.decide("telegram", private("42"), user("42")).await);
    assert!(text.contains("bub pair approve telegram "), "{text}");
    assert!(text.contains("Your telegram user id is 42."), "{text}");
    assert_eq!(
        gate.decide("discord", group("5"), user("42")).await,
        STRANGER
    );
}

#[tokio::test]
async fn star_admits_everyone_as_guests_and_owners_as_owners() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), |s| {
        s.channel_mut("telegram").allow_from = vec!["*".into()];
        s.channel_mut("telegram").owners = vec!["7".into()];
    });
    let admit = |role| Decision::Admit(role);
    assert_eq!(
        gate.decide("telegram", group("-1"), user("42")).await,
        admit(Role::Guest)
    );
    assert_eq!(
        gate.decide("telegram", group("-1"), user("7")).await,
        admit(Role::Owner)
    );
    assert!(
        matches!(
            gate.decide("discord", private("9"), user("7")).await,
            Decision::Pair(_)
        ),
        "the lists are per channel"
    );
    assert_eq!(
        gate.decide("slack", private("1"), user("7")).await,
        Decision::Drop(Dropped::Chat),
        "an unknown channel serves nothing"
    );
}

#[tokio::test]
async fn ids_admit_owners_until_owners_are_configured_and_usernames_admit_guests() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), |s| {
        s.channel_mut("discord").allow_from = vec!["1001".into(), "@Alice".into()];
    });
    let decide = |u| gate.decide("discord", group("555"), u);
    assert_eq!(decide(user("1001")).await, Decision::Admit(Role::Owner));
    assert_eq!(
        decide(named("5", "ALICE")).await,
        Decision::Admit(Role::Guest)
    );
    assert_eq!(
        decide(user("alice")).await,
        STRANGER,
        "an id is not a username"
    );
    assert_eq!(
        decide(named("66", "1001")).await,
        STRANGER,
        "a username that is the owner's id"
    );
    let gate = super::tests::gate(dir.path(), |s| {
        s.channel_mut("discord").allow_from = vec!["1001".into()];
        s.channel_mut("discord").owners = vec!["2".into()];
    });
    assert_eq!(
        gate.decide("discord", group("555"), user("1001")).await,
        Decision::Admit(Role::Guest)
    );
}

#[tokio::test]
async fn a_paired_user_is_admitted_with_the_role_approved() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), |_| {});
    let text = code_text(
        gate.decide("telegram", private("42"), named("42", "ann"))
            .await,
    );
    let code = text
        .split_whitespace()
        .skip_while(|w| *w != "telegram")
        .nth(1)
        .unwrap()
        .to_owned();
    let paired = gate
        .access
        .approve("telegram", &code, Some(Role::Guest), chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(paired.user_id, "42");
    // Approved in another process (`bub pair approve`): the next message is admitted.
    assert_eq!(
        gate.decide("telegram", group("-100"), user("42")).await,
        Decision::Admit(Role::Guest)
    );
    gate.access.revoke("telegram", "42").await.unwrap();
    assert_eq!(
        gate.decide("telegram", group("-100"), user("42")).await,
        STRANGER
    );
}

#[tokio::test]
async fn a_stranger_gets_one_code_an_hour_and_a_flood_gives_way() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), |_| {});
    code_text(gate.decide("telegram", private("50"), user("50")).await);
    assert_eq!(
        gate.decide("telegram", private("50"), user("50")).await,
        STRANGER,
        "asked again within the hour: nothing is sent"
    );
    for n in 0..MAX_PENDING {
        let id = format!("9{n}");
        code_text(gate.decide("telegram", private(&id), user(&id)).await);
    }
    let pending = gate.access.pending(chrono::Utc::now()).await;
    assert_eq!(pending.len(), MAX_PENDING, "the oldest gave way");
    assert!(pending.iter().all(|p| p.user_id != "50"));
    assert_eq!(
        gate.decide("telegram", private("50"), user("50")).await,
        STRANGER,
        "a request that gave way gets no second code within the hour"
    );
}

#[tokio::test]
async fn a_corrupt_access_file_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("access.json"), "{not json").unwrap();
    let gate = gate(dir.path(), |s| {
        s.channel_mut("telegram").allow_from = vec!["1".into()];
    });
    assert_eq!(
        gate.decide("telegram", private("1"), user("1")).await,
        Decision::Admit(Role::Owner)
    );
    assert_eq!(
        gate.decide("telegram", private("2"), user("2")).await,
        STRANGER,
        "no code: the request cannot be recorded"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("access.json")).unwrap(),
        "{not json"
    );
}

#[tokio::test]
async fn the_chat_list_comes_first_even_for_owners() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), |s| {
        let t = s.channel_mut("telegram");
        t.allow_from = vec!["*".into()];
        t.owners = vec!["7".into()];
        t.allow_chats = vec!["42".into(), " -100 ".into()];
    });
    let decide = |chat| gate.decide("telegram", chat, user("7"));
    assert_eq!(decide(group("-100")).await, Decision::Admit(Role::Owner));
    assert_eq!(decide(private("42")).await, Decision::Admit(Role::Owner));
    assert_eq!(decide(group("43")).await, Decision::Drop(Dropped::Chat));
    assert_eq!(
        gate.decide("telegram", private("44"), user("44")).await,
        Decision::Drop(Dropped::Chat),
        "no pairing from a chat that is not served"
    );
    assert!(!dir.path().join("access.json").exists());
}

#[tokio::test]
async fn a_thread_is_served_through_its_listed_parent_looked_up_only_when_needed() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), |s| {
        let d = s.channel_mut("discord");
        d.allow_from = vec!["*".into()];
        d.allow_chats = vec!["10".into()];
        s.channel_mut("telegram").allow_from = vec!["*".into()];
        s.channel_mut("telegram").allow_chats = vec!["10".into()];
    });
    let guest = Decision::Admit(Role::Guest);
    let never = async { panic!("the parent was looked up") };
    assert_eq!(
        gate.decide_thread("discord", group("10"), user("1"), never)
            .await,
        guest
    );
    let parent = |p: &str| std::future::ready(Some(p.to_owned()));
    assert_eq!(
        gate.decide_thread("discord", group("11"), user("1"), parent("10"))
            .await,
        guest,
        "a thread of an allowed channel"
    );
    assert_eq!(
        gate.decide_thread("discord", group("11"), user("1"), parent("12"))
            .await,
        Decision::Drop(Dropped::Chat)
    );
    assert_eq!(
        gate.decide("discord", group("11"), user("1")).await,
        Decision::Drop(Dropped::Chat)
    );
    let never = async { panic!("telegram serves no threads") };
    assert_eq!(
        gate.decide_thread("telegram", group("11"), user("1"), never)
            .await,
        Decision::Drop(Dropped::Chat)
    );
    // An empty list serves every chat.
    let gate = super::tests::gate(dir.path(), |s| {
        s.channel_mut("discord").allow_from = vec!["*".into()];
    });
    let never = async { panic!("an empty list serves every chat") };
    assert_eq!(
        gate.decide_thread("discord", group("-5"), user("1"), never)
            .await,
        guest
    );
}

/// `access.json` is read on the blocking pool, never on the adapter's thread: with the file a
/// FIFO nobody has written yet (a read that blocks), a one-thread runtime keeps running its
/// other tasks while the decision waits for it.
#[tokio::test(flavor = "current_thread")]
async fn access_json_is_read_off_the_adapters_thread() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("access.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a plain syscall on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let gate = gate(dir.path(), |s| {
        s.channel_mut("telegram").allow_from = vec!["*".into()];
    });
    let (free_tx, free_rx) = std::sync::mpsc::channel();
    // Writes the file once the runtime showed it is free — or after 10 s, so that the test
    // ends either way.
    let writer = std::thread::spawn(move || {
        let free = free_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .is_ok();
        std::fs::write(&fifo, r#"{"version": 1}"#).unwrap();
        free
    });
    let decide = tokio::spawn(async move { gate.decide("telegram", group("-1"), user("2")).await });
    // The decision runs until it waits for the file; then this task goes on.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let _ = free_tx.send(());
    let decision = decide.await.unwrap();
    assert!(
        writer.join().unwrap(),
        "the runtime's thread was blocked reading access.json"
    );
    assert_eq!(decision, Decision::Admit(Role::Guest));
}
