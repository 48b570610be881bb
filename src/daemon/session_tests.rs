//! Session actor tests on tokio's paused clock: time only moves when every task waits, so the
//! `sleep`s below advance virtual time deterministically.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;

use async_trait::async_trait;

use super::*;
use crate::access::Role;
use crate::channels::{ChatId, MessageId, Part};
use crate::daemon::Stopped;
use crate::daemon::mailbox::{MAILBOX, mailbox};
use crate::delivery::{Reply, TurnError, TurnResult, render_output};
use crate::inbox::{Inbox, JobRun};

#[path = "session_controls_tests.rs"]
mod controls;
#[path = "session_jobs_tests.rs"]
mod jobs;

#[derive(Default)]
struct FakeChannel {
    sent: Mutex<Vec<Outbound>>,
    typing: Mutex<Vec<Instant>>,
}

#[async_trait]
impl Channel for FakeChannel {
    fn name(&self) -> &'static str {
        "fake"
    }
    async fn run(
        &self,
        _: crate::channels::InboundSink,
        _: CancellationToken,
    ) -> anyhow::Result<()> {
        Ok(())
    }
    async fn send_part(&self, part: &Part) -> anyhow::Result<Option<MessageId>> {
        let sent = crate::delivery::ledger::tests::sent(part);
        self.sent.lock().unwrap().push(sent);
        Ok(None)
    }
    async fn edit(&self, chat: &ChatId, message: &MessageId, text: &str) -> anyhow::Result<()> {
        let mut edited = crate::delivery::ledger::tests::sent(&Part::text(chat.clone(), text));
        edited.edit = Some(message.0.clone());
        self.sent.lock().unwrap().push(edited);
        Ok(())
    }
    fn message_limit(&self) -> usize {
        usize::MAX
    }
    async fn check_recipient(&self, _: &str) -> anyhow::Result<()> {
        Ok(())
    }
    async fn typing(&self, _: &ChatId) -> anyhow::Result<()> {
        self.typing.lock().unwrap().push(Instant::now());
        Ok(())
    }
}

/// Records prompts with their start time and authority; turns wait for a permit when `gated`.
struct FakeRunner {
    prompts: Mutex<Vec<(Instant, String)>>,
    authorities: Mutex<Vec<Authority>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
    gate: Option<Semaphore>,
    released: Mutex<Vec<String>>,
    events: Mutex<Vec<(String, serde_json::Value)>>,
    result: TurnResult,
    /// Renders as with `BUB_PROACTIVE_RESPONSE` (the built-in `render_outbound` of the agent).
    proactive: bool,
    /// Scheduled runs are refused with this reason (their creator lost access, say).
    refuse_jobs: Option<String>,
}

impl FakeRunner {
    fn new(gated: bool) -> Self {
        Self {
            prompts: Mutex::default(),
            authorities: Mutex::default(),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            gate: gated.then(|| Semaphore::new(0)),
            released: Mutex::default(),
            events: Mutex::default(),
            result: TurnResult {
                assistant_output: "answer".into(),
                ..Default::default()
            },
            proactive: false,
            refuse_jobs: None,
        }
    }

    fn prompts(&self) -> Vec<String> {
        self.prompts
            .lock()
            .unwrap()
            .iter()
            .map(|(_, p)| p.clone())
            .collect()
    }
}

