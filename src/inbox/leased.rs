//! The inbox among replicas (`BUB_DATABASE_URL`): the items live in the database (`pg`), and
//! this replica's state holds only those of the sessions whose lease it holds. The manager
//! asks for a session's work ([`Inbox::pull`]) when a message arrives here, when the database
//! notifies that one arrived elsewhere, and in a periodic [`Inbox::sweep`] (work no notice
//! announced, and the sessions of replicas that died); it gives a lease back when the
//! session's actor ended ([`Inbox::release`]).
//!
//! Taking a lease claims all the session's pending items: what another replica had taken
//! follows the restart rule (`super::plan`: a recorded answer is delivered, an interrupted turn
//! runs once more, the rest as usual), what nobody had taken is handled as just received.
//! Holding it, a pull claims only what nobody took yet.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::journal::Record;
use super::pg::{Claimed, Ledger};
use super::{Inbox, Received, Resume, State};
use crate::access::Role;
use crate::chat::{Inbound, SessionId};
use crate::db::Database;

/// Re-checks a resumed message's sender (`None`: no longer admitted). It may read files or the
/// database.
pub type Admitted =
    Arc<dyn Fn(&Inbound) -> futures_util::future::BoxFuture<'static, Option<Role>> + Send + Sync>;

/// The inbox's database side.
pub(super) struct Replicated {
    pub(super) ledger: Ledger,
    admitted: Admitted,
    notices: Mutex<Option<mpsc::Receiver<String>>>,
}

impl Replicated {
    /// Stores a received message ([`Inbox::receive`]): it is handed on by the lease.
    pub(super) async fn receive(
        &self,
        inbox: &Inbox,
        msg: &mut Inbound,
        cursor: Option<u64>,
    ) -> anyhow::Result<Received> {
        let Some(seq) = self.ledger.receive(msg, cursor).await? else {
            return Ok(Received::Duplicate);
        };
        msg.seq = seq;
        inbox.lock().state.position(msg, cursor);
        Ok(Received::New(seq))
    }
}

impl Inbox {
    /// The inbox in `db`, shared with the other replicas (the schema migrated): opens this
    /// replica's lease connection and reads the platforms' cursors. No work is taken yet: the
    /// first [`Inbox::sweep`] takes the sessions nobody holds.
    pub async fn shared(db: Arc<Database>, admitted: Admitted) -> anyhow::Result<Self> {
        let (leases, notices) = db.leases().await?;
        let ledger = Ledger::new(db, leases);
        let mut state = State::default();
        for record in ledger.positions().await? {
            state.apply(record);
        }
        Ok(Self {
            shared: Arc::new(Mutex::new(super::Shared::new(state))),
            writer: None,
            ledger: Some(Replicated {
                ledger,
                admitted,
                notices: Mutex::new(Some(notices)),
            }),
        })
    }

    /// Reads the platforms' positions again from the database (what other replicas received
    /// meanwhile): for an adapter about to poll or catch up after standing by. Nothing to do
    /// for an inbox that is not shared.
    pub async fn refresh_positions(&self) -> anyhow::Result<()> {
        let Some(ledger) = &self.ledger else {
            return Ok(());
        };
        let records = ledger.ledger.positions().await?;
        let mut shared = self.lock();
        for record in records {
            shared.state.apply(record);
        }
        Ok(())
    }

    /// Whether this inbox is shared by replicas (its work comes by [`Inbox::pull`]).
    pub fn is_shared(&self) -> bool {
        self.ledger.is_some()
    }

    /// The sessions the database announces new work for (once; `None` when not shared).
    pub fn notices(&self) -> Option<mpsc::Receiver<String>> {
        let ledger = self.ledger.as_ref()?;
        ledger.notices.lock().ok()?.take()
    }

    /// Fires when this replica lost its leases (the connection holding them closed); never
    /// for an inbox that is not shared.
    pub async fn lost(&self) {
        match &self.ledger {
            Some(ledger) => ledger.ledger.leases.lost().await,
            None => std::future::pending().await,
        }
    }

    /// How many chat leases this replica holds.
    pub fn leases(&self) -> usize {
        self.ledger.as_ref().map_or(0, |l| l.ledger.leases.count())
    }

    /// The work of `session` for this replica: taking its lease if nobody holds it (all its
    /// pending items), or holding it (the items nobody took yet). Empty when another replica
    /// holds it, or for an inbox that is not shared.
    pub async fn pull(&self, session: &SessionId) -> anyhow::Result<Vec<Resume>> {
        let Some(ledger) = &self.ledger else {
            return Ok(Vec::new());
        };
        let key = session.as_str();
        let leases = &ledger.ledger.leases;
        if leases.holds(key) {
            let claimed = ledger.ledger.claim(key, false).await?;
            return Ok(self.hand_on(claimed).0);
        }
        if leases.take(&[key]).await?.is_empty() {
            return Ok(Vec::new());
        }
        self.take_over(ledger, key).await
    }

