//! Chat leases: which replica runs a session's turns. A lease is a PostgreSQL advisory lock
//! keyed by the session, held by one connection per replica that nothing else uses, so one
//! replica among all holds it and it is freed the moment that replica dies (the server sees the
//! connection close) — no expiry to wait out. The same connection `LISTEN`s for the inbox's
//! notices (`bub_inbox`: a session with new work), so a replica hears about work for the
//! sessions it holds as soon as another replica stores it.
//!
//! Invariants: a session is locked at most once by this connection (the set [`Leases`] keeps),
//! so one release frees it; two sessions whose keys collide (a 32-bit hash) share one lease —
//! their turns then run on one replica, which is safe; when the connection closes, every lease
//! is gone: the notices' queue closes and the replica must stop running turns (its sessions
//! resume elsewhere).

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::Database;

/// The first key of every lease's advisory lock ("bub" in ASCII, then 3); the second is the
/// session's `hashtext`.
const NAMESPACE: i32 = 0x6275_6203;

/// The channel the inbox notifies: its payload is the notifying replica's origin
/// ([`Leases::notice`]) and a session with new work.
pub const NOTICES: &str = "bub_inbox";

/// Notices waiting for the replica; beyond that they are dropped (the periodic sweep finds the
/// work all the same).
const NOTICE_QUEUE: usize = 1024;

/// How many leases this process holds (its replica row shows it: `bub status`).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// How many chat leases this process holds.
pub(super) fn held_now() -> usize {
    HELD.load(Ordering::Relaxed)
}

/// This replica's leases and the connection that holds them.
pub struct Leases {
    /// This replica in the notices it sends: the ones it sent itself are not passed on (it
    /// took the work it stored already).
    origin: String,
    client: tokio_postgres::Client,
    held: Mutex<HashSet<String>>,
}

impl Database {
    /// Opens this replica's lease connection, listening for the inbox's notices (received
    /// on the returned queue: the sessions with new work; it closes when the connection does).
    pub async fn leases(&self) -> anyhow::Result<(Leases, mpsc::Receiver<String>)> {
        let (tx, notices) = mpsc::channel(NOTICE_QUEUE);
        let origin = format!("{:016x}", fastrand::u64(..));
        let own = format!("{origin}\u{1f}");
        let (client, mut connection) = self
            .config
            .connect(super::tls())
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach the database at {}: {e}", self.label))?;
        tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        if let Some((_, session)) = n.payload().split_once('\u{1f}')
                            && !n.payload().starts_with(&own)
                        {
                            let _ = tx.try_send(session.to_owned());
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::error!(error = %e, "db.leases.lost");
                        break;
                    }
                    None => break,
                }
            }
            // `tx` dropped: the notices' queue closes, the leases are gone.
        });
        client
            .batch_execute(&format!("LISTEN {NOTICES}"))
            .await
            .context("listening for the inbox's notices")?;
        let leases = Leases {
            origin,
            client,
            held: Mutex::default(),
        };
        Ok((leases, notices))
    }
}

impl Leases {
    /// The payload of a notice that `session` has new work, from this replica.
    pub fn notice(&self, session: &str) -> String {
        format!("{}\u{1f}{session}", self.origin)
    }

    /// Whether this replica holds `session`'s lease.
    pub fn holds(&self, session: &str) -> bool {
        self.held().contains(session)
    }

    /// How many leases this replica holds.
    pub fn count(&self) -> usize {
        self.held().len()
    }

    /// Takes the leases of `sessions` that no replica holds; returns those taken (the ones
    /// this replica held already are not among them).
    pub async fn take(&self, sessions: &[&str]) -> anyhow::Result<Vec<String>> {
        let wanted: Vec<&str> = {
            let held = self.held();
            sessions
                .iter()
                .copied()
                .filter(|s| !held.contains(*s))
                .collect()
        };
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .client
            .query(
                "SELECT s FROM unnest($1::text[]) s WHERE pg_try_advisory_lock($2, hashtext(s))",
                &[&wanted, &NAMESPACE],
            )
            .await
            .context("taking chat leases")?;
        let taken: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let mut held = self.held();
        held.extend(taken.iter().cloned());
        HELD.store(held.len(), Ordering::Relaxed);
        Ok(taken)
    }

    /// Gives `session`'s lease back (another replica may take it from now on).
    pub async fn release(&self, session: &str) -> anyhow::Result<()> {
        {
            let mut held = self.held();
            if !held.remove(session) {
                return Ok(());
            }
            HELD.store(held.len(), Ordering::Relaxed);
        }
        self.client
            .execute(
                "SELECT pg_advisory_unlock($1, hashtext($2))",
                &[&NAMESPACE, &session],
            )
            .await
            .context("releasing a chat lease")?;
        Ok(())
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}
