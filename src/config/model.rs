//! The model settings: [`Model`] (`BUB_MODEL` parsed once) and [`ModelConfig`], what every model
//! client of the process is built from — converted once from [`Settings`], so the model chains,
//! the `model` tool, transcription and the start-up key check read these values and nothing
//! else of the settings.

use std::time::Duration;

use super::parse::parse_model;
use super::providers::provider_base_url;
use super::{ConfigError, DEFAULT_MODEL, MaskedUrl, Secret, Settings};
use crate::llm::Api;

/// `BUB_MODEL` parsed once: the provider (which gives the default base URL) and the model id
/// sent to it. Shown as `provider:model`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Model {
    pub provider: String,
    pub id: String,
}

impl Model {
    /// `openrouter:qwen/qwen3-coder-next`.
    pub(super) fn default_model() -> Self {
        let (provider, id) = DEFAULT_MODEL.split_once(':').expect("provider:model");
        Self {
            provider: provider.to_owned(),
            id: id.to_owned(),
        }
    }
}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.provider, self.id)
    }
}

/// What the model clients are built from. `Debug` shows no secret.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// `BUB_MODEL` (or `--model`): a session's model unless it was switched.
    pub model: Model,
    /// Where `model` was set ([`Settings::model_from`]).
    pub model_from: String,
    /// `BUB_FALLBACK_MODELS`, tried in order after the session's model.
    pub fallback_models: Vec<Model>,
    /// `BUB_MAX_TOKENS` (or `--max-tokens`): the most tokens of one answer.
    pub max_tokens: u32,
    /// `BUB_MODEL_TIMEOUT_SECONDS`: one HTTP call's timeout (`None`: none).
    pub timeout: Option<Duration>,
    /// `BUB_API_KEY` (and its other names).
    api_key: Option<Secret>,
    /// `BUB_API_BASE`: OpenAI-compatible providers' base URL; with it any provider name is valid.
    api_base: Option<MaskedUrl>,
    anthropic_api_key: Option<Secret>,
    anthropic_api_base: MaskedUrl,
    gemini_api_key: Option<Secret>,
    gemini_api_base: MaskedUrl,
}

impl ModelConfig {
    pub fn from_settings(s: &Settings) -> Self {
        Self {
            model: s.model.clone(),
            model_from: s.model_from.clone(),
            fallback_models: s.fallback_models.clone(),
            max_tokens: s.max_tokens,
            timeout: s.model_timeout,
            api_key: s.api_key.clone(),
            api_base: s.api_base.clone(),
            anthropic_api_key: s.anthropic_api_key.clone(),
            anthropic_api_base: s.anthropic_api_base.clone(),
            gemini_api_key: s.gemini_api_key.clone(),
            gemini_api_base: s.gemini_api_base.clone(),
        }
    }

    /// The base URL calls to `model` go to: `BUB_ANTHROPIC_API_BASE` and `BUB_GEMINI_API_BASE`
    /// for the providers with their own API, else `BUB_API_BASE` or the provider's default.
    /// An unknown provider without `BUB_API_BASE` (which loading rejects) has none: empty.
    pub(crate) fn base_url_for(&self, model: &Model) -> String {
        let base = match (Api::of(&model.provider), &self.api_base) {
            (Api::Anthropic, _) => &*self.anthropic_api_base,
            (Api::Gemini, _) => &*self.gemini_api_base,
            (Api::OpenAi, Some(base)) => &**base,
            (Api::OpenAi, None) => provider_base_url(&model.provider).unwrap_or_default(),
        };
        base.to_owned()
    }

    /// The key for `model`'s provider: `BUB_ANTHROPIC_API_KEY`, `BUB_GEMINI_API_KEY` or
    /// `BUB_API_KEY` (and their other names).
    pub(crate) fn api_key_for(&self, model: &Model) -> Option<&Secret> {
        match Api::of(&model.provider) {
            Api::OpenAi => self.api_key.as_ref(),
            Api::Anthropic => self.anthropic_api_key.as_ref(),
            Api::Gemini => self.gemini_api_key.as_ref(),
        }
    }

    /// `BUB_API_KEY`, the key transcription falls back to.
    pub(crate) fn api_key(&self) -> Option<&Secret> {
        self.api_key.as_ref()
    }

    /// `raw` validated like `BUB_MODEL` (`provider:model`, a known provider unless
    /// `BUB_API_BASE` is set); the error names `var`.
    pub(crate) fn parse_model(&self, var: &str, raw: &str) -> Result<Model, ConfigError> {
        parse_model(var, raw, self.api_base.as_deref())
    }

    /// The start-up check of commands that call the model: the model and each fallback has its
    /// provider's key unless it needs none ([`crate::llm::needs_key`]). The error names the
    /// variables of every missing key and where to put them (`config_file`).
    pub(super) fn check_keys(&self, config_file: &std::path::Path) -> Result<(), ConfigError> {
        let mut missing: Vec<(Api, Vec<String>)> = Vec::new();
        for model in std::iter::once(&self.model).chain(&self.fallback_models) {
            let needs = crate::llm::needs_key(&model.provider, &self.base_url_for(model));
            if !needs || self.api_key_for(model).is_some() {
                continue;
            }
            let api = Api::of(&model.provider);
            match missing.iter_mut().find(|(a, _)| *a == api) {
                Some((_, models)) => models.push(model.to_string()),
                None => missing.push((api, vec![model.to_string()])),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let vars: Vec<&str> = missing.iter().map(|(api, _)| api.key_vars()).collect();
        let models: Vec<String> = missing.into_iter().flat_map(|(_, m)| m).collect();
        let (the_models, need, it) = match models.len() {
            1 => ("the model", "needs a key", "it"),
            _ => ("the models", "need keys", "them"),
        };
        Err(ConfigError::new(
            vars.join(", "),
            format!(
                "not set: {the_models} {} {need}; put {it} in {} or the environment",
                models.join(", "),
                config_file.display()
            ),
        ))
    }
}
