//! The terminal chat as an IM: what runs when, and what the controls do. The same rules as a
//! chat's session actor (`daemon::session`), for one person at the terminal:
//!
//! * One turn at a time. The editor keeps reading while a turn runs; words typed meanwhile are
//!   queued (`queued: 2` is shown) and go to the next turn together, as one batch of messages
//!   (`TurnInput::Chat`, the prompt [`crate::agent::inbound`] renders for Telegram's batches:
//!   `channel: $cli`, then one line per message) — never lost, never one turn each. A line
//!   typed when nothing runs is a batch of one and starts at once (no debounce: Enter is
//!   the person's "send").
//! * Comma commands (a tool, else the shell) queue and run as turns of their own, before the
//!   queued words, as a chat's commands do; `,new` (`/new`) queues like a command and starts a
//!   fresh context.
//! * `,stop` (`/stop`) and Ctrl-C stop the running turn at once (the turn's shell commands are
//!   killed with it, `turn.cancelled` goes on the tape) and the session's background work, as
//!   in a chat; the queue stays and runs next. Ctrl-C with nothing running only says how to
//!   leave. `,status` (`/status`) answers at once, beside the running turn, with the queue.
//! * Ctrl-D or `,quit` leave once the running turn has ended (Ctrl-C stops it); lines still
//!   queued are not sent, and are listed as such.
//! * `,debug` toggles the full view of tool calls; `,help` adds the terminal's own commands.
//!
//! The turn runs for the person at the terminal ([`Authority::terminal`], an owner); the
//! controls go through the daemon's [`TurnRunner`] (what a session actor asks of the agent)
//! and answer with the same words ([`stop_reply`], [`new_reply`], [`queue_lines`]).
//!
//! Piped input ([`piped`]) keeps one turn per line, in order, each line as typed text (as
//! `bub run` sends it); the controls work there too.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::editor::{Input, LineEditor};
use super::screen::{Printer, Screen};
use super::trace::Trace;
use super::typed::{TERMINAL_HELP, Typed};
use super::{BOLD_BLUE, Style, print_welcome, rendered_result, status_line};
use crate::access::{Authority, Role};
use crate::agent::{AgentRuntime, ChatBatch, TurnInput, TurnRequest};
use crate::channels::{Channel, ChatInfo, Content, Inbound, InboundSink, MessageId, Part, Sender};
use crate::chat::SessionId;
use crate::daemon::TurnRunner;
use crate::daemon::runner::{new_reply, queue_lines, stop_reply};
use crate::tape::{Event, md5_hex};
use crate::tools::ToolObserver;

/// The channel name of the terminal's messages (the batch's `channel: $cli` line).
const CHANNEL: &str = "cli";
/// How often an idle chat looks for answers another process wrote to its session's tape.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
/// How many typed lines may wait for the chat loop; past it the editor waits.
const TYPED_AHEAD: usize = 64;

type TurnFuture = Pin<Box<dyn Future<Output = bool> + Send>>;

/// `bub chat` on a terminal (see the module docs).
pub(super) async fn interactive(
    agent: Arc<AgentRuntime>,
    session_id: SessionId,
    style: Style,
) -> anyhow::Result<()> {
    let settings = agent.settings();
    let history = settings.home.join("history").join(format!(
        "{}.history",
        md5_hex(&settings.workspace.to_string_lossy())
    ));
    let mut commands = agent.tool_names();
    commands.extend(
        crate::chat::CHAT_COMMANDS
            .iter()
            .map(|(name, _)| (*name).to_owned()),
    );
    commands.push("debug".to_owned());
    commands.sort();
    commands.dedup();
    let mut editor = LineEditor::new(history, commands)?;
    let folder = settings
        .workspace
        .file_name()
        .map_or_else(|| "bub".to_owned(), |n| n.to_string_lossy().into_owned());
    print_welcome(&agent, style);
    println!(
        "{}",
        style.dim(&status_line(&agent, &session_id, false).await)
    );
    let screen = match editor.printer() {
        Some(write) => Screen::start(write),
        None => Screen::stdout(),
    };
    let saved = TerminalMode::save();
    let (tx, rx) = tokio::sync::mpsc::channel(TYPED_AHEAD);
    std::thread::Builder::new()
        .name("bub-chat-editor".to_owned())
        .spawn(move || editor.read_lines(&folder, tx))?;
    let mut chat = Chat::new(agent, session_id, screen.printer(), style);
    let ended = chat.run(rx).await;
    screen.close();
    // The model may end the chat (`,quit` in its answer) while the editor still reads: the
    // terminal leaves raw mode all the same.
    saved.restore();
    ended
}

