//! Replicas on one database behind a load balancer: three `bub message` processes share a
//! PostgreSQL inbox (`support::postgres`), the fake Telegram posts its updates as webhooks
//! through a round-robin proxy (`support::proxy`), and one replica is SIGKILLed mid-run.
//! Checked on the wire: every message answered, at most one answered twice for the kill, the
//! order kept within each chat; and the leases moved (the survivors took the dead one's chats).
//! Also: 1,000 jobs due at once fire once each, a webhook post is answered `200` only after
//! its commit (and a kill mid-post stores it once), Telegram's long polling moves to another
//! replica when its poller dies, and a pairing approved from any replica's home counts on all.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support;

use support::bub_env::{Daemon, Env, WAIT};
use support::fake_telegram::private_text;
use support::postgres::{self, free_port};
use support::wait::wait_until;

const SECRET: &str = "s3cret-Token_1";
const URL: &str = "https://bot.example/tg/hook";
const CHATS: i64 = 100;
const PER_CHAT: i64 = 10;
/// Bound for the whole run (1,000 messages on a debug build, a takeover included).
const RUN_WAIT: Duration = Duration::from_secs(240);

/// Each chat's answered tokens (`m<chat>-<k>`), in the order they reached it.
fn answered(env: &Env) -> BTreeMap<i64, Vec<i64>> {
    let mut chats: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for call in env.telegram.delivered() {
        let text = call.body["text"].as_str().unwrap_or_default();
        for token in support::fake_openai::tokens(text, "m") {
            let (chat, k) = token[1..].split_once('-').unwrap();
            chats
                .entry(chat.parse().unwrap())
                .or_default()
                .push(k.parse().unwrap());
        }
    }
    chats
}

/// Messages answered at least once.
fn answered_count(env: &Env) -> usize {
    answered(env)
        .values()
        .map(|ks| {
            let mut ks = ks.clone();
            ks.sort_unstable();
            ks.dedup();
            ks.len()
        })
        .sum()
}

/// Queues [`PER_CHAT`] messages in each of [`CHATS`] chats (`m<chat>-<k>`), round by round.
fn push_all(env: &Env) {
    for k in 1..=PER_CHAT {
        for chat in 1..=CHATS {
            let text = format!("m{chat}-{k}");
            env.telegram
                .push_message_update(private_text(chat, chat, &text));
        }
    }
}

/// Waits until `n` of the messages were answered (each at least once).
async fn wait_answered(env: &Env, n: usize, what: &str) {
    env.telegram
        .wait_until(RUN_WAIT, what, |_| (answered_count(env) >= n).then_some(()))
        .await;
}

/// `n` replicas of `bub message` on `env`'s database, each with a BUB_HOME and a port of its
/// own; their ports.
fn replicas(env: &mut Env, n: usize) -> (Vec<Daemon>, Vec<u16>) {
    let (mut daemons, mut ports) = (Vec::new(), Vec::new());
    for i in 0..n {
        let port = free_port();
        let home = env.home.with_file_name(format!("home-{i}"));
        env.set("BUB_HOME", &home.display().to_string());
        env.set("BUB_HTTP_LISTEN", &port.to_string());
        daemons.push(env.spawn(&["message"]));
        ports.push(port);
    }
    (daemons, ports)
}

/// A `bub message` environment on a fresh database (and its URL), the model echoing the
/// message tokens that start with `token`.
async fn on_database(token: &str) -> (Env, String) {
    let mut env = Env::new().await;
    let url = postgres::database();
    env.set("BUB_DATABASE_URL", &url);
    env.model.echo_tokens(token);
    (env, url)
}

/// Telegram's webhook set up and `n` replicas serving it: their daemons and ports.
async fn webhook_replicas(env: &mut Env, n: usize) -> (Vec<Daemon>, Vec<u16>) {
    env.set("BUB_TELEGRAM_WEBHOOK_URL", URL);
    env.set("BUB_TELEGRAM_WEBHOOK_SECRET", SECRET);
    let (daemons, ports) = replicas(env, n);
    for daemon in &daemons {
        daemon.wait_for_log("channel.manager.start").await;
    }
    (daemons, ports)
}

