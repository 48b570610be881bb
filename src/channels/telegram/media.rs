//! The files of Telegram messages: which one a message carries (read from the metadata JSON
//! [`super::prompt`] made of it) and its download through the Bot API — `getFile`, then
//! `<BUB_TELEGRAM_API_BASE>/file/bot<token>/<file_path>` — streamed to the caller's file and
//! capped. The token is in that URL: errors are scrubbed of it.

use anyhow::anyhow;
use futures_util::StreamExt;
use serde_json::Value;
use teloxide::net::Download;
use teloxide::prelude::*;
use teloxide::types::FileId;

use super::Telegram;
use crate::channels::{MediaFile, copy_capped};

/// The message types whose file Bub downloads (stickers are described only).
const DOWNLOADED: [&str; 6] = ["photo", "voice", "audio", "video", "video_note", "document"];

/// The file of a message's metadata (`type` and `media.file_id`, ...), if it has one.
pub(super) fn files(metadata: &Value) -> Vec<MediaFile> {
    let kind = metadata["type"].as_str().unwrap_or_default();
    let media = &metadata["media"];
    let (true, Some(id)) = (DOWNLOADED.contains(&kind), media["file_id"].as_str()) else {
        return Vec::new();
    };
    let text = |key: &str| media[key].as_str().map(str::to_owned);
    vec![MediaFile {
        kind: kind.to_owned(),
        source: id.to_owned(),
        name: text("file_name"),
        mime: text("mime_type"),
        size: media["file_size"].as_u64(),
        pointer: "/media".to_owned(),
    }]
}

impl Telegram {
    /// Downloads `file` (by its `file_id`) into `to`, at most `max_bytes`.
    pub(super) async fn fetch(
        &self,
        file: &MediaFile,
        to: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
        max_bytes: u64,
    ) -> anyhow::Result<u64> {
        let found = self
            .bot
            .get_file(FileId(file.source.clone()))
            .send()
            .await
            .map_err(|e| anyhow!("telegram: getFile failed: {}", self.redact(&e.to_string())))?;
        // teloxide fills in `u32::MAX` when Telegram leaves the size out.
        let size = u64::from(found.meta.size);
        if size != u64::from(u32::MAX) && size > max_bytes {
            anyhow::bail!(
                "the file is {size} bytes, over the {max_bytes}-byte limit (BUB_MEDIA_MAX_BYTES)"
            );
        }
        let body = self
            .bot
            .download_file_stream(&found.path)
            .map(|chunk| chunk.map_err(reqwest::Error::without_url));
        copy_capped(body, to, max_bytes)
            .await
            .map_err(|e| anyhow!("{}", self.redact(&format!("{e:#}"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_message_carries_its_file_unless_it_is_text_or_a_sticker() {
        let voice = json!({"type": "voice", "media": {"file_id": "v1", "duration": 3}});
        assert_eq!(
            files(&voice),
            [MediaFile {
                kind: "voice".into(),
                source: "v1".into(),
                name: None,
                mime: None,
                size: None,
                pointer: "/media".into(),
            }]
        );
        let doc = json!({"type": "document", "media": {"file_id": "d", "file_name": "r.pdf",
            "mime_type": "application/pdf", "file_size": 9}});
        let found = files(&doc);
        assert_eq!(found[0].name.as_deref(), Some("r.pdf"));
        assert_eq!((found[0].size, found[0].is_image()), (Some(9), false));
        assert!(files(&json!({"type": "sticker", "media": {"file_id": "s"}})).is_empty());
        assert!(files(&json!({"type": "text", "message": "hi"})).is_empty());
    }
}
