//! The bounded model loop of one turn: call the model, run the tool
//! calls it asks for, route its final text, repeat until it answers, fails or hits the step bound.
//!
//! Everything is recorded on the tape as it happens: the user prompt before the call (so a failed
//! call loses nothing), the tool calls before they run, their results after, then the answer.
//! A prompt that cannot be recorded (disk full, a file over `RLIMIT_FSIZE`) ends the turn with an
//! error before the model is called; other failed appends are logged and the turn goes on.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::compact;
use super::config::TurnConfig;
use super::learn::ToolStep;
use super::prompt;
use super::request::{
    checkpoint_note, memory_block, noted, sanitize_context, stable_hash, system_prompt,
};
use super::router::Router;
use super::spend;
use super::stagnation;
use crate::access::TurnOrigin;
use crate::delivery::TurnError;
use crate::llm::chain::{Answer, Fallback, label};
use crate::llm::{ChatMessage, ChatRequest, ChatResponse, LlmClient, LlmError, ModelChain, Part};
use crate::media;
use crate::skills::Discovery;
use crate::tape::backend::{Build, handoff_records};
use crate::tape::context::View;
use crate::tape::shared::{append_failed, logged};

use crate::tape::{ContextCursor, Deferred, Record, Searched};
use crate::tape::{Event, Kind};
use crate::tools::ToolContext;
use crate::usage::Purpose;

mod tools;

/// The follow-up prompt after tool calls.
pub(crate) const CONTINUE_PROMPT: &str = "Continue the task.";

/// What the loop produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LoopOutcome {
    pub visible_text: String,
    pub exit_requested: bool,
    pub steps: u32,
    pub followups: u32,
    pub error: Option<TurnError>,
    /// The tool calls of the turn, in order.
    pub tools: Vec<ToolStep>,
}

enum Step {
    Tools,
    Text(String),
}

/// The finish reason of a reply the model stopped writing at `max_tokens`.
const CUT: &str = "length";

/// What a reply cut at the output limit says of itself (the user and, on the tape, the model).
fn cut_note(max_tokens: u32) -> String {
    format!(
        "\n\n[Cut off: the answer reached the output limit of {max_tokens} tokens (BUB_MAX_TOKENS).]"
    )
}

/// What a session's model loop remembers from one turn to the next.
#[derive(Debug, Clone)]
pub(crate) struct LoopMemory {
    /// Hash of the last system prompt written to the tape, to record it only when it changes.
    pub last_system: Option<u64>,
    /// Prompt tokens the provider counted per estimated token, at the last call that reported
    /// its usage (1 until one does).
    pub token_scale: f64,
    /// The model refused a request with images: the session's later requests carry none.
    pub images_refused: bool,
}

impl Default for LoopMemory {
    fn default() -> Self {
        Self {
            last_system: None,
            token_scale: 1.0,
            images_refused: false,
        }
    }
}

/// Runs the model loop for one session turn.
pub(crate) struct ModelLoop<'a> {
    /// The session's model and its fallbacks, or why there are none.
    llm: Result<&'a ModelChain, &'a str>,
    /// The model that answered the step's call (or failed last).
    by: Option<&'a LlmClient>,
    ctx: &'a ToolContext,
    router: &'a Router,
    /// The turn's bounds, system prompt, compaction budget and vision settings.
    config: Arc<TurnConfig>,
    max_tokens: u32,
    /// What the session remembers between turns.
    memory: &'a mut LoopMemory,
    /// The turn's context, read from the tape where the previous step left off.
    context: ContextCursor,
    /// The skills as the last step's system prompt showed them (for `$hints` in answers).
    skills: Arc<Discovery>,
    /// The estimated tokens of the tools offered (the same every step of the turn).
    tools_tokens: u64,
    /// This turn's failed tool calls not yet followed by a success of the same tool: (tool,
    /// error), for lessons.
    failures: Vec<(String, String)>,
    /// This turn's tool calls so far.
    trail: Vec<ToolStep>,
    /// Calls repeated with the same result ([`stagnation`]).
    guard: stagnation::Guard,
    /// The images the turn's prompt brought (saved files, relative to the workspace).
    images: Vec<String>,
    /// What this turn shows of its images, by path (made or read from the cache once a turn).
    images_shown: HashMap<String, media::image::Shown>,
    /// The answer's visible text so far (earlier steps'), under a live answer's new text.
    shown: String,
}