#[async_trait]
impl TurnRunner for FakeRunner {
    async fn turn(&self, request: TurnRequest) -> TurnResult {
        let (input, who) = (request.input, &request.who);
        // The batch's lines are the messages' texts (the agent's renderer is tested on its own).
        let prompt = match input {
            TurnInput::Text(text) | TurnInput::Command(text) | TurnInput::Task(text) => text,
            TurnInput::Chat(batch) => inbound::render_with(&batch, |m| m.text().into_owned()),
        };
        let prompt = prompt.as_str();
        self.prompts
            .lock()
            .unwrap()
            .push((Instant::now(), prompt.to_owned()));
        self.authorities.lock().unwrap().push(who.clone());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        if let Some(gate) = &self.gate {
            gate.acquire().await.unwrap().forget();
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        let mut result = self.result.clone();
        if prompt.starts_with(',') {
            result = TurnResult {
                immediate_output: format!("ran {prompt}"),
                ..Default::default()
            };
        }
        let text = render_output(&result, self.proactive);
        result.replies = (!text.is_empty())
            .then_some(Reply { text })
            .into_iter()
            .collect();
        result
    }

    async fn run_job(&self, run: &JobRun, _output: TurnOutput) -> Result<TurnResult, String> {
        match &self.refuse_jobs {
            Some(why) => Err(why.clone()),
            None => {
                let input = TurnInput::text(run.prompt.as_str());
                let request =
                    TurnRequest::scheduled(run.session.clone(), input, run.creator.clone());
                Ok(self.turn(request).await)
            }
        }
    }

    async fn record(&self, _session_id: &SessionId, name: Event, data: serde_json::Value) {
        self.events.lock().unwrap().push((name.to_string(), data));
    }

    async fn new_context(
        &self,
        _session_id: &SessionId,
        _who: &Authority,
    ) -> anyhow::Result<Stopped> {
        self.events
            .lock()
            .unwrap()
            .push(("new".to_owned(), serde_json::Value::Null));
        Ok(Stopped::default())
    }

    async fn status(&self, _session_id: &SessionId, _who: &Authority) -> String {
        "model: fake".to_owned()
    }

    fn release(&self, session_id: &SessionId) {
        self.released.lock().unwrap().push(session_id.to_string());
    }
}

struct Harness {
    tx: Mailbox,
    inbox: Arc<Inbox>,
    channel: Arc<FakeChannel>,
    runner: Arc<FakeRunner>,
    actors: ActorMap,
    board: Arc<Board>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    start: Instant,
    next_id: usize,
}

fn config() -> SessionConfig {
    SessionConfig {
        debounce: Duration::from_secs(1),
        delay: Duration::from_secs(10),
        window: Duration::from_secs(60),
        max_wait: Duration::from_secs(10),
        idle_ttl: Duration::from_secs(600),
        typing_interval: Duration::from_secs(4),
        live: false,
        home: std::env::temp_dir(),
    }
}

fn harness(cfg: SessionConfig, runner: FakeRunner) -> Harness {
    harness_for("fake:1", cfg, runner)
}

/// The actor of `session_id`, over the fake channel.
fn harness_for(session_id: &str, cfg: SessionConfig, runner: FakeRunner) -> Harness {
    let channel = Arc::new(FakeChannel::default());
    let runner = Arc::new(runner);
    let actors: ActorMap = Arc::default();
    let (tx, rx) = mailbox();
    actors.insert(session_id.into(), tx.clone());
    let shutdown = CancellationToken::new();
    let inbox = Arc::new(Inbox::memory());
    let board = Arc::new(Board::new("fake:model", &["fake"]));
    let actor = SessionActor::new(
        session_id.into(),
        channel.clone(),
        runner.clone(),
        inbox.clone(),
        board.clone(),
        cfg,
        actors.clone(),
    );
    let task = tokio::spawn(actor.run(rx, shutdown.clone(), CancellationToken::new()));
    Harness {
        tx,
        inbox,
        channel,
        runner,
        actors,
        board,
        shutdown,
        task,
        start: Instant::now(),
        next_id: 0,
    }
}

impl Harness {
    async fn send(&mut self, prompt: &str, mentioned: bool) {
        self.send_as(prompt, mentioned, "42", Role::Owner).await;
    }

    async fn send_as(&mut self, prompt: &str, mentioned: bool, sender: &str, role: Role) {
        self.next_id += 1;
        let mut message = inbound(self.next_id, prompt, mentioned, sender, role);
        self.inbox.receive(&mut message, None).await.unwrap();
        self.tx.send(Mail::Message(message)).await.unwrap();
    }

