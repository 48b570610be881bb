//! Chaos benchmark (`cargo bench --bench chaos`): the release `bub message` binary against the
//! fake Telegram and an echoing fake model, 1000 messages across 50 private chats arriving at
//! random moments over 40 s, and a scheduled job due at a random moment in 10 of those chats,
//! while the daemon is SIGKILLed at 5 random moments and restarted at once each time.
//!
//! Every message is uniquely identifiable (`m<chat>-<n>`), and so is every job's message
//! (`j<chat>-1`); the fake model answers with the tokens of its last user prompt, so each
//! `sendMessage` tells which messages (or job) it answers.
//!
//! Reports:
//! * lost: messages never answered, and jobs never answered (the bench exits 1 when there is
//!   one); a job's duplicates must stay within the number of kills;
//! * answered more than once: the exact count, with the messages;
//! * per restart: what was pending at the kill (pushed and not answered; how many of those the
//!   daemon had journaled, how many were in a model call) and the time from the spawn to the
//!   first answer to one of them; min / median / max over the restarts;
//! * given-up notices (a message interrupted twice), error answers, total wall time, and a last
//!   start that must find nothing left to send.
//!
//! The run is reproducible from its seed (message order and kill moments; the timing of the
//! processes is not): `CHAOS_SEED=<n> cargo bench --bench chaos`. Kill moments are at least
//! [`MIN_KILL_GAP`] apart, so a resumed turn normally finishes before the next kill.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::bub_env::Env;
use support::fake_openai;
use support::fake_telegram::{Call, private_text};

const CHATS: i64 = 50;
const PER_CHAT: i64 = 20;
/// Every `JOB_EVERY`th chat has a one-shot job due at a random moment in [KILL_FROM, KILL_UNTIL].
const JOB_EVERY: i64 = 5;
const KILLS: usize = 5;
/// The messages arrive at random moments (uniform, so in natural bursts) over this time.
const PUSH_TIME: Duration = Duration::from_secs(40);
/// Kill moments fall in [KILL_FROM, KILL_UNTIL] (before the last push).
const KILL_FROM: Duration = Duration::from_secs(2);
const KILL_UNTIL: Duration = Duration::from_secs(38);
const MIN_KILL_GAP: Duration = Duration::from_secs(3);
/// Every model answer takes this long, so turns are in flight when the daemon is killed.
const MODEL_LATENCY: Duration = Duration::from_millis(200);
/// How long after the last push every message must be answered.
const DRAIN_LIMIT: Duration = Duration::from_secs(90);
/// Chat (and user) ids are `CHAT_BASE + c` for c in 1..=CHATS: guests (the owners of the test
/// environment are 1, 7, 9 and 42).
const CHAT_BASE: i64 = 1000;

fn main() {
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 % 1_000_000_000)
        });
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lost = rt.block_on(bench(seed));
    if lost > 0 {
        std::process::exit(1);
    }
}

/// One message of the plan.
struct Planned {
    at: Duration,
    chat: i64,
    token: String,
}

/// What a kill left behind.
struct Kill {
    at: Duration,
    pending: HashSet<String>,
    journaled: usize,
    in_model: usize,
    spawned: Instant,
}

/// The seeded jobs: (chat, due after the start) for every [`JOB_EVERY`]th chat.
fn job_plan(seed: u64) -> Vec<(i64, Duration)> {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x6a6f6273);
    let span = (KILL_UNTIL - KILL_FROM).as_millis() as u64;
    (1..=CHATS)
        .filter(|c| c % JOB_EVERY == 0)
        .map(|c| (c, KILL_FROM + Duration::from_millis(rng.u64(0..=span))))
        .collect()
}