    /// The work no notice announced: the items of the sessions this replica holds that nobody
    /// took, and the sessions with pending items that no replica holds (their replica died).
    pub async fn sweep(&self) -> anyhow::Result<Vec<Resume>> {
        let Some(ledger) = &self.ledger else {
            return Ok(Vec::new());
        };
        let sessions = ledger.ledger.pending_sessions().await?;
        let leases = &ledger.ledger.leases;
        let (held, free): (Vec<&str>, Vec<&str>) = sessions
            .iter()
            .map(String::as_str)
            .partition(|s| leases.holds(s));
        let mut work = Vec::new();
        for session in held {
            let claimed = ledger.ledger.claim(session, false).await?;
            work.extend(self.hand_on(claimed).0);
        }
        for session in leases.take(&free).await? {
            tracing::info!(session, "inbox.lease.taken");
            work.extend(self.take_over(ledger, &session).await?);
        }
        Ok(work)
    }

    /// Gives `session`'s lease back (its actor ended); its items leave this replica's state.
    /// Returns whether it still has pending items — stored meanwhile by a replica that could
    /// not take the lease: pull it again.
    pub async fn release(&self, session: &SessionId) -> anyhow::Result<bool> {
        let Some(ledger) = &self.ledger else {
            return Ok(false);
        };
        self.lock().state.forget(session);
        ledger.ledger.leases.release(session.as_str()).await?;
        ledger.ledger.has_pending(session.as_str()).await
    }

    /// All of `session`'s pending items, its lease just taken: what was taken before follows
    /// the restart rule, the rest is handled as received. On an error the lease is given back
    /// (holding it, this replica would never claim what the other one had taken).
    async fn take_over(&self, ledger: &Replicated, session: &str) -> anyhow::Result<Vec<Resume>> {
        let taken = self.take_over_held(ledger, session).await;
        if taken.is_err() {
            self.lock().state.forget(&SessionId::from(session));
            let _ = ledger.ledger.leases.release(session).await;
        }
        taken
    }

    async fn take_over_held(
        &self,
        ledger: &Replicated,
        session: &str,
    ) -> anyhow::Result<Vec<Resume>> {
        let claimed = ledger.ledger.claim(session, true).await?;
        // The senders of the work taken before are checked again first (access may read the
        // database), not under the state's lock.
        let mut roles: std::collections::HashMap<u64, Option<Role>> = Default::default();
        for (record, taken) in &claimed.items {
            if let Record::Recv { msg, .. } = record
                && *taken
            {
                roles.insert(msg.seq, (ledger.admitted)(msg).await);
            }
        }
        let (fresh, taken) = self.hand_on(claimed);
        if taken.is_empty() {
            return Ok(fresh);
        }
        let (mut work, settled) = {
            let mut shared = self.lock();
            let resumed = |seq: u64| taken.contains(&seq);
            let admitted = |m: &Inbound| roles.get(&m.seq).copied().flatten();
            super::plan(&mut shared.state, &resumed, &admitted)
        };
        for record in settled {
            self.write_progress(record, true).await;
        }
        tracing::info!(session, resumed = work.len(), "inbox.lease.resume");
        work.extend(fresh);
        Ok(work)
    }

    /// Applies claimed items (and progress) to the state; returns the ones nobody had taken,
    /// as work, and the numbers of the others (for the restart rule).
    fn hand_on(&self, claimed: Claimed) -> (Vec<Resume>, Vec<u64>) {
        let mut shared = self.lock();
        let (mut fresh, mut taken) = (Vec::new(), Vec::new());
        for (record, was_taken) in claimed.items {
            match (&record, was_taken) {
                (Record::Recv { seq, .. } | Record::Job { seq, .. }, true) => taken.push(*seq),
                (Record::Recv { msg, .. }, false) => {
                    fresh.push(Resume::Received(Box::new(msg.clone())))
                }
                (Record::Job { run, .. }, false) => fresh.push(Resume::Job(run.clone())),
                _ => {}
            }
            shared.state.apply(record);
        }
        for record in claimed.progress {
            shared.state.apply(record);
        }
        (fresh, taken)
    }
}

impl State {
    /// Notes a message's platform position — the cursor, or (a platform without a replay
    /// cursor: Discord's catch-up) the chat's newest id — without taking it as pending work.
    pub(super) fn position(&mut self, msg: &Inbound, cursor: Option<u64>) {
        match cursor {
            Some(at) => {
                let cursor = self.cursors.entry(msg.channel.clone()).or_default();
                *cursor = (*cursor).max(at);
            }
            None => {
                if let Ok(id) = msg.message_id.parse::<u64>() {
                    self.saw(&msg.channel, &msg.chat_id, id);
                }
            }
        }
    }

    /// Drops `session`'s items (its lease is given back; they stay in the database).
    fn forget(&mut self, session: &SessionId) {
        let mut gone = Vec::new();
        self.pending.retain(|seq, p| {
            let keep = p.msg.session_id() != *session;
            if !keep {
                gone.push(*seq);
            }
            keep
        });
        self.jobs.retain(|seq, p| {
            let keep = p.run.session != *session;
            if !keep {
                gone.push(*seq);
            }
            keep
        });
        for seq in gone {
            self.outgoing.remove(&seq);
        }
    }
}

#[cfg(test)]
#[path = "leased_tests.rs"]
mod tests;
