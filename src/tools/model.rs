//! `model`: the session's model and the fallback chain after it, or switching this session to
//! another model, kept across restarts in `BUB_HOME/models.json` ([`SessionModels`]).
//!
//! Invariants: a model is validated like `BUB_MODEL` before it is kept; the file holds at most
//! [`MAX_SESSIONS`] sessions (the longest unchanged gives way); every change is a
//! read-modify-write under `models.lock`, written atomically; a session without an entry (or
//! whose entry no longer validates) uses `BUB_MODEL`. Owner-only (`access::policy::OWNER_ONLY`):
//! a guest's turn cannot switch the model. The process keeps what it last read or wrote of the
//! file (read once, on the blocking pool): opening a session reads no file, and a switch made
//! by another process (`bub run ",model …"` beside a daemon) shows in this one after its
//! restart.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Tool, ToolContext, ToolError};
use crate::config::{Model, ModelConfig};
use crate::llm::chain::Cooldowns;
use crate::storage;

/// The most sessions `models.json` remembers.
pub(crate) const MAX_SESSIONS: usize = 1_000;

/// One session's model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    model: String,
    set_at: DateTime<Utc>,
}

#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ModelsFile {
    #[serde(default)]
    sessions: BTreeMap<String, Entry>,
}

/// Handle on `BUB_HOME/models.json` (holds no open file), with the sessions' models as this
/// process last read or wrote them.
pub(crate) struct SessionModels {
    path: PathBuf,
    lock_path: PathBuf,
    /// Each session's model as the file names it; `None` until the file is first read.
    known: Mutex<Option<BTreeMap<String, String>>>,
}

impl SessionModels {
    pub(crate) fn new(home: &Path) -> Self {
        Self {
            path: home.join("models.json"),
            lock_path: home.join("models.lock"),
            known: Mutex::default(),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Option<BTreeMap<String, String>>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the file's entries as known (an unreadable file is known as empty).
    fn remember(&self, file: &ModelsFile) {
        let entries = file.sessions.iter();
        *self.known() = Some(entries.map(|(s, e)| (s.clone(), e.model.clone())).collect());
    }

    fn load(&self) -> anyhow::Result<ModelsFile> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(ModelsFile::default()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.path.display())),
        };
        serde_json::from_str(&text)
            .with_context(|| format!("{} does not parse; fix or remove it", self.path.display()))
    }

    /// The model `session` was switched to, validated like `BUB_MODEL` (`None`: `BUB_MODEL`);
    /// reads the file when this process has not yet (blocking). An unreadable file or an entry
    /// that no longer validates is logged and ignored.
    pub(crate) fn of(&self, models: &ModelConfig, session: &str) -> Option<Model> {
        if let Some(known) = self.of_known(models, session) {
            return known;
        }
        let file = self
            .load()
            .inspect_err(|e| tracing::warn!(error = %format!("{e:#}"), "models.unreadable"))
            .unwrap_or_default();
        self.remember(&file);
        self.of_known(models, session).flatten()
    }

    /// [`SessionModels::of`] without reading the file: `None` when this process has not read
    /// it yet.
    pub(crate) fn of_known(&self, models: &ModelConfig, session: &str) -> Option<Option<Model>> {
        let known = self.known();
        let Some(raw) = known.as_ref()?.get(session) else {
            return Some(None);
        };
        let parsed = models.parse_model("models.json", raw);
        Some(
            parsed
                .map_err(|e| tracing::warn!(session, error = %e, "models.invalid"))
                .ok(),
        )
    }

    /// Keeps `model` for `session` (`None` removes its entry: it follows `BUB_MODEL`).
    fn set(&self, session: &str, model: Option<&Model>) -> anyhow::Result<()> {
        let _lock = storage::lock(&self.lock_path)?;
        let mut file = self.load()?;
        match model {
            Some(model) => {
                let entry = Entry {
                    model: model.to_string(),
                    set_at: Utc::now(),
                };
                file.sessions.insert(session.to_owned(), entry);
                while file.sessions.len() > MAX_SESSIONS {
                    let oldest = file
                        .sessions
                        .iter()
                        .min_by_key(|(_, e)| e.set_at)
                        .map(|(s, _)| s.clone());
                    file.sessions.remove(&oldest.unwrap_or_default());
                }
            }
            None => {
                if file.sessions.remove(session).is_none() {
                    return Ok(());
                }
            }
        }
        let body = serde_json::to_vec_pretty(&file)?;
        storage::write_atomic(&self.path, &body, Some(0o600))?;
        self.remember(&file);
        Ok(())
    }
}

#[derive(Deserialize, JsonSchema)]
struct ModelArgs {
    /// provider:model to switch this session to; omit to show the current one
    model: Option<String>,
}

/// What `,model` shows: the session's model (and where it comes from), then the chain after it
/// with the models cooling down marked.
pub(crate) fn describe(models: &ModelConfig, own: Option<&Model>) -> String {
    let cooldowns = Cooldowns::process();
    let shown = |m: &Model| {
        let label = m.to_string();
        if cooldowns.cooling(&label) {
            format!("{label} (cooling down after a failure)")
        } else {
            label
        }
    };
    let model = own.unwrap_or(&models.model);
    let source = match own {
        Some(_) => "this session",
        None => &models.model_from,
    };
    let fallbacks: Vec<String> = models
        .fallback_models
        .iter()
        .filter(|m| *m != model)
        .map(shown)
        .collect();
    let chain = if fallbacks.is_empty() {
        "none".to_owned()
    } else {
        fallbacks.join(" → ")
    };
    format!("model: {} ({source})\nfallbacks: {chain}", shown(model))
}

