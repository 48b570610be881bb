//! The tape: one append-only JSONL file per (workspace, session) holding everything a session
//! did — messages, tool calls and results, events, anchors.
//!
//! * [`backend`] — the async [`TapeStore`] trait (what the agent needs of a tape) and `open`,
//!   the one place a session's tape is opened (`open_name`: by its name); [`FileTape`] is the
//!   file (blocking, reached through `FileStore` on the blocking pool), `pg` the PostgreSQL one.
//! * [`listing`] — the tapes of a workspace for the console ([`list`]): name, the session its
//!   `session/start` anchor records, entry count, newest date.
//! * [`entry`] — the entry type and its one-line JSON format (`{"id","kind","payload","meta","date"}`),
//!   its [`Kind`]; `event` — the names of the events Bub records ([`Event`]).
//! * `index` — the in-memory index: counters (entries, anchors, largest id, bytes read) and the
//!   newest anchors' byte ranges — bounded, never a record per entry — re-synced incrementally.
//! * [`store`] — file naming, advisory locking, O(1) appends, bootstrap/handoff anchors, reset.
//! * [`context`] — the model's context (entries after the last anchor, with its handoff note)
//!   and the tape summary.
//! * [`search`] — substring/fuzzy search, newest first.
//! * [`shared`] — a session's tape as the agent shares it: one policy for failed appends.
//!
//! Invariants: the file is only ever appended to (reset replaces it atomically); ids are unique
//! and increasing, even with several processes appending (each append holds an exclusive
//! `File::lock` while it re-syncs and writes); a torn last line from a crash is skipped and the
//! tape stays appendable.

pub(crate) mod backend;
pub(crate) mod context;
pub(crate) mod entry;
mod event;
#[cfg(feature = "postgres")]
pub mod import;
mod index;
#[cfg_attr(not(feature = "console"), allow(dead_code))]
pub(crate) mod listing;
mod messages;
pub(crate) mod output;
#[cfg(feature = "postgres")]
mod pg;
pub(crate) mod search;
pub(crate) mod shared;
pub(crate) mod store;
#[cfg(test)]
mod suite_tests;

pub(crate) use backend::{Deferred, Record, TapeStore, Window};
pub(crate) use context::{ContextCursor, TapeInfo};
pub use entry::{Kind, TapeEntry};
pub use event::Event;
#[cfg_attr(not(feature = "console"), allow(unused_imports))]
pub(crate) use listing::list;
pub use search::Searched;
pub(crate) use shared::SharedTape;
pub(crate) use store::workspace_key_known;
pub use store::{FileTape, MAX_ID, SESSION_START, md5_hex, tape_name_for, tape_path};