/// Piped input: one turn per line, in order (see the module docs).
pub(super) async fn piped(
    agent: Arc<AgentRuntime>,
    session_id: SessionId,
    style: Style,
) -> anyhow::Result<()> {
    let screen = Screen::stdout();
    let mut chat = Chat::new(agent, session_id, screen.printer(), style);
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let Some(typed) = Typed::parse(&line) else {
            continue;
        };
        let turn = match typed {
            Typed::Words(text) | Typed::Command(text) => {
                let help = Typed::is_help(&text);
                chat.turn(TurnInput::text(text), help)
            }
            Typed::New => chat.fresh_context(),
            Typed::Quit => break,
            control => {
                chat.control(control, &mut None).await;
                continue;
            }
        };
        chat.running = Some(Running {
            started: Instant::now(),
            what: "a line".to_owned(),
        });
        let mut turn = Some(turn);
        // Ctrl-C stops the line's turn; the next line runs.
        let exit = tokio::select! {
            exit = async { turn.as_mut().expect("turn").await } => exit,
            _ = tokio::signal::ctrl_c() => {
                chat.stop("Ctrl-C", &mut turn).await;
                false
            }
        };
        chat.running = None;
        if exit {
            break;
        }
    }
    screen.close();
    Ok(())
}

/// What waits for its turn besides the words.
enum Queued {
    Command(String),
    New,
}

/// The turn in progress, for `,stop` and `,status`.
struct Running {
    started: Instant,
    what: String,
}

/// One terminal chat: its queue, the running turn, the debug view.
struct Chat {
    agent: Arc<AgentRuntime>,
    session_id: SessionId,
    out: Printer,
    style: Style,
    debug: bool,
    shell_mode: bool,
    /// Words typed while a turn ran: the next batch.
    lines: Vec<String>,
    commands: VecDeque<Queued>,
    running: Option<Running>,
    /// The terminal's "chat", for the batches' messages.
    channel: Arc<dyn Channel>,
    sender: Sender,
    messages: u64,
    /// The newest tape entry this chat has shown or written: answers after it that no turn of
    /// this chat wrote came from another process ([`Chat::follow`]).
    seen: u64,
}

