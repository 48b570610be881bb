//! The files of Discord messages: a message's attachments ([`super::message`] made them),
//! downloaded from their URL — only from Discord's CDN hosts or the host of a non-default
//! `BUB_DISCORD_API_BASE` (tests' fake), never from a URL elsewhere — streamed to the caller's
//! file and capped; and files sent to a channel as message attachments (multipart), at most
//! 10 MB.

use anyhow::anyhow;
use serenity::builder::CreateAttachment;

use super::Discord;
use crate::channels::{Attachment, copy_capped};

/// The hosts Discord serves attachments from.
const CDN_HOSTS: [&str; 2] = ["cdn.discordapp.com", "media.discordapp.net"];

impl Discord {
    /// Downloads the attachment at `file.source` into `to`, at most `max_bytes`.
    pub(super) async fn fetch(
        &self,
        file: &Attachment,
        to: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
        max_bytes: u64,
    ) -> anyhow::Result<u64> {
        let source = file.source.as_deref().unwrap_or_default();
        let url = reqwest::Url::parse(source)
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
