//! A session's tape as async code uses it: every operation runs on the blocking pool (tape work
//! is file I/O — appends, index re-syncs, reads since the last anchor) under the tape's mutex,
//! which is therefore never held across an `.await` nor on an async worker thread.
//!
//! One failure policy for what a turn records along the way ([`SharedTape::record`],
//! [`SharedTape::event`]): a failed append is logged as `tape.append.error` and the turn goes
//! on. Writes whose failure must change what the user gets (the user's own prompt) use
//! [`SharedTape::run`] and handle the error.
//!
//! A hop to the blocking pool costs two thread wake-ups, more than the append itself. What a
//! turn records without waiting for it ([`SharedTape::defer`]: the model loop's step records,
//! the usage ledger's line) is queued and written, in order, at the start of the tape's next
//! operation — before anything else reads or writes the tape, so order and reads are as if it
//! had been written at once. The turn's last record (`loop.result`) is such an operation.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::{Event, Kind, TapeStore};

/// Work queued for the tape's next operation.
type Deferred = Box<dyn FnOnce(&mut dyn TapeStore) + Send>;

/// A session's tape, shared by its turns, tools and status readers.
#[derive(Clone)]
pub struct SharedTape(Arc<Shared>);

struct Shared {
    tape: Mutex<Box<dyn TapeStore>>,
    /// Written before the next operation, in order (see the module docs).
    deferred: Mutex<Vec<Deferred>>,
}

impl SharedTape {
    pub(crate) fn new(tape: Box<dyn TapeStore>) -> Self {
        Self(Arc::new(Shared {
            tape: Mutex::new(tape),
            deferred: Mutex::default(),
        }))
    }

    /// Runs `f` on the tape on the blocking pool (after what was deferred).
    pub(crate) async fn run<R, F>(&self, f: F) -> anyhow::Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn TapeStore) -> anyhow::Result<R> + Send + 'static,
    {
        let shared = self.0.clone();
        tokio::task::spawn_blocking(move || shared.with(f))
            .await
            .map_err(|e| anyhow::anyhow!("tape task failed: {e}"))?
    }

    /// Queues `f` for the start of the tape's next operation (see the module docs); a
    /// failure is `f`'s to log.
    pub(crate) fn defer(&self, f: impl FnOnce(&mut dyn TapeStore) + Send + 'static) {
        lock(&self.0.deferred).push(Box::new(f));
    }

    /// Queues an event for the tape's next operation; a failure is logged.
    pub(crate) fn defer_event(&self, name: Event, data: Value) {
        self.defer(move |t| drop(logged(&Kind::Event, t.event(name, data))));
    }

    /// Appends an entry; a failure is logged ([`append_failed`]) and returned.
    pub(crate) async fn append(
        &self,
        kind: Kind,
        payload: Value,
        meta: Value,
    ) -> anyhow::Result<()> {
        let written = kind.clone();
        let result = self.run(move |t| t.append(written, payload, meta)).await;
        if let Err(e) = &result {
            append_failed(&kind, e);
        }
        result.map(drop)
    }

    /// Appends an entry; a failure is logged and the turn goes on.
    pub(crate) async fn record(&self, kind: Kind, payload: Value, meta: Value) {
        let _ = self.append(kind, payload, meta).await;
    }

    /// Appends an event; a failure is logged and the turn goes on.
    pub(crate) async fn event(&self, name: Event, data: Value) {
        logged(&Kind::Event, self.run(move |t| t.event(name, data)).await);
    }

    /// The tape for code that is already off the async threads (a blocking task, a terminal
    /// status line between turns, tests), with what was deferred written.
    pub fn lock(&self) -> MutexGuard<'_, Box<dyn TapeStore>> {
        self.0.lock()
    }
}

