//! Media: what the files of chat messages become for a turn. Before a turn runs, every file its
//! messages carry ([`Attachment`]s with a source) is downloaded through the chat's adapter —
//! the one its session actor holds — streamed, at most `BUB_MEDIA_MAX_BYTES`, into the
//! workspace's `chats/<channel>-<chat>/` folder under a date-prefixed safe name; voice and
//! audio are transcribed when `BUB_TRANSCRIBE_MODEL` is set; images are listed for the model
//! ([`image`] turns them into image parts for vision models).
//!
//! What happened is written into the attachment: `saved` (the path, relative to the
//! workspace), `transcript`, or `note` (why a file was not downloaded or transcribed); the
//! prompt shows them. At most [`MAX_FILES`] files of one message are downloaded. Nothing
//! here fails a turn: a file that cannot be had is described instead.
//!
//! A file already saved (a turn run again after a restart) is not downloaded twice. The folder
//! comes from the session, never from the message, so a guest's files land only in their own
//! chat's folder.

pub(crate) mod image;
mod transcribe;

use std::path::{Path, PathBuf};

use crate::channels::{Attachment, Channel, Inbound, SessionId};
use crate::config::{MediaSettings, ModelConfig};
use transcribe::Transcriber;

/// What media reads of the settings, converted once for the process.
pub(crate) struct MediaConfig {
    /// `BUB_MEDIA_*`, `BUB_VISION*` (and the `BUB_TRANSCRIBE_*` they were loaded with).
    pub settings: MediaSettings,
    /// Where speech is transcribed (`BUB_TRANSCRIBE_MODEL` at `BUB_TRANSCRIBE_API_BASE` with
    /// `BUB_TRANSCRIBE_API_KEY`, else the chat model's OpenAI-compatible base and `BUB_API_KEY`),
    /// or the note a voice file gets instead.
    transcriber: Result<Transcriber, String>,
}

impl MediaConfig {
    /// The media settings, transcribed with `models`' endpoint unless they name their own.
    pub(crate) fn new(media: &MediaSettings, models: &ModelConfig) -> Self {
        Self {
            settings: media.clone(),
            transcriber: transcriber(media, models),
        }
    }
}

/// The transcription endpoint of `media`, falling back to the chat model's (`models`).
fn transcriber(media: &MediaSettings, models: &ModelConfig) -> Result<Transcriber, String> {
    let Some(model) = &media.transcribe_model else {
        return Err("not transcribed: no transcription model is set (BUB_TRANSCRIBE_MODEL)".into());
    };
    let provider = &models.model.provider;
    let base_url = match &media.transcribe_api_base {
        Some(base) => base.to_string(),
        // Anthropic's and Gemini's APIs have no `/audio/transcriptions`.
        None if crate::llm::Api::of(provider) != crate::llm::Api::OpenAi => {
            return Err(format!(
                "not transcribed: {provider} has no transcription endpoint; set BUB_TRANSCRIBE_API_BASE"
            ));
        }
        None => models.base_url_for(&models.model),
    };
    Ok(Transcriber {
        model: model.clone(),
        base_url,
        api_key: media
            .transcribe_api_key
            .as_ref()
            .or(models.api_key())
            .map(|k| k.expose().to_owned()),
        timeout: models.timeout,
    })
}

/// The most files of one message that are downloaded.
pub(crate) const MAX_FILES: usize = 10;

