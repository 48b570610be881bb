//! Session locks: a PostgreSQL advisory lock held by a connection of its own, so one process
//! among all the replicas holds it, and it is freed as soon as that process dies (the server
//! sees its connection close) — no lease to wait out after a crash.

use deadpool_postgres::Object;

use super::Database;

/// An advisory lock this process holds; dropped, it is released (its connection closes).
pub struct SessionLock {
    client: deadpool_postgres::ClientWrapper,
}

impl SessionLock {
    /// Whether the connection holding the lock has closed: the lock is gone (the server freed
    /// it, another process may hold it now).
    pub(crate) fn is_lost(&self) -> bool {
        self.client.is_closed()
    }
}

impl Database {
    /// Takes advisory lock `key` if no process holds it; `None` when one does.
    pub async fn try_lock(&self, key: i64) -> anyhow::Result<Option<SessionLock>> {
        let client = super::client(&self.pool).await?;
        let row = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await?;
        // Taken out of the pool: the connection lives exactly as long as the lock.
        Ok(row.get::<_, bool>(0).then(|| SessionLock {
            client: Object::take(client),
        }))
    }
}
