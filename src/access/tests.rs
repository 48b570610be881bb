//! Tests of admission, roles, pairing approval and revocation against a temp `BUB_HOME`.

use std::path::Path;

use chrono::{Duration, TimeZone, Utc};

use super::*;

fn settings(home: &Path, f: impl FnOnce(&mut Settings)) -> Settings {
    let mut s = Settings::with_defaults(home.to_path_buf(), home.to_path_buf());
    f(&mut s);
    s
}

fn user(id: &str) -> User<'_> {
    User {
        id,
        ..User::default()
    }
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
}

#[tokio::test]
async fn empty_list_admits_nobody_star_admits_guests() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |_| {}));
    assert_eq!(access.role("telegram", user("42")).await, None);
    assert_eq!(access.role("discord", user("42")).await, None);
    let access = Access::new(&settings(dir.path(), |s| {
        s.channel_mut("telegram").allow_from = vec!["*".into()];
        s.channel_mut("telegram").owners = vec!["7".into()];
    }));
    assert_eq!(access.role("telegram", user("42")).await, Some(Role::Guest));
    assert_eq!(access.role("telegram", user("7")).await, Some(Role::Owner));
    assert_eq!(access.role("discord", user("42")).await, None);
    assert_eq!(access.role("slack", user("42")).await, None);
}

fn named<'a>(id: &'a str, name: &'a str) -> User<'a> {
    User {
        id,
        name: Some(name),
        display: None,
    }
}

#[tokio::test]
async fn listed_ids_are_owners_until_owners_are_configured_usernames_are_guests() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |s| {
        s.channel_mut("discord").allow_from = vec!["1001".into(), "@Alice".into()];
    }));
    assert_eq!(
        access.role("discord", user("1001")).await,
        Some(Role::Owner)
    );
    let alice = named("5", "alice");
    assert_eq!(
        access.admission("discord", alice).await,
        Some(Admission {
            role: Role::Guest,
            via: Via::Username
        }),
        "a username never makes an owner"
    );
    assert_eq!(access.role("discord", named("6", "mallory")).await, None);
    let access = Access::new(&settings(dir.path(), |s| {
        s.channel_mut("discord").allow_from = vec!["1001".into(), "alice".into()];
        s.channel_mut("discord").owners = vec!["1001".into()];
    }));
    assert_eq!(
        access.role("discord", user("1001")).await,
        Some(Role::Owner)
    );
    assert_eq!(access.role("discord", alice).await, Some(Role::Guest));
}

#[tokio::test]
async fn an_id_entry_matches_ids_only_and_a_username_entry_usernames_only() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |s| {
        s.channel_mut("discord").allow_from = vec![" 1001 ".into(), "@Bob".into(), "@2002".into()];
        s.channel_mut("telegram").allow_from = vec!["1001".into()];
        s.channel_mut("telegram").owners = vec!["7".into()];
    }));
    // A stranger whose username is the owner's id (Discord usernames may be all digits).
    assert_eq!(access.admission("discord", named("66", "1001")).await, None);
    assert_eq!(
        access.admission("telegram", named("66", "1001")).await,
        None
    );
    assert_eq!(
        access.role("discord", named("1001", "anything")).await,
        Some(Role::Owner)
    );
    // `@2002` is a username: it never matches the id 2002.
    assert_eq!(access.role("discord", user("2002")).await, None);
    assert_eq!(
        access.role("discord", named("8", "2002")).await,
        Some(Role::Guest)
    );
    assert_eq!(
        access.role("discord", named("9", "BOB")).await,
        Some(Role::Guest)
    );
    assert_eq!(
        access.role("discord", user("bob")).await,
        None,
        "an id is not a username"
    );
    // An id on the list is a guest once owners are configured.
    assert_eq!(
        access.role("telegram", user("1001")).await,
        Some(Role::Guest)
    );
    assert_eq!(access.role("telegram", user("7")).await, Some(Role::Owner));
}

#[tokio::test]
async fn with_only_usernames_listed_the_first_paired_user_becomes_owner() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |s| {
        s.channel_mut("telegram").allow_from = vec!["ann".into()];
    }));
    let Request::New(p) = access
        .request_pairing("telegram", named("50", "ann"), "50", now())
        .await
        .unwrap()
    else {
        panic!("a first request gets a code");
    };
    let paired = access
        .approve("telegram", &p.code, None, now())
        .await
        .unwrap();
    assert_eq!(paired.role, Role::Owner, "usernames make no owner");
    assert_eq!(
        access.role("telegram", named("50", "ann")).await,
        Some(Role::Owner)
    );
    // Revoked, ann is still a guest by username, and `revoke` says so.
    let revoked = access.revoke("telegram", "50").await.unwrap();
    assert_eq!(revoked.still_admitted_by, Some("BUB_TELEGRAM_ALLOW_FROM"));
    assert_eq!(
        access.role("telegram", named("50", "ann")).await,
        Some(Role::Guest)
    );
}

