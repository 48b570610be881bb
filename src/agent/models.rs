//! The model chains of a process: for a session's model, a [`ModelChain`] of that model and
//! then `BUB_FALLBACK_MODELS` (each client built once by [`client_for`] from the process's
//! [`ModelConfig`], kept for the process and shared by the sessions — of every workspace —
//! that use the same model).
//!
//! A chain whose own model cannot be built (no key for its provider, say) is the reason, reported
//! by each turn; a fallback that cannot be built is left out of the chain with a warning.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use crate::config::{Model, ModelConfig};
use crate::llm::{LlmClient, LlmConfig, LlmError, ModelChain};

/// A session's chain, or why there is none (reported per turn).
pub(crate) type SharedChain = Result<Arc<ModelChain>, String>;

/// The most chains kept (the default one and those sessions switched to); past it the cache
/// starts over.
const MAX_CHAINS: usize = 16;

/// A client for `model` with `config`'s key, base URL and timeout for its provider.
pub(crate) fn client_for(config: &ModelConfig, model: &Model) -> Result<LlmClient, LlmError> {
    LlmClient::new(LlmConfig {
        provider: model.provider.clone(),
        model: model.id.clone(),
        base_url: config.base_url_for(model),
        api_key: config.api_key_for(model).map(|k| k.expose().to_owned()),
        timeout: config.timeout,
        max_retries: 3,
        retry_base_delay: Duration::from_millis(500),
    })
}

/// The chains built so far, by their first model.
pub(crate) struct Models {
    config: Arc<ModelConfig>,
    chains: Mutex<HashMap<Model, SharedChain>>,
}

impl Models {
    /// The chains of `config`, the default one (`BUB_MODEL`) built at once.
    pub(crate) fn new(config: Arc<ModelConfig>) -> Self {
        let models = Self {
            config,
            chains: Mutex::default(),
        };
        // Built now, so an unusable fallback is reported at startup.
        let _ = models.chain(&models.config.model);
        models
    }

    /// The chain that starts with `model` (a session's model).
    pub(crate) fn chain(&self, model: &Model) -> SharedChain {
        let mut chains = self.chains.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(chain) = chains.get(model) {
            return chain.clone();
        }
        if chains.len() >= MAX_CHAINS {
            chains.clear();
        }
        let chain = self.build(model);
        chains.insert(model.clone(), chain.clone());
        chain
    }

    fn build(&self, model: &Model) -> SharedChain {
        let config = &self.config;
        let primary = client_for(config, model).map_err(|e| e.to_string())?;
        let fallbacks = config
            .fallback_models
            .iter()
            .filter(|m| *m != model)
            .filter_map(|m| match client_for(config, m) {
                Ok(client) => Some(Arc::new(client)),
                Err(e) => {
                    tracing::warn!(model = %m, error = %e, "model.fallback.unusable");
                    None
                }
            })
            .collect();
        Ok(Arc::new(ModelChain::new(Arc::new(primary), fallbacks)))
    }
}
