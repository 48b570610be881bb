//! Builders for the gateway payloads the fake dispatches: users and `MESSAGE_CREATE` messages
//! with the fields serenity requires (mentions, replies, attachments, stickers, nicks).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::{BOT_ID, BOT_NAME};

static NEXT_MESSAGE_ID: AtomicU64 = AtomicU64::new(10_000);

/// A user object (`bot: false`).
pub fn user(id: &str, name: &str) -> Value {
    json!({"id": id, "username": name, "global_name": null, "avatar": null, "bot": false})
}

/// The same with a global (display) name.
pub fn user_with_global_name(id: &str, name: &str, global_name: &str) -> Value {
    let mut u = user(id, name);
    u["global_name"] = json!(global_name);
    u
}

/// Another bot's user object.
pub fn other_bot(id: &str, name: &str) -> Value {
    let mut u = user(id, name);
    u["bot"] = json!(true);
    u
}

/// The fake's own bot user (777 "bub").
pub fn bot_user() -> Value {
    json!({"id": BOT_ID, "username": BOT_NAME, "global_name": null, "avatar": null,
           "bot": true, "discriminator": "0"})
}

/// A MESSAGE_CREATE payload with the fields serenity requires, built step by step. Ids are
/// unique per test binary unless set with [`Msg::id`].
#[derive(Debug, Clone)]
pub struct Msg(Value);

impl Msg {
    /// A message in a guild channel (with a `member` object, no nick).
    pub fn guild(guild_id: &str, channel_id: &str, author: Value, content: &str) -> Self {
        let mut m = Self::dm(channel_id, author, content);
        m.0["guild_id"] = json!(guild_id);
        m.0["member"] = json!({"roles": [], "joined_at": "2024-01-01T00:00:00.000000+00:00",
                               "deaf": false, "mute": false, "flags": 0, "nick": null});
        m
    }

    /// A direct message (no `guild_id`).
    pub fn dm(channel_id: &str, author: Value, content: &str) -> Self {
        let id = NEXT_MESSAGE_ID.fetch_add(1, Ordering::SeqCst).to_string();
        Self(json!({
            "id": id, "channel_id": channel_id, "author": author, "content": content,
            "timestamp": "2024-01-01T00:00:00.000000+00:00", "edited_timestamp": null,
            "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": false, "type": 0,
        }))
    }

    pub fn id(mut self, id: &str) -> Self {
        self.0["id"] = json!(id);
        self
    }

    /// The message id.
    pub fn message_id(&self) -> String {
        self.0["id"].as_str().unwrap_or_default().to_owned()
    }

    /// Adds `user` to `mentions` (the content is left as it is).
    pub fn mention(mut self, user: Value) -> Self {
        self.0["mentions"].as_array_mut().unwrap().push(user);
        self
    }

    /// Adds the bot user to `mentions`.
    pub fn mention_bot(self) -> Self {
        self.mention(bot_user())
    }

    /// Adds a role id to `mention_roles`.
    pub fn mention_role(mut self, role_id: &str) -> Self {
        self.0["mention_roles"]
            .as_array_mut()
            .unwrap()
            .push(json!(role_id));
        self
    }

    /// Makes this an inline reply to `referenced`.
    pub fn reply_to(mut self, referenced: &Msg) -> Self {
        let mut reference = json!({"message_id": referenced.0["id"],
                                   "channel_id": referenced.0["channel_id"]});
        if let Some(g) = referenced.0.get("guild_id") {
            reference["guild_id"] = g.clone();
        }
        self.0["type"] = json!(19);
        self.0["message_reference"] = reference;
        let mut inner = referenced.0.clone();
        if let Some(obj) = inner.as_object_mut() {
            obj.remove("member");
            obj.remove("referenced_message");
        }
        self.0["referenced_message"] = inner;
        self
    }

    /// Adds an attachment (`url` and `proxy_url` on a fake CDN that does not exist; see
    /// [`Msg::attachment_at`] for a downloadable one).
    pub fn attachment(
        self,
        id: &str,
        filename: &str,
        content_type: Option<&str>,
        size: u64,
    ) -> Self {
        let url = format!("https://cdn.example.invalid/attachments/{id}/{filename}");
        self.attachment_at(id, filename, content_type, size, &url)
    }

    /// Adds an attachment served at `url` (`url` and `proxy_url`), e.g. what
    /// `FakeDiscord::add_attachment` returned. `size` is what the message claims, whatever
    /// the URL serves.
    pub fn attachment_at(
        mut self,
        id: &str,
        filename: &str,
        content_type: Option<&str>,
        size: u64,
        url: &str,
    ) -> Self {
        let mut a = json!({"id": id, "filename": filename, "size": size, "url": url,
                           "proxy_url": url});
        if let Some(ct) = content_type {
            a["content_type"] = json!(ct);
        }
        self.0["attachments"].as_array_mut().unwrap().push(a);
        self
    }

    /// Adds a sticker item.
    pub fn sticker(mut self, id: &str, name: &str) -> Self {
        let list = self
            .0
            .as_object_mut()
            .unwrap()
            .entry("sticker_items")
            .or_insert(json!([]));
        list.as_array_mut()
            .unwrap()
            .push(json!({"id": id, "name": name, "format_type": 1}));
        self
    }

    /// Sets the author's guild nick (guild messages).
    pub fn nick(mut self, nick: &str) -> Self {
        self.0["member"]["nick"] = json!(nick);
        self
    }

    /// Sets any top-level field (escape hatch, e.g. `type`, `webhook_id`).
    pub fn set(mut self, key: &str, value: Value) -> Self {
        self.0[key] = value;
        self
    }

    pub fn json(&self) -> &Value {
        &self.0
    }
}

impl From<Msg> for Value {
    fn from(m: Msg) -> Value {
        m.0
    }
}
