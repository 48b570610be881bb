//! What one model call cost in tokens, as each provider reports it, in one typed shape.
//!
//! Providers count differently: OpenAI-compatible `prompt_tokens` include the cached part
//! (`prompt_tokens_details.cached_tokens`, DeepSeek's `prompt_cache_hit_tokens`); Anthropic's
//! `input_tokens` exclude both the cache reads and the cache writes; Gemini's `promptTokenCount`
//! includes `cachedContentTokenCount`. [`Usage::input`] is always the whole prompt.

use serde_json::{Value, json};

/// The tokens of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens in all, cached ones included.
    pub input: u64,
    /// Of `input`, read from the provider's prompt cache.
    pub cache_read: u64,
    /// Of `input`, written to the provider's prompt cache (Anthropic bills these higher).
    pub cache_write: u64,
    /// Tokens of the answer (reasoning included).
    pub output: u64,
    /// Bub's estimate, because the provider reported nothing.
    pub estimated: bool,
}

fn count(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

impl Usage {
    /// `input + output`.
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// Input not served from the cache.
    pub fn uncached(&self) -> u64 {
        self.input.saturating_sub(self.cache_read)
    }

    /// An OpenAI-compatible `usage` object.
    pub(crate) fn from_openai(u: &Value) -> Option<Self> {
        u.get("prompt_tokens")?.as_u64()?;
        let cached = count(u, "/prompt_tokens_details/cached_tokens")
            .max(count(u, "/prompt_cache_hit_tokens"));
        Some(Self {
            input: count(u, "/prompt_tokens"),
            cache_read: cached,
            cache_write: 0,
            output: count(u, "/completion_tokens"),
            estimated: false,
        })
    }

    /// An Anthropic Messages `usage` object (`message_start` and `message_delta` carry parts
    /// of it: fields absent here are 0, and [`Self::merge`] keeps the larger count).
    pub(crate) fn from_anthropic(u: &Value) -> Option<Self> {
        if !u.is_object() {
            return None;
        }
        let (read, write) = (
            count(u, "/cache_read_input_tokens"),
            count(u, "/cache_creation_input_tokens"),
        );
        Some(Self {
            input: count(u, "/input_tokens") + read + write,
            cache_read: read,
            cache_write: write,
            output: count(u, "/output_tokens"),
            estimated: false,
        })
    }

    /// A Gemini `usageMetadata` object.
    pub(crate) fn from_gemini(u: &Value) -> Option<Self> {
        u.get("promptTokenCount")?.as_u64()?;
        Some(Self {
            input: count(u, "/promptTokenCount"),
            cache_read: count(u, "/cachedContentTokenCount"),
            cache_write: 0,
            output: count(u, "/candidatesTokenCount") + count(u, "/thoughtsTokenCount"),
            estimated: false,
        })
    }

    /// Two partial reports of one call combined, field by field the larger.
    pub(crate) fn merge(self, other: Self) -> Self {
        Self {
            input: self.input.max(other.input),
            cache_read: self.cache_read.max(other.cache_read),
            cache_write: self.cache_write.max(other.cache_write),
            output: self.output.max(other.output),
            estimated: self.estimated && other.estimated,
        }
    }

    /// Bub's estimate of a call the provider reported no usage for: what was sent (the
    /// messages and the tools, as the OpenAI-compatible body) and what came back (the text
    /// and the tool calls).
    pub fn estimated(request: &super::ChatRequest, response: &super::ChatResponse) -> Self {
        use super::estimate_tokens as tokens;
        let body = super::openai::RequestBody::new("", request, false);
        let input = tokens(&serde_json::to_string(&body).unwrap_or_default());
        let calls = response.tool_calls.iter();
        let output = tokens(response.content.as_deref().unwrap_or_default())
            + calls
                .map(|c| tokens(&c.name) + tokens(&c.arguments))
                .sum::<u64>();
        Self {
            input,
            output,
            estimated: true,
            ..Self::default()
        }
    }

    /// The form kept on the tape (`run` events): `total_tokens` included for readers that
    /// want only that.
    pub fn to_record(&self) -> Value {
        let mut v = json!({
            "input": self.input,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "output": self.output,
            "total_tokens": self.total(),
        });
        if self.estimated {
            v["estimated"] = json!(true);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_provider_counts_the_whole_prompt_as_input() {
        let openai = json!({"prompt_tokens": 100, "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 80}});
        let u = Usage::from_openai(&openai).unwrap();
        assert_eq!(
            (u.input, u.cache_read, u.output, u.uncached()),
            (100, 80, 7, 20)
        );
        let deepseek =
            json!({"prompt_tokens": 50, "completion_tokens": 1, "prompt_cache_hit_tokens": 40});
        assert_eq!(Usage::from_openai(&deepseek).unwrap().cache_read, 40);
        assert_eq!(Usage::from_openai(&json!({"total_tokens": 3})), None);

        let anthropic = json!({"input_tokens": 10, "cache_read_input_tokens": 70,
            "cache_creation_input_tokens": 20, "output_tokens": 5});
        let u = Usage::from_anthropic(&anthropic).unwrap();
        assert_eq!(
            (u.input, u.cache_read, u.cache_write, u.output),
            (100, 70, 20, 5)
        );

        let gemini = json!({"promptTokenCount": 90, "cachedContentTokenCount": 60,
            "candidatesTokenCount": 4, "thoughtsTokenCount": 2});
        let u = Usage::from_gemini(&gemini).unwrap();
        assert_eq!((u.input, u.cache_read, u.output), (90, 60, 6));
    }

    #[test]
    fn an_estimate_counts_what_was_sent_and_received() {
        let request = super::super::ChatRequest {
            messages: vec![super::super::ChatMessage::user("x".repeat(400))],
            tools: vec![json!({"name": "y".repeat(40)})].into(),
            max_tokens: 10,
        };
        let response = super::super::ChatResponse {
            content: Some("z".repeat(80)),
            ..Default::default()
        };
        let u = Usage::estimated(&request, &response);
        assert!(u.estimated);
        assert!(
            (100..=140).contains(&u.input),
            "the body's JSON around 440 bytes: {u:?}"
        );
        assert_eq!(u.output, 20);
    }

    #[test]
    fn the_record_keeps_every_count_and_merges_take_the_larger() {
        let u = Usage {
            input: 9,
            cache_read: 4,
            cache_write: 1,
            output: 2,
            estimated: true,
        };
        let record = u.to_record();
        assert_eq!(record["total_tokens"], 11);
        let fields = ["input", "cache_read", "cache_write", "output", "estimated"];
        let kept: Vec<&Value> = fields.iter().map(|f| &record[f]).collect();
        assert_eq!(
            kept,
            [&json!(9), &json!(4), &json!(1), &json!(2), &json!(true)]
        );
        let start = Usage {
            input: 9,
            ..Usage::default()
        };
        let delta = Usage {
            output: 3,
            ..Usage::default()
        };
        assert_eq!(start.merge(delta).total(), 12);
    }
}
