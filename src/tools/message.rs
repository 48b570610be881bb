//! `message.send`: the agent sends a message — text, a file, or both — to a chat itself: the
//! current one by default, or any chat of a configured channel, through the same outbound code
//! as the daemon's answers. A guest's file must be inside the workspace (the registry checks
//! the `file` argument like any path).
//!
//! In a daemon's chat turn every send is recorded on the turn's ledger
//! ([`crate::delivery::SendLedger`]): when a restart interrupted the turn and it runs again, a
//! send the platform had accepted is not made again — the model is told it was "already sent
//! before a restart" — and one it had not accepted is sent (from its first part not accepted).

use std::sync::atomic::Ordering;

use schemars::JsonSchema;
use serde::Deserialize;

use super::fs::PathUse;
use super::registry::Reach;
use super::{Tool, ToolContext, ToolError};
use crate::channels::Outbound;
use crate::delivery::Sent;

#[derive(Deserialize, JsonSchema)]
struct SendArgs {
    /// Markdown text (a file's caption)
    #[serde(default)]
    text: String,
    /// a workspace file to send
    file: Option<String>,
    /// telegram or discord (default: this chat's)
    channel: Option<String>,
    /// default: this chat
    chat_id: Option<String>,
    /// message id to reply to
    reply_to: Option<String>,
}

async fn send(args: SendArgs, ctx: ToolContext) -> Result<String, ToolError> {
    let file = args
        .file
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty());
    if args.text.trim().is_empty() && file.is_none() {
        return Err(ToolError::invalid("give a text, a file or both"));
    }
    let file = match file {
        Some(raw) => Some(existing_file(&ctx, raw).await?),
        None => None,
    };
    let current = ctx.session_chat();
    let channel = args
        .channel
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .or(current.map(|(c, _)| c))
        .ok_or_else(|| {
            ToolError::new(format!(
                "this session ({}) is not a chat: give channel ({}) and chat_id",
                ctx.session_id(),
                crate::delivery::platform_names()
            ))
        })?
        .to_lowercase();
    let chat_id = match args
        .chat_id
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        Some(chat) => chat.to_owned(),
        None => match current {
            Some((c, chat)) if c == channel => chat.to_owned(),
            _ => {
                return Err(ToolError::invalid(
                    "chat_id is required for another channel",
                ));
            }
        },
    };
    let out = Outbound {
        chat_id: chat_id.clone(),
        text: args.text,
        reply_to: args.reply_to.filter(|r| !r.trim().is_empty()),
        file,
        edit: None,
    };
    let outbox = &ctx.process.outbox;
    let sent = match &ctx.turn.sends {
        Some(ledger) => ledger.send(outbox, &channel, &out).await,
        None => outbox.send(&channel, &out).await.map(|()| Sent::Now),
    }
    .map_err(|e| ToolError::new(format!("{e:#}")))?;
    if current == Some((channel.as_str(), chat_id.as_str())) {
        ctx.turn.answered.store(true, Ordering::Relaxed);
    }
    Ok(match sent {
        Sent::Now => format!("sent to {channel}:{chat_id}"),
        Sent::Before => format!(
            "already sent to {channel}:{chat_id} before a restart interrupted this turn: not sent again"
        ),
    })
}

/// The regular file `raw` names (relative to the workspace), checked on the blocking pool.
async fn existing_file(ctx: &ToolContext, raw: &str) -> Result<std::path::PathBuf, ToolError> {
    let path = super::fs::resolve_path(ctx.workspace(), raw);
    let checked = path.clone();
    let meta = tokio::task::spawn_blocking(move || std::fs::metadata(&checked))
        .await
        .map_err(|e| ToolError::new(e.to_string()))?;
    match meta {
        Ok(meta) if meta.is_file() => Ok(path),
        Ok(_) => Err(ToolError::invalid(format!("{raw}: not a file"))),
        Err(e) => Err(ToolError::invalid(format!("{raw}: {e}"))),
    }
}

/// The messaging tool.
pub(crate) fn tools() -> Vec<Tool> {
    vec![Tool::reaching(
        "message.send",
        "Send a message to a chat",
        "Sends `text` (Markdown) to a chat: by default the chat of this session; `channel` \
         (telegram or discord) and `chat_id` address any other chat, `reply_to` replies to a \
         message id. `file` (a path in the workspace) sends a file with the text as its \
         caption: an image as a photo, .ogg/.opus as a voice note, .mp3/.m4a as audio, anything \
         else as a document (Telegram: at most 50 MB; Discord: 10 MB). \
         Long texts are split and formatting falls back to plain text as needed. \
         When you answer this session's chat this way, the framework does not post your final \
         reply again — so do not repeat it.",
        |a: &SendArgs| Reach {
            chat: Some((a.channel.as_deref(), a.chat_id.as_deref())),
            ..Reach::path(a.file.as_deref(), PathUse::Send)
        },
        send,
    )]
}
