//! The tape: one append-only JSONL file per (workspace, session). (stub — being written)

/// Placeholder until the tape module lands.
pub struct Tape;
