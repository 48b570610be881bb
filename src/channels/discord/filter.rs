//! Which Discord messages are ignored, and whether a message addresses the bot.
//!
//! Pure rules over ids and text, no I/O. The adapter applies them to every `MESSAGE_CREATE`:
//! first [`ignored`] and the admission gate ([`crate::access::Gate`]: the channel list, the
//! sender) — for **every** message, addressed or not, command or not (so neither follow-ups
//! nor `,commands` of users who are not allowed get through) — then the addressing rules. [`addressed`] covers the rules that need nothing but the message; the two
//! that need Discord lookups (a mention of one of the bot's roles, a thread named `bub…`) are
//! decided by the adapter with [`is_bub_thread`] and the bot's role list.

use crate::channels::contains_word;
use serenity::model::channel::{Message, MessageType};
use serenity::model::id::UserId;

/// The command word after the prefix (`!bub do x`) and the prefix of thread names (`bub-help`)
/// that address the bot.
pub(crate) const COMMAND_WORD: &str = "bub";

/// The addressing settings (`BUB_DISCORD_COMMAND_PREFIX`, `BUB_MENTION_KEYWORD`); channels and
/// senders are admitted by [`crate::access::Gate`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rules {
    /// Prefix of the `<prefix>bub` command (default `!`).
    pub command_prefix: String,
    /// Whole word that addresses the bot in guild channels (default `bub`; empty = none).
    pub keyword: String,
}

/// Why a message was dropped before reaching the session (logged with ids only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Written by a bot (including this one) or a webhook.
    BotAuthor,
    /// A system message (join, pin, thread created, ...), not something a person wrote.
    System,
    /// No text, attachment or sticker.
    Empty,
    /// The channel (and, for a thread, its parent) is not in `allow_channels`.
    Channel,
    /// The author is not admitted (not in `allow_from`, not paired, not an owner).
    Sender,
}

impl Skip {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Skip::BotAuthor => "bot_author",
            Skip::System => "system_message",
            Skip::Empty => "empty",
            Skip::Channel => "channel_not_allowed",
            Skip::Sender => "sender_not_allowed",
        }
    }
}

/// Why a message addresses the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Addressed {
    DirectMessage,
    UserMention,
    RoleMention,
    ReplyToBot,
    Command,
    Thread,
    Keyword,
}

impl Addressed {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Addressed::DirectMessage => "dm",
            Addressed::UserMention => "mention",
            Addressed::RoleMention => "role_mention",
            Addressed::ReplyToBot => "reply",
            Addressed::Command => "command",
            Addressed::Thread => "thread",
            Addressed::Keyword => "keyword",
        }
    }
}

impl Rules {
    /// For `<prefix>bub` (the word `bub` in any case, then whitespace or the end), the rest of
    /// the content without leading whitespace; `None` otherwise.
    pub(crate) fn strip_command<'a>(&self, content: &'a str) -> Option<&'a str> {
        let rest = content
            .trim_start()
            .strip_prefix(self.command_prefix.as_str())?;
        let word = rest.get(..COMMAND_WORD.len())?;
        if !word.eq_ignore_ascii_case(COMMAND_WORD) {
            return None;
        }
        let after = &rest[COMMAND_WORD.len()..];
        match after.chars().next() {
            None => Some(after),
            Some(c) if c.is_whitespace() => Some(after.trim_start()),
            Some(_) => None,
        }
    }

    /// The keyword occurs in `content` as a whole word, case-insensitively ("bubble" is not
    /// "bub"). An empty keyword never matches.
    pub(crate) fn mentions_keyword(&self, content: &str) -> bool {
        contains_word(content, &self.keyword)
    }
}

/// A thread whose own name starts with `bub` (any case) addresses the bot; the parent's name
/// does not matter.
pub(crate) fn is_bub_thread(name: &str) -> bool {
    name.get(..COMMAND_WORD.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(COMMAND_WORD))
}

/// Why a message should be dropped before the allow-lists are even consulted: bots, system
/// messages, empty messages.
pub(crate) fn ignored(msg: &Message) -> Option<Skip> {
    if msg.author.bot || msg.webhook_id.is_some() {
        return Some(Skip::BotAuthor);
    }
    if !matches!(msg.kind, MessageType::Regular | MessageType::InlineReply) {
        return Some(Skip::System);
    }
    if msg.content.trim().is_empty() && msg.attachments.is_empty() && msg.sticker_items.is_empty() {
        return Some(Skip::Empty);
    }
    None
}

