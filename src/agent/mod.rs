//! One agent turn: route the input (comma command or natural language), run the model loop, and
//! record everything on the session's tape.
//!
//! Invariant: **one turn at a time per session** — a session is behind an async mutex held for
//! the whole turn, so two inputs to one session (a chat line and a scheduled job, say) queue up
//! instead of interleaving on the tape.

pub mod commands;
pub mod expansion;
pub mod prompt;
pub mod router;
pub mod runner;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::channels::outbox::Outbox;
use crate::config::Settings;
use crate::llm::{LlmClient, LlmConfig};
use crate::tape::{Tape, TapeInfo};
use crate::tools::{self, Delivery, Registry, ToolContext};
use router::Router;
use runner::{ModelLoop, SharedLlm};

/// What one turn produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnResult {
    /// Output of a comma command typed by the human.
    pub immediate_output: String,
    /// The model's visible answer.
    pub assistant_output: String,
    /// Why the turn failed, if it did.
    pub error: Option<String>,
    /// `,quit` was executed.
    pub exit_requested: bool,
    /// Model steps taken.
    pub steps: u32,
    /// The agent already answered the session's own chat with `message.send` during the turn:
    /// the framework does not post `assistant_output` again.
    pub answered: bool,
}

/// Per-session state: its tape, tools and router.
struct Session {
    ctx: ToolContext,
    router: Router,
    last_system: Option<u64>,
}

/// The agent of one process: settings, the model client and the sessions.
pub struct AgentRuntime {
    settings: Arc<Settings>,
    llm: SharedLlm,
    /// The tools, built once and shared by every session (they hold no session state).
    registry: Arc<Registry>,
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Session>>>>,
    outbox: Arc<Outbox>,
}

