//! Fake Telegram Bot API. Being written.