#[tokio::test]
async fn pairing_request_approve_and_revoke() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |_| {}));
    let ann = User {
        id: "42",
        name: Some("ann"),
        display: None,
    };
    let Request::New(pending) = access
        .request_pairing("telegram", ann, "42", now())
        .await
        .unwrap()
    else {
        panic!("a first request gets a code");
    };
    assert_eq!(
        access
            .request_pairing("telegram", ann, "42", now() + Duration::minutes(1))
            .await
            .unwrap(),
        Request::AlreadyAsked
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("access.json"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        access.role("telegram", ann).await,
        None,
        "pending is not admitted"
    );
    assert_eq!(access.pending(now()).await.len(), 1);

    let err = access
        .approve("telegram", "WRONGCDE", None, now())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no pending request"), "{err}");
    let typed = pending.code.to_lowercase();
    let paired = access
        .approve("telegram", &typed, None, now())
        .await
        .unwrap();
    assert_eq!(
        paired.role,
        Role::Owner,
        "first approval in a channel without owners"
    );
    assert_eq!(access.role("telegram", ann).await, Some(Role::Owner));
    assert!(access.pending(now()).await.is_empty());

    // The second approved user is a guest.
    let Request::New(bob) = access
        .request_pairing("telegram", user("43"), "43", now())
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        access
            .approve("telegram", &bob.code, None, now())
            .await
            .unwrap()
            .role,
        Role::Guest
    );
    // --owner overrides.
    let Request::New(cy) = access
        .request_pairing("telegram", user("44"), "44", now())
        .await
        .unwrap()
    else {
        panic!()
    };
    let cy = access
        .approve("telegram", &cy.code, Some(Role::Owner), now())
        .await
        .unwrap();
    assert_eq!(cy.role, Role::Owner);

    let revoked = access.revoke("telegram", "42").await.unwrap();
    assert!(revoked.removed && revoked.still_admitted_by.is_none());
    assert_eq!(access.role("telegram", ann).await, None);
    assert!(!access.revoke("telegram", "42").await.unwrap().removed);
}

#[tokio::test]
async fn expired_codes_cannot_be_approved() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |_| {}));
    let Request::New(p) = access
        .request_pairing("discord", user("9"), "dm-1", now())
        .await
        .unwrap()
    else {
        panic!()
    };
    let later = now() + pairing::CODE_TTL + Duration::seconds(1);
    assert!(
        access
            .approve("discord", &p.code, None, later)
            .await
            .is_err()
    );
    assert_eq!(access.role("discord", user("9")).await, None);
}

#[tokio::test]
async fn a_job_creator_who_lost_access_is_refused_and_roles_only_shrink() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |s| {
        s.channel_mut("telegram").allow_from = vec!["42".into(), "43".into()];
        s.channel_mut("telegram").owners = vec!["43".into()];
    }));
    let as_owner = |id: &str| {
        Authority::sender(
            Role::Owner,
            Principal {
                channel: "telegram".into(),
                id: id.into(),
                name: None,
            },
        )
    };
    assert_eq!(
        access.reconfirm(&as_owner("43")).await.unwrap().role,
        Role::Owner
    );
    assert_eq!(
        access.reconfirm(&as_owner("42")).await.unwrap().role,
        Role::Guest,
        "42 is now a guest"
    );
    let err = access.reconfirm(&as_owner("99")).await.unwrap_err();
    assert!(err.contains("telegram:99 is no longer admitted"), "{err}");
    assert_eq!(
        access.reconfirm(&Authority::terminal()).await.unwrap(),
        Authority::terminal()
    );
}

#[tokio::test]
async fn a_batch_runs_with_the_least_trusted_role() {
    let p = |id: &str| Principal {
        channel: "telegram".into(),
        id: id.into(),
        name: None,
    };
    let batch = [
        Authority::sender(Role::Owner, p("1")),
        Authority::sender(Role::Guest, p("2")),
        Authority::sender(Role::Owner, p("1")),
    ];
    let least = Authority::least(&batch);
    assert_eq!(least.role, Role::Guest);
    assert_eq!(least.senders, vec![p("1"), p("2")]);
    assert_eq!(least.describe(), "guest (telegram:1, telegram:2)");
}

