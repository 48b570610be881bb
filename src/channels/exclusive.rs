//! What only one replica may do at a time — hold Telegram's long polling (a second poller gets
//! `409 Conflict`) or Discord's gateway (every session gets every event), beat the heartbeat:
//! with replicas on a database one replica holds each, by an advisory lock, and the others
//! stand by; when the holder dies its connection closes, the database frees the lock and a
//! replica standing by takes over within [`RETRY`]. Without a database nothing is held or
//! waited for. Telegram's webhooks need none of this: every replica takes posted updates.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::db::{Database, SessionLock};

/// How often a replica standing by tries to take the connection over.
pub(crate) const RETRY: Duration = Duration::from_secs(5);

/// The right to do what only one replica may do, while this process has it.
pub(crate) struct Exclusive {
    lock: Option<SessionLock>,
}

/// Waits until this process may do `what` (`telegram`, `discord`, `heartbeat`: lock `key` of
/// `db`); `None` when `shutdown` comes first.
pub(crate) async fn acquire(
    db: Option<&Arc<Database>>,
    what: &str,
    key: i64,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Exclusive>> {
    let Some(db) = db else {
        return Ok(Some(Exclusive { lock: None }));
    };
    let mut announced = false;
    loop {
        match db.try_lock(key).await {
            Ok(Some(lock)) => {
                tracing::info!(what, "exclusive.held");
                return Ok(Some(Exclusive { lock: Some(lock) }));
            }
            Ok(None) if !announced => {
                tracing::info!(
                    what,
                    "exclusive.standby: another replica holds it; this one takes over when it stops"
                );
                announced = true;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(what, error = %format!("{e:#}"), "exclusive.lock_error")
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

impl Exclusive {
    /// Resolves when the lock was lost (its connection closed: another replica may hold the
    /// connection now); never without a database.
    pub(crate) async fn lost(&self) {
        let Some(lock) = &self.lock else {
            return std::future::pending().await;
        };
        while !lock.is_lost() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
