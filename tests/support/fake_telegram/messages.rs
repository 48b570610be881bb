//! Builders for the incoming messages pushed into the fake Telegram: a private or group text
//! message, then entities (mentions), a reply context or media on top: `.photo(..)`,
//! `.document(..)`, `.voice(..)` with fixed file ids, or `.photo_file(..)`,
//! `.document_file(..)`, `.voice_file(..)`, `.audio_file(..)` naming the `file_id` (to pair
//! with `FakeTelegram::add_file`). Every result is a Bot API `Message` JSON that teloxide
//! deserializes.

use serde_json::{Value, json};

use super::{BOT_ID, BOT_USERNAME};

/// The bot's `User` object.
pub fn bot_user() -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": "Bub", "username": BOT_USERNAME})
}

/// A human `User` object (`first_name` "User<id>", username `user<id>`).
pub fn user(id: i64) -> Value {
    json!({"id": id, "is_bot": false, "first_name": format!("User{id}"),
        "username": format!("user{id}")})
}

/// An incoming message under construction; converts into its JSON with `.into()`.
#[derive(Debug, Clone)]
pub struct TgMessage(pub Value);

/// A text message in the private chat `chat_id` from user `user_id` (see [`user`]).
pub fn private_text(chat_id: i64, user_id: i64, text: &str) -> TgMessage {
    TgMessage(json!({"date": 1700000000,
        "chat": {"id": chat_id, "type": "private", "first_name": format!("User{user_id}")},
        "from": user(user_id), "text": text}))
}

/// A text message in the supergroup `chat_id` (use a negative id) from user `user_id`.
pub fn group_text(chat_id: i64, user_id: i64, text: &str) -> TgMessage {
    TgMessage(json!({"date": 1700000000,
        "chat": {"id": chat_id, "type": "supergroup", "title": "Test group"},
        "from": user(user_id), "text": text}))
}

impl TgMessage {
    /// Sets the message id (otherwise the fake assigns 1, 2, ...).
    pub fn id(mut self, message_id: i64) -> Self {
        self.0["message_id"] = json!(message_id);
        self
    }

    /// Replaces the sender.
    pub fn from(mut self, user: Value) -> Self {
        self.0["from"] = user;
        self
    }

    /// Removes the sender (channel-style message).
    pub fn without_sender(mut self) -> Self {
        self.0.as_object_mut().unwrap().remove("from");
        self
    }

    /// Adds an entity to `entities` (text) or `caption_entities` (media with a caption).
    /// `offset`/`length` are found by searching `covered` in the text (UTF-16 units).
    pub fn entity(mut self, kind: &str, covered: &str, extra: Value) -> Self {
        let (key, text_key) = if self.0.get("text").is_some() {
            ("entities", "text")
        } else {
            ("caption_entities", "caption")
        };
        let text = self.0[text_key].as_str().unwrap_or("").to_owned();
        let start = text
            .find(covered)
            .unwrap_or_else(|| panic!("entity text {covered:?} not in {text:?}"));
        let offset = text[..start].encode_utf16().count();
        let length = covered.encode_utf16().count();
        let mut entity = json!({"type": kind, "offset": offset, "length": length});
        if let Some(extra) = extra.as_object() {
            for (k, v) in extra {
                entity[k] = v.clone();
            }
        }
        let list = self
            .0
            .as_object_mut()
            .unwrap()
            .entry(key)
            .or_insert(json!([]));
        list.as_array_mut().unwrap().push(entity);
        self
    }

    /// A `mention` entity over `handle` (e.g. `"@bub_test_bot"`) in the text or caption.
    pub fn mention(self, handle: &str) -> Self {
        self.entity("mention", handle, Value::Null)
    }

    /// A `text_mention` entity over `covered`, naming `user`.
    pub fn text_mention(self, covered: &str, user: Value) -> Self {
        self.entity("text_mention", covered, json!({"user": user}))
    }

    /// Makes it a reply to message `message_id` written by `author` with `text`.
    pub fn reply_to(mut self, message_id: i64, author: Value, text: &str) -> Self {
        let chat = self.0["chat"].clone();
        self.0["reply_to_message"] = json!({"message_id": message_id, "date": 1699999999,
            "chat": chat, "from": author, "text": text});
        self
    }

