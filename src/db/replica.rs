//! The replicas on one database: each `bub message` and `bub idle` with `BUB_DATABASE_URL`
//! keeps a row of `bub_replicas` fresh while it runs (every [`HEARTBEAT`], with the number of
//! chat leases it holds) and removes it when it stops; `bub status` lists them. One that died leaves its row, whose heartbeat gets old
//! (shown as stale after [`STALE`]); rows silent for a day are removed by the next replica
//! that starts.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::Database;

/// How often a replica says it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// A heartbeat older than this: the replica is probably gone.
pub(crate) const STALE: Duration = Duration::from_secs(30);

/// This process as a replica, while it serves.
pub struct Replica {
    id: String,
    db: Arc<Database>,
    beating: CancellationToken,
}

/// A replica as `bub status` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplicaRow {
    pub id: String,
    pub host: String,
    pub pid: i32,
    pub role: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    /// Seconds since its last heartbeat (by the database's clock).
    pub silent_seconds: f64,
    /// The chats whose turns it runs (at its last heartbeat).
    pub leases: i32,
}

impl ReplicaRow {
    /// One line: `host-123-ab12  message  host box-1, pid 123, up since …, heartbeat 3 s ago`.
    pub fn describe(&self) -> String {
        let stale = match self.silent_seconds > STALE.as_secs_f64() {
            true => " (stale: stopped or unreachable?)",
            false => "",
        };
        format!(
            "{}  {}  host {}, pid {}, up since {}, {} chat lease(s), heartbeat {:.0} s ago{stale}",
            self.id,
            self.role,
            self.host,
            self.pid,
            self.started_at.format("%Y-%m-%d %H:%M:%S UTC"),
            self.leases,
            self.silent_seconds,
        )
    }
}

impl Database {
    /// Registers this process as a replica of `role` and keeps it fresh until
    /// [`Replica::leave`].
    pub async fn join(self: &Arc<Self>, role: &str) -> anyhow::Result<Replica> {
        let host = host_name();
        let pid = std::process::id() as i32;
        let id = format!("{host}-{pid}-{:04x}", fastrand::u16(..));
        let client = super::client(&self.pool).await?;
        client
            .execute(
                "DELETE FROM bub_replicas WHERE heartbeat_at < now() - interval '1 day'",
                &[],
            )
            .await?;
        client
            .execute(
                "INSERT INTO bub_replicas (id, host, pid, role) VALUES ($1, $2, $3, $4)",
                &[&id, &host, &pid, &role],
            )
            .await?;
        let beating = CancellationToken::new();
        tokio::spawn(beat(self.clone(), id.clone(), beating.clone()));
        Ok(Replica {
            id,
            db: self.clone(),
            beating,
        })
    }

    /// Every replica that has a row, newest first.
    pub async fn replicas(&self) -> anyhow::Result<Vec<ReplicaRow>> {
        let client = super::client(&self.pool).await?;
        let rows = client
            .query(
                "SELECT id, host, pid, role, started_at, heartbeat_at, \
                     extract(epoch FROM now() - heartbeat_at)::float8, leases \
                     FROM bub_replicas ORDER BY started_at DESC",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| ReplicaRow {
                id: r.get(0),
                host: r.get(1),
                pid: r.get(2),
                role: r.get(3),
                started_at: r.get(4),
                heartbeat_at: r.get(5),
                silent_seconds: r.get(6),
                leases: r.get(7),
            })
            .collect())
    }
}

impl Replica {
    /// This replica's id (`host-pid-xxxx`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Stops the heartbeat and removes the row (a failure is only logged: the row goes stale).
    pub async fn leave(self) {
        self.beating.cancel();
        let (pool, id) = (self.db.pool(), self.id.clone());
        let removed = async move {
            let client = super::client(&pool).await?;
            client
                .execute("DELETE FROM bub_replicas WHERE id = $1", &[&id])
                .await?;
            anyhow::Ok(())
        }
        .await;
        if let Err(e) = removed {
            tracing::warn!(replica = %self.id, error = %format!("{e:#}"), "replica.leave.error");
        }
    }
}

/// Refreshes the row every [`HEARTBEAT`] until `stop` (a failed one is logged and retried).
async fn beat(db: Arc<Database>, id: String, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(HEARTBEAT) => {}
        }
        let (pool, row) = (db.pool(), id.clone());
        let leases = i32::try_from(super::lease::held_now()).unwrap_or(i32::MAX);
        let beat = async move {
            let client = super::client(&pool).await?;
            client
                .execute(
                    "UPDATE bub_replicas SET heartbeat_at = now(), leases = $2 WHERE id = $1",
                    &[&row, &leases],
                )
                .await?;
            anyhow::Ok(())
        }
        .await;
        if let Err(e) = beat {
            tracing::warn!(replica = %id, error = %format!("{e:#}"), "replica.heartbeat.error");
        }
    }
}

/// This machine's name (the container's, in a container).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    match ok && end > 0 {
        true => String::from_utf8_lossy(&buf[..end]).into_owned(),
        false => "unknown".to_owned(),
    }
}