/// Handles the files of `messages` (a chat turn's batch in `session_id`, whose adapter is
/// `adapter`), writing what became of each into its attachment. Returns the saved images,
/// relative to the workspace. Messages without files cost nothing.
pub(crate) async fn prepare(
    config: &MediaConfig,
    workspace: &Path,
    adapter: &dyn Channel,
    session_id: &SessionId,
    messages: &mut [Inbound],
) -> Vec<String> {
    let mut images = Vec::new();
    let Some(folder) = session_id.chat_folder() else {
        return images;
    };
    let downloader = Downloader {
        config,
        workspace,
        adapter,
        folder: folder.to_string_lossy().into_owned(),
    };
    for message in messages {
        let message_id = message.message_id.clone();
        let files = message
            .attachments
            .iter_mut()
            .filter(|a| a.source.is_some())
            .take(MAX_FILES);
        for (n, file) in files.enumerate() {
            downloader.receive(&message_id, file, n).await;
            if let Some(saved) = &file.saved
                && file.is_image()
            {
                images.push(saved.clone());
            }
        }
    }
    images
}

/// Downloads one chat's files into its folder, through the chat's adapter.
struct Downloader<'a> {
    config: &'a MediaConfig,
    workspace: &'a Path,
    adapter: &'a dyn Channel,
    /// Relative to the workspace.
    folder: String,
}

impl Downloader<'_> {
    /// Saves file number `n` of message `message_id` (unless too large or already there),
    /// then transcribes it when it is speech; what became of it is written into `file`.
    async fn receive(&self, message_id: &str, file: &mut Attachment, n: usize) {
        let max = self.config.settings.max_bytes;
        if let Some(size) = file.size.filter(|s| *s > max) {
            file.note = Some(format!(
                "not downloaded: {} is over the {} limit (BUB_MEDIA_MAX_BYTES)",
                human_bytes(size),
                human_bytes(max)
            ));
            return;
        }
        let kind = file.kind.name();
        let relative = format!("{}/{}", self.folder, file_name(message_id, file, n));
        let path = self.workspace.join(&relative);
        if !is_saved(&path).await {
            if let Err(e) = self.download(file, &path, max).await {
                tracing::warn!(kind, error = %format!("{e:#}"), "media.download.error");
                file.note = Some(format!("not downloaded: {e:#}"));
                return;
            }
            tracing::info!(kind, path = %relative, "media.saved");
        }
        file.saved = Some(relative);
        if file.is_audio() {
            match self.transcribe(&path).await {
                Ok(text) => file.transcript = Some(text),
                Err(why) => file.note = Some(why),
            }
        }
    }

    /// Downloads `file` to `path` through a temporary file beside it (renamed when complete,
    /// removed on failure).
    async fn download(&self, file: &Attachment, path: &Path, max: u64) -> anyhow::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        tokio::fs::create_dir_all(dir).await?;
        let partial = partial_path(path);
        let mut out = tokio::fs::File::create(&partial).await?;
        let written = self.adapter.download(file, &mut out, max).await;
        drop(out);
        match written {
            Ok(_) => Ok(tokio::fs::rename(&partial, path).await?),
            Err(e) => {
                let _ = tokio::fs::remove_file(&partial).await;
                Err(e)
            }
        }
    }

    /// The transcript of the audio at `path`, or why there is none.
    async fn transcribe(&self, path: &Path) -> Result<String, String> {
        let transcriber = self.config.transcriber.as_ref().map_err(Clone::clone)?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        match transcriber.transcribe(path, &name).await {
            Ok(text) if !text.is_empty() => Ok(text),
            Ok(_) => Err("not transcribed: the transcription is empty".into()),
            Err(e) => {
                tracing::warn!(error = %e, "media.transcribe.error");
                Err(format!("not transcribed: {e}"))
            }
        }
    }
}

/// Whether a complete file is at `path` (a download is renamed there only when complete).
async fn is_saved(path: &Path) -> bool {
    tokio::fs::metadata(path)
        .await
        .is_ok_and(|m| m.is_file() && m.len() > 0)
}

/// `dir/name` → `dir/.name.part`.
fn partial_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.part"))
}

