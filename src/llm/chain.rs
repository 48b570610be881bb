//! A chain of models: the session's model, then `BUB_FALLBACK_MODELS` in order. When a call
//! still fails after its retries for a reason another model may not share — 429 beyond the
//! longest wait, 5xx, a timeout, an unreachable provider, 401/403 — the same request goes to
//! the next model. A context-length error is not such a reason (compaction handles it), nor is
//! any other 4xx (a bad request fails everywhere), nor a failure after streamed text was shown.
//!
//! A model that failed so is skipped for [`COOLDOWN`] by every chain of the process
//! ([`Cooldowns`], bounded), so later turns do not wait on it; when every model of a chain is
//! cooling down they are tried anyway, in order. The chain reports who answered and each
//! fallback ([`Answer`]); recording them is the caller's job.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{ChatRequest, ChatResponse, LlmClient, LlmError};

/// How long a model that failed is skipped.
pub const COOLDOWN: Duration = Duration::from_secs(60);
/// The most models remembered as cooling down (expired ones are dropped first, then the one
/// whose cooldown ends soonest).
const MAX_COOLING: usize = 64;
/// The longest error text a fallback record keeps.
const MAX_ERROR_CHARS: usize = 300;

/// Whether `error` sends the request on to the next model.
pub(crate) fn falls_back(error: &LlmError) -> bool {
    match error {
        LlmError::RateLimited { .. } | LlmError::Timeout { .. } | LlmError::Connect(_) => true,
        LlmError::Http { status, .. } => {
            !error.is_context_overflow() && matches!(status, 401 | 403 | 429 | 500..)
        }
        LlmError::MissingApiKey { .. } | LlmError::Config(_) | LlmError::InvalidResponse(_) => {
            false
        }
    }
}

/// When the models that failed may be tried again: process-wide, on an injectable clock.
pub struct Cooldowns {
    clock: Box<dyn Fn() -> Instant + Send + Sync>,
    /// `provider:model` → the end of its cooldown.
    until: Mutex<HashMap<String, Instant>>,
}

impl Cooldowns {
    /// The process's cooldowns (the real clock), shared by every chain.
    pub fn process() -> Arc<Cooldowns> {
        static PROCESS: OnceLock<Arc<Cooldowns>> = OnceLock::new();
        PROCESS
            .get_or_init(|| Cooldowns::with_clock(Instant::now))
            .clone()
    }

    /// Cooldowns read from `clock` (tests move it forward).
    pub fn with_clock(clock: impl Fn() -> Instant + Send + Sync + 'static) -> Arc<Cooldowns> {
        Arc::new(Cooldowns {
            clock: Box::new(clock),
            until: Mutex::default(),
        })
    }

    fn now(&self) -> Instant {
        (self.clock)()
    }

    /// Whether `model` failed less than [`COOLDOWN`] ago.
    pub fn cooling(&self, model: &str) -> bool {
        let now = self.now();
        let until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.get(model).is_some_and(|end| *end > now)
    }

    /// `model` failed: skip it for [`COOLDOWN`].
    fn failed(&self, model: &str) {
        let now = self.now();
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if until.len() >= MAX_COOLING && !until.contains_key(model) {
            until.retain(|_, end| *end > now);
            if until.len() >= MAX_COOLING
                && let Some(soonest) = until.iter().min_by_key(|(_, end)| **end)
            {
                let soonest = soonest.0.clone();
                until.remove(&soonest);
            }
        }
        let end = now.checked_add(COOLDOWN).unwrap_or(now);
        until.insert(model.to_owned(), end);
    }

    /// `model` answered: no longer skipped.
    fn answered(&self, model: &str) {
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.remove(model);
    }
}

/// One model that failed and the one the request went to next.
#[derive(Debug, Clone, PartialEq)]
pub struct Fallback {
    /// `provider:model` that failed.
    pub from: String,
    /// `provider:model` asked next.
    pub to: String,
    /// The failure's kind ([`LlmError::kind`]) and its text (cut to 300 characters).
    pub kind: &'static str,
    pub error: String,
}