/// Writes the planned jobs into `jobs.json`, due relative to `start` (wall time).
fn write_jobs(env: &Env, jobs: &[(i64, Duration)], start: chrono::DateTime<chrono::Utc>) {
    let jobs: Vec<Value> = jobs
        .iter()
        .map(|(chat, after)| {
            let at = (start + chrono::Duration::from_std(*after).expect("due")).to_rfc3339();
            json!({
                "id": format!("chaos{chat}"),
                "session": format!("telegram:{}", CHAT_BASE + chat),
                "message": format!("j{chat}-1"),
                "workspace": env.workspace,
                "trigger": {"kind": "once", "at": at},
                "created": start.to_rfc3339(),
                "next_run": at,
            })
        })
        .collect();
    std::fs::create_dir_all(&env.home).expect("BUB_HOME");
    let file = json!({"version": 1, "jobs": jobs});
    std::fs::write(env.home.join("jobs.json"), file.to_string()).expect("jobs.json");
}

/// The seeded plan: messages in a shuffled chat order (each chat's own messages in order),
/// at sorted uniform random moments in `PUSH_TIME`; kill moments at least `MIN_KILL_GAP` apart.
fn plan(seed: u64) -> (Vec<Planned>, Vec<Duration>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut chats: Vec<i64> = (1..=CHATS)
        .flat_map(|c| std::iter::repeat_n(c, PER_CHAT as usize))
        .collect();
    rng.shuffle(&mut chats);
    let mut next: HashMap<i64, i64> = HashMap::new();
    let span = PUSH_TIME.as_millis() as u64;
    let mut times: Vec<Duration> = (0..chats.len())
        .map(|_| Duration::from_millis(rng.u64(0..span)))
        .collect();
    times.sort();
    let messages = chats
        .into_iter()
        .zip(times)
        .map(|(chat, at)| {
            let n = next.entry(chat).or_default();
            *n += 1;
            Planned {
                at,
                chat,
                token: format!("m{chat}-{n}"),
            }
        })
        .collect();
    let span = (KILL_UNTIL - KILL_FROM).as_millis() as u64;
    let kills = loop {
        let mut kills: Vec<Duration> = (0..KILLS)
            .map(|_| KILL_FROM + Duration::from_millis(rng.u64(0..=span)))
            .collect();
        kills.sort();
        if kills.windows(2).all(|w| w[1] - w[0] >= MIN_KILL_GAP) {
            break kills;
        }
    };
    (messages, kills)
}

/// The `bub message` daemon with its log appended to `log`.
fn spawn(env: &Env, log: &std::path::Path) -> tokio::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("daemon log");
    env.command(&["message"])
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start bub message")
}

async fn kill(child: &mut tokio::process::Child) {
    child.start_kill().expect("SIGKILL");
    tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("killed within 5 s")
        .expect("wait");
}

async fn stop(mut child: tokio::process::Child) {
    let pid = child.id().expect("running") as i32;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let stopped = tokio::time::timeout(Duration::from_secs(12), child.wait()).await;
    assert!(
        stopped.is_ok(),
        "the daemon did not stop within 12 s of SIGTERM"
    );
}

/// The message tokens a delivered `sendMessage` answers.
fn answered_tokens(call: &Call) -> Vec<String> {
    let text = call.body["text"].as_str().unwrap_or_default();
    fake_openai::tokens(text, "m")
}

/// Tokens answered so far (delivered `sendMessage` calls), with how often.
fn answer_counts(calls: &[Call]) -> BTreeMap<String, usize> {
    token_counts(calls, "m")
}

/// Tokens with `prefix` in delivered `sendMessage` calls, with how often.
fn token_counts(calls: &[Call], prefix: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for call in calls
        .iter()
        .filter(|c| c.method == "sendmessage" && !c.failed)
    {
        let text = call.body["text"].as_str().unwrap_or_default();
        for token in fake_openai::tokens(text, prefix) {
            *counts.entry(token).or_default() += 1;
        }
    }
    counts
}

