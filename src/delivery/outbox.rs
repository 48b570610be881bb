//! The outbox: sending a text to any chat of any channel from outside a session's own turn
//! delivery — the `message.send` tool, `bub send`, scheduled runs.
//!
//! Every message goes through [`super::send()`] and the channel adapter's `send`, the same code
//! the daemon uses for answers (rendering, splitting, a long text as a file, retries). In
//! `bub message` and `bub idle` the outbox uses the process's adapters; elsewhere (`bub run`,
//! `bub chat`, `bub send`) it builds a send-only adapter on first use from the settings (a token
//! is enough; the channel need not be enabled).
//!
//! Invariant: a message reaches only a chat the channel's allow-list admits
//! ([`Channel::check_recipient`]); a refused send is an error to the caller and a log line.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::{Outbound, platform};
use crate::access::Access;
use crate::channels::Channel;
use crate::config::Settings;

/// Channel adapters by name, shared by the sessions of a process.
pub struct Outbox {
    access: Arc<Access>,
    /// What send-only adapters are built from (each platform's settings), and `BUB_HOME`,
    /// where a long answer's file is written.
    settings: Arc<Settings>,
    adapters: Mutex<HashMap<&'static str, Arc<dyn Channel>>>,
}

impl Outbox {
    pub fn new(access: Arc<Access>, settings: Arc<Settings>) -> Self {
        Self {
            access,
            settings,
            adapters: Mutex::default(),
        }
    }

    /// Uses these (running) adapters instead of building send-only ones.
    pub fn install(&self, channels: &[Arc<dyn Channel>]) {
        let mut adapters = self.adapters.lock().expect("outbox lock");
        for channel in channels {
            adapters.insert(channel.name(), channel.clone());
        }
    }

    /// `BUB_HOME`: long answers are written under it as files to send.
    pub(crate) fn home(&self) -> &Path {
        &self.settings.home
    }

    /// The adapter for `name`, built from the settings on first use.
    pub fn adapter(&self, name: &str) -> anyhow::Result<Arc<dyn Channel>> {
        let mut adapters = self.adapters.lock().expect("outbox lock");
        if let Some(adapter) = adapters.get(name) {
            return Ok(adapter.clone());
        }
        let adapter = (platform(name)?.build)(&self.settings, self.access.clone())?;
        adapters.insert(adapter.name(), adapter.clone());
        Ok(adapter)
    }

    /// Sends `out` through channel `name`, if its allow-list admits the chat.
    pub async fn send(&self, name: &str, out: &Outbound) -> anyhow::Result<()> {
        let adapter = self.checked(name, &out.chat_id).await?;
        super::send(adapter.as_ref(), self.home(), out).await
    }

    /// The adapter for `name`, once its allow-list admitted `chat_id` (a refusal is the error).
    pub(crate) async fn checked(
        &self,
        name: &str,
        chat_id: &str,
    ) -> anyhow::Result<Arc<dyn Channel>> {
        let adapter = self.adapter(name)?;
        if let Err(e) = adapter.check_recipient(chat_id).await {
            tracing::warn!(channel = name, chat_id = %chat_id, error = %format!("{e:#}"), "outbox.refused");
            return Err(e);
        }
        Ok(adapter)
    }
}
