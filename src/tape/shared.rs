//! A session's tape as async code uses it ([`SharedTape`]: the store picked at start, shared
//! by the session's turns, tools and status readers), with one failure policy for what a turn
//! records along the way ([`SharedTape::record`], [`SharedTape::event`]): a failed append is
//! logged as `tape.append.error` and the turn goes on. Writes whose failure must change what
//! the user gets (the user's own prompt) use the store's methods and handle the error.
//!
//! A hop to the blocking pool costs two thread wake-ups, more than the append itself. What a
//! turn records without waiting for it ([`SharedTape::defer_event`], [`TapeStore::defer`]: the
//! model loop's step records, the usage ledger's line) is written, in order, at the start of
//! the tape's next operation — before anything else reads or writes the tape, so order and
//! reads are as if it had been written at once. The turn's last record (`loop.result`) is
//! such an operation.

use std::sync::Arc;

use serde_json::Value;

use super::backend::{Deferred, Record};
use super::{Event, Kind, TapeStore};

/// A session's tape, shared by its turns, tools and status readers; its operations are the
/// store's ([`TapeStore`]).
#[derive(Clone)]
pub struct SharedTape(Arc<dyn TapeStore>);

impl std::ops::Deref for SharedTape {
    type Target = dyn TapeStore;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

impl SharedTape {
    pub(crate) fn new(tape: Arc<dyn TapeStore>) -> Self {
        Self(tape)
    }

    /// Queues an event for the tape's next operation; a failure is logged.
    pub(crate) fn defer_event(&self, name: Event, data: Value) {
        self.defer(Deferred::Records(vec![Record::event(name, data)]));
    }

    /// Appends an entry; a failure is logged and the turn goes on.
    pub(crate) async fn record(&self, kind: Kind, payload: Value, meta: Value) {
        let written = self.append(vec![Record::new(kind.clone(), payload, meta)]);
        logged(&kind, written.await);
    }

    /// Appends an event; a failure is logged and the turn goes on.
    pub(crate) async fn event(&self, name: Event, data: Value) {
        logged(
            &Kind::Event,
            self.append(vec![Record::event(name, data)]).await,
        );
    }
}

/// The one log line for an append that failed (`tape.append.error`), whatever wrote it.
pub(crate) fn append_failed(kind: &Kind, e: &anyhow::Error) {
    tracing::error!(error = %format!("{e:#}"), kind = kind.as_str(), "tape.append.error");
}

/// `result` of an append of `kind`, with a failure logged ([`append_failed`]): for records
/// the turn goes on without.
pub(crate) fn logged<T>(kind: &Kind, result: anyhow::Result<T>) -> Option<T> {
    result.inspect_err(|e| append_failed(kind, e)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file_tape(path: &std::path::Path) -> SharedTape {
        let tape = crate::tape::FileTape::open_path(path.to_owned(), "t".into()).unwrap();
        SharedTape::new(Arc::new(crate::tape::backend::FileStore::new(tape)))
    }

    async fn kinds(tape: &SharedTape) -> Vec<Kind> {
        let entries = tape.entries().await.unwrap();
        entries.into_iter().map(|e| e.kind).collect()
    }

    #[tokio::test]
    async fn records_land_in_order_and_a_failed_append_is_survived() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tape = file_tape(&path);
        tape.record(
            Kind::Message,
            json!({"role": "user", "content": "hi"}),
            json!({}),
        )
        .await;
        tape.event(Event::LoopStepStart, json!({"n": 1})).await;
        assert_eq!(kinds(&tape).await, [Kind::Message, Kind::Event]);

        // The tape's file replaced by a directory: appends fail, the caller goes on.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        tape.event(Event::LoopStepStart, json!({"n": 2})).await;
        let event = Record::event(Event::LoopStepStart, json!({}));
        assert!(tape.append(vec![event]).await.is_err());
    }

    #[tokio::test]
    async fn deferred_records_are_written_in_order_before_the_next_operation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tape = file_tape(&path);
        tape.defer_event(Event::LoopStepStart, json!({"n": 1}));
        let message = Record::new(Kind::Message, json!({"content": "a"}), json!({}));
        tape.defer(Deferred::Records(vec![message]));
        assert_eq!(std::fs::read_to_string(&path).unwrap_or_default(), "");
        tape.event(Event::LoopResult, json!({})).await;
        assert_eq!(
            kinds(&tape).await,
            [Kind::Event, Kind::Message, Kind::Event]
        );
        // A reader gets what was deferred too.
        tape.defer_event(Event::LoopStepFinish, json!({}));
        assert_eq!(kinds(&tape).await.len(), 4);
    }
}
