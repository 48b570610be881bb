//! The files of Discord messages: the attachments listed in the metadata JSON
//! [`super::prompt`] made of a message, downloaded from their URL — only from Discord's CDN
//! hosts or the host of a non-default `BUB_DISCORD_API_BASE` (tests' fake), never from a URL
//! elsewhere — streamed to the caller's file and capped; and files sent to a channel as
//! message attachments (multipart), at most 10 MB.

use anyhow::anyhow;
use serde_json::Value;
use serenity::builder::CreateAttachment;

use super::Discord;
use crate::channels::{MediaFile, copy_capped};

/// The hosts Discord serves attachments from.
const CDN_HOSTS: [&str; 2] = ["cdn.discordapp.com", "media.discordapp.net"];

/// The most attachments of one message that are downloaded.
const MAX_FILES: usize = 10;

/// The attachments of a message's metadata (`media.attachments`).
pub(super) fn files(metadata: &Value) -> Vec<MediaFile> {
    let Some(list) = metadata["media"]["attachments"].as_array() else {
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .take(MAX_FILES)
        .filter_map(|(i, a)| {
            let text = |key: &str| a[key].as_str().map(str::to_owned);
            Some(MediaFile {
                kind: "attachment".to_owned(),
                source: text("url")?,
                name: text("filename"),
                mime: text("content_type"),
                size: a["size"].as_u64(),
                pointer: format!("/media/attachments/{i}"),
            })
        })
        .collect()
}

impl Discord {
    /// Downloads the attachment at `file.source` into `to`, at most `max_bytes`.
    pub(super) async fn fetch(
        &self,
        file: &MediaFile,
        to: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
        max_bytes: u64,
    ) -> anyhow::Result<u64> {
        let url = reqwest::Url::parse(&file.source)
            .map_err(|_| anyhow!("discord: the attachment URL is not a URL"))?;
        if !self.serves_attachments(&url) {
            anyhow::bail!(
                "discord: attachments are downloaded only from Discord's CDN, not {}",
                url.host_str().unwrap_or("?")
            );
        }
        let response = self
            .client
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| {
                anyhow!(
                    "discord: the attachment download failed: {}",
                    e.without_url()
                )
            })?;
        if let Some(size) = response.content_length().filter(|s| *s > max_bytes) {
            anyhow::bail!(
                "the file is {size} bytes, over the {max_bytes}-byte limit (BUB_MEDIA_MAX_BYTES)"
            );
        }
        let body = response.bytes_stream();
        copy_capped(Box::pin(body), to, max_bytes).await
    }

    /// Whether `url` is on a host attachments come from: Discord's CDN over HTTPS, or the host
    /// and port of the configured (non-default) API base.
    fn serves_attachments(&self, url: &reqwest::Url) -> bool {
        let host = url.host_str().unwrap_or_default();
        if url.scheme() == "https" && CDN_HOSTS.contains(&host) {
            return true;
        }
        let base = self
            .api_base
            .as_deref()
            .and_then(|b| reqwest::Url::parse(b).ok());
        base.is_some_and(|b| {
            b.host_str() == Some(host) && b.port_or_known_default() == url.port_or_known_default()
        })
    }
}

/// The largest file uploaded (Discord's limit for servers without boosts).
pub(super) const MAX_UPLOAD_BYTES: u64 = 10 * 1024 * 1024;

/// The file at `path` as a message attachment, read whole (at most [`MAX_UPLOAD_BYTES`]).
pub(super) async fn attachment(path: &std::path::Path) -> anyhow::Result<CreateAttachment> {
    let size = tokio::fs::metadata(path)
        .await
        .map_err(|e| anyhow!("{}: {e}", path.display()))?
        .len();
    if size > MAX_UPLOAD_BYTES {
        anyhow::bail!(
            "discord: {} is {size} bytes; Discord takes at most 10 MB per upload",
            path.display()
        );
    }
    CreateAttachment::path(path)
        .await
        .map_err(|e| anyhow!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_attachment_is_a_file_with_its_place_in_the_metadata() {
        let metadata = json!({"media": {"attachments": [
            {"id": "1", "filename": "a.png", "content_type": "image/png", "size": 5,
             "url": "https://cdn.discordapp.com/attachments/1/2/a.png"},
            {"id": "2", "filename": "v.ogg", "url": "https://cdn.discordapp.com/attachments/1/3/v.ogg"}]}});
        let found = files(&metadata);
        assert_eq!(found.len(), 2);
        assert!(found[0].is_image() && !found[1].is_image());
        assert_eq!(found[1].pointer, "/media/attachments/1");
        assert!(files(&json!({"message": "hi"})).is_empty());
    }
}
