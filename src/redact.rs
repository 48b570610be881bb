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
/// The bytes [`Redactor::found_in`] reads at a time.
const CHUNK: usize = 64 * 1024;
/// What a secret is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// Replaces known secret values in text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    matcher: Option<AhoCorasick>,
    /// The longest secret's length in bytes.
    longest: usize,
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
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        Self { matcher, longest }
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

    /// Whether one of the secrets occurs in `bytes`.
    pub(crate) fn found(&self, bytes: &[u8]) -> bool {
        self.matcher.as_ref().is_some_and(|m| m.is_match(bytes))
    }

    /// Whether one of the secrets occurs in what `reader` yields, read in 64 KiB chunks (a
    /// secret across two chunks is found: each chunk is searched with the end of the one
    /// before it).
    pub(crate) fn found_in(&self, mut reader: impl std::io::Read) -> std::io::Result<bool> {
        if self.matcher.is_none() {
            return Ok(false);
        }
        let keep = self.longest.saturating_sub(1);
        let mut window = Vec::with_capacity(keep + CHUNK);
        let mut chunk = vec![0; CHUNK];
        loop {
            let n = match reader.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            window.extend_from_slice(&chunk[..n]);
            if self.found(&window) {
                return Ok(true);
            }
            let drop = window.len().saturating_sub(keep);
            window.drain(..drop);
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
    fn finds_secrets_in_a_stream_also_across_chunks() {
        let r = Redactor::new(["sk-secret-value-1234"]);
        let mut text = vec![b'x'; CHUNK - 5];
        text.extend_from_slice(b"sk-secret-value-1234 and more");
        assert!(r.found_in(text.as_slice()).unwrap());
        assert!(!r.found_in(&vec![b'x'; 3 * CHUNK][..]).unwrap());
        assert!(
            !Redactor::default()
                .found_in(&b"sk-secret-value-1234"[..])
                .unwrap()
        );
        assert!(r.found(b"..sk-secret-value-1234.."));
    }

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
        s.channel_mut("telegram").token = Some("999:telegram-token-value".into());
        s.channel_mut("telegram").proxy = Some("http://user:proxy-password@proxy:3128".into());
        let r = Redactor::from_settings(&s);
        assert_eq!(
            r.redact("999:telegram-token-value proxy-password"),
            "[redacted] [redacted]"
        );
    }
}
