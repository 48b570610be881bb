//! [`TurnConfig`]: what a turn reads of the settings besides its tools' part
//! ([`crate::tools::ProcessCtx`]) — the loop's bounds, the system prompt, compaction, learning
//! and the files of chat messages — converted once when the runtime is built and shared by the
//! runtimes of every workspace.

use crate::config::{ModelConfig, Settings};
use crate::media::MediaConfig;

/// The settings of a turn (see the module docs).
pub(crate) struct TurnConfig {
    /// `BUB_MAX_STEPS`: model steps per turn.
    pub max_steps: u32,
    /// `BUB_TOOL_RESULT_MAX_CHARS`: a longer tool result reaches the model cut.
    pub tool_result_max_chars: usize,
    /// `BUB_CONTEXT_TOKENS` × `BUB_COMPACT_PERCENT` / 100: the tokens the context may fill
    /// before it is compacted.
    pub context_budget: u64,
    /// `BUB_SYSTEM_PROMPT`: the first block of the system prompt.
    pub system_prompt: String,
    /// `BUB_LEARN_MIN_STEPS` when `BUB_LEARN_SKILLS` is on: the tool calls an owner's turn
    /// needs for a learning call; `None`: no learning.
    pub learn_min_steps: Option<u32>,
    /// `BUB_MEDIA_*`, `BUB_VISION*`, `BUB_TRANSCRIBE_*`: a chat's files, images for the model.
    pub media: MediaConfig,
}

impl TurnConfig {
    /// `s`'s turn settings; transcription falls back to `models`' endpoint.
    pub(crate) fn from_settings(s: &Settings, models: &ModelConfig) -> Self {
        Self {
            max_steps: s.max_steps,
            tool_result_max_chars: s.tool_result_max_chars as usize,
            context_budget: u64::from(s.context_tokens) * u64::from(s.compact_percent) / 100,
            system_prompt: s.system_prompt.clone(),
            learn_min_steps: s.learn_skills.then_some(s.learn_min_steps),
            media: MediaConfig::new(&s.media, models),
        }
    }
}
