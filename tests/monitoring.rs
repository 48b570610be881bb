//! Health and metrics on `BUB_HTTP_LISTEN`, through the real `bub message` and an HTTP
//! client: `/healthz` while it serves, `/readyz` following Telegram's reachability both ways,
//! `/metrics` counting a conversation in text a Prometheus parser reads, with nothing of the
//! conversation or a secret in it.

use std::time::Duration;

use crate::support::bub_env::{Env, texts};
use crate::support::fake_telegram::{TOKEN, private_text};
use crate::support::postgres::free_port;
use crate::support::wait::WAIT;

/// `GET` (or `POST`) `path`: the status and the body; `None` while nothing answers.
async fn get(port: u16, method: reqwest::Method, path: &str) -> Option<(u16, String)> {
    let url = format!("http://127.0.0.1:{port}{path}");
    let response = reqwest::Client::new()
        .request(method, url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// Waits (at most [`WAIT`]) until `path` answers `status`; returns the body.
async fn wait_for_status(port: u16, path: &str, status: u16) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        match get(port, reqwest::Method::GET, path).await {
            Some((s, body)) if s == status => return body,
            other => last = other,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{path} did not answer {status} within {WAIT:?}; last: {last:?}");
}

/// The value of the sample `name` with `labels`, in `scrape`.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)));
    match found.map(|s| &s.value) {
        Some(prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v)) => *v,
        Some(prometheus_parse::Value::Untyped(v)) => *v,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn health_readiness_and_metrics_of_a_running_daemon() {
    let mut env = Env::new().await;
    let port = free_port();
    // A bare port: loopback.
    env.set("BUB_HTTP_LISTEN", &port.to_string());
    // Telegram refuses polls for the first seconds: not ready, then ready. (A 4xx: teloxide
    // waits 10 s before it reads a 5xx answer.)
    env.telegram
        .fail_for("getUpdates", 429, Duration::from_secs(2));
    let daemon = env.start();
    assert_eq!(wait_for_status(port, "/healthz", 200).await, "ok\n");
    let down = wait_for_status(port, "/readyz", 503).await;
    assert_eq!(down, "not connected: telegram\n");
    assert_eq!(wait_for_status(port, "/readyz", 200).await, "ready\n");

    env.model.push_text("Hello back.");
    env.telegram
        .push_message(private_text(42, 42, "hello, a secret plan"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["Hello back."]);
    // The turn is counted when it ends, just after its answer was delivered.
    let counted = async {
        loop {
            if let Some((200, text)) = get(port, reqwest::Method::GET, "/metrics").await
                && text.contains("bub_turn_duration_seconds_count{kind=\"chat\"}")
            {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let text = tokio::time::timeout(WAIT, counted)
        .await
        .expect("the turn counted in time");
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let telegram = [("channel", "telegram")];
    assert_eq!(
        sample(&scrape, "bub_messages_received_total", &telegram),
        1.0
    );
    let chat = [("kind", "chat")];
    assert_eq!(
        sample(&scrape, "bub_turn_duration_seconds_count", &chat),
        1.0
    );
    let ok = [("outcome", "ok")];
    assert_eq!(sample(&scrape, "bub_model_calls_total", &ok), 1.0);
    assert!(sample(&scrape, "bub_model_tokens_total", &[("kind", "input")]) > 0.0);
    let sent = [("channel", "telegram"), ("outcome", "sent")];
    assert_eq!(sample(&scrape, "bub_deliveries_total", &sent), 1.0);
    assert_eq!(sample(&scrape, "bub_channel_connected", &telegram), 1.0);
    for secret in ["secret plan", TOKEN, "sk-test-secret", "\"42\""] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }

    let (status, _) = get(port, reqwest::Method::POST, "/metrics").await.unwrap();
    assert_eq!(status, 405);
    let (status, _) = get(port, reqwest::Method::GET, "/tapes").await.unwrap();
    assert_eq!(status, 404);
    assert!(daemon.stop().await.success());
    assert!(
        get(port, reqwest::Method::GET, "/healthz").await.is_none(),
        "stopped with the daemon"
    );
}

#[tokio::test]
async fn a_bad_listen_address_stops_bub_with_exit_2() {
    let mut env = Env::new().await;
    env.set("BUB_HTTP_LISTEN", "example.com:80");
    let out = env.run(&["message"]).await;
    crate::support::bub_env::assert_exit(&out, 2, "BUB_HTTP_LISTEN");
}
