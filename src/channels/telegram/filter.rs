//! Whether a Telegram message addresses the bot, and its commands.
//!
//! Pure functions over teloxide's [`Message`], so every rule is unit-tested here without a
//! network. The adapter applies them in this order: sender present → the admission gate
//! ([`crate::access::Gate`]: chat list, sender) → commands ([`parse_command`]) →
//! [`is_addressed`].
//!
//! The keyword counts only as a whole word (`"bubble"` does not address the bot), and
//! `/bub@BotName text` is stripped like `/bub text`.

use crate::channels::{Control, contains_word};
use teloxide::types::{Message, MessageEntityKind};

/// The bot's own account, learned from `getMe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotIdentity {
    pub id: u64,
    /// Without the leading `@`.
    pub username: String,
}

/// A leading bot command of a text message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command<'a> {
    /// Not a command: a normal message.
    None,
    /// `/start` (or `/start@ThisBot`).
    Start,
    /// `/bub <rest>` (or `/bub@ThisBot <rest>`): the rest is the content and addresses the bot.
    Bub(&'a str),
    /// `/stop`, `/new`, `/status`: a chat control (see [`Control`]).
    Control(Control),
    /// `/model [provider:model]`: the comma command `,model` with the rest (owners only: the
    /// tool's policy refuses a guest).
    Model(&'a str),
    /// Any other command, a bare `/bub`, or a command for another bot: ignored.
    Ignored,
}

/// Parses a leading `/command[@bot]` of `text` (Telegram's syntax: 1–32 of `[A-Za-z0-9_]`).
/// Text that starts with `/` but is not a command (`/usr/bin is full`) is a normal message.
pub(crate) fn parse_command<'a>(text: &'a str, bot_username: &str) -> Command<'a> {
    let Some(after_slash) = text.strip_prefix('/') else {
        return Command::None;
    };
    let word_end = after_slash
        .find(char::is_whitespace)
        .unwrap_or(after_slash.len());
    let word = &after_slash[..word_end];
    let (name, target) = match word.split_once('@') {
        Some((name, target)) => (name, Some(target)),
        None => (word, None),
    };
    let is_ident = |s: &str| {
        !s.is_empty() && s.len() <= 32 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if !is_ident(name) || target.is_some_and(|t| !is_ident(t)) {
        return Command::None;
    }
    if target.is_some_and(|t| !t.eq_ignore_ascii_case(bot_username)) {
        return Command::Ignored;
    }
    let rest = after_slash[word_end..].trim_start();
    match name.to_ascii_lowercase().as_str() {
        "start" => Command::Start,
        "bub" if !rest.trim().is_empty() => Command::Bub(rest),
        "model" => Command::Model(rest.trim()),
        name => Control::named(name).map_or(Command::Ignored, Command::Control),
    }
}

/// Whether `msg` addresses the bot: always in a private chat; in a group or supergroup by a
/// `mention` entity `@username` (text or caption, case-insensitive), a `text_mention` entity of
/// the bot, a reply to one of the bot's messages, or `keyword` as a whole word
/// (case-insensitive; empty disables it).
/// Channel posts never address it.
pub(crate) fn is_addressed(msg: &Message, bot: &BotIdentity, keyword: &str) -> bool {
    if msg.chat.is_private() {
        return true;
    }
    if !(msg.chat.is_group() || msg.chat.is_supergroup()) {
        return false;
    }
    let replies_to_bot = msg
        .reply_to_message()
        .and_then(|r| r.from.as_ref())
        .is_some_and(|u| u.id.0 == bot.id);
    replies_to_bot || mentions_bot(msg, bot) || {
        let text = msg.text().or(msg.caption()).unwrap_or("");
        contains_word(text, keyword)
    }
}