impl Fallback {
    /// The `model.fallback` event's data.
    pub fn to_record(&self) -> Value {
        json!({"from": self.from, "reason": self.kind, "error": self.error, "to": self.to})
    }
}

/// What a call through the chain came to.
#[derive(Debug)]
pub struct Answer<'a> {
    pub result: Result<ChatResponse, LlmError>,
    /// The model that answered, or the last one that failed.
    pub by: &'a LlmClient,
    /// The fallbacks on the way, in order.
    pub fallbacks: Vec<Fallback>,
}

/// The models a session's calls go to, in order (never empty).
#[derive(Clone)]
pub struct ModelChain {
    models: Vec<Arc<LlmClient>>,
    cooldowns: Arc<Cooldowns>,
}

impl std::fmt::Debug for ModelChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.models.iter().map(|m| label(m)))
            .finish()
    }
}

/// `provider:model` of a client.
pub fn label(client: &LlmClient) -> String {
    format!("{}:{}", client.provider(), client.model())
}

impl ModelChain {
    /// `primary`, then `fallbacks` in order, with the process's cooldowns.
    pub fn new(primary: Arc<LlmClient>, fallbacks: Vec<Arc<LlmClient>>) -> Self {
        let mut models = vec![primary];
        models.extend(fallbacks);
        Self {
            models,
            cooldowns: Cooldowns::process(),
        }
    }

    /// The same chain on other cooldowns (tests).
    pub fn with_cooldowns(mut self, cooldowns: Arc<Cooldowns>) -> Self {
        self.cooldowns = cooldowns;
        self
    }

    /// The session's own model (the first of the chain).
    pub fn primary(&self) -> &LlmClient {
        &self.models[0]
    }

    /// Every model, in order.
    pub fn models(&self) -> impl Iterator<Item = &LlmClient> {
        self.models.iter().map(Arc::as_ref)
    }

    /// The models a call tries, in order: those not cooling down, or all of them when every
    /// one is.
    fn order(&self) -> Vec<&LlmClient> {
        let ready: Vec<&LlmClient> = self
            .models()
            .filter(|m| !self.cooldowns.cooling(&label(m)))
            .collect();
        if ready.is_empty() {
            self.models().collect()
        } else {
            ready
        }
    }