/// `model`.
pub(crate) fn tools() -> Vec<Tool> {
    vec![Tool::new(
        "model",
        "Show or switch this session's model",
        "Without arguments: the session's model and the fallback models after it. With \
         model=provider:model: this session uses that model from the next call on, kept across \
         restarts.",
        |ModelArgs { model }, ctx: ToolContext| async move {
            let models = &ctx.process.models;
            let Some(raw) = model.filter(|m| !m.trim().is_empty()) else {
                return Ok(describe(models, ctx.session.model().as_ref()));
            };
            let wanted = models
                .parse_model("model", &raw)
                .map_err(|e| ToolError::InvalidArguments(e.message))?;
            // The default model is no entry: the session follows BUB_MODEL if it changes.
            let own = (wanted != models.model).then_some(wanted);
            let (process, session, kept) = (
                ctx.process.clone(),
                ctx.session_id().to_owned(),
                own.clone(),
            );
            let store = move || process.session_models.set(&session, kept.as_ref());
            tokio::task::spawn_blocking(store)
                .await
                .map_err(|e| ToolError::Failed(e.to_string()))??;
            ctx.session.set_model(own.clone());
            Ok(format!(
                "switched; from the next call on:\n{}",
                describe(models, own.as_ref())
            ))
        },
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Settings, parse_model};

    /// The default model, with one fallback.
    fn models() -> ModelConfig {
        let mut s = Settings::with_defaults("/h".into(), "/w".into());
        s.fallback_models = vec![parse_model("t", "openai:b", None).unwrap()];
        s.model_from = "BUB_MODEL in config.toml".into();
        ModelConfig::from_settings(&s)
    }

    #[test]
    fn a_switch_is_kept_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let s = models();
        let store = SessionModels::new(dir.path());
        assert_eq!(store.of(&s, "telegram:1"), None);
        let model = s.parse_model("t", "openai:gpt-4o").unwrap();
        store.set("telegram:1", Some(&model)).unwrap();
        assert_eq!(store.of(&s, "telegram:1"), Some(model.clone()));
        let mut full = store.load().unwrap();
        for i in 1..MAX_SESSIONS {
            let entry = Entry {
                model: model.to_string(),
                set_at: Utc::now() + chrono::Duration::seconds(i as i64),
            };
            full.sessions.insert(format!("cli:{i}"), entry);
        }
        std::fs::write(&store.path, serde_json::to_vec(&full).unwrap()).unwrap();
        store.set("cli:new", Some(&model)).unwrap();
        let file = store.load().unwrap();
        assert_eq!(file.sessions.len(), MAX_SESSIONS);
        assert!(
            !file.sessions.contains_key("telegram:1"),
            "the oldest gave way"
        );
        assert!(file.sessions.contains_key("cli:new"));
        store.set("cli:7", None).unwrap();
        assert_eq!(store.of(&s, "cli:7"), None);
    }

    #[test]
    fn the_file_is_read_once_and_kept_with_this_process_s_switches() {
        let dir = tempfile::tempdir().unwrap();
        let s = models();
        let store = SessionModels::new(dir.path());
        assert_eq!(store.of_known(&s, "cli:a"), None, "not read yet");
        let model = s.parse_model("t", "openai:gpt-4o").unwrap();
        SessionModels::new(dir.path())
            .set("cli:a", Some(&model))
            .unwrap();
        assert_eq!(store.of(&s, "cli:a"), Some(model.clone()));
        assert_eq!(store.of_known(&s, "cli:b"), Some(None));
        // Another process's later switch is not read again; this one's own switch is kept.
        SessionModels::new(dir.path())
            .set("cli:b", Some(&model))
            .unwrap();
        assert_eq!(store.of_known(&s, "cli:b"), Some(None));
        store.set("cli:a", None).unwrap();
        assert_eq!(store.of_known(&s, "cli:a"), Some(None));
        assert_eq!(
            store.of_known(&s, "cli:b"),
            Some(Some(model)),
            "written from the file"
        );
    }

    #[test]
    fn an_entry_that_no_longer_validates_uses_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let s = models();
        std::fs::write(
            dir.path().join("models.json"),
            r#"{"sessions": {"cli:a": {"model": "acme:x", "set_at": "2026-01-01T00:00:00Z"}}}"#,
        )
        .unwrap();
        assert_eq!(SessionModels::new(dir.path()).of(&s, "cli:a"), None);
        std::fs::write(dir.path().join("models.json"), "{").unwrap();
        assert_eq!(SessionModels::new(dir.path()).of(&s, "cli:a"), None);
        let err = SessionModels::new(dir.path())
            .set("cli:a", None)
            .unwrap_err();
        assert!(format!("{err:#}").contains("does not parse"), "{err:#}");
    }

    #[test]
    fn describe_names_the_source_and_the_chain() {
        let s = models();
        assert_eq!(
            describe(&s, None),
            "model: openrouter:qwen/qwen3-coder-next (BUB_MODEL in config.toml)\nfallbacks: openai:b"
        );
        let own = s.parse_model("t", "openai:b").unwrap();
        assert_eq!(
            describe(&s, Some(&own)),
            "model: openai:b (this session)\nfallbacks: none"
        );
    }
}
