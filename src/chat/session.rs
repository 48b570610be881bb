//! [`SessionId`]: which conversation something belongs to — a platform chat (`telegram:42`,
//! `discord:555`) or another session (`cli`, a `--session-id` value, `telegram:42` typed by
//! hand included).
//!
//! A session id is its text: tapes are named after it, `jobs.json` and the inbox journal
//! store it, and two ids are the same session exactly when their texts are equal. Whether it
//! is a chat is read from that text, by one rule ([`SessionId::chat`]): `<channel>:<chat>`
//! where the channel is a platform of the configuration's variables table. So an id made
//! from a chat ([`SessionId::chat_of`]) and the same text parsed from a file are one session,
//! and a `--session-id foo:bar` is not a chat of a platform `foo`. Formatting and splitting
//! happen here and nowhere else.

use std::borrow::Borrow;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A session's id (see the module docs). Serialised as its text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// The session of chat `chat` of `channel`: `<channel>:<chat>`.
    pub fn chat_of(channel: &str, chat: &str) -> Self {
        Self(format!("{channel}:{chat}"))
    }

    /// The id as written (`telegram:42`, `cli`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The (channel, chat id) of a chat session: `<channel>:<chat>` where the channel is a
    /// chat platform; `None` for any other session (`cli`, `foo:bar`).
    pub fn chat(&self) -> Option<(&str, &str)> {
        let (channel, chat) = self.parts()?;
        crate::config::is_platform(channel).then_some((channel, chat))
    }

    /// The text before and after the first `:`, whatever the channel (`bub access explain`
    /// names the channels it knows); [`SessionId::chat`] is the chat of a platform.
    pub(crate) fn parts(&self) -> Option<(&str, &str)> {
        self.0.split_once(':')
    }

    /// The chat's folder of files in the workspace (`chats/telegram--100123`); `None` for a
    /// session that is not a chat.
    pub(crate) fn chat_folder(&self) -> Option<PathBuf> {
        let (channel, chat) = self.chat()?;
        Some(crate::access::files::chat_folder(channel, chat))
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for SessionId {
    fn from(id: &str) -> Self {
        Self(id.to_owned())
    }
}

impl From<String> for SessionId {
    fn from(id: String) -> Self {
        Self(id)
    }
}

impl Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for SessionId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SessionId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_session_is_a_platform_and_a_chat_and_formats_back_as_it_was() {
        let id = SessionId::chat_of("telegram", "-100123");
        assert_eq!(id.as_str(), "telegram:-100123");
        assert_eq!(id.chat(), Some(("telegram", "-100123")));
        assert_eq!(id, SessionId::from("telegram:-100123"), "one session");
        assert_eq!(
            SessionId::from("discord:9:x").chat(),
            Some(("discord", "9:x"))
        );
        for other in ["cli", "foo:bar", "", ":42"] {
            assert_eq!(SessionId::from(other).chat(), None, "{other}");
            assert_eq!(SessionId::from(other).to_string(), other);
        }
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"telegram:-100123\"");
        let back: SessionId = serde_json::from_str("\"cli\"").unwrap();
        assert_eq!(back, "cli");
    }

    #[test]
    fn chat_folders_come_from_the_session() {
        assert_eq!(
            SessionId::from("telegram:-100123").chat_folder().unwrap(),
            PathBuf::from("chats/telegram--100123")
        );
        assert_eq!(
            SessionId::from("discord:9/../x").chat_folder().unwrap(),
            PathBuf::from("chats/discord-9____x")
        );
        assert_eq!(SessionId::from("cli").chat_folder(), None);
    }
}
