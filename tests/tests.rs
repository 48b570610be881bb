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
mod compaction;
mod console;
mod container;
mod daemon;
mod discord;
mod durability;
mod fakes;
mod fallback;
mod file_modes;
mod gemini;
mod guests;
mod heartbeat;
mod jobs;
mod learning;
mod ledger;
mod limits;
mod live;
mod llm;
mod long_answers;
mod manager;
mod mcp;
mod media;
mod memory;
mod message;
mod monitoring;
mod platform;
mod prompt_cache;
mod replicas;
mod router;
mod run_cli;
mod scale;
mod scheduler;
mod security;
mod skills;
mod stagnation;
mod startup;
mod subagent;
mod tape;
mod telegram;
mod terminal;
mod tools;
mod trace;
mod usage;
mod web;
mod webhook;