/// The addressing rules that need nothing but the message: a DM, a mention of the bot user, a
/// reply to one of the bot's messages, the `<prefix>bub` command, the keyword. `None` means
/// "not by these rules" — the caller may still find a role mention or a `bub…` thread.
pub(crate) fn addressed(rules: &Rules, msg: &Message, bot: UserId) -> Option<Addressed> {
    if msg.guild_id.is_none() {
        return Some(Addressed::DirectMessage);
    }
    if msg.mentions.iter().any(|u| u.id == bot) {
        return Some(Addressed::UserMention);
    }
    if msg
        .referenced_message
        .as_ref()
        .is_some_and(|r| r.author.id == bot)
    {
        return Some(Addressed::ReplyToBot);
    }
    if rules.strip_command(&msg.content).is_some() {
        return Some(Addressed::Command);
    }
    if rules.mentions_keyword(&msg.content) {
        return Some(Addressed::Keyword);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn rules() -> Rules {
        Rules {
            command_prefix: "!".into(),
            keyword: "bub".into(),
        }
    }

    fn message(extra: Value) -> Message {
        let mut v = json!({"id":"1001","channel_id":"555","guild_id":"9",
            "author":{"id":"42","username":"alice"},"content":"hello",
            "timestamp":"2024-01-01T00:00:00.000000+00:00","tts":false,"mention_everyone":false,
            "mentions":[],"mention_roles":[],"attachments":[],"embeds":[],"pinned":false,"type":0});
        for (k, val) in extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    const BOT: UserId = UserId::new(777);

    #[test]
    fn keyword_is_a_whole_word_case_insensitive() {
        for yes in [
            "bub",
            "hey Bub!",
            "BUB, help",
            "(bub)",
            "ask bub.",
            "@bub hi",
            "hi\nbub",
        ] {
            assert!(contains_word(yes, "bub"), "{yes}");
        }
        for no in [
            "bubble", "bubs", "rebub", "bub_x", "x_bub", "bub2", "", "hello",
        ] {
            assert!(!contains_word(no, "bub"), "{no}");
        }
        assert!(contains_word("ask the Agent now", "agent"));
        assert!(!contains_word("bub", ""), "empty keyword never matches");
        assert!(
            contains_word("bubble bub", "bub"),
            "a later occurrence counts"
        );
        assert!(contains_word("héllo bub", "bub"));
        assert!(
            !contains_word("bubé", "bub"),
            "non-ASCII letters are word characters"
        );
    }

    #[test]
    fn command_prefix_is_stripped() {
        let r = rules();
        assert_eq!(r.strip_command("!bub do x"), Some("do x"));
        assert_eq!(r.strip_command("  !BUB   do x"), Some("do x"));
        assert_eq!(r.strip_command("!bub"), Some(""));
        assert_eq!(r.strip_command("!bub ,help"), Some(",help"));
        assert_eq!(r.strip_command("!bubble"), None);
        assert_eq!(r.strip_command("bub do x"), None);
        assert_eq!(r.strip_command("!bu"), None);
        assert_eq!(r.strip_command("!bü"), None, "no panic on char boundaries");
        let r = Rules {
            command_prefix: "$$".into(),
            ..rules()
        };
        assert_eq!(r.strip_command("$$bub go"), Some("go"));
        assert_eq!(r.strip_command("!bub go"), None);
    }

    #[test]
    fn bub_threads() {
        assert!(is_bub_thread("bub-help"));
        assert!(is_bub_thread("Bub questions"));
        assert!(!is_bub_thread("question-1"));
        assert!(!is_bub_thread("bu"));
        assert!(!is_bub_thread("ébub"));
    }

    #[test]
    fn addressing_without_lookups() {
        let r = rules();
        assert_eq!(addressed(&r, &message(json!({})), BOT), None);
        let dm = message(json!({"guild_id": null}));
        assert_eq!(addressed(&r, &dm, BOT), Some(Addressed::DirectMessage));
        let mention = message(json!({"mentions":[{"id":"777","username":"bub","bot":true}]}));
        assert_eq!(addressed(&r, &mention, BOT), Some(Addressed::UserMention));
        let other = message(json!({"mentions":[{"id":"5","username":"x"}]}));
        assert_eq!(addressed(&r, &other, BOT), None);
        let referenced = message(json!({"author":{"id":"777","username":"bub","bot":true}}));
        let reply =
            message(json!({"referenced_message": serde_json::to_value(&referenced).unwrap()}));
        assert_eq!(addressed(&r, &reply, BOT), Some(Addressed::ReplyToBot));
        let cmd = message(json!({"content":"!bub do x"}));
        assert_eq!(addressed(&r, &cmd, BOT), Some(Addressed::Command));
        let kw = message(json!({"content":"hey Bub, hi"}));
        assert_eq!(addressed(&r, &kw, BOT), Some(Addressed::Keyword));
        let bubble = message(json!({"content":"bubble tea"}));
        assert_eq!(addressed(&r, &bubble, BOT), None);
        let no_kw = Rules {
            keyword: String::new(),
            ..rules()
        };
        assert_eq!(
            addressed(&no_kw, &kw, BOT),
            None,
            "empty keyword disables it"
        );
    }

    #[test]
    fn bots_system_and_empty_messages_are_ignored() {
        assert_eq!(ignored(&message(json!({}))), None);
        let bot = message(json!({"author":{"id":"5","username":"x","bot":true}}));
        assert_eq!(ignored(&bot), Some(Skip::BotAuthor));
        let hook = message(json!({"webhook_id":"6"}));
        assert_eq!(ignored(&hook), Some(Skip::BotAuthor));
        assert_eq!(ignored(&message(json!({"type": 7}))), Some(Skip::System));
        assert_eq!(ignored(&message(json!({"type": 19}))), None, "inline reply");
        assert_eq!(
            ignored(&message(json!({"content":"  "}))),
            Some(Skip::Empty)
        );
        let sticker = message(json!({"content":"",
            "sticker_items":[{"id":"3","name":"wave","format_type":1}]}));
        assert_eq!(ignored(&sticker), None);
    }
}