/// A `mention`/`text_mention` entity (text or caption) naming the bot.
fn mentions_bot(msg: &Message, bot: &BotIdentity) -> bool {
    let handle = format!("@{}", bot.username);
    let mut entities = msg
        .parse_entities()
        .into_iter()
        .chain(msg.parse_caption_entities())
        .flatten();
    entities.any(|entity| match entity.kind() {
        MessageEntityKind::Mention => {
            !bot.username.is_empty() && entity.text().eq_ignore_ascii_case(&handle)
        }
        MessageEntityKind::TextMention { user } => user.id.0 == bot.id,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn bot() -> BotIdentity {
        BotIdentity {
            id: 777,
            username: "bub_test_bot".into(),
        }
    }

    fn msg(v: Value) -> Message {
        serde_json::from_str(&v.to_string()).expect("valid message")
    }

    fn group(extra: Value) -> Message {
        let mut m = json!({"message_id": 5, "date": 1700000000,
            "chat": {"id": -100, "type": "supergroup", "title": "G"},
            "from": {"id": 42, "is_bot": false, "first_name": "Alice"}});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        msg(m)
    }

    #[test]
    fn commands() {
        let me = "bub_test_bot";
        assert_eq!(parse_command("hello", me), Command::None);
        assert_eq!(parse_command("/start", me), Command::Start);
        assert_eq!(parse_command("/start@Bub_Test_Bot", me), Command::Start);
        assert_eq!(parse_command("/start@other_bot", me), Command::Ignored);
        assert_eq!(parse_command("/bub hi there", me), Command::Bub("hi there"));
        assert_eq!(
            parse_command("/bub@bub_test_bot  hi", me),
            Command::Bub("hi")
        );
        assert_eq!(parse_command("/bub@other_bot hi", me), Command::Ignored);
        assert_eq!(parse_command("/bub", me), Command::Ignored);
        assert_eq!(parse_command("/bub   ", me), Command::Ignored);
        assert_eq!(parse_command("/help", me), Command::Ignored);
        assert_eq!(parse_command("/model", me), Command::Model(""));
        assert_eq!(
            parse_command("/model@bub_test_bot  openai:gpt-4o ", me),
            Command::Model("openai:gpt-4o")
        );
        assert_eq!(parse_command("/bubble x", me), Command::Ignored);
        assert_eq!(parse_command("/usr/bin is full", me), Command::None);
        assert_eq!(parse_command("/ x", me), Command::None);
        assert_eq!(
            parse_command("/bub\nline two", me),
            Command::Bub("line two")
        );
    }

    #[test]
    fn whole_word_keyword() {
        assert!(contains_word("bub, hi", "bub"));
        assert!(contains_word("hey Bub!", "bub"));
        assert!(contains_word("BUB", "bub"));
        assert!(contains_word("bubble bub", "bub"));
        assert!(!contains_word("bubble", "bub"));
        assert!(!contains_word("hubbub", "bub"));
        assert!(!contains_word("bub_bot", "bub"));
        assert!(!contains_word("anything", ""));
        assert!(contains_word("héllo bub ü", "bub"));
        assert!(!contains_word("ébub", "bub"));
    }

    #[test]
    fn private_chat_is_always_addressed() {
        let m = msg(json!({"message_id": 1, "date": 1700000000,
            "chat": {"id": 42, "type": "private", "first_name": "A"},
            "from": {"id": 42, "is_bot": false, "first_name": "A"}, "text": "hello"}));
        assert!(is_addressed(&m, &bot(), "bub"));
    }

    #[test]
    fn group_needs_mention_reply_or_keyword() {
        let b = bot();
        assert!(!is_addressed(
            &group(json!({"text": "hello all"})),
            &b,
            "bub"
        ));
        assert!(!is_addressed(
            &group(json!({"text": "bubble tea"})),
            &b,
            "bub"
        ));
        assert!(is_addressed(&group(json!({"text": "hey Bub!"})), &b, "bub"));
        assert!(!is_addressed(&group(json!({"text": "hey bub"})), &b, ""));
        let mention = group(json!({"text": "hi @Bub_Test_Bot",
            "entities": [{"type": "mention", "offset": 3, "length": 13}]}));
        assert!(is_addressed(&mention, &b, ""));
        let other = group(json!({"text": "hi @other_bot",
            "entities": [{"type": "mention", "offset": 3, "length": 10}]}));
        assert!(!is_addressed(&other, &b, ""));
        let no_entity = group(json!({"text": "hi @bub_test_bot"}));
        assert!(
            !is_addressed(&no_entity, &b, ""),
            "mentions come as entities"
        );
        let text_mention = group(json!({"text": "hi Bub",
            "entities": [{"type": "text_mention", "offset": 3, "length": 3,
                "user": {"id": 777, "is_bot": true, "first_name": "Bub"}}]}));
        assert!(is_addressed(&text_mention, &b, ""));
        let reply = group(json!({"text": "thanks",
            "reply_to_message": {"message_id": 4, "date": 1700000000,
                "chat": {"id": -100, "type": "supergroup", "title": "G"},
                "from": {"id": 777, "is_bot": true, "first_name": "Bub"}, "text": "answer"}}));
        assert!(is_addressed(&reply, &b, ""));
        let reply_other = group(json!({"text": "thanks",
            "reply_to_message": {"message_id": 4, "date": 1700000000,
                "chat": {"id": -100, "type": "supergroup", "title": "G"},
                "from": {"id": 9, "is_bot": false, "first_name": "Eve"}, "text": "x"}}));
        assert!(!is_addressed(&reply_other, &b, ""));
    }

    #[test]
    fn caption_mentions_count() {
        let b = bot();
        let photo = json!([{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}]);
        let m = group(json!({"photo": photo, "caption": "look @bub_test_bot",
            "caption_entities": [{"type": "mention", "offset": 5, "length": 13}]}));
        assert!(is_addressed(&m, &b, ""));
        let m = group(json!({"photo": photo, "caption": "bub look"}));
        assert!(is_addressed(&m, &b, "bub"));
        let m = group(json!({"photo": photo}));
        assert!(!is_addressed(&m, &b, "bub"));
    }

    #[test]
    fn channel_posts_are_not_addressed() {
        let m = msg(json!({"message_id": 1, "date": 1700000000,
            "chat": {"id": -1001, "type": "channel", "title": "C"}, "text": "bub"}));
        assert!(!is_addressed(&m, &bot(), "bub"));
    }
}
