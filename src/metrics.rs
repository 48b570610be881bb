//! The process's metrics, served in the Prometheus text format on `BUB_HTTP_LISTEN`
//! (`GET /metrics`, [`crate::daemon::http`]): counters and histograms that each module bumps
//! where the thing happens, gauges the daemon sets as it goes.
//!
//! Invariants: label values come from closed sets named in code or configuration — channel
//! names, kinds, outcomes — never a chat or user id, message text, a URL or anything secret.
//! Metrics cost nothing until [`enable`] (the listener starts): before that every bump returns
//! at once and the registry is never built. After it, a bump is an atomic add (and a
//! read-locked map lookup for a labelled one).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// What a turn was, for [`turn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TurnKind {
    /// A chat's messages answered by the model.
    Chat,
    /// A comma command.
    Command,
    /// A scheduled run (a job, the heartbeat).
    Job,
    /// A background subagent's run, or its report to the parent session.
    Subagent,
    /// An answer recorded before a restart, delivered.
    Delivery,
    /// `,stop`, `,new`.
    Control,
}

impl TurnKind {
    fn label(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Command => "command",
            Self::Job => "job",
            Self::Subagent => "subagent",
            Self::Delivery => "delivery",
            Self::Control => "control",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Channel {
    channel: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Delivered {
    channel: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Client {
    client: &'static str,
}

/// Every metric of the process, registered once.
struct Metrics {
    registry: Registry,
    received: Family<Channel, Counter>,
    turns: Family<Kind, Histogram>,
    model_calls: Family<Outcome, Counter>,
    tokens: Family<Kind, Counter>,
    deliveries: Family<Delivered, Counter>,
    retries: Family<Client, Counter>,
    errors: Family<Kind, Counter>,
    connected: Family<Channel, Gauge>,
    inbox_pending: Gauge,
    sessions: Gauge,
    inbound_queue: Gauge,
    leases: Gauge,
}

/// Seconds a turn's histogram tells apart: a command's milliseconds to a long agentic turn.
const TURN_SECONDS: [f64; 10] = [0.05, 0.25, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0, 600.0];

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("bub");
    let r = &mut registry;
    let received = register(
        r,
        "messages_received",
        "Chat messages admitted and journaled",
    );
    let turns = Family::<Kind, Histogram>::new_with_constructor(|| Histogram::new(TURN_SECONDS));
    let turns = register_as(
        r,
        "turn_duration_seconds",
        "Turns of the session actors, by kind, and how long they took",
        turns,
    );
    let model_calls = register(
        r,
        "model_calls",
        "Model requests, by outcome (ok: answered; error: failed after retries and fallbacks)",
    );
    let tokens = register(
        r,
        "model_tokens",
        "Model tokens, by kind (input includes cached)",
    );
    let deliveries = register(
        r,
        "deliveries",
        "Messages sent to chats (all parts of one), by outcome",
    );
    let retries = register(
        r,
        "http_retries",
        "HTTP attempts repeated after a 429, a 5xx or a connection error, by client",
    );
    let errors = register(r, "errors", "Turns that ended with an error, by kind");
    let connected = register(
        r,
        "channel_connected",
        "1 while a channel reaches its platform (Telegram's last poll, Discord's gateway)",
    );
    let inbox_pending = register(
        r,
        "inbox_pending",
        "Messages and runs journaled and not done",
    );
    let sessions = register(r, "sessions_active", "Session actors alive");
    let inbound_queue = register(
        r,
        "inbound_queue_depth",
        "Messages journaled and waiting for the manager",
    );
    let leases = register(
        r,
        "chat_leases_held",
        "Chats whose turns this replica runs (with BUB_DATABASE_URL)",
    );
    Metrics {
        registry,
        received,
        turns,
        model_calls,
        tokens,
        deliveries,
        retries,
        errors,
        connected,
        inbox_pending,
        sessions,
        inbound_queue,
        leases,
    }
});

/// A new metric registered in `registry` as `name` with `help`.
fn register<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    register_as(registry, name, help, M::default())
}

/// `metric` registered in `registry` as `name` with `help`.
fn register_as<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// Whether metrics are kept ([`enable`]).
static ON: AtomicBool = AtomicBool::new(false);

/// Starts keeping metrics (the HTTP listener serves them from now on).
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
    LazyLock::force(&METRICS);
}

