//! Bub's own turn: [`Builtin`], the built-in implementation of every stage of [`Hooks`].
//!
//! * `resolve_session` — the session the caller named.
//! * `load_state` — the session's context (opened once per process and kept between turns;
//!   a subagent's is the one its parent made), what its model loop remembered, the tape's
//!   bootstrap anchor, and what the input asks to be remembered (`remember: …`).
//! * `build_prompt` — a comma command runs here (its output is the answer); other text, a
//!   chat's batch (its files prepared for the model) or a subagent's task is the model's prompt.
//! * `run_model` — the bounded model loop on the session's model and its fallbacks.
//! * `save_state` — what the loop remembers is kept, the loop's result recorded on the tape,
//!   and an owner's long turn handed to the learning call (after the answer).
//! * `render_outbound` — the answer as the chat is told it (command output, the answer unless
//!   the agent answers proactively or already did, the error).
//! * `dispatch_outbound` — declined: the caller delivers the replies on the inbox's ledger.
//! * `on_error` — the failure counted in the metrics and logged.

use async_trait::async_trait;
use serde_json::json;

use std::sync::Arc;

use super::{Hooks, ModelOutput, Prompt, Stage, State, TurnRequest};
use crate::agent::config::TurnConfig;
use crate::agent::models::Models;
use crate::agent::router::{Router, UserRoute};
use crate::agent::{AgentRuntime, TurnInput, inbound, learn};
use crate::chat::SessionId;
use crate::delivery::{Reply, TurnError, TurnResult, render_output};
use crate::media;
use crate::tape::{Deferred, Event};
use crate::tools::ToolContext;

/// The built-in stages, over the runtime's turn settings and model chains. A subagent's turn
/// has no runtime of its own (`runtime: None`): it runs in the context its parent made, and
/// nothing of it is kept between turns.
pub(crate) struct Builtin<'a> {
    pub config: &'a Arc<TurnConfig>,
    pub models: &'a Models,
    pub runtime: Option<&'a AgentRuntime>,
}

