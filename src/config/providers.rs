//! Known model providers and their default base URLs.
//!
//! `BUB_MODEL` is `provider:model`; the provider picks the base URL unless `BUB_API_BASE`
//! overrides it, in which case any provider name is accepted (any OpenAI-compatible server).
//! `anthropic` and `gemini` speak their own APIs ([`crate::llm::Api`]): their base URLs are
//! `BUB_ANTHROPIC_API_BASE` and `BUB_GEMINI_API_BASE`, defaulting to the ones here;
//! `BUB_API_BASE` does not apply to them.

/// Provider name (lowercase) → default base URL, without a trailing `/`.
pub(crate) const PROVIDERS: &[(&str, &str)] = &[
    ("anthropic", DEFAULT_ANTHROPIC_API_BASE),
    ("gemini", DEFAULT_GEMINI_API_BASE),
    ("openrouter", "https://openrouter.ai/api/v1"),
    ("openai", "https://api.openai.com/v1"),
    ("ollama", "http://localhost:11434/v1"),
    ("deepseek", "https://api.deepseek.com/v1"),
    ("groq", "https://api.groq.com/openai/v1"),
    ("together", "https://api.together.xyz/v1"),
    ("mistral", "https://api.mistral.ai/v1"),
    ("xai", "https://api.x.ai/v1"),
];

/// `BUB_ANTHROPIC_API_BASE` default.
pub(crate) const DEFAULT_ANTHROPIC_API_BASE: &str = "https://api.anthropic.com";
/// `BUB_GEMINI_API_BASE` default.
pub(crate) const DEFAULT_GEMINI_API_BASE: &str = "https://generativelanguage.googleapis.com";

/// The default base URL of a known provider (case-insensitive), `None` for an unknown one.
pub(crate) fn provider_base_url(provider: &str) -> Option<&'static str> {
    PROVIDERS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(provider))
        .map(|(_, url)| *url)
}

/// The known provider names, comma-separated, for error messages.
pub(crate) fn known_providers() -> String {
    PROVIDERS
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_case_insensitive() {
        assert_eq!(
            provider_base_url("OpenRouter"),
            Some("https://openrouter.ai/api/v1")
        );
        assert_eq!(
            provider_base_url("ollama"),
            Some("http://localhost:11434/v1")
        );
        assert_eq!(provider_base_url("nope"), None);
    }

    #[test]
    fn base_urls_have_no_trailing_slash() {
        for (name, url) in PROVIDERS {
            assert!(!url.ends_with('/'), "{name}");
            assert_eq!(name.to_ascii_lowercase(), *name);
        }
    }
}
