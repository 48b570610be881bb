//! Usage and budgets through the `bub` binary and the fakes: every model call's usage (the
//! provider's, or Bub's estimate) is on the tape and in `BUB_HOME/usage.jsonl`; `bub usage`
//! (and `--json`) sums it per day and session with the cache-hit rate and the cost of priced
//! models; `/usage` answers in a chat and `bub status` shows today's totals; over a daily budget
//! the call is never made (the fake sees no request), the chat is told, the event is on the
//! tape, a scheduled job is skipped once; yesterday's use does not count.

use crate::support;

use bub::usage::thousands;
use serde_json::{Value, json};
use support::bub_env::{Env, WAIT, assert_exit, stderr, stdout, texts};
use support::fake_telegram::private_text;
use support::wait::wait_until;

/// The usage ledger's entries.
fn ledger(env: &Env) -> Vec<Value> {
    let text = std::fs::read_to_string(env.home.join("usage.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Every event named `name` on every tape (its data).
fn events(env: &Env, name: &str) -> Vec<Value> {
    env.tape_text()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["kind"] == "event" && e["payload"]["name"] == name)
        .map(|e| e["payload"]["data"].clone())
        .collect()
}

/// Writes ledger lines dated `days_ago` days before today (local time, as the binary counts).
fn seed_ledger(env: &Env, lines: &[(i64, &str, u64)]) {
    std::fs::create_dir_all(&env.home).unwrap();
    let today = chrono::Local::now().date_naive();
    let text: String = lines
        .iter()
        .map(|(days_ago, session, input)| {
            let date = today - chrono::Duration::days(*days_ago);
            let line = json!({"date": date, "session": session, "for": "step",
                "model": "openai:test-model", "input": input, "output": 0});
            format!("{line}\n")
        })
        .collect();
    std::fs::write(env.home.join("usage.jsonl"), text).unwrap();
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[tokio::test]
async fn usage_is_on_the_tape_and_in_the_ledger_and_bub_usage_prices_it() {
    let env = Env::cli().await;
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::write(
        env.home.join("config.toml"),
        "[prices.\"openai:test-model\"]\ninput = 2.0\ncached_input = 0.5\noutput = 8.0\n",
    )
    .unwrap();
    env.model.push_text("Hello there.");
    env.model.push_text("Again, hello.");
    for prompt in ["hi", "hi again"] {
        let out = env.run(&["run", prompt]).await;
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // The tape's run events and the ledger hold what the fake reported, call by call.
    let served = env.model.usages();
    assert_eq!(served.len(), 2);
    let runs = events(&env, "run");
    let lines = ledger(&env);
    assert_eq!((runs.len(), lines.len()), (2, 2));
    for ((run, line), served) in runs.iter().zip(&lines).zip(&served) {
        let cached = &served["prompt_tokens_details"]["cached_tokens"];
        assert_eq!(run["usage"]["input"], served["prompt_tokens"]);
        assert_eq!(run["usage"]["cache_read"], *cached);
        assert_eq!(run["usage"]["output"], served["completion_tokens"]);
        assert_eq!(line["input"], served["prompt_tokens"]);
        assert_eq!(line["cache_read"], *cached);
        assert_eq!(
            (&line["session"], &line["for"]),
            (&json!("cli"), &json!("step"))
        );
        assert_eq!(line["model"], "openai:test-model");
        assert!(
            line.get("estimated").is_none(),
            "the provider counted: {line}"
        );
    }
    // The second request repeats the tools (at least) of the first: the cache served part.
    let cached = n(&served[1]["prompt_tokens_details"]["cached_tokens"]);
    assert!(cached >= 128, "{served:?}");

    let out = env.run(&["usage", "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let total = &summary["total"];
    let input: u64 = served.iter().map(|u| n(&u["prompt_tokens"])).sum();
    let output: u64 = served.iter().map(|u| n(&u["completion_tokens"])).sum();
    assert_eq!((n(&total["calls"]), n(&total["input"])), (2, input));
    assert_eq!(n(&total["cache_read"]), cached);
    // Fresh input at $2/M, cached at $0.5/M, output at $8/M.
    let usd = ((input - cached) as f64 * 2.0 + cached as f64 * 0.5 + output as f64 * 8.0) / 1e6;
    assert!(
        (total["usd"].as_f64().unwrap() - usd).abs() < 1e-9,
        "{total}"
    );
    let rows = summary["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "one day of one session: {rows:?}");
    assert_eq!(rows[0]["session"], "cli");
    let rate = cached as f64 / input as f64;
    assert!((rows[0]["cache_hit_rate"].as_f64().unwrap() - rate).abs() < 1e-9);

    let table = stdout(&env.run(&["usage", "--since", "7d"]).await);
    let percent = format!("{:.0}% from cache", rate * 100.0);
    assert!(
        table.contains(" cli  ") && table.contains(&percent),
        "{table}"
    );
    assert!(table.contains(&format!("${usd:.4}")), "{table}");
    let tomorrow = chrono::Local::now().date_naive() + chrono::Duration::days(1);
    let later = stdout(&env.run(&["usage", "--since", &tomorrow.to_string()]).await);
    assert!(later.starts_with("no model calls recorded"), "{later}");
    let bad = env.run(&["usage", "--since", "last week"]).await;
    assert_exit(&bad, 2, "--since");
}

#[tokio::test]
async fn a_call_without_usage_is_recorded_with_bub_s_estimate() {
    let env = Env::cli().await;
    let body = json!({"choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "no usage here"}}]});
    env.model.push_raw(200, body.to_string(), Vec::new());
    let out = env.run(&["run", "count me"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let run = &events(&env, "run")[0];
    assert_eq!(run["usage"]["estimated"], true, "{run}");
    let line = &ledger(&env)[0];
    assert_eq!(line["estimated"], 1);
    // The estimate is of what was sent: the request's bytes / 4, give or take the framing.
    let sent = env.model.recorded()[0].body.to_string().len() as u64 / 4;
    let input = n(&line["input"]);
    assert!(
        input * 10 > sent * 8 && input * 10 < sent * 12,
        "{input} vs {sent}"
    );
}

#[tokio::test]
async fn prices_and_budgets_are_checked_at_load() {
    let env = Env::cli().await;
    std::fs::create_dir_all(&env.home).unwrap();
    let config = env.home.join("config.toml");
    std::fs::write(
        &config,
        "[prices.\"openai:test-model\"]\ninput = \"cheap\"\noutput = 1\n",
    )
    .unwrap();
    let out = env.run(&["usage"]).await;
    assert_exit(&out, 2, "prices.\"openai:test-model\".input");
    std::fs::write(
        &config,
        "[prices.\"openai:other\"]\ninput = 1\noutput = 1\n",
    )
    .unwrap();
    let mut env = env;
    env.set("BUB_BUDGET_DAILY_USD", "5");
    let out = env.run(&["run", "hi"]).await;
    assert_exit(&out, 2, "BUB_BUDGET_DAILY_USD");
    assert!(
        stderr(&out).contains("needs a price for openai:test-model"),
        "{}",
        stderr(&out)
    );
    env.set("BUB_BUDGET_DAILY_USD", "");
    env.set("BUB_BUDGET_CHAT_DAILY_TOKENS", "0");
    assert_exit(
        &env.run(&["run", "hi"]).await,
        2,
        "BUB_BUDGET_CHAT_DAILY_TOKENS",
    );
    assert_eq!(env.model.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn slash_usage_shows_the_chat_s_own_figures_and_bub_status_today_s() {
    let env = Env::new().await;
    let daemon = env.start();
    env.model.push_text("first answer");
    env.telegram.push_message(private_text(5, 5, "hello"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    env.telegram.push_message(private_text(6, 6, "/usage"));
    env.telegram.push_message(private_text(5, 5, "/usage"));
    let sent = env.telegram.wait_for_calls("sendMessage", 3, WAIT).await;
    let texts = texts(&sent);
    let served = &env.model.usages()[0];
    let tokens = n(&served["prompt_tokens"]) + n(&served["completion_tokens"]);
    let mine = sent
        .iter()
        .position(|c| c.body["chat_id"] == 5 && texts_of(c).contains("Usage"));
    let mine = &texts[mine.expect("an answer to /usage in chat 5")];
    assert!(mine.contains("Usage of telegram:5"), "{mine}");
    let today = format!("today: {} tokens", thousands(tokens));
    assert!(
        mine.contains(&today) && mine.contains("in 1 call"),
        "{mine}"
    );
    let other = sent.iter().position(|c| c.body["chat_id"] == 6).unwrap();
    assert!(
        texts[other].contains("Usage of telegram:6")
            && texts[other].contains("today: no model calls"),
        "another chat sees only its own: {}",
        texts[other]
    );
    assert_eq!(env.model.request_count(), 1, "/usage asks no model");

    let status = stdout(&env.run(&["status"]).await);
    assert!(
        status.contains(&format!("usage today: {} tokens", thousands(tokens))),
        "{status}"
    );
    let json: Value = serde_json::from_str(&stdout(&env.run(&["status", "--json"]).await)).unwrap();
    assert_eq!(n(&json["usage_today"]["calls"]), 1, "{json}");
    assert!(daemon.stop().await.success());
}

fn texts_of(call: &support::fake_telegram::Call) -> String {
    call.body["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn over_the_chat_budget_no_call_is_made_and_the_chat_is_told() {
    let mut env = Env::new().await;
    env.set("BUB_BUDGET_CHAT_DAILY_TOKENS", "100000");
    // Yesterday's use does not count; today the guest's chat has 99,000 tokens left to 100,000:
    // its next request (some thousands of tokens) would pass the budget.
    seed_ledger(
        &env,
        &[(1, "telegram:5", 5_000_000), (0, "telegram:5", 99_000)],
    );
    let daemon = env.start();
    env.telegram
        .push_message(private_text(5, 5, "please answer"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let told = &texts(&sent)[0];
    assert!(
        told.starts_with("This chat's daily budget is used up (99,000 tokens of 100,000 tokens)")
            && told.contains("resets at midnight")
            && told.contains("raise BUB_BUDGET_CHAT_DAILY_TOKENS"),
        "{told}"
    );
    assert!(!told.contains("Error"), "{told}");
    assert_eq!(env.model.request_count(), 0, "the call was never made");
    wait_until(WAIT, "the event on the tape", || {
        !events(&env, "budget.exceeded").is_empty()
    })
    .await;
    let event = &events(&env, "budget.exceeded")[0];
    assert_eq!(event["budget"], "BUB_BUDGET_CHAT_DAILY_TOKENS");
    assert_eq!(event["for"], "step");
    assert!(
        env.tape_text().contains("please answer"),
        "the message stays on the tape"
    );

    // An owner's chat is not bound by the chat budget (BUB_BUDGET_OWNERS is not set); yesterday's
    // five million tokens do not count against the day either.
    env.model.push_text("owners pass");
    env.telegram.push_message(private_text(42, 42, "and me?"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent)[1], "owners pass");
    assert_eq!(env.model.request_count(), 1);
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scheduled_job_over_the_daily_budget_is_skipped_once() {
    let mut env = Env::new().await;
    env.set("BUB_BUDGET_DAILY_TOKENS", "50000");
    seed_ledger(&env, &[(0, "discord:1", 49_000)]);
    let out = env
        .run(&[
            "run",
            "--session-id",
            "telegram:7",
            ",schedule.add after_seconds=1 message='say pong'",
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let idle = env.spawn(&["idle"]);
    idle.wait_for_log("schedule.skipped.budget").await;
    wait_until(WAIT, "the one-shot job done", || {
        env.jobs()["jobs"].as_array().unwrap().is_empty()
    })
    .await;
    let (status, log) = idle.stop_with_log().await;
    assert!(status.success());
    assert_eq!(log.matches("schedule.skipped.budget").count(), 1, "{log}");
    assert_eq!(
        env.model.request_count(),
        0,
        "the job's call was never made"
    );
    assert!(
        env.telegram.calls_of("sendMessage").is_empty(),
        "the chat is not told"
    );
    let runs = events(&env, "schedule.run");
    assert!(
        runs.len() == 1
            && runs[0]["skipped"]
                .as_str()
                .unwrap()
                .contains("BUB_BUDGET_DAILY_TOKENS"),
        "{runs:?}"
    );
    assert_eq!(
        events(&env, "budget.exceeded")[0]["budget"],
        "BUB_BUDGET_DAILY_TOKENS"
    );
}