/// `2026-11-25-<message id>-<name>`: the sender's file name made safe, else the file's kind
/// with the extension its type suggests (`photo.jpg`, `voice.ogg`); file `n` of a message
/// with several gets `-<n>` before its name.
fn file_name(message_id: &str, file: &Attachment, n: usize) -> String {
    let date = chrono::Local::now().format("%Y-%m-%d");
    let id = match message_id {
        "" => "0".to_owned(),
        id => safe_name(id),
    };
    let name = file
        .name
        .as_deref()
        .map(safe_name)
        .filter(|n| !n.trim_matches(['.', '_']).is_empty())
        .unwrap_or_else(|| format!("{}{}", file.kind.name(), extension(file)));
    match n {
        0 => format!("{date}-{id}-{name}"),
        n => format!("{date}-{id}-{n}-{name}"),
    }
}

/// The extension a file of this kind and type gets when the sender gave no name.
fn extension(file: &Attachment) -> &'static str {
    let by_mime = match file.mime.as_deref().unwrap_or_default() {
        "image/png" => Some(".png"),
        "image/webp" => Some(".webp"),
        "image/gif" => Some(".gif"),
        "image/jpeg" => Some(".jpg"),
        "audio/mpeg" => Some(".mp3"),
        "audio/ogg" => Some(".ogg"),
        "audio/mp4" | "audio/x-m4a" => Some(".m4a"),
        "video/mp4" => Some(".mp4"),
        "application/pdf" => Some(".pdf"),
        _ => None,
    };
    by_mime.unwrap_or(match file.kind.name() {
        "photo" => ".jpg",
        "voice" => ".ogg",
        "audio" => ".mp3",
        "video" | "video_note" => ".mp4",
        _ => ".bin",
    })
}

/// `name` with every character but ASCII letters, digits, `.`, `-` and `_` replaced by `_`,
/// without leading dots, at most 80 characters (keeping the extension).
pub(crate) fn safe_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                true => c,
                false => '_',
            },
        )
        .collect();
    let clean = clean.trim_start_matches('.');
    if clean.len() <= 80 {
        return clean.to_owned();
    }
    let (stem, ext) = match clean.rsplit_once('.') {
        Some((stem, ext)) if ext.len() <= 10 => (stem, format!(".{ext}")),
        _ => (clean, String::new()),
    };
    format!("{}{ext}", &stem[..80 - ext.len()])
}

/// `20971520` → `20 MB`, `1536` → `1.5 KB`.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KB", "MB", "GB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    match value.fract() == 0.0 || unit == 0 {
        true => format!("{value:.0} {}", UNITS[unit]),
        false => format!("{value:.1} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::AttachmentKind;

    fn file(kind: AttachmentKind, name: Option<&str>, mime: Option<&str>) -> Attachment {
        Attachment {
            name: name.map(str::to_owned),
            mime: mime.map(str::to_owned),
            ..Attachment::new(kind, Some("x".into()))
        }
    }

    #[test]
    fn names_are_dated_safe_and_keep_their_extension() {
        let date = chrono::Local::now().format("%Y-%m-%d").to_string();
        let photo = AttachmentKind::Photo {
            width: 1,
            height: 1,
        };
        assert_eq!(
            file_name("11", &file(photo, None, None), 0),
            format!("{date}-11-photo.jpg")
        );
        let evil = file(AttachmentKind::Document, Some("../../etc/passwd"), None);
        assert_eq!(
            file_name("11", &evil, 0),
            format!("{date}-11-_.._etc_passwd")
        );
        let png = file(AttachmentKind::File, None, Some("image/png"));
        assert_eq!(
            file_name("9/9", &png, 2),
            format!("{date}-9_9-2-attachment.png")
        );
        let long = format!("{}.pdf", "a".repeat(200));
        let named = safe_name(&long);
        assert_eq!((named.len(), named.ends_with(".pdf")), (80, true));
        assert_eq!(safe_name("..hidden"), "hidden");
        assert_eq!(safe_name("报告.pdf"), "__.pdf");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(20 * 1024 * 1024), "20 MB");
        assert_eq!(human_bytes(1536), "1.5 KB");
        assert_eq!(human_bytes(12), "12 B");
    }
}
