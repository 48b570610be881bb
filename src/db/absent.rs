//! `db` in a build without the `postgres` feature: there is no database. `BUB_DATABASE_URL` is
//! a configuration error there ([`crate::config`]), so [`Database`], which has no values, is
//! never made: every `Option<Arc<Database>>` is `None` and the stores keep their files.

/// No database: a type without values.
pub enum Database {}

/// No advisory lock is ever held.
pub enum SessionLock {}

pub(crate) const SCHEDULER_LOCK: i64 = 0;
#[cfg_attr(not(feature = "telegram"), allow(dead_code))]
pub(crate) const TELEGRAM_POLL_LOCK: i64 = 0;
#[cfg_attr(not(feature = "discord"), allow(dead_code))]
pub(crate) const DISCORD_GATEWAY_LOCK: i64 = 0;
pub(crate) const HEARTBEAT_LOCK: i64 = 0;

impl Database {
    pub fn label(&self) -> &str {
        match *self {}
    }

    pub async fn ping(&self) -> anyhow::Result<()> {
        match *self {}
    }

    pub async fn try_lock(&self, _: i64) -> anyhow::Result<Option<SessionLock>> {
        match *self {}
    }
}

impl SessionLock {
    pub(crate) fn is_lost(&self) -> bool {
        match *self {}
    }
}

impl Database {
    pub async fn join(self: &std::sync::Arc<Self>, _: &str) -> anyhow::Result<Replica> {
        match **self {}
    }

    pub async fn replicas(&self) -> anyhow::Result<Vec<ReplicaRow>> {
        match *self {}
    }
}

/// No replica joins.
pub enum Replica {}

impl Replica {
    pub async fn leave(self) {
        match self {}
    }
}

/// No replica is listed.
#[derive(serde::Serialize)]
pub enum ReplicaRow {}

impl ReplicaRow {
    pub fn describe(&self) -> String {
        match *self {}
    }
}
