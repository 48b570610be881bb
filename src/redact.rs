//! The redactor: replaces every known secret value (Bub's keys and tokens, 8+ characters) with
//! `[redacted]` in whatever a tool returns, before it reaches the model, the tape, the chat or
//! the log — so `printenv`, `cat .env` or `/proc/self/environ` cannot leak them.
//!
//! One multi-pattern automaton (Aho–Corasick) built once per process from the settings; text
//! without a secret is returned without copying.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};

use crate::config::Settings;

/// Secrets shorter than this are not redacted (they would match ordinary text).
pub(crate) const MIN_SECRET_LEN: usize = 8;
/// What a secret is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// Replaces known secret values in text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    matcher: Option<AhoCorasick>,
}

impl Redactor {
    /// A redactor for these secret values (short and empty ones are ignored).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut patterns: Vec<String> = secrets
            .into_iter()
            .map(|s| s.as_ref().trim().to_owned())
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        patterns.sort();
        patterns.dedup();
        if patterns.is_empty() {
            return Self::default();
        }
        // Leftmost-longest: a secret that contains another is replaced whole.
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok();
        Self { matcher }
    }

    /// The redactor of Bub's own secrets (see [`Settings::secret_values`]).
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        Self::new(settings.secret_values())
    }

    /// `text` with every secret replaced; borrowed when there was none.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.matcher {
            Some(m) if m.is_match(text) => {
                Cow::Owned(m.replace_all(text, &vec![REDACTED; m.patterns_len()]))
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// Redacts `text` in place (no allocation when there is no secret in it).
    pub(crate) fn scrub(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_every_secret_and_ignores_short_ones() {
        let r = Redactor::new(["123456:ABCdefGHIjkl", "sk-live-abcdef", "short", ""]);
        let text = "TOKEN=123456:ABCdefGHIjkl\nKEY=sk-live-abcdef and again sk-live-abcdef; short";
        assert_eq!(
            r.redact(text),
            "TOKEN=[redacted]\nKEY=[redacted] and again [redacted]; short"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn overlapping_secrets_are_replaced_whole() {
        let r = Redactor::new(["abcdefgh", "abcdefgh-ijklmnop"]);
        assert_eq!(r.redact("x abcdefgh-ijklmnop y"), "x [redacted] y");
    }

    #[test]
    fn no_secrets_no_change() {
        let r = Redactor::default();
        let mut s = "anything".to_owned();
        r.scrub(&mut s);
        assert_eq!(s, "anything");
    }

    #[test]
    fn settings_secrets_include_url_passwords() {
        let mut s = Settings::with_defaults("/h".into(), "/w".into());
        s.telegram.token = Some("999:telegram-token-value".into());
        s.telegram.proxy = Some("http://user:proxy-password@proxy:3128".into());
        let r = Redactor::from_settings(&s);
        assert_eq!(
            r.redact("999:telegram-token-value proxy-password"),
            "[redacted] [redacted]"
        );
    }
}
