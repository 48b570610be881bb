//! Per-chat session actor. Being written.
