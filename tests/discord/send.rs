//! Sending to Discord: long answers split (the first part replying, code blocks balanced),
//! rate limits and server errors retried within the budget, errors that name the channel and
//! never the token.

use super::*;

#[tokio::test]
async fn a_long_answer_is_split_and_the_first_part_replies() {
    let fake = fake_discord::start().await;
    let discord = sender(&fake);
    let paragraph = "word ".repeat(299) + "end.";
    let text = [paragraph.as_str(); 3].join("\n\n");
    assert_eq!(text.chars().count(), 4501);
    let out = outbound(CHANNEL, &text, Some("1001"));
    // Posting runs in the background here, as it does when a session delivers an answer.
    let send = tokio::spawn(async move { support::send(&discord, &out).await });
    let posts = fake.wait_for_posts(3, WAIT).await;
    bounded(send).await.unwrap().unwrap();
    assert_eq!(fake.posted_messages().len(), 3);
    for post in &posts {
        assert_eq!(post.channel_id, CHANNEL);
        assert!(post.content().chars().count() <= 2000);
        assert_eq!(post.body["allowed_mentions"]["replied_user"], false);
    }
    assert_eq!(posts[0].reply_to(), Some("1001"));
    assert_eq!(
        posts[0].body["message_reference"]["fail_if_not_exists"],
        false
    );
    assert!(posts[1].reply_to().is_none() && posts[2].reply_to().is_none());
    let words: usize = posts
        .iter()
        .map(|p| p.content().split_whitespace().count())
        .sum();
    assert_eq!(words, 900, "nothing lost");
}

#[tokio::test]
async fn a_code_block_split_across_parts_stays_balanced() {
    let fake = fake_discord::start().await;
    let discord = sender(&fake);
    let code: String = (0..150)
        .map(|i| format!("let value_{i} = compute({i});\n"))
        .collect();
    let text = format!("Here it is:\n\n```rust\n{code}```\n\nDone.");
    assert!(text.chars().count() > 4000);
    let out = outbound(CHANNEL, &text, None);
    bounded(support::send(&discord, &out)).await.unwrap();
    let posts = fake.posted_messages();
    assert!(posts.len() >= 3, "{}", posts.len());
    for post in &posts {
        let c = post.content();
        assert!(c.chars().count() <= 2000);
        let fences = c
            .lines()
            .filter(|l| l.trim_start().starts_with("```"))
            .count();
        assert_eq!(fences % 2, 0, "unbalanced part:\n{c}");
        assert!(post.reply_to().is_none());
    }
}

#[tokio::test]
async fn a_429_is_retried_after_retry_after() {
    let fake = fake_discord::start().await;
    let discord = sender(&fake);
    let limited = json!({"message": "You are being rate limited.", "retry_after": 0.5,
                         "global": false, "code": 0});
    fake.fail_next_post(429, limited.clone(), &[("retry-after", "0.5")]);
    fake.fail_next_post(429, limited, &[]); // body only
    let out = outbound(CHANNEL, "hello", None);
    bounded(support::send(&discord, &out)).await.unwrap();
    let attempts = fake.requests_to("POST", "/api/v10/channels/555/messages");
    assert_eq!(
        attempts.iter().map(|r| r.status).collect::<Vec<_>>(),
        [429, 429, 200]
    );
    for pair in attempts.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(450), "resent after {gap:?}");
    }
    let posts = fake.posted_messages();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].content(), "hello");
}

