//! The files of Telegram messages: the download of the one a message carries (its attachment,
//! made by [`super::message`]) through the Bot API — `getFile`, then
//! `<BUB_TELEGRAM_API_BASE>/file/bot<token>/<file_path>` — streamed to the caller's file and
//! capped; and files sent to a chat, as a photo, voice note, audio or document by their type
//! (multipart `sendPhoto` / `sendVoice` / `sendAudio` / `sendDocument`), within the Bot API's
//! upload limits. The token is in every URL: errors are scrubbed of it.

use std::path::Path;

use anyhow::anyhow;
use futures_util::{FutureExt, StreamExt};
use teloxide::net::Download;
use teloxide::prelude::*;
use teloxide::types::{FileId, InputFile, MessageId, ParseMode, Recipient, ReplyParameters};

use super::Telegram;
use crate::channels::{Attachment, copy_capped, text};

/// The largest file a bot uploads (the Bot API's limit).
pub(super) const MAX_UPLOAD_BYTES: u64 = 50 * 1024 * 1024;

/// The largest photo Telegram takes as a photo; a larger image goes as a document.
const MAX_PHOTO_BYTES: u64 = 10 * 1024 * 1024;

/// The longest caption, in characters; a longer text is sent as messages before the file.
pub(super) const CAPTION_LIMIT: usize = 1024;

/// How a file is sent, by its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upload {
    Photo,
    Voice,
    Audio,
    Document,
}

impl Upload {
    /// By the file's extension (and size: a photo over 10 MB is a document).
    fn of(path: &Path, size: u64) -> Self {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "jpg" | "jpeg" | "png" | "webp" if size <= MAX_PHOTO_BYTES => Upload::Photo,
            "ogg" | "oga" | "opus" => Upload::Voice,
            "mp3" | "m4a" | "aac" | "flac" | "wav" => Upload::Audio,
            _ => Upload::Document,
        }
    }
}

impl Telegram {
    /// Downloads `file` (by its `file_id`) into `to`, at most `max_bytes`.
    pub(super) async fn fetch(
        &self,
        file: &Attachment,
        to: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
        max_bytes: u64,
    ) -> anyhow::Result<u64> {
        let id = file.source.clone().unwrap_or_default();
        let found = self
            .bot
            .get_file(FileId(id))
            .send()
            .await
            .map_err(|e| anyhow!("telegram: getFile failed: {}", self.describe(&e)))?;
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
            .map_err(|e| anyhow!("{}", super::redact(&format!("{e:#}"), &self.token)))
    }
}

impl Telegram {
    /// Sends the file at `path` to `to` with `caption` (Markdown; at most [`CAPTION_LIMIT`]
    /// characters — delivery sends a longer text first), as a reply to `reply_to`. Returns the
    /// sent message's id.
    pub(super) async fn send_file(
        &self,
        to: &Recipient,
        path: &Path,
        caption: &str,
        reply_to: Option<MessageId>,
    ) -> Result<Option<crate::chat::MessageId>, String> {
        let size = tokio::fs::metadata(path)
            .await
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        if size > MAX_UPLOAD_BYTES {
            return Err(format!(
                "{} is {size} bytes; bots upload at most 50 MB",
                path.display()
            ));
        }
        let upload = Upload::of(path, size);
        let html = text::telegram_html(caption);
        self.send_retrying(to, !html.trim().is_empty(), |formatted| {
            let file = InputFile::file(path.to_owned());
            let (text, mode) = match formatted {
                true => (html.clone(), Some(ParseMode::Html)),
                false => (caption.to_owned(), None),
            };
            let text = (!text.trim().is_empty()).then_some(text);
            let reply = reply_to.map(|id| ReplyParameters::new(id).allow_sending_without_reply());
            let to = to.clone();
            macro_rules! send {
                ($request:expr) => {{
                    let mut request = $request;
                    if let Some(text) = text {
                        request = request.caption(text);
                    }
                    if let Some(mode) = mode {
                        request = request.parse_mode(mode);
                    }
                    if let Some(reply) = reply {
                        request = request.reply_parameters(reply);
                    }
                    request.send().boxed()
                }};
            }
            match upload {
                Upload::Photo => send!(self.bot.send_photo(to, file)),
                Upload::Voice => send!(self.bot.send_voice(to, file)),
                Upload::Audio => send!(self.bot.send_audio(to, file)),
                Upload::Document => send!(self.bot.send_document(to, file)),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_goes_as_a_photo_voice_audio_or_document_by_its_type() {
        let of = |name: &str, size: u64| Upload::of(Path::new(name), size);
        assert_eq!(of("chart.PNG", 1000), Upload::Photo);
        assert_eq!(of("huge.jpg", MAX_PHOTO_BYTES + 1), Upload::Document);
        assert_eq!(of("note.ogg", 10), Upload::Voice);
        assert_eq!(of("song.mp3", 10), Upload::Audio);
        assert_eq!(of("report.pdf", 10), Upload::Document);
        assert_eq!(of("Makefile", 10), Upload::Document);
    }
}
