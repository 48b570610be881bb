//! The turn: the original's pipeline of named stages, typed. Every way into a turn — a chat's
//! batch or command, a scheduled job, the heartbeat, a subagent and its report, `bub run`,
//! `bub chat` — builds a [`TurnRequest`] and enters here, at the first stage; nothing else runs
//! the model loop.
//!
//! ```text
//! resolve_session → load_state → build_prompt → run_model → save_state (always)
//!                                                         → render_outbound → dispatch_outbound
//! ```
//!
//! Each stage is a method of [`Hooks`]. Bub's built-in behaviour is [`Builtin`]'s
//! implementation (`turn/builtin.rs`); other implementations (plugins) come before it, highest
//! priority first, and take a stage over by answering it:
//!
//! * **first result** — `resolve_session`, `build_prompt`, `run_model`: the first `Some` wins
//!   and the rest are not asked;
//! * **broadcast** — `load_state` (every implementation, the built-in first, so a plugin's
//!   change wins), `save_state` (every implementation, **always**, even when an earlier stage
//!   failed), `render_outbound` (every implementation's replies, in order), `dispatch_outbound`
//!   (every implementation, for each reply);
//! * **observers** — `on_error(stage, error)` for a stage that failed: every implementation is
//!   told, and one that panics breaks neither the others nor the turn.
//!
//! The replies `render_outbound` renders are the result's ([`TurnResult::replies`]): the
//! session actor and the scheduled runs deliver them on the inbox's ledger (after the turn, whose
//! journal records surround the delivery); `dispatch_outbound` is told of each (the built-in
//! leaves the sending to them). `bub run` and `bub chat` show the result themselves.

mod builtin;

pub(crate) use builtin::Builtin;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::FutureExt;

use super::TurnInput;
use super::runner::{LoopMemory, LoopOutcome};
use crate::access::{Authority, TurnOrigin};
use crate::chat::SessionId;
use crate::delivery::{Reply, TurnError, TurnResult};
use crate::tools::{ToolContext, ToolObserver, TurnOutput};

/// The stages that can fail, as `on_error` names them (the others decline or observe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    LoadState,
    BuildPrompt,
    RunModel,
}

/// What asks for a turn.
pub struct TurnRequest {
    /// The session the caller names (`<channel>:<chat>`, `cli`, a subagent's id); a
    /// `resolve_session` hook may choose another.
    pub session: SessionId,
    pub input: TurnInput,
    /// Who asked: their role decides the turn's tool policy.
    pub who: Authority,
    pub(crate) origin: TurnOrigin,
    /// Where the answer is shown as it is written and sends are recorded.
    pub output: TurnOutput,
    /// Who is told of each tool call (`bub chat`, `bub run -v`).
    pub observer: Option<ToolObserver>,
    /// A subagent's turn runs in the context its parent made for it (its narrowed policy, its
    /// parent's budget); `None`: the session's own turn.
    pub(crate) seat: Option<ToolContext>,
}

impl TurnRequest {
    /// A turn `who` asked for in `session`.
    pub fn asked(session: SessionId, input: TurnInput, who: Authority) -> Self {
        Self {
            session,
            input,
            who,
            origin: TurnOrigin::Asked,
            output: TurnOutput::default(),
            observer: None,
            seat: None,
        }
    }

    /// A scheduled job's run, with its creator's rights (`who`).
    pub(crate) fn scheduled(session: SessionId, input: TurnInput, who: Authority) -> Self {
        Self {
            origin: TurnOrigin::Scheduled,
            ..Self::asked(session, input, who)
        }
    }

    /// A subagent's turn of `prompt` in `ctx`, the context its parent made for it.
    pub(crate) fn subagent(ctx: ToolContext, prompt: String) -> Self {
        Self {
            seat: Some(ctx.clone()),
            ..Self::scheduled(
                ctx.session.id.clone(),
                TurnInput::Task(prompt),
                ctx.turn.authority.clone(),
            )
        }
    }

    /// The answer shown in `output.live` as it is written, the sends recorded on `output.sends`.
    pub(crate) fn with_output(mut self, output: TurnOutput) -> Self {
        self.output = output;
        self
    }

    /// `observer` is told of each tool call.
    pub fn observed(mut self, observer: ToolObserver) -> Self {
        self.observer = Some(observer);
        self
    }
}

/// What `load_state` builds for the turn and `save_state` keeps: the turn's tool context (its
/// session, rights and watchers) and what the session's model loop remembers between turns.
/// It starts with the request's watchers (its live answer, its sends, its tool observer), for
/// the context that `load_state` makes.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) output: TurnOutput,
    pub(crate) observer: Option<ToolObserver>,
    pub(crate) ctx: Option<ToolContext>,
    pub(crate) memory: LoopMemory,
    /// The session's entry in the runtime, held while the turn runs (it is not released).
    pub(crate) held: Option<Arc<super::Session>>,
}

/// What the model is asked, or the answer when the input needs no model (a comma command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Prompt {
    /// Answered without the model: a comma command's output, and whether it asked to quit.
    Answered { output: String, exit: bool },
    /// For the model: the prompt's text, the images it brings (files in the workspace) and
    /// what a command printed before handing the rest to the model.
    Model {
        text: String,
        images: Vec<String>,
        shown: String,
    },
}

/// What the model produced: its visible answer, the steps it took, why it failed.
pub(crate) type ModelOutput = LoopOutcome;

/// The stages of a turn. Every method has a default that declines (a first-result stage
/// answers `None`, a broadcast stage does nothing), so an implementation takes over only the
/// stages it names.
#[async_trait]
pub(crate) trait Hooks: Send + Sync {
    /// First result: the session the turn runs in.
    async fn resolve_session(&self, _request: &TurnRequest) -> Option<SessionId> {
        None
    }

