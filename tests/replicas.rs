//! Replicas on one database behind a load balancer: three `bub message` processes share a
//! PostgreSQL inbox (`support::postgres`), the fake Telegram posts its updates as webhooks
//! through a round-robin proxy (`support::proxy`), and one replica is SIGKILLed mid-run.
//! Checked on the wire: every message answered, at most one answered twice for the kill, the
//! order kept within each chat; and the leases moved (the survivors took the dead one's chats).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support;

use support::bub_env::{Daemon, Env};
use support::fake_telegram::private_text;
use support::postgres::{self, free_port};

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

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_answer_every_message_once_in_order_through_a_kill() {
    let mut env = Env::new().await;
    env.set("BUB_DATABASE_URL", &postgres::database());
    env.set("BUB_TELEGRAM_WEBHOOK_URL", URL);
    env.set("BUB_TELEGRAM_WEBHOOK_SECRET", SECRET);
    env.model.echo_tokens("m");
    // Turns slower than the intake: at the kill the dead replica has turns in flight.
    env.model.set_latency(Duration::from_millis(300));
    let (mut daemons, ports) = replicas(&mut env, 3);
    for daemon in &daemons {
        daemon.wait_for_log("channel.manager.start").await;
    }
    let proxy = support::proxy::start(&ports).await;
    env.telegram.deliver_webhooks_to(&proxy.url());

    let started = Instant::now();
    for k in 1..=PER_CHAT {
        for chat in 1..=CHATS {
            let text = format!("m{chat}-{k}");
            env.telegram
                .push_message_update(private_text(chat, chat, &text));
        }
    }
    let total = (CHATS * PER_CHAT) as usize;
    // A third answered: one replica dies mid-run.
    env.telegram
        .wait_until(RUN_WAIT, "a third answered", |_| {
            (answered_count(&env) >= total / 3).then_some(())
        })
        .await;
    let victim = daemons.remove(0);
    victim.kill().await;
    let killed = Instant::now();
    env.telegram
        .wait_until(RUN_WAIT, "every message answered", |_| {
            (answered_count(&env) >= total).then_some(())
        })
        .await;
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
    let mut env = Env::new().await;
    env.set("BUB_DATABASE_URL", &postgres::database());
    env.model.echo_tokens("j");
    // Imported from a one-box BUB_HOME, due a few seconds from now.
    let due = chrono::Utc::now() + chrono::Duration::seconds(4);
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::write(env.home.join("jobs.json"), due_jobs(&env, CHATS, 1000, due)).unwrap();
    let out = env.run(&["db", "import"]).await;
    assert!(out.status.success(), "{}", support::bub_env::stderr(&out));
    env.set("BUB_TELEGRAM_WEBHOOK_URL", URL);
    env.set("BUB_TELEGRAM_WEBHOOK_SECRET", SECRET);
    let (daemons, _ports) = replicas(&mut env, 3);

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