impl Chat {
    fn new(agent: Arc<AgentRuntime>, session_id: SessionId, out: Printer, style: Style) -> Self {
        let name = ["USER", "LOGNAME"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|n| !n.trim().is_empty()))
            .unwrap_or_else(|| "terminal".to_owned());
        Self {
            agent,
            session_id,
            out,
            style,
            debug: false,
            shell_mode: false,
            lines: Vec::new(),
            commands: VecDeque::new(),
            running: None,
            channel: Arc::new(Terminal),
            sender: Sender {
                id: String::new(),
                username: None,
                name: Some(name),
                role: Role::Owner,
            },
            messages: 0,
            seen: u64::MAX,
        }
    }

    /// Runs until the person leaves (Ctrl-D, `,quit`) and the running turn has ended, or the
    /// model ends the chat.
    async fn run(&mut self, mut input: tokio::sync::mpsc::Receiver<Input>) -> anyhow::Result<()> {
        // Ctrl-C while the editor does not read (between two lines, or after Ctrl-D) is a signal.
        let mut interrupts =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut turn: Option<TurnFuture> = None;
        let mut leaving = false;
        self.seen = self.newest().await;
        let mut follow = tokio::time::interval(FOLLOW_EVERY);
        follow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if turn.is_none() {
                if leaving {
                    break;
                }
                turn = self.next_turn();
            }
            tokio::select! {
                exit = async { turn.as_mut().expect("turn").await }, if turn.is_some() => {
                    turn = None;
                    self.running = None;
                    self.seen = self.newest().await;
                    if exit {
                        break;
                    }
                    if self.lines.is_empty() && self.commands.is_empty() && !leaving {
                        self.show_status_line().await;
                    }
                }
                got = input.recv(), if !leaving => match got {
                    Some(Input::Line(Typed::Quit)) | None => {
                        leaving = true;
                        if turn.is_some() {
                            self.notice("Leaving when the running turn ends (Ctrl-C stops it).");
                        }
                    }
                    Some(Input::Line(typed)) => self.accept(typed, &mut turn).await,
                    Some(Input::Interrupt) => self.interrupt(&mut turn).await,
                    Some(Input::Mode(shell)) => {
                        self.shell_mode = shell;
                        self.show_status_line().await;
                    }
                },
                _ = interrupts.recv() => self.interrupt(&mut turn).await,
                _ = follow.tick(), if turn.is_none() => self.follow().await,
            }
        }
        let unsent = self
            .lines
            .iter()
            .map(String::as_str)
            .chain(self.commands.iter().map(|queued| match queued {
                Queued::Command(command) => command.as_str(),
                Queued::New => ",new",
            }));
        for line in unsent {
            self.notice(&format!("not sent: {line}"));
        }
        Ok(())
    }

    /// Takes one typed line: controls act at once, the rest is queued (see the module docs).
    async fn accept(&mut self, typed: Typed, turn: &mut Option<TurnFuture>) {
        match typed {
            Typed::Words(text) => self.lines.push(text),
            Typed::Command(command) => self.commands.push_back(Queued::Command(command)),
            Typed::New => self.commands.push_back(Queued::New),
            control => return self.control(control, turn).await,
        }
        if turn.is_some() {
            let queued = self.lines.len() + self.commands.len();
            self.notice(&format!("queued: {queued}"));
        }
    }

    /// A control that acts at once: `,stop`, `,status`, `,debug`.
    async fn control(&mut self, control: Typed, turn: &mut Option<TurnFuture>) {
        match control {
            Typed::Stop => {
                let by = Authority::terminal().describe();
                self.stop(&by, turn).await;
            }
            Typed::Status => self.status().await,
            Typed::Debug => {
                self.debug = !self.debug;
                self.notice(match self.debug {
                    true => "Debug view on: tool calls with their full arguments and results.",
                    false => "Debug view off: one line per tool call.",
                });
            }
            other => tracing::debug!(?other, "chat.control.unexpected"),
        }
    }

    /// Ctrl-C: stops the running turn; with nothing running, says how to leave.
    async fn interrupt(&mut self, turn: &mut Option<TurnFuture>) {
        if turn.is_some() {
            self.stop("Ctrl-C", turn).await;
        } else {
            self.notice("Interrupted. Use ',quit' to exit.");
        }
    }

    /// `,stop`: cancels the running turn (dropping it kills its shell commands) and the
    /// session's background work, as in a chat; the queue stays.
    async fn stop(&mut self, by: &str, turn: &mut Option<TurnFuture>) {
        let who = Authority::terminal();
        let children = self.agent.stop_background(&self.session_id, &who);
        let stopped = turn.take().is_some();
        if let Some(running) = self.running.take().filter(|_| stopped) {
            let age = running.started.elapsed();
            tracing::info!(session = %self.session_id, by, age_ms = age.as_millis() as u64,
                "chat.turn.cancelled");
            let data = json!({"by": by, "after_ms": age.as_millis() as u64, "what": running.what});
            self.agent
                .record(&self.session_id, Event::TurnCancelled, data)
                .await;
        }
        self.notice(&stop_reply(stopped, children));
    }

    /// `,status`: the session, what runs and what is queued.
    async fn status(&self) {
        let who = Authority::terminal();
        let about = TurnRunner::status(&*self.agent, &self.session_id, &who);
        let queue = queue_lines(
            self.running
                .as_ref()
                .map(|r| (r.what.as_str(), r.started.elapsed())),
            self.lines.len(),
            self.commands.len(),
        );
        let mut text = about.await.trim().to_owned();
        for line in queue {
            text.push('\n');
            text.push_str(&line);
        }
        self.out.line(text);
    }

    /// The next turn to start: a queued command first, then the queued words as one batch.
    fn next_turn(&mut self) -> Option<TurnFuture> {
        let (what, turn) = match self.commands.pop_front() {
            Some(Queued::Command(command)) => {
                let help = Typed::is_help(&command);
                (
                    "a command".to_owned(),
                    self.turn(TurnInput::text(command), help),
                )
            }
            Some(Queued::New) => ("a new context".to_owned(), self.fresh_context()),
            None if self.lines.is_empty() => return None,
            None => {
                let lines = std::mem::take(&mut self.lines);
                let what = format!("an answer to {} message(s)", lines.len());
                let messages = lines.into_iter().map(|text| self.message(text)).collect();
                let batch = ChatBatch {
                    adapter: self.channel.clone(),
                    messages,
                    interrupted: false,
                    left_out: 0,
                };
                (what, self.turn(TurnInput::Chat(batch), false))
            }
        };
        self.running = Some(Running {
            started: Instant::now(),
            what,
        });
        Some(turn)
    }

    /// A typed line as a chat message of the terminal.
    fn message(&mut self, text: String) -> Inbound {
        self.messages += 1;
        let id = self.messages.to_string();
        let mut message = Inbound::new(CHANNEL, CHANNEL, &id, self.sender.clone(), "");
        message.content = Content::Text(text);
        message.chat = ChatInfo::private();
        message.mentioned = true;
        message
    }

    /// A turn of `input`, printing its tool calls as they run and its result; `help` adds the
    /// terminal's commands to `,help`'s answer. `true` when the turn asked to end the chat.
    fn turn(&self, input: TurnInput, help: bool) -> TurnFuture {
        let (agent, session_id, out) = (
            self.agent.clone(),
            self.session_id.clone(),
            self.out.clone(),
        );
        let (style, debug) = (self.style, self.debug);
        Box::pin(async move {
            let shown = show_tool_calls(Trace::stdout(debug), out.clone());
            let you = Authority::terminal();
            let request = TurnRequest::asked(session_id, input, you).observed(shown);
            let mut result = agent.turn(request).await;
            if help && !result.immediate_output.is_empty() {
                result.immediate_output = format!("{}\n\n{TERMINAL_HELP}", result.immediate_output);
            }
            let text = rendered_result(&result, style);
            if !text.is_empty() {
                out.line(text);
            }
            result.exit_requested
        })
    }

    /// `,new`: a fresh context, as a chat's `/new` makes it.
    fn fresh_context(&self) -> TurnFuture {
        let (agent, session_id, out, style) = (
            self.agent.clone(),
            self.session_id.clone(),
            self.out.clone(),
            self.style,
        );
        Box::pin(async move {
            let ended = agent.new_context(&session_id, &Authority::terminal()).await;
            out.line(style.dim(&new_reply(&ended)));
            false
        })
    }

    async fn show_status_line(&self) {
        let line = status_line(&self.agent, &self.session_id, self.shell_mode).await;
        self.out.line(self.style.dim(&line));
    }

    fn notice(&self, text: &str) {
        self.out.line(self.style.dim(text));
    }

    /// The newest entry of the session's tape (0 when it cannot be read).
    async fn newest(&self) -> u64 {
        match self.agent.answers_since(&self.session_id, u64::MAX).await {
            Ok((newest, _)) => newest,
            Err(_) => 0,
        }
    }

    /// Shows, above the prompt, what the model answered in this session meanwhile for another
    /// process (a daemon's scheduled run in the `cli` session, a subagent's report).
    async fn follow(&mut self) {
        let Ok((newest, answers)) = self.agent.answers_since(&self.session_id, self.seen).await
        else {
            return;
        };
        self.seen = newest;
        if answers.is_empty() {
            return;
        }
        for answer in &answers {
            let label = match self.style.color {
                true => format!(
                    "{} {}",
                    self.style.paint(BOLD_BLUE, "Assistant"),
                    self.style.dim("(meanwhile, from another bub)")
                ),
                false => "Assistant (meanwhile, from another bub)".to_owned(),
            };
            self.out.line(label);
            self.out
                .line(crate::terminal::safe(answer.trim_end()).into_owned());
        }
        self.show_status_line().await;
    }
}

