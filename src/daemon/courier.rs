//! The courier: how a chat's actor and its scheduled runs reach the chat — an answer sent part
//! by part through [`delivery::send_from`], each accepted part and the outcome recorded in the
//! inbox, a failure logged and shown on the board; and the typing indicator while a turn runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::AbortOnDropHandle;

use crate::channels::{Channel, ChatId, Outbound, SessionId};
use crate::delivery;
use crate::inbox::{Delivery, Inbox, Outcome};
use crate::status::Board;

/// How an actor's tasks reach its chat: the adapter (through [`delivery::send`]), the home
/// that a long answer's file is written under, and the board that shows failures.
#[derive(Clone)]
pub(super) struct Courier {
    pub(super) channel: Arc<dyn Channel>,
    pub(super) home: PathBuf,
    pub(super) session_id: SessionId,
    pub(super) board: Arc<Board>,
}

impl Courier {
    /// Sends `out` (the adapter retries on its own); the outcome for the inbox.
    pub(super) async fn deliver(&self, out: &Outbound) -> Outcome {
        match self.deliver_from(out, 0, &mut |_| Box::pin(async {})).await {
            Ok(()) => Outcome::Sent,
            Err(_) => Outcome::Failed,
        }
    }

    /// Sends a delivery recorded in the inbox from its first part not accepted yet, recording
    /// each part the platform accepts, then its outcome.
    pub(super) async fn deliver_recorded(&self, inbox: &Inbox, delivery: &Delivery) {
        let _ = self.send_recorded(inbox, delivery).await;
    }

    /// [`Courier::deliver_recorded`], returning why the delivery failed (for a scheduled
    /// run's record).
    pub(super) async fn send_recorded(
        &self,
        inbox: &Inbox,
        delivery: &Delivery,
    ) -> Result<(), String> {
        let seqs = &delivery.seqs;
        let from = delivery.parts_sent;
        let sent = self
            .deliver_from(&delivery.out, from, &mut |n| Box::pin(inbox.sent(seqs, n)))
            .await;
        let outcome = match sent {
            Ok(()) => Outcome::Sent,
            Err(_) => Outcome::Failed,
        };
        inbox.done(seqs, outcome).await;
        sent
    }

    /// Sends `out` from part `from` on, `accepted` told of each part accepted; a failure is
    /// logged and shown on the board.
    async fn deliver_from(
        &self,
        out: &Outbound,
        from: usize,
        accepted: &mut delivery::Accepted<'_>,
    ) -> Result<(), String> {
        let (channel, home) = (self.channel.as_ref(), &self.home);
        let sent = delivery::send_from(channel, home, out, from, accepted).await;
        crate::metrics::delivery(channel.name(), sent.is_ok());
        match sent {
            Ok(()) => Ok(()),
            Err(e) => {
                let error = format!("{e:#}");
                tracing::error!(session = %self.session_id, chat_id = %out.chat_id, error = %error,
                    "session.deliver.error");
                self.board
                    .error(&self.session_id, &format!("delivery failed: {error}"));
                Err(error)
            }
        }
    }
}

/// How long a turn runs before the typing indicator shows: an answer that comes sooner (a
/// command, a cached or fast model) costs the chat no extra request, and a person does not
/// notice the wait.
const TYPING_DELAY: Duration = Duration::from_millis(200);

/// Shows the typing indicator after [`TYPING_DELAY`], then every `interval`, until the
/// returned guard is dropped.
pub(super) fn typing(
    channel: Arc<dyn Channel>,
    chat_id: String,
    interval: Duration,
) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(tokio::spawn(async move {
        let first = tokio::time::Instant::now() + TYPING_DELAY;
        let mut tick = tokio::time::interval_at(first, interval);
        let chat_id = ChatId(chat_id);
        loop {
            tick.tick().await;
            if let Err(e) = channel.typing(&chat_id).await {
                tracing::debug!(chat_id = %chat_id.0, error = %e, "typing.error");
            }
        }
    }))
}
