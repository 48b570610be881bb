//! `BUB_MEDIA_*`, `BUB_VISION*`, `BUB_TRANSCRIBE_*`: what Bub does with the files a chat sends
//! (how large a file it downloads, whether images go to the model, which model transcribes
//! voice), and their loading.

use super::parse::{at_least, optional_text, optional_url, parse_list, parse_secret};
use super::sources::Layers;
use super::{ConfigError, MaskedUrl, Secret};

/// `BUB_MEDIA_MAX_BYTES` default: 20 MB, the Bot API's own download limit.
pub(crate) const DEFAULT_MEDIA_MAX_BYTES: u64 = 20 * 1024 * 1024;

/// Model-name patterns (case-insensitive substrings of the model id) known to accept images,
/// for `BUB_VISION=auto`; `BUB_VISION_MODELS` replaces the list.
pub(crate) const VISION_MODELS: &[&str] = &[
    "gpt-4o",
    "gpt-4.1",
    "gpt-4-turbo",
    "gpt-5",
    "o3",
    "o4-mini",
    "claude",
    "gemini",
    "gemma-3",
    "grok-4",
    "vision",
    "-vl",
    "vl-",
    "llava",
    "pixtral",
    "mistral-medium",
    "mistral-small-3",
    "llama-4",
    "minicpm-v",
    "qwen3-vl",
    "kimi-k2.5",
];

/// Whether images go to the model (`BUB_VISION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Vision {
    /// When the model's id matches a pattern of [`MediaSettings::vision_models`] (the default).
    #[default]
    Auto,
    On,
    Off,
}

/// What Bub does with the files of chat messages.
#[derive(Debug, Clone)]
pub struct MediaSettings {
    /// `BUB_MEDIA_MAX_BYTES` (default 20 MB; `0` downloads nothing): a larger file is described,
    /// not downloaded.
    pub max_bytes: u64,
    /// `BUB_VISION` (`auto`, `on`, `off`).
    pub vision: Vision,
    /// `BUB_VISION_MODELS`: the patterns of `auto` (default [`VISION_MODELS`]).
    pub vision_models: Vec<String>,
    /// `BUB_TRANSCRIBE_MODEL` (e.g. `whisper-1`); none: voice is saved, not transcribed.
    pub transcribe_model: Option<String>,
    /// `BUB_TRANSCRIBE_API_BASE`: the transcription endpoint's base URL (default: the model's).
    pub transcribe_api_base: Option<MaskedUrl>,
    /// `BUB_TRANSCRIBE_API_KEY` (default: the model's key).
    pub transcribe_api_key: Option<Secret>,
}

impl Default for MediaSettings {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MEDIA_MAX_BYTES,
            vision: Vision::Auto,
            vision_models: VISION_MODELS.iter().map(|p| (*p).to_owned()).collect(),
            transcribe_model: None,
            transcribe_api_base: None,
            transcribe_api_key: None,
        }
    }
}

impl MediaSettings {
    /// Whether images go to `model_id` as image parts.
    pub(crate) fn vision_for(&self, model_id: &str) -> bool {
        match self.vision {
            Vision::On => true,
            Vision::Off => false,
            Vision::Auto => {
                let id = model_id.to_lowercase();
                self.vision_models
                    .iter()
                    .any(|p| !p.trim().is_empty() && id.contains(&p.trim().to_lowercase()))
            }
        }
    }
}

/// Reads the media variables of `l` into `m`.
pub(crate) fn load(l: &Layers, m: &mut MediaSettings) -> Result<(), ConfigError> {
    l.set("BUB_MEDIA_MAX_BYTES", &mut m.max_bytes, |var, v| {
        Ok(at_least(0)(var, v)?.into())
    })?;
    l.set("BUB_VISION", &mut m.vision, parse_vision)?;
    l.set("BUB_VISION_MODELS", &mut m.vision_models, parse_list)?;
    l.set(
        "BUB_TRANSCRIBE_MODEL",
        &mut m.transcribe_model,
        optional_text,
    )?;
    l.set(
        "BUB_TRANSCRIBE_API_BASE",
        &mut m.transcribe_api_base,
        optional_url,
    )?;
    l.set(
        "BUB_TRANSCRIBE_API_KEY",
        &mut m.transcribe_api_key,
        parse_secret,
    )
}

fn parse_vision(var: &str, raw: &str) -> Result<Vision, ConfigError> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(Vision::Auto),
        "on" | "true" => Ok(Vision::On),
        "off" | "false" => Ok(Vision::Off),
        _ => Err(ConfigError::new(
            var,
            format!("invalid vision mode {raw:?} (expected auto, on or off)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_vision_follows_the_model_patterns() {
        let mut m = MediaSettings::default();
        assert!(m.vision_for("openai/gpt-4o-mini"));
        assert!(m.vision_for("qwen/qwen2.5-VL-72b-instruct"));
        assert!(!m.vision_for("qwen/qwen3-coder-next"));
        m.vision_models = vec!["coder".into()];
        assert!(m.vision_for("qwen/qwen3-coder-next"));
        m.vision = Vision::Off;
        assert!(!m.vision_for("gpt-4o"));
        m.vision = Vision::On;
        assert!(m.vision_for("anything"));
    }
}