    /// Turns it into a photo message (two sizes, the larger one last) with `caption`.
    pub fn photo(mut self, caption: Option<&str>) -> Self {
        self.take_text_as_caption(caption);
        self.0["photo"] = json!([
            {"file_id": "photo-small", "file_unique_id": "ps", "width": 90, "height": 60, "file_size": 1000},
            {"file_id": "photo-large", "file_unique_id": "pl", "width": 1280, "height": 853, "file_size": 90000}
        ]);
        self
    }

    /// Turns it into a document message.
    pub fn document(mut self, file_name: &str, mime_type: &str, caption: Option<&str>) -> Self {
        self.take_text_as_caption(caption);
        self.0["document"] = json!({"file_id": "doc-1", "file_unique_id": "d1",
            "file_name": file_name, "mime_type": mime_type, "file_size": 2048});
        self
    }

    /// Turns it into a voice message of `duration` seconds.
    pub fn voice(mut self, duration: u32) -> Self {
        self.take_text_as_caption(None);
        self.0["voice"] = json!({"file_id": "voice-1", "file_unique_id": "v1",
            "duration": duration, "mime_type": "audio/ogg", "file_size": 4096});
        self
    }

    /// Turns it into a photo message whose largest size (last) is `file_id` of `file_size`
    /// bytes, after two smaller sizes `<file_id>-small` and `<file_id>-medium`; with `caption`.
    /// Register the file with `FakeTelegram::add_file(file_id, ..)` to make it downloadable.
    pub fn photo_file(mut self, file_id: &str, file_size: u64, caption: Option<&str>) -> Self {
        self.take_text_as_caption(caption);
        let size = |id: String, width: u32, height: u32, file_size: u64| {
            json!({"file_id": id, "file_unique_id": format!("u-{id}"), "width": width,
                "height": height, "file_size": file_size})
        };
        self.0["photo"] = json!([
            size(format!("{file_id}-small"), 90, 60, (file_size / 100).max(1)),
            size(
                format!("{file_id}-medium"),
                320,
                213,
                (file_size / 10).max(1)
            ),
            size(file_id.to_owned(), 1280, 853, file_size),
        ]);
        self
    }

    /// Turns it into a document message of `file_id` (`file_name`, `mime_type`, `file_size`
    /// bytes) with `caption`.
    pub fn document_file(
        mut self,
        file_id: &str,
        file_name: &str,
        mime_type: &str,
        file_size: u64,
        caption: Option<&str>,
    ) -> Self {
        self.take_text_as_caption(caption);
        self.0["document"] = json!({"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
            "file_name": file_name, "mime_type": mime_type, "file_size": file_size});
        self
    }

    /// Turns it into a voice message of `file_id` (`duration` seconds, `audio/ogg`,
    /// `file_size` bytes).
    pub fn voice_file(mut self, file_id: &str, duration: u32, file_size: u64) -> Self {
        self.take_text_as_caption(None);
        self.0["voice"] = json!({"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
            "duration": duration, "mime_type": "audio/ogg", "file_size": file_size});
        self
    }

    /// Turns it into an audio (music) message of `file_id` (`duration` seconds, `audio/mpeg`,
    /// `file_size` bytes, named `<file_id>.mp3`). teloxide needs the `mime_type` to parse it.
    pub fn audio_file(mut self, file_id: &str, duration: u32, file_size: u64) -> Self {
        self.take_text_as_caption(None);
        self.0["audio"] = json!({"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
            "duration": duration, "mime_type": "audio/mpeg", "file_size": file_size,
            "file_name": format!("{file_id}.mp3")});
        self
    }

    fn take_text_as_caption(&mut self, caption: Option<&str>) {
        let obj = self.0.as_object_mut().unwrap();
        obj.remove("text");
        obj.remove("entities");
        if let Some(caption) = caption {
            obj.insert("caption".into(), json!(caption));
        }
    }
}

impl From<TgMessage> for Value {
    fn from(message: TgMessage) -> Self {
        message.0
    }
}