#[async_trait]
impl Hooks for Builtin<'_> {
    async fn resolve_session(&self, request: &TurnRequest) -> Option<SessionId> {
        Some(request.session.clone())
    }

    async fn load_state(
        &self,
        session: &SessionId,
        request: &TurnRequest,
        state: &mut State,
    ) -> Result<(), TurnError> {
        let ctx = match &request.seat {
            Some(ctx) => ctx.clone(),
            None => {
                let runtime = self
                    .runtime
                    .ok_or_else(|| TurnError::Tape("no session".into()))?;
                let held = runtime
                    .session(session)
                    .await
                    .map_err(|e| TurnError::tape("tape", &e))?;
                state.memory = held.memory.lock().expect("memory lock").clone();
                let ctx = ToolContext::with_live(
                    runtime.process.clone(),
                    held.state.clone(),
                    request.who.clone(),
                    request.origin,
                    std::mem::take(&mut state.output),
                    state.observer.take(),
                    runtime.subagents.clone().map(|s| s as _),
                );
                state.held = Some(held);
                ctx
            }
        };
        if matches!(request.input, TurnInput::Chat(_)) {
            // Nothing reads or writes the tape before the prompt is recorded (which fails, and
            // fails the turn, on a tape that cannot be written): the anchor goes with it.
            ctx.tape().defer(Deferred::Bootstrap);
        } else if let Err(e) = ctx.tape().ensure_bootstrap().await {
            return Err(TurnError::tape("tape", &e));
        }
        super::super::remember_prefixed(&ctx, &request.input).await;
        state.ctx = Some(ctx);
        Ok(())
    }

    async fn build_prompt(&self, input: &mut TurnInput, state: &State) -> Option<Prompt> {
        let ctx = state.ctx.as_ref()?;
        let route = match input {
            TurnInput::Text(text) | TurnInput::Command(text) => {
                Router::new(ctx.clone()).route_user(text).await
            }
            TurnInput::Task(task) => UserRoute {
                enter_model: true,
                model_prompt: std::mem::take(task),
                ..Default::default()
            },
            // A chat's messages go to the model: their own lines never become commands.
            TurnInput::Chat(batch) => {
                let adapter = batch.adapter.clone();
                let (config, workspace) = (&self.config.media, ctx.workspace());
                let images = media::prepare(
                    config,
                    workspace,
                    adapter.as_ref(),
                    ctx.session(),
                    &mut batch.messages,
                )
                .await;
                return Some(Prompt::Model {
                    text: inbound::render(batch),
                    images,
                    shown: String::new(),
                });
            }
        };
        Some(match route {
            UserRoute {
                exit_requested: true,
                ..
            } => Prompt::Answered {
                output: String::new(),
                exit: true,
            },
            UserRoute {
                enter_model: false,
                immediate_output,
                ..
            } => Prompt::Answered {
                output: immediate_output,
                exit: false,
            },
            UserRoute {
                model_prompt,
                immediate_output,
                ..
            } => Prompt::Model {
                text: model_prompt,
                images: Vec::new(),
                shown: immediate_output,
            },
        })
    }

    async fn run_model(&self, prompt: &Prompt, state: &mut State) -> Option<ModelOutput> {
        let Prompt::Model { text, images, .. } = prompt else {
            return None;
        };
        let ctx = state.ctx.as_ref()?;
        let own = ctx.session.model();
        let chain = self
            .models
            .chain(own.as_ref().unwrap_or(&ctx.process.models.model));
        let llm = match &chain {
            Ok(chain) => Ok(chain.as_ref()),
            Err(e) => Err(e.as_str()),
        };
        let router = Router::new(ctx.clone());
        let output = crate::agent::runner::ModelLoop::new(
            llm,
            ctx,
            &router,
            &mut state.memory,
            self.config.clone(),
        )
        .with_images(images.clone())
        .run(text)
        .await;
        Some(output)
    }

    async fn save_state(
        &self,
        _session: &SessionId,
        state: &mut State,
        prompt: Option<&Prompt>,
        output: Option<&ModelOutput>,
    ) {
        if let Some(held) = &state.held {
            *held.memory.lock().expect("memory lock") = state.memory.clone();
        }
        let (Some(ctx), Some(output)) = (&state.ctx, output) else {
            return;
        };
        let subagent = ctx.turn.parent.is_some();
        let learning = self.config.learn_min_steps;
        if let Some(runtime) = self.runtime
            && !subagent
            && output.error.is_none()
            && learn::worth_learning(learning, ctx, &output.tools)
            && let Some(Prompt::Model { text, .. }) = prompt
        {
            let finished = learn::Finished {
                task: text.clone(),
                steps: output.tools.clone(),
                answer: output.visible_text.clone(),
            };
            let own = ctx.session.model();
            let chain = self
                .models
                .chain(own.as_ref().unwrap_or(&ctx.process.models.model));
            runtime.learn_later(ctx, &chain, finished);
        }
        let result = match subagent {
            true => json!({
                "id": ctx.session_id(),
                "steps": output.steps,
                "error": output.error.as_ref().map(ToString::to_string),
            }),
            false => json!({
                "steps": output.steps,
                "followups": output.followups,
                "exit_requested": output.exit_requested,
                "error": output.error,
            }),
        };
        ctx.tape().event(Event::LoopResult, result).await;
    }

    async fn render_outbound(&self, _request: &TurnRequest, result: &TurnResult) -> Vec<Reply> {
        let Some(runtime) = self.runtime else {
            return Vec::new();
        };
        let text = render_output(result, runtime.settings.proactive_response);
        match text.is_empty() {
            true => Vec::new(),
            false => vec![Reply { text }],
        }
    }

    async fn on_error(&self, stage: Stage, error: &TurnError, request: &TurnRequest) {
        crate::metrics::error(error.kind());
        tracing::info!(session = %request.session, ?stage, kind = error.kind(), "turn.error");
    }
}
