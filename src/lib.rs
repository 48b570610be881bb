//! Bub: a tape-first, multi-channel AI agent.
//!
//! The binary (`src/main.rs`) is a thin CLI over this library. Each module has one job:
//! `config` loads settings, `llm` talks to an OpenAI-compatible model, `tape` is the append-only
//! conversation log, `tools` holds the registry and built-in tools, `agent` runs one turn
//! (router → model loop → tape), and `cli` is the interactive terminal.

pub mod agent;
pub mod channels;
pub mod cli;
pub mod config;
pub mod llm;
pub mod logging;
pub mod tape;
pub mod tools;
