//! A session's tape as async code uses it: every operation runs on the blocking pool (tape work
//! is file I/O — appends, index re-syncs, reads since the last anchor) under the tape's mutex,
//! which is therefore never held across an `.await` nor on an async worker thread.
//!
//! One failure policy for what a turn records along the way ([`SharedTape::record`],
//! [`SharedTape::event`]): a failed append is logged as `tape.append.error` and the turn goes
//! on. Writes whose failure must change what the user gets (the user's own prompt) use
//! [`SharedTape::run`] and handle the error.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::{Event, Kind, TapeStore};

/// A session's tape, shared by its turns, tools and status readers.
#[derive(Clone)]
pub struct SharedTape(Arc<Mutex<Box<dyn TapeStore>>>);

impl SharedTape {
    pub(crate) fn new(tape: Box<dyn TapeStore>) -> Self {
        Self(Arc::new(Mutex::new(tape)))
    }

    /// Runs `f` on the tape on the blocking pool.
    pub(crate) async fn run<R, F>(&self, f: F) -> anyhow::Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn TapeStore) -> anyhow::Result<R> + Send + 'static,
    {
        let tape = self.0.clone();
        tokio::task::spawn_blocking(move || f(lock(&tape).as_mut()))
            .await
            .map_err(|e| anyhow::anyhow!("tape task failed: {e}"))?
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
    /// status line between turns, tests).
    pub fn lock(&self) -> MutexGuard<'_, Box<dyn TapeStore>> {
        lock(&self.0)
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

/// The tape behind `mutex`; a panic in an earlier holder leaves the tape usable (every
/// operation is a whole append or read, and the index re-syncs from the file).
fn lock(mutex: &Mutex<Box<dyn TapeStore>>) -> MutexGuard<'_, Box<dyn TapeStore>> {
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
}