#[tokio::test]
async fn a_corrupt_access_file_admits_only_the_configured_lists() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("access.json"), "{not json").unwrap();
    let access = Access::new(&settings(dir.path(), |s| {
        s.channel_mut("telegram").allow_from = vec!["1".into()];
    }));
    assert_eq!(access.role("telegram", user("1")).await, Some(Role::Owner));
    assert_eq!(access.role("telegram", user("2")).await, None);
    assert!(
        access
            .request_pairing("telegram", user("2"), "2", now())
            .await
            .is_err(),
        "a corrupt file is never overwritten"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("access.json")).unwrap(),
        "{not json"
    );
}

#[tokio::test]
async fn explain_names_the_lists_and_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), |s| {
        s.channel_mut("telegram").allow_from = vec!["*".into()];
        s.channel_mut("telegram").owners = vec!["7".into()];
        s.channel_mut("telegram").allow_chats = vec!["42".into()];
    });
    let access = Access::new(&s);
    let tools = [
        "bash",
        "fs.read",
        "fs.write",
        "message.send",
        "schedule.add",
    ];
    let out = access
        .explain(&s, &tools, ("telegram", "42"), Some(user("9")), now())
        .await
        .unwrap();
    assert!(
        out.contains(
            "jobs: 5 of theirs per chat, messages up to 1024 bytes, runs at least 300 s apart; \
             remove only the jobs they created; a job's run cannot schedule more"
        ),
        "{out}"
    );
    assert!(
        out.contains("served (listed in BUB_TELEGRAM_ALLOW_CHATS)"),
        "{out}"
    );
    assert!(out.contains("owners (BUB_TELEGRAM_OWNERS): 7"), "{out}");
    assert!(out.contains("user 9: guest"), "{out}");
    assert!(
        out.contains("tools (3): fs.read, message.send, schedule.add"),
        "{out}"
    );
    assert!(out.contains("only to telegram:42"), "{out}");
    let out = access
        .explain(&s, &tools, ("telegram", "42"), Some(user("7")), now())
        .await
        .unwrap();
    assert!(
        out.contains("user 7: owner (listed in BUB_TELEGRAM_OWNERS)") && out.contains("tools (5)"),
        "{out}"
    );
    assert!(
        out.contains(
            "jobs: 50 of theirs per chat, messages up to 4096 bytes, runs at least 1 s apart; \
             remove any job of the chat; a job's run may schedule more"
        ),
        "{out}"
    );
    let out = access
        .explain(&s, &tools, ("telegram", "5"), None, now())
        .await
        .unwrap();
    assert!(out.contains("NOT served"), "{out}");
    assert!(
        out.contains("owners get:") && out.contains("guests get:"),
        "{out}"
    );
}

#[tokio::test]
async fn explain_gives_the_gates_verdict_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), |s| {
        s.channel_mut("discord").allow_from = vec!["1001".into(), "alice".into()];
    });
    let access = Access::new(&s);
    let tools = ["bash", "fs.read"];
    let verdict = async |u: User<'_>| {
        let out = access
            .explain(&s, &tools, ("discord", "555"), Some(u), now())
            .await
            .unwrap();
        let line = out.lines().find(|l| l.starts_with("user ")).unwrap();
        (line.to_owned(), out)
    };
    for u in [
        user("1001"),
        named("66", "1001"),
        named("5", "Alice"),
        user("5"),
        user("66"),
    ] {
        let (line, out) = verdict(u).await;
        let expected = match access.role("discord", u).await {
            Some(role) => format!(": {role} ("),
            None => ": not admitted".to_owned(),
        };
        assert!(line.contains(&expected), "{u:?}: {line}");
        assert!(
            out.contains(
                "senders (BUB_DISCORD_ALLOW_FROM): 1001, usernames alice (as guests only)"
            ),
            "{out}"
        );
        assert!(
            out.contains("owners (BUB_DISCORD_OWNERS): none configured: the ids on BUB_DISCORD_ALLOW_FROM are owners (1001)"),
            "{out}"
        );
    }
    assert_eq!(
        verdict(named("66", "1001")).await.0,
        "user 66 @1001: not admitted (a private message gets a pairing code; groups ignore them)"
    );
    let (line, _) = verdict(named("5", "Alice")).await;
    assert!(
        line.contains("user 5 @Alice: guest (their username is on BUB_DISCORD_ALLOW_FROM: usernames admit guests only; owners need ids (BUB_DISCORD_OWNERS or an id on the list))"),
        "{line}"
    );
    assert!(
        verdict(user("1001"))
            .await
            .0
            .contains("owner (their id is on BUB_DISCORD_ALLOW_FROM)")
    );
}