/// Prints each tool call's lines as the turn runs.
fn show_tool_calls(trace: Trace, out: Printer) -> ToolObserver {
    Arc::new(move |event| out.line(trace.render(event)))
}

/// The terminal as the "chat" of its batches: the prompt's `channel: $cli` line. It receives
/// and sends nothing (the chat loop prints the answers).
struct Terminal;

#[async_trait]
impl Channel for Terminal {
    fn name(&self) -> &'static str {
        CHANNEL
    }

    async fn run(&self, _: InboundSink, shutdown: CancellationToken) -> anyhow::Result<()> {
        shutdown.cancelled().await;
        Ok(())
    }

    async fn send_part(&self, _: &Part) -> anyhow::Result<Option<MessageId>> {
        anyhow::bail!("the terminal prints its own answers")
    }

    fn message_limit(&self) -> usize {
        usize::MAX
    }

    async fn check_recipient(&self, _: &str) -> anyhow::Result<()> {
        anyhow::bail!("the terminal is not a chat to send messages to")
    }
}

/// The terminal's settings when the chat began, put back when it ends: the editor may still
/// hold it in raw mode when the model ends the chat.
struct TerminalMode(Option<libc::termios>);

impl TerminalMode {
    fn save() -> Self {
        let mut mode = std::mem::MaybeUninit::<libc::termios>::uninit();
        // SAFETY: tcgetattr writes a whole termios into `mode` when it returns 0.
        let saved = unsafe { libc::tcgetattr(libc::STDIN_FILENO, mode.as_mut_ptr()) == 0 }
            .then(|| unsafe { mode.assume_init() });
        Self(saved)
    }

    fn restore(self) {
        if let Some(mode) = self.0 {
            // SAFETY: `mode` is the termios tcgetattr filled in for this descriptor.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSADRAIN, &mode) };
        }
    }
}