    /// Seconds after the start at which each turn began.
    fn turn_times(&self) -> Vec<f64> {
        let prompts = self.runner.prompts.lock().unwrap();
        prompts
            .iter()
            .map(|(at, _)| (*at - self.start).as_secs_f64())
            .collect()
    }
}

fn inbound(id: usize, text: &str, mentioned: bool, sender: &str, role: Role) -> Inbound {
    let sender = crate::channels::Sender::new(sender, None, role);
    Inbound {
        mentioned,
        reply: true,
        ..Inbound::new("fake", "1", &id.to_string(), sender, text)
    }
}

async fn at(h: &Harness, seconds: f64) {
    tokio::time::sleep_until(h.start + Duration::from_secs_f64(seconds)).await;
}

#[tokio::test(start_paused = true)]
async fn reference_timeline_mention_follow_up_and_closed_window() {
    let mut h = harness(config(), FakeRunner::new(false));
    h.send("m0", true).await;
    at(&h, 0.5).await;
    h.send("m1", false).await;
    at(&h, 30.0).await;
    assert_eq!(h.runner.prompts(), ["channel: $fake\nm0\nm1"]);
    h.send("m2", false).await;
    at(&h, 100.0).await;
    h.send("m3", false).await;
    at(&h, 200.0).await;
    assert_eq!(
        h.runner.prompts(),
        ["channel: $fake\nm0\nm1", "channel: $fake\nm2"]
    );
    let times = h.turn_times();
    assert!((times[0] - 1.0).abs() < 0.01, "{times:?}");
    assert!((times[1] - 40.0).abs() < 0.01, "{times:?}");
}

#[tokio::test(start_paused = true)]
async fn unaddressed_messages_never_reach_the_model() {
    let mut h = harness(config(), FakeRunner::new(false));
    h.send("chatter", false).await;
    h.send("more chatter", false).await;
    at(&h, 120.0).await;
    assert!(h.runner.prompts().is_empty());
    assert!(h.channel.sent.lock().unwrap().is_empty());
    assert!(
        h.channel.typing.lock().unwrap().is_empty(),
        "no typing for skipped messages"
    );
}

#[tokio::test(start_paused = true)]
async fn mentions_keep_postponing_the_batch() {
    let mut h = harness(config(), FakeRunner::new(false));
    for i in 0..5 {
        at(&h, f64::from(i) * 0.8).await;
        h.send(&format!("m{i}"), true).await;
    }
    at(&h, 10.0).await;
    assert_eq!(h.runner.prompts(), ["channel: $fake\nm0\nm1\nm2\nm3\nm4"]);
    assert!(
        (h.turn_times()[0] - 4.2).abs() < 0.01,
        "{:?}",
        h.turn_times()
    );
}

#[tokio::test(start_paused = true)]
async fn commands_bypass_debounce_and_the_window() {
    let mut cfg = config();
    cfg.debounce = Duration::ZERO;
    let mut h = harness(cfg, FakeRunner::new(false));
    h.send(",help", false).await;
    at(&h, 0.001).await;
    assert_eq!(h.runner.prompts(), [",help"]);
    h.send("hello", true).await;
    at(&h, 1.0).await;
    assert_eq!(h.runner.prompts(), [",help", "channel: $fake\nhello"]);
    let sent = h.channel.sent.lock().unwrap().clone();
    assert_eq!(sent[0].text, "ran ,help");
    assert_eq!(sent[1].text, "answer");
    assert!(
        h.channel.typing.lock().unwrap().is_empty(),
        "answers that came at once need no typing request"
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_runs_with_its_least_trusted_sender_and_a_command_with_its_own() {
    let mut cfg = config();
    cfg.debounce = Duration::ZERO;
    let mut h = harness(cfg, FakeRunner::new(false));
    h.send_as("owner asks", true, "1", Role::Owner).await;
    h.send_as("guest adds", false, "2", Role::Guest).await;
    at(&h, 0.5).await;
    h.send_as(",tape.info", false, "1", Role::Owner).await;
    at(&h, 1.0).await;
    let who = h.runner.authorities.lock().unwrap().clone();
    assert_eq!(who.len(), 2, "{who:?}");
    assert_eq!(
        who[0].role,
        Role::Guest,
        "owner + guest batch runs as guest"
    );
    let senders: Vec<&str> = who[0].senders.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(senders, ["1", "2"]);
    assert_eq!(who[1].role, Role::Owner, "the owner's own command");
}

#[tokio::test(start_paused = true)]
async fn one_turn_at_a_time_and_mid_turn_messages_form_the_next_batch() {
    let mut cfg = config();
    cfg.debounce = Duration::ZERO;
    let mut h = harness(cfg, FakeRunner::new(true));
    h.send("first", true).await;
    at(&h, 1.0).await;
    assert_eq!(h.runner.prompts().len(), 1, "the first turn is running");
    h.send("second", true).await;
    h.send(",tape.info", true).await;
    h.send("third", false).await;
    at(&h, 30.0).await;
    assert_eq!(
        h.runner.prompts().len(),
        1,
        "nothing starts while a turn runs"
    );
    h.runner.gate.as_ref().unwrap().add_permits(3);
    at(&h, 31.0).await;
    assert_eq!(
        h.runner.prompts(),
        [
            "channel: $fake\nfirst",
            ",tape.info",
            "channel: $fake\nsecond\nthird"
        ]
    );
    assert_eq!(h.runner.max_running.load(Ordering::SeqCst), 1);
    let sent = h.channel.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 3, "exactly one delivery per turn: {sent:?}");
    assert_eq!(sent[0].reply_to.as_deref(), Some("1"));
    assert_eq!(
        sent[2].reply_to.as_deref(),
        Some("4"),
        "reply to the last message of the batch"
    );
}

#[tokio::test(start_paused = true)]
async fn typing_repeats_while_a_turn_runs_and_stops_after() {
    let mut cfg = config();
    cfg.debounce = Duration::ZERO;
    let mut h = harness(cfg, FakeRunner::new(true));
    h.send("slow one", true).await;
    at(&h, 10.0).await;
    assert_eq!(
        h.channel.typing.lock().unwrap().len(),
        3,
        "at 0.2, 4.2 and 8.2 s"
    );
    h.runner.gate.as_ref().unwrap().add_permits(1);
    at(&h, 60.0).await;
    assert_eq!(
        h.channel.typing.lock().unwrap().len(),
        3,
        "typing stopped with the turn"
    );
}

#[tokio::test(start_paused = true)]
async fn proactive_mode_delivers_only_command_output_and_errors() {
    let mut cfg = config();
    cfg.debounce = Duration::ZERO;
    let runner = FakeRunner {
        proactive: true,
        ..FakeRunner::new(false)
    };
    let mut h = harness(cfg, runner);
    h.send("hi", true).await;
    h.send(",echo", true).await;
    at(&h, 1.0).await;
    let sent = h.channel.sent.lock().unwrap().clone();
    assert_eq!(
        sent.len(),
        1,
        "the model's answer is not posted by the framework: {sent:?}"
    );
    assert_eq!(sent[0].text, "ran ,echo");
}

#[tokio::test(start_paused = true)]
async fn idle_actor_evicts_itself_and_releases_the_session() {
    let mut cfg = config();
    cfg.debounce = Duration::ZERO;
    let mut h = harness(cfg, FakeRunner::new(false));
    h.send("hi", true).await;
    at(&h, 599.0).await;
    assert!(h.actors.contains_key("fake:1"));
    at(&h, 601.0).await;
    assert!(h.task.is_finished());
    assert!(h.actors.is_empty());
    assert_eq!(*h.runner.released.lock().unwrap(), ["fake:1"]);
}

#[tokio::test(start_paused = true)]
async fn shutdown_starts_no_new_turn_and_leaves_the_batch_in_the_inbox() {
    let mut h = harness(config(), FakeRunner::new(false));
    h.send("m0", true).await;
    h.send("m1", false).await;
    at(&h, 0.1).await;
    assert!(h.runner.prompts().is_empty(), "still debouncing");
    h.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), &mut h.task)
        .await
        .unwrap()
        .unwrap();
    assert!(h.runner.prompts().is_empty());
    assert!(h.channel.sent.lock().unwrap().is_empty());
    assert_eq!(h.inbox.pending(), 2, "both resume on the next start");
}

