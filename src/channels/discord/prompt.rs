//! What the session sees of a Discord message: the text of a comma command verbatim, otherwise
//! its metadata JSON (message, ids, sender, date, media, the replied-to message).
//!
//! Pure functions over serenity's `Message`; no I/O. The JSON keeps fixed field names and order
//! (tapes and the journal hold them) and drops null values:
//!
//! ```json
//! {"message": "...", "channel_id": "555", "message_id": 1001, "type": "text",
//!  "username": "alice", "full_name": "Alice", "sender_id": "42", "date": 1704067200.0,
//!  "guild_id": "9", "media": {...}, "reply_to_message": {...}}
//! ```

use serde_json::{Map, Value, json};
use serenity::model::channel::Message;

/// Longest excerpt of the replied-to message, in characters.
pub(crate) const REPLY_EXCERPT_CHARS: usize = 100;

/// The prompt for `msg`. `text` is the message text with a `<prefix>bub` command prefix already
/// removed (see `filter::Rules::strip_command`). A text starting with `,` is a comma command and
/// is returned as it is; anything else becomes the metadata JSON.
pub(crate) fn build(msg: &Message, text: &str) -> String {
    if text.trim_start().starts_with(',') {
        return text.trim().to_owned();
    }
    metadata(msg, text).to_string()
}

/// The message kind named in the JSON `type` field.
pub(crate) fn kind(msg: &Message, text: &str) -> &'static str {
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

