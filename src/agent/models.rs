//! The model chains of a process: for a session's model, a [`ModelChain`] of that model and
//! then `BUB_FALLBACK_MODELS` (each client built once by [`super::client_for`], kept for the
//! process and shared by the sessions that use the same model).
//!
//! A chain whose own model cannot be built (no key for its provider, say) is the reason, reported
//! by each turn; a fallback that cannot be built is left out of the chain with a warning.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::{Model, Settings};
use crate::llm::ModelChain;

/// A session's chain, or why there is none (reported per turn).
pub(crate) type SharedChain = Result<Arc<ModelChain>, String>;

/// The most chains kept (the default one and those sessions switched to); past it the cache
/// starts over.
const MAX_CHAINS: usize = 16;

/// The chains built so far, by their first model.
pub(crate) struct Models {
    settings: Arc<Settings>,
    chains: Mutex<HashMap<Model, SharedChain>>,
}

impl Models {
    /// The chains of `settings`, the default one (`BUB_MODEL`) built at once.
    pub(crate) fn new(settings: Arc<Settings>) -> Self {
        let models = Self {
            settings,
            chains: Mutex::default(),
        };
        // Built now, so an unusable fallback is reported at startup.
        let _ = models.chain(&models.settings.model);
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
        let settings = &self.settings;
        let primary = super::client_for(settings, model).map_err(|e| e.to_string())?;
        let fallbacks = settings
            .fallback_models
            .iter()
            .filter(|m| *m != model)
            .filter_map(|m| match super::client_for(settings, m) {
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