#[tokio::test(start_paused = true)]
async fn out_of_range_durations_in_settings_neither_panic_nor_fire() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Settings::with_defaults(dir.path().join("home"), dir.path().join("ws"));
    // Loaded settings are bounded; these come from code that builds `Settings` itself.
    s.message_debounce = Duration::from_secs(u64::MAX / 2); // overflows `now + debounce`
    s.session_idle = Duration::MAX;
    s.max_wait = Duration::from_secs(u64::MAX / 2);
    s.message_delay = Duration::ZERO;
    s.active_time_window = Duration::ZERO;
    let cfg = SessionConfig::from_settings(&s);
    let mut h = harness(cfg, FakeRunner::new(false));
    h.send("m0", true).await;
    h.send(",help", false).await;
    at(&h, 86_400.0).await;
    assert!(
        !h.task.is_finished(),
        "the actor is alive (no panic, not evicted)"
    );
    assert_eq!(
        h.runner.prompts(),
        [",help"],
        "the batch waits out its debounce"
    );
    h.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), &mut h.task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(h.runner.prompts(), [",help"], "no new turn after shutdown");
}

fn sent_texts(h: &Harness) -> Vec<String> {
    h.channel
        .sent
        .lock()
        .unwrap()
        .iter()
        .map(|o| o.text.clone())
        .collect()
}

