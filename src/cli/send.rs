//! `bub send`: one message to a chat from a script, through the daemon's outbound code (the
//! outbox: Markdown rendered, split, retried, the chat allow-lists), at most once per `--id`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use crate::access::Access;
use crate::cli::admin::UsageError;
use crate::config::Settings;
use crate::delivery::once::Once;
use crate::delivery::{Outbound, Outbox};
use crate::logging::{self, LogTarget};
use crate::terminal::safe_line;

/// `bub send CHANNEL CHAT_ID TEXT`: exit 0 sent (with `--id`: or sent before), 1 not
/// delivered (or the chat is not admitted), 2 bad channel, no token, or an `--id` used for
/// another message.
pub async fn send(
    settings: Settings,
    channel: &str,
    out: Outbound,
    id: Option<&str>,
) -> anyhow::Result<()> {
    logging::init(&settings, LogTarget::Stderr);
    let outbox = Outbox::new(Arc::new(Access::new(&settings)), Arc::new(settings));
    let channel = channel.to_lowercase();
    outbox.adapter(&channel)?;
    let Some(key) = id else {
        return outbox.send(&channel, &out).await;
    };
    if key.trim().is_empty() {
        return Err(UsageError("--id: the key is empty".into()).into());
    }
    match crate::delivery::once::send_once(&outbox, &channel, &out, key).await {
        Ok(Once::Sent) => Ok(()),
        Ok(Once::Before(at)) => {
            let at = at.map_or_else(String::new, |at| format!(" on {}", at.to_rfc3339()));
            eprintln!(
                "bub: --id {}: sent before{at}; not sent again",
                safe_line(key)
            );
            Ok(())
        }
        Err(e) => Err(match e.downcast::<crate::delivery::once::KeyReused>() {
            Ok(reused) => UsageError(safe_line(&reused.to_string()).into()).into(),
            Err(e) => e,
        }),
    }
}

/// The message `bub send` is asked to send (TEXT `-`: read from stdin).
pub fn outbound(
    chat_id: String,
    text: Option<&str>,
    reply_to: Option<String>,
    file: Option<PathBuf>,
) -> anyhow::Result<Outbound> {
    let text = match text {
        Some("-") => {
            let mut buf = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
                .context("cannot read the text from stdin")?;
            buf
        }
        text => text.unwrap_or_default().to_owned(),
    };
    if text.trim().is_empty() && file.is_none() {
        return Err(UsageError("TEXT: the message is empty".into()).into());
    }
    if let Some(file) = &file
        && !file.is_file()
    {
        return Err(UsageError(format!("--file {}: no such file", file.display())).into());
    }
    Ok(Outbound {
        chat_id,
        text,
        reply_to,
        file,
        edit: None,
    })
}
