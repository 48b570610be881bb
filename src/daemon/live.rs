//! A turn's answer shown live in its chat (`BUB_STREAM=edits`). The first text the turn writes
//! is posted as a message; later text replaces it — at most once per [`LIVE_INTERVAL`], always
//! the newest (a `watch` channel keeps one value, so a slow platform sees fewer, never stale,
//! edits), with what runs as a status line under it. A platform asking to wait (429) is waited
//! out by the adapter, and the interval counts from when that edit ended. When the turn ends,
//! the message's id goes with the answer: its delivery replaces the live text with the final
//! one (split as usual), so the status line is gone and nothing is posted twice.
//!
//! A restart must not leave a stale partial message beside a second answer either: the id is
//! handed to `posted` the moment the platform returns it (the session records it in the inbox),
//! and a turn run again after a restart starts from that message (`earlier`): it is edited,
//! not posted anew.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::channels::{Channel, ChatId, Live, LiveSender, MessageId};
use crate::delivery;

/// The least time between two posts or edits of one chat's live answer.
pub(crate) const LIVE_INTERVAL: Duration = Duration::from_secs(1);

/// The live message of one running turn.
pub(crate) struct LiveAnswer {
    tx: LiveSender,
    task: JoinHandle<Option<Shown>>,
    stop: CancellationToken,
}

/// What the live message shows when the turn ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The message's id.
    pub id: String,
    /// Its text without the status line.
    pub text: String,
    /// When it was last posted or edited.
    at: Instant,
}

impl LiveAnswer {
    /// Starts showing the answer of a turn in `chat_id`: in the message `earlier` (posted by an
    /// interrupted attempt of the turn), else in a new one, replying to `reply_to`, whose id is
    /// given to `posted` as soon as the platform returns it.
    pub(crate) fn start(
        channel: Arc<dyn Channel>,
        chat_id: &str,
        reply_to: Option<String>,
        earlier: Option<String>,
        posted: impl FnOnce(&str) + Send + 'static,
    ) -> Self {
        let (tx, rx) = watch::channel(Live::default());
        let stop = CancellationToken::new();
        let message = Message {
            chat_id: chat_id.to_owned(),
            reply_to,
            earlier,
            posted: Box::new(posted),
        };
        let task = tokio::spawn(show(channel, message, rx, stop.clone()));
        Self { tx, task, stop }
    }

    /// Where the turn writes its answer.
    pub(crate) fn sender(&self) -> LiveSender {
        self.tx.clone()
    }

    /// Stops showing (an edit in flight is dropped: the delivery edits anyway; a post in
    /// flight is awaited, for its id). The live message, if one was posted — returned once
    /// [`LIVE_INTERVAL`] has passed since its last change, so the delivery's edit keeps the pace.
    pub(crate) async fn finish(self) -> Option<Shown> {
        self.stop.cancel();
        let shown = self.task.await.ok().flatten()?;
        tokio::time::sleep_until(shown.at + LIVE_INTERVAL).await;
        Some(shown)
    }
}

/// Where the live message goes: its chat, what the first post replies to, the message an
/// earlier attempt posted, and who is told the id of a new post.
struct Message {
    chat_id: String,
    reply_to: Option<String>,
    earlier: Option<String>,
    posted: Box<dyn FnOnce(&str) + Send>,
}

/// The live message's text: the answer, then the status line in italics.
fn render(live: &Live) -> String {
    match &live.status {
        Some(status) if live.text.trim().is_empty() => format!("_{status}_"),
        Some(status) => format!("{}\n\n_{status}_", live.text.trim_end()),
        None => live.text.clone(),
    }
}

/// Posts, then edits, the live message until `stop`; returns what it shows.
async fn show(
    channel: Arc<dyn Channel>,
    message: Message,
    mut rx: watch::Receiver<Live>,
    stop: CancellationToken,
) -> Option<Shown> {
    let Message {
        chat_id,
        reply_to,
        earlier,
        posted,
    } = message;
    let mut posted = Some(posted);
    let chat = ChatId(chat_id.clone());
    let mut shown: Option<Shown> = earlier.map(|id| Shown {
        id,
        text: String::new(),
        at: Instant::now(),
    });
    let mut rendered = String::new();
    let mut last: Option<Instant> = None;
    loop {
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { break },
            () = stop.cancelled() => break,
        }
        if let Some(at) = last {
            tokio::select! {
                () = tokio::time::sleep_until(at + LIVE_INTERVAL) => {}
                () = stop.cancelled() => break,
            }
        }
        let live = rx.borrow_and_update().clone();
        let text = render(&live);
        if text.trim().is_empty() || text == rendered {
            continue;
        }
        let done = match &shown {
            None => match delivery::post_live(
                channel.as_ref(),
                &chat,
                &text,
                reply_to.clone().map(MessageId),
            )
            .await
            {
                Ok(Some(id)) => {
                    if let Some(posted) = posted.take() {
                        posted(&id.0);
                    }
                    shown = Some(Shown {
                        id: id.0,
                        text: String::new(),
                        at: Instant::now(),
                    });
                    Ok(())
                }
                // The channel cannot edit messages: nothing is shown live.
                Ok(None) => return None,
                Err(e) => Err(e),
            },
            Some(message) => {
                let id = MessageId(message.id.clone());
                tokio::select! {
                    done = delivery::edit_live(channel.as_ref(), &chat, &id, &text) => done,
                    () = stop.cancelled() => break,
                }
            }
        };
        let now = Instant::now();
        last = Some(now);
        if let Some(message) = &mut shown {
            message.at = now;
        }
        match done {
            Ok(()) => {
                rendered = text;
                if let Some(message) = &mut shown {
                    message.text = live.text;
                }
            }
            Err(e) => {
                tracing::warn!(chat_id = %chat_id, error = %format!("{e:#}"), "live.edit.error");
            }
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_goes_under_the_text_in_italics() {
        let live = |text: &str, status: Option<&str>| Live {
            text: text.into(),
            status: status.map(str::to_owned),
        };
        assert_eq!(render(&live("Hello", None)), "Hello");
        assert_eq!(
            render(&live("Checking.\n", Some("running `cargo test`…"))),
            "Checking.\n\n_running `cargo test`…_"
        );
        assert_eq!(render(&live("", Some("running `ls`…"))), "_running `ls`…_");
    }
}