/// The `message` field: the text, else one `[Attachment: name]` line per attachment, else one
/// `[Sticker: name]` line per sticker, else `[Unknown message type]`.
pub(crate) fn content(msg: &Message, text: &str) -> String {
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

/// The metadata JSON object (nulls dropped).
pub(crate) fn metadata(msg: &Message, text: &str) -> Value {
    let author = &msg.author;
    let full_name = msg
        .member
        .as_ref()
        .and_then(|m| m.nick.clone())
        .or_else(|| author.global_name.clone())
        .unwrap_or_else(|| author.name.clone());
    let mut out = Map::new();
    out.insert("message".into(), content(msg, text).into());
    out.insert("channel_id".into(), msg.channel_id.to_string().into());
    out.insert("message_id".into(), msg.id.get().into());
    out.insert("type".into(), kind(msg, text).into());
    out.insert("username".into(), author.name.clone().into());
    out.insert("full_name".into(), full_name.into());
    out.insert("sender_id".into(), author.id.to_string().into());
    out.insert("date".into(), epoch_seconds(msg).into());
    if let Some(guild) = msg.guild_id {
        out.insert("guild_id".into(), guild.to_string().into());
    }
    if let Some(media) = media(msg) {
        out.insert("media".into(), media);
    }
    if let Some(reply) = msg.referenced_message.as_deref() {
        out.insert("reply_to_message".into(), reply_to(reply));
    }
    drop_nulls(Value::Object(out))
}

/// The send time as epoch seconds with millisecond precision.
fn epoch_seconds(msg: &Message) -> f64 {
    let millis = msg.timestamp.unix_timestamp_nanos() / 1_000_000;
    millis as f64 / 1000.0
}

/// `{"attachments": [...]}` and/or `{"stickers": [...]}`; `None` when there are neither.
fn media(msg: &Message) -> Option<Value> {
    let mut media = Map::new();
    if !msg.attachments.is_empty() {
        let list = msg.attachments.iter().map(|a| {
            json!({"id": a.id.to_string(), "filename": a.filename, "content_type": a.content_type,
                   "size": a.size, "url": a.url})
        });
        media.insert("attachments".into(), list.collect());
    }
    if !msg.sticker_items.is_empty() {
        let list = msg
            .sticker_items
            .iter()
            .map(|s| json!({"id": s.id.to_string(), "name": s.name}));
        media.insert("stickers".into(), list.collect());
    }
    (!media.is_empty()).then_some(Value::Object(media))
}

/// The replied-to message: ids, author, and its first [`REPLY_EXCERPT_CHARS`] characters.
fn reply_to(reply: &Message) -> Value {
    let excerpt: String = reply.content.chars().take(REPLY_EXCERPT_CHARS).collect();
    json!({
        "message_id": reply.id.get(),
        "from_user_id": reply.author.id.to_string(),
        "from_username": reply.author.name,
        "from_is_bot": reply.author.bot,
        "text": excerpt,
    })
}

/// Removes null members of objects, recursively.
fn drop_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, drop_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(drop_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn parsed(msg: &Message) -> Value {
        serde_json::from_str(&build(msg, &msg.content)).unwrap()
    }

    #[test]
    fn text_message_metadata_in_reference_order() {
        let msg = message(json!({}));
        let prompt = build(&msg, &msg.content);
        assert!(
            prompt.starts_with("{\"message\":\"hello\",\"channel_id\":\"555\""),
            "{prompt}"
        );
        let v: Value = serde_json::from_str(&prompt).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "message",
                "channel_id",
                "message_id",
                "type",
                "username",
                "full_name",
                "sender_id",
                "date",
                "guild_id"
            ]
        );
        assert_eq!(v["message_id"], json!(1001));
        assert_eq!(v["type"], "text");
        assert_eq!(v["username"], "alice");
        assert_eq!(v["full_name"], "Alice A");
        assert_eq!(v["sender_id"], "42");
        assert_eq!(v["date"], json!(1704067200.25));
        assert_eq!(v["guild_id"], "9");
    }

    #[test]
    fn dm_has_no_guild_id_and_nick_wins_for_full_name() {
        let v = parsed(&message(
            json!({"guild_id": null, "author": {"id":"42","username":"alice"}}),
        ));
        assert!(v.get("guild_id").is_none());
        assert_eq!(v["full_name"], "alice");
        let v = parsed(&message(json!({"member": {"roles": [], "nick": "Ali"}})));
        assert_eq!(v["full_name"], "Ali");
    }

    #[test]
    fn comma_commands_are_verbatim() {
        let msg = message(json!({"content": ",help"}));
        assert_eq!(build(&msg, &msg.content), ",help");
        assert_eq!(build(&msg, " ,tape.info  "), ",tape.info");
    }

    #[test]
    fn stripped_command_text_is_the_message() {
        let msg = message(json!({"content": "!bub do x"}));
        let v: Value = serde_json::from_str(&build(&msg, "do x")).unwrap();
        assert_eq!(v["message"], "do x");
    }

    #[test]
    fn attachments_and_stickers() {
        let msg = message(json!({"content": "", "attachments": [
            {"id":"5","filename":"a.png","size":10,"url":"https://cdn/a.png","proxy_url":"p",
             "content_type":"image/png"},
            {"id":"6","filename":"b.txt","size":3,"url":"https://cdn/b.txt","proxy_url":"p"}]}));
        let v = parsed(&msg);
        assert_eq!(v["type"], "attachment");
        assert_eq!(v["message"], "[Attachment: a.png]\n[Attachment: b.txt]");
        assert_eq!(
            v["media"]["attachments"][0],
            json!({"id":"5","filename":"a.png","content_type":"image/png","size":10,
                   "url":"https://cdn/a.png"})
        );
        assert!(
            v["media"]["attachments"][1].get("content_type").is_none(),
            "null dropped"
        );

        let msg = message(json!({"content": "",
            "sticker_items": [{"id":"8","name":"wave","format_type":1}]}));
        let v = parsed(&msg);
        assert_eq!(v["type"], "sticker");
        assert_eq!(v["message"], "[Sticker: wave]");
        assert_eq!(
            v["media"],
            json!({"stickers": [{"id": "8", "name": "wave"}]})
        );

        let v = parsed(&message(json!({"content": ""})));
        assert_eq!(v["type"], "unknown");
        assert_eq!(v["message"], "[Unknown message type]");
        assert!(v.get("media").is_none());
    }

    #[test]
    fn reply_context_is_truncated() {
        let long = "x".repeat(150);
        let referenced = message(json!({"id":"900","content": long,
            "author":{"id":"777","username":"bub","bot":true}}));
        let msg =
            message(json!({"referenced_message": serde_json::to_value(&referenced).unwrap()}));
        let v = parsed(&msg);
        let r = &v["reply_to_message"];
        assert_eq!(r["message_id"], json!(900));
        assert_eq!(r["from_user_id"], "777");
        assert_eq!(r["from_username"], "bub");
        assert_eq!(r["from_is_bot"], true);
        assert_eq!(
            r["text"].as_str().unwrap().chars().count(),
            REPLY_EXCERPT_CHARS
        );
    }
}