impl<'a> ModelLoop<'a> {
    /// The loop of a turn in `ctx`'s session, bounded by `config`'s steps and the model's
    /// tokens. `memory` is what the session's earlier turns left for this one.
    pub(crate) fn new(
        llm: Result<&'a ModelChain, &'a str>,
        ctx: &'a ToolContext,
        router: &'a Router,
        memory: &'a mut LoopMemory,
        config: Arc<TurnConfig>,
    ) -> Self {
        Self {
            llm,
            by: None,
            ctx,
            router,
            max_tokens: ctx.process.models.max_tokens,
            memory,
            // A guest's turn in a shared chat does not see an owner's command output.
            context: ContextCursor::new(View {
                guest: ctx.turn.policy.searched() == Searched::Conversation,
                max_result_chars: config.tool_result_max_chars,
            }),
            config,
            skills: Arc::default(),
            tools_tokens: ctx.registry().spec_tokens_for(&ctx.turn.policy),
            failures: Vec::new(),
            trail: Vec::new(),
            guard: stagnation::Guard::default(),
            images: Vec::new(),
            images_shown: HashMap::new(),
            shown: String::new(),
        }
    }

    /// The images the user's prompt brought (paths relative to the workspace): recorded with
    /// the prompt, and shown to a vision model.
    pub(crate) fn with_images(mut self, images: Vec<String>) -> Self {
        self.images = images;
        self
    }

    /// Runs until the model answers without commands, fails, asks to quit, or `max_steps`.
    /// `$hints` in the prompt and in the model's answers expand the tools and skills they name.
    pub(crate) async fn run(&mut self, prompt: &str) -> LoopOutcome {
        let mut out = LoopOutcome::default();
        let mut prompt = prompt.to_string();
        let mut visible: Vec<String> = Vec::new();
        let mut done = false;
        while out.steps < self.config.max_steps && !done {
            out.steps += 1;
            let step = out.steps;
            match self.step(&prompt, step).await {
                Err(error) => {
                    self.event(Event::LoopStepError, json!({"step": step, "error": error}))
                        .await;
                    out.error = Some(error);
                    done = true;
                }
                Ok(Step::Tools) => {
                    self.finish(step, false, true, false).await;
                    if let Some(message) = self.guard.exhausted() {
                        self.event(Event::LoopStagnant, json!({"step": step})).await;
                        out.error = Some(TurnError::Stagnant(message));
                        done = true;
                        continue;
                    }
                    prompt = CONTINUE_PROMPT.to_string();
                    out.followups += 1;
                }
                Ok(Step::Text(text)) if text.trim().is_empty() => {
                    self.event(Event::LoopStepEmpty, json!({"step": step}))
                        .await;
                    done = true;
                }
                Ok(Step::Text(text)) => {
                    self.activate_hints(&text);
                    let route = self.router.route_assistant(&text).await;
                    if !route.visible_text.is_empty() {
                        visible.push(route.visible_text.clone());
                        self.shown = visible.join("\n\n");
                    }
                    out.exit_requested |= route.exit_requested;
                    let followup = !route.next_prompt.is_empty() && !route.exit_requested;
                    self.finish(
                        step,
                        !route.visible_text.is_empty(),
                        followup,
                        route.exit_requested,
                    )
                    .await;
                    if followup {
                        prompt = route.next_prompt;
                        out.followups += 1;
                    } else {
                        done = true;
                    }
                }
            }
        }
        if !done && out.error.is_none() {
            out.error = Some(TurnError::MaxSteps(self.config.max_steps));
            self.event(
                Event::LoopMaxSteps,
                json!({"max_steps": self.config.max_steps}),
            )
            .await;
        }
        out.visible_text = visible.join("\n\n").trim().to_string();
        out.tools = std::mem::take(&mut self.trail);
        out
    }

    /// The step's `loop.step.finish` record, written with the tape's next operation.
    async fn finish(&self, step: u32, visible: bool, followup: bool, exit: bool) {
        self.ctx.tape().defer_event(
            Event::LoopStepFinish,
            json!({"step": step, "visible_text": visible, "followup": followup, "exit_requested": exit}),
        );
    }

    fn model_label(&self) -> String {
        match self.llm {
            Ok(chain) => label(chain.primary()),
            Err(_) => self.ctx.process.models.model.to_string(),
        }
    }