impl AgentRuntime {
    /// Creates the runtime. A model client that cannot be built (no API key, say) is not an
    /// error here: comma commands still work and each model turn reports the reason.
    pub fn new(settings: Settings, allowed_tools: Vec<String>) -> Self {
        let llm = LlmClient::new(LlmConfig {
            provider: settings.provider().to_string(),
            model: settings.model_id().to_string(),
            base_url: settings.model_base_url(),
            api_key: settings.api_key.as_ref().map(|k| k.expose().to_owned()),
            timeout: settings.model_timeout_seconds.map(Duration::from_secs_f64),
            max_retries: 3,
            retry_base_delay: Duration::from_millis(500),
        })
        .map(Arc::new)
        .map_err(|e| e.to_string());
        Self {
            settings: Arc::new(settings),
            llm,
            registry: Arc::new(tools::builtin_registry(&allowed_tools)),
            sessions: Mutex::new(HashMap::new()),
            outbox: Arc::default(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The process's way to any chat (`message.send`, scheduled runs); the daemon installs its
    /// running adapters here.
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    fn session(&self, session_id: &str) -> anyhow::Result<Arc<tokio::sync::Mutex<Session>>> {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if let Some(s) = sessions.get(session_id) {
            return Ok(s.clone());
        }
        let s = &self.settings;
        let tape = Tape::open(&s.home, &s.workspace, &s.tape_name, session_id)?;
        let ctx = ToolContext {
            session_id: session_id.to_string(),
            workspace: s.workspace.clone(),
            settings: self.settings.clone(),
            tape: Arc::new(Mutex::new(tape)),
            registry: self.registry.clone(),
            expanded: Arc::default(),
            delivery: Arc::new(Delivery {
                outbox: self.outbox.clone(),
                answered: AtomicBool::new(false),
            }),
        };
        let session = Arc::new(tokio::sync::Mutex::new(Session {
            router: Router::new(ctx.clone()),
            ctx,
            last_system: None,
        }));
        sessions.insert(session_id.to_string(), session.clone());
        Ok(session)
    }

    /// Forgets an idle session (its tape handle and router); the next input reopens it. A
    /// session in use elsewhere (a running turn) is kept.
    pub fn release_session(&self, session_id: &str) {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        let idle = sessions
            .get(session_id)
            .is_some_and(|s| Arc::strong_count(s) == 1 && s.try_lock().is_ok());
        if idle {
            sessions.remove(session_id);
        }
    }

    /// How many sessions are open (for tests and benchmarks of eviction).
    pub fn open_sessions(&self) -> usize {
        self.sessions.lock().expect("sessions lock").len()
    }

    /// The tape summary of a session (for status lines).
    pub fn tape_info(&self, session_id: &str) -> anyhow::Result<TapeInfo> {
        let session = self.session(session_id)?;
        let session = session
            .try_lock()
            .map_err(|_| anyhow::anyhow!("a turn is running"))?;
        let info = session.ctx.tape.lock().expect("tape lock").info()?;
        Ok(info)
    }

    /// The command names of a session's tools (for completion).
    pub fn tool_names(&self, session_id: &str) -> Vec<String> {
        let Ok(session) = self.session(session_id) else {
            return Vec::new();
        };
        let Ok(session) = session.try_lock() else {
            return Vec::new();
        };
        session
            .ctx
            .registry
            .tools()
            .map(|t| t.name.clone())
            .collect()
    }

    /// Records an event on a session's tape outside a turn (`turn.interrupted`, `schedule.run`),
    /// after the session's running turn (if any) ends.
    pub async fn append_event(&self, session_id: &str, name: &str, data: serde_json::Value) {
        let result = match self.session(session_id) {
            Ok(session) => {
                let session = session.lock().await;
                let mut tape = session.ctx.tape.lock().expect("tape lock");
                tape.event(name, data).map(|_| ())
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::error!(session = session_id, error = %e, "tape.append.error");
        }
    }

    /// Runs one turn in `session_id`. Waits for the session's previous turn to finish first.
    pub async fn handle_input(&self, session_id: &str, text: &str) -> TurnResult {
        let session = match self.session(session_id) {
            Ok(s) => s,
            Err(e) => {
                return TurnResult {
                    error: Some(format!("tape: {e:#}")),
                    ..Default::default()
                };
            }
        };
        let mut session = session.lock().await;
        let answered = session.ctx.delivery.clone();
        answered.answered.store(false, Ordering::Relaxed);
        let mut result = self.turn(&mut session, text).await;
        result.answered = answered.answered.swap(false, Ordering::Relaxed);
        result
    }

    /// One turn in a locked session.
    async fn turn(&self, session: &mut Session, text: &str) -> TurnResult {
        if let Err(e) = session
            .ctx
            .tape
            .lock()
            .expect("tape lock")
            .ensure_bootstrap()
        {
            return TurnResult {
                error: Some(format!("tape: {e:#}")),
                ..Default::default()
            };
        }
        let route = session.router.route_user(text).await;
        if route.exit_requested {
            return TurnResult {
                exit_requested: true,
                ..Default::default()
            };
        }
        if !route.enter_model {
            return TurnResult {
                immediate_output: route.immediate_output,
                ..Default::default()
            };
        }
        let llm = match &self.llm {
            Ok(llm) => Ok(llm.as_ref()),
            Err(e) => Err(e.as_str()),
        };
        let outcome = ModelLoop {
            llm,
            ctx: &session.ctx,
            router: &session.router,
            max_steps: self.settings.max_steps,
            max_tokens: self.settings.max_tokens,
            last_system: &mut session.last_system,
        }
        .run(&route.model_prompt)
        .await;
        let result = json!({
            "steps": outcome.steps,
            "followups": outcome.followups,
            "exit_requested": outcome.exit_requested,
            "error": outcome.error,
        });
        if let Err(e) = session
            .ctx
            .tape
            .lock()
            .expect("tape lock")
            .event("loop.result", result)
        {
            tracing::error!(error = %e, "tape.append.error");
        }
        TurnResult {
            immediate_output: route.immediate_output,
            assistant_output: outcome.visible_text,
            error: outcome.error,
            exit_requested: outcome.exit_requested,
            steps: outcome.steps,
            answered: false,
        }
    }
}
