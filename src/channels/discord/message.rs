//! What Bub keeps of a Discord message ([`inbound`]): its sender (id, username, display
//! name), its content — the text of a comma command as a command, otherwise the text, else one
//! line per attachment or sticker — its attachments and stickers, the message it replies to,
//! and whether it is in a server or a DM. Pure functions over serenity's `Message`; no I/O.

use serde_json::{Map, json};
use serenity::model::channel::Message;

use crate::access::Role;
use crate::channels::{
    Attachment, AttachmentKind, ChatInfo, Content, Inbound, Platform, Quoted, Sender, Sticker,
};

/// Longest excerpt of the replied-to message, in characters.
pub(crate) const REPLY_EXCERPT_CHARS: usize = 100;

/// The message `msg` of a sender with `role`. `text` is the message text with a `<prefix>bub`
/// command prefix already removed (see `filter::Rules::strip_command`): a comma command when it
/// starts with `,`. Not addressed yet; answered with a reply.
pub(crate) fn inbound(msg: &Message, text: &str, role: Role) -> Inbound {
    let author = &msg.author;
    let name = msg
        .member
        .as_ref()
        .and_then(|m| m.nick.clone())
        .or_else(|| author.global_name.clone())
        .unwrap_or_else(|| author.name.clone());
    let sender = Sender {
        id: author.id.to_string(),
        username: Some(author.name.clone()),
        name: Some(name),
        role,
    };
    let mut platform = Map::new();
    platform.insert("date".into(), json!(epoch_seconds(msg)));
    if let Some(guild) = msg.guild_id {
        platform.insert("guild_id".into(), json!(guild.to_string()));
    }
    Inbound {
        content: Content::of(&content(msg, text)),
        attachments: attachments(msg),
        reply_to: msg.referenced_message.as_deref().map(quoted),
        chat: match msg.guild_id {
            Some(_) => ChatInfo::group(None),
            None => ChatInfo::private(),
        },
        reply: true,
        platform: Platform::new(platform),
        ..Inbound::new(
            "discord",
            &msg.channel_id.to_string(),
            &msg.id.to_string(),
            sender,
            "",
        )
    }
}

/// What the message is: `text`, `attachment`, `sticker` or `unknown`.
fn kind(msg: &Message, text: &str) -> &'static str {
    if !text.trim().is_empty() {
        "text"
    } else if !msg.attachments.is_empty() {
        "attachment"
    } else if !msg.sticker_items.is_empty() {
        "sticker"
    } else {
        "unknown"
    }
}

/// The content: the text, else one `[Attachment: name]` line per attachment, else one
/// `[Sticker: name]` line per sticker, else `[Unknown message type]`.
fn content(msg: &Message, text: &str) -> String {
    match kind(msg, text) {
        "text" => text.to_owned(),
        "attachment" => lines(
            msg.attachments
                .iter()
                .map(|a| format!("[Attachment: {}]", a.filename)),
        ),
        "sticker" => lines(
            msg.sticker_items
                .iter()
                .map(|s| format!("[Sticker: {}]", s.name)),
        ),
        _ => "[Unknown message type]".to_owned(),
    }
}

fn lines(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join("\n")
}

/// The send time as epoch seconds with millisecond precision.
fn epoch_seconds(msg: &Message) -> f64 {
    let millis = msg.timestamp.unix_timestamp_nanos() / 1_000_000;
    millis as f64 / 1000.0
}

/// The attachments (downloaded by their URL), then the stickers (described only).
fn attachments(msg: &Message) -> Vec<Attachment> {
    let files = msg.attachments.iter().map(|a| Attachment {
        name: Some(a.filename.clone()),
        mime: a.content_type.clone(),
        size: Some(u64::from(a.size)),
        ..Attachment::new(AttachmentKind::File, Some(a.url.clone()))
    });
    let stickers = msg.sticker_items.iter().map(|s| Attachment {
        name: Some(s.name.clone()),
        ..Attachment::new(AttachmentKind::Sticker(Box::<Sticker>::default()), None)
    });
    files.chain(stickers).collect()
}