/// Whether a bump counts: only once someone may read it.
fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// A chat message of `channel` was admitted and journaled.
pub fn received(channel: &str) {
    if !on() {
        return;
    }
    let channel = channel.to_owned();
    METRICS.received.get_or_create(&Channel { channel }).inc();
}

/// A turn of `kind` ended after `took`.
pub fn turn(kind: TurnKind, took: Duration) {
    if !on() {
        return;
    }
    let kind = Kind { kind: kind.label() };
    METRICS
        .turns
        .get_or_create(&kind)
        .observe(took.as_secs_f64());
}

/// A model request answered (`ok`) or failed for good.
pub(crate) fn model_call(ok: bool) {
    if !on() {
        return;
    }
    let outcome = if ok { "ok" } else { "error" };
    METRICS
        .model_calls
        .get_or_create(&Outcome { outcome })
        .inc();
}

/// The tokens of one answered model request.
pub fn tokens(input: u64, cached: u64, output: u64) {
    if !on() {
        return;
    }
    for (kind, n) in [("input", input), ("cached", cached), ("output", output)] {
        METRICS.tokens.get_or_create(&Kind { kind }).inc_by(n);
    }
}

/// A message to a chat of `channel` was sent (every part) or failed.
pub fn delivery(channel: &str, sent: bool) {
    if !on() {
        return;
    }
    let outcome = if sent { "sent" } else { "failed" };
    let labels = Delivered {
        channel: channel.to_owned(),
        outcome,
    };
    METRICS.deliveries.get_or_create(&labels).inc();
}

/// An HTTP `client` (`telegram`, `discord`, `model`, …) tries a request again.
pub fn retry(client: &'static str) {
    if !on() {
        return;
    }
    METRICS.retries.get_or_create(&Client { client }).inc();
}

/// A turn ended with an error of `kind` (`model`, `tape`, `max_steps`, …).
pub fn error(kind: &'static str) {
    if !on() {
        return;
    }
    METRICS.errors.get_or_create(&Kind { kind }).inc();
}

/// Whether `channel` reaches its platform now. Kept without `/metrics` too: the status board
/// (`bub status`, the console) shows it.
pub fn connected(channel: &str, up: bool) {
    let channel = channel.to_owned();
    METRICS
        .connected
        .get_or_create(&Channel { channel })
        .set(i64::from(up));
}

/// Whether `channel` reached its platform last time it tried.
pub(crate) fn is_connected(channel: &str) -> bool {
    let channel = channel.to_owned();
    METRICS.connected.get_or_create(&Channel { channel }).get() == 1
}

/// The daemon's queues now: journaled work not done, live session actors, the adapters' queue.
pub fn queues(inbox_pending: usize, sessions: usize, inbound_queue: usize) {
    if !on() {
        return;
    }
    let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    METRICS.inbox_pending.set(as_i64(inbox_pending));
    METRICS.sessions.set(as_i64(sessions));
    METRICS.inbound_queue.set(as_i64(inbound_queue));
}

/// The chat leases this replica holds.
pub fn leases(held: usize) {
    if on() {
        METRICS.leases.set(i64::try_from(held).unwrap_or(i64::MAX));
    }
}

/// Every metric in the text format (OpenMetrics, which Prometheus reads).
pub fn encode() -> String {
    let mut text = String::new();
    // Writing to a String does not fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &METRICS.registry);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_what_the_caller_names_and_the_text_parses() {
        enable();
        received("telegram");
        turn(TurnKind::Chat, Duration::from_millis(300));
        tokens(100, 80, 5);
        connected("telegram", true);
        let text = encode();
        assert!(
            text.contains("bub_messages_received_total{channel=\"telegram\"}"),
            "{text}"
        );
        assert!(
            text.contains("bub_turn_duration_seconds_count{kind=\"chat\"}"),
            "{text}"
        );
        assert!(is_connected("telegram"));
        assert!(!is_connected("matrix"), "never connected");
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    }
}
