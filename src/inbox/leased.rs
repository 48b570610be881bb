//! The inbox among replicas (`BUB_DATABASE_URL`), its [`Store`]: the items live in the database
//! (`pg`), and this replica's state holds only those of the sessions whose lease it holds. The
//! manager asks for a session's work ([`Inbox::pull`]) when a message arrives here, when the
//! database notifies that one arrived elsewhere, and in a periodic [`Inbox::sweep`] (work no
//! notice announced, and the sessions of replicas that died); it gives a lease back when the
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
use super::{Admitted, Inbox, Make, Resume, State, Store};
use crate::access::Role;
use crate::chat::{Inbound, SessionId};
use crate::db::Database;

/// The inbox's database side: the rows and this replica's leases.
struct Replicated {
    ledger: Ledger,
    admitted: Admitted,
    notices: Mutex<Option<mpsc::Receiver<String>>>,
}

impl Inbox {
    /// The inbox in `db`, shared with the other replicas (the schema migrated): opens this
    /// replica's lease connection and reads the platforms' cursors. No work is taken yet: the
    /// first [`Inbox::sweep`] takes the sessions nobody holds.
    pub async fn shared(db: Arc<Database>, admitted: Admitted) -> anyhow::Result<Self> {
        let (leases, notices) = db.leases().await?;
        let ledger = Ledger { db, leases };
        let mut state = State::default();
        for record in ledger.positions().await? {
            state.apply(record);
        }
        let notices = Mutex::new(Some(notices));
        let replicated = Replicated {
            ledger,
            admitted,
            notices,
        };
        Ok(Self::new(state, replicated))
    }
}

#[async_trait::async_trait]
impl Store for Replicated {
    /// Stores a received message or a scheduled run, numbered by the database (the caller
    /// numbers it then): it is handed on by the lease.
    async fn numbered(
        &self,
        inbox: &Inbox,
        _: Option<u64>,
        make: Make<'_>,
    ) -> anyhow::Result<Option<u64>> {
        match make(0) {
            Record::Recv { cursor, msg, .. } => {
                let seq = self.ledger.receive(&msg, cursor).await?;
                if seq.is_some() {
                    inbox.lock().state.position(&msg, cursor);
                }
                Ok(seq)
            }
            Record::Job { run, .. } => Ok(Some(self.ledger.scheduled(&run).await?)),
            _ => unreachable!("only messages and runs are numbered"),
        }
    }

    /// Applied once stored, like a journal line once written.
    async fn record(&self, inbox: &Inbox, record: Record, _: bool) -> anyhow::Result<()> {
        self.ledger.record(&record).await?;
        inbox.lock().state.apply(record);
        Ok(())
    }

    async fn pull(&self, inbox: &Inbox, session: &SessionId) -> anyhow::Result<Vec<Resume>> {
        self.work_of(inbox, &[session.as_str()]).await
    }

    async fn sweep(&self, inbox: &Inbox) -> anyhow::Result<Vec<Resume>> {
        let sessions = self.ledger.pending_sessions().await?;
        let sessions: Vec<&str> = sessions.iter().map(String::as_str).collect();
        self.work_of(inbox, &sessions).await
    }

    /// Its items leave this replica's state (they stay in the database).
    async fn release(&self, inbox: &Inbox, session: &SessionId) -> anyhow::Result<bool> {
        inbox.lock().state.forget(session);
        self.ledger.leases.release(session.as_str()).await?;
        self.ledger.has_pending(session.as_str()).await
    }

    async fn refresh_positions(&self, inbox: &Inbox) -> anyhow::Result<()> {
        let records = self.ledger.positions().await?;
        let mut shared = inbox.lock();
        for record in records {
            shared.state.apply(record);
        }
        Ok(())
    }

    fn notices(&self) -> Option<mpsc::Receiver<String>> {
        self.notices.lock().ok()?.take()
    }

    fn leases(&self) -> usize {
        self.ledger.leases.count()
    }
}

impl Replicated {
    /// The work of `sessions` for this replica: of those it holds, the items nobody took yet;
    /// of those nobody held, whose lease it takes now, all their pending items. On an error
    /// taking one over its lease is given back (holding it, this replica would never claim
    /// what the other one had taken); another replica holds the rest.
    async fn work_of(&self, inbox: &Inbox, sessions: &[&str]) -> anyhow::Result<Vec<Resume>> {
        let leases = &self.ledger.leases;
        let (held, free): (Vec<&str>, Vec<&str>) = sessions.iter().partition(|s| leases.holds(s));
        let mut work = Vec::new();
        for session in held {
            let claimed = self.ledger.claim(session, false).await?;
            work.extend(hand_on(inbox, claimed).0);
        }
        for session in leases.take(&free).await? {
            tracing::info!(session, "inbox.lease.taken");
            let taken = self.take_over(inbox, &session).await;
            if taken.is_err() {
                inbox
                    .lock()
                    .state
                    .forget(&SessionId::from(session.as_str()));
                let _ = leases.release(&session).await;
            }
            work.extend(taken?);
        }
        Ok(work)
    }

    /// All of `session`'s pending items, its lease just taken: what was taken before follows
    /// the restart rule, the rest is handled as received.
    async fn take_over(&self, inbox: &Inbox, session: &str) -> anyhow::Result<Vec<Resume>> {
        let claimed = self.ledger.claim(session, true).await?;
        // The senders of the work taken before are checked again first (access may read the
        // database), not under the state's lock.
        let mut roles: std::collections::HashMap<u64, Option<Role>> = Default::default();
        for (record, taken) in &claimed.items {
            if let Record::Recv { msg, .. } = record
                && *taken
            {
                roles.insert(msg.seq, (self.admitted)(msg).await);
            }
        }
        let (fresh, taken) = hand_on(inbox, claimed);
        if taken.is_empty() {
            return Ok(fresh);
        }
        let (mut work, settled) = {
            let mut shared = inbox.lock();
            let resumed = |seq: u64| taken.contains(&seq);
            let admitted = |m: &Inbound| roles.get(&m.seq).copied().flatten();
            super::plan(&mut shared.state, &resumed, &admitted)
        };
        for record in settled {
            inbox.write_progress(record, false).await;
        }
        tracing::info!(session, resumed = work.len(), "inbox.lease.resume");
        work.extend(fresh);
        Ok(work)
    }
}

/// Applies claimed items (and progress) to the state; returns the ones nobody had taken, as
/// work, and the numbers of the others (for the restart rule).
fn hand_on(inbox: &Inbox, claimed: Claimed) -> (Vec<Resume>, Vec<u64>) {
    let mut shared = inbox.lock();
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

impl State {
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