    /// Expands the tools and skills `text` names, with the skills of this step.
    fn activate_hints(&self, text: &str) {
        let mut expanded = self.ctx.expanded();
        prompt::activate_hints(text, self.ctx.registry(), &self.skills, &mut expanded);
    }

    async fn event(&self, name: Event, data: Value) {
        self.ctx.tape().event(name, data).await;
    }

    /// Appends one entry; a failure is logged and the turn goes on.
    async fn append(&self, kind: Kind, payload: Value, meta: &Value) {
        self.ctx.tape().record(kind, payload, meta.clone()).await;
    }

    /// One model call (retried once after an automatic handoff when the context overflows).
    /// Step 1's `prompt` is the user's input (else a follow-up prompt of the loop). When the
    /// prompt cannot be recorded, the model is not called.
    async fn step(&mut self, prompt: &str, step: u32) -> Result<Step, TurnError> {
        let start = json!({"step": step, "model": self.model_label()});
        self.by = None;
        let llm = match self.llm {
            Ok(llm) => llm,
            Err(e) => {
                self.event(Event::LoopStepStart, start).await;
                return Err(TurnError::Model(e.to_string()));
            }
        };
        let run = json!({
            "run_id": uuid::Uuid::new_v4().simple().to_string(),
            "role": self.ctx.turn.authority.role,
        });
        // The user's own prompt may name tools and skills to expand.
        let hints = (step == 1).then(|| prompt.to_owned());
        let recorded = self.prepare(start, prompt, &run, hints).await;
        let (system, context) = recorded.map_err(|e| {
            let what = if step == 1 {
                "your message"
            } else {
                "the next prompt"
            };
            TurnError::tape(&format!("could not record {what} on the tape"), &e)
        })?;
        // The context read with the prompt; after a compaction it is read again.
        let mut context = match context {
            Ok(messages) if self.over_budget(&system, &messages) => {
                self.compact(llm, messages, &run, "budget").await;
                None
            }
            context => Some(context),
        };
        let mut retried = false;
        let response = loop {
            let messages = match context.take() {
                Some(messages) => messages,
                None => self.context().await,
            };
            if let Ok(messages) = &messages {
                self.affordable(llm.primary(), &system, messages).await?;
            }
            match self.call(llm, &system, messages).await {
                Ok(r) => break r,
                Err(e) if !retried && e.is_context_overflow() => {
                    retried = true;
                    let messages = self.context().await.unwrap_or_default();
                    self.compact(llm, messages, &run, "context_overflow").await;
                }
                Err(e) => {
                    let payload = json!({"kind": e.kind(), "message": e.to_string()});
                    self.append(Kind::Error, payload, &run).await;
                    let by = self.by.unwrap_or(llm.primary());
                    self.event(
                        Event::Run,
                        json!({"status": "error", "provider": by.provider(), "model": by.model()}),
                    )
                    .await;
                    return Err(TurnError::Model(e.to_string()));
                }
            }
        };
        let by = self.by.unwrap_or(llm.primary());
        let usage = response.usage.unwrap_or_default(); // set by `call`
        let ran = spend::run_event(by, &usage, Purpose::Step);
        if response.tool_calls.is_empty() {
            let mut text = response.content.unwrap_or_default();
            if response.finish_reason.as_deref() == Some(CUT) {
                // Never passed on as if it were complete.
                text.push_str(&cut_note(self.max_tokens));
            }
            let answer = json!({"role": "assistant", "content": text});
            // Written with the tape's next operation (the turn's last record at the latest).
            let answer = Record::new(Kind::Message, answer, run);
            let records = vec![Record::event(Event::Run, ran), answer];
            self.ctx.tape().defer(Deferred::Records(records));
            return Ok(Step::Text(text));
        }
        self.ctx.tape().defer_event(Event::Run, ran);
        self.run_tools(&response, &run).await;
        Ok(Step::Tools)
    }

