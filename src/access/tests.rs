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
    User { id, name: None }
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
}

#[test]
fn empty_list_admits_nobody_star_admits_guests() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |_| {}));
    assert_eq!(access.role("telegram", user("42")), None);
    assert_eq!(access.role("discord", user("42")), None);
    let access = Access::new(&settings(dir.path(), |s| {
        s.telegram.allow_from = vec!["*".into()];
        s.telegram.owners = vec!["7".into()];
    }));
    assert!(access.admits_everyone("telegram") && !access.admits_everyone("discord"));
    assert_eq!(access.role("telegram", user("42")), Some(Role::Guest));
    assert_eq!(access.role("telegram", user("7")), Some(Role::Owner));
    assert_eq!(access.role("discord", user("42")), None);
    assert_eq!(access.role("slack", user("42")), None);
}

#[test]
fn named_users_are_owners_until_owners_are_configured() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |s| {
        s.discord.allow_from = vec!["1001".into(), "@Alice".into()];
    }));
    assert_eq!(access.role("discord", user("1001")), Some(Role::Owner));
    let alice = User {
        id: "5",
        name: Some("alice"),
    };
    assert_eq!(access.role("discord", alice), Some(Role::Owner));
    assert_eq!(
        access.role(
            "discord",
            User {
                id: "6",
                name: Some("mallory")
            }
        ),
        None
    );
    let access = Access::new(&settings(dir.path(), |s| {
        s.discord.allow_from = vec!["1001".into(), "alice".into()];
        s.discord.owners = vec!["1001".into()];
    }));
    assert_eq!(access.role("discord", user("1001")), Some(Role::Owner));
    assert_eq!(access.role("discord", alice), Some(Role::Guest));
}

#[test]
fn pairing_request_approve_and_revoke() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |_| {}));
    let ann = User {
        id: "42",
        name: Some("ann"),
    };
    let Request::New(pending) = access
        .request_pairing("telegram", ann, "42", now())
        .unwrap()
    else {
        panic!("a first request gets a code");
    };
    assert_eq!(
        access
            .request_pairing("telegram", ann, "42", now() + Duration::minutes(1))
            .unwrap(),
        Request::AlreadyPending
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("access.json"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        access.role("telegram", ann),
        None,
        "pending is not admitted"
    );
    assert_eq!(access.pending(now()).len(), 1);

    let err = access
        .approve("telegram", "WRONGCDE", None, now())
        .unwrap_err();
    assert!(err.to_string().contains("no pending request"), "{err}");
    let typed = pending.code.to_lowercase();
    let paired = access.approve("telegram", &typed, None, now()).unwrap();
    assert_eq!(
        paired.role,
        Role::Owner,
        "first approval in a channel without owners"
    );
    assert_eq!(access.role("telegram", ann), Some(Role::Owner));
    assert!(access.pending(now()).is_empty());

    // The second approved user is a guest.
    let Request::New(bob) = access
        .request_pairing("telegram", user("43"), "43", now())
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        access
            .approve("telegram", &bob.code, None, now())
            .unwrap()
            .role,
        Role::Guest
    );
    // --owner overrides.
    let Request::New(cy) = access
        .request_pairing("telegram", user("44"), "44", now())
        .unwrap()
    else {
        panic!()
    };
    let cy = access
        .approve("telegram", &cy.code, Some(Role::Owner), now())
        .unwrap();
    assert_eq!(cy.role, Role::Owner);

    let revoked = access.revoke("telegram", "42").unwrap();
    assert!(revoked.removed && revoked.still_admitted_by.is_none());
    assert_eq!(access.role("telegram", ann), None);
    assert!(!access.revoke("telegram", "42").unwrap().removed);
}

#[test]
fn expired_codes_cannot_be_approved() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |_| {}));
    let Request::New(p) = access
        .request_pairing("discord", user("9"), "dm-1", now())
        .unwrap()
    else {
        panic!()
    };
    let later = now() + pairing::CODE_TTL + Duration::seconds(1);
    assert!(access.approve("discord", &p.code, None, later).is_err());
    assert_eq!(access.role("discord", user("9")), None);
}

#[test]
fn a_job_creator_who_lost_access_is_refused_and_roles_only_shrink() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&settings(dir.path(), |s| {
        s.telegram.allow_from = vec!["42".into(), "43".into()];
        s.telegram.owners = vec!["43".into()];
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
    assert_eq!(access.reconfirm(&as_owner("43")).unwrap().role, Role::Owner);
    assert_eq!(
        access.reconfirm(&as_owner("42")).unwrap().role,
        Role::Guest,
        "42 is now a guest"
    );
    let err = access.reconfirm(&as_owner("99")).unwrap_err();
    assert!(err.contains("telegram:99 is no longer admitted"), "{err}");
    assert_eq!(
        access.reconfirm(&Authority::terminal()).unwrap(),
        Authority::terminal()
    );
}

#[test]
fn a_batch_runs_with_the_least_trusted_role() {
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

#[test]
fn a_corrupt_access_file_admits_only_the_configured_lists() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("access.json"), "{not json").unwrap();
    let access = Access::new(&settings(dir.path(), |s| {
        s.telegram.allow_from = vec!["1".into()];
    }));
    assert_eq!(access.role("telegram", user("1")), Some(Role::Owner));
    assert_eq!(access.role("telegram", user("2")), None);
    assert!(
        access
            .request_pairing("telegram", user("2"), "2", now())
            .is_err(),
        "a corrupt file is never overwritten"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("access.json")).unwrap(),
        "{not json"
    );
}

#[test]
fn explain_names_the_lists_and_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), |s| {
        s.telegram.allow_from = vec!["*".into()];
        s.telegram.owners = vec!["7".into()];
        s.telegram.allow_chats = vec!["42".into()];
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
        .explain(&s, &tools, "telegram:42", Some("9"), now())
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
        .explain(&s, &tools, "telegram:42", Some("7"), now())
        .unwrap();
    assert!(
        out.contains("user 7: owner") && out.contains("tools (5)"),
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
        .explain(&s, &tools, "telegram:5", None, now())
        .unwrap();
    assert!(out.contains("NOT served"), "{out}");
    assert!(
        out.contains("owners get:") && out.contains("guests get:"),
        "{out}"
    );
}