#[tokio::test]
async fn a_429_asking_for_a_huge_wait_fails_at_once() {
    let fake = fake_discord::start().await;
    let discord = sender(&fake);
    let out = outbound(CHANNEL, "hello", None);
    // 1e19 s does not fit in a Duration (this panicked); 3600 s fits but is too long to wait.
    for (body_wait, header) in [(json!(1e19), None), (json!(0.5), Some("3600"))] {
        let limited = json!({"message": "You are being rate limited.",
                             "retry_after": body_wait, "global": false});
        let headers: Vec<(&str, &str)> = header.map(|h| ("retry-after", h)).into_iter().collect();
        fake.fail_next_post(429, limited, &headers);
        let started = std::time::Instant::now();
        let err = format!(
            "{:#}",
            bounded(support::send(&discord, &out)).await.unwrap_err()
        );
        assert!(started.elapsed() < Duration::from_secs(5), "not waited for");
        let asked = header.unwrap_or("1e19");
        assert!(
            err.contains(CHANNEL)
                && err.contains(&format!("rate limited: the server asks to wait {asked} s")),
            "{err}"
        );
    }
    let attempts = fake.requests_to("POST", "/api/v10/channels/555/messages");
    assert_eq!(
        attempts.iter().map(|r| r.status).collect::<Vec<_>>(),
        [429, 429],
        "one attempt each, no retry"
    );
    assert!(fake.posted_messages().is_empty());
    // The adapter still works afterwards.
    bounded(support::send(&discord, &out)).await.unwrap();
    assert_eq!(fake.posted_messages().len(), 1);
}

/// A 5xx answer is retried like Telegram's sends: one 502, then the message is delivered once.
#[tokio::test]
async fn a_5xx_is_retried_and_the_message_delivered_once() {
    let fake = fake_discord::start().await;
    let discord = sender(&fake);
    fake.fail_next_post(502, json!({"message": "Bad Gateway"}), &[]);
    bounded(support::send(&discord, &outbound(CHANNEL, "hello", None)))
        .await
        .unwrap();
    let attempts = fake.requests_to("POST", "/api/v10/channels/555/messages");
    let statuses: Vec<_> = attempts.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [502, 200]);
    // The backoff: 1 s, jittered by ×0.5 to ×1.5.
    let gap = attempts[1].at - attempts[0].at;
    assert!(gap >= Duration::from_millis(450), "resent after {gap:?}");
    let posts = fake.posted_messages();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].content(), "hello");
}

/// A Discord that keeps answering 5xx fails the send once the budget is spent (shortened here
/// to 2 s); a 4xx other than 429 is never retried.
#[tokio::test]
async fn a_persistent_5xx_fails_after_the_budget_and_a_4xx_at_once() {
    let fake = fake_discord::start().await;
    let budget = Duration::from_secs(2);
    let discord = discord(&settings(&fake, |s| {
        s.channel_mut("discord").send_retry_budget = budget
    }));
    for _ in 0..20 {
        fake.fail_next_post(503, json!({"message": "Service Unavailable"}), &[]);
    }
    let started = Instant::now();
    let err = bounded(support::send(&discord, &outbound(CHANNEL, "hello", None)))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < budget + Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let err = format!("{err:#}");
    assert!(err.contains(CHANNEL) && err.contains("503"), "{err}");
    let attempts = fake.requests_to("POST", "/api/v10/channels/555/messages");
    assert!(attempts.len() >= 2, "retried: {}", attempts.len());
    assert!(attempts.iter().all(|r| r.status == 503));
    assert!(attempts.last().unwrap().at - attempts[0].at < budget);
    assert!(fake.posted_messages().is_empty());

    let other = fake_discord::start().await;
    let discord = sender(&other);
    other.fail_next_post(
        404,
        json!({"message": "Unknown Channel", "code": 10003}),
        &[],
    );
    let err = bounded(support::send(&discord, &outbound(CHANNEL, "hello", None)))
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("Unknown Channel"), "{err:#}");
    let attempts = other.requests_to("POST", "/api/v10/channels/555/messages");
    assert_eq!(attempts.len(), 1, "a 404 is not retried");
}

#[tokio::test]
async fn send_errors_name_the_channel_and_never_the_token() {
    let fake = fake_discord::start().await;
    let discord = sender(&fake);
    fake.fail_next_post(
        403,
        json!({"message": "Missing Access", "code": 50001}),
        &[],
    );
    let out = outbound(CHANNEL, "hello", None);
    let err = format!(
        "{:#}",
        bounded(support::send(&discord, &out)).await.unwrap_err()
    );
    assert!(
        err.contains(CHANNEL) && err.contains("Missing Access"),
        "{err}"
    );
    assert!(!err.contains(TOKEN), "{err}");

    let bad = outbound("general", "hello", None);
    let err = format!(
        "{:#}",
        bounded(support::send(&discord, &bad)).await.unwrap_err()
    );
    assert!(err.contains("general"), "{err}");
}