/// The texts delivered to the chats, oldest first.
fn delivered_texts(env: &Env) -> Vec<String> {
    env.telegram
        .delivered()
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Waits until `sql` (on the database of `url`) answers `expected`; panics after [`WAIT`].
async fn wait_for_rows(url: &str, sql: &str, expected: &str) {
    let deadline = Instant::now() + WAIT;
    while crate::scale::query(url, sql).await != [expected] {
        assert!(Instant::now() < deadline, "{sql} never answered {expected}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_answer_every_message_once_in_order_through_a_kill() {
    let (mut env, _url) = on_database("m").await;
    // Turns slower than the intake: at the kill the dead replica has turns in flight.
    env.model.set_latency(Duration::from_millis(300));
    let (mut daemons, ports) = webhook_replicas(&mut env, 3).await;
    let proxy = support::proxy::start(&ports).await;
    env.telegram.deliver_webhooks_to(&proxy.url());

    let started = Instant::now();
    push_all(&env);
    let total = (CHATS * PER_CHAT) as usize;
    // A third answered: one replica dies mid-run.
    wait_answered(&env, total / 3, "a third answered").await;
    let victim = daemons.remove(0);
    victim.kill().await;
    let killed = Instant::now();
    wait_answered(&env, total, "every message answered").await;
    let took = started.elapsed();
    eprintln!(
        "{total} messages in {CHATS} chats through 3 replicas (one killed): {took:?}, {:.0} msg/s; \
         the rest answered {:?} after the kill",
        total as f64 / took.as_secs_f64(),
        killed.elapsed()
    );

    let chats = answered(&env);
    let mut twice = 0;
    for (chat, ks) in &chats {
        let mut seen = Vec::new();
        for k in ks {
            if seen.contains(k) {
                twice += 1;
            } else {
                seen.push(*k);
            }
        }
        let expected: Vec<i64> = (1..=PER_CHAT).collect();
        assert_eq!(seen, expected, "chat {chat}: every message, in order");
    }
    assert_eq!(chats.len() as i64, CHATS);
    assert!(twice <= 1, "{twice} answered twice for one kill");
    // A survivor is ready: its channel connected, its database answering.
    let ready = reqwest::get(format!("http://127.0.0.1:{}/readyz", ports[1]))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    // `bub status` lists the replicas (the dead one until its row goes stale) and their leases
    // (counted in each replica's heartbeat, every 10 s: a fast run asks before the first).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let out = env.run(&["status", "--json"]).await;
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows = status["replicas"].as_array().unwrap();
        assert_eq!(rows.len(), 3, "{status}");
        let leases: i64 = rows.iter().filter_map(|r| r["leases"].as_i64()).sum();
        if leases > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leases: {status}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut took_over = false;
    for daemon in daemons {
        let (status, log) = daemon.stop_with_log().await;
        assert!(status.success(), "{log}");
        took_over |= log.contains("inbox.lease.resume");
    }
    assert!(took_over, "a survivor resumed the dead replica's chats");
}

/// `jobs.json` of `count` one-shot jobs in chats 1..=`chats`, all due at `at`, each saying
/// `j<chat>-<k>`.
fn due_jobs(env: &Env, chats: i64, count: i64, at: chrono::DateTime<chrono::Utc>) -> String {
    let jobs: Vec<serde_json::Value> = (0..count)
        .map(|n| {
            let (chat, k) = (n % chats + 1, n / chats + 1);
            serde_json::json!({
                "id": format!("{n:08x}"),
                "session": format!("telegram:{chat}"),
                "message": format!("say j{chat}-{k}"),
                "workspace": env.workspace,
                "trigger": {"kind": "once", "at": at},
                "created": at,
                "next_run": at,
                "last_run": null,
                "last_status": null,
                "creator": {"role": "owner"},
            })
        })
        .collect();
    serde_json::json!({"version": 1, "jobs": jobs}).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_jobs_due_at_once_fire_once_each_across_three_replicas() {
    let (mut env, _url) = on_database("j").await;
    // Imported from a one-box BUB_HOME, due a few seconds from now.
    let due = chrono::Utc::now() + chrono::Duration::seconds(4);
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::write(env.home.join("jobs.json"), due_jobs(&env, CHATS, 1000, due)).unwrap();
    let out = env.run(&["db", "import"]).await;
    assert!(out.status.success(), "{}", support::bub_env::stderr(&out));
    let (daemons, _ports) = webhook_replicas(&mut env, 3).await;

    env.telegram
        .wait_until(RUN_WAIT, "every job answered", |_| {
            (env.telegram.delivered().len() >= 1000).then_some(())
        })
        .await;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for call in env.telegram.delivered() {
        let text = call.body["text"].as_str().unwrap_or_default();
        for token in support::fake_openai::tokens(text, "j") {
            *counts.entry(token).or_default() += 1;
        }
    }
    assert_eq!(counts.len(), 1000, "every job answered");
    assert!(counts.values().all(|n| *n == 1), "each once: {counts:?}");
    let mut ran_on = 0;
    for daemon in daemons {
        let (status, log) = daemon.stop_with_log().await;
        assert!(status.success(), "{log}");
        ran_on += usize::from(log.contains("session.job.queued"));
    }
    assert!(ran_on >= 2, "the runs spread over the replicas' leases");
}

#[tokio::test(flavor = "multi_thread")]
async fn one_replica_polls_telegram_and_another_takes_over_when_it_dies() {
    let (mut env, url) = on_database("p").await;
    let (mut daemons, _ports) = replicas(&mut env, 2);
    // Whichever comes first polls; the other stands by.
    wait_until(WAIT, "one poller and one standing by", || {
        let logs: Vec<String> = daemons.iter().map(Daemon::log).collect();
        logs.iter().any(|l| l.contains("exclusive.held"))
            && logs.iter().any(|l| l.contains("exclusive.standby"))
    })
    .await;
    if daemons[1].log().contains("exclusive.held") {
        daemons.swap(0, 1);
    }
    env.telegram.push_message_update(private_text(5, 5, "p5-1"));
    env.telegram
        .wait_until(WAIT, "p5-1 answered", |f| {
            (f.delivered().len() == 1).then_some(())
        })
        .await;

    // Done (not only sent): a kill between the send and its record would send it again.
    let open = "SELECT count(*) FROM bub_inbox WHERE done_at IS NULL";
    wait_for_rows(&url, open, "0").await;
    // The poller dies: the other replica polls within the retry (5 s) and answers.
    let killed = Instant::now();
    daemons.remove(0).kill().await;
    let survivor = daemons.remove(0);
    survivor.wait_for_log("exclusive.held").await;
    eprintln!(
        "Telegram polling taken over {:?} after SIGKILL",
        killed.elapsed()
    );
    env.telegram.push_message_update(private_text(5, 5, "p5-2"));
    env.telegram
        .wait_until(WAIT, "p5-2 answered", |f| {
            (f.delivered().len() == 2).then_some(())
        })
        .await;
    let (status, log) = survivor.stop_with_log().await;
    assert!(status.success(), "{log}");
    let texts = delivered_texts(&env);
    assert_eq!(texts, ["answering: p5-1", "answering: p5-2"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_is_answered_200_only_after_its_commit_and_a_kill_mid_post_stores_it_once() {
    let (mut env, url) = on_database("w").await;
    let (mut daemons, ports) = webhook_replicas(&mut env, 2).await;
    // The first replica's transaction will stop between its insert and its commit: the
    // cursor's row is locked by the test.
    crate::scale::query(&url, "INSERT INTO bub_inbox_cursors VALUES ('telegram', 0)").await;
    let (holder, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    holder
        .batch_execute("BEGIN; SELECT at FROM bub_inbox_cursors FOR UPDATE")
        .await
        .unwrap();
    let proxy = support::proxy::start(&ports).await;
    env.telegram.deliver_webhooks_to(&proxy.url());
    let id = env.telegram.push_message_update(private_text(3, 3, "w3-1"));
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'";
    wait_for_rows(&url, waiting, "1").await;
    assert!(
        env.telegram.webhook_posts().is_empty(),
        "no answer before the commit"
    );
    let stored = "SELECT count(*) FROM bub_inbox";
    assert_eq!(
        crate::scale::query(&url, stored).await,
        ["0"],
        "nothing committed"
    );

    // Killed mid-statement: the proxy answers 502 and Telegram posts again.
    daemons.remove(0).kill().await;
    wait_until(WAIT, "the post refused", || {
        env.telegram.webhook_posts().iter().any(|p| p.status == 502)
    })
    .await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    drop(holder);
    let _ = driver.await;
    // The statement the dead replica sent completes on the server (PostgreSQL commits what it
    // received): Telegram's retry finds the update stored, and it is answered once.
    env.telegram
        .wait_until(WAIT, "w3-1 answered and the retry 200", |f| {
            let retried = f.webhook_posts().iter().any(|p| p.status == 200);
            (retried && !f.delivered().is_empty()).then_some(())
        })
        .await;
    let posts = env.telegram.webhook_posts();
    assert_eq!(posts.first().map(|p| p.status), Some(502), "{posts:?}");
    assert_eq!(
        posts.last().map(|p| (p.update_id, p.status)),
        Some((id, 200)),
        "{posts:?}"
    );
    assert_eq!(
        crate::scale::query(&url, stored).await,
        ["1"],
        "stored once"
    );
    let (status, log) = daemons.remove(0).stop_with_log().await;
    assert!(status.success(), "{log}");
    let texts = delivered_texts(&env);
    assert_eq!(texts, ["answering: w3-1"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pairing_approved_from_any_replicas_home_admits_the_user_on_every_replica() {
    let (mut env, _url) = on_database("a").await;
    env.set("BUB_TELEGRAM_ALLOW_FROM", "");
    env.set("BUB_TELEGRAM_OWNERS", "");
    let (mut daemons, _ports) = replicas(&mut env, 1);
    let daemon = daemons.remove(0);
    daemon.wait_for_log("exclusive.held").await;
    env.telegram
        .push_message_update(private_text(61, 61, "a61-1"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let text = sent[0].body["text"].as_str().unwrap().to_owned();
    let code = text
        .lines()
        .find_map(|l| l.strip_prefix("bub pair approve telegram "))
        .unwrap_or_else(|| panic!("no code in {text}"))
        .to_owned();
    // Approved from another replica's BUB_HOME: the pairing is the database's.
    env.set(
        "BUB_HOME",
        &env.home.with_file_name("home-other").display().to_string(),
    );
    let approved = env.run(&["pair", "approve", "telegram", &code]).await;
    assert!(approved.status.success(), "{approved:?}");
    env.telegram
        .push_message_update(private_text(61, 61, "a61-2"));
    env.telegram
        .wait_until(WAIT, "a61-2 answered", |f| {
            f.delivered()
                .iter()
                .any(|c| c.body["text"] == "answering: a61-2")
                .then_some(())
        })
        .await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{log}");
    assert_eq!(env.model.request_count(), 1, "a61-1 was not answered");
}

/// Messages per second through 1, 2 and 3 replicas on one database (the fake model answers at
/// once, Telegram posts one update at a time): a measurement, on a release build —
/// `BUB_BENCH_BINARY=target/release/bub cargo test --test tests replicas::throughput --
/// --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement: run it on a release build"]
async fn throughput_through_one_two_and_three_replicas() {
    for n in 1..=3 {
        let (mut env, _url) = on_database("m").await;
        let (daemons, ports) = webhook_replicas(&mut env, n).await;
        let proxy = support::proxy::start(&ports).await;
        let started = Instant::now();
        push_all(&env);
        env.telegram.deliver_webhooks_to(&proxy.url());
        let total = (CHATS * PER_CHAT) as usize;
        wait_answered(&env, total, "every message answered").await;
        let took = started.elapsed();
        eprintln!(
            "{n} replica(s): {total} messages in {CHATS} chats in {took:?}: {:.0} msg/s, {} answers",
            total as f64 / took.as_secs_f64(),
            env.telegram.delivered().len()
        );
        for daemon in daemons {
            assert!(daemon.stop().await.success());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_whose_replica_dies_mid_turn_is_answered_by_another_within_seconds() {
    let (mut env, url) = on_database("f").await;
    let (mut daemons, ports) = webhook_replicas(&mut env, 2).await;
    let proxy = support::proxy::start(&ports).await;
    env.telegram.deliver_webhooks_to(&proxy.url());
    // The turn's model call hangs: the chat's replica dies in the middle of it.
    env.model.hold();
    env.telegram.push_message_update(private_text(8, 8, "f8-1"));
    wait_until(WAIT, "a replica running the turn", || {
        daemons
            .iter()
            .any(|d| d.log().contains("session.turn.start"))
    })
    .await;
    let holder = daemons
        .iter()
        .position(|d| d.log().contains("session.turn.start"))
        .unwrap();
    // The turn's start is recorded (what makes the next attempt an interrupted one's).
    let started = "SELECT count(*) FROM bub_inbox_progress WHERE record LIKE '%\"start\"%'";
    wait_for_rows(&url, started, "1").await;
    let survivor = daemons.remove(1 - holder);
    let killed = Instant::now();
    daemons.remove(0).kill().await;
    env.model.release();
    env.telegram
        .wait_until(WAIT, "f8-1 answered", |f| {
            (!f.delivered().is_empty()).then_some(())
        })
        .await;
    let failover = killed.elapsed();
    eprintln!("a chat's lease taken over and its turn answered {failover:?} after SIGKILL");
    assert!(failover < Duration::from_secs(30), "{failover:?}");
    let (status, log) = survivor.stop_with_log().await;
    assert!(status.success(), "{log}");
    assert!(log.contains("inbox.lease.resume"), "{log}");
    let texts = delivered_texts(&env);
    assert_eq!(texts, ["answering: f8-1"], "answered once");
    let prompt = env.model.requests().last().unwrap().to_string();
    assert!(
        prompt.contains("interrupted"),
        "resumed as interrupted: {prompt}"
    );
}