    /// The work before a model call, in one operation of the tape ([`TapeStore::step`]: one
    /// hop to the blocking pool for a file): the skills (expanding those `hints` names) and the
    /// system prompt built from them, then on the tape the step's start event, the system
    /// prompt (when it changed), the prompt, and the context to send.
    /// The prompt is recorded as it is (with its `origin` when Bub wrote it:
    /// [`Self::prompt_origin`]); its meta carries what the model is shown with it
    /// ([`crate::tape::context`] renders both): on a turn's first prompt (`hints` given) the
    /// time and the working checkpoint, on any prompt the details of the tools and skills
    /// hinted since the last one — each note only when the context does not show it already.
    /// Returns the system prompt and the context; an error means the step's records (the
    /// prompt with them) could not be written.
    async fn prepare(
        &mut self,
        start: Value,
        prompt: &str,
        run: &Value,
        hints: Option<String>,
    ) -> anyhow::Result<(String, anyhow::Result<Vec<ChatMessage>>)> {
        let first = hints.is_some();
        let mcp = &self.ctx.process.mcp;
        if first && mcp.is_configured() && crate::tools::mcp::allowed_by(&self.ctx.turn.policy) {
            // First use starts the servers: their tools are listed in the system prompt.
            mcp.prepare().await;
        }
        let time = first.then(|| prompt::time_note(chrono::Local::now()));
        let origin = self.prompt_origin(first);
        let images = (first && !self.images.is_empty()).then(|| json!(self.images));
        let (prompt, run) = (prompt.to_owned(), run.clone());
        let (ctx, last_system) = (self.ctx.clone(), self.memory.last_system);
        let config = self.config.clone();
        let memory = memory_block(self.ctx).await;
        let checkpoint = match first {
            true => checkpoint_note(self.ctx).await,
            false => None,
        };
        let (built, taken) = std::sync::mpsc::sync_channel(1);
        let build: Build = Box::new(move |shown| {
            let skills = crate::skills::discover(&ctx.skill_roots());
            if let Some(text) = hints {
                prompt::activate_hints(&text, ctx.registry(), &skills, &mut ctx.expanded());
            }
            let system = system_prompt(&ctx, &config.system_prompt, &skills, &memory);
            let hash = stable_hash(&system);
            let mut records = vec![Record::event(Event::LoopStepStart, start)];
            let changed = last_system != Some(hash);
            if changed {
                let entry = json!({"content": system});
                records.push(Record::new(Kind::System, entry, run.clone()));
            }
            let (tools, names) = ctx.expanded().take_pending();
            let details =
                prompt::details(ctx.registry(), &skills, &ctx.turn.policy, &tools, &names);
            let mut notes: Vec<String> = checkpoint.into_iter().chain(details).collect();
            // What the context shows already is not noted again.
            notes.retain(|note| !noted(&shown, note));
            let mut message = json!({"role": "user", "content": prompt});
            if let Some(images) = images {
                message["images"] = images;
            }
            let mut meta = run;
            if let Some(origin) = origin {
                meta["origin"] = json!(origin);
            }
            if let Some(time) = time {
                meta["time"] = json!(time);
            }
            if !notes.is_empty() {
                meta["notes"] = json!(notes);
            }
            records.push(Record::new(Kind::Message, message, meta));
            let _ = built.send((system, changed.then_some(hash), skills));
            records
        });
        let context = self.ctx.tape().step(build, &mut self.context).await;
        let context = context.inspect_err(|e| append_failed(&Kind::Message, e))?;
        let (system, recorded, skills) = taken
            .try_recv()
            .map_err(|_| anyhow::anyhow!("the step's records were not built"))?;
        self.skills = skills;
        if recorded.is_some() {
            self.memory.last_system = recorded;
        }
        Ok((system, context))
    }