impl Shared {
    /// The tape, after the deferred work.
    fn lock(&self) -> MutexGuard<'_, Box<dyn TapeStore>> {
        let mut tape = lock(&self.tape);
        self.run_deferred(tape.as_mut(), None::<fn(&mut dyn TapeStore)>);
        tape
    }

    /// Runs `f` on the tape after the deferred work.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut dyn TapeStore) -> anyhow::Result<R>,
    ) -> anyhow::Result<R> {
        let mut tape = lock(&self.tape);
        let mut out = None;
        self.run_deferred(
            tape.as_mut(),
            Some(|t: &mut dyn TapeStore| out = Some(f(t))),
        );
        out.expect("the tape operation ran")
    }

    /// The deferred work, then `then`, in one batch of the tape when it can be held (else each
    /// operation on its own). The work is taken under the tape's lock, so whichever operation
    /// comes first writes it, in order.
    fn run_deferred(
        &self,
        tape: &mut dyn TapeStore,
        then: Option<impl FnOnce(&mut dyn TapeStore)>,
    ) {
        let deferred = std::mem::take(&mut *lock(&self.deferred));
        if deferred.is_empty() && then.is_none() {
            return;
        }
        // Deferred work writes: the tape's file may be created for it.
        let writes = !deferred.is_empty();
        let (mut deferred, mut then) = (Some(deferred), then);
        let mut work = |t: &mut dyn TapeStore| {
            for f in deferred.take().into_iter().flatten() {
                f(t);
            }
            if let Some(then) = then.take() {
                then(t);
            }
        };
        if tape.batch(writes, &mut work).is_err() {
            work(tape);
        }
    }
}

/// The one log line for an append that failed (`tape.append.error`), whatever wrote it.
pub(crate) fn append_failed(kind: &Kind, e: &anyhow::Error) {
    tracing::error!(error = %format!("{e:#}"), kind = kind.as_str(), "tape.append.error");
}

/// `result` of an append of `kind`, with a failure logged ([`append_failed`]): for records
/// the turn goes on without, written inside [`SharedTape::run`].
pub(crate) fn logged<T>(kind: &Kind, result: anyhow::Result<T>) -> Option<T> {
    result.inspect_err(|e| append_failed(kind, e)).ok()
}

/// What `mutex` guards; a panic in an earlier holder leaves the tape usable (every operation
/// is a whole append or read, and the index re-syncs from the file).
fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn records_land_in_order_and_a_failed_append_is_survived() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tape = SharedTape::new(Box::new(
            crate::tape::FileTape::open_path(path.clone(), "t".into()).unwrap(),
        ));
        tape.record(
            Kind::Message,
            json!({"role": "user", "content": "hi"}),
            json!({}),
        )
        .await;
        tape.event(Event::LoopStepStart, json!({"n": 1})).await;
        let kinds: Vec<Kind> = tape
            .run(|t| Ok(t.entries()?.into_iter().map(|e| e.kind).collect()))
            .await
            .unwrap();
        assert_eq!(kinds, [Kind::Message, Kind::Event]);

        // The tape's file replaced by a directory: appends fail, the caller goes on.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        tape.event(Event::LoopStepStart, json!({"n": 2})).await;
        assert!(
            tape.run(|t| t.event(Event::LoopStepStart, json!({})))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn deferred_records_are_written_in_order_before_the_next_operation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tape = SharedTape::new(Box::new(
            crate::tape::FileTape::open_path(path.clone(), "t".into()).unwrap(),
        ));
        tape.defer_event(Event::LoopStepStart, json!({"n": 1}));
        tape.defer(|t| drop(t.append(Kind::Message, json!({"content": "a"}), json!({}))));
        assert_eq!(std::fs::read_to_string(&path).unwrap_or_default(), "");
        tape.event(Event::LoopResult, json!({})).await;
        let kinds = |tape: &SharedTape| -> Vec<Kind> {
            let entries = tape.lock().entries().unwrap();
            entries.into_iter().map(|e| e.kind).collect()
        };
        assert_eq!(kinds(&tape), [Kind::Event, Kind::Message, Kind::Event]);
        // A reader off the async threads gets what was deferred too.
        tape.defer_event(Event::LoopStepFinish, json!({}));
        assert_eq!(kinds(&tape).len(), 4);
    }
}
