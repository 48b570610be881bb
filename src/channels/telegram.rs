//! Telegram adapter (teloxide, long polling). Being written.