/// The highest `offset` a `getUpdates` asked for: updates below it were journaled.
fn confirmed_offset(calls: &[Call]) -> i64 {
    calls
        .iter()
        .filter(|c| c.method == "getupdates")
        .filter_map(|c| c.body.get("offset").and_then(Value::as_i64))
        .max()
        .unwrap_or(0)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

async fn bench(seed: u64) -> usize {
    let (messages, kill_at) = plan(seed);
    let job_at = job_plan(seed);
    let mut env = Env::new().await;
    env.set("BUB_LOG_LEVEL", "warn");
    env.set("BUB_TELEGRAM_OWNERS", "1");
    env.model.set_responder(|request| {
        let text = fake_openai::last_user_text(request);
        let tokens = [
            fake_openai::tokens(&text, "m"),
            fake_openai::tokens(&text, "j"),
        ];
        format!("answering: {}", tokens.concat().join(" "))
    });
    env.model.set_latency(MODEL_LATENCY);
    let log = env.home.parent().expect("temp dir").join("daemon.log");
    println!(
        "chaos: seed {seed} (CHAOS_SEED={seed} repeats the plan), {CHATS} chats × {PER_CHAT} messages over {}, model latency {} ms, SIGKILL at {}",
        secs(PUSH_TIME),
        MODEL_LATENCY.as_millis(),
        kill_at
            .iter()
            .map(|d| secs(*d))
            .collect::<Vec<_>>()
            .join(", ")
    );

    write_jobs(&env, &job_at, chrono::Utc::now());
    let start = Instant::now();
    let mut child = spawn(&env, &log);
    let mut update_of: HashMap<String, i64> = HashMap::new();
    let mut kills: Vec<Kill> = Vec::new();
    // Pushes and kills in time order (a kill first when both fall on the same moment).
    let mut events: Vec<(Duration, Option<&Planned>)> =
        kill_at.iter().map(|at| (*at, None)).collect();
    events.extend(messages.iter().map(|m| (m.at, Some(m))));
    events.sort_by_key(|(at, message)| (*at, message.is_some()));
    for (at, message) in events {
        tokio::time::sleep_until((start + at).into()).await;
        let Some(message) = message else {
            kill(&mut child).await;
            let killed_at = start.elapsed();
            let calls = env.telegram.calls();
            let answered = answer_counts(&calls);
            let offset = confirmed_offset(&calls);
            let pending: HashSet<String> = update_of
                .keys()
                .filter(|t| !answered.contains_key(*t))
                .cloned()
                .collect();
            let journaled = pending.iter().filter(|t| update_of[*t] < offset).count();
            let prompted: HashSet<String> = env
                .model
                .requests()
                .iter()
                .flat_map(|r| fake_openai::tokens(&fake_openai::last_user_text(r), "m"))
                .collect();
            let in_model = pending.iter().filter(|t| prompted.contains(*t)).count();
            let spawned = Instant::now();
            child = spawn(&env, &log);
            kills.push(Kill {
                at: killed_at,
                pending,
                journaled,
                in_model,
                spawned,
            });
            continue;
        };
        let mut msg: Value = private_text(
            CHAT_BASE + message.chat,
            CHAT_BASE + message.chat,
            &message.token,
        )
        .into();
        msg["message_id"] = json!(update_of.len() as i64 + 1);
        let update = env.telegram.push_update(json!({ "message": msg }));
        update_of.insert(message.token.clone(), update);
    }
    let pushed_all = start.elapsed();

    // Drain: every message and every job answered (or the limit).
    let expected: HashSet<&String> = update_of.keys().collect();
    let jobs: Vec<String> = job_at.iter().map(|(c, _)| format!("j{c}-1")).collect();
    let deadline = Instant::now() + DRAIN_LIMIT;
    let drained = loop {
        let calls = env.telegram.calls();
        let answered = answer_counts(&calls);
        let jobs_answered = token_counts(&calls, "j");
        if expected.iter().all(|t| answered.contains_key(*t))
            && jobs.iter().all(|j| jobs_answered.contains_key(j))
        {
            break Some(start.elapsed());
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Stragglers (a duplicate in flight) get a moment, then a clean stop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop(child).await;
    let wall = start.elapsed();

    // A last start must find nothing left to send.
    let sent_before = env.telegram.sent_count();
    let polls = env.telegram.calls_of("getUpdates").len();
    let last = spawn(&env, &log);
    env.telegram
        .wait_until(Duration::from_secs(30), "a long poll", |f| {
            (f.calls_of("getUpdates").len() > polls).then_some(())
        })
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop(last).await;
    let sent_after_restart = env.telegram.sent_count() - sent_before;

    // The figures.
    let calls = env.telegram.calls();
    let delivered: Vec<&Call> = calls
        .iter()
        .filter(|c| c.method == "sendmessage" && !c.failed)
        .collect();
    let answered = answer_counts(&calls);
    let twice: Vec<(&String, &usize)> = answered.iter().filter(|(_, n)| **n > 1).collect();
    let gave_up: Vec<&Call> = delivered
        .iter()
        .copied()
        .filter(|c| {
            let text = c.body["text"].as_str().unwrap_or_default();
            !text.starts_with("Scheduled job")
                && (text.contains("gave up") || text.contains("was not run again"))
        })
        .collect();
    // Jobs: answered once (a duplicate only when a kill fell between a part accepted and its
    // record), or given up with a notice after two interruptions.
    let job_answers = token_counts(&calls, "j");
    let job_notices: HashSet<String> = delivered
        .iter()
        .filter_map(|c| {
            let text = c.body["text"].as_str().unwrap_or_default();
            let id = text.strip_prefix("Scheduled job chaos")?;
            let chat: String = id.chars().take_while(char::is_ascii_digit).collect();
            Some(format!("j{chat}-1"))
        })
        .collect();
    let jobs_lost: Vec<&String> = jobs
        .iter()
        .filter(|j| !job_answers.contains_key(*j) && !job_notices.contains(*j))
        .collect();
    let job_duplicates: usize = job_answers.values().map(|n| n - 1).sum();
    let errors = delivered
        .iter()
        .filter(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .starts_with("Error")
        })
        .count();
    // Unanswered messages of a chat that was told it was given up are not lost (the chat was
    // asked to send them again); any other unanswered message is.
    let told: HashSet<String> = gave_up
        .iter()
        .map(|c| c.body["chat_id"].to_string())
        .collect();
    let chat_of = |token: &str| {
        let chat: i64 = token[1..].split('-').next().unwrap().parse().unwrap();
        (CHAT_BASE + chat).to_string()
    };
    let mut unanswered: Vec<&String> = expected
        .iter()
        .copied()
        .filter(|t| !answered.contains_key(*t))
        .collect();
    unanswered.sort();
    let (given_up, lost): (Vec<&String>, Vec<&String>) = unanswered
        .into_iter()
        .partition(|t| told.contains(&chat_of(t)));

    println!(
        "chaos: {} messages pushed in {}, {} answers delivered ({} errors), {} sendMessage calls",
        update_of.len(),
        secs(pushed_all),
        delivered.len(),
        errors,
        env.telegram.sent_count()
    );
    let mut resumed = Vec::new();
    for (i, kill) in kills.iter().enumerate() {
        let until = kills.get(i + 1).map(|k| k.spawned);
        let first = delivered
            .iter()
            .filter(|c| c.at >= kill.spawned && until.is_none_or(|u| c.at < u))
            .find(|c| answered_tokens(c).iter().any(|t| kill.pending.contains(t)));
        let latency = first.map(|c| c.at.duration_since(kill.spawned));
        if let Some(l) = latency {
            resumed.push(l);
        }
        // When the last of them was answered (after this restart, whichever restart did it).
        let mut left = kill.pending.clone();
        let all = delivered
            .iter()
            .filter(|c| c.at >= kill.spawned)
            .find(|c| {
                for t in answered_tokens(c) {
                    left.remove(&t);
                }
                left.is_empty()
            })
            .map(|c| c.at.duration_since(kill.spawned));
        println!(
            "chaos.kill {}: at {}, {} pending ({} journaled, {} in a model call) → restart → first resumed answer {}, all {}",
            i + 1,
            secs(kill.at),
            kill.pending.len(),
            kill.journaled,
            kill.in_model,
            latency.map_or("none (nothing pending)".to_owned(), secs),
            all.map_or("-".to_owned(), secs)
        );
    }
    resumed.sort();
    println!("chaos.kills: {}", kills.len());
    println!(
        "chaos.lost: {}{}",
        lost.len(),
        if lost.is_empty() {
            String::new()
        } else {
            format!(" {lost:?}")
        }
    );
    println!(
        "chaos.answered_twice: {}{}",
        twice.len(),
        if twice.is_empty() {
            String::new()
        } else {
            format!(" {twice:?}")
        }
    );
    let prompts: Vec<Vec<String>> = env
        .model
        .requests()
        .iter()
        .map(|r| fake_openai::tokens(&fake_openai::last_user_text(r), "m"))
        .collect();
    for (token, _) in &twice {
        let at: Vec<String> = delivered
            .iter()
            .filter(|c| answered_tokens(c).contains(token))
            .map(|c| secs(c.at.duration_since(start)))
            .collect();
        let near = kills
            .iter()
            .map(|k| secs(k.at))
            .collect::<Vec<_>>()
            .join(", ");
        let asked = prompts.iter().filter(|p| p.contains(token)).count();
        println!(
            "chaos.answered_twice: {token} delivered at {} (kills at {near}); in {asked} model prompt(s)",
            at.join(" and ")
        );
    }
    println!(
        "chaos.jobs: {} due, {} answered, {} given up with a notice, lost {}{}, duplicates {} (kills {})",
        jobs.len(),
        job_answers.len(),
        job_notices.len(),
        jobs_lost.len(),
        if jobs_lost.is_empty() {
            String::new()
        } else {
            format!(" {jobs_lost:?}")
        },
        job_duplicates,
        kills.len()
    );
    println!(
        "chaos.given_up: {} notice(s), {} message(s) {:?}",
        gave_up.len(),
        given_up.len(),
        given_up
    );
    if resumed.is_empty() {
        println!("chaos.restart_to_first_resumed_answer: no restart had pending messages");
    } else {
        println!(
            "chaos.restart_to_first_resumed_answer: min {} median {} max {} ({} restarts; spawn → sendMessage, including the model's {} ms)",
            secs(resumed[0]),
            secs(resumed[resumed.len() / 2]),
            secs(*resumed.last().unwrap()),
            resumed.len(),
            MODEL_LATENCY.as_millis()
        );
    }
    println!(
        "chaos.wall: {} (all answered at {}), a last start sent {} message(s)",
        secs(wall),
        drained.map_or("never".to_owned(), secs),
        sent_after_restart
    );
    let jobs_failed = jobs_lost.len() + usize::from(job_duplicates > kills.len());
    if !lost.is_empty() || sent_after_restart > 0 || jobs_failed > 0 {
        let keep = std::env::temp_dir().join(format!("bub-chaos-{seed}"));
        let _ = std::fs::create_dir_all(&keep);
        let _ = std::fs::copy(&log, keep.join("daemon.log"));
        let _ = std::fs::copy(env.home.join("inbox.jsonl"), keep.join("inbox.jsonl"));
        let sent: Vec<&Value> = delivered.iter().map(|c| &c.body).collect();
        let _ = std::fs::write(
            keep.join("sent.json"),
            serde_json::to_string_pretty(&sent).unwrap_or_default(),
        );
        println!(
            "chaos: daemon log, inbox and sent messages kept in {}",
            keep.display()
        );
    }
    lost.len() + sent_after_restart + jobs_failed
}