    /// Broadcast: fills in `state` for `session` (the built-in opens the session's tape and
    /// context).
    async fn load_state(
        &self,
        _session: &SessionId,
        _request: &TurnRequest,
        _state: &mut State,
    ) -> Result<(), TurnError> {
        Ok(())
    }

    /// First result: what the model is asked (or the answer without it).
    async fn build_prompt(&self, _input: &mut TurnInput, _state: &State) -> Option<Prompt> {
        None
    }

    /// First result: the model's output for `prompt` (a [`Prompt::Model`]).
    async fn run_model(&self, _prompt: &Prompt, _state: &mut State) -> Option<ModelOutput> {
        None
    }

    /// Broadcast, always: keeps what the turn changed (`output` is `None` when no model ran).
    async fn save_state(
        &self,
        _session: &SessionId,
        _state: &mut State,
        _prompt: Option<&Prompt>,
        _output: Option<&ModelOutput>,
    ) {
    }

    /// Broadcast: the replies this implementation makes of the turn's result.
    async fn render_outbound(&self, _request: &TurnRequest, _result: &TurnResult) -> Vec<Reply> {
        Vec::new()
    }

    /// Broadcast, for each reply: delivers it; `true` when this implementation did.
    async fn dispatch_outbound(&self, _request: &TurnRequest, _reply: &Reply) -> bool {
        false
    }

    /// Observer: `stage` failed with `error`. Never breaks the turn.
    async fn on_error(&self, _stage: Stage, _error: &TurnError, _request: &TurnRequest) {}
}

/// Runs one turn of `request` through `hooks` (highest priority first; the built-in last).
pub(crate) async fn process(hooks: &[&dyn Hooks], mut request: TurnRequest) -> TurnResult {
    let mut session = None;
    for hook in hooks {
        session = hook.resolve_session(&request).await;
        if session.is_some() {
            break;
        }
    }
    let session = session.unwrap_or_else(|| request.session.clone());
    let mut state = State {
        output: std::mem::take(&mut request.output),
        observer: request.observer.take(),
        ..State::default()
    };
    let mut prompt = None;
    let mut output = None;
    let failed = run_stages(
        hooks,
        &session,
        &mut request,
        &mut state,
        &mut prompt,
        &mut output,
    )
    .await
    .err();
    for hook in hooks {
        hook.save_state(&session, &mut state, prompt.as_ref(), output.as_ref())
            .await;
    }
    if let Some((stage, error)) = &failed {
        observe(hooks, *stage, error, &request).await;
    } else if let Some(error) = output.as_ref().and_then(|o| o.error.as_ref()) {
        observe(hooks, Stage::RunModel, error, &request).await;
    }
    let mut result = result_of(prompt, output, failed.map(|(_, e)| e));
    result.answered = state
        .ctx
        .as_ref()
        .is_some_and(|ctx| ctx.turn.answered.load(std::sync::atomic::Ordering::Relaxed));
    let mut replies = Vec::new();
    for hook in hooks {
        replies.extend(hook.render_outbound(&request, &result).await);
    }
    for reply in &replies {
        for hook in hooks {
            hook.dispatch_outbound(&request, reply).await;
        }
    }
    result.replies = replies;
    result
}

/// `load_state`, `build_prompt` and `run_model`; the stage that failed and why.
async fn run_stages(
    hooks: &[&dyn Hooks],
    session: &SessionId,
    request: &mut TurnRequest,
    state: &mut State,
    prompt: &mut Option<Prompt>,
    output: &mut Option<ModelOutput>,
) -> Result<(), (Stage, TurnError)> {
    for hook in hooks.iter().rev() {
        let loaded = hook.load_state(session, request, state).await;
        loaded.map_err(|e| (Stage::LoadState, e))?;
    }
    for hook in hooks {
        *prompt = hook.build_prompt(&mut request.input, state).await;
        if prompt.is_some() {
            break;
        }
    }
    let Some(asked @ Prompt::Model { .. }) = prompt.as_ref() else {
        return match prompt {
            Some(_) => Ok(()),
            None => Err((Stage::BuildPrompt, TurnError::Model("no prompt".into()))),
        };
    };
    for hook in hooks {
        *output = hook.run_model(asked, state).await;
        if output.is_some() {
            return Ok(());
        }
    }
    let none = TurnError::Model("no implementation ran the model".into());
    Err((Stage::RunModel, none))
}

/// Tells every observer that `stage` failed; one that panics is logged and passed over.
async fn observe(hooks: &[&dyn Hooks], stage: Stage, error: &TurnError, request: &TurnRequest) {
    for hook in hooks {
        let told = AssertUnwindSafe(hook.on_error(stage, error, request));
        if told.catch_unwind().await.is_err() {
            tracing::error!(?stage, "turn.on_error.panicked");
        }
    }
}

/// The turn's result for its caller.
fn result_of(
    prompt: Option<Prompt>,
    output: Option<ModelOutput>,
    failed: Option<TurnError>,
) -> TurnResult {
    let mut result = TurnResult {
        error: failed,
        ..Default::default()
    };
    match prompt {
        Some(Prompt::Answered { output, exit }) => {
            result.immediate_output = output;
            result.exit_requested = exit;
        }
        Some(Prompt::Model { shown, .. }) => result.immediate_output = shown,
        None => {}
    }
    if let Some(output) = output {
        result.assistant_output = output.visible_text;
        result.exit_requested = output.exit_requested;
        result.steps = output.steps;
        result.error = result.error.or(output.error);
    }
    result
}

#[cfg(test)]
mod tests;
