//! The integration tests, as one test binary (one link instead of one per file): each module
//! is a feature area; `support` holds the fake servers and the `bub` process helpers they share.
//! Run one area with `cargo test --test tests telegram::`.

mod support;

mod access;
mod anthropic;
mod architecture;
mod background;
mod backpressure;
mod browser;
mod chaos;
mod chat;
mod compaction;
#[cfg(feature = "console")]
mod console;
mod container;
mod daemon;
#[cfg(feature = "discord")]
mod discord;
mod docs;
mod durability;
mod fakes;
mod fallback;
mod file_modes;
mod gemini;
mod guests;
mod heartbeat;
mod init;
mod jobs;
mod learning;
mod ledger;
mod limits;
mod listener;
mod live;
mod llm;
mod long_answers;
mod manager;
#[cfg(feature = "mcp")]
mod mcp;
mod media;
mod memory;
mod message;
mod monitoring;
mod owner;
mod platform;
mod prompt_cache;
#[cfg(feature = "postgres")]
mod replicas;
mod router;
mod run_cli;
#[cfg(feature = "postgres")]
mod scale;
mod scheduler;
mod security;
mod skills;
mod stagnation;
mod startup;
mod subagent;
mod tape;
#[cfg(feature = "telegram")]
mod telegram;
mod terminal;
mod tools;
mod trace;
mod usage;
mod web;
#[cfg(feature = "telegram")]
mod webhook;