    /// Who wrote the prompt of a step, when it was Bub and not a person: `followup` (a later
    /// step's: "Continue the task." or the output of the commands in the answer), `scheduled`
    /// (a job's run, the heartbeat's, a subagent's report), `subagent` (a subagent's task).
    /// Recorded as the prompt's `origin` meta, so readers (the console) tell Bub's own
    /// messages from a person's without reading their text; not part of the model's context.
    fn prompt_origin(&self, first: bool) -> Option<&'static str> {
        let turn = &self.ctx.turn;
        match () {
            _ if !first => Some("followup"),
            _ if turn.parent.is_some() => Some("subagent"),
            _ if turn.origin == TurnOrigin::Scheduled => Some("scheduled"),
            _ => None,
        }
    }

    /// The context to send, read from the tape where the last read left off.
    async fn context(&mut self) -> anyhow::Result<Vec<ChatMessage>> {
        self.ctx.tape().context(&mut self.context).await
    }

    /// One model call with `system` and the context. When the provider reports the prompt's
    /// tokens, the ratio to the estimate scales the later estimates of the session.
    async fn call(
        &mut self,
        llm: &'a ModelChain,
        system: &str,
        context: anyhow::Result<Vec<ChatMessage>>,
    ) -> Result<ChatResponse, LlmError> {
        let context = context.map_err(|e| LlmError::InvalidResponse(format!("tape: {e:#}")))?;
        let estimate = self.estimate(system, &context);
        let mut messages = vec![ChatMessage::system(system)];
        messages.extend(sanitize_context(context));
        let shown = self.attach_images(llm.primary(), &mut messages).await;
        let mut request = ChatRequest {
            messages,
            tools: self.ctx.registry().openai_specs_for(&self.ctx.turn.policy),
            max_tokens: self.max_tokens,
        };
        let mut response = match (self.send(llm, &request).await, shown) {
            // A model that does not take images: the same request with their paths instead.
            (Err(LlmError::Http { status, message }), Some((at, paths)))
                if (400..500).contains(&status) && status != 429 =>
            {
                self.memory.images_refused = true;
                tracing::warn!(status, error = %message, "media.images_refused");
                self.event(
                    Event::ImagesRefused,
                    json!({"status": status, "error": message}),
                )
                .await;
                let message = &mut request.messages[at];
                let note = format!(
                    "{}\n[The model cannot look at images; they are saved at: {}]",
                    message.text(),
                    paths.join(", ")
                );
                message.content = vec![Part::Text(note)];
                self.send(llm, &request).await?
            }
            (response, _) => response?,
        };
        let counted = response.usage.filter(|u| !u.estimated).map(|u| u.input);
        let by = self.by.unwrap_or(llm.primary());
        let usage = spend::record(self.ctx, Purpose::Step, by, &request, &response).await;
        response.usage = Some(usage);
        if let Some(counted) = counted.filter(|_| estimate > 0) {
            self.memory.token_scale = (counted as f64 / estimate as f64).clamp(0.5, 4.0);
        }
        Ok(response)
    }

    /// One model call down the chain: streamed into the turn's live answer when it has one (the
    /// earlier steps' text, then this step's as it comes), else plain. Notes the model that
    /// answered and records each fallback.
    async fn send(
        &mut self,
        llm: &'a ModelChain,
        request: &ChatRequest,
    ) -> Result<ChatResponse, LlmError> {
        let answer = match &self.ctx.turn.live {
            None => llm.chat(request).await,
            Some(live) => {
                let mut text = self.shown.clone();
                live.send_modify(|l| l.text.clone_from(&text));
                let mut first = true;
                llm.chat_stream(request, |delta| {
                    if first && !text.is_empty() {
                        text.push_str("\n\n");
                    }
                    first = false;
                    text.push_str(delta);
                    live.send_modify(|l| l.text.clone_from(&text));
                })
                .await
            }
        };
        let Answer {
            result,
            by,
            fallbacks,
        } = answer;
        self.by = Some(by);
        record_fallbacks(self.ctx, fallbacks).await;
        result
    }

    /// Turns the newest user message with images in `messages` into text and image parts, when
    /// the model takes images (`BUB_VISION`) and has not refused them in this session; strips
    /// the `images` field of every message either way. Returns the message's index and the
    /// paths of the images shown. An image that is not shown (too large, not decodable) gets a
    /// note with its path in the text.
    async fn attach_images(
        &mut self,
        llm: &LlmClient,
        messages: &mut [ChatMessage],
    ) -> Option<(usize, Vec<String>)> {
        let media = &self.config.media.settings;
        let wanted = media.vision_for(llm.model()) && !self.memory.images_refused;
        let newest = wanted
            .then(|| media::image::newest_images(messages))
            .flatten();
        let Some((at, paths)) = newest else {
            media::image::attach(messages, None);
            return None;
        };
        let missing: Vec<String> = paths
            .iter()
            .filter(|p| !self.images_shown.contains_key(*p))
            .cloned()
            .collect();
        let (workspace, home) = (
            self.ctx.workspace().to_owned(),
            self.ctx.process.home.clone(),
        );
        let made = tokio::task::spawn_blocking(move || {
            missing
                .into_iter()
                .map(|path| {
                    let shown = media::image::show(&home, &workspace.join(&path));
                    (path, shown)
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        self.images_shown.extend(made);
        let shown: Vec<(String, media::image::Shown)> = paths
            .into_iter()
            .filter_map(|p| self.images_shown.get(&p).cloned().map(|s| (p, s)))
            .collect();
        media::image::attach(messages, Some((at, &shown)));
        let images: Vec<String> = shown
            .into_iter()
            .filter(|(_, s)| matches!(s, media::image::Shown::Image(_)))
            .map(|(p, _)| p)
            .collect();
        (!images.is_empty()).then_some((at, images))
    }

    /// The budget check before a step's call, with the request's estimated input: over a
    /// budget the step ends with the message for the chat (the prompt is on the tape).
    async fn affordable(
        &self,
        llm: &LlmClient,
        system: &str,
        messages: &[ChatMessage],
    ) -> Result<(), TurnError> {
        let input = self.estimate(system, messages) as f64 * self.memory.token_scale;
        spend::allowed(self.ctx, Purpose::Step, llm, input as u64)
            .await
            .map_err(|exceeded| TurnError::Budget(exceeded.message()))
    }

    /// A fast estimate of a request's prompt tokens: the system prompt, the messages and the
    /// tools offered.
    fn estimate(&self, system: &str, messages: &[ChatMessage]) -> u64 {
        compact::estimate(system, messages) + self.tools_tokens
    }

    /// Whether `messages` with `system` fill more of the model's window than the settings
    /// allow (the estimate, scaled by what the provider counted at the session's last call),
    /// and compaction would leave fewer messages (a window the system prompt and the tools
    /// fill alone is not compacted turn after turn).
    fn over_budget(&self, system: &str, messages: &[ChatMessage]) -> bool {
        let estimate = self.estimate(system, messages) as f64 * self.memory.token_scale;
        estimate > self.budget() as f64 && messages.len() > compact::CARRIED + 1
    }

    /// The tokens the context may fill: `BUB_COMPACT_PERCENT` of `BUB_CONTEXT_TOKENS`.
    fn budget(&self) -> u64 {
        self.config.context_budget
    }

    /// Compacts `messages` (the context): the model's summary — or, when its call fails, one
    /// built without it — becomes anchor `compaction`, and the newest messages are carried over
    /// after it. Failures are logged; the turn goes on either way.
    async fn compact(
        &mut self,
        llm: &ModelChain,
        messages: Vec<ChatMessage>,
        run: &Value,
        why: &str,
    ) {
        let started = std::time::Instant::now();
        let budget = self.budget();
        let transcript = compact::transcript(&messages, (budget as usize).saturating_mul(3));
        let request = ChatRequest {
            messages: vec![
                ChatMessage::system(compact::SUMMARY_PROMPT),
                ChatMessage::user(transcript),
            ],
            tools: crate::llm::ToolSpecs::default(),
            max_tokens: self.max_tokens,
        };
        let answer = spend::call(self.ctx, Purpose::Compaction, llm, &request).await;
        let (summary, by) = match answer {
            Ok(r) if r.content.as_deref().is_some_and(|t| !t.trim().is_empty()) => {
                (r.content.unwrap_or_default(), "model")
            }
            Ok(_) => (compact::fallback_summary(&messages), "fallback"),
            Err(e) => {
                tracing::warn!(error = %e, "context.compact.summary_failed");
                (compact::fallback_summary(&messages), "fallback")
            }
        };
        let carried = compact::carried(&messages, budget / 4);
        let data = json!({
            "reason": why,
            "summary_by": by,
            "tokens_before": compact::estimate("", &messages),
            "carried": carried.len(),
            "ms": started.elapsed().as_millis() as u64,
        });
        tracing::info!(reason = why, summary_by = by, "context.compacted");
        let run = run.clone();
        let mut records = handoff_records(compact::ANCHOR, Some(&summary), None);
        for message in carried {
            let meta = json!({"carried_over": true, "run_id": run["run_id"]});
            records.push(Record::new(Kind::Message, message.to_record(), meta));
        }
        records.push(Record::event(Event::ContextCompacted, data));
        logged(&Kind::Anchor, self.ctx.tape().append(records).await);
    }
}

/// Records each fallback of a call on the session's tape (`model.fallback`: the model that
/// failed, the reason, the model asked next).
pub(crate) async fn record_fallbacks(ctx: &ToolContext, fallbacks: Vec<Fallback>) {
    for fallback in fallbacks {
        ctx.tape()
            .event(Event::ModelFallback, fallback.to_record())
            .await;
    }
}
