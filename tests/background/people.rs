//! Background commands belong to the person who started them, tried as a hostile guest would in
//! a group shared with the owner (user 42 is an owner, 50 and 51 are guests given `bash`): the
//! owner's command is neither named, read nor ended for a guest; a guest runs one at a time in
//! all chats and never takes the slots kept for owners; `/stop` ends a person's own, `/new` what
//! they may end, and the operator lists and ends any with `bub status` and in the console.

use crate::support::bub_env::{Env, stdout};

const GROUP: i64 = -100;
/// What the owner's command prints: a guest must never see it.
const SECRET: &str = "OWNER-SECRET-4242";

/// Guests get a shell with background commands.
const GUEST_SHELL: &str = "bash,bash.output,bash.kill";

#[tokio::test(flavor = "multi_thread")]
async fn in_a_shared_group_a_guest_neither_reads_nor_ends_the_owners_command() {
    let mut env = Env::new().await;
    env.set("BUB_GUEST_TOOLS", GUEST_SHELL);
    let daemon = env.start();
    let owners = format!(r#",bash cmd="echo {SECRET}; sleep 60" background=true"#);
    let started = env.say(GROUP, 42, &owners, 1).await;
    assert!(
        started.contains("started background command 1"),
        "{started}"
    );

    let mut guests = Vec::new();
    let read = env.say(GROUP, 50, ",bash.output id=1", 2).await;
    assert!(read.contains("no background command 1"), "{read}");
    let kill = env.say(GROUP, 50, ",bash.kill id=1", 3).await;
    assert!(kill.contains("no background command 1"), "{kill}");
    let status = env.say(GROUP, 50, ",status", 4).await;
    assert!(
        status.contains("background: 1 running, started by someone else"),
        "{status}"
    );
    guests.extend([read, kill, status]);

    // The guest's own: one at a time, in this chat and their private one alike.
    let own = env
        .say(GROUP, 50, r#",bash cmd="sleep 61" background=true"#, 5)
        .await;
    assert!(own.contains("started background command 2"), "{own}");
    let more = env
        .say(GROUP, 50, r#",bash cmd="sleep 62" background=true"#, 6)
        .await;
    assert!(more.contains("BUB_GUEST_BACKGROUND_COMMANDS"), "{more}");
    let private = env
        .say(50, 50, r#",bash cmd="sleep 63" background=true"#, 7)
        .await;
    assert!(
        private.contains("BUB_GUEST_BACKGROUND_COMMANDS"),
        "{private}"
    );
    // Another guest in the group neither reads nor ends it.
    let other = env.say(GROUP, 51, ",bash.kill id=2", 8).await;
    assert!(other.contains("no background command 2"), "{other}");

    // The operator sees both, with whose they are, and ends the guest's.
    let listed = env.run(&["status"]).await;
    let listed = stdout(&listed);
    assert!(listed.contains("background commands (2"), "{listed}");
    assert!(listed.contains("owner (telegram:42)"), "{listed}");
    assert!(listed.contains("guest (telegram:50): sleep 61"), "{listed}");
    let ended = env.run(&["status", "--kill", "2"]).await;
    assert!(ended.status.success(), "{}", stdout(&ended));
    assert!(stdout(&ended).contains("killed background command 2"));
    let missing = env.run(&["status", "--kill", "9"]).await;
    assert_eq!(missing.status.code(), Some(1));

    // `/stop` by the guest ends the guest's, not the owner's; the owner's `/new` ends it.
    let again = env
        .say(GROUP, 50, r#",bash cmd="sleep 64" background=true"#, 9)
        .await;
    assert!(again.contains("started background command 3"), "{again}");
    let stopped = env.say(GROUP, 50, "/stop", 10).await;
    // "Stopped, with …" when the answer before was still being recorded: a turn was stopped.
    assert!(stopped.ends_with("1 background command."), "{stopped}");
    let owner_read = env.say(GROUP, 42, ",bash.output id=1", 11).await;
    assert!(owner_read.starts_with("[1 running]"), "{owner_read}");
    assert!(owner_read.contains(SECRET), "{owner_read}");
    let fresh = env.say(GROUP, 42, "/new", 12).await;
    assert!(fresh.ends_with("Ended 1 background command."), "{fresh}");
    for id in [1, 3] {
        assert_eq!(super::ended(&env, id).await, "killed");
    }
    let status = env.say(GROUP, 42, ",status", 13).await;
    for id in [1, 3] {
        assert!(
            status.contains(&format!("background {id} killed")),
            "{status}"
        );
    }
    assert!(daemon.stop().await.success());

    // Nothing a guest was answered names or shows the owner's command.
    guests.extend([own, more, private, other, again, stopped]);
    for text in guests {
        assert!(
            !text.contains(SECRET) && !text.contains("sleep 60"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn guests_never_take_the_slots_kept_for_owners() {
    let mut env = Env::new().await;
    env.set("BUB_GUEST_TOOLS", GUEST_SHELL);
    // Two guests, four each: the attack that filled all 8 slots.
    env.set("BUB_GUEST_BACKGROUND_COMMANDS", "4");
    let daemon = env.start();
    let mut n = 0;
    let mut started = 0;
    for guest in [50, 51] {
        for i in 0..4 {
            n += 1;
            let cmd = format!(r#",bash cmd="sleep 6{guest}{i}" background=true"#);
            let answer = env.say(guest, guest, &cmd, n).await;
            if answer.contains("started background command") {
                started += 1;
            } else {
                assert!(answer.contains("every command slot is taken"), "{answer}");
            }
        }
    }
    assert_eq!(started, 6, "guests hold at most 6 of the 8 slots");
    // The owner's shell still answers, at once and in the background.
    let answer = env
        .say(42, 42, r#",bash cmd="echo owner-ran""#, n + 1)
        .await;
    assert_eq!(answer, "owner-ran");
    let answer = env
        .say(42, 42, r#",bash cmd="sleep 60" background=true"#, n + 2)
        .await;
    assert!(answer.contains("started background command"), "{answer}");
    assert!(daemon.stop().await.success());
}

#[cfg(feature = "console")]
#[tokio::test(flavor = "multi_thread")]
async fn the_operator_ends_a_guests_command_in_the_console() {
    let mut env = Env::new().await;
    env.set("BUB_GUEST_TOOLS", GUEST_SHELL);
    let port = crate::support::postgres::free_port();
    env.set("BUB_CONSOLE", "true");
    env.set("BUB_CONSOLE_LISTEN", &port.to_string());
    let daemon = env.start();
    let cmd = r#",bash cmd="sleep 65" background=true"#;
    let started = env.say(GROUP, 50, cmd, 1).await;
    assert!(
        started.contains("started background command 1"),
        "{started}"
    );

    let base = format!("http://127.0.0.1:{port}");
    let http = crate::console::client();
    let token = std::fs::read_to_string(env.home.join("console.token")).unwrap();
    let cookie = crate::console::login(&http, &base, token.trim()).await;
    let page = http
        .get(format!("{base}/status"))
        .header(reqwest::header::COOKIE, &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("guest (telegram:50)"), "{page}");
    assert!(page.contains("action=\"/commands/end\""), "{page}");
    let csrf = crate::console::field(&page, "csrf");
    let ended = http
        .post(format!("{base}/commands/end"))
        .header(reqwest::header::COOKIE, &cookie)
        .header(reqwest::header::ORIGIN, &base)
        .form(&[("id", "1"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), reqwest::StatusCode::SEE_OTHER);
    let location = ended.headers()[reqwest::header::LOCATION].to_str().unwrap();
    assert!(
        location.contains("killed%20background%20command%201"),
        "{location}"
    );
    assert_eq!(super::ended(&env, 1).await, "killed");
    let read = env.say(GROUP, 50, ",bash.output id=1", 2).await;
    assert!(read.starts_with("[1 killed]"), "{read}");
    assert!(daemon.stop().await.success());
}