    /// One non-streamed call, down the chain.
    pub async fn chat(&self, req: &ChatRequest) -> Answer<'_> {
        self.run(req, None).await
    }

    /// One streamed call, down the chain until a model answers or one fails after showing
    /// text (that text is not shown twice).
    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        mut on_text: impl FnMut(&str) + Send,
    ) -> Answer<'_> {
        self.run(req, Some(&mut on_text)).await
    }

    async fn run(
        &self,
        req: &ChatRequest,
        mut sink: Option<&mut (dyn FnMut(&str) + Send)>,
    ) -> Answer<'_> {
        let order = self.order();
        let mut fallbacks = Vec::new();
        let mut at = 0;
        loop {
            let model = order[at];
            let mut shown = false;
            let result = match sink.as_deref_mut() {
                Some(on_text) => {
                    model
                        .chat_stream(req, |delta| {
                            shown = true;
                            on_text(delta)
                        })
                        .await
                }
                None => model.chat(req).await,
            };
            let name = label(model);
            let error = match result {
                Err(e) if falls_back(&e) => e,
                result => {
                    if result.is_ok() {
                        self.cooldowns.answered(&name);
                    }
                    crate::metrics::model_call(result.is_ok());
                    return Answer {
                        result,
                        by: model,
                        fallbacks,
                    };
                }
            };
            self.cooldowns.failed(&name);
            let Some(next) = order.get(at + 1).filter(|_| !shown) else {
                crate::metrics::model_call(false);
                return Answer {
                    result: Err(error),
                    by: model,
                    fallbacks,
                };
            };
            tracing::warn!(from = %name, to = %label(next), kind = error.kind(), error = %error,
                "model.fallback");
            fallbacks.push(Fallback {
                from: name,
                to: label(next),
                kind: error.kind(),
                error: error.to_string().chars().take(MAX_ERROR_CHARS).collect(),
            });
            at += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, message: &str) -> LlmError {
        LlmError::Http {
            status,
            message: message.into(),
        }
    }

    #[test]
    fn which_failures_fall_back() {
        for status in [401, 403, 429, 500, 502, 503] {
            assert!(falls_back(&http(status, "x")), "{status}");
        }
        for status in [400, 404, 413, 422] {
            assert!(!falls_back(&http(status, "x")), "{status}");
        }
        let overflow = http(400, "This model's maximum context length is 8192 tokens");
        assert!(!falls_back(&overflow));
        // Compaction handles a context-length error, whatever its status.
        assert!(!falls_back(&http(429, "prompt is too long: 250000 tokens")));
        assert!(falls_back(&LlmError::Timeout { seconds: 1.0 }));
        assert!(falls_back(&LlmError::Connect("refused".into())));
        assert!(!falls_back(&LlmError::InvalidResponse("x".into())));
        assert!(!falls_back(&LlmError::Config("x".into())));
    }

    /// A clock the test moves forward.
    fn manual_clock() -> (Arc<Mutex<Instant>>, Arc<Cooldowns>) {
        let now = Arc::new(Mutex::new(Instant::now()));
        let read = now.clone();
        (now, Cooldowns::with_clock(move || *read.lock().unwrap()))
    }

    fn client(model: &str) -> Arc<LlmClient> {
        let cfg = super::super::LlmConfig::new("openai", model, "http://127.0.0.1:9/v1");
        Arc::new(LlmClient::new(cfg).unwrap())
    }

    fn order(chain: &ModelChain) -> Vec<String> {
        chain.order().into_iter().map(label).collect()
    }

    #[test]
    fn a_failed_model_is_skipped_for_the_cooldown_then_tried_again() {
        let (now, cooldowns) = manual_clock();
        let chain = ModelChain::new(client("a"), vec![client("b"), client("c")])
            .with_cooldowns(cooldowns.clone());
        assert_eq!(order(&chain), ["openai:a", "openai:b", "openai:c"]);
        cooldowns.failed("openai:a");
        assert_eq!(order(&chain), ["openai:b", "openai:c"]);
        *now.lock().unwrap() += COOLDOWN - Duration::from_secs(1);
        assert_eq!(order(&chain), ["openai:b", "openai:c"]);
        *now.lock().unwrap() += Duration::from_secs(1);
        assert_eq!(order(&chain), ["openai:a", "openai:b", "openai:c"]);
    }

    #[test]
    fn when_every_model_cools_down_all_are_tried_in_order() {
        let (_now, cooldowns) = manual_clock();
        let chain =
            ModelChain::new(client("a"), vec![client("b")]).with_cooldowns(cooldowns.clone());
        cooldowns.failed("openai:b");
        cooldowns.failed("openai:a");
        assert_eq!(order(&chain), ["openai:a", "openai:b"]);
        cooldowns.answered("openai:a");
        assert_eq!(order(&chain), ["openai:a"]);
    }

    #[test]
    fn the_cooldown_map_is_bounded() {
        let (now, cooldowns) = manual_clock();
        for i in 0..MAX_COOLING * 2 {
            *now.lock().unwrap() += Duration::from_millis(1);
            cooldowns.failed(&format!("openai:m{i}"));
        }
        assert_eq!(cooldowns.until.lock().unwrap().len(), MAX_COOLING);
        // The newest failures are kept, the ones ending soonest gave way.
        assert!(cooldowns.cooling(&format!("openai:m{}", MAX_COOLING * 2 - 1)));
        assert!(!cooldowns.cooling("openai:m0"));
    }
}