fn events(h: &Harness) -> Vec<String> {
    h.runner
        .events
        .lock()
        .unwrap()
        .iter()
        .map(|(name, _)| name.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_chat_that_keeps_mentioning_is_answered_within_max_wait() {
    let mut h = harness(config(), FakeRunner::new(false));
    // A mention every 0.7 s, each postponing the 1 s debounce: answered 10 s after the first
    // (no message at that instant, so the batch's end is deterministic).
    for i in 0..30 {
        at(&h, 0.3 + f64::from(i) * 0.7).await;
        h.send(&format!("m{i}"), true).await;
    }
    assert!(
        (h.turn_times()[0] - 10.3).abs() < 0.01,
        "{:?}",
        h.turn_times()
    );
    assert!(
        h.runner.prompts()[0].ends_with("m14"),
        "{:?}",
        h.runner.prompts()
    );
}

#[tokio::test(start_paused = true)]
async fn a_huge_batch_carries_the_newest_messages_and_records_the_rest() {
    let mut h = harness(config(), FakeRunner::new(true));
    h.send(",first", false).await;
    at(&h, 0.1).await;
    for i in 0..120 {
        h.send(&format!("follow-up {i}"), true).await;
    }
    h.runner.gate.as_ref().unwrap().add_permits(2);
    at(&h, 5.0).await;
    let prompts = h.runner.prompts();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    let batch = &prompts[1];
    assert!(batch.contains("70 earlier messages"), "{batch}");
    assert!(batch.contains("follow-up 119") && batch.contains("follow-up 70\n"));
    assert!(!batch.contains("follow-up 69\n"), "{batch}");
    let recorded = h.runner.events.lock().unwrap();
    let (name, data) = &recorded[0];
    assert_eq!(name, Event::MessagesLeftOut.as_str());
    assert_eq!(data["count"], 70);
    assert_eq!(
        data["messages"][0], "someone: follow-up 0",
        "as the model would see it"
    );
    drop(recorded);
    assert_eq!(h.inbox.pending(), 0, "all 121 messages finished");
}

#[tokio::test(start_paused = true)]
async fn resumed_work_runs_at_once_and_recorded_answers_are_only_delivered() {
    let h = harness(config(), FakeRunner::new(false));
    let mut interrupted = inbound(1, "asked before the crash", false, "42", Role::Owner);
    interrupted.interrupted = true;
    h.tx.send(Mail::Resumed(vec![interrupted])).await.unwrap();
    h.tx.send(Mail::Deliver(Delivery {
        channel: "fake".into(),
        seqs: vec![],
        out: Outbound {
            chat_id: "1".into(),
            text: "answered before the crash".into(),
            reply_to: None,
            file: None,
            edit: None,
        },
        parts_sent: 0,
    }))
    .await
    .unwrap();
    at(&h, 0.1).await;
    assert_eq!(sent_texts(&h), ["answered before the crash", "answer"]);
    let prompts = h.runner.prompts();
    assert_eq!(prompts.len(), 1, "the delivery ran no turn");
    assert!(
        prompts[0].contains("previous attempt was interrupted"),
        "{prompts:?}"
    );
    assert!(prompts[0].ends_with("asked before the crash"));
}

#[tokio::test(start_paused = true)]
async fn the_status_board_shows_the_turn_the_queue_and_errors_until_eviction() {
    let mut cfg = config();
    cfg.debounce = Duration::ZERO;
    let mut runner = FakeRunner::new(true);
    runner.result.error = Some(TurnError::Model("model: connection refused".into()));
    let mut h = harness(cfg, runner);
    h.send("first", true).await;
    at(&h, 1.0).await;
    h.send("second", true).await;
    h.send(",tape.info", false).await;
    at(&h, 2.0).await;
    let board = h.board.snapshot();
    let row = &board.sessions[0];
    assert_eq!(row.session, "fake:1");
    assert_eq!(
        row.running.as_ref().unwrap().what,
        "an answer to 1 message(s)"
    );
    assert_eq!((row.queued_messages, row.queued_commands), (1, 1));
    assert!(board.errors.is_empty());

    h.runner.gate.as_ref().unwrap().add_permits(1);
    at(&h, 3.0).await;
    let board = h.board.snapshot();
    assert_eq!(board.errors.len(), 1);
    assert_eq!(board.errors[0].session, "fake:1");
    assert_eq!(board.errors[0].error, "model: connection refused");
    assert_eq!(
        board.sessions[0].running.as_ref().unwrap().what,
        "a command"
    );
    assert_eq!(board.sessions[0].queued_messages, 1);

    h.runner.gate.as_ref().unwrap().add_permits(2);
    at(&h, 4.0).await;
    let row = &h.board.snapshot().sessions[0];
    assert_eq!(
        (
            row.running.is_none(),
            row.queued_messages,
            row.queued_commands
        ),
        (true, 0, 0)
    );
    at(&h, 700.0).await;
    assert!(h.task.is_finished(), "evicted");
    assert!(
        h.board.snapshot().sessions.is_empty(),
        "the row goes with the actor"
    );
}

#[tokio::test(start_paused = true)]
async fn a_turn_run_again_answers_in_the_live_message_its_interrupted_attempt_posted() {
    for live in [false, true] {
        let mut cfg = config();
        cfg.live = live;
        let h = harness(cfg, FakeRunner::new(false));
        let mut interrupted = inbound(1, "asked before the crash", true, "42", Role::Owner);
        h.inbox.receive(&mut interrupted, None).await.unwrap();
        h.inbox.started(&[interrupted.seq]).await;
        h.inbox.live(&[interrupted.seq], "1001").await;
        interrupted.interrupted = true;
        h.tx.send(Mail::Resumed(vec![interrupted])).await.unwrap();
        at(&h, 5.0).await;
        let sent = h.channel.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 1, "live={live}: {sent:?}");
        assert_eq!(sent[0].text, "answer");
        assert_eq!(sent[0].edit.as_deref(), Some("1001"), "live={live}");
    }
}

/// More messages than the actor queues: the rest wait in the mailbox and the sender waits for
/// room (nothing is dropped), a control still gets through at once, and once the model moves
/// every message reaches a turn — shown or left out — exactly once, in order.
#[tokio::test(start_paused = true)]
async fn a_full_queue_holds_the_sender_and_loses_nothing() {
    let mut cfg = config();
    cfg.debounce = Duration::ZERO;
    let mut h = harness(cfg, FakeRunner::new(true));
    h.send("m0", true).await;
    at(&h, 1.0).await;
    assert_eq!(
        h.runner.prompts().len(),
        1,
        "the first turn runs (and waits)"
    );
    let n = QUEUED_MESSAGES + MAILBOX + 20;
    let sender = tokio::spawn({
        let (inbox, tx) = (h.inbox.clone(), h.tx.clone());
        async move {
            for i in 1..=n {
                let mut m = inbound(1000 + i, &format!("m{i}"), true, "42", Role::Owner);
                inbox.receive(&mut m, None).await.unwrap();
                tx.send(Mail::Message(m)).await.unwrap();
            }
        }
    });
    at(&h, 2.0).await;
    assert!(!sender.is_finished(), "the sender waits for room");
    let row = h.board.snapshot().sessions[0].clone();
    assert_eq!(row.queued_messages, QUEUED_MESSAGES);
    h.send(",status", false).await;
    at(&h, 2.5).await;
    let status = sent_texts(&h)
        .pop()
        .expect("status answered during the turn");
    assert!(status.contains("queued: 500 message(s)"), "{status}");

    h.runner.gate.as_ref().unwrap().add_permits(100);
    at(&h, 10.0).await;
    assert!(sender.is_finished());
    // Every message once, in order: each turn's left-out messages, then the ones it showed.
    let events = h.runner.events.lock().unwrap().clone();
    let mut left_out = events.iter().map(|(_, data)| data["messages"].clone());
    let mut seen = Vec::new();
    for prompt in h.runner.prompts().iter().skip(1) {
        if prompt.contains("earlier messages of this batch") {
            let messages = left_out.next().expect("a left_out event");
            // Recorded as the model would have seen them (the sender has no name).
            let lines = messages.as_array().unwrap().iter();
            seen.extend(
                lines.map(|m| format!("{:?}", m.as_str().unwrap().replace("someone: ", ""))),
            );
        }
        let lines = prompt.lines().filter(|l| l.starts_with('m'));
        seen.extend(lines.map(|l| format!("{l:?}")));
    }
    let expected: Vec<String> = (1..=n).map(|i| format!("\"m{i}\"")).collect();
    assert_eq!(seen, expected);
    assert!(h.runner.prompts().len() >= 3, "more than one batch");
    assert_eq!(h.inbox.pending(), 0, "all finished");
}
