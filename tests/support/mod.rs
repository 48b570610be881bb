//! Fake servers shared by the integration tests. Each test binary declares `mod support;` and
//! uses the fakes it needs; every fake binds 127.0.0.1:0, records requests and never reaches the
//! internet.
#![allow(dead_code)]

pub mod bench;
pub mod bub_env;
pub mod fake_discord;
pub mod fake_openai;
pub mod fake_telegram;