/// The replied-to message: its author and its first [`REPLY_EXCERPT_CHARS`] characters.
fn quoted(reply: &Message) -> Quoted {
    Quoted {
        message_id: reply.id.to_string(),
        sender_id: Some(reply.author.id.to_string()),
        username: Some(reply.author.name.clone()),
        text: Some(reply.content.chars().take(REPLY_EXCERPT_CHARS).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn message(extra: Value) -> Message {
        let mut v = json!({"id":"1001","channel_id":"555","guild_id":"9",
            "author":{"id":"42","username":"alice","global_name":"Alice A"},"content":"hello",
            "timestamp":"2024-01-01T00:00:00.250000+00:00","tts":false,"mention_everyone":false,
            "mentions":[],"mention_roles":[],"attachments":[],"embeds":[],"pinned":false,"type":0});
        for (k, val) in extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    fn of(msg: &Message) -> Inbound {
        inbound(msg, &msg.content, Role::Guest)
    }

    #[test]
    fn a_text_message_is_its_sender_chat_and_text() {
        let m = of(&message(json!({})));
        assert_eq!(
            (
                m.channel.as_str(),
                m.chat_id.as_str(),
                m.message_id.as_str()
            ),
            ("discord", "555", "1001")
        );
        assert_eq!(m.content, Content::Text("hello".into()));
        assert_eq!(
            m.sender,
            Sender {
                id: "42".into(),
                username: Some("alice".into()),
                name: Some("Alice A".into()),
                role: Role::Guest,
            }
        );
        assert_eq!((m.chat, m.reply), (ChatInfo::group(None), true));
        assert_eq!(m.platform.fields()["date"], json!(1704067200.25));
        assert_eq!(m.platform.fields()["guild_id"], "9");
    }

    #[test]
    fn dm_has_no_guild_id_and_nick_wins_for_the_display_name() {
        let m = of(&message(
            json!({"guild_id": null, "author": {"id":"42","username":"alice"}}),
        ));
        assert_eq!(m.chat, ChatInfo::private());
        assert!(!m.platform.fields().contains_key("guild_id"));
        assert_eq!(m.sender.name.as_deref(), Some("alice"));
        let m = of(&message(json!({"member": {"roles": [], "nick": "Ali"}})));
        assert_eq!(m.sender.name.as_deref(), Some("Ali"));
    }

    #[test]
    fn comma_commands_are_commands() {
        let msg = message(json!({"content": ",help"}));
        assert_eq!(of(&msg).content, Content::Command(",help".into()));
        assert_eq!(
            inbound(&msg, " ,tape.info  ", Role::Owner).content,
            Content::Command(",tape.info".into())
        );
    }

    #[test]
    fn stripped_command_text_is_the_message() {
        let msg = message(json!({"content": "!bub do x"}));
        assert_eq!(
            inbound(&msg, "do x", Role::Owner).content,
            Content::Text("do x".into())
        );
    }

    #[test]
    fn attachments_and_stickers() {
        let msg = message(json!({"content": "", "attachments": [
            {"id":"5","filename":"a.png","size":10,"url":"https://cdn/a.png","proxy_url":"p",
             "content_type":"image/png"},
            {"id":"6","filename":"b.txt","size":3,"url":"https://cdn/b.txt","proxy_url":"p"}]}));
        let m = of(&msg);
        assert_eq!(
            m.content,
            Content::Text("[Attachment: a.png]\n[Attachment: b.txt]".into())
        );
        assert_eq!(
            m.attachments[0],
            Attachment {
                name: Some("a.png".into()),
                mime: Some("image/png".into()),
                size: Some(10),
                ..Attachment::new(AttachmentKind::File, Some("https://cdn/a.png".into()))
            }
        );
        assert!(m.attachments[0].is_image() && !m.attachments[1].is_image());
        assert_eq!(m.attachments[1].mime, None);

        let msg = message(json!({"content": "",
            "sticker_items": [{"id":"8","name":"wave","format_type":1}]}));
        let m = of(&msg);
        assert_eq!(m.content, Content::Text("[Sticker: wave]".into()));
        assert_eq!(
            m.attachments,
            [Attachment {
                name: Some("wave".into()),
                ..Attachment::new(AttachmentKind::Sticker(Box::default()), None)
            }]
        );

        let m = of(&message(json!({"content": ""})));
        assert_eq!(m.content, Content::Text("[Unknown message type]".into()));
        assert!(m.attachments.is_empty());
    }

    #[test]
    fn reply_context_is_truncated() {
        let long = "x".repeat(150);
        let referenced = message(json!({"id":"900","content": long,
            "author":{"id":"777","username":"bub","bot":true}}));
        let msg =
            message(json!({"referenced_message": serde_json::to_value(&referenced).unwrap()}));
        let r = of(&msg).reply_to.unwrap();
        assert_eq!(
            (
                r.message_id.as_str(),
                r.sender_id.as_deref(),
                r.username.as_deref()
            ),
            ("900", Some("777"), Some("bub"))
        );
        assert_eq!(r.text.unwrap().chars().count(), REPLY_EXCERPT_CHARS);
    }
}
