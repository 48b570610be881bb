//! Telegram's updates posted to Bub (`BUB_TELEGRAM_WEBHOOK_URL`) instead of polled: the other
//! way in, for a bot behind a load balancer or one that should not poll.
//!
//! At start the adapter registers the URL's path with the HTTP listener
//! ([`crate::channels::webhook`]) and calls `setWebhook` with the secret, the message updates
//! only, `drop_pending_updates` as configured and `max_connections=1`: Telegram then posts one
//! update at a time, in order, and posts it again until it gets `200`. Each post is handled
//! like a polled update — the gate, the filters, the journal — and answered `200` once the
//! journal acknowledged it. An update at or below the journal's cursor was stored before (its
//! `200` was lost, say, to a crash) and is answered `200` at once: a retry is stored once. On
//! stop the webhook stays set, so Telegram keeps the updates that arrive meanwhile and posts
//! them when Bub is back; starting without a webhook URL deletes it (polling again).

use teloxide::prelude::*;
use teloxide::types::AllowedUpdate;
use tokio_util::sync::CancellationToken;

use super::{Handler, Telegram};
use crate::channels::webhook::{self, Outcome, Posted};

/// The header Telegram sends the secret in.
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// The webhook set-up of a Telegram adapter.
pub(super) struct Webhook {
    pub url: reqwest::Url,
    pub secret: crate::config::Secret,
}

impl Telegram {
    /// Registers the route, sets the webhook, then handles posted updates until `shutdown`.
    pub(super) async fn receive(
        &self,
        webhook: &Webhook,
        handler: &Handler,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let (_route, mut posts) =
            webhook::register(webhook.url.path(), SECRET_HEADER, webhook.secret.clone());
        let set = self
            .bot
            .set_webhook(webhook.url.clone())
            .secret_token(webhook.secret.expose().to_owned())
            .max_connections(1)
            .allowed_updates(vec![AllowedUpdate::Message])
            .drop_pending_updates(self.drop_pending_updates);
        tokio::select! {
            done = set.send() => { done.map_err(|e| self.startup_error(&e))?; }
            () = shutdown.cancelled() => return Ok(()),
        }
        tracing::info!(path = webhook.url.path(), "telegram.webhook");
        crate::metrics::connected("telegram", true);
        let mut stored = handler.inbound.cursor("telegram");
        loop {
            let Posted { body, done } = tokio::select! {
                Some(posted) = posts.recv() => posted,
                () = shutdown.cancelled() => break,
            };
            let outcome = match serde_json::from_slice::<Update>(&body) {
                Err(e) => {
                    tracing::warn!(error = %e, "telegram.webhook: not an update");
                    Outcome::Malformed
                }
                Ok(update) if stored.is_some_and(|s| u64::from(update.id.0) <= s) => {
                    tracing::debug!(update_id = update.id.0, "telegram.webhook: stored before");
                    Outcome::Stored
                }
                Ok(update) => {
                    let id = u64::from(update.id.0);
                    let handled = tokio::select! {
                        handled = handler.on_update(update) => handled,
                        // Held by full queues: not stored, Telegram posts it again.
                        () = shutdown.cancelled() => break,
                    };
                    match handled {
                        Ok(()) => {
                            stored = Some(id);
                            Outcome::Stored
                        }
                        Err(e) => {
                            tracing::error!(update_id = id, error = %format!("{e:#}"),
                                "telegram.inbox.error: not stored, Telegram posts it again");
                            Outcome::NotStored
                        }
                    }
                }
            };
            let _ = done.send(outcome);
        }
        tracing::info!("telegram.stop");
        Ok(())
    }
}
